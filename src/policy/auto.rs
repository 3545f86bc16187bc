//! `auto`: mirrorfs's own policy, and the default. One cost drives everything, the expected
//! completion time of the read on a leg (dm-multipath historical-service-time, GlusterFS AFR
//! mode 5, with ZFS's position term):
//!
//! ```text
//! cost(L) = (load(L) + 1) x service(L, size) + (the read continues L's position ? 0 : seek(L))
//! ```
//!
//! - `load` is the leg's outstanding requests ([`outstanding`]) minus this stream's own (a
//!   stream waiting behind its own reads is not competing with anyone: without this a lone
//!   stream would flee its own queue and ping-pong);
//! - `service` is the measured, time-decayed service time for this size class (bandwidth for
//!   large reads); a leg not yet measured counts as fast as the fastest measured one, so it gets
//!   reads and a measurement (the rotational flag is not used for speed); legs within 30 % of
//!   the fastest count as equally fast (the estimates are noisy; dm-multipath HST does the
//!   same), so that on equal legs the queues alone decide;
//! - `seek` is the leg's measured positioning cost ([`LegView::seek_us`]); only sequential
//!   reads pay it (a random read's service time already holds it). A leg not yet measured
//!   counts as the best measured leg; with nothing measured, 8 ms for a rotational leg and 0
//!   otherwise (the only use of the flag: a prior).
//!
//! The decision:
//!
//! 1. Random reads (and the first read of a stream) go to the leg of least cost, at random
//!    among exact ties, while that leg is idle. Once it is busy, a deep queue of random reads
//!    is a question of throughput, not of one read's latency: they go by queue length over
//!    every leg measured for that read size whose service time is within 16 times the
//!    fastest (an SSD with a USB stick: the stick keeps a few reads in flight and adds its
//!    whole speed; first measured with the cost rule alone, the stick got too few reads and
//!    the pair stayed at the SSD's speed). Slower legs (a disk next to an SSD) get random
//!    reads only when the cost says they answer sooner.
//! 2. A sequential stream with reads in flight, on legs of the same speed whose positioning
//!    cost is small beside a read's own time (under half of it; three quarters to stay), is
//!    spread: each whole read goes to the leg where it ends soonest, the stream's own reads
//!    counted as load ([`ReadPlan::Spread`]; the stream keeps its leg). Two such legs give
//!    nearly twice one leg, whatever their rotational flag says: the bench rig's throttled
//!    "HDDs". On a disk a skipped read costs about what reading it would, so disks never
//!    qualify.
//! 3. A confirmed stream on one leg sends one whole read to an idle leg of the same speed
//!    when that leg's positioning figure is missing or 2 s old and the figures keep the
//!    stream from spreading (a probe: one read's time every 2 s on a disk pair; the first
//!    time, the read after it too, for the leg's bandwidth), so that a figure taken once, or
//!    the rotational prior, does not decide for good. The stream's own leg is busy and
//!    measures nothing new: once its figure is 2 s old, a fresh one of a leg of the same
//!    speed stands for it.
//! 4. A sequential read stays on its stream's leg unless all of: the stream has read at least
//!    the minimum run there, has been there for the dwell time, and another leg's cost, its
//!    seek included, is lower by the hysteresis margin. Positional legs (measured seek >= 1 ms):
//!    8 MiB, 250 ms, 25 %; others: 1 MiB, 10 ms, 10 %. So a stream on a disk pair stays put,
//!    and streams spread over legs by where they start, and rebalance slowly.
//! 5. A confirmed sequential stream (8 MiB read contiguously) reading at least 256 KiB at a
//!    time is split over several legs when that finishes the read sooner by 30 % (10 % to stay
//!    split): each leg gets one contiguous piece, sized by its bandwidth and its current load
//!    so that all pieces end together (a straggler sets the pace otherwise), at least
//!    128 KiB, boundaries on 64 KiB. (A 10 % threshold with 64 KiB pieces made an SSD + USB
//!    stick pair slower in the simulator: rounding and the stick's latency ate the gain.)
//!    Legs with a positioning cost get a piece only if the gain pays for their seek, which,
//!    for real disks, it does not at these sizes: the RAID10-far effect needs the far
//!    layout; on flash or throttled devices it is close to N x one leg. With reads in flight
//!    on legs of the same speed rule 2 comes first: whole reads keep their size, which a
//!    device with an IOPS limit needs (the rig's 320 IOPS make any piece under 468 KiB
//!    IOPS-bound).
//!
//! Weak spots (see `docs/policies.md`): the load of a leg counts requests, not bytes, so a leg
//! full of small reads and one with a few large ones compare roughly; own-load subtraction is
//! approximate for split streams; a leg judged slow is measured again only when the others'
//! queues send reads its way (the probe of rule 3 is for the positioning cost of legs of the
//! same speed).

use super::LegIdx;

use super::service_time::ServiceTime;
use super::{
    outstanding, pick_min_random, readable, service_estimates, LegView, ReadPiece, ReadPlan,
    ReadPolicy, ReadRequest, TieBreak, SPLIT_ALIGN,
};

