//! Rename planning: what a rename moves in the dirty index, recorded under the new paths first.
//!
//! Before a rename reaches any leg ([`ChangeLog::renaming`], [`ChangeLog::renamed`]), what is
//! dirty at or below the moved name, and covers of directories there, are recorded again under
//! the new paths (one flush; a cover keeps its time). A moved object whose cover stays behind
//! is covered by its new directory's cover, which the rename wrote. The old paths' records go
//! at the next rewrite of the log.

use super::format::{child_path, cover_record, cover_record_at, now_secs, parse_cover};
use super::{ChangeLog, Dirty, Inner};

/// A rename about to reach the legs ([`ChangeLog::renaming`]), to be ended by
/// [`ChangeLog::renamed`].
#[must_use]
pub struct Renaming {
    id: u64,
    /// The old and the new name.
    names: (Vec<u8>, Vec<u8>),
    /// The old and the new path, once asked for.
    paths: Option<(Vec<u8>, Vec<u8>)>,
    exchange: bool,
    /// The directories the old and the new name are in (by inode).
    parents: (u64, u64),
}

impl Renaming {
    /// The old and new paths, from the paths of the two directories (`dirs`, asked for only
    /// the first time).
    fn paths(
        &mut self,
        dirs: impl FnOnce() -> Option<(Vec<u8>, Vec<u8>)>,
    ) -> Option<(Vec<u8>, Vec<u8>)> {
        if self.paths.is_none() {
            let (from, to) = dirs()?;
            self.paths = Some((
                child_path(&from, &self.names.0),
                child_path(&to, &self.names.1),
            ));
        }
        self.paths.clone()
    }
}

/// What a rename changes in the dirty objects and covers at and below the paths it moves.
#[derive(Default)]
struct MovePlan {
    /// Dirty object: its new path, and what stands for it from now on.
    dirty: Vec<(u64, Vec<u8>, Option<u64>)>,
    covers: Vec<MovedCover>,
    /// The records the moved objects need, under their new paths.
    records: Vec<Vec<u8>>,
}

/// A cover (by key) moved by a rename: its new directory, record, root and kind.
struct MovedCover {
    key: u64,
    dir: Vec<u8>,
    record: Vec<u8>,
    root: u64,
    subtree: bool,
}

/// `p` moved by a rename of `from` to `to`: its new path if it is `from` or below it.
fn moved_path(p: &[u8], from: &[u8], to: &[u8]) -> Option<Vec<u8>> {
    let rest = p.strip_prefix(from)?;
    if !rest.is_empty() && rest[0] != b'/' {
        return None;
    }
    let mut n = to.to_vec();
    n.extend_from_slice(rest);
    Some(n)
}

/// The cover record `old` for the directory `dir`, with the same time and kind (a fresh one,
/// timed now, if `old` is not a cover).
fn re_record(old: &[u8], dir: &[u8]) -> Vec<u8> {
    match parse_cover(old) {
        Some(c) => cover_record_at(dir, c.t, c.subtree),
        None => cover_record(dir, now_secs(), false),
    }
}

