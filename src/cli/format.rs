//! How the subcommands write sizes, durations and a job's progress.

use crate::stats::{JobState, ScanStats};

/// `1.2G`-style sizes (powers of 1024).
pub fn human_bytes(n: u64) -> String {
    const UNITS: &[&str] = &["B", "K", "M", "G", "T", "P"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n}B")
    } else if v < 10.0 {
        format!("{v:.1}{}", UNITS[u])
    } else {
        format!("{v:.0}{}", UNITS[u])
    }
}

/// `1h 02m 03s`.
pub fn human_duration(s: u64) -> String {
    let (d, h, m, s) = (s / 86400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}d {h:02}h {m:02}m")
    } else {
        format!("{h}h {m:02}m {s:02}s")
    }
}

pub fn scan_line(kind: &str, s: &ScanStats) -> String {
    let pct = s.percent();
    match &s.state {
        JobState::Running => {
            let done = if s.total_bytes > 0 {
                format!(
                    "{} of {} ({} of {} entries)",
                    human_bytes(s.done_bytes),
                    human_bytes(s.total_bytes),
                    s.done_entries,
                    s.total_entries
                )
            } else {
                format!(
                    "{} of {} entries ({} copied)",
                    s.done_entries,
                    s.total_entries,
                    human_bytes(s.done_bytes)
                )
            };
            format!(
                "{kind} in progress on {} for {}: {done}, {pct:.1}% done, {}/s, {} to go",
                s.legs.join(", "),
                human_duration(s.elapsed_s),
                human_bytes(s.rate),
                s.eta_s
                    .map(human_duration)
                    .unwrap_or_else(|| "unknown".into()),
            )
        }
        state => format!(
            "{kind} {state} after {}: {} in {} entries, {} differences, {} repaired, {} errors",
            human_duration(s.elapsed_s),
            human_bytes(s.done_bytes),
            s.done_entries,
            s.differences,
            s.repaired,
            s.errors
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations() {
        assert_eq!(human_bytes(0), "0B");
        assert_eq!(human_bytes(1536), "1.5K");
        assert_eq!(human_bytes(300 << 20), "300M");
        assert_eq!(human_duration(3723), "1h 02m 03s");
        assert_eq!(human_duration(90000), "1d 01h 00m");
    }
}