/// Positioning cost assumed for a rotational leg before anything is measured, µs.
const ROTATIONAL_SEEK_PRIOR_US: f64 = 8000.0;
/// A leg whose positioning cost is at least this is treated as a disk (stickier), µs.
const POSITIONAL_SEEK_US: f64 = 1000.0;
/// Legs whose service times are within this ratio of the fastest count as equally fast.
const SAME_SPEED: f64 = 1.3;
/// Random reads: legs within this fraction of the least cost share the reads (0: exact ties
/// only; a band sends reads to legs that are slightly worse, which costs throughput).
const RANDOM_BAND: f64 = 0.0;
/// Random reads go by queue length over every leg whose service time is within this factor
/// of the fastest, once the fastest leg is busy: a deep queue of random reads is a throughput
/// question, and a slower leg that keeps a few reads in flight adds its whole speed (an SSD
/// with a USB stick: the stick is 8 times slower per read and adds its 50 MB/s). Legs slower
/// than that (a disk next to an SSD: hundreds of times) get random reads by expected
/// completion time only.
const THROUGHPUT_RATIO: f64 = 16.0;

/// Stickiness of a sequential stream on a positional leg and on others.
struct Stickiness {
    min_run: u64,
    dwell_us: u64,
    hysteresis: f64,
}

const DISK_STICKINESS: Stickiness = Stickiness {
    min_run: 8 << 20,
    dwell_us: 250_000,
    hysteresis: 0.25,
};
const FLASH_STICKINESS: Stickiness = Stickiness {
    min_run: 1 << 20,
    dwell_us: 10_000,
    hysteresis: 0.10,
};

/// A stream is split only once it has read this much contiguously.
pub const SPLIT_MIN_RUN: u64 = 8 << 20;
/// Smallest piece of a split read.
pub const SPLIT_MIN_PIECE: u64 = 128 << 10;
const SPLIT_GAIN_ENTER: f64 = 1.3;
const SPLIT_GAIN_STAY: f64 = 1.1;
/// A stream spreads its reads over legs whose positioning cost is below this fraction of the
/// time one read takes there: spread over two legs, each leg skips the other's reads, so a
/// read costs its transfer plus a positioning, and two legs give `2 / (1 + fraction)` times
/// one (1.33 here). On a disk a skip costs about what reading the bytes would (the platter
/// passes under the head either way), so disks never qualify; flash and throttled devices do.
pub const SPREAD_SEEK_ENTER: f64 = 0.5;
/// ... and stays spread below this one (1.14 times one leg; the estimates are noisy).
pub const SPREAD_SEEK_STAY: f64 = 0.75;
/// A stream on one leg re-measures the positioning cost of an idle leg this often, µs.
pub const PROBE_INTERVAL_US: u64 = 2_000_000;

pub struct Auto {
    ties: TieBreak,
}

impl Auto {
    pub fn new() -> Auto {
        Auto {
            ties: TieBreak::default(),
        }
    }
}

impl Default for Auto {
    fn default() -> Auto {
        Auto::new()
    }
}

/// What the decision knows of each candidate, in candidate order.
struct Costs {
    /// Service time of one read of this size, µs.
    svc: Vec<f64>,
    /// Positioning cost, µs.
    seek: Vec<f64>,
    /// Outstanding requests not this stream's.
    load: Vec<f64>,
    /// The read continues this leg's position (no seek).
    continues: Vec<bool>,
}

impl Costs {
    fn new(c: &[LegView], req: &ReadRequest) -> Costs {
        let mut svc = service_estimates(c, req.size);
        // Service times within SAME_SPEED of the fastest count as equal (dm-multipath HST's
        // threshold_multiplier): the estimates are noisy, and on equal legs the queues alone
        // should decide.
        let fastest = svc.iter().copied().fold(f64::INFINITY, f64::min);
        for s in &mut svc {
            if *s <= fastest * SAME_SPEED {
                *s = fastest;
            }
        }
        let measured: Vec<f64> = c.iter().filter_map(|l| l.seek_us.map(f64::from)).collect();
        let best_seek = measured.iter().copied().fold(f64::INFINITY, f64::min);
        let seek = c
            .iter()
            .map(|l| match l.seek_us {
                Some(s) => f64::from(s),
                None if best_seek.is_finite() => best_seek,
                None if l.rotational => ROTATIONAL_SEEK_PRIOR_US,
                None => 0.0,
            })
            .collect();
        let s = &req.stream;
        let load = c
            .iter()
            .map(|l| {
                let own = if s.split || s.leg == Some(l.idx) {
                    s.inflight
                } else {
                    0
                };
                f64::from(outstanding(l).saturating_sub(own))
            })
            .collect();
        let continues = c
            .iter()
            .map(|l| {
                (s.sequential && s.leg == Some(l.idx) && !s.split)
                    || l.last_read_end == Some((req.file, req.offset))
            })
            .collect();
        Costs {
            svc,
            seek,
            load,
            continues,
        }
    }

