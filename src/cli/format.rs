//! How the subcommands write durations and a job's progress (sizes: `value::show_size`).

use crate::stats::{JobState, ScanStats};
use crate::value::show_size;

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
                    show_size(s.done_bytes),
                    show_size(s.total_bytes),
                    s.done_entries,
                    s.total_entries
                )
            } else {
                format!(
                    "{} of {} entries ({} copied)",
                    s.done_entries,
                    s.total_entries,
                    show_size(s.done_bytes)
                )
            };
            format!(
                "{kind} in progress on {} for {}: {done}, {pct:.1}% done, {}/s, {} to go",
                s.legs.join(", "),
                human_duration(s.elapsed_s),
                show_size(s.rate),
                s.eta_s
                    .map(human_duration)
                    .unwrap_or_else(|| "unknown".into()),
            )
        }
        state => format!(
            "{kind} {state} after {}: {} in {} entries, {} differences, {} repaired, {} errors",
            human_duration(s.elapsed_s),
            show_size(s.done_bytes),
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
    fn durations() {
        assert_eq!(human_duration(3723), "1h 02m 03s");
        assert_eq!(human_duration(90000), "1d 01h 00m");
    }
}
