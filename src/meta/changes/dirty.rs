//! The in-memory dirty index: the objects that may differ between the legs now.
//!
//! Each is known by its own intent record, a directory cover or an identity record, until a
//! sweep finds it idle, the legs flush it, and it is cleared (see [`crate::meta::changes`]).

use super::format::{child_path, cover_record, log_path, now_secs, read_log, rewrite, INTENT_LOG};
use super::{ChangeLog, Inner};
use crate::sys::fd::ROOT_REL;
use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

/// An entry idle for this long is flushed and cleared by the next sweep.
pub const IDLE: Duration = Duration::from_secs(2);

/// A path that may differ between the legs, for as long as it is being changed.
pub(super) struct Dirty {
    pub(super) path: Vec<u8>,
    pub(super) last_change: Instant,
    /// The directory (by inode) whose cover stands for this object instead of a record of its
    /// own (a directory's own cover counts too).
    pub(super) covered_by: Option<u64>,
}

/// A directory's cover: its record, written once, stands for what is created in it.
pub(super) struct Cover {
    /// Empty for an inherited cover (a directory born under another cover), which has no
    /// record of its own.
    pub(super) record: Vec<u8>,
    /// The directory's path, for the paths of what it covers.
    pub(super) dir: Vec<u8>,
    /// The directory whose cover has the record standing for this one (itself if written).
    pub(super) root: u64,
    /// A subtree cover: it stands for every directory below its own, so a directory there
    /// needs no record of its own (kept under a key no inode number has, [`SUBTREE_KEY`]).
    pub(super) subtree: bool,
    pub(super) last_change: Instant,
}

/// The keys of subtree covers in [`Inner::covers`] have this bit set (inode numbers do not).
pub(super) const SUBTREE_KEY: u64 = 1 << 63;

/// A directory that needs a cover when this many covers were written in the last [`IDLE`]
/// under one directory below the root gets, instead, a subtree cover of that directory: an
/// `rm -rf` or a `tar` extract over an existing tree then pays a few flushes, not one per
/// directory.
pub(super) const SUBTREE_AFTER: usize = 3;

/// The deepest directory holding both `a` and `b` (relative paths, `.` for the root).
fn common_dir<'a>(a: &'a [u8], b: &[u8]) -> &'a [u8] {
    if a == ROOT_REL || b == ROOT_REL {
        return ROOT_REL;
    }
    let mut end = 0;
    let mut ai = a.split(|&c| c == b'/');
    let mut bi = b.split(|&c| c == b'/');
    let mut first = true;
    loop {
        match (ai.next(), bi.next()) {
            (Some(x), Some(y)) if x == y => {
                end += x.len() + usize::from(!first);
                first = false;
            }
            _ => break,
        }
    }
    if end == 0 {
        ROOT_REL
    } else {
        &a[..end]
    }
}

/// Whether `p` is `dir` or below it.
fn is_within(p: &[u8], dir: &[u8]) -> bool {
    dir == ROOT_REL || p == dir || (p.starts_with(dir) && p.get(dir.len()) == Some(&b'/'))
}

impl Inner {
    /// The subtree cover standing now for the directory at `p`, if any.
    fn subtree_over(&self, p: &[u8]) -> Option<u64> {
        self.covers
            .iter()
            .find(|(_, c)| c.subtree && is_within(p, &c.dir))
            .map(|(&k, _)| k)
    }

    /// The directory to give a subtree cover instead of a cover of `p`: the deepest one
    /// holding `p` and the last [`SUBTREE_AFTER`] covers, when they were written within
    /// [`IDLE`] and it is not the root.
    fn subtree_for(&self, p: &[u8]) -> Option<Vec<u8>> {
        let fresh: Vec<&Vec<u8>> = self
            .recent
            .iter()
            .rev()
            .take_while(|(at, _)| at.elapsed() < IDLE)
            .take(SUBTREE_AFTER)
            .map(|(_, d)| d)
            .collect();
        if fresh.len() < SUBTREE_AFTER {
            return None;
        }
        let dir = fresh.iter().fold(p, |acc, d| common_dir(acc, d));
        (dir != ROOT_REL).then(|| dir.to_vec())
    }

    /// Marks `ino` dirty as `d`.
    pub(super) fn insert_dirty(&mut self, ino: u64, d: Dirty) {
        self.remove_dirty(ino);
        self.by_path.entry(d.path.clone()).or_default().push(ino);
        self.dirty.insert(ino, d);
    }