impl Inner {
    /// What the rename `r` changes, once it has reached the legs: every dirty object and
    /// cover at or below a moved path goes to the new path. A record names the new path for
    /// each of them that had its own (a cover keeps its time `T`), and for each moved cover
    /// whose record stays behind (it inherited a cover of a directory that does not move): a
    /// record names paths, so without them a crash later would leave the moved objects'
    /// copies unlooked at. A moved object whose cover stays behind (its old directory's) is
    /// covered by its new directory's, which the rename wrote; its ctime moved with it.
    fn plan_move(&self, r: &Renaming, from: &[u8], to: &[u8]) -> MovePlan {
        let map = |p: &[u8]| {
            moved_path(p, from, to)
                .or_else(|| r.exchange.then(|| moved_path(p, to, from)).flatten())
        };
        let mut plan = MovePlan::default();
        for (&k, c) in &self.covers {
            let Some(dir) = map(&c.dir) else { continue };
            let root = self.covers.get(&c.root);
            let (record, root, subtree) = if !c.record.is_empty() {
                (re_record(&c.record, &dir), c.root, c.subtree)
            } else if root.is_some_and(|r| map(&r.dir).is_some()) {
                (Vec::new(), c.root, c.subtree)
            } else {
                // Its root stays behind: it gets its own record, of the root's time and kind.
                let subtree = root.is_some_and(|r| r.subtree);
                (
                    re_record(root.map_or(&[][..], |r| &r.record), &dir),
                    k,
                    subtree,
                )
            };
            if !record.is_empty() {
                plan.records.push(record.clone());
            }
            plan.covers.push(MovedCover {
                key: k,
                dir,
                record,
                root,
                subtree,
            });
        }
        let mut moved = self.dirty_within(from);
        if r.exchange {
            moved.extend(self.dirty_within(to));
        }
        for i in moved {
            let Some(d) = self.dirty.get(&i) else {
                continue;
            };
            let Some(path) = map(&d.path) else { continue };
            let cover_moves = |c: u64| self.covers.get(&c).is_some_and(|c| map(&c.dir).is_some());
            let new_parent = match () {
                _ if d.path == from => Some(r.parents.1),
                _ if d.path == to => Some(r.parents.0),
                _ => None,
            };
            let covered_by = match (d.covered_by, new_parent) {
                (Some(c), _) if cover_moves(c) => Some(c),
                (_, Some(np)) if self.covers.contains_key(&np) => Some(np),
                _ => {
                    plan.records.push(path.clone());
                    None
                }
            };
            plan.dirty.push((i, path, covered_by));
        }
        plan
    }
}

impl ChangeLog {
    /// The object named `names.0` in the directory `parents.0` is about to be renamed to
    /// `names.1` in `parents.1` (with `exchange`, the object there goes the other way as well);
    /// `dirs` gives the two directories' paths relative to the leg root, when needed. What is
    /// dirty at or below a moved path, and covers of directories there, are recorded under
    /// the new paths on the in-sync legs `legs`, durably, before the rename reaches any leg:
    /// the records of the old paths would no longer name them after a crash. Nothing is
    /// recorded when nothing there is dirty. End with [`renamed`](Self::renamed). Returns the
    /// legs whose intent log could not be written.
    pub fn renaming(
        &self,
        names: (Vec<u8>, Vec<u8>),
        exchange: bool,
        parents: (u64, u64),
        dirs: impl FnOnce() -> Option<(Vec<u8>, Vec<u8>)>,
        legs: &[usize],
    ) -> (Renaming, Vec<(usize, std::io::Error)>) {
        let mut inner = self.inner.lock();
        inner.next_move += 1;
        let mut r = Renaming {
            id: inner.next_move,
            names,
            paths: None,
            exchange,
            parents,
        };
        // A cover moves even with nothing dirty under it: what is created there later is named
        // by the cover's directory.
        if !self.intent || (inner.dirty.is_empty() && inner.covers.is_empty()) {
            return (r, Vec::new());
        }
        let Some((from, to)) = r.paths(dirs) else {
            return (r, Vec::new());
        };
        let records = inner.plan_move(&r, &from, &to).records;
        if records.is_empty() {
            return (r, Vec::new());
        }
        // Held across the flush, as in `will_change`.
        let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
        let failed = self.record_all(legs, &refs);
        inner.moving.insert(r.id, records);
        (r, failed)
    }

