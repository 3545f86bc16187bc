//! The away logs: what changed while a member was out of sync, for its return.
//!
//! While a member is not in sync (missing, stale or dropped), every in-sync leg keeps
//! `.mirrorfs/away-<LEG_ID>.log`, the paths changed since it left (appended, flushed at each
//! sweep, before any intent entry is cleared). Its return needs those paths resynced, not the
//! whole tree. If the mirror crashed meanwhile, the away log may lack the last second's paths,
//! but those are still in the intent log: the union of both is complete.
//!
//! A full resync writes one more record into the away log when it starts, [`WHOLE_TREE`]: until
//! the member has joined (and the log is gone), only a full resync can bring it back, even if
//! the resync failed, was cancelled or the daemon died halfway, and the log has gained paths
//! since.

use super::format::{append, away_log_name, log_path, read_log, WHOLE_TREE};
use super::ChangeLog;
use std::collections::HashSet;
use std::path::Path;

/// The members that are away, and the paths changed since each left.
pub(super) struct Away {
    leg_id: String,
    /// Paths already in its log.
    recorded: HashSet<Vec<u8>>,
    /// Paths not yet written to its log.
    pending: HashSet<Vec<u8>>,
    /// Paths changed since the last [`ChangeLog::take_changed`] (a resync's passes).
    changed: HashSet<Vec<u8>>,
}

impl Away {
    pub(super) fn note(&mut self, p: &[u8]) {
        if !self.recorded.contains(p) && !self.pending.contains(p) {
            self.pending.insert(p.to_vec());
        }
        if !self.changed.contains(p) {
            self.changed.insert(p.to_vec());
        }
    }
}

impl ChangeLog {
    /// Starts the away log of `leg_id` (a member that left: missing at mount, stale, or just
    /// dropped). Every object dirty now is in it from the start: a change in progress when a
    /// leg is dropped is marked before it reaches any leg.
    pub fn start_away(&self, leg_id: &str) {
        let mut inner = self.inner.lock();
        if inner.away.iter().any(|a| a.leg_id == leg_id) {
            return;
        }
        let pending: HashSet<Vec<u8>> = inner.dirty.values().map(|d| d.path.clone()).collect();
        inner.away.push(Away {
            leg_id: leg_id.to_string(),
            recorded: HashSet::new(),
            changed: pending.clone(),
            pending,
        });
    }

    /// The ids of the members with an away log.
    pub fn away_ids(&self) -> Vec<String> {
        self.inner
            .lock()
            .away
            .iter()
            .map(|a| a.leg_id.clone())
            .collect()
    }

    /// Writes the away logs' pending paths to every leg in `legs` and flushes them.
    pub fn flush_away(&self, legs: &[usize]) {
        let mut inner = self.inner.lock();
        for a in inner.away.iter_mut() {
            if a.pending.is_empty() {
                continue;
            }
            let mut fresh: Vec<Vec<u8>> = std::mem::take(&mut a.pending).into_iter().collect();
            fresh.sort();
            fresh.retain(|p| !a.recorded.contains(p));
            let records: Vec<&[u8]> = fresh.iter().map(Vec::as_slice).collect();
            let name = away_log_name(&a.leg_id);
            for &l in legs {
                if let Err(e) = append(&log_path(&self.root(l), &name), &records, true) {
                    log::error!(
                        "cannot write the away log of {} on '{}': {e}",
                        a.leg_id,
                        self.root(l).display()
                    );
                }
            }
            a.recorded.extend(fresh);
        }
    }

    /// The paths changed since the last call (or since `leg_id` left), for a resync pass;
    /// the set starts empty again.
    pub fn take_changed(&self, leg_id: &str) -> Vec<Vec<u8>> {
        let mut inner = self.inner.lock();
        inner
            .away
            .iter_mut()
            .find(|a| a.leg_id == leg_id)
            .map(|a| std::mem::take(&mut a.changed).into_iter().collect())
            .unwrap_or_default()
    }

