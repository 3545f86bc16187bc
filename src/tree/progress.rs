//! Progress of one resync or scrub run, shared between the engine's thread and whoever shows
//! it (the daemon's stats, `mirrorfs status`). Plain atomics: readers never block the engine.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Where a run stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Created, not started.
    Idle,
    /// The first pass that counts entries and bytes (for the totals and the ETA).
    Counting,
    /// Comparing / copying.
    Running,
    /// Finished.
    Done,
    /// Stopped by the cancel flag.
    Cancelled,
    /// Stopped by an error (a target leg's I/O error, for instance).
    Failed,
}

impl Phase {
    fn from_u8(v: u8) -> Phase {
        match v {
            1 => Phase::Counting,
            2 => Phase::Running,
            3 => Phase::Done,
            4 => Phase::Cancelled,
            5 => Phase::Failed,
            _ => Phase::Idle,
        }
    }
}

/// Counters of one run. Totals are 0 until the counting pass (if any) has finished.
///
/// `bytes_*` count logical file bytes walked (a file's size, holes included), once per entry
/// however many legs are read.
#[derive(Debug)]
pub struct Progress {
    pub entries_done: AtomicU64,
    pub entries_total: AtomicU64,
    pub bytes_done: AtomicU64,
    pub bytes_total: AtomicU64,
    /// Entries found different (scrub) or changed on the target (sync).
    pub differences: AtomicU64,
    /// Entries repaired (scrub with repair) or written on the target (sync).
    pub repaired: AtomicU64,
    /// Entries skipped because of an error that did not stop the run.
    pub errors: AtomicU64,
    phase: AtomicU8,
    start: parking_lot::Mutex<Option<(Instant, u64)>>,
    /// When the run ended (done, cancelled or failed): elapsed time and rate stop there.
    end: parking_lot::Mutex<Option<Instant>>,
}

impl Default for Progress {
    fn default() -> Self {
        Progress::new()
    }
}

/// A consistent-enough copy of the counters plus derived figures, ready for JSON.
#[derive(Clone, Debug, Serialize)]
pub struct ProgressSnapshot {
    pub phase: Phase,
    pub entries_done: u64,
    pub entries_total: u64,
    pub bytes_done: u64,
    pub bytes_total: u64,
    pub differences: u64,
    pub repaired: u64,
    pub errors: u64,
    /// Unix time (seconds) the run started, 0 if it has not.
    pub started_unix: u64,
    pub elapsed_secs: f64,
    /// Average since the start.
    pub bytes_per_sec: f64,
    pub entries_per_sec: f64,
    /// Seconds left at the average rate; `None` while unknown (no total yet, or no progress).
    pub eta_secs: Option<f64>,
    /// 0..=100, from bytes when there are any, else from entries.
    pub percent: Option<f64>,
}

impl Progress {
    pub fn new() -> Progress {
        Progress {
            entries_done: AtomicU64::new(0),
            entries_total: AtomicU64::new(0),
            bytes_done: AtomicU64::new(0),
            bytes_total: AtomicU64::new(0),
            differences: AtomicU64::new(0),
            repaired: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            phase: AtomicU8::new(0),
            start: parking_lot::Mutex::new(None),
            end: parking_lot::Mutex::new(None),
        }
    }

    /// Zeroes the counters and records the start time (each run calls it first).
    pub fn reset(&self) {
        for a in [
            &self.entries_done,
            &self.entries_total,
            &self.bytes_done,
            &self.bytes_total,
            &self.differences,
            &self.repaired,
            &self.errors,
        ] {
            a.store(0, Ordering::Relaxed);
        }
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        *self.start.lock() = Some((Instant::now(), unix));
        *self.end.lock() = None;
        self.set_phase(Phase::Idle);
    }

    pub fn set_phase(&self, p: Phase) {
        if matches!(p, Phase::Done | Phase::Cancelled | Phase::Failed) {
            self.end.lock().get_or_insert_with(Instant::now);
        }
        self.phase.store(p as u8, Ordering::Release);
    }

    pub fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Ordering::Acquire))
    }

    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// The counters with rate and ETA.
    pub fn snapshot(&self) -> ProgressSnapshot {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (elapsed, started_unix) = match *self.start.lock() {
            Some((i, u)) => {
                let until = self.end.lock().unwrap_or_else(Instant::now);
                (until.saturating_duration_since(i).as_secs_f64(), u)
            }
            None => (0.0, 0),
        };
        let (ed, et, bd, bt) = (
            g(&self.entries_done),
            g(&self.entries_total),
            g(&self.bytes_done),
            g(&self.bytes_total),
        );
        let rate = |done: u64| {
            if elapsed > 0.0 {
                done as f64 / elapsed
            } else {
                0.0
            }
        };
        let (bytes_per_sec, entries_per_sec) = (rate(bd), rate(ed));
        // The ETA follows whichever measure has a total; bytes dominate the cost of a run.
        let left = |done: u64, total: u64, r: f64| {
            if total == 0 || r <= 0.0 {
                None
            } else {
                Some(total.saturating_sub(done) as f64 / r)
            }
        };
        let eta_secs = match left(bd, bt, bytes_per_sec) {
            Some(b) => Some(b.max(left(ed, et, entries_per_sec).unwrap_or(0.0))),
            None => left(ed, et, entries_per_sec),
        };
        let percent = if bt > 0 {
            Some((bd.min(bt) as f64 * 100.0 / bt as f64).min(100.0))
        } else if et > 0 {
            Some((ed.min(et) as f64 * 100.0 / et as f64).min(100.0))
        } else {
            None
        };
        ProgressSnapshot {
            phase: self.phase(),
            entries_done: ed,
            entries_total: et,
            bytes_done: bd,
            bytes_total: bt,
            differences: g(&self.differences),
            repaired: g(&self.repaired),
            errors: g(&self.errors),
            started_unix,
            elapsed_secs: elapsed,
            bytes_per_sec,
            entries_per_sec,
            eta_secs,
            percent,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eta_from_rate() {
        let p = Progress::new();
        p.reset();
        p.bytes_total.store(1000, Ordering::Relaxed);
        std::thread::sleep(std::time::Duration::from_millis(20));
        p.bytes_done.store(500, Ordering::Relaxed);
        let s = p.snapshot();
        assert!(s.bytes_per_sec > 0.0);
        let eta = s.eta_secs.unwrap();
        // Half done after `elapsed`: about as long again.
        assert!(eta > 0.0 && eta < s.elapsed_secs * 2.0, "{s:?}");
        assert_eq!(s.percent, Some(50.0));
        assert!(serde_json::to_string(&s)
            .unwrap()
            .contains("\"phase\":\"idle\""));
    }
}
