//! The change records: the write-intent and away logs kept as changes reach the legs, their
//! sweep (with the checksums committed alongside), and the clean unmount that empties them.

use super::outcome::DropReason;
use super::Mirror;
use crate::errno::{Errno, Result};
use crate::leg::LegIdx;
use crate::meta::changes::{ChangeLog, Renaming};
use crate::meta::membership::Event;
use std::sync::atomic::Ordering;

impl Mirror {
    /// Flushes leg `l`'s filesystem (syncfs) within `leg_timeout`, as an fsync: a leg that
    /// hangs is dropped, and the sweep does not wait for it.
    fn flush_leg(&self, l: LegIdx) -> Result<()> {
        let root = self.legs[l].root()?;
        self.timed(
            l,
            "flush",
            Box::new(move || crate::leg::flush_root(std::os::fd::AsFd::as_fd(&*root))),
        )
    }

    /// The change records (write-intent and away logs).
    pub fn changes(&self) -> &ChangeLog {
        &self.changes
    }

    /// Records, durably on every in-sync leg, that the object `ino` (whose path on a leg the
    /// closure gives) is about to change. A leg whose record cannot be written is dropped.
    pub fn will_change(&self, ino: u64, path: impl FnOnce() -> Option<Vec<u8>>) {
        let legs = self.in_sync_legs();
        let failed = self.changes.will_change(ino, &legs, path);
        self.intent_failed(failed);
    }

    /// As [`will_change`](Self::will_change) for a directory about to get new entries: one
    /// record (its cover) stands for it and for what is created in it meanwhile
    /// ([`ChangeLog::will_change_dir`]).
    pub fn will_change_dir(&self, ino: u64, path: impl FnOnce() -> Option<Vec<u8>>) {
        let legs = self.in_sync_legs();
        let failed = self.changes.will_change_dir(ino, &legs, path);
        self.intent_failed(failed);
    }

    /// Before a name of the dirty objects `inos` goes while other names keep them: they are
    /// recorded by identity (`record`, [`crate::meta::changes::identity_record`]) from now on
    /// ([`ChangeLog::record_identity`]). A leg whose record cannot be written is dropped.
    pub fn record_identity(&self, inos: &[u64], record: Vec<u8>) {
        let legs = self.in_sync_legs();
        let failed = self.changes.record_identity(inos, record, &legs);
        self.intent_failed(failed);
    }

    /// Before a rename reaches the legs: what is dirty at or below the moved paths is
    /// recorded under the new ones ([`ChangeLog::renaming`]). A leg whose record cannot be
    /// written is dropped.
    pub fn renaming(
        &self,
        names: (Vec<u8>, Vec<u8>),
        exchange: bool,
        parents: (u64, u64),
        dirs: impl FnOnce() -> Option<(Vec<u8>, Vec<u8>)>,
    ) -> Renaming {
        let legs = self.in_sync_legs();
        let (r, failed) = self.changes.renaming(names, exchange, parents, dirs, &legs);
        self.intent_failed(failed);
        r
    }

    /// After the rename `r` (`done` when it reached the legs): [`ChangeLog::renamed`].
    pub fn renamed(
        &self,
        r: Renaming,
        done: bool,
        dirs: impl FnOnce() -> Option<(Vec<u8>, Vec<u8>)>,
    ) {
        let legs = self.in_sync_legs();
        let failed = self.changes.renamed(r, done, dirs, &legs);
        self.intent_failed(failed);
    }

    /// Drops the legs whose intent log could not be written.
    fn intent_failed(&self, failed: Vec<(LegIdx, std::io::Error)>) {
        for (leg, e) in failed {
            let errno = e.raw_os_error().map_or(Errno::EIO, Errno);
            self.legs[leg]
                .counters
                .write_errors
                .fetch_add(1, Ordering::Relaxed);
            self.mark_failed(leg, "write-intent log", DropReason::LegFault(errno));
        }
    }

    /// One sweep of the change records (every second, from the background thread): away
    /// logs flushed, and intent entries idle for a while cleared once every leg holds their
    /// data on stable storage. `stamp` is given the idle objects first, for their checksum
    /// stamps (the copies' ctimes once the mirror's changes settled), committed with them.
    pub fn sweep_changes(&self, stamp: &dyn Fn(&[u64])) {
        let legs = self.in_sync_legs();
        let idle = self.changes.idle();
        if idle.inos.is_empty() {
            self.changes.flush_away(&legs);
            // Checksums may reach the stores before their data is durable: their files stay
            // in the intent log until a later sweep, so a crash resolves them either way.
            if self.integrity.backlog() >= crate::integrity::COMMIT_BACKLOG {
                self.commit_checksums();
            }
            return;
        }
        for &l in &legs {
            if let Err(e) = self.flush_leg(l) {
                log::error!("cannot flush '{}': {e}", self.legs[l].path().display());
                return;
            }
        }
        // The idle files' data is durable now: their checksums are committed before their
        // intent entries go, so no clean file ever has checksums behind its data.
        if self.integrity.enabled() {
            stamp(&idle.inos);
        }
        if !self.commit_checksums() {
            return;
        }
        self.changes.clear(&idle, &legs);
    }