    /// Expected completion time of the whole read on leg `i`, µs.
    fn one(&self, i: usize, sequential: bool) -> f64 {
        let position = if sequential && !self.continues[i] {
            self.seek[i]
        } else {
            0.0
        };
        (self.load[i] + 1.0) * self.svc[i] + position
    }
}

impl ReadPolicy for Auto {
    fn name(&self) -> String {
        "auto".to_string()
    }

    fn pick(&self, candidates: &[LegView], req: &ReadRequest) -> ReadPlan {
        let c = readable(candidates);
        if c.len() == 1 {
            return ReadPlan::One(c[0].idx);
        }
        let k = Costs::new(&c, req);
        let s = &req.stream;
        let cur = s
            .leg
            .and_then(|leg| c.iter().position(|l| l.idx == leg))
            .filter(|_| s.sequential);
        let Some(cur) = cur else {
            let cost: Vec<f64> = (0..c.len()).map(|i| k.one(i, s.sequential)).collect();
            let best = pick_min_random(&cost, RANDOM_BAND, &self.ties);
            if !s.sequential && k.load[best] >= 1.0 {
                let fastest = k.svc.iter().copied().fold(f64::INFINITY, f64::min);
                // Only legs measured for reads of this size (a disk serving a stream has no
                // small-read figure, and must not get random reads by queue length).
                let measured = |l: &LegView| {
                    if req.size <= super::SMALL_READ_MAX {
                        l.small_read_us.is_some()
                    } else {
                        l.large_read_us.is_some()
                    }
                };
                let queue: Vec<f64> = (0..c.len())
                    .map(|i| {
                        let eligible = i == best
                            || (k.svc[i] <= fastest * THROUGHPUT_RATIO && measured(&c[i]));
                        if eligible {
                            k.load[i]
                        } else {
                            f64::INFINITY
                        }
                    })
                    .collect();
                return ReadPlan::One(c[pick_min_random(&queue, 0.0, &self.ties)].idx);
            }
            return ReadPlan::One(c[best].idx);
        };
        if let Some(i) = spread(&c, &k, req, cur, &self.ties) {
            return ReadPlan::Spread(c[i].idx);
        }
        if let Some(i) = probe(&c, &k, req, cur) {
            return ReadPlan::Spread(c[i].idx);
        }
        let stay = k.one(cur, true);
        if let Some((pieces, t)) = split(&c, &k, req) {
            let need = if s.split {
                SPLIT_GAIN_STAY
            } else {
                SPLIT_GAIN_ENTER
            };
            if stay >= t * need {
                return ReadPlan::Split(pieces);
            }
        }
        let rule = if k.seek[cur] >= POSITIONAL_SEEK_US {
            &DISK_STICKINESS
        } else {
            &FLASH_STICKINESS
        };
        // Leaving split mode: back to one leg, the best one, without the stickiness wait.
        let settled = s.split
            || (s.leg_run_bytes >= rule.min_run
                && req.now_us.saturating_sub(s.leg_since_us) >= rule.dwell_us);
        if settled {
            let (best, best_cost) = (0..c.len())
                .filter(|&i| i != cur)
                .map(|i| (i, k.one(i, true)))
                .fold((cur, f64::INFINITY), |a, b| if b.1 < a.1 { b } else { a });
            let margin = if s.split { 1.0 } else { 1.0 + rule.hysteresis };
            if best != cur && best_cost * margin < stay {
                return ReadPlan::One(c[best].idx);
            }
        }
        ReadPlan::One(c[cur].idx)
    }
}

