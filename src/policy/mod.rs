//! Read policies: given a snapshot of the legs that may serve a read, pick one (or split the
//! read over several).
//!
//! A policy is a pure function of its inputs (no I/O, no clock: the time comes in the
//! request), so that it can be tested with tables and compared in a simulator. A policy may
//! keep small internal state (a rotation counter), which makes it deterministic given the
//! sequence of calls. One policy per file; the registry below maps each user-facing name to
//! its constructor.

pub mod first;

use crate::leg::LegIdx;

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
    /// Where the last read this leg served ended: (file, offset).
    pub last_read_end: Option<(u64, u64)>,
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
    /// Contiguous pieces, in offset order, covering the request exactly, run in parallel.
    Split(Vec<ReadPiece>),
}

impl ReadPlan {
    /// The leg that serves the first byte.
    pub fn first_leg(&self) -> LegIdx {
        match self {
            ReadPlan::One(l) => *l,
            ReadPlan::Split(p) => p[0].leg,
        }
    }
}

/// A read policy.
pub trait ReadPolicy: Send + Sync {
    /// The name users give in `read_policy=`, with its parameter if it has one.
    fn name(&self) -> String;
    /// Picks among `candidates` (never empty; in leg order).
    fn pick(&self, candidates: &[LegView], req: &ReadRequest) -> ReadPlan;
}

/// Every policy name `read_policy=` accepts.
pub const POLICY_NAMES: &[&str] = &["first"];

/// Checks `spec` without knowing the legs (at option parsing): `Err` holds the one-line
/// reason. A `leg:NAME` is checked against the legs' names later, by [`by_name`].
pub fn check_spec(spec: &str) -> Result<(), String> {
    if spec.starts_with("leg:") && spec.len() > 4 || by_name(spec, &[]).is_some() {
        Ok(())
    } else {
        Err(format!(
            "invalid value for 'read_policy': '{spec}' (valid: {})",
            POLICY_NAMES.join(", ")
        ))
    }
}

/// The policy `spec` names, or `None` for an unknown name. `leg_names` are the legs' names in
/// leg order (for policies that name a leg).
pub fn by_name(spec: &str, leg_names: &[String]) -> Option<Box<dyn ReadPolicy>> {
    let _ = leg_names;
    match spec {
        "first" => Some(Box::new(first::First)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registered_name_resolves_to_itself() {
        for name in POLICY_NAMES {
            assert_eq!(by_name(name, &[]).unwrap().name(), *name);
        }
        assert!(by_name("fastest-please", &[]).is_none());
    }
}