    /// The paths in `leg_id`'s away log on the leg at `root`; `None` when only a full resync
    /// will do: there is no log, it cannot be read, or it holds [`WHOLE_TREE`].
    pub fn read_away(root: &Path, leg_id: &str) -> Option<Vec<Vec<u8>>> {
        let p = log_path(root, &away_log_name(leg_id));
        if !p.exists() {
            return None;
        }
        read_log(&p)
            .ok()
            .filter(|records| !records.iter().any(|r| r == WHOLE_TREE))
    }

    /// A full resync of `leg_id` begins: its away log on every leg in `legs` says so, durably,
    /// before the resync writes anything (see [`WHOLE_TREE`]). Returns the first error.
    pub fn mark_whole_tree(&self, leg_id: &str, legs: &[usize]) -> std::io::Result<()> {
        let name = away_log_name(leg_id);
        legs.iter()
            .try_for_each(|&l| append(&log_path(&self.root(l), &name), &[WHOLE_TREE], true))
    }

    /// `leg_id` is back in sync: its away log is no longer kept, and removed from `legs`.
    pub fn end_away(&self, leg_id: &str, legs: &[usize]) {
        self.inner.lock().away.retain(|a| a.leg_id != leg_id);
        let name = away_log_name(leg_id);
        for &l in legs {
            let p = log_path(&self.root(l), &name);
            if let Err(e) = std::fs::remove_file(&p) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    log::error!("cannot remove '{}': {e}", p.display());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::changes::testing::legs;
    use crate::meta::changes::INTENT_LOG;

    #[test]
    fn away_logs_get_what_was_dirty_and_everything_after() {
        let (_d, roots) = legs(2);
        let log = ChangeLog::new(roots.clone(), true);
        log.will_change(1, &[0, 1], || Some(b"a".to_vec()));
        log.start_away("L1");
        log.will_change(2, &[0], || Some(b"b".to_vec()));
        log.will_change(3, &[0], || Some(b"b".to_vec()));
        log.flush_away(&[0]);
        let got = read_log(&log_path(&roots[0], &away_log_name("L1"))).unwrap();
        assert_eq!(got, vec![b"a".to_vec(), b"b".to_vec()]);
        // Without the intent log, the away log still gets every changed path.
        let (_d2, roots2) = legs(1);
        let log = ChangeLog::new(roots2.clone(), false);
        log.start_away("L9");
        log.will_change(5, &[0], || Some(b"x".to_vec()));
        log.flush_away(&[0]);
        assert_eq!(
            read_log(&log_path(&roots2[0], &away_log_name("L9"))).unwrap(),
            vec![b"x".to_vec()]
        );
        assert!(read_log(&log_path(&roots2[0], INTENT_LOG))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_full_resync_stays_full_until_the_member_joins() {
        let (_d, roots) = legs(1);
        let log = ChangeLog::new(roots.clone(), true);
        assert_eq!(ChangeLog::read_away(&roots[0], "L1"), None, "no log: full");
        log.start_away("L1");
        log.will_change(1, &[0], || Some(b"a".to_vec()));
        log.flush_away(&[0]);
        assert_eq!(
            ChangeLog::read_away(&roots[0], "L1"),
            Some(vec![b"a".to_vec()]),
            "an away log: incremental"
        );
        // A full resync starts, then fails; paths changed meanwhile are logged after the mark.
        log.mark_whole_tree("L1", &[0]).unwrap();
        log.will_change(2, &[0], || Some(b"b".to_vec()));
        log.flush_away(&[0]);
        assert_eq!(ChangeLog::read_away(&roots[0], "L1"), None, "still full");
        log.end_away("L1", &[0]);
        assert_eq!(ChangeLog::read_away(&roots[0], "L1"), None);
        assert!(!log_path(&roots[0], &away_log_name("L1")).exists());
    }
}
