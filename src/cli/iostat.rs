//! `mirrorfs iostat [MOUNT] [INTERVAL [COUNT]]`: per-leg operations and bandwidth per interval,
//! like `zpool iostat -v`. The first report covers the time since the mount (or the last
//! `stats_reset`); each later one the interval before it.

use super::control::{self, EXIT_USAGE};
use crate::stats::{LegStats, Stats};
use std::path::PathBuf;

fn usage() -> i32 {
    eprintln!("mirrorfs: usage: mirrorfs iostat [MOUNT] [INTERVAL [COUNT]]");
    EXIT_USAGE
}

fn per_s(now: u64, then: u64, secs: f64) -> f64 {
    now.saturating_sub(then) as f64 / secs
}

/// Bytes per second as sizes are written (`18.3M`).
fn rate(now: u64, then: u64, secs: f64) -> String {
    crate::value::show_size(per_s(now, then, secs).round() as u64)
}

fn ms(us: Option<u64>) -> String {
    us.map(|u| format!("{:.2}", u as f64 / 1000.0))
        .unwrap_or_else(|| "-".into())
}

/// One report: `prev` is the previous sample (None: since the mount).
pub fn render(now: &Stats, prev: Option<&Stats>) -> String {
    let secs = match prev {
        Some(p) => now.uptime_us.saturating_sub(p.uptime_us) as f64 / 1e6,
        None => now.uptime_us as f64 / 1e6,
    }
    .max(1e-3);
    let zero = |l: &LegStats| LegStats {
        read_ops: 0,
        read_bytes: 0,
        write_ops: 0,
        write_bytes: 0,
        ..l.clone()
    };
    let mut o = format!(
        "{:<12} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6} {:>6}  {}\n",
        "leg",
        "read/s",
        "write/s",
        "rbytes/s",
        "wbytes/s",
        "rlat-sm",
        "rlat-lg",
        "queue",
        "devq",
        "state"
    );
    o.push_str(&format!(
        "{:<12} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6} {:>6}\n",
        "", "", "", "", "", "ms", "ms", "", ""
    ));
    for l in &now.legs {
        let p = prev
            .and_then(|p| p.legs.iter().find(|x| x.name == l.name))
            .cloned()
            .unwrap_or_else(|| zero(l));
        o.push_str(&format!(
            "{:<12} {:>9.1} {:>9.1} {:>9} {:>9} {:>9} {:>9} {:>6} {:>6}  {}\n",
            l.name,
            per_s(l.read_ops, p.read_ops, secs),
            per_s(l.write_ops, p.write_ops, secs),
            rate(l.read_bytes, p.read_bytes, secs),
            rate(l.write_bytes, p.write_bytes, secs),
            ms(l.latency_us.small_read),
            ms(l.latency_us.large_read),
            l.inflight,
            l.device_inflight
                .map(|n| n.to_string())
                .unwrap_or_else(|| "-".into()),
            l.state
        ));
    }
    o
}

pub fn run(args: &[String]) -> i32 {
    // Numbers (INTERVAL, COUNT) after an optional MOUNT; a number is what `value::seconds`
    // takes, so "inf", "NaN" or "1e300" are not numbers but a second path: usage.
    let mut nums: Vec<&str> = Vec::new();
    let mut mount: Option<PathBuf> = None;
    for a in args {
        if crate::value::seconds(a).is_ok() {
            nums.push(a);
        } else if a.starts_with('-') || mount.is_some() || !nums.is_empty() {
            return usage();
        } else {
            mount = Some(PathBuf::from(a));
        }
    }
    let interval = |t: &str| crate::value::seconds(t).ok().filter(|d| !d.is_zero());
    let (interval, count) = match nums.as_slice() {
        [] => (None, Some(1)),
        [i] => match interval(i) {
            Some(i) => (Some(i), None),
            None => return usage(),
        },
        [i, c] => match (interval(i), crate::value::count(c, 1, u64::MAX)) {
            (Some(i), Ok(c)) => (Some(i), Some(c)),
            _ => return usage(),
        },
        _ => return usage(),
    };
    let mount = match mount {
        Some(m) => m,
        None => match control::mounts().first() {
            Some(m) => m.clone(),
            None => {
                eprintln!("mirrorfs: no mirrorfs mounts");
                return EXIT_USAGE;
            }
        },
    };
    let mut prev: Option<Stats> = None;
    let mut done = 0u64;
    loop {
        let st = match control::stats(&mount) {
            Ok(s) => s,
            Err((code, e)) => {
                eprintln!("mirrorfs: {e}");
                return code;
            }
        };
        if done > 0 {
            println!();
        }
        print!("{}", render(&st, prev.as_ref()));
        done += 1;
        if count.is_some_and(|c| done >= c) {
            return 0;
        }
        let Some(i) = interval else { return 0 };
        prev = Some(st);
        std::thread::sleep(i);
    }
}
