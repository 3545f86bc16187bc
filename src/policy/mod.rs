//! Read policies: given a snapshot of the legs that may serve a read, pick one (or split the
//! read over several).
//!
//! A policy is a pure function of its inputs (no I/O, no clock: the time comes in the
//! request), so that it can be tested with tables and compared in a simulator. A policy may
//! keep small internal state (a rotation counter, a tie-break generator), which makes it
//! deterministic given the sequence of calls. One policy per file; the registry below maps each
//! user-facing name to its constructor. `docs/policies.md` tells where each one comes from and
//! when to choose it.
//!
//! Two helpers live beside the policies because the engine and the simulator share them:
//! [`stream::StreamTracker`] (per open file: which stream a read continues) and
//! [`service_time::ServiceTime`] (per leg: time-decayed service times and bandwidth).

pub mod auto;
pub mod devid;
pub mod extents;
pub mod first;
pub mod latency;
pub mod md;
pub mod nonrot;
pub mod pid;
pub mod queue;
pub mod round_robin;
pub mod service_time;
pub mod stream;

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};

/// A leg, by its position in the leg list (the engine's `leg::LegIdx`; the policies name legs
/// by index and need nothing else of them).
pub type LegIdx = usize;

/// Reads up to this size are "small" (their own service-time average); larger ones are "large".
pub const SMALL_READ_MAX: u32 = 64 * 1024;

/// What a policy may know of one candidate leg, sampled at the moment of decision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LegView {
    pub idx: LegIdx,
    /// Effective rotational flag (sysfs, or the user's `=rot`/`=nonrot`).
    pub rotational: bool,
    /// md's write-mostly: read only when no other candidate can serve.
    pub writemostly: bool,
    /// Our own reads and writes in flight on this leg now, counting picks already made by
    /// other threads that have not started their I/O yet.
    pub inflight: u32,
    /// The device's own in-flight count (sysfs), when there is a device and the sample is
    /// fresh; `None` otherwise.
    pub device_inflight: Option<u32>,
    /// Time-decayed mean service time of small reads (<= 64 KiB), in µs; `None` until measured.
    pub small_read_us: Option<u32>,
    /// Time-decayed mean service time of large reads (> 64 KiB), in µs; `None` until measured.
    pub large_read_us: Option<u32>,
    /// Measured bandwidth of large reads, bytes per second; `None` until measured.
    pub read_bandwidth: Option<u64>,
    /// How many large reads `read_bandwidth` rests on (0 while it is `None`).
    pub read_bandwidth_reads: u32,
    /// Where the last read this leg served ended: (file, offset). Updated when a read is
    /// handed to the leg (md's `next_seq_sect`), not when it completes.
    pub last_read_end: Option<(u64, u64)>,
    /// Measured positioning cost, in µs: how much longer a read takes when it does not start
    /// where the leg's previous read ended than its bytes alone explain (seek and rotation on a
    /// disk, about 0 on flash and on throttled devices); `None` until measured. See
    /// [`service_time::ServiceTime::seek_us`].
    pub seek_us: Option<u32>,
    /// When (µs, the clock of [`ReadRequest::now_us`]) the last read that fed `seek_us`
    /// completed; `None` if none has.
    pub seek_sampled_us: Option<u64>,
    /// When (µs, same clock) the leg's last read completed; `None` if none has.
    pub last_done_us: Option<u64>,
}

/// What the open file's stream tracker knows of the stream this read belongs to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamView {
    /// The read starts where an earlier read of this open file ended (or close to it).
    pub sequential: bool,
    /// Bytes read contiguously by this stream so far, this read not included.
    pub run_bytes: u64,
    /// The leg that served this stream's previous read.
    pub leg: Option<LegIdx>,
    /// Bytes this stream has read from `leg` since it last changed leg.
    pub leg_run_bytes: u64,
    /// When (µs, same clock as [`ReadRequest::now_us`]) the stream moved to `leg`.
    pub leg_since_us: u64,
    /// This stream's reads that have been routed and not yet completed (its own share of the
    /// legs' `inflight`, which a policy must not count as competing load).
    pub inflight: u32,
    /// The stream's previous read was split over several legs.
    pub split: bool,
    /// The stream's previous read was a [`ReadPlan::Spread`]: its reads in flight may be on
    /// several legs.
    pub spread: bool,
}

