//! Membership: which legs serve (and which one stands for the metadata), dropping a leg,
//! and the member changes (join, replace, remove) written into the superblocks.

use super::outcome::DropReason;
use super::Mirror;
use crate::errno::{Errno, Result};
use crate::leg::LegIdx;
use crate::meta::membership::{self, Event};
use std::sync::atomic::Ordering;

impl Mirror {
    /// The legs that take part in operations now, in leg order.
    pub fn in_sync_legs(&self) -> Vec<LegIdx> {
        self.legs
            .iter()
            .filter(|l| l.is_in_sync())
            .map(|l| l.idx)
            .collect()
    }

    /// Runs `change` (of leg states); tells the kernel when it moved the metadata leg.
    fn watching_metadata_leg(&self, change: impl FnOnce()) {
        let before = self.metadata_leg();
        change();
        if self.metadata_leg() != before {
            if let Some(k) = self.kernel.get() {
                k.metadata_leg_changed();
            }
        }
    }

    /// The leg whose answers stand for the mirror's metadata (attributes, listings): the first
    /// in-sync leg that is not quiet (the first in-sync leg if all are), so that what users
    /// see does not depend on where reads go.
    pub fn metadata_leg(&self) -> LegIdx {
        let in_sync = || self.legs.iter().filter(|l| l.is_in_sync());
        in_sync()
            .find(|l| !l.quiet)
            .or_else(|| in_sync().next())
            .map(|l| l.idx)
            .unwrap_or(0)
    }

