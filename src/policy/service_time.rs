//! Per-leg service-time estimator: time-decayed means of what reads cost on a leg, measured at
//! completion. The engine keeps one per leg (behind a lock) and the simulator uses the same
//! code, so the policies see the same figures in both.
//!
//! - Per queue slot: when the caller says how many requests were ahead of the read, its
//!   service time is `elapsed / (ahead + 1)`, so that `(queue + 1) x service time` predicts
//!   when a new read would finish, on serial disks and on parallel flash alike. Otherwise
//!   overlap-corrected, as dm-multipath's
//!   historical-service-time: `completion - max(submission, previous completion on this
//!   leg)`, the time the read added to the leg's busy time. One read's figure is exact on a
//!   device that completes reads one by one and meaningless on one that completes them in
//!   batches (a cgroup-throttled loop device releases several reads per timer tick: the first
//!   of a batch shows the whole wait, the others nearly none), but their sum is the busy time
//!   either way; so the bandwidth is total bytes over total busy time, never an average of
//!   per-read rates. (Averaged per read and split by whether a read continued the previous
//!   one, the bench rig's 150 MB/s legs measured 1,000 MB/s with 13 ms seeks.)
//! - Time-decayed: each mean moves towards a new sample by at least 1/8 (Kai Krakow's EMA on
//!   the btrfs list) and by more when the previous sample is old (half-life
//!   [`ServiceTime::HALF_LIFE_US`]), so a leg's figures follow its present, not its history.
//! - Small (<= [`SMALL_READ_MAX`]) and large reads apart; bandwidth from large reads; the
//!   positioning cost from large reads handed to an idle leg that did not continue where its
//!   previous read ended ([`ServiceTime::seek_us`]). Small reads do not count for it: on a device with an
//!   IOPS limit (a USB stick, a cloud volume, the bench rig's throttled loop devices) every
//!   request costs at least `1 / iops` wherever it lands, and a small random read's cost, set
//!   against the bandwidth of large ones, looks like a seek that is not there (320 IOPS at
//!   150 MB/s: 2.9 ms of "seek" per 32 KiB read).

use super::{LegView, SMALL_READ_MAX};

/// A time-decayed exponential mean. Until it has `1 / alpha` samples it is their plain mean
/// (the first sample would otherwise weigh as much as the next `1 / alpha` together).
#[derive(Clone, Debug, Default)]
struct Ewma {
    value: f64,
    last_us: u64,
    samples: u32,
}

impl Ewma {
    fn add(&mut self, x: f64, now_us: u64, half_life_us: u64) {
        self.add_weighted(x, now_us, half_life_us, ServiceTime::ALPHA);
    }

    /// As `add`, a new sample weighing at least `alpha`.
    fn add_weighted(&mut self, x: f64, now_us: u64, half_life_us: u64, alpha: f64) {
        let age = now_us.saturating_sub(self.last_us) as f64;
        let decay = 1.0 - (-(age / half_life_us as f64) * std::f64::consts::LN_2).exp();
        self.add_with(x, decay.max(alpha));
        self.last_us = self.last_us.max(now_us);
    }

    /// A new sample weighing `alpha` whenever it comes: for means whose samples must weigh
    /// alike (a weight growing with the time since the previous sample would favour the
    /// samples that come after a wait, which on a device completing in batches are the slow
    /// ones).
    fn add_with(&mut self, x: f64, alpha: f64) {
        self.samples = self.samples.saturating_add(1);
        let a = alpha.max(1.0 / f64::from(self.samples));
        self.value += a * (x - self.value);
    }

    fn get(&self) -> Option<f64> {
        (self.samples > 0).then_some(self.value)
    }
}

/// One leg's read service times.
#[derive(Clone, Debug, Default)]
pub struct ServiceTime {
    small_us: Ewma,
    large_us: Ewma,
    /// Large reads (but the jumps below): overlap-corrected busy time and bytes, averaged apart, so that their
    /// ratio is bytes over busy time (a mean of per-read ratios would weigh a read that
    /// completed in the same batch as the previous one, nearly free, as much as the one that
    /// waited for the batch).
    large_busy_us: Ewma,
    large_bytes: Ewma,
    /// Large reads handed to an idle leg (nothing of ours in flight) that did not continue
    /// its previous read: time from hand-over to completion, and size. Nothing else shares
    /// that time, so what it holds beyond the bytes at the leg's bandwidth is the
    /// positioning cost.
    jump_us: Ewma,
    jump_bytes: Ewma,
    /// When the last of those completed.
    last_jump_us: Option<u64>,
    last_finish_us: Option<u64>,
}