/// The read being routed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadRequest {
    pub pid: u32,
    /// The mirror's inode number of the file.
    pub file: u64,
    pub offset: u64,
    pub size: u32,
    /// Monotonic time in µs.
    pub now_us: u64,
    pub stream: StreamView,
}

/// One piece of a split read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadPiece {
    pub leg: LegIdx,
    pub offset: u64,
    pub len: u32,
}

/// Where a read goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadPlan {
    /// The whole read from one leg.
    One(LegIdx),
    /// The whole read from one leg, as one of a sequential stream's reads spread over several
    /// legs (or a single read sent elsewhere to measure a leg): the stream does not move to
    /// that leg. The engine runs it as [`One`](ReadPlan::One); the stream tracker and the
    /// counters tell them apart.
    Spread(LegIdx),
    /// Contiguous pieces, in offset order, covering the request exactly, run in parallel.
    /// Every piece starts at a multiple of [`SPLIT_ALIGN`] (except the first, which starts at
    /// the request's offset), so `O_DIRECT` alignment of the request carries over.
    Split(Vec<ReadPiece>),
}

/// Inner piece boundaries of a split plan are multiples of this (bytes).
pub const SPLIT_ALIGN: u64 = 64 * 1024;

impl ReadPlan {
    /// The leg that serves the first byte.
    pub fn first_leg(&self) -> LegIdx {
        match self {
            ReadPlan::One(l) | ReadPlan::Spread(l) => *l,
            ReadPlan::Split(p) => p[0].leg,
        }
    }

    /// Every leg the plan reads from, in piece order, each once.
    pub fn legs(&self) -> Vec<LegIdx> {
        match self {
            ReadPlan::One(l) | ReadPlan::Spread(l) => vec![*l],
            ReadPlan::Split(p) => {
                let mut v: Vec<LegIdx> = Vec::with_capacity(p.len());
                for piece in p {
                    if !v.contains(&piece.leg) {
                        v.push(piece.leg);
                    }
                }
                v
            }
        }
    }

    /// The plan as pieces (a `One` is one piece covering the request).
    pub fn pieces(&self, offset: u64, size: u32) -> Vec<ReadPiece> {
        match self {
            ReadPlan::One(l) | ReadPlan::Spread(l) => vec![ReadPiece {
                leg: *l,
                offset,
                len: size,
            }],
            ReadPlan::Split(p) => p.clone(),
        }
    }

    /// Checks that the plan only names `candidates` and, if split, covers `offset..offset+size`
    /// exactly with contiguous non-empty pieces. For tests and the simulator.
    pub fn check(&self, candidates: &[LegView], offset: u64, size: u32) -> Result<(), String> {
        let known = |l: LegIdx| candidates.iter().any(|c| c.idx == l);
        let mut at = offset;
        for p in self.pieces(offset, size) {
            if !known(p.leg) {
                return Err(format!("leg {} is not a candidate", p.leg));
            }
            if p.offset != at || p.len == 0 {
                return Err(format!(
                    "piece at {} (len {}) where {at} was due",
                    p.offset, p.len
                ));
            }
            at += u64::from(p.len);
        }
        if at != offset + u64::from(size) {
            return Err(format!(
                "pieces end at {at}, the read at {}",
                offset + u64::from(size)
            ));
        }
        Ok(())
    }
}

/// A read policy.
pub trait ReadPolicy: Send + Sync {
    /// The name users give in `read_policy=`, with its parameter if it has one.
    fn name(&self) -> String;
    /// Picks among `candidates` (never empty; in leg order).
    fn pick(&self, candidates: &[LegView], req: &ReadRequest) -> ReadPlan;
}