    /// `ino` is clean.
    fn remove_dirty(&mut self, ino: u64) {
        if let Some(old) = self.dirty.remove(&ino) {
            self.unindex(ino, &old.path);
        }
    }

    /// `ino` is no longer dirty at `path`.
    fn unindex(&mut self, ino: u64, path: &[u8]) {
        if let Some(v) = self.by_path.get_mut(path) {
            v.retain(|&i| i != ino);
            if v.is_empty() {
                self.by_path.remove(path);
            }
        }
    }

    /// The dirty objects at `p` or below it.
    pub(super) fn dirty_within(&self, p: &[u8]) -> Vec<u64> {
        let mut below = p.to_vec();
        below.push(b'/');
        let mut end = p.to_vec();
        end.push(b'/' + 1);
        let exact = self.by_path.get(p).into_iter().flatten();
        let under = self.by_path.range(below..end).flat_map(|(_, v)| v);
        exact.chain(under).copied().collect()
    }

    /// The directory `ino` at `path`, under its cover (written or inherited), is dirty.
    fn dir_under_cover(&mut self, ino: u64, path: Vec<u8>) {
        if !self.renew(ino) {
            self.insert_dirty(
                ino,
                Dirty {
                    path,
                    last_change: Instant::now(),
                    covered_by: Some(ino),
                },
            );
            self.renew(ino);
        }
    }

    /// Renews the dirty object `ino` (and the cover standing for it); false if it is clean.
    fn renew(&mut self, ino: u64) -> bool {
        let Some(d) = self.dirty.get_mut(&ino) else {
            return false;
        };
        let now = Instant::now();
        d.last_change = now;
        if let Some(c) = d.covered_by.and_then(|c| self.covers.get_mut(&c)) {
            c.last_change = now;
            let root = c.root;
            if let Some(r) = self.covers.get_mut(&root) {
                r.last_change = now;
            }
        }
        for a in self.away.iter_mut() {
            a.note(&d.path);
        }
        true
    }

    /// Every record the intent log holds now.
    fn records(&self) -> Vec<&[u8]> {
        self.dirty
            .values()
            .filter(|d| d.covered_by.is_none())
            .map(|d| d.path.as_slice())
            .chain(
                self.covers
                    .values()
                    .filter(|c| !c.record.is_empty())
                    .map(|c| c.record.as_slice()),
            )
            .chain(self.moving.values().flatten().map(Vec::as_slice))
            .collect()
    }
}

/// What [`ChangeLog::sweep`] cleared, for the caller to flush first.
pub struct Sweep {
    pub inos: Vec<u64>,
}

impl ChangeLog {
    /// The union of the intent logs of `legs` (at mount, after a crash).
    pub fn read_intent(roots: &[&Path]) -> Vec<Vec<u8>> {
        let mut all: Vec<Vec<u8>> = Vec::new();
        for r in roots {
            match read_log(&log_path(r, INTENT_LOG)) {
                Ok(v) => all.extend(v),
                Err(e) => log::error!("cannot read the intent log of '{}': {e}", r.display()),
            }
        }
        all.sort();
        all.dedup();
        all
    }

    /// Whether `ino` is marked dirty now.
    pub fn is_dirty(&self, ino: u64) -> bool {
        self.inner.lock().dirty.contains_key(&ino)
    }

    /// The objects marked dirty now.
    pub fn dirty_inos(&self) -> Vec<u64> {
        self.inner.lock().dirty.keys().copied().collect()
    }

    /// Whether an object marked dirty now is at `path` (where it was marked, or where a rename
    /// since took it).
    pub fn is_dirty_path(&self, path: &[u8]) -> bool {
        self.inner.lock().by_path.contains_key(path)
    }

    /// How many objects are marked dirty now.
    pub fn dirty_count(&self) -> usize {
        self.inner.lock().dirty.len()
    }