    /// Of `legs` (in sync), those a lookup leaves alone: the quiet ones, while another leg of
    /// `legs` is not quiet. Their objects are found when a change needs them.
    pub fn quiet_among(&self, legs: &[LegIdx]) -> Vec<LegIdx> {
        if legs.iter().all(|&l| self.legs[l].quiet) {
            return Vec::new();
        }
        legs.iter()
            .copied()
            .filter(|&l| self.legs[l].quiet)
            .collect()
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
                self.legs[leg].path().display()
            );
            return;
        }
        let mut dropped = false;
        self.watching_metadata_leg(|| dropped = self.legs[leg].set_failed());
        if !dropped {
            return;
        }
        self.integrity.detach(leg);
        if let Some(id) = self.leg_id(leg) {
            self.changes.start_away(&id);
        }
        log::error!(
            "DEGRADED: leg {} ('{}') dropped from the mirror: {what} failed ({why:?}); \
             serving from {} other leg(s)",
            leg,
            self.legs[leg].path().display(),
            survivors.len()
        );
        self.record_dropped_legs();
    }

    /// The member id of `leg` (see [`membership::member_id`]).
    pub fn leg_id(&self, leg: LegIdx) -> Option<String> {
        membership::member_id(&self.superblocks.lock(), leg)
    }

    /// Applies a membership event ([`membership::transition`]) and writes the superblocks it
    /// says. `first` (a replaced leg's new directory) is written first, and a failure there
    /// is the caller's error with nothing else changed; a failure on a serving leg is logged,
    /// and every serving leg is written again at the next event (at the latest at unmount): a
    /// drop that no superblock records would let a later mount serve the dropped leg's data.
    pub(super) fn membership(&self, event: Event, first: Option<LegIdx>) -> Result<()> {
        let mut sbs = self.superblocks.lock();
        let serving = self.in_sync_legs();
        let mut t = membership::transition(&sbs, &serving, &event);
        if self.superblocks_behind.swap(false, Ordering::AcqRel) {
            t.write
                .extend(serving.iter().filter(|&&s| t.sbs[s].is_some()));
            t.write.sort_unstable();
            t.write.dedup();
        }
        if let Some(f) = first.filter(|f| t.write.contains(f)) {
            let sb = t.sbs[f].as_ref().ok_or(Errno::EIO)?;
            sb.write(&self.legs[f].path()).map_err(Errno::from)?;
        }
        for &s in t.write.iter().filter(|&&s| Some(s) != first) {
            let Some(sb) = t.sbs[s].as_ref() else {
                continue;
            };
            if let Err(e) = sb.write(&self.legs[s].path()) {
                log::error!(
                    "cannot write the superblock of '{}': {e}; will retry",
                    self.legs[s].path().display()
                );
                self.superblocks_behind.store(true, Ordering::Release);
            }
        }
        *sbs = t.sbs;
        Ok(())
    }

    /// `target` (member `id`) holds the same data as the others now: it is marked in sync,
    /// every superblock stops recording it as dropped (and moves its event counter on), it
    /// gets a superblock of its own, and its away logs go. Called with every change held off.
    pub fn join_leg(&self, target: LegIdx, id: &str) {
        // Its store: a copy of the metadata leg's, which covers the data it was just given.
        let from = self.metadata_leg();
        if let Err(e) = self
            .integrity
            .attach_copy(target, &self.legs[target].path(), from)
        {
            log::error!(
                "leg {target}: its checksum store could not be copied from leg {from}'s: {e}; \
                 it joins without one (reads from it are verified against the others' store)"
            );
        }
        self.watching_metadata_leg(|| self.legs[target].set_state(crate::leg::LegState::InSync));
        let event = Event::Join {
            slot: target,
            id: id.to_string(),
        };
        // Serving legs only: no `first`, so this cannot fail (a failed write is retried).
        let _ = self.membership(event, None);
        let legs = self.in_sync_legs();
        self.changes.end_away(id, &legs);
        self.changes.rewrite_intent(&[target]);
    }

    /// Puts a new, empty directory in the place of member `leg` (`mirrorfs leg replace`): a
    /// new member id takes the slot, recorded as behind by every in-sync leg, with a
    /// superblock of its own; the old member is forgotten. The caller then resyncs it in
    /// full. `new_path` is canonical and checked by the caller (empty, not another leg).
    /// The leg must be out of the mirror already (EBUSY otherwise).
    pub fn replace_member(&self, leg: LegIdx, new_path: &std::path::Path) -> Result<String> {
        use crate::leg::LegState;
        match self.legs[leg].state() {
            LegState::Failed | LegState::Missing | LegState::Stale => {}
            _ => return Err(Errno::EBUSY),
        }
        let old_id = self.leg_id(leg);
        let new_id = crate::sys::random_hex_id();
        self.legs[leg].move_to(new_path)?;
        let event = Event::Replace {
            slot: leg,
            new_id: new_id.clone(),
        };
        self.membership(event, Some(leg))?;
        let legs = self.in_sync_legs();
        if let Some(old) = &old_id {
            self.changes.end_away(old, &legs);
        }
        self.changes.set_root(leg, new_path.to_path_buf());
        self.legs[leg].set_state(LegState::Failed);
        log::warn!(
            "leg {leg} replaced by '{}' (new member {new_id}); it is filled by a full resync",
            new_path.display()
        );
        Ok(new_id)
    }

    /// Forgets the member `leg` (out of the mirror already): the superblocks no longer list it
    /// nor count it, and its away logs go, so that later mounts neither wait for it nor
    /// resync it. EBUSY for a leg in sync or resyncing (fail it first).
    pub fn remove_member(&self, leg: LegIdx) -> Result<()> {
        use crate::leg::LegState;
        match self.legs[leg].state() {
            LegState::Failed | LegState::Missing | LegState::Stale => {}
            LegState::Removed => return Ok(()),
            LegState::InSync | LegState::Resyncing => return Err(Errno::EBUSY),
        }
        let id = self.leg_id(leg).ok_or(Errno::EINVAL)?;
        self.membership(Event::Remove { slot: leg }, None)?;
        let legs = self.in_sync_legs();
        self.changes.end_away(&id, &legs);
        self.legs[leg].set_state(LegState::Removed);
        log::warn!(
            "leg {} ('{}') removed from the mirror",
            leg,
            self.legs[leg].path().display()
        );
        Ok(())
    }

    /// Writes every dropped leg's id into every in-sync leg's superblock, and moves their
    /// event counters on. Called when a leg is dropped, and again at unmount in case a write
    /// failed (the system log says so): a drop that no superblock records would let a later
    /// mount serve the dropped leg's old data.
    pub fn record_dropped_legs(&self) {
        let _ = self.membership(Event::Dropped, None);
    }

    /// Members of the mirror that were not in the leg list at mount (`-o degraded`).
    pub fn set_unlisted_members(&self, n: usize) {
        self.unlisted.store(n, Ordering::Relaxed);
    }

    pub fn unlisted_members(&self) -> usize {
        self.unlisted.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{test_mirror, KernelView};
    use super::*;
    use crate::leg::spec::LegSpec;
    use crate::leg::LegState;
    use crate::meta::superblock::LegSuperblock;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    /// Counts the notices that the metadata leg changed.
    struct Watch(Arc<AtomicUsize>);

    impl KernelView for Watch {
        fn path_changed(&self, _: &std::path::Path) {}
        fn metadata_leg_changed(&self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Leg `leg`'s superblock as written on it.
    fn on_disk(m: &Mirror, leg: LegIdx) -> LegSuperblock {
        LegSuperblock::read(&m.leg(leg).path()).unwrap().unwrap()
    }

    const EIO: DropReason = DropReason::LegFault(Errno::EIO);

    #[test]
    fn a_dropped_leg_is_recorded_by_every_survivor_and_the_last_is_kept() {
        let (_d, m) = test_mirror::build(3, false, true);
        let (id1, id2) = (m.leg_id(1).unwrap(), m.leg_id(2).unwrap());
        m.mark_failed(1, "write", EIO);
        assert_eq!(m.in_sync_legs(), vec![0, 2]);
        assert_eq!(m.leg(1).state(), LegState::Failed);
        for s in [0, 2] {
            assert_eq!(on_disk(&m, s).failed_legs, vec![id1.clone()], "leg {s}");
        }
        assert!(
            m.changes().away_ids().contains(&id1),
            "its changes are kept meanwhile"
        );
        m.mark_failed(2, "write", EIO);
        m.mark_failed(0, "write", EIO);
        assert_eq!(m.in_sync_legs(), vec![0], "the last leg in sync stays");
        assert_eq!(on_disk(&m, 0).failed_legs, vec![id1, id2]);
        assert_eq!(m.changes().away_ids().len(), 2);
    }

    #[test]
    fn the_metadata_leg_is_the_first_loud_one_and_the_kernel_hears_when_it_moves() {
        let quiet = LegSpec {
            quiet: true,
            ..Default::default()
        };
        let specs = [quiet, LegSpec::default(), LegSpec::default()];
        let (_d, m) = test_mirror::with_specs(&specs, false, false);
        let told = Arc::new(AtomicUsize::new(0));
        m.set_kernel_view(Box::new(Watch(told.clone())));
        assert_eq!(m.metadata_leg(), 1, "leg 0 is quiet");
        assert_eq!(m.quiet_among(&[0, 1, 2]), vec![0]);
        assert_eq!(
            m.quiet_among(&[0]),
            Vec::<LegIdx>::new(),
            "no loud leg to ask instead"
        );
        m.mark_failed(2, "write", EIO);
        assert_eq!(
            told.load(Ordering::Relaxed),
            0,
            "leg 1 still stands for the metadata"
        );
        m.mark_failed(1, "write", EIO);
        assert_eq!(m.metadata_leg(), 0, "a quiet leg when no other is in sync");
        assert_eq!(told.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_member_is_removed_only_once_out_of_the_mirror() {
        let (_d, m) = test_mirror::build(3, false, true);
        let id2 = m.leg_id(2).unwrap();
        assert_eq!(m.remove_member(2), Err(Errno::EBUSY));
        m.mark_failed(2, "fail", DropReason::Requested);
        assert_eq!(m.remove_member(2), Ok(()));
        assert_eq!(m.leg(2).state(), LegState::Removed);
        for s in [0, 1] {
            let sb = on_disk(&m, s);
            assert!(!sb.failed_legs.contains(&id2), "leg {s}");
            assert!(!sb.members.contains(&id2), "leg {s}");
            assert_eq!(sb.leg_count, 2);
        }
        assert!(
            !m.changes().away_ids().contains(&id2),
            "not awaited any more"
        );
        assert_eq!(m.remove_member(2), Ok(()), "again: nothing to do");
    }

    #[test]
    fn a_replaced_member_is_new_until_it_joins() {
        let (d, m) = test_mirror::build(2, false, true);
        let old = m.leg_id(1).unwrap();
        let dir = d.path().join("new");
        std::fs::create_dir(&dir).unwrap();
        let dir = dir.canonicalize().unwrap();
        assert_eq!(m.replace_member(1, &dir), Err(Errno::EBUSY));
        m.mark_failed(1, "fail", DropReason::Requested);
        let new = m.replace_member(1, &dir).unwrap();
        assert_ne!(new, old);
        assert_eq!(m.leg(1).path(), dir);
        assert_eq!(m.leg_id(1), Some(new.clone()));
        assert_eq!(
            on_disk(&m, 1).leg_id,
            new,
            "its own superblock, in its new directory"
        );
        assert_eq!(
            on_disk(&m, 0).failed_legs,
            vec![new.clone()],
            "the old one forgotten"
        );
        assert_eq!(
            m.leg(1).state(),
            LegState::Failed,
            "out until a resync fills it"
        );
        m.join_leg(1, &new);
        assert_eq!(m.in_sync_legs(), vec![0, 1]);
        for s in [0, 1] {
            assert!(on_disk(&m, s).failed_legs.is_empty(), "leg {s}");
        }
        assert!(m.changes().away_ids().is_empty());
    }
}