/// Every policy name `read_policy=` accepts (a parameter, where one is allowed, follows a
/// colon: `round-robin:262144`, `devid:1`, `leg:NAME`).
pub const POLICY_NAMES: &[&str] = &[
    "auto",
    "first",
    "pid",
    "round-robin",
    "devid",
    "leg",
    "nonrot",
    "queue",
    "latency",
    "md",
];

/// The forms of [`POLICY_NAMES`] as error messages list them.
pub const POLICY_FORMS: &str =
    "auto, first, pid, round-robin[:SIZE], devid:N, leg:NAME, nonrot, queue, latency, md";

/// Checks `spec` without knowing the legs (at option parsing): `Err` holds the reason. A
/// `leg:NAME` is checked against the legs later, by [`by_name`].
pub fn check_spec(spec: &str) -> Result<(), String> {
    let ok = match spec.strip_prefix("leg:") {
        Some(name) => !name.is_empty(),
        None => by_name(spec, 0, &|_| None).is_some(),
    };
    if ok {
        Ok(())
    } else {
        Err(format!("valid: {POLICY_FORMS}"))
    }
}

/// The policy `spec` names among `legs` legs (0: not known yet), or `None` for an unknown
/// name or a bad parameter. `find` says which leg a `leg:NAME` means (the mirror's one rule
/// for naming legs).
pub fn by_name(
    spec: &str,
    legs: usize,
    find: &dyn Fn(&str) -> Option<LegIdx>,
) -> Option<Box<dyn ReadPolicy>> {
    let (name, param) = match spec.split_once(':') {
        Some((n, p)) => (n, Some(p)),
        None => (spec, None),
    };
    let policy: Box<dyn ReadPolicy> = match (name, param) {
        ("auto", None) => Box::new(auto::Auto::new()),
        ("first", None) => Box::new(first::First),
        ("pid", None) => Box::new(pid::Pid),
        ("round-robin", None) => Box::new(round_robin::RoundRobin::new(None)),
        ("round-robin", Some(p)) => Box::new(round_robin::RoundRobin::new(Some(
            crate::value::size_in(p, round_robin::MIN_RUN, round_robin::MAX_RUN).ok()?,
        ))),
        ("devid", Some(p)) => {
            // Checked against the legs once they are known (at option parsing they are not).
            let most = legs.checked_sub(1).unwrap_or(usize::MAX) as u64;
            Box::new(devid::Devid::index(
                crate::value::count(p, 0, most).ok()? as usize
            ))
        }
        ("leg", Some(p)) => Box::new(devid::Devid::named(find(p)?, p)),
        ("nonrot", None) => Box::new(nonrot::Nonrot),
        ("queue", None) => Box::new(queue::Queue::new()),
        ("latency", None) => Box::new(latency::Latency::new()),
        ("md", None) => Box::new(md::Md),
        _ => return None,
    };
    Some(policy)
}

/// [`by_name`] among legs known only by their names (the simulator, tests).
pub fn by_name_among(spec: &str, names: &[String]) -> Option<Box<dyn ReadPolicy>> {
    by_name(spec, names.len(), &|n| names.iter().position(|x| x == n))
}

/// The candidates a policy may choose from: every leg that is not write-mostly, or, when all
/// of them are write-mostly, all of them (md: a write-mostly leg is read only when no other
/// leg can serve). Every policy calls this first.
pub fn readable(candidates: &[LegView]) -> Cow<'_, [LegView]> {
    let normal = candidates.iter().filter(|c| !c.writemostly).count();
    if normal == 0 || normal == candidates.len() {
        Cow::Borrowed(candidates)
    } else {
        Cow::Owned(
            candidates
                .iter()
                .filter(|c| !c.writemostly)
                .cloned()
                .collect(),
        )
    }
}

