//! Where a read goes: the read policy in force, its plan made runnable, and the plan counted
//! on its legs under one lock (for the blocking read and for [`routed`](super::routed)).

use super::reads::HandOver;
use super::Mirror;
use crate::errno::{Errno, Result};
use crate::leg::{InflightGuard, LegIdx};
use crate::policy::{LegView, ReadPlan, ReadPolicy, ReadRequest};
use std::sync::atomic::Ordering;

impl Mirror {
    /// Asks the policy where a read goes, among the in-sync `candidates`. Pure: counts
    /// nothing.
    fn plan_read(&self, candidates: &[LegIdx], req: &ReadRequest) -> Option<ReadPlan> {
        let views: Vec<LegView> = candidates
            .iter()
            .filter(|&&l| self.legs[l].is_in_sync())
            .map(|&l| self.reads[l].lock().view(&self.legs[l]))
            .collect();
        if views.is_empty() {
            return None;
        }
        let plan = self.policy.read().pick(&views, req);
        Some(self.sane_plan(plan, &views, req))
    }

    /// A plan the engine can run: legs among the candidates, pieces covering the request in
    /// order ([`ReadPlan::check`]), inner piece boundaries 4 KiB-aligned so that `O_DIRECT`
    /// pieces stay aligned. Anything else (a policy bug) becomes the first candidate, logged.
    fn sane_plan(&self, plan: ReadPlan, views: &[LegView], req: &ReadRequest) -> ReadPlan {
        let aligned = match &plan {
            ReadPlan::One(_) | ReadPlan::Spread(_) => true,
            ReadPlan::Split(p) => p.iter().skip(1).all(|x| x.offset % 4096 == 0),
        };
        match plan.check(views, req.offset, req.size) {
            Ok(()) if aligned => plan,
            r => {
                log::warn!(
                    "read policy gave an unusable plan {plan:?} ({}); reading from the first leg",
                    r.err().unwrap_or_else(|| "unaligned pieces".into())
                );
                ReadPlan::One(views[0].idx)
            }
        }
    }