    /// Records that the object `ino` at `path` is about to change, on the in-sync legs
    /// `legs`. For the intent log, the record is on stable storage on every such leg when this
    /// returns (the first time only; later calls cost a map lookup). `path` is asked for only
    /// when needed (`None`: the object has no path any more, e.g. deleted while open: nothing
    /// to record).
    ///
    /// Returns the legs whose intent log could not be written, with the error: the caller
    /// drops them (their copy can no longer be trusted after a crash).
    pub fn will_change(
        &self,
        ino: u64,
        legs: &[usize],
        path: impl FnOnce() -> Option<Vec<u8>>,
    ) -> Vec<(usize, std::io::Error)> {
        let mut inner = self.inner.lock();
        // A resync's passes need every change, not only the first of a dirty period.
        if inner.renew(ino) {
            return Vec::new();
        }
        let need_path = self.intent || !inner.away.is_empty();
        if !need_path {
            return Vec::new();
        }
        let Some(p) = path() else {
            return Vec::new();
        };
        for a in inner.away.iter_mut() {
            a.note(&p);
        }
        if !self.intent {
            return Vec::new();
        }
        // Held across the flush: a second writer of the same object must not go ahead
        // before the record is durable. Different objects wait too; the cost is one flush
        // per newly dirtied object (or directory cover) per idle period.
        let failed = self.record(legs, &p);
        inner.insert_dirty(
            ino,
            Dirty {
                path: p,
                last_change: Instant::now(),
                covered_by: None,
            },
        );
        failed
    }

    /// As [`will_change`](Self::will_change) for the directory `ino` about to get new entries
    /// (or lose some): its cover is written (once; it also stands for the directory itself), so
    /// that what is created in it ([`created_in`](Self::created_in)) needs no record of its
    /// own. A directory under a subtree cover needs no record; after [`SUBTREE_AFTER`] covers in
    /// a short while under one directory, that directory gets a subtree cover instead.
    pub fn will_change_dir(
        &self,
        ino: u64,
        legs: &[usize],
        path: impl FnOnce() -> Option<Vec<u8>>,
    ) -> Vec<(usize, std::io::Error)> {
        if !self.intent {
            return self.will_change(ino, legs, path);
        }
        let mut inner = self.inner.lock();
        if let Some(c) = inner.covers.get(&ino) {
            let dir = c.dir.clone();
            inner.dir_under_cover(ino, dir);
            return Vec::new();
        }
        let Some(p) = inner.dirty.get(&ino).map(|d| d.path.clone()).or_else(path) else {
            return Vec::new();
        };
        let inherit = |inner: &mut Inner, root: u64, p: Vec<u8>| {
            inner.covers.insert(
                ino,
                Cover {
                    record: Vec::new(),
                    dir: p.clone(),
                    root,
                    subtree: false,
                    last_change: Instant::now(),
                },
            );
            inner.dir_under_cover(ino, p);
        };
        if let Some(root) = inner.subtree_over(&p) {
            inherit(&mut inner, root, p);
            return Vec::new();
        }
        let now_secs = now_secs();
        let subtree = inner.subtree_for(&p);
        let (key, dir) = match &subtree {
            Some(dir) => {
                inner.next_subtree += 1;
                (SUBTREE_KEY | inner.next_subtree, dir.clone())
            }
            None => (ino, p.clone()),
        };
        let record = cover_record(&dir, now_secs, subtree.is_some());
        // Held across the flush, as in `will_change`.
        let failed = self.record(legs, &record);
        inner.recent.push_back((Instant::now(), p.clone()));
        if inner.recent.len() > SUBTREE_AFTER {
            inner.recent.pop_front();
        }
        inner.covers.insert(
            key,
            Cover {
                record,
                dir,
                root: key,
                subtree: subtree.is_some(),
                last_change: Instant::now(),
            },
        );
        if key == ino {
            inner.dir_under_cover(ino, p);
        } else {
            inherit(&mut inner, key, p);
        }
        failed
    }

    /// The object `ino` was just created as `name` in the directory `dir`, which
    /// [`will_change_dir`](Self::will_change_dir) covered: it is dirty from now on, under that
    /// cover, without a record of its own. A new directory (`is_dir`) also inherits the cover:
    /// what is created in it needs no record either. Without a cover (the intent log is off)
    /// nothing is marked: the object's first change marks it.
    pub fn created_in(&self, ino: u64, dir: u64, name: &[u8], is_dir: bool) {
        let mut inner = self.inner.lock();
        let Some(cover) = inner.covers.get(&dir) else {
            inner.renew(ino);
            return;
        };
        let path = child_path(&cover.dir, name);
        let root = cover.root;
        if is_dir && !inner.covers.contains_key(&ino) {
            inner.covers.insert(
                ino,
                Cover {
                    record: Vec::new(),
                    dir: path.clone(),
                    root,
                    subtree: false,
                    last_change: Instant::now(),
                },
            );
        }
        if inner.renew(ino) {
            return;
        }
        inner.insert_dirty(
            ino,
            Dirty {
                path,
                last_change: Instant::now(),
                covered_by: Some(dir),
            },
        );
        inner.renew(ino);
    }