/// A leg's outstanding requests: our own in-flight count, or the device's when that is larger
/// (it also sees other users of the disk; it includes ours, so the two are not added).
pub fn outstanding(leg: &LegView) -> u32 {
    leg.inflight.max(leg.device_inflight.unwrap_or(0))
}

/// The measured time one read of `size` bytes takes on `leg`, in µs, if measured: the small
/// average for small reads; for large reads the bandwidth (size / bytes per second) when known,
/// else the large average.
pub fn measured_service_us(leg: &LegView, size: u32) -> Option<f64> {
    if size <= SMALL_READ_MAX {
        leg.small_read_us.map(f64::from)
    } else if let Some(bw) = leg.read_bandwidth.filter(|&b| b > 0) {
        Some(size as f64 * 1e6 / bw as f64)
    } else {
        leg.large_read_us.map(f64::from)
    }
}

/// Service times for all `legs` (same order), unmeasured legs filled optimistically with the
/// fastest measured one (so that they get traffic and thereby a measurement); all 1.0 when
/// nothing is measured (the comparison then falls back to queue lengths).
pub fn service_estimates(legs: &[LegView], size: u32) -> Vec<f64> {
    let measured: Vec<Option<f64>> = legs
        .iter()
        .map(|l| measured_service_us(l, size).map(|s| s.max(1.0)))
        .collect();
    let best = measured
        .iter()
        .flatten()
        .copied()
        .fold(f64::INFINITY, f64::min);
    let fill = if best.is_finite() { best } else { 1.0 };
    measured.into_iter().map(|m| m.unwrap_or(fill)).collect()
}

/// A tiny lock-free xorshift generator for tie-breaks: deterministic given the call sequence,
/// no lowest-index bias, no crate.
#[derive(Debug)]
pub struct TieBreak(AtomicU64);

impl TieBreak {
    pub fn new(seed: u64) -> TieBreak {
        TieBreak(AtomicU64::new(seed | 1))
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&self, n: usize) -> usize {
        if n <= 1 {
            return 0;
        }
        let step = |mut x: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let prev = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |x| Some(step(x)))
            .unwrap_or(1);
        let x = step(prev);
        // The high bits of xorshift are the better ones.
        ((x >> 32) % n as u64) as usize
    }
}

impl Default for TieBreak {
    fn default() -> TieBreak {
        TieBreak::new(0x9E37_79B9_7F4A_7C15)
    }
}

/// The index (into `costs`) of the smallest cost; among costs within `band` (relative) of the
/// smallest, one at random. Pass `band = 0.0` for exact ties only.
pub fn pick_min_random(costs: &[f64], band: f64, rng: &TieBreak) -> usize {
    let min = costs.iter().copied().fold(f64::INFINITY, f64::min);
    let limit = min + min.abs() * band + 1e-9;
    let near: Vec<usize> = (0..costs.len()).filter(|&i| costs[i] <= limit).collect();
    near[rng.below(near.len())]
}

#[cfg(test)]
pub(crate) mod testutil {
    use super::*;

    /// A leg view with an index and an in-flight count.
    pub fn leg(idx: LegIdx, inflight: u32) -> LegView {
        LegView {
            idx,
            inflight,
            ..Default::default()
        }
    }

    pub fn rot(idx: LegIdx, inflight: u32) -> LegView {
        LegView {
            rotational: true,
            ..leg(idx, inflight)
        }
    }