impl ServiceTime {
    /// The smallest weight of a new sample.
    pub const ALPHA: f64 = 1.0 / 8.0;
    /// A jump measures the positioning cost only if its leg had been idle this long, µs.
    pub const SEEK_IDLE_US: u64 = 10_000;
    /// The weight of a new sample of the bandwidth: one read's busy time says little on a
    /// device that completes reads in batches, so the bandwidth averages the last 64 reads or
    /// so, each alike (not time-decayed).
    pub const BANDWIDTH_ALPHA: f64 = 1.0 / 64.0;
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
        let idle_before = self
            .last_finish_us
            .map_or(u64::MAX, |f| start.saturating_sub(f));
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
            return;
        }
        self.large_us.add(mean, now_us, h);
        // A jump on a leg idle for a while: its elapsed time is its own, and no device state
        // left by the reads before it is charged to it (a throttle whose budget the previous
        // reads used up makes the next read wait for a tick even when idle; after 10 ms the
        // budget is back, a disk's seek is not). Without the queue known, the
        // overlap-corrected time is the best there is. It measures the positioning cost and
        // stays out of the bandwidth (the first read on a leg would otherwise set both).
        let alone = match queued {
            Some(q) => (q == 0 && idle_before >= Self::SEEK_IDLE_US).then_some(elapsed_us as f64),
            None => Some(st),
        };
        if let (Some(false), Some(t)) = (contiguous, alone) {
            self.jump_us.add(t, now_us, h);
            self.jump_bytes.add(bytes as f64, now_us, h);
            self.last_jump_us = Some(now_us);
        } else {
            self.large_busy_us.add_with(st, Self::BANDWIDTH_ALPHA);
            self.large_bytes
                .add_with(bytes as f64, Self::BANDWIDTH_ALPHA);
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

    /// Bandwidth of large reads, bytes per second: their bytes over the busy time they took.
    pub fn read_bandwidth(&self) -> Option<u64> {
        Some((1e6 * self.large_bytes.get()? / self.large_busy_us.get()?.max(1e-6)) as u64)
    }

    /// How many large reads the bandwidth rests on (0 while there is none).
    pub fn read_bandwidth_reads(&self) -> u32 {
        self.large_bytes.samples
    }

    /// Mean positioning cost, µs: how much longer than its bytes at [`read_bandwidth`] a large
    /// read handed to an idle leg took when it did not continue the leg's previous read.
    /// `None` until such a read has been seen.
    ///
    /// [`read_bandwidth`]: Self::read_bandwidth
    pub fn seek_us(&self) -> Option<u32> {
        let upb = self.large_busy_us.get()? / self.large_bytes.get()?.max(1.0);
        let t = self.jump_us.get()?;
        let bytes = self.jump_bytes.get()?;
        Some(round_us((t - bytes * upb).max(0.0)))
    }

    /// Copies the figures into a leg view.
    pub fn fill(&self, view: &mut LegView) {
        view.small_read_us = self.small_read_us();
        view.large_read_us = self.large_read_us();
        view.read_bandwidth = self.read_bandwidth();
        view.read_bandwidth_reads = self.read_bandwidth_reads();
        view.seek_us = self.seek_us();
        view.seek_sampled_us = self.last_jump_us;
        view.last_done_us = self.last_finish_us;
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
        // A stream of 1 MiB reads at 100 MB/s (10486 µs each), 4 in flight; every 20th is a
        // jump handed to the leg after 20 ms idle, costing 8 ms more.
        let mut s = ServiceTime::new();
        let mut now = 0;
        for i in 0..200 {
            let jump = i % 20 == 0;
            let st = 10_486 + if jump { 8000 } else { 0 };
            if jump {
                now += 20_000;
            }
            now += st;
            let (elapsed, queued) = if jump { (st, 0) } else { (4 * st, 3) };
            s.record_queued(1 << 20, elapsed, now, Some(!jump), Some(queued));
        }
        // The bandwidth is what the leg delivered lately, jumps included: between 100 MB/s
        // and 20 MiB per 217.7 ms (96 MB/s), as the last jump is recent or not.
        let bw = s.read_bandwidth().unwrap();
        assert!((96_000_000..100_500_000).contains(&bw), "{bw}");
        // A jump costs 8 ms more than a read at that rate, less what the jumps add to it.
        let seek = s.seek_us().unwrap();
        assert!((7500..8100).contains(&seek), "{seek}");
        // Jumps with reads queued ahead are not positioning samples: their time is not their
        // own; nor are jumps on a leg idle for less than 10 ms.
        let mut v = LegView::default();
        s.fill(&mut v);
        let sampled = v.seek_sampled_us;
        for _ in 0..50 {
            now += 20_000;
            s.record_queued(1 << 20, 60_000, now, Some(false), Some(2));
        }
        for _ in 0..50 {
            now += 13_000;
            s.record_queued(1 << 20, 10_000, now, Some(false), Some(0));
        }
        s.fill(&mut v);
        assert_eq!(v.seek_sampled_us, sampled);
    }

    #[test]
    fn batched_completions_give_the_right_bandwidth() {
        // A throttled device at 150 MB/s that completes reads in pairs: each pair 14 ms after
        // the previous, the second of a pair at once. Per-read rates would average 2 x 150
        // MB/s and nothing; bytes over busy time give 150. (Weighted by the time since the
        // previous sample, the slow first of each pair would count more: on the rig that
        // read 150 MB/s legs as 32.)
        let mut s = ServiceTime::new();
        let mut now = 100_000;
        for i in 0..100 {
            now += if i % 2 == 0 { 13_980 } else { 1 };
            s.record_queued(1 << 20, 14_000, now, Some(i % 2 == 1), Some(1));
        }
        let bw = s.read_bandwidth().unwrap();
        assert!((145_000_000..155_000_000).contains(&bw), "{bw}");
    }

    #[test]
    fn small_jumps_are_no_seek() {
        // An IOPS-limited device (320 IOPS, 150 MB/s): 32 KiB random reads take 3.1 ms each,
        // 1 MiB reads 7 ms whether they continue the previous one or not. No positioning cost.
        let mut s = ServiceTime::new();
        let mut now = 0;
        for _ in 0..200 {
            now += 3125;
            s.record_at(32768, 3125, now, Some(false));
        }
        assert_eq!(s.seek_us(), None);
        for i in 0..40 {
            now += 6990;
            s.record_at(1 << 20, 6990, now, Some(i % 8 != 0));
        }
        assert!(s.seek_us().unwrap() < 100, "{:?}", s.seek_us());
        let mut v = LegView::default();
        s.fill(&mut v);
        assert_eq!(v.seek_sampled_us, Some(now - 7 * 6990));
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
