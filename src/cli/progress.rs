//! `--wait`: following a resync or a scrub until it ends. On a terminal, a progress bar with
//! the bytes (or entries) done, the rate and the time left (indicatif); otherwise (a service's
//! journal, a pipe) a plain line a minute. The last line is the job's outcome.

use super::format::{human_duration, scan_line};
use crate::stats::{JobState, ScanStats};
use crate::value::show_size;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// Reads the job's progress: `Ok(None)` while it is not there yet; the exit status and why.
pub type Read<'a> = Box<dyn FnMut() -> Result<Option<ScanStats>, (i32, String)> + 'a>;

/// Which job: its name in the lines, and how to read it.
pub struct Job<'a> {
    pub kind: &'static str,
    pub read: Read<'a>,
}

/// How the job ended: 0 finished (for a scrub: with every difference repaired), 1 otherwise.
pub fn outcome(kind: &str, s: &ScanStats) -> i32 {
    let clean = s.state == JobState::Finished
        && (kind != "scrub" || (s.differences <= s.repaired && s.errors == 0));
    if clean {
        0
    } else {
        1
    }
}

fn bar(s: &ScanStats) -> indicatif::ProgressBar {
    let b = indicatif::ProgressBar::with_draw_target(
        None,
        indicatif::ProgressDrawTarget::stderr_with_hz(4),
    );
    b.enable_steady_tick(Duration::from_millis(250));
    restyle(&b, s);
    b
}

/// Bytes when the job knows its total, entries otherwise (an incremental resync).
fn restyle(b: &indicatif::ProgressBar, s: &ScanStats) {
    let template = if s.total_bytes > 0 {
        "{prefix} [{bar:24}] {msg}"
    } else {
        "{prefix} [{bar:24}] {pos}/{len} entries, {msg}"
    };
    if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
        b.set_style(style.progress_chars("=> "));
    }
}

/// The figures beside the bar, written as `status` writes them (the daemon's own rate and
/// time left, not a guess from the samples here).
fn message(s: &ScanStats) -> String {
    let left = s.eta_s.map(human_duration).unwrap_or_else(|| "?".into());
    if s.total_bytes > 0 {
        format!(
            "{}/{}, {}/s, {left} left",
            show_size(s.done_bytes),
            show_size(s.total_bytes),
            show_size(s.rate)
        )
    } else {
        format!("{}/s, {left} left", show_size(s.rate))
    }
}

fn update(b: &indicatif::ProgressBar, s: &ScanStats) {
    b.set_message(message(s));
    if s.total_bytes > 0 {
        b.set_length(s.total_bytes);
        b.set_position(s.done_bytes.min(s.total_bytes));
    } else {
        b.set_length(s.total_entries.max(1));
        b.set_position(s.done_entries.min(s.total_entries));
    }
}

/// Follows `job` until it is over; prints its last line and returns [`outcome`]. `wait_start`:
/// how long the job may take to appear.
pub fn follow(mut job: Job<'_>, wait_start: Duration) -> i32 {
    let tty = std::io::stderr().is_terminal();
    let started = Instant::now();
    let mut shown = Instant::now();
    let mut progress: Option<(indicatif::ProgressBar, bool)> = None;
    loop {
        let s = match (job.read)() {
            Ok(Some(s)) => s,
            Ok(None) if started.elapsed() < wait_start => {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            Ok(None) => {
                eprintln!("mirrorfs: no {} started", job.kind);
                return 1;
            }
            Err((code, e)) => {
                if let Some((b, _)) = &progress {
                    b.finish_and_clear();
                }
                eprintln!("mirrorfs: {e}");
                return code;
            }
        };
        if !s.state.is_running() {
            if let Some((b, _)) = &progress {
                b.finish_and_clear();
            }
            println!("{}", scan_line(job.kind, &s));
            return outcome(job.kind, &s);
        }
        if tty {
            let by_bytes = s.total_bytes > 0;
            match &progress {
                Some((b, was_bytes)) if *was_bytes == by_bytes => update(b, &s),
                _ => {
                    if let Some((b, _)) = &progress {
                        b.finish_and_clear();
                    }
                    let b = bar(&s);
                    b.set_prefix(format!("{} {}", job.kind, s.legs.join(",")));
                    update(&b, &s);
                    progress = Some((b, by_bytes));
                }
            }
        } else if shown.elapsed() >= Duration::from_secs(60) {
            println!("{}", scan_line(job.kind, &s));
            shown = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(state: JobState, diffs: u64, repaired: u64) -> ScanStats {
        ScanStats {
            state,
            legs: vec!["leg1".into()],
            started_unix_s: 1,
            elapsed_s: 1,
            done_entries: 3,
            total_entries: 3,
            done_bytes: 10,
            total_bytes: 10,
            rate: 10,
            eta_s: None,
            differences: diffs,
            repaired,
            errors: 0,
        }
    }

    #[test]
    fn outcomes() {
        assert_eq!(outcome("scrub", &scan(JobState::Finished, 0, 0)), 0);
        assert_eq!(outcome("scrub", &scan(JobState::Finished, 2, 1)), 1);
        assert_eq!(outcome("scrub", &scan(JobState::Finished, 2, 2)), 0);
        assert_eq!(outcome("resync", &scan(JobState::Finished, 5, 0)), 0);
        assert_eq!(outcome("resync", &scan(JobState::Cancelled, 0, 0)), 1);
        assert_eq!(
            outcome("resync", &scan(JobState::Failed("disk full".into()), 0, 0)),
            1
        );
        // The plain lines a journal gets come from the same scan line as status.
        let mut running = scan(JobState::Running, 0, 0);
        running.done_bytes = 5;
        assert!(scan_line("resync", &running).contains("50.0% done"));
    }
}
