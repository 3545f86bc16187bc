//! A read routed to its legs whose I/O the caller runs itself: the io_uring transport submits
//! the legs' reads on its own ring instead of blocking a thread in `pread` (see
//! `docs/architecture.md`, "Leg I/O never stalls a queue").
//!
//! Two halves. [`Mirror::route`] asks the policy and counts the read exactly as the blocking
//! [`Mirror::read_routed`] does (picks, in-flight counts, hand-overs). [`Routed::piece_done`]
//! teaches each leg's read history what a piece cost. Failures are not handled here: a caller
//! whose piece failed drops the [`Routed`] and asks the blocking path, which counts the leg's
//! error, asks another leg and repairs, as it always has.

use super::reads::HandOver;
use super::Mirror;
use crate::leg::{InflightGuard, LegIdx};
use crate::policy::{ReadPlan, ReadRequest};
use std::sync::Arc;
use std::time::Instant;

/// One leg read of a routed read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub leg: LegIdx,
    pub offset: u64,
    pub len: u32,
}

/// A read routed and counted, whose pieces are under way. Dropping it ends the pieces'
/// in-flight counts.
pub struct Routed {
    mirror: Arc<Mirror>,
    plan: ReadPlan,
    pieces: Vec<Piece>,
    /// The legs counted in flight (one per piece).
    busy: Vec<LegIdx>,
    hand_overs: Vec<HandOver>,
    started: Instant,
}

impl Routed {
    pub fn plan(&self) -> &ReadPlan {
        &self.plan
    }

    /// The leg reads, in offset order.
    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }

    /// Piece `i` completed with `bytes`: its leg's service time learns what it cost.
    pub fn piece_done(&self, i: usize, bytes: u64) {
        let (Some(p), Some(h)) = (self.pieces.get(i), self.hand_overs.get(i)) else {
            return;
        };
        let elapsed = self.started.elapsed().as_micros() as u64;
        self.mirror.reads[p.leg]
            .lock()
            .record(h, bytes, elapsed, self.mirror.now_us());
    }
}

impl Drop for Routed {
    fn drop(&mut self) {
        for &l in &self.busy {
            drop(InflightGuard::adopt(&self.mirror.legs[l]));
        }
    }
}

impl Mirror {
    /// Routes `req` among `candidates` for a caller that runs the legs' reads itself. `None`
    /// when the blocking path must answer: no leg can take it, or faults are injected (their
    /// counts are the blocking path's to spend).
    pub fn route(self: &Arc<Self>, candidates: &[LegIdx], req: &ReadRequest) -> Option<Routed> {
        if self.faults.any() {
            return None;
        }
        let (plan, busy, hand_overs) = self.route_counted(candidates, req)?;
        let pieces = match &plan {
            ReadPlan::One(l) | ReadPlan::Spread(l) => vec![Piece {
                leg: *l,
                offset: req.offset,
                len: req.size,
            }],
            ReadPlan::Split(p) => p
                .iter()
                .map(|x| Piece {
                    leg: x.leg,
                    offset: x.offset,
                    len: x.len,
                })
                .collect(),
        };
        Some(Routed {
            mirror: self.clone(),
            plan,
            pieces,
            busy,
            hand_overs,
            started: Instant::now(),
        })
    }
}