    /// The dirty objects known by the name `name` in the directory `dir` (by inode; the
    /// directory's cover, which [`will_change_dir`](Self::will_change_dir) wrote before the name
    /// goes, gives its path): what [`record_identity`](Self::record_identity) must record again
    /// when that name goes while other names keep the object.
    pub fn dirty_at(&self, dir: u64, name: &[u8]) -> Vec<u64> {
        let inner = self.inner.lock();
        let Some(cover) = inner.covers.get(&dir) else {
            return Vec::new();
        };
        let path = child_path(&cover.dir, name);
        inner.by_path.get(&path).cloned().unwrap_or_default()
    }

    /// The dirty objects `inos` are recorded by identity from now on (`record`, an
    /// [`identity_record`](super::identity_record)), durably on `legs` before this returns: the
    /// name their records give is about to go while other names keep them, and a record of it
    /// would stand for nothing after a crash. Returns the legs whose intent log could not be
    /// written.
    pub fn record_identity(
        &self,
        inos: &[u64],
        record: Vec<u8>,
        legs: &[usize],
    ) -> Vec<(usize, std::io::Error)> {
        let mut inner = self.inner.lock();
        let dirty: Vec<(u64, Instant)> = inos
            .iter()
            .filter_map(|i| inner.dirty.get(i).map(|d| (*i, d.last_change)))
            .collect();
        if dirty.is_empty() {
            return Vec::new();
        }
        // Held across the flush, as in `will_change`.
        let failed = match self.intent {
            true => self.record(legs, &record),
            false => Vec::new(),
        };
        for a in inner.away.iter_mut() {
            a.note(&record);
        }
        for (ino, last_change) in dirty {
            let d = Dirty {
                path: record.clone(),
                last_change,
                covered_by: None,
            };
            inner.insert_dirty(ino, d);
        }
        failed
    }

    /// The objects idle for [`IDLE`]: the caller flushes them on every leg and then calls
    /// [`clear`](Self::clear) with them.
    pub fn idle(&self) -> Sweep {
        let inner = self.inner.lock();
        Sweep {
            inos: inner
                .dirty
                .iter()
                .filter(|(_, d)| d.last_change.elapsed() >= IDLE)
                .map(|(&i, _)| i)
                .collect(),
        }
    }

    /// Clears the entries of `sweep` that did not change again meanwhile, and rewrites the
    /// intent logs on `legs` with what is left. Away logs are flushed first, so that a path
    /// leaves the intent log only once it is in every away log.
    pub fn clear(&self, sweep: &Sweep, legs: &[usize]) {
        if sweep.inos.is_empty() {
            return;
        }
        self.flush_away(legs);
        let mut inner = self.inner.lock();
        let before = (inner.dirty.len(), inner.covers.len());
        for ino in &sweep.inos {
            if inner
                .dirty
                .get(ino)
                .is_some_and(|d| d.last_change.elapsed() >= IDLE)
            {
                inner.remove_dirty(*ino);
            }
        }
        // A cover goes once nothing it stands for is dirty (each change renewed it, so it is
        // idle too by then). A written cover stays while a cover inheriting it is used.
        let mut used: HashSet<u64> = inner.dirty.values().filter_map(|d| d.covered_by).collect();
        let roots: Vec<u64> = used
            .iter()
            .filter_map(|c| inner.covers.get(c).map(|c| c.root))
            .collect();
        used.extend(roots);
        inner
            .covers
            .retain(|ino, c| used.contains(ino) || c.last_change.elapsed() < IDLE);
        // (Never needed by the rules above, which keep a root as long as what inherits it:
        // an inherited cover without its record would stand for nothing after a crash.)
        let kept: HashSet<u64> = inner.covers.keys().copied().collect();
        inner.covers.retain(|_, c| kept.contains(&c.root));
        if (inner.dirty.len(), inner.covers.len()) == before {
            return;
        }
        let left = inner.records();
        for &l in legs {
            if let Err(e) = rewrite(&self.root(l), INTENT_LOG, &left) {
                log::error!(
                    "cannot rewrite the intent log on '{}': {e}",
                    self.root(l).display()
                );
            }
        }
    }