/// Where a sequential stream's read goes when the stream is spread over legs without a
/// positioning cost (flash, throttled devices, whatever the rotational flag says): the stream
/// has other reads in flight, its leg and at least one other are equally fast and their
/// positioning cost ([`spreading_seeks`]) is small beside the read's own time
/// ([`SPREAD_SEEK_ENTER`] of it, or [`SPREAD_SEEK_STAY`] while the stream is spread). Then each
/// whole read goes to the leg where it ends soonest, the stream's own reads counted as load:
/// with 4 reads in flight on two legs, two on each, every read at full size. Splitting each
/// read instead halves the requests' size, which a device with an IOPS limit pays for (the
/// bench rig: 320 IOPS and 150 MB/s, so any piece under 468 KiB is IOPS-bound). A lone read
/// at a time (`inflight` 0) is left to [`split`]. Candidate index, or `None`.
fn spread(
    c: &[LegView],
    k: &Costs,
    req: &ReadRequest,
    cur: usize,
    ties: &TieBreak,
) -> Option<usize> {
    let s = &req.stream;
    if !s.sequential || s.inflight == 0 {
        return None;
    }
    let limit = if s.spread {
        SPREAD_SEEK_STAY
    } else {
        SPREAD_SEEK_ENTER
    };
    // Measured figures only: a bandwidth for the leg, and a positioning cost measured on
    // some leg (a leg not yet measured counts as the best measured one).
    if c.iter().all(|l| l.seek_us.is_none()) {
        return None;
    }
    let seek = spreading_seeks(c, k, req.now_us);
    let fastest = k.svc.iter().copied().fold(f64::INFINITY, f64::min);
    let eligible = |i: usize| {
        c[i].read_bandwidth.is_some() && k.svc[i] <= fastest && seek[i] < limit * k.svc[i]
    };
    if !eligible(cur) || (0..c.len()).filter(|&i| eligible(i)).count() < 2 {
        return None;
    }
    // A spread stream keeps its legs busy, and a busy leg measures no positioning cost. So
    // the eligible leg whose figure is oldest, once older than the probe interval, rests: it
    // gets no read until it has drained and stood idle long enough for its next read, a
    // jump, to measure one ([`ServiceTime::SEEK_IDLE_US`]). Its seek may have grown meanwhile
    // (another user of the disk); without this the stream would read it as seek-free until
    // it stops. It costs one leg a read's time and the idle wait every 2 s.
    let resting = (0..c.len())
        .filter(|&i| eligible(i) && !seek_sampled_lately(&c[i], req.now_us))
        .min_by_key(|&i| c[i].seek_sampled_us)
        .filter(|&i| {
            outstanding(&c[i]) > 0
                || c[i]
                    .last_done_us
                    .is_some_and(|t| req.now_us.saturating_sub(t) < ServiceTime::SEEK_IDLE_US)
        });
    let cost: Vec<f64> = (0..c.len())
        .map(|i| {
            if !eligible(i) || resting == Some(i) {
                return f64::INFINITY;
            }
            let position = if c[i].last_read_end == Some((req.file, req.offset)) {
                0.0
            } else {
                k.seek[i]
            };
            (f64::from(outstanding(&c[i])) + 1.0) * k.svc[i] + position
        })
        .collect();
    Some(pick_min_random(&cost, 0.0, ties))
}

/// The leg measured its positioning cost less than [`PROBE_INTERVAL_US`] ago.
fn seek_sampled_lately(l: &LegView, now_us: u64) -> bool {
    l.seek_sampled_us
        .is_some_and(|t| now_us.saturating_sub(t) < PROBE_INTERVAL_US)
}

/// The positioning costs the spreading decision uses: a leg's own figure while it is fresh
/// (sampled less than [`PROBE_INTERVAL_US`] ago); otherwise the lowest fresh figure of a leg
/// of the same speed, if there is one. A stream's own leg is never idle, so it
/// never measures a new figure while the stream reads from it: without this, the figure of
/// the stream's first read (cold, or caught by a throttle's tick) would decide for good.
fn spreading_seeks(c: &[LegView], k: &Costs, now_us: u64) -> Vec<f64> {
    let fresh = |l: &LegView| l.seek_us.is_some() && seek_sampled_lately(l, now_us);
    (0..c.len())
        .map(|i| {
            if fresh(&c[i]) {
                return k.seek[i];
            }
            (0..c.len())
                .filter(|&j| j != i && k.svc[j] == k.svc[i] && fresh(&c[j]))
                .map(|j| k.seek[j])
                .reduce(f64::min)
                .unwrap_or(k.seek[i])
        })
        .collect()
}

/// A stream that stays on one leg learns nothing more of the others' positioning cost (and
/// its own leg, busy with it, nothing of its own). So a confirmed stream on one leg sends one
/// whole read to an idle leg of the same speed when that leg's figure is missing or older
/// than [`PROBE_INTERVAL_US`] and the figures keep the stream from spreading: the idle leg
/// measures a jump, which also stands for the stream's own leg once that one's figure is old
/// ([`spreading_seeks`]). On a disk pair this costs one read's time every 2 s; on seek-free
/// legs flagged rotational it is how a stream finds out it may spread. Candidate index, or
/// `None`.
fn probe(c: &[LegView], k: &Costs, req: &ReadRequest, cur: usize) -> Option<usize> {
    let s = &req.stream;
    if !s.sequential || s.split || s.run_bytes < SPLIT_MIN_RUN || req.size <= super::SMALL_READ_MAX
    {
        return None;
    }
    if s.spread {
        // The read after a probe follows it when the probed leg has no bandwidth figure yet:
        // the probe, a jump, measured only the positioning; a contiguous read measures the
        // rest (without it, the leg's one large read, seek included, makes it look slower
        // than it is, and it is never probed again).
        return (0..c.len()).find(|&j| {
            j != cur
                && c[j].last_read_end == Some((req.file, req.offset))
                && c[j].read_bandwidth.is_none()
                && outstanding(&c[j]) <= 1
        });
    }
    let fastest = k.svc.iter().copied().fold(f64::INFINITY, f64::min);
    let seek = spreading_seeks(c, k, req.now_us);
    (0..c.len())
        .filter(|&j| {
            j != cur
                && k.svc[j] <= fastest
                && outstanding(&c[j]) == 0
                && !seek_sampled_lately(&c[j], req.now_us)
                && seek[j].max(seek[cur]) >= SPREAD_SEEK_ENTER * fastest
        })
        .min_by_key(|&j| c[j].seek_sampled_us)
}