    /// Decides where a read goes and counts it at once on the legs it goes to (in-flight,
    /// picks, stream switches, split pieces), under one lock so that concurrent reads see
    /// each other's choices instead of all herding onto the same idle leg. Returns the
    /// policy's plan, its legs (each counted in flight with [`InflightGuard::count`]: the
    /// caller gives them back) and each piece's hand-over (for its service time).
    pub(super) fn route_counted(
        &self,
        candidates: &[LegIdx],
        req: &ReadRequest,
    ) -> Option<(ReadPlan, Vec<LegIdx>, Vec<HandOver>)> {
        let _routing = self.routing.lock();
        let plan = self.plan_read(candidates, req)?;
        let legs: Vec<LegIdx> = match &plan {
            ReadPlan::One(l) | ReadPlan::Spread(l) => vec![*l],
            ReadPlan::Split(p) => p.iter().map(|x| x.leg).collect(),
        };
        let split = matches!(plan, ReadPlan::Split(_));
        let spread = matches!(plan, ReadPlan::Spread(_));
        for &l in &legs {
            let c = &self.legs[l].counters;
            c.policy_picks.fetch_add(1, Ordering::Relaxed);
            if split {
                c.split_reads.fetch_add(1, Ordering::Relaxed);
            }
            if spread {
                c.spread_reads.fetch_add(1, Ordering::Relaxed);
            }
            InflightGuard::count(&self.legs[l]);
        }
        if let (Some(prev), false) = (req.stream.leg, spread) {
            if prev != plan.first_leg() {
                self.legs[plan.first_leg()]
                    .counters
                    .stream_switches
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        let hand_overs = match &plan {
            ReadPlan::One(l) | ReadPlan::Spread(l) => {
                vec![self.reads[*l].lock().hand_over(
                    &self.legs[*l],
                    req.file,
                    req.offset,
                    req.size,
                )]
            }
            ReadPlan::Split(p) => p
                .iter()
                .map(|x| {
                    self.reads[x.leg]
                        .lock()
                        .hand_over(&self.legs[x.leg], req.file, x.offset, x.len)
                })
                .collect(),
        };
        Some((plan, legs, hand_overs))
    }

    /// [`route_counted`](Self::route_counted), with the legs' guards.
    pub(super) fn route_read(
        &self,
        candidates: &[LegIdx],
        req: &ReadRequest,
    ) -> Option<(ReadPlan, Vec<InflightGuard<'_>>, Vec<HandOver>)> {
        let (plan, legs, hand_overs) = self.route_counted(candidates, req)?;
        let guards = legs
            .iter()
            .map(|&l| InflightGuard::adopt(&self.legs[l]))
            .collect();
        Some((plan, guards, hand_overs))
    }

    /// The leg a read would go to now, without counting it anywhere (`user.mirrorfs.readleg`).
    pub fn preview_read_leg(&self, candidates: &[LegIdx], req: &ReadRequest) -> Option<LegIdx> {
        self.plan_read(candidates, req).map(|p| p.first_leg())
    }

    /// The read policy `spec` names, among these legs.
    pub fn policy_by_name(&self, spec: &str) -> Option<Box<dyn ReadPolicy>> {
        crate::policy::by_name(spec, self.legs.len(), &|n| {
            self.find_leg(std::ffi::OsStr::new(n))
        })
    }

    /// Replaces the read policy by the one `spec` names; EINVAL (and no change) for a bad name.
    pub fn set_policy(&self, spec: &str) -> Result<()> {
        let policy = self.policy_by_name(spec).ok_or(Errno::EINVAL)?;
        log::info!("read policy: {} -> {}", self.policy_name(), policy.name());
        self.auto.store(policy.name() == "auto", Ordering::Relaxed);
        *self.policy.write() = policy;
        Ok(())
    }

    /// The name of the read policy in force.
    pub fn policy_name(&self) -> String {
        self.policy.read().name()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::test_mirror;
    use super::*;
    use crate::leg::LegState;
    use crate::policy::{ReadPiece, StreamView};

    /// A read policy that always gives `.0`.
    pub struct Fixed(pub ReadPlan);

    impl ReadPolicy for Fixed {
        fn name(&self) -> String {
            "fixed".into()
        }
        fn pick(&self, _: &[LegView], _: &ReadRequest) -> ReadPlan {
            self.0.clone()
        }
    }

    /// `m` reads as `plan` says from now on.
    pub fn fix_plan(m: &Mirror, plan: ReadPlan) {
        *m.policy.write() = Box::new(Fixed(plan));
    }

    /// `len` bytes at `offset` of leg `leg`.
    pub fn piece(leg: LegIdx, offset: u64, len: u32) -> ReadPiece {
        ReadPiece { leg, offset, len }
    }

    /// A read of `size` bytes at `offset` of file 7.
    pub fn read(offset: u64, size: u32) -> ReadRequest {
        ReadRequest {
            file: 7,
            offset,
            size,
            ..Default::default()
        }
    }

    fn counter(m: &Mirror, leg: LegIdx, c: fn(&crate::leg::LegCounters) -> u64) -> u64 {
        c(&m.leg(leg).counters)
    }

    fn picks(c: &crate::leg::LegCounters) -> u64 {
        c.policy_picks.load(Ordering::Relaxed)
    }

    fn inflight(m: &Mirror, leg: LegIdx) -> u32 {
        m.leg(leg).inflight.load(Ordering::Acquire)
    }

    #[test]
    fn an_unusable_plan_becomes_the_first_candidate() {
        let (_d, m) = test_mirror::plain(3);
        let req = read(0, 128 << 10);
        let split = ReadPlan::Split(vec![piece(2, 0, 64 << 10), piece(1, 64 << 10, 64 << 10)]);
        let bad = [
            ReadPlan::One(5),
            ReadPlan::Split(vec![piece(2, 0, 1000), piece(1, 1000, (128 << 10) - 1000)]),
            ReadPlan::Split(vec![piece(2, 0, 64 << 10)]),
        ];
        for plan in bad {
            fix_plan(&m, plan.clone());
            assert_eq!(
                m.plan_read(&[1, 2], &req),
                Some(ReadPlan::One(1)),
                "{plan:?}"
            );
        }
        for plan in [ReadPlan::One(2), ReadPlan::Spread(2), split] {
            fix_plan(&m, plan.clone());
            assert_eq!(m.plan_read(&[1, 2], &req), Some(plan));
        }
    }

    #[test]
    fn a_read_is_planned_among_the_legs_in_sync_only() {
        let (_d, m) = test_mirror::plain(2);
        let req = read(0, 4096);
        assert_eq!(m.plan_read(&[0, 1], &req), Some(ReadPlan::One(0)));
        m.leg(0).set_state(LegState::Failed);
        assert_eq!(m.plan_read(&[0, 1], &req), Some(ReadPlan::One(1)));
        assert_eq!(m.plan_read(&[0], &req), None);
        assert_eq!(m.preview_read_leg(&[0, 1], &req), Some(1));
    }

    #[test]
    fn a_routed_read_is_counted_on_its_legs_until_its_guards_go() {
        let (_d, m) = test_mirror::plain(2);
        let mut req = read(0, 4096);
        req.stream = StreamView {
            leg: Some(0),
            ..Default::default()
        };
        assert_eq!(m.preview_read_leg(&[0, 1], &req), Some(0));
        assert_eq!(counter(&m, 0, picks), 0, "a preview counts nothing");
        fix_plan(&m, ReadPlan::One(1));
        let (plan, guards, hand_overs) = m.route_read(&[0, 1], &req).unwrap();
        assert_eq!(plan, ReadPlan::One(1));
        assert_eq!((guards.len(), hand_overs.len()), (1, 1));
        assert_eq!(inflight(&m, 1), 1);
        assert_eq!(counter(&m, 1, picks), 1);
        let switches = |c: &crate::leg::LegCounters| c.stream_switches.load(Ordering::Relaxed);
        assert_eq!(counter(&m, 1, switches), 1, "the stream moved from leg 0");
        drop(guards);
        assert_eq!(inflight(&m, 1), 0);
        // A spread read does not move the stream; a split one counts each piece.
        fix_plan(&m, ReadPlan::Spread(1));
        drop(m.route_read(&[0, 1], &req).unwrap());
        assert_eq!(counter(&m, 1, switches), 1);
        let spread = |c: &crate::leg::LegCounters| c.spread_reads.load(Ordering::Relaxed);
        assert_eq!(counter(&m, 1, spread), 1);
        let req = read(0, 192 << 10);
        fix_plan(
            &m,
            ReadPlan::Split(vec![
                piece(0, 0, 64 << 10),
                piece(1, 64 << 10, 64 << 10),
                piece(0, 128 << 10, 64 << 10),
            ]),
        );
        let (_, guards, hand_overs) = m.route_read(&[0, 1], &req).unwrap();
        assert_eq!((guards.len(), hand_overs.len()), (3, 3));
        let offsets: Vec<u64> = hand_overs.iter().map(|h| h.offset).collect();
        assert_eq!(offsets, vec![0, 64 << 10, 128 << 10]);
        assert_eq!((inflight(&m, 0), inflight(&m, 1)), (2, 1));
        let split = |c: &crate::leg::LegCounters| c.split_reads.load(Ordering::Relaxed);
        assert_eq!((counter(&m, 0, split), counter(&m, 1, split)), (2, 1));
        drop(guards);
        assert_eq!((inflight(&m, 0), inflight(&m, 1)), (0, 0));
    }

    #[test]
    fn a_bad_policy_name_changes_nothing() {
        let (_d, m) = test_mirror::plain(2);
        let req = read(0, 4096);
        assert_eq!(m.set_policy("nonsense"), Err(Errno::EINVAL));
        assert_eq!(m.policy_name(), "first");
        assert_eq!(m.set_policy("leg:leg1"), Ok(()));
        assert_eq!(m.preview_read_leg(&[0, 1], &req), Some(1));
        assert!(!m.auto.load(Ordering::Relaxed));
        assert_eq!(m.set_policy("auto"), Ok(()));
        assert_eq!(m.policy_name(), "auto");
        assert!(m.auto.load(Ordering::Relaxed));
    }
}