    /// Rewrites the intent log of `legs` with the objects dirty now (a leg that joins).
    pub fn rewrite_intent(&self, legs: &[usize]) {
        if !self.intent {
            return;
        }
        let inner = self.inner.lock();
        let now = inner.records();
        for &l in legs {
            if let Err(e) = rewrite(&self.root(l), INTENT_LOG, &now) {
                log::error!(
                    "cannot write the intent log on '{}': {e}",
                    self.root(l).display()
                );
            }
        }
    }

    /// At a clean unmount, once every leg is flushed: nothing is dirty any more.
    pub fn clear_all(&self, legs: &[usize]) {
        self.flush_away(legs);
        let mut inner = self.inner.lock();
        inner.dirty.clear();
        inner.by_path.clear();
        inner.covers.clear();
        for &l in legs {
            if let Err(e) = rewrite(&self.root(l), INTENT_LOG, &[]) {
                log::error!(
                    "cannot empty the intent log on '{}': {e}",
                    self.root(l).display()
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::changes::format::COVER_SLACK_SECS;
    use crate::meta::changes::testing::legs;
    use crate::meta::changes::{identity_record, parse_cover, parse_identity, CoverRecord};
    use std::path::PathBuf;

    #[test]
    fn a_name_that_goes_while_others_keep_the_object_is_recorded_by_identity() {
        let (_d, roots) = legs(2);
        let log = ChangeLog::new(roots.clone(), true);
        // The directory d (inode 5) is covered before its entry goes; f (9) is dirty at d/f.
        assert!(log
            .will_change(9, &[0, 1], || Some(b"d/f".to_vec()))
            .is_empty());
        assert!(log
            .will_change_dir(5, &[0, 1], || Some(b"d".to_vec()))
            .is_empty());
        assert_eq!(log.dirty_at(5, b"f"), vec![9]);
        assert!(log.dirty_at(5, b"g").is_empty());
        assert!(log.dirty_at(6, b"f").is_empty(), "no cover, no path");
        let rec = identity_record(&[("aa01".into(), 11), ("bb02".into(), 22)]);
        assert_eq!(rec, b"/iaa01=11,bb02=22");
        assert_eq!(parse_identity(&rec), Some(vec![("aa01", 11), ("bb02", 22)]));
        assert!(log.record_identity(&[9], rec.clone(), &[0, 1]).is_empty());
        for r in &roots {
            let got = read_log(&log_path(r, INTENT_LOG)).unwrap();
            assert!(got.contains(&rec), "{got:?}");
        }
        assert!(log.is_dirty(9));
        assert!(!log.is_dirty_path(b"d/f"), "known by identity now");
        // The identity record is the object's own from now on: a rewrite keeps it.
        log.rewrite_intent(&[0, 1]);
        for r in &roots {
            let got = read_log(&log_path(r, INTENT_LOG)).unwrap();
            assert!(got.contains(&rec), "{got:?}");
            assert!(!got.contains(&b"d/f".to_vec()), "{got:?}");
        }
        // A clean object is not recorded again.
        assert!(log
            .record_identity(&[77], b"/ix=1".to_vec(), &[0, 1])
            .is_empty());
        assert!(!log.is_dirty(77));
    }

    #[test]
    fn a_change_is_on_every_leg_before_it_happens_and_cleared_once_idle() {
        let (_d, roots) = legs(2);
        let log = ChangeLog::new(roots.clone(), true);
        let mut asked = 0;
        assert!(log
            .will_change(7, &[0, 1], || {
                asked += 1;
                Some(b"dir/with\nnewline".to_vec())
            })
            .is_empty());
        assert!(log
            .will_change(7, &[0, 1], || {
                asked += 1;
                Some(b"never asked".to_vec())
            })
            .is_empty());
        assert_eq!(asked, 1, "the path is asked for once per dirty period");
        let refs: Vec<&Path> = roots.iter().map(PathBuf::as_path).collect();
        for r in &refs {
            assert_eq!(
                read_log(&log_path(r, INTENT_LOG)).unwrap(),
                vec![b"dir/with\nnewline".to_vec()]
            );
        }
        // Not idle yet: nothing to clear.
        assert!(log.idle().inos.is_empty());
        // Deleted while open: no path, no record.
        log.will_change(8, &[0, 1], || None);
        assert!(!log.is_dirty(8));
        // Cleared when idle (simulated by asking clear directly with an aged entry).
        log.inner.lock().dirty.get_mut(&7).unwrap().last_change -= IDLE;
        let s = log.idle();
        assert_eq!(s.inos, vec![7]);
        log.clear(&s, &[0, 1]);
        assert!(!log.is_dirty(7));
        assert!(ChangeLog::read_intent(&refs).is_empty());
    }

    #[test]
    fn a_cover_stands_for_what_is_created_in_its_directory() {
        let (_d, roots) = legs(2);
        let log = ChangeLog::new(roots.clone(), true);
        let refs: Vec<&Path> = roots.iter().map(PathBuf::as_path).collect();
        // Directory 5 at "d" gets 100 new files: one record in all.
        assert!(log
            .will_change_dir(5, &[0, 1], || Some(b"d".to_vec()))
            .is_empty());
        for f in 100..200u64 {
            log.will_change_dir(5, &[0, 1], || panic!("the path is known"));
            log.created_in(f, 5, format!("f{f}").as_bytes(), false);
            // Their writes: dirty already, no record.
            assert!(log.will_change(f, &[0, 1], || panic!("covered")).is_empty());
        }
        let recs = ChangeLog::read_intent(&refs);
        assert_eq!(recs.len(), 1, "{recs:?}");
        let CoverRecord { t, dir, .. } = parse_cover(&recs[0]).unwrap();
        assert_eq!(dir, b"d");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert!(t <= now - COVER_SLACK_SECS && t + 60 > now);
        assert!(log.is_dirty(150) && log.is_dirty_path(b"d/f150"));
        // A file still being written keeps the cover, though the directory went idle.
        let age = |log: &ChangeLog, ino: u64| {
            let mut inner = log.inner.lock();
            inner.dirty.get_mut(&ino).unwrap().last_change -= IDLE;
        };
        for f in 100..199u64 {
            age(&log, f);
        }
        age(&log, 5);
        log.inner.lock().covers.get_mut(&5).unwrap().last_change -= IDLE;
        log.will_change(199, &[0, 1], || panic!("covered"));
        let s = log.idle();
        assert_eq!(s.inos.len(), 100);
        log.clear(&s, &[0, 1]);
        assert!(log.is_dirty(199) && !log.is_dirty(5));
        assert_eq!(ChangeLog::read_intent(&refs).len(), 1, "the cover stays");
        age(&log, 199);
        log.inner.lock().covers.get_mut(&5).unwrap().last_change -= IDLE;
        let s = log.idle();
        log.clear(&s, &[0, 1]);
        assert!(ChangeLog::read_intent(&refs).is_empty());
        // Without a cover (the intent log off), nothing is marked by a creation.
        let log = ChangeLog::new(roots.clone(), false);
        log.will_change_dir(5, &[0, 1], || Some(b"d".to_vec()));
        log.created_in(9, 5, b"x", false);
        assert!(!log.is_dirty(9));
    }

    #[test]
    fn a_directory_born_under_a_cover_inherits_it() {
        let (_d, roots) = legs(2);
        let log = ChangeLog::new(roots.clone(), true);
        let refs: Vec<&Path> = roots.iter().map(PathBuf::as_path).collect();
        log.will_change_dir(5, &[0, 1], || Some(b"d".to_vec()));
        // d/sub and d/sub/deeper are new: what is created in them needs no record.
        log.created_in(6, 5, b"sub", true);
        assert!(log
            .will_change_dir(6, &[0, 1], || panic!("inherited"))
            .is_empty());
        log.created_in(7, 6, b"f", false);
        log.will_change_dir(6, &[0, 1], || panic!("inherited"));
        log.created_in(8, 6, b"deeper", true);
        log.will_change_dir(8, &[0, 1], || panic!("inherited"));
        log.created_in(9, 8, b"g", false);
        assert!(log.will_change(9, &[0, 1], || panic!("covered")).is_empty());
        assert!(log.is_dirty_path(b"d/sub/deeper/g"));
        let recs = ChangeLog::read_intent(&refs);
        assert_eq!(recs.len(), 1, "{recs:?}");
        assert_eq!(parse_cover(&recs[0]).unwrap().dir, b"d");
        // All but g go idle: the record stays for g, under an inherited cover.
        let age_all_but = |keep: u64| {
            let mut inner = log.inner.lock();
            for (ino, d) in inner.dirty.iter_mut() {
                if *ino != keep {
                    d.last_change -= IDLE;
                }
            }
            for (ino, c) in inner.covers.iter_mut() {
                if *ino != keep {
                    c.last_change -= IDLE;
                }
            }
        };
        age_all_but(9);
        log.clear(&log.idle(), &[0, 1]);
        assert!(log.is_dirty(9) && !log.is_dirty(7));
        assert_eq!(ChangeLog::read_intent(&refs), recs, "the record stays");
        {
            let inner = log.inner.lock();
            assert!(inner.covers.contains_key(&5) && inner.covers.contains_key(&8));
        }
        // g changes again: still covered, no new record.
        assert!(log.will_change(9, &[0, 1], || panic!("covered")).is_empty());
        age_all_but(0);
        log.clear(&log.idle(), &[0, 1]);
        assert!(ChangeLog::read_intent(&refs).is_empty());
        assert!(log.inner.lock().covers.is_empty());
        // The next creation in d/sub/deeper writes a cover of its own.
        log.will_change_dir(8, &[0, 1], || Some(b"d/sub/deeper".to_vec()));
        let recs = ChangeLog::read_intent(&refs);
        assert_eq!(parse_cover(&recs[0]).unwrap().dir, b"d/sub/deeper");
    }

    #[test]
    fn paths_in_common() {
        assert_eq!(common_dir(b"a/b/c", b"a/b/d"), b"a/b");
        assert_eq!(common_dir(b"a/b", b"a/b/d"), b"a/b");
        assert_eq!(common_dir(b"a/bc", b"a/b"), b"a");
        assert_eq!(common_dir(b"a", b"b"), b".");
        assert_eq!(common_dir(b".", b"a"), b".");
        assert!(is_within(b"a/b", b"a") && is_within(b"a", b"a") && is_within(b"x", b"."));
        assert!(!is_within(b"ab", b"a") && !is_within(b"a", b"a/b"));
    }

    #[test]
    fn many_covers_under_one_directory_become_one_subtree_cover() {
        let (_d, roots) = legs(2);
        let log = ChangeLog::new(roots.clone(), true);
        let refs: Vec<&Path> = roots.iter().map(PathBuf::as_path).collect();
        // An rm -rf of "t": its old directories, one after another.
        let dirs: Vec<(u64, &[u8])> = vec![
            (10, b"t/a/x"),
            (11, b"t/a"),
            (12, b"t/b/y"),
            (13, b"t/b"),
            (14, b"t/c"),
            (15, b"t"),
        ];
        for &(ino, p) in &dirs {
            log.will_change_dir(ino, &[0, 1], || Some(p.to_vec()));
        }
        let recs = ChangeLog::read_intent(&refs);
        let covers: Vec<CoverRecord<'_>> = recs.iter().filter_map(|r| parse_cover(r)).collect();
        assert_eq!(recs.len(), covers.len());
        // Three covers, then a subtree cover of "t" standing for the rest.
        assert_eq!(covers.len(), 4, "{recs:?}");
        assert!(
            covers.iter().any(|c| c.subtree && c.dir == b"t"),
            "{recs:?}"
        );
        // Elsewhere, a directory still needs a cover of its own.
        log.will_change_dir(20, &[0, 1], || Some(b"u".to_vec()));
        assert_eq!(ChangeLog::read_intent(&refs).len(), 5);
        // Once all is idle, nothing is left, the subtree cover included.
        {
            let mut inner = log.inner.lock();
            for d in inner.dirty.values_mut() {
                d.last_change -= IDLE;
            }
            for c in inner.covers.values_mut() {
                c.last_change -= IDLE;
            }
        }
        log.clear(&log.idle(), &[0, 1]);
        assert!(ChangeLog::read_intent(&refs).is_empty());
        assert!(log.inner.lock().covers.is_empty());
        // Covers spread over the root's children never make the root a subtree.
        for (i, p) in [b"p".as_slice(), b"q", b"r", b"s", b"v"].iter().enumerate() {
            log.will_change_dir(30 + i as u64, &[0, 1], || Some(p.to_vec()));
        }
        let recs = ChangeLog::read_intent(&refs);
        assert_eq!(recs.len(), 5);
        assert!(recs.iter().all(|r| !parse_cover(r).unwrap().subtree));
    }
}