    pub fn req(pid: u32, offset: u64, size: u32) -> ReadRequest {
        ReadRequest {
            pid,
            file: 7,
            offset,
            size,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::*;
    use super::*;

    #[test]
    fn every_registered_name_resolves_to_itself() {
        let legs = vec!["a".to_string(), "b".to_string()];
        for name in POLICY_NAMES {
            let spec = match *name {
                "devid" => "devid:1",
                "leg" => "leg:b",
                n => n,
            };
            assert_eq!(by_name_among(spec, &legs).unwrap().name(), spec);
            assert!(check_spec(spec).is_ok(), "{spec}");
        }
        for spec in ["round-robin:256K", "round-robin:4K", "devid:0", "leg:a"] {
            assert_eq!(by_name_among(spec, &legs).unwrap().name(), spec);
        }
        assert!(by_name_among("fastest-please", &[]).is_none());
    }

    #[test]
    fn bad_specs_are_refused_with_the_list() {
        for spec in [
            "",
            "fastest-please",
            "pid:3",
            "devid",
            "devid:",
            "devid:x",
            "devid:-1",
            "round-robin:",
            "round-robin:0",
            "round-robin:abc",
            "round-robin:1e300",
            "round-robin:-4096",
            "devid:99999999999999999999999",
            "devid:1e3",
            "leg:",
            "auto:1",
        ] {
            let e = check_spec(spec).unwrap_err();
            assert!(e.contains("valid: auto, first, pid"), "{e}");
            assert!(by_name_among(spec, &[]).is_none(), "{spec}");
        }
        // A leg name is only known once the legs are.
        assert!(check_spec("leg:ssd").is_ok());
        assert!(by_name_among("leg:ssd", &["hdd".to_string()]).is_none());
    }

    #[test]
    fn writemostly_legs_only_when_nothing_else() {
        let wm = |i| LegView {
            writemostly: true,
            ..leg(i, 0)
        };
        let c = [wm(0), leg(1, 5), wm(2)];
        let r: Vec<_> = readable(&c).iter().map(|l| l.idx).collect();
        assert_eq!(r, vec![1]);
        let c = [wm(0), wm(2)];
        assert_eq!(readable(&c).len(), 2);
        let c = [leg(0, 0), leg(1, 0)];
        assert!(matches!(readable(&c), Cow::Borrowed(_)));
    }

    #[test]
    fn every_policy_honours_writemostly() {
        let legs = vec!["a".to_string(), "b".to_string()];
        let c = [
            LegView {
                writemostly: true,
                ..leg(0, 0)
            },
            leg(1, 50),
        ];
        for name in POLICY_NAMES {
            let spec = match *name {
                "devid" => "devid:0",
                "leg" => "leg:a",
                n => n,
            };
            let p = by_name_among(spec, &legs).unwrap();
            for pid in 0..4 {
                assert_eq!(p.pick(&c, &req(pid, 0, 4096)), ReadPlan::One(1), "{spec}");
            }
        }
    }

    #[test]
    fn tie_break_has_no_index_bias() {
        let t = TieBreak::default();
        let mut counts = [0u32; 3];
        for _ in 0..3000 {
            counts[t.below(3)] += 1;
        }
        for c in counts {
            assert!((900..1100).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn optimistic_fill_for_unmeasured_legs() {
        let mut a = leg(0, 0);
        a.small_read_us = Some(100);
        let b = leg(1, 0);
        assert_eq!(
            service_estimates(&[a.clone(), b.clone()], 4096),
            vec![100.0, 100.0]
        );
        assert_eq!(service_estimates(&[b.clone(), b], 4096), vec![1.0, 1.0]);
        a.read_bandwidth = Some(1_000_000);
        assert_eq!(measured_service_us(&a, 1 << 20), Some(1_048_576.0));
    }

    #[test]
    fn plan_check_catches_gaps() {
        let c = [leg(0, 0), leg(1, 0)];
        let ok = ReadPlan::Split(vec![
            ReadPiece {
                leg: 0,
                offset: 10,
                len: 5,
            },
            ReadPiece {
                leg: 1,
                offset: 15,
                len: 5,
            },
        ]);
        assert!(ok.check(&c, 10, 10).is_ok());
        assert!(ok.check(&c, 10, 11).is_err());
        assert!(ReadPlan::One(2).check(&c, 0, 1).is_err());
        assert_eq!(ok.legs(), vec![0, 1]);
    }
}
