//! A token bucket on bytes per second, shared by a run and the daemon (which may change the
//! rate while the run goes on). Sleeps in short steps so that a cancel is seen quickly.

use crate::errno::{Errno, Result};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Longest single sleep: the cancel flag is checked at least this often while throttled.
const STEP: Duration = Duration::from_millis(20);

/// How much unused rate may be saved up: a tenth of a second's worth.
const BURST_SECS: f64 = 0.1;

#[derive(Debug)]
pub struct Throttle {
    /// Bytes per second; 0 = unlimited.
    rate: AtomicU64,
    state: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    /// Available bytes; negative = debt to wait for.
    tokens: f64,
    last: Instant,
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle::new(None)
    }
}

impl Throttle {
    /// `speed_max` in bytes per second; `None` or `Some(0)` = unlimited.
    pub fn new(speed_max: Option<u64>) -> Throttle {
        Throttle {
            rate: AtomicU64::new(speed_max.unwrap_or(0)),
            state: Mutex::new(Bucket {
                tokens: 0.0,
                last: Instant::now(),
            }),
        }
    }

    /// Changes the rate (takes effect on the next call to [`Throttle::consume`]).
    pub fn set_speed_max(&self, speed_max: Option<u64>) {
        self.rate.store(speed_max.unwrap_or(0), Ordering::Relaxed);
    }

    pub fn speed_max(&self) -> Option<u64> {
        match self.rate.load(Ordering::Relaxed) {
            0 => None,
            r => Some(r),
        }
    }

    /// Accounts for `bytes` and sleeps as long as the rate requires. Returns `ECANCELED` as soon
    /// as `cancel` is set (checked every few milliseconds while sleeping).
    pub fn consume(&self, bytes: u64, cancel: &AtomicBool) -> Result<()> {
        if cancel.load(Ordering::Relaxed) {
            return Err(Errno(libc::ECANCELED));
        }
        let rate = self.rate.load(Ordering::Relaxed);
        if rate == 0 || bytes == 0 {
            return Ok(());
        }
        let rate = rate as f64;
        {
            let mut b = self.state.lock();
            let now = Instant::now();
            let add = now.duration_since(b.last).as_secs_f64() * rate;
            b.tokens = (b.tokens + add).min(rate * BURST_SECS);
            b.last = now;
            b.tokens -= bytes as f64;
        }
        loop {
            let debt = {
                let mut b = self.state.lock();
                let now = Instant::now();
                let add = now.duration_since(b.last).as_secs_f64() * rate;
                b.tokens = (b.tokens + add).min(rate * BURST_SECS);
                b.last = now;
                -b.tokens
            };
            if debt <= 0.0 {
                return Ok(());
            }
            if cancel.load(Ordering::Relaxed) {
                return Err(Errno(libc::ECANCELED));
            }
            // Re-read the rate: the daemon may have raised it (or lifted it) meanwhile.
            let now_rate = self.rate.load(Ordering::Relaxed);
            if now_rate == 0 {
                self.state.lock().tokens = 0.0;
                return Ok(());
            }
            let wait = Duration::from_secs_f64(debt / now_rate as f64);
            std::thread::sleep(wait.min(STEP));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_is_kept_and_cancel_is_quick() {
        let t = Throttle::new(Some(10 << 20));
        let cancel = AtomicBool::new(false);
        let start = Instant::now();
        for _ in 0..5 {
            t.consume(1 << 20, &cancel).unwrap();
        }
        // 5 MiB at 10 MiB/s: about half a second. At least 0.4 s: no more than the 0.1 s burst
        // allowance can have been saved up, and a busy machine only makes the sleeps longer.
        // At most 5 s, ten times the designed time: the debt is worked out from the clock, so
        // a sleep that overran (a busy machine) is paid back by shorter ones after it, and
        // only the last overrun shows; a throttle that sleeps far beyond the rate does not
        // pass.
        let s = start.elapsed().as_secs_f64();
        assert!((0.4..5.0).contains(&s), "{s}");

        // A cancel is seen before any wait: 100 MiB at 10 MiB/s would take 10 s, so returning
        // in under 5 s (a margin no scheduling delay comes near) shows it did not wait.
        cancel.store(true, Ordering::Relaxed);
        let start = Instant::now();
        assert_eq!(t.consume(100 << 20, &cancel), Err(Errno(libc::ECANCELED)));
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn unlimited_never_sleeps() {
        let t = Throttle::new(None);
        let cancel = AtomicBool::new(false);
        let start = Instant::now();
        t.consume(u64::MAX / 2, &cancel).unwrap();
        // Throttled at any rate, u64::MAX / 2 bytes would take forever: returning in under 5 s
        // (a margin no scheduling delay comes near) shows it did not wait for them.
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
