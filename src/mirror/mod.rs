//! The mirror engine: the legs, fanning operations out to them, reconciling their answers,
//! dropping a leg that fails, and choosing the leg a read goes to.

pub mod fanout;
pub mod fault;
pub mod outcome;

use crate::errno::{Errno, Result};
use crate::leg::{Leg, LegIdx};
use crate::meta::superblock::LegSuperblock;
use crate::policy::{LegView, ReadPlan, ReadPolicy, ReadRequest};
use fanout::LegWorkers;
use fault::{FaultRule, Faults};
use outcome::{reconcile, DropReason};
use parking_lot::{Mutex, RwLock};

/// The legs of one mounted mirror and the machinery to use them together.
pub struct Mirror {
    legs: Vec<Leg>,
    workers: LegWorkers,
    policy: RwLock<Box<dyn ReadPolicy>>,
    /// The superblocks as last written, by leg (None for a leg we cannot write).
    superblocks: Mutex<Vec<Option<LegSuperblock>>>,
    /// Injected faults (tests).
    faults: Faults,
}

impl Mirror {
    pub fn new(
        legs: Vec<Leg>,
        superblocks: Vec<Option<LegSuperblock>>,
        threads_per_leg: usize,
        policy: Box<dyn ReadPolicy>,
    ) -> Mirror {
        let workers = LegWorkers::new(legs.len(), threads_per_leg);
        Mirror {
            legs,
            workers,
            policy: RwLock::new(policy),
            superblocks: Mutex::new(superblocks),
            faults: Faults::default(),
        }
    }

    pub fn legs(&self) -> &[Leg] {
        &self.legs
    }

    pub fn leg(&self, idx: LegIdx) -> &Leg {
        &self.legs[idx]
    }

    /// Makes a leg fail chosen operations (tests; see [`fault`]).
    pub fn inject_fault(&self, rule: FaultRule) {
        self.faults.add(rule);
    }

    /// Removes every injected fault.
    pub fn clear_faults(&self) {
        self.faults.clear();
    }

    /// `Err` if an injected fault says `leg` must fail `what` now.
    pub fn check_fault(&self, leg: LegIdx, what: &str) -> Result<()> {
        self.faults.check(leg, what)
    }

    /// The legs that take part in operations now, in leg order.
    pub fn in_sync_legs(&self) -> Vec<LegIdx> {
        self.legs
            .iter()
            .filter(|l| l.is_in_sync())
            .map(|l| l.idx)
            .collect()
    }

    /// The leg whose answers stand for the mirror's metadata (attributes, listings): the first
    /// in-sync leg, so that what users see does not depend on where reads go.
    pub fn metadata_leg(&self) -> LegIdx {
        self.legs
            .iter()
            .find(|l| l.is_in_sync())
            .map(|l| l.idx)
            .unwrap_or(0)
    }

    /// Runs `op` on every leg in `legs` in parallel, reconciles the answers, drops legs that
    /// failed or disagreed, and returns the successful legs' values (or the caller's error).
    pub fn fan_out<T, F>(&self, legs: &[LegIdx], what: &str, op: F) -> Result<Vec<(LegIdx, T)>>
    where
        T: Send + 'static,
        F: Fn(LegIdx) -> Result<T> + Sync,
    {
        let out = reconcile(self.workers.run(legs, |leg| {
            self.faults.check(leg, what)?;
            op(leg)
        }));
        for (leg, why) in out.drop {
            self.mark_failed(leg, what, why);
        }
        out.answer
    }

    /// Drops `leg` from the mirror: it gets no more reads or writes, and every surviving leg's
    /// superblock records it, so that a later mount does not trust its copy. The last in-sync
    /// leg is never dropped.
    pub fn mark_failed(&self, leg: LegIdx, what: &str, why: DropReason) {
        let survivors: Vec<LegIdx> = self
            .in_sync_legs()
            .into_iter()
            .filter(|&l| l != leg)
            .collect();
        if survivors.is_empty() {
            log::error!(
                "leg {} ('{}'): {what} failed ({why:?}), but it is the last in-sync leg; keeping it",
                leg,
                self.legs[leg].path.display()
            );
            return;
        }
        if !self.legs[leg].set_failed() {
            return;
        }
        log::error!(
            "DEGRADED: leg {} ('{}') dropped from the mirror: {what} failed ({why:?}); \
             serving from {} other leg(s)",
            leg,
            self.legs[leg].path.display(),
            survivors.len()
        );
        self.record_dropped_legs();
    }

    /// Writes every dropped leg's id into every in-sync leg's superblock. Called when a leg is
    /// dropped, and again at unmount in case a write failed (the system log says so): a drop
    /// that no superblock records would let a later mount serve the dropped leg's old data.
    pub fn record_dropped_legs(&self) {
        let mut sbs = self.superblocks.lock();
        let failed: Vec<String> = self
            .legs
            .iter()
            .filter(|l| !l.is_in_sync())
            .filter_map(|l| sbs[l.idx].as_ref().map(|s| s.leg_id.clone()))
            .collect();
        if failed.is_empty() {
            return;
        }
        for s in self.in_sync_legs() {
            let Some(sb) = sbs[s].as_mut() else {
                continue;
            };
            let before = sb.failed_legs.len();
            for id in &failed {
                if !sb.failed_legs.contains(id) {
                    sb.failed_legs.push(id.clone());
                }
            }
            let on_disk = LegSuperblock::read(&self.legs[s].path)
                .ok()
                .flatten()
                .is_some_and(|d| failed.iter().all(|id| d.failed_legs.contains(id)));
            if sb.failed_legs.len() == before && on_disk {
                continue;
            }
            if let Err(e) = sb.write(&self.legs[s].path) {
                log::error!(
                    "cannot record the dropped leg(s) in '{}': {e}; will retry at unmount",
                    self.legs[s].path.display()
                );
            }
        }
    }

    /// The leg a read of this request goes to, among `candidates` (legs that can serve it).
    pub fn pick_read_leg(&self, candidates: &[LegIdx], req: &ReadRequest) -> Option<ReadPlan> {
        let views: Vec<LegView> = candidates
            .iter()
            .filter(|&&l| self.legs[l].is_in_sync())
            .map(|&idx| LegView {
                idx,
                ..Default::default()
            })
            .collect();
        if views.is_empty() {
            return None;
        }
        Some(self.policy.read().pick(&views, req))
    }

    /// The name of the read policy in force.
    pub fn policy_name(&self) -> String {
        self.policy.read().name()
    }

    /// Runs a read-like `op` on the leg the policy picks; on a leg fault, drops that leg and
    /// retries on the next candidate.
    pub fn read_from<T>(
        &self,
        candidates: &[LegIdx],
        req: &ReadRequest,
        what: &str,
        mut op: impl FnMut(LegIdx) -> Result<T>,
    ) -> Result<T> {
        let mut tried: Vec<LegIdx> = Vec::new();
        loop {
            let left: Vec<LegIdx> = candidates
                .iter()
                .copied()
                .filter(|l| !tried.contains(l))
                .collect();
            let Some(plan) = self.pick_read_leg(&left, req) else {
                return Err(Errno::EIO);
            };
            let leg = plan.first_leg();
            match self.faults.check(leg, what).and_then(|()| op(leg)) {
                Err(e) if outcome::is_leg_fault(e) => {
                    self.legs[leg]
                        .counters
                        .read_errors
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tried.push(leg);
                    self.mark_failed(leg, what, DropReason::LegFault(e));
                    if !self.legs[leg].is_in_sync() {
                        continue;
                    }
                    return Err(e);
                }
                r => return r,
            }
        }
    }
}
