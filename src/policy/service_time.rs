//! Per-leg service-time estimator: time-decayed means of what reads cost on a leg, measured at
//! completion. The engine keeps one per leg (behind a lock) and the simulator uses the same
//! code, so the policies see the same figures in both.
//!
//! - Per queue slot: when the caller says how many requests were ahead of the read, its
//!   service time is `elapsed / (ahead + 1)`, so that `(queue + 1) x service time` predicts
//!   when a new read would finish, on serial disks and on parallel flash alike. Otherwise
//!   (and always for bandwidth and positioning cost) overlap-corrected, as dm-multipath's
//!   historical-service-time: `completion - max(submission, previous completion on this
//!   leg)`, the time the read added to the leg's busy time.
//! - Time-decayed: each mean moves towards a new sample by at least 1/8 (Kai Krakow's EMA on
//!   the btrfs list) and by more when the previous sample is old (half-life
//!   [`ServiceTime::HALF_LIFE_US`]), so a leg's figures follow its present, not its history.
//! - Small (<= [`SMALL_READ_MAX`]) and large reads apart; bandwidth from large reads that
//!   continued where the leg's previous read ended; the positioning cost from reads that did
//!   not ([`ServiceTime::seek_us`]).

use super::{LegView, SMALL_READ_MAX};

/// A time-decayed exponential mean.
#[derive(Clone, Debug, Default)]
struct Ewma {
    value: f64,
    last_us: u64,
    valid: bool,
}

impl Ewma {
    fn add(&mut self, x: f64, now_us: u64, half_life_us: u64) {
        if !self.valid {
            *self = Ewma {
                value: x,
                last_us: now_us,
                valid: true,
            };
            return;
        }
        let age = now_us.saturating_sub(self.last_us) as f64;
        let decay = 1.0 - (-(age / half_life_us as f64) * std::f64::consts::LN_2).exp();
        let a = decay.max(ServiceTime::ALPHA);
        self.value += a * (x - self.value);
        self.last_us = self.last_us.max(now_us);
    }

    fn get(&self) -> Option<f64> {
        self.valid.then_some(self.value)
    }
}

/// One leg's read service times.
#[derive(Clone, Debug, Default)]
pub struct ServiceTime {
    small_us: Ewma,
    large_us: Ewma,
    /// µs per byte of large reads that continued the previous read on the leg.
    contig_us_per_byte: Ewma,
    /// µs per byte of all large reads (the bandwidth until a contiguous one is seen).
    any_us_per_byte: Ewma,
    /// Service time and size of reads that did not continue the previous read: their mean
    /// cost beyond their bytes is the positioning cost.
    jump_us: Ewma,
    jump_bytes: Ewma,
    last_finish_us: Option<u64>,
}

impl ServiceTime {
    /// The smallest weight of a new sample.
    pub const ALPHA: f64 = 1.0 / 8.0;
    /// A sample this old has lost half its weight.
    pub const HALF_LIFE_US: u64 = 500_000;

    pub fn new() -> ServiceTime {
        ServiceTime::default()
    }

    /// A read of `bytes` completed at `now_us` after `elapsed_us` (from when it was handed to
    /// the leg). Its position is not known: it counts for the means and the bandwidth only.
    pub fn record(&mut self, bytes: u64, elapsed_us: u64, now_us: u64) {
        self.record_at(bytes, elapsed_us, now_us, None);
    }

    /// As [`record`](Self::record), knowing whether the read started where the leg's previous
    /// read ended (`Some(true)`) or elsewhere (`Some(false)`): that feeds the bandwidth and the
    /// positioning cost. Mean service times overlap-corrected. Calls must come in completion
    /// order (`now_us` not decreasing).
    pub fn record_at(
        &mut self,
        bytes: u64,
        elapsed_us: u64,
        now_us: u64,
        contiguous: Option<bool>,
    ) {
        self.record_queued(bytes, elapsed_us, now_us, contiguous, None);
    }

    /// As [`record_at`](Self::record_at), also knowing how many of our requests were
    /// outstanding on the leg when this one was handed to it (`queued`: its
    /// `LegView::inflight` at decision, this read not counted). Then the mean service times
    /// are `elapsed / (queued + 1)`, which keeps `(queue + 1) x service time` right on devices
    /// that serve many requests at once: an SSD below its internal parallelism shows its
    /// latency whatever the depth, and the overlap correction would make the leg with the
    /// shorter queue look slower, so that a latency-driven policy starves it (seen in the
    /// simulator: 578 against 596 MB/s on two SSDs). The preferred call.
    pub fn record_queued(
        &mut self,
        bytes: u64,
        elapsed_us: u64,
        now_us: u64,
        contiguous: Option<bool>,
        queued: Option<u32>,
    ) {
        let start = now_us.saturating_sub(elapsed_us);
        let busy_from = match self.last_finish_us {
            Some(f) if f > start => f.min(now_us),
            _ => start,
        };
        self.last_finish_us = Some(self.last_finish_us.map_or(now_us, |f| f.max(now_us)));
        let st = ((now_us - busy_from) as f64).max(1.0);
        let mean = match queued {
            Some(q) => (elapsed_us as f64 / (f64::from(q) + 1.0)).max(1.0),
            None => st,
        };
        let h = Self::HALF_LIFE_US;
        if bytes <= u64::from(SMALL_READ_MAX) {
            self.small_us.add(mean, now_us, h);
        } else {
            self.large_us.add(mean, now_us, h);
            let per_byte = st / bytes as f64;
            self.any_us_per_byte.add(per_byte, now_us, h);
            if contiguous == Some(true) {
                self.contig_us_per_byte.add(per_byte, now_us, h);
            }
        }
        if contiguous == Some(false) {
            self.jump_us.add(st, now_us, h);
            self.jump_bytes.add(bytes as f64, now_us, h);
        }
    }

