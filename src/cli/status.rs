//! `mirrorfs status [--json | --format=text|json|prometheus] [--clear] [MOUNT...]`: a `zpool
//! status`-like report, and an exit status monitoring can use: 0 every leg online and no
//! errors, 1 degraded, errors counted, or damaged or diverged files, 2 usage error or not a
//! mirrorfs mount. `--format=prometheus` prints the text exposition instead (`prometheus.rs`).
//! `--clear` first zeroes the counters and the damaged- and diverged-file lists
//! (`stats_reset`, root only), as `zpool clear` does.

use super::args::{Format, StatusArgs};
use super::control::{self, EXIT_USAGE};
use super::format::{human_duration, scan_line};
use crate::stats::{LastScrub, LegState, MountState, Stats};
use crate::value::show_size;
use std::fmt::Write;

/// The report for one mount.
pub fn render(st: &Stats) -> String {
    let mut o = String::new();
    let errors: u64 = st
        .legs
        .iter()
        .map(|l| l.read_errors + l.write_errors + l.checksum_errors)
        .sum();
    let _ = writeln!(o, "  mount: {}", st.mount);
    let _ = writeln!(o, "  state: {}", st.state);
    if st.state != MountState::Online {
        let mut down: Vec<String> = st
            .legs
            .iter()
            .filter(|l| !matches!(l.state, LegState::InSync | LegState::Removed))
            .map(|l| {
                let why = match l.state {
                    LegState::Failed => "dropped: errors, or mirrorfs leg fail",
                    LegState::Missing => "not there at mount",
                    LegState::Stale => "behind the others, left alone",
                    LegState::Resyncing => "being resynced",
                    LegState::InSync | LegState::Removed => "not in sync",
                };
                format!("{} ({why})", l.name)
            })
            .collect();
        if st.members_not_given > 0 {
            down.push(format!(
                "{} member(s) not given at mount",
                st.members_not_given
            ));
        }
        let _ = writeln!(
            o,
            " status: {} of {} legs online; {}. The data is served from the others.",
            st.legs_online,
            st.legs_total,
            down.join(", ")
        );
        let resyncing = st.legs.iter().any(|l| l.state == LegState::Resyncing);
        let _ = writeln!(
            o,
            " action: {}",
            if resyncing {
                "wait for the resync to finish (see scan); nothing to do."
            } else {
                "find the cause in the system log (journalctl -t mirrorfs), fix or replace the leg, then 'mirrorfs leg add' or 'mirrorfs leg replace' (docs/operations.md)."
            }
        );
    } else if errors > 0 {
        let _ = writeln!(
            o,
            " status: I/O errors were counted on some leg, but every leg is in sync."
        );
        let _ = writeln!(
            o,
            " action: check the leg's disk; reset the counters with 'mirrorfs set {} stats_reset 1'.",
            st.mount
        );
    }
    let _ = writeln!(o, " policy: {}", st.read_policy);
    let _ = writeln!(
        o,
        " uptime: {}  (daemon pid {}, mirrorfs {})",
        human_duration(st.uptime_s),
        st.pid,
        st.mirrorfs_version
    );
    if let Some(k) = &st.keeper {
        let last = match k.restarts {
            0 => String::new(),
            _ => format!("; last: {}", k.last_cause),
        };
        let _ = writeln!(
            o,
            " keeper: pid {}, {} restart(s){last}",
            k.keeper_pid, k.restarts
        );
    }
    if let Some(d) = &st.daemon {
        let _ = writeln!(
            o,
            " daemon: {} resident, {} CPU{}",
            show_size(d.memory_bytes),
            human_cpu(d.cpu_us),
            d.threads
                .map(|t| format!(", {t} threads"))
                .unwrap_or_default()
        );
    }
    let mut scans = Vec::new();
    if let Some(r) = &st.resync {
        scans.push(scan_line("resync", r));
    }
    if let Some(s) = &st.scrub {
        scans.push(scan_line("scrub", s));
    }
    if scans.is_empty() {
        scans.push("none requested".into());
    }
    for (i, s) in scans.iter().enumerate() {
        let _ = writeln!(o, "{}{s}", if i == 0 { "   scan: " } else { "         " });
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let _ = writeln!(
        o,
        "  scrub: {}",
        last_scrub_line(st.last_scrub.as_ref(), now)
    );
    let _ = writeln!(o, " config:\n");
    let picks: u64 = st.legs.iter().map(|l| l.policy_picks).sum();
    let name_w = st
        .legs
        .iter()
        .map(|l| l.name.len() + 2)
        .max()
        .unwrap_or(0)
        .max(8);
    let _ = writeln!(
        o,
        "\t{:<name_w$} {:<9} {:>5} {:>5} {:>5}  {:<12} {:>7} {:>7} {:>6}  PATH",
        "NAME", "STATE", "READ", "WRITE", "CKSUM", "ROTATIONAL", "READ-B", "WRITE-B", "SHARE"
    );
    let sum = |f: fn(&crate::stats::LegStats) -> u64| st.legs.iter().map(f).sum::<u64>();
    let _ = writeln!(
        o,
        "\t{:<name_w$} {:<9} {:>5} {:>5} {:>5}",
        "mirror",
        st.state,
        sum(|l| l.read_errors),
        sum(|l| l.write_errors),
        sum(|l| l.checksum_errors)
    );
    for l in &st.legs {
        let rot = format!(
            "{} ({})",
            if l.rotational { "yes" } else { "no" },
            match l.rotational_source.as_str() {
                "option" => "opt",
                "measured" => "meas",
                "unknown" => "?",
                s => s,
            }
        );
        let share = if picks == 0 {
            "-".to_string()
        } else {
            format!("{:.0}%", l.policy_picks as f64 * 100.0 / picks as f64)
        };
        let name = format!("  {}", l.name);
        let _ = writeln!(
            o,
            "\t{:<name_w$} {:<9} {:>5} {:>5} {:>5}  {:<12} {:>7} {:>7} {:>6}  {}{}",
            name,
            l.state,
            l.read_errors,
            l.write_errors,
            l.checksum_errors,
            rot,
            show_size(l.read_bytes),
            show_size(l.write_bytes),
            share,
            l.path,
            match (l.quiet, l.writemostly) {
                (true, _) => "  (quiet)",
                (false, true) => "  (writemostly)",
                _ => "",
            }
        );
    }
    if st
        .legs
        .iter()
        .any(|l| l.disk.is_some() || l.size_bytes.is_some())
    {
        let _ = writeln!(o, "\n  disks:");
        for l in &st.legs {
            let space = match (l.size_bytes, l.free_bytes) {
                (Some(size), Some(free)) => {
                    format!("{} free of {}", show_size(free), show_size(size))
                }
                _ => "size unknown".to_string(),
            };
            let disk = match &l.disk {
                Some(d) => format!(
                    "{} on {}{}, {}{}",
                    d.filesystem,
                    d.device,
                    d.model
                        .as_deref()
                        .map(|m| format!(" ({m})"))
                        .unwrap_or_default(),
                    match d.kind.as_str() {
                        "ssd" => "SSD",
                        "hdd" => "HDD",
                        _ => "kind unknown",
                    },
                    if d.removable { ", removable" } else { "" }
                ),
                None => "disk unknown".to_string(),
            };
            let _ = writeln!(o, "\t{:<name_w$} {space}; {disk}", l.name);
        }
    }
    let _ = writeln!(
        o,
        "\nerrors: {}",
        if errors == 0 {
            "No known data errors".to_string()
        } else {
            format!("{errors} I/O or checksum error(s) counted on the legs; no data lost while another leg was in sync")
        }
    );
    if let Some(ig) = &st.integrity {
        if !ig.damaged.is_empty() {
            let _ = writeln!(
                o,
                "        Permanent errors in the following files (no leg holds these bytes as \
                 written; reading them fails with EIO until they are rewritten):\n"
            );
            for d in &ig.damaged {
                let ranges: Vec<String> = d
                    .ranges
                    .iter()
                    .map(|[off, len]| format!("{off}..{}", off + len))
                    .collect();
                let _ = writeln!(o, "\t{}  (bytes {})", d.path, ranges.join(", "));
            }
            let _ = writeln!(o);
        }
        if !ig.diverged.is_empty() {
            let _ = writeln!(
                o,
                "        Changed behind the mirror's back (a leg's copy was edited on the leg \
                 itself; not repaired: see docs/integrity.md):\n"
            );
            for d in &ig.diverged {
                let _ = writeln!(o, "\t{}  (on {})", d.path, d.legs.join(", "));
            }
            let _ = writeln!(o);
        }
        if let Some(b) = &ig.backfill {
            let _ = writeln!(o, "{}", scan_line("checksums for older files", b));
        }
        let _ = writeln!(
            o,
            "checksums: {} file(s), {} covered ({} of checksums), {} to do; {} file(s) to \
             commit; {} block(s) verified since the mount{}",
            ig.files_covered,
            show_size(ig.bytes_covered),
            show_size(ig.store_bytes),
            show_size(ig.bytes_pending),
            ig.files_pending,
            ig.verified_blocks,
            if ig.crash_resolved > 0 {
                format!("; {} file(s) rehashed by crash recovery", ig.crash_resolved)
            } else {
                String::new()
            }
        );
    }
    o
}

/// The last scrub on record (kept on the legs across mounts), for the `scrub:` line: when it
/// ended, how long ago, and how: `last ended 2026-12-01 20:10 (3d 02h 00m ago): finished,
/// clean`; for one that did not go through every entry, when the last one that did ended.
fn last_scrub_line(r: Option<&LastScrub>, now: u64) -> String {
    let Some(r) = r else {
        return "none on record (mirrorfs scrub start MOUNT)".into();
    };
    let when = |t: u64| {
        format!(
            "{} ({} ago)",
            crate::sys::local_minute(t),
            human_duration(now.saturating_sub(t))
        )
    };
    let errors = if r.errors > 0 {
        format!(", {} errors", r.errors)
    } else {
        String::new()
    };
    let outcome = if r.finished() {
        match (r.differences, r.repaired) {
            (0, _) if r.errors == 0 => "finished, clean".to_string(),
            (d, rep) if rep >= d => format!("finished, {d} differences, all repaired{errors}"),
            (d, rep) => format!(
                "finished, {d} differences, {rep} repaired, {} LEFT (mirrorfs scrub status){errors}",
                d - rep
            ),
        }
    } else {
        format!(
            "{} after {} entries ({}), {} differences, {} repaired{errors}; last complete scrub: {}",
            r.state,
            r.done_entries,
            show_size(r.done_bytes),
            r.differences,
            r.repaired,
            r.last_finished_unix_s.map_or("none".into(), when)
        )
    };
    format!("last ended {}: {outcome}", when(r.ended_unix_s))
}

/// CPU time: `850ms`, `12.3s`, `1h 02m 03s`.
fn human_cpu(us: u64) -> String {
    match us {
        0..1_000_000 => format!("{}ms", us / 1000),
        1_000_000..60_000_000 => format!("{:.1}s", us as f64 / 1e6),
        _ => human_duration(us / 1_000_000),
    }
}

/// Exit status for one mount's stats: 0 healthy, 1 degraded or errors.
pub fn health(st: &Stats) -> i32 {
    let errors = st
        .legs
        .iter()
        .any(|l| l.read_errors + l.write_errors + l.checksum_errors > 0)
        || st
            .integrity
            .as_ref()
            .is_some_and(|i| !i.damaged.is_empty() || !i.diverged.is_empty());
    if st.state != MountState::Online || errors {
        1
    } else {
        0
    }
}

/// Writes `text` to `file` atomically (0644): a temporary file beside it (`.NAME.PID.N.tmp`,
/// which the textfile collector does not read), then a rename, so a reader (node_exporter's
/// textfile collector) never sees half of it ([`crate::sys::replace::replace_file`]).
fn write_atomically(file: &std::path::Path, text: &str) -> Result<(), String> {
    let name = file
        .file_name()
        .ok_or_else(|| format!("'{}' is not a file name", file.display()))?;
    let parent = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    crate::sys::fd::open_dir(parent)
        .map_err(std::io::Error::from)
        .and_then(|dir| crate::sys::replace::replace_file_with(&dir, name, 0o644, text.as_bytes()))
        .map_err(|e| format!("cannot write '{}': {e}", file.display()))
}

pub fn run(args: StatusArgs) -> i32 {
    let format = match (args.json, args.format) {
        (true, _) => Format::Json,
        (false, f) => f.unwrap_or(Format::Text),
    };
    let output = args.output;
    let clear = args.clear;
    let mut mounts = args.mounts;
    if mounts.is_empty() {
        mounts = control::mounts();
        // No mount is not an error for the metrics: an empty exposition says it.
        if mounts.is_empty() && format != Format::Prometheus {
            eprintln!("mirrorfs: no mirrorfs mounts");
            return EXIT_USAGE;
        }
    }
    if format == Format::Prometheus {
        let all: Vec<(String, Result<Stats, String>)> = mounts
            .iter()
            .map(|m| {
                let st = control::stats(m).map_err(|(_, e)| {
                    eprintln!("mirrorfs: {e}");
                    e
                });
                (m.display().to_string(), st)
            })
            .collect();
        let text = super::prometheus::render(&all);
        return match output {
            None => {
                print!("{text}");
                0
            }
            Some(f) => match write_atomically(&f, &text) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("mirrorfs: {e}");
                    1
                }
            },
        };
    }
    if output.is_some() {
        eprintln!(
            "mirrorfs: status: --output goes with --format=prometheus (see 'mirrorfs status --help')"
        );
        return EXIT_USAGE;
    }
    let mut worst = 0;
    for (i, m) in mounts.iter().enumerate() {
        if clear {
            let code = control::command(m, "stats_reset", b"1", "clear");
            if code != 0 {
                worst = worst.max(code);
                continue;
            }
        }
        match control::stats(m) {
            Ok(st) => {
                if format == Format::Json {
                    println!("{}", serde_json::to_string(&st).expect("serializable"));
                } else {
                    if i > 0 {
                        println!();
                    }
                    print!("{}", render(&st));
                }
                worst = worst.max(health(&st));
            }
            Err((code, e)) => {
                eprintln!("mirrorfs: {e}");
                worst = worst.max(code);
            }
        }
    }
    worst
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(state: &str, differences: u64, repaired: u64) -> LastScrub {
        LastScrub {
            state: state.into(),
            legs: vec!["leg0".into(), "leg1".into()],
            started_unix_s: 1_799_999_940,
            ended_unix_s: 1_800_000_000,
            done_entries: 9,
            done_bytes: 3 << 20,
            differences,
            repaired,
            errors: 0,
            last_finished_unix_s: (state == "finished").then_some(1_800_000_000),
        }
    }

    #[test]
    fn the_last_scrub_line_says_when_and_how() {
        let day = 86_400;
        let now = 1_800_000_000 + 3 * day;
        assert_eq!(
            last_scrub_line(None, now),
            "none on record (mirrorfs scrub start MOUNT)"
        );
        let clean = last_scrub_line(Some(&record("finished", 0, 0)), now);
        assert!(
            clean.starts_with(&format!(
                "last ended {} (3d 00h 00m ago): ",
                crate::sys::local_minute(1_800_000_000)
            )) && clean.ends_with("finished, clean"),
            "{clean}"
        );
        let repaired = last_scrub_line(Some(&record("finished", 2, 2)), now);
        assert!(
            repaired.ends_with("finished, 2 differences, all repaired"),
            "{repaired}"
        );
        let left = last_scrub_line(Some(&record("finished", 2, 1)), now);
        assert!(left.contains("2 differences, 1 repaired, 1 LEFT"), "{left}");
        // Cancelled: when the last complete one ended, or that none did.
        let mut c = record("cancelled", 0, 0);
        let cancelled = last_scrub_line(Some(&c), now);
        assert!(
            cancelled.contains(": cancelled after 9 entries (3M), 0 differences")
                && cancelled.ends_with("; last complete scrub: none"),
            "{cancelled}"
        );
        c.last_finished_unix_s = Some(1_800_000_000 - 30 * day);
        let cancelled = last_scrub_line(Some(&c), now);
        assert!(cancelled.ends_with("(33d 00h 00m ago)"), "{cancelled}");
    }

    #[test]
    fn local_minutes_are_dates() {
        // 1970-01-12 13:47 UTC: the 11th, 12th or 13th in any time zone.
        let t = crate::sys::local_minute(1_000_060);
        let b = t.as_bytes();
        assert_eq!(b.len(), 16, "{t}");
        assert!(
            t.starts_with("1970-01-1") || t.starts_with("1970-01-12"),
            "{t}"
        );
        assert_eq!((b[4], b[7], b[10], b[13]), (b'-', b'-', b' ', b':'), "{t}");
    }
}
