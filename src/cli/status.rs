//! `mirrorfs status [--json] [--clear] [MOUNT...]`: a `zpool status`-like report, and an exit
//! status monitoring can use: 0 every leg online and no errors, 1 degraded, errors counted or
//! damaged files, 2 usage error or not a mirrorfs mount. `--clear` first zeroes the counters
//! and the damaged-file list (`stats_reset`, root only), as `zpool clear` does.

use super::control::{self, EXIT_USAGE};
use super::format::{human_bytes, human_duration, scan_line};
use crate::stats::{LegState, MountState, Stats};
use std::fmt::Write;
use std::path::PathBuf;

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
            human_bytes(l.read_bytes),
            human_bytes(l.write_bytes),
            share,
            l.path,
            if l.writemostly { "  (writemostly)" } else { "" }
        );
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
            human_bytes(ig.bytes_covered),
            human_bytes(ig.store_bytes),
            human_bytes(ig.bytes_pending),
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

pub fn run(args: &[String]) -> i32 {
    let mut json = false;
    let mut clear = false;
    let mut mounts: Vec<PathBuf> = Vec::new();
    for a in args {
        match a.as_str() {
            "--json" | "-j" => json = true,
            "--clear" => clear = true,
            "-h" | "--help" => {
                println!("usage: mirrorfs status [--json] [--clear] [MOUNT...]\n\n--clear zeroes the error counters and the damaged-file list first (root).\nExit status: 0 every leg online and no errors, 1 degraded, errors or damaged files, 2 usage error or not a mirrorfs mount.");
                return 0;
            }
            s if s.starts_with('-') => {
                eprintln!("mirrorfs: status: unknown flag '{s}' (usage: mirrorfs status [--json] [--clear] [MOUNT...])");
                return EXIT_USAGE;
            }
            s => mounts.push(PathBuf::from(s)),
        }
    }
    if mounts.is_empty() {
        mounts = control::mounts();
        if mounts.is_empty() {
            eprintln!("mirrorfs: no mirrorfs mounts");
            return EXIT_USAGE;
        }
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
                if json {
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