    /// Mean service time of small reads, µs.
    pub fn small_read_us(&self) -> Option<u32> {
        self.small_us.get().map(round_us)
    }

    /// Mean service time of large reads, µs.
    pub fn large_read_us(&self) -> Option<u32> {
        self.large_us.get().map(round_us)
    }

    /// Bandwidth of large reads, bytes per second: from contiguous ones when there are, else
    /// from all.
    pub fn read_bandwidth(&self) -> Option<u64> {
        let upb = self
            .contig_us_per_byte
            .get()
            .or(self.any_us_per_byte.get())?;
        Some((1e6 / upb.max(1e-6)) as u64)
    }

    /// Mean positioning cost, µs: how much longer than its bytes at [`read_bandwidth`]
    /// (contiguous) a read that did not continue the previous one took. `None` until both a
    /// contiguous large read and a non-contiguous read have been seen.
    ///
    /// [`read_bandwidth`]: Self::read_bandwidth
    pub fn seek_us(&self) -> Option<u32> {
        let upb = self.contig_us_per_byte.get()?;
        let st = self.jump_us.get()?;
        let bytes = self.jump_bytes.get()?;
        Some(round_us((st - bytes * upb).max(0.0)))
    }

    /// Copies the figures into a leg view.
    pub fn fill(&self, view: &mut LegView) {
        view.small_read_us = self.small_read_us();
        view.large_read_us = self.large_read_us();
        view.read_bandwidth = self.read_bandwidth();
        view.seek_us = self.seek_us();
    }
}

fn round_us(x: f64) -> u32 {
    x.round().clamp(0.0, f64::from(u32::MAX)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unmeasured_until_recorded() {
        let s = ServiceTime::new();
        let mut v = LegView::default();
        s.fill(&mut v);
        assert_eq!(v, LegView::default());
    }

    #[test]
    fn serial_reads_give_their_latency() {
        let mut s = ServiceTime::new();
        let mut now = 0;
        for _ in 0..50 {
            now += 1000;
            s.record(4096, 200, now);
        }
        assert_eq!(s.small_read_us(), Some(200));
        assert_eq!(s.large_read_us(), None);
    }

    #[test]
    fn overlapping_reads_give_the_inverse_throughput() {
        // 16 in flight, one completing every 80 µs, each after 1280 µs.
        let mut s = ServiceTime::new();
        let mut now = 10_000;
        for _ in 0..200 {
            now += 80;
            s.record(32768, 1280, now);
        }
        assert_eq!(s.small_read_us(), Some(80));
    }

    #[test]
    fn queue_normalised_service_time() {
        // A parallel device: every read takes 100 µs however many are in flight.
        let mut s = ServiceTime::new();
        for i in 0..100 {
            s.record_queued(4096, 100, 1000 + i * 10, None, Some(9));
        }
        assert_eq!(s.small_read_us(), Some(10));
        // (9 + 1) x 10 µs: a tenth read expected to take the same 100 µs.
    }

    #[test]
    fn bandwidth_and_seek_cost() {
        // 1 MiB contiguous reads at 100 MB/s (10486 µs); 1 MiB jumps cost 8 ms more.
        let mut s = ServiceTime::new();
        let mut now = 0;
        for i in 0..100 {
            let jump = i % 4 == 0;
            let st = 10_486 + if jump { 8000 } else { 0 };
            now += st;
            s.record_at(1 << 20, st, now, Some(!jump));
        }
        let bw = s.read_bandwidth().unwrap();
        assert!((99_000_000..101_000_000).contains(&bw), "{bw}");
        let seek = s.seek_us().unwrap();
        assert!((7900..8100).contains(&seek), "{seek}");
    }

    #[test]
    fn old_figures_give_way_to_new_ones() {
        let mut s = ServiceTime::new();
        let mut now = 0;
        for _ in 0..100 {
            now += 6000;
            s.record(4096, 5000, now);
        }
        assert_eq!(s.small_read_us(), Some(5000));
        // Two seconds later (four half-lives), one sample nearly replaces the mean.
        now += 2_000_000;
        s.record(4096, 100, now);
        let v = s.small_read_us().unwrap();
        assert!(v < 500, "{v}");
        // While frequent samples move it by 1/8 at least.
        let before = s.small_read_us().unwrap();
        s.record(4096, 10_000, now + 20_000);
        assert!(s.small_read_us().unwrap() > before + 1000);
    }
}