    /// Commits the checksums kept in memory to every in-sync leg's store. A leg whose store
    /// cannot be written is dropped; false if no store took them.
    pub fn commit_checksums(&self) -> bool {
        let stores = self
            .in_sync_legs()
            .into_iter()
            .filter(|&l| self.integrity.store(l).is_some())
            .count();
        let failed = self.integrity.commit_checked(|leg| {
            self.check_fault(leg, "checksums")
                .map_err(|e| std::io::Error::from_raw_os_error(e.code()))
        });
        let all = stores > 0 && failed.len() == stores;
        for (leg, e) in failed {
            log::error!("leg {leg}: {e}");
            if !all {
                self.legs[leg]
                    .counters
                    .write_errors
                    .fetch_add(1, Ordering::Relaxed);
                self.mark_failed(
                    leg,
                    "checksum store commit",
                    DropReason::LegFault(Errno::EIO),
                );
            }
        }
        !all
    }

    /// At a clean unmount: background work stops, every in-sync leg is flushed, the intent
    /// logs are emptied, and every in-sync leg's superblock says clean, with the dropped legs
    /// recorded and the event counter moved on.
    ///
    /// `stamp` is given every object still marked changing, as for [`Mirror::sweep_changes`].
    pub fn mark_clean(&self, stamp: &dyn Fn(&[u64])) {
        self.stopping.store(true, Ordering::Release);
        // Clean means every leg holds the same data on stable storage: flush first, so that
        // a power loss after the unmount cannot leave the legs different under a clean flag.
        let legs = self.in_sync_legs();
        for &l in &legs {
            if let Err(e) = self.legs[l].flush() {
                log::error!("cannot flush '{}': {e}", self.legs[l].path().display());
                // Not known to be on stable storage: leave the intent log and the flag as
                // they are, so that the next mount checks the listed files.
                self.record_dropped_legs();
                return;
            }
        }
        if self.integrity.enabled() {
            stamp(&self.changes.dirty_inos());
        }
        if !self.commit_checksums() {
            self.record_dropped_legs();
            return;
        }
        let legs = self.in_sync_legs();
        self.changes.clear_all(&legs);
        let _ = self.membership(Event::CleanUnmount, None);
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_mirror;
    use super::*;
    use crate::leg::LegState;
    use crate::meta::superblock::LegSuperblock;
    use std::path::Path;

    /// What leg `root`'s intent log holds.
    fn intent(root: &Path) -> Vec<Vec<u8>> {
        ChangeLog::read_intent(&[root])
    }

    /// Leg `leg`'s superblock as written on it.
    fn on_disk(m: &Mirror, leg: LegIdx) -> LegSuperblock {
        LegSuperblock::read(&m.leg(leg).path()).unwrap().unwrap()
    }

    #[test]
    fn a_leg_whose_intent_record_cannot_be_written_is_dropped() {
        let (_d, m) = test_mirror::build(2, true, true);
        // Its log cannot be opened for writing: a directory in its place.
        let log = |l: LegIdx| m.leg(l).path().join(".mirrorfs").join("intent.log");
        std::fs::create_dir(log(1)).unwrap();
        m.will_change(5, || Some(b"/a".to_vec()));
        assert!(m.changes().is_dirty(5));
        assert!(!intent(&m.leg(0).path()).is_empty(), "recorded on leg 0");
        assert_eq!(m.leg(1).state(), LegState::Failed);
        assert_eq!(m.leg(1).counters.write_errors.load(Ordering::Relaxed), 1);
        assert_eq!(m.leg(0).counters.write_errors.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_sweep_clears_only_what_stayed_idle() {
        let (_d, m) = test_mirror::build(2, true, true);
        m.set_leg_timeout(std::time::Duration::from_secs(60));
        m.will_change(5, || Some(b"/a".to_vec()));
        m.sweep_changes(&|_| panic!("no checksums to stamp"));
        assert!(m.changes().is_dirty(5), "changed just now");
        assert!(!intent(&m.leg(1).path()).is_empty());
        std::thread::sleep(crate::meta::changes::IDLE + std::time::Duration::from_millis(100));
        m.sweep_changes(&|_| panic!("no checksums to stamp"));
        assert_eq!(m.changes().dirty_count(), 0);
        for l in [0, 1] {
            assert!(intent(&m.leg(l).path()).is_empty(), "leg {l}");
            assert!(m.leg(l).is_in_sync());
        }
    }

    #[test]
    fn a_clean_unmount_empties_the_logs_and_marks_the_serving_legs_clean() {
        let (_d, m) = test_mirror::build(3, true, true);
        m.membership(Event::Mount, None).unwrap();
        assert!(!on_disk(&m, 0).clean);
        m.will_change(5, || Some(b"/a".to_vec()));
        let id2 = m.leg_id(2).unwrap();
        m.mark_failed(2, "write", DropReason::LegFault(Errno::EIO));
        let events = on_disk(&m, 0).events;
        m.mark_clean(&|_| panic!("no checksums to stamp"));
        assert!(m.is_stopping());
        assert_eq!(m.changes().dirty_count(), 0);
        for l in [0, 1] {
            let sb = on_disk(&m, l);
            assert!(sb.clean, "leg {l}");
            assert!(sb.events > events, "leg {l}");
            assert_eq!(sb.failed_legs, vec![id2.clone()], "leg {l}");
            assert!(intent(&m.leg(l).path()).is_empty(), "leg {l}");
        }
        assert!(!on_disk(&m, 2).clean, "the dropped leg is left as it was");
    }
}