    /// Ends the rename `r`: when it reached the legs (`done`), what was dirty at or below the
    /// moved paths is known by its new paths from now on (`dirs` as for
    /// [`renaming`](Self::renaming)). Records needed since `renaming` (an object dirtied
    /// meanwhile) are written to `legs`; the legs that failed are returned.
    pub fn renamed(
        &self,
        mut r: Renaming,
        done: bool,
        dirs: impl FnOnce() -> Option<(Vec<u8>, Vec<u8>)>,
        legs: &[usize],
    ) -> Vec<(usize, std::io::Error)> {
        let mut inner = self.inner.lock();
        let written = inner.moving.remove(&r.id).unwrap_or_default();
        if !done || (inner.dirty.is_empty() && inner.covers.is_empty()) {
            return Vec::new();
        }
        let Some((from, to)) = r.paths(dirs) else {
            return Vec::new();
        };
        let plan = inner.plan_move(&r, &from, &to);
        let missing: Vec<&[u8]> = plan
            .records
            .iter()
            .filter(|n| !written.contains(n))
            .map(Vec::as_slice)
            .collect();
        let failed = match self.intent && !missing.is_empty() {
            true => self.record_all(legs, &missing),
            false => Vec::new(),
        };
        for m in plan.covers {
            if let Some(c) = inner.covers.get_mut(&m.key) {
                (c.dir, c.record, c.root, c.subtree) = (m.dir, m.record, m.root, m.subtree);
            }
        }
        for (i, path, covered_by) in plan.dirty {
            if let Some(d) = inner.dirty.get(&i) {
                let d = Dirty {
                    path,
                    last_change: d.last_change,
                    covered_by,
                };
                inner.insert_dirty(i, d);
            }
        }
        failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::changes::testing::legs;
    use crate::meta::changes::{parse_cover, read_log, IDLE, INTENT_LOG};
    use crate::meta::META_DIR;
    use std::collections::HashSet;
    use std::path::{Path, PathBuf};

    /// A rename of `from` (in directory `p`) to `to` (in `np`), through both steps; `done`
    /// when it reached the legs.
    fn rename(log: &ChangeLog, from: &str, to: &str, parents: (u64, u64), done: bool) {
        let split = |s: &str| match s.rsplit_once('/') {
            Some((d, n)) => (d.as_bytes().to_vec(), n.as_bytes().to_vec()),
            None => (b".".to_vec(), s.as_bytes().to_vec()),
        };
        let ((fd, fname), (td, tname)) = (split(from), split(to));
        let dirs = || Some((fd.clone(), td.clone()));
        let (r, failed) = log.renaming((fname, tname), false, parents, dirs, &[0, 1]);
        assert!(failed.is_empty());
        assert!(log.renamed(r, done, dirs, &[0, 1]).is_empty());
    }

    #[test]
    fn what_stays_dirty_is_recorded_at_its_new_path_after_a_rename() {
        let (_d, roots) = legs(2);
        let log = ChangeLog::new(roots.clone(), true);
        let refs: Vec<&Path> = roots.iter().map(PathBuf::as_path).collect();
        let recs = || -> HashSet<Vec<u8>> { ChangeLog::read_intent(&refs).into_iter().collect() };
        let has = |r: &[u8]| recs().contains(r);
        // A file with a record of its own (written, in a directory with no cover), in "d".
        log.will_change(7, &[0, 1], || Some(b"d/f".to_vec()));
        // Its directory "d" (inode 5, in the root, 1) is renamed to "e": the rename writes the
        // root's cover first (as `MirrorFs::rename` does), then the record of "e/f".
        log.will_change_dir(1, &[0, 1], || Some(b".".to_vec()));
        rename(&log, "d", "e", (1, 1), true);
        assert!(has(b"e/f"), "{:?}", recs());
        assert!(log.is_dirty_path(b"e/f") && !log.is_dirty_path(b"d/f"));
        // Its next change records nothing: it is known by its new path.
        assert!(log.will_change(7, &[0, 1], || panic!("dirty")).is_empty());
        // The file itself moves to "y" (inode 9): covered by y's cover from now on, no record.
        log.will_change_dir(9, &[0, 1], || Some(b"y".to_vec()));
        let before = recs().len();
        rename(&log, "e/f", "y/g", (5, 9), true);
        assert_eq!(recs().len(), before, "{:?}", recs());
        assert!(log.is_dirty_path(b"y/g"));
        assert_eq!(log.inner.lock().dirty[&7].covered_by, Some(9));
        // A rename that did not reach the legs changes nothing.
        rename(&log, "y/g", "z/g", (9, 1), false);
        assert!(log.is_dirty_path(b"y/g"));
        // Once everything is idle, the old records go with the rest.
        {
            let mut inner = log.inner.lock();
            inner.dirty.values_mut().for_each(|d| d.last_change -= IDLE);
            inner
                .covers
                .values_mut()
                .for_each(|c| c.last_change -= IDLE);
        }
        log.clear(&log.idle(), &[0, 1]);
        assert!(recs().is_empty(), "{:?}", recs());
        assert!(log.inner.lock().by_path.is_empty());
    }

    #[test]
    fn a_renamed_directory_takes_its_cover_along() {
        let (_d, roots) = legs(2);
        let log = ChangeLog::new(roots.clone(), true);
        let refs: Vec<&Path> = roots.iter().map(PathBuf::as_path).collect();
        let covers = || -> Vec<(u64, bool, Vec<u8>)> {
            let mut v: Vec<_> = ChangeLog::read_intent(&refs)
                .iter()
                .filter_map(|r| parse_cover(r).map(|c| (c.t, c.subtree, c.dir.to_vec())))
                .collect();
            v.sort();
            v
        };
        // "c" (inode 5) has a cover and a new file; "c/sub" (6) inherits it and has one too.
        log.will_change_dir(5, &[0, 1], || Some(b"c".to_vec()));
        log.created_in(10, 5, b"n0", false);
        log.created_in(6, 5, b"sub", true);
        log.will_change_dir(6, &[0, 1], || panic!("inherited"));
        log.created_in(11, 6, b"m0", false);
        let t = covers()[0].0;
        // "c" goes to "c2": its cover is recorded again for "c2", with its time.
        rename(&log, "c", "c2", (1, 1), true);
        assert!(
            covers().contains(&(t, false, b"c2".to_vec())),
            "{:?}",
            covers()
        );
        assert!(log.is_dirty_path(b"c2/n0") && log.is_dirty_path(b"c2/sub/m0"));
        // What is created in it later is covered, at its new path, without a record.
        let n = ChangeLog::read_intent(&refs).len();
        log.will_change_dir(5, &[0, 1], || panic!("covered"));
        log.created_in(12, 5, b"n1", false);
        assert!(log.is_dirty_path(b"c2/n1"));
        assert_eq!(ChangeLog::read_intent(&refs).len(), n);
        // "c2/sub" leaves its cover's directory for "u": it gets a cover of its own, with the
        // time of the cover it inherited.
        rename(&log, "c2/sub", "u", (5, 1), true);
        assert!(
            covers().contains(&(t, false, b"u".to_vec())),
            "{:?}",
            covers()
        );
        assert!(log.is_dirty_path(b"u/m0"));
        assert_eq!(log.inner.lock().covers[&6].root, 6);
    }

    #[test]
    fn an_exchange_moves_both_ways_and_a_sweep_keeps_a_rename_s_records() {
        let (_d, roots) = legs(2);
        let log = ChangeLog::new(roots.clone(), true);
        let refs: Vec<&Path> = roots.iter().map(PathBuf::as_path).collect();
        let recs = || -> HashSet<Vec<u8>> { ChangeLog::read_intent(&refs).into_iter().collect() };
        log.will_change(7, &[0, 1], || Some(b"a/f".to_vec()));
        log.will_change(8, &[0, 1], || Some(b"b/g".to_vec()));
        let dirs = || Some((b".".to_vec(), b".".to_vec()));
        let (r, failed) = log.renaming((b"a".to_vec(), b"b".to_vec()), true, (1, 1), dirs, &[0, 1]);
        assert!(failed.is_empty());
        assert!(recs().contains(&b"b/f"[..]) && recs().contains(&b"a/g"[..]));
        // A sweep before the rename ends rewrites the log: the rename's records stay.
        log.will_change(9, &[0, 1], || Some(b"old".to_vec()));
        log.inner.lock().dirty.get_mut(&9).unwrap().last_change -= IDLE;
        log.clear(&log.idle(), &[0, 1]);
        assert!(recs().contains(&b"b/f"[..]) && recs().contains(&b"a/g"[..]));
        assert!(!recs().contains(&b"old"[..]));
        assert!(log.renamed(r, true, dirs, &[0, 1]).is_empty());
        assert!(log.is_dirty_path(b"b/f") && log.is_dirty_path(b"a/g"));
        // A leg whose log cannot take the rename's records is named, for the caller to drop
        // before the rename reaches it; the other leg has them.
        let log1 = roots[1].join(META_DIR).join(INTENT_LOG);
        std::fs::remove_file(&log1).unwrap();
        std::fs::create_dir(&log1).unwrap();
        let (r, failed) =
            log.renaming((b"b".to_vec(), b"c".to_vec()), false, (1, 1), dirs, &[0, 1]);
        assert_eq!(failed.iter().map(|f| f.0).collect::<Vec<_>>(), vec![1]);
        assert!(read_log(&roots[0].join(META_DIR).join(INTENT_LOG))
            .unwrap()
            .contains(&b"c/f".to_vec()));
        assert!(log.renamed(r, true, dirs, &[0]).is_empty());
        assert!(log.is_dirty_path(b"c/f"));
    }
}