/// The split of a confirmed stream's read that ends soonest, and when it ends (µs from now),
/// or `None` if the stream does not qualify or fewer than two legs would get a piece.
fn split(c: &[LegView], k: &Costs, req: &ReadRequest) -> Option<(Vec<ReadPiece>, f64)> {
    let size = u64::from(req.size);
    if !req.stream.sequential || req.stream.run_bytes < SPLIT_MIN_RUN || size < 2 * SPLIT_MIN_PIECE
    {
        return None;
    }
    // Per leg: rate (bytes per µs) and when it could start on a piece (µs).
    let mut legs: Vec<(usize, f64, f64)> = (0..c.len())
        .map(|i| {
            let rate = size as f64 / k.svc[i];
            let start = k.load[i] * k.svc[i]
                + if c[i].last_read_end == Some((req.file, req.offset)) {
                    0.0
                } else {
                    k.seek[i]
                };
            (i, rate, start)
        })
        .collect();
    // Water-filling: all active legs finish at t; a leg that cannot start before t, or whose
    // piece would be too small, drops out.
    let (t, shares) = loop {
        let rates: f64 = legs.iter().map(|l| l.1).sum();
        let t = (size as f64 + legs.iter().map(|l| l.1 * l.2).sum::<f64>()) / rates;
        let shares: Vec<f64> = legs.iter().map(|l| l.1 * (t - l.2)).collect();
        let worst = (0..legs.len())
            .filter(|&j| shares[j] < SPLIT_MIN_PIECE as f64)
            .min_by(|&a, &b| shares[a].total_cmp(&shares[b]));
        match worst {
            Some(j) if legs.len() > 2 => {
                legs.remove(j);
            }
            Some(_) => return None,
            None => break (t, shares),
        }
    };
    // The leg that continues at the read's offset takes the first piece; then leg order.
    let mut order: Vec<usize> = (0..legs.len()).collect();
    order.sort_by_key(|&j| {
        let i = legs[j].0;
        (c[i].last_read_end != Some((req.file, req.offset)), c[i].idx)
    });
    let end = req.offset + size;
    let mut pieces = Vec::with_capacity(order.len());
    let mut at = req.offset;
    let mut acc = 0.0;
    for (n, &j) in order.iter().enumerate() {
        acc += shares[j];
        let stop = if n + 1 == order.len() {
            end
        } else {
            let raw = req.offset + acc.round() as u64;
            (raw + SPLIT_ALIGN / 2) / SPLIT_ALIGN * SPLIT_ALIGN
        };
        let stop = stop.min(end);
        if stop > at {
            pieces.push(ReadPiece {
                leg: c[legs[j].0].idx as LegIdx,
                offset: at,
                len: (stop - at) as u32,
            });
            at = stop;
        }
    }
    if pieces.len() < 2 {
        return None;
    }
    Some((pieces, t))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::super::StreamView;
    use super::*;

    const MIB: u64 = 1 << 20;

    /// A leg with measured figures: small-read µs, bandwidth MB/s, seek µs.
    fn measured(idx: usize, inflight: u32, small: u32, mbs: u64, seek: u32) -> LegView {
        LegView {
            small_read_us: Some(small),
            large_read_us: Some((MIB * 1_000_000 / (mbs * 1_000_000)) as u32),
            read_bandwidth: Some(mbs * 1_000_000),
            seek_us: Some(seek),
            seek_sampled_us: Some(900_000),
            ..leg(idx, inflight)
        }
    }

    fn hdd(idx: usize, inflight: u32) -> LegView {
        LegView {
            rotational: true,
            ..measured(idx, inflight, 6000, 150, 8000)
        }
    }

    fn ssd(idx: usize, inflight: u32) -> LegView {
        measured(idx, inflight, 80, 417, 0)
    }

    fn seq(
        offset: u64,
        size: u32,
        leg: usize,
        leg_run: u64,
        since: u64,
        inflight: u32,
    ) -> ReadRequest {
        ReadRequest {
            now_us: 1_000_000,
            stream: StreamView {
                sequential: true,
                run_bytes: offset,
                leg: Some(leg),
                leg_run_bytes: leg_run,
                leg_since_us: since,
                inflight,
                split: false,
                spread: false,
            },
            ..req(0, offset, size)
        }
    }

    #[test]
    fn a_stream_on_a_disk_pair_stays_on_its_own_queue() {
        let p = Auto::new();
        // The stream's own 3 reads are in flight on leg 0; leg 1 idle: stay.
        let c = [hdd(0, 3), hdd(1, 0)];
        let r = seq(64 * MIB, 1 << 20, 0, 64 * MIB, 0, 3);
        assert_eq!(p.pick(&c, &r), ReadPlan::One(0));
        // Another stream's 8 reads on leg 0 too: move (run, dwell and margin all satisfied).
        let c = [hdd(0, 11), hdd(1, 0)];
        assert_eq!(p.pick(&c, &r), ReadPlan::One(1));
        // ... but not before the minimum run, nor before the dwell time.
        let young = seq(64 * MIB, 1 << 20, 0, 4 * MIB, 0, 3);
        assert_eq!(p.pick(&c, &young), ReadPlan::One(0));
        let recent = seq(64 * MIB, 1 << 20, 0, 64 * MIB, 900_000, 3);
        assert_eq!(p.pick(&c, &recent), ReadPlan::One(0));
    }

    #[test]
    fn no_split_on_disks_split_on_flash() {
        let p = Auto::new();
        let r = seq(64 * MIB, 1 << 20, 0, 64 * MIB, 0, 0);
        assert_eq!(p.pick(&[hdd(0, 0), hdd(1, 0)], &r), ReadPlan::One(0));
        match p.pick(&[ssd(0, 0), ssd(1, 0)], &r) {
            ReadPlan::Split(pieces) => {
                assert_eq!(pieces.len(), 2);
                assert_eq!(pieces[0].offset, 64 * MIB);
                assert_eq!(pieces[0].len, 1 << 19);
                assert_eq!(pieces[1].len, 1 << 19);
                assert!(ReadPlan::Split(pieces)
                    .check(&[ssd(0, 0), ssd(1, 0)], 64 * MIB, 1 << 20)
                    .is_ok());
            }
            other => panic!("{other:?}"),
        }
        // Not a confirmed stream yet, or reads too small: no split.
        let short = ReadRequest {
            stream: StreamView {
                run_bytes: MIB,
                ..r.stream.clone()
            },
            ..r.clone()
        };
        assert_eq!(p.pick(&[ssd(0, 0), ssd(1, 0)], &short), ReadPlan::One(0));
        let small = seq(64 * MIB, 128 << 10, 0, 64 * MIB, 0, 0);
        assert_eq!(p.pick(&[ssd(0, 0), ssd(1, 0)], &small), ReadPlan::One(0));
    }

    #[test]
    fn a_stream_with_reads_in_flight_spreads_whole_reads_over_seek_free_legs() {
        let p = Auto::new();
        // The stream's own 3 reads on leg 0: the next goes whole to leg 1, the stream stays
        // on leg 0 (no split, no move); with 2 and 2, to either.
        let r = seq(64 * MIB, 1 << 20, 0, 64 * MIB, 0, 3);
        assert_eq!(p.pick(&[ssd(0, 3), ssd(1, 0)], &r), ReadPlan::Spread(1));
        let r = seq(64 * MIB, 1 << 20, 0, 64 * MIB, 0, 3);
        let mut n = [0; 2];
        for _ in 0..200 {
            n[p.pick(&[ssd(0, 2), ssd(1, 2)], &r).first_leg()] += 1;
        }
        assert!(n[0] > 60 && n[1] > 60, "{n:?}");
        // Whatever the rotational flag says: it is the measured seek that counts.
        let rig = |i, q| LegView {
            rotational: true,
            ..measured(i, q, 3125, 150, 40)
        };
        assert_eq!(p.pick(&[rig(0, 3), rig(1, 0)], &r), ReadPlan::Spread(1));
        // A disk pair (8 ms seek) does not spread; neither does a much slower leg.
        assert_eq!(p.pick(&[hdd(0, 3), hdd(1, 0)], &r), ReadPlan::One(0));
        let usb = measured(1, 0, 625, 52, 0);
        assert_eq!(p.pick(&[ssd(0, 3), usb], &r), ReadPlan::One(0));
        // A seek of 4.5 ms beside a 7 ms read: a stream does not start spreading (at most
        // 2 / 1.64 = 1.22 times one leg), but one spread already stays so.
        let noisy = |i, q| measured(i, q, 3125, 150, 4500);
        assert!(!matches!(
            p.pick(&[noisy(0, 3), noisy(1, 0)], &r),
            ReadPlan::Spread(_)
        ));
        let spread = ReadRequest {
            stream: StreamView {
                spread: true,
                ..r.stream.clone()
            },
            ..r.clone()
        };
        assert_eq!(
            p.pick(&[noisy(0, 3), noisy(1, 0)], &spread),
            ReadPlan::Spread(1)
        );
    }

    #[test]
    fn a_spread_leg_with_an_old_seek_figure_rests_until_it_can_measure_one() {
        let p = Auto::new();
        let r = ReadRequest {
            stream: StreamView {
                spread: true,
                ..seq(64 * MIB, 1 << 20, 0, 64 * MIB, 0, 2).stream
            },
            now_us: 5_000_000,
            ..seq(64 * MIB, 1 << 20, 0, 64 * MIB, 0, 2)
        };
        let rig = |i, q, sampled, done| LegView {
            rotational: true,
            seek_sampled_us: Some(sampled),
            last_done_us: Some(done),
            ..measured(i, q, 3125, 150, 40)
        };
        // Both figures fresh: the shorter queue.
        let fresh = [
            rig(0, 2, 4_000_000, 4_999_000),
            rig(1, 1, 4_000_000, 4_999_000),
        ];
        assert_eq!(p.pick(&fresh, &r), ReadPlan::Spread(1));
        // Leg 1's figure is 4 s old (older than leg 0's): it gets nothing while busy ...
        let old = [
            rig(0, 2, 2_000_000, 4_999_000),
            rig(1, 1, 1_000_000, 4_999_000),
        ];
        assert_eq!(p.pick(&old, &r), ReadPlan::Spread(0));
        // ... nor while idle for less than the seek-measuring gap ...
        let drained = [
            rig(0, 2, 2_000_000, 4_999_000),
            rig(1, 0, 1_000_000, 4_995_000),
        ];
        assert_eq!(p.pick(&drained, &r), ReadPlan::Spread(0));
        // ... and once idle that long, the next read is its (a jump, which measures).
        let rested = [
            rig(0, 2, 2_000_000, 4_999_000),
            rig(1, 0, 1_000_000, 4_980_000),
        ];
        assert_eq!(p.pick(&rested, &r), ReadPlan::Spread(1));
    }

    #[test]
    fn an_old_figure_of_the_streams_own_leg_gives_way_to_a_fresh_probe() {
        let p = Auto::new();
        let r = seq(64 * MIB, 1 << 20, 0, 64 * MIB, 0, 3);
        // Leg 0's only figure (the stream's first read, caught by a throttle's tick) says
        // 5 ms; a probe of leg 1 just now says 0.
        let at = |l: LegView, t| LegView {
            seek_sampled_us: Some(t),
            ..l
        };
        let own = |t| {
            at(
                LegView {
                    rotational: true,
                    ..measured(0, 3, 3125, 150, 5000)
                },
                t,
            )
        };
        let probed = at(
            LegView {
                rotational: true,
                ..measured(1, 0, 3125, 150, 0)
            },
            990_000,
        );
        // While leg 0's figure is fresh it stands; 2 s old, the probe's stands for it.
        assert!(!matches!(
            p.pick(&[own(900_000), probed.clone()], &r),
            ReadPlan::Spread(_)
        ));
        let later = ReadRequest {
            now_us: 2_500_000,
            ..r.clone()
        };
        let probed_later = at(probed, 2_490_000);
        assert_eq!(
            p.pick(&[own(100_000), probed_later], &later),
            ReadPlan::Spread(1)
        );
    }

    #[test]
    fn the_read_after_a_probe_follows_it_until_the_leg_has_a_bandwidth() {
        let p = Auto::new();
        let after_probe = ReadRequest {
            stream: StreamView {
                spread: true,
                ..seq(64 * MIB, 1 << 20, 0, 64 * MIB, 0, 3).stream
            },
            ..seq(64 * MIB, 1 << 20, 0, 64 * MIB, 0, 3)
        };
        let probed = |q, bw: Option<u64>| LegView {
            read_bandwidth: bw,
            last_read_end: Some((7, 64 * MIB)),
            ..hdd(1, q)
        };
        assert_eq!(
            p.pick(&[hdd(0, 3), probed(1, None)], &after_probe),
            ReadPlan::Spread(1)
        );
        // Not once the leg has a bandwidth, nor a second time while the first is in flight.
        for l in [probed(1, Some(150_000_000)), probed(2, None)] {
            assert_eq!(p.pick(&[hdd(0, 3), l], &after_probe), ReadPlan::One(0));
        }
    }

    #[test]
    fn a_stream_on_one_leg_probes_a_stale_idle_leg() {
        let p = Auto::new();
        let r = seq(64 * MIB, 1 << 20, 0, 64 * MIB, 0, 3);
        let stale = |l: LegView, at| LegView {
            seek_sampled_us: at,
            ..l
        };
        // Measured recently: no probe.
        assert_eq!(p.pick(&[hdd(0, 3), hdd(1, 0)], &r), ReadPlan::One(0));
        // The idle leg never measured, or measured 2 s ago: one whole read goes there.
        assert_eq!(
            p.pick(&[hdd(0, 3), stale(hdd(1, 0), None)], &r),
            ReadPlan::Spread(1)
        );
        let later = ReadRequest {
            now_us: 2_900_000,
            ..r.clone()
        };
        assert_eq!(
            p.pick(&[hdd(0, 3), stale(hdd(1, 0), Some(800_000))], &later),
            ReadPlan::Spread(1)
        );
        // Not while it is busy, nor for a stream not yet confirmed, nor towards a slower leg.
        assert_eq!(
            p.pick(&[hdd(0, 3), stale(hdd(1, 1), None)], &r),
            ReadPlan::One(0)
        );
        let young = ReadRequest {
            stream: StreamView {
                run_bytes: MIB,
                ..r.stream.clone()
            },
            ..r.clone()
        };
        assert_eq!(
            p.pick(&[hdd(0, 3), stale(hdd(1, 0), None)], &young),
            ReadPlan::One(0)
        );
        let slow = LegView {
            rotational: true,
            ..measured(1, 0, 12_000, 40, 8000)
        };
        assert_eq!(
            p.pick(&[hdd(0, 3), stale(slow, None)], &r),
            ReadPlan::One(0)
        );
    }

    #[test]
    fn split_pieces_follow_bandwidth() {
        let p = Auto::new();
        let c = [measured(0, 0, 80, 300, 0), measured(1, 0, 80, 100, 0)];
        let r = seq(64 * MIB, 4 << 20, 0, 64 * MIB, 0, 0);
        let ReadPlan::Split(pieces) = p.pick(&c, &r) else {
            panic!("not split")
        };
        assert_eq!(pieces[0].leg, 0);
        assert_eq!(pieces[0].len, 3 << 20);
        assert_eq!(pieces[1].len, 1 << 20);
    }

    #[test]
    fn a_much_slower_leg_gets_no_piece() {
        let p = Auto::new();
        // 417 vs 52 MB/s: at most 11 % faster, below the 30 % needed.
        let c = [ssd(0, 0), measured(1, 0, 625, 52, 0)];
        let r = seq(64 * MIB, 1 << 20, 0, 64 * MIB, 0, 0);
        assert_eq!(p.pick(&c, &r), ReadPlan::One(0));
    }

    #[test]
    fn random_reads_share_by_queue_once_the_fast_leg_is_busy() {
        let p = Auto::new();
        // A stick 8 times slower per read than the SSD: it takes reads once the SSD has a
        // queue, by queue length, and adds its speed instead of waiting for a deep SSD queue.
        let usb = |q| measured(1, q, 625, 52, 0);
        for (ssd_q, usb_q, want) in [(0, 0, 0), (1, 0, 1), (6, 0, 1), (6, 4, 1), (3, 5, 0)] {
            assert_eq!(
                p.pick(&[ssd(0, ssd_q), usb(usb_q)], &req(0, 12345 << 15, 32768)),
                ReadPlan::One(want),
                "ssd {ssd_q} usb {usb_q}"
            );
        }
        // A leg hundreds of times slower (a disk): only by expected completion time.
        let disk = |q| measured(1, q, 8000, 150, 8000);
        for (ssd_q, want) in [(6, 0), (80, 0), (120, 1)] {
            assert_eq!(
                p.pick(&[ssd(0, ssd_q), disk(0)], &req(0, 12345 << 15, 32768)),
                ReadPlan::One(want),
                "ssd {ssd_q} disk 0"
            );
        }
    }

    #[test]
    fn random_reads_spread_over_equal_legs() {
        let p = Auto::new();
        let mut n = [0; 2];
        for _ in 0..1000 {
            n[p.pick(&[hdd(0, 2), hdd(1, 2)], &req(0, 0, 4096))
                .first_leg()] += 1;
        }
        assert!(n[0] > 400 && n[1] > 400, "{n:?}");
        assert_eq!(
            p.pick(&[hdd(0, 2), hdd(1, 1)], &req(0, 0, 4096)),
            ReadPlan::One(1)
        );
    }

    #[test]
    fn unmeasured_legs_are_tried_and_the_flag_is_only_a_prior() {
        let p = Auto::new();
        // A "rotational" leg measured as fast as flash is treated as flash.
        let fast_rot = LegView {
            rotational: true,
            ..ssd(1, 0)
        };
        let r = seq(64 * MIB, 1 << 20, 0, 64 * MIB, 0, 0);
        assert!(matches!(
            p.pick(&[ssd(0, 0), fast_rot], &r),
            ReadPlan::Split(_)
        ));
        // An unmeasured leg competes as if it were as fast as the measured one.
        assert_eq!(
            p.pick(&[ssd(0, 4), leg(1, 0)], &req(0, 0, 4096)),
            ReadPlan::One(1)
        );
    }

    #[test]
    fn a_stream_that_started_on_the_slow_leg_moves_to_the_fast_one() {
        let p = Auto::new();
        let c = [measured(0, 0, 625, 52, 0), ssd(1, 0)];
        let r = seq(64 * MIB, 1 << 20, 0, 64 * MIB, 0, 0);
        assert_eq!(p.pick(&c, &r), ReadPlan::One(1));
    }

    #[test]
    fn splitting_stays_aligned() {
        let p = Auto::new();
        let c = [
            measured(0, 0, 80, 333, 0),
            measured(1, 0, 80, 111, 0),
            measured(2, 0, 80, 222, 0),
        ];
        let r = seq(64 * MIB + 4096, 3 << 20, 0, 64 * MIB, 0, 0);
        let plan = p.pick(&c, &r);
        plan.check(&c, r.offset, r.size).unwrap();
        let ReadPlan::Split(pieces) = plan else {
            panic!()
        };
        assert_eq!(pieces.len(), 3);
        for piece in &pieces[1..] {
            assert_eq!(piece.offset % SPLIT_ALIGN, 0);
        }
    }

    #[test]
    fn writemostly_is_never_read_when_another_leg_serves() {
        let p = Auto::new();
        let wm = LegView {
            writemostly: true,
            ..ssd(0, 0)
        };
        for r in [req(0, 0, 4096), seq(64 * MIB, 1 << 20, 0, 64 * MIB, 0, 0)] {
            assert_eq!(p.pick(&[wm.clone(), hdd(1, 30)], &r), ReadPlan::One(1));
        }
    }
}
