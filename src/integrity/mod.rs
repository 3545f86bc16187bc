//! Checksums of every regular file's data, so that the mirror knows which copy is right.
//!
//! Each covered file has an identity (`identity.rs`), a random 64-bit number in the xattr
//! [`ID_XATTR`] of every leg's copy (the same on every leg; it survives renames and hard links,
//! and the tree engine copies it with the file). Its blocks' checksums ([`sum`]) live in every
//! in-sync leg's store ([`store`]), all alike.
//!
//! The daemon computes checksums from the bytes it is about to write (its own copy of the
//! request, never data read back from a leg) and keeps them in memory ([`FileSums`], in
//! `file_sums.rs`) until the next commit: the sweep commits them to every in-sync leg's store,
//! after the legs were flushed and before the write-intent entries are cleared
//! ([`Integrity::commit`]). So a file whose checksums on disk may disagree with its data is
//! always in the write-intent log, and after a crash it is resolved at mount (crash recovery),
//! never reported as corruption.
//!
//! The files no leg could give back as written, and those changed behind the mirror's back,
//! are listed apart (`damage.rs`).

mod damage;
mod file_sums;
mod identity;
pub mod store;
pub mod sum;

pub use damage::{classify, ctime_of, Cause, Damage};
pub use file_sums::{hash_fd, trim_zeros, FileSums, Verdict};
pub use identity::{id_at, id_bytes, id_from, id_of, ID_XATTR};

use damage::DamageList;
use file_sums::LiveSums;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use store::{FileChange, Stamp, Store};
use sum::{zero_sum, Sum, CHUNK_BLOCKS};

/// Uncommitted records (of all files) past which the sweep commits without waiting for idle
/// files: 16 MiB of checksums, 16 GiB of data.
pub const COMMIT_BACKLOG: usize = 16 * 1024;

/// Counters of the checksum work since the mount.
#[derive(Default)]
pub struct Counters {
    /// Blocks read and found as written.
    pub verified_blocks: AtomicU64,
    /// Commits to the stores.
    pub commits: AtomicU64,
    /// Files resolved after a crash (rehashed, or taken from the copy that matched).
    pub crash_resolved: AtomicU64,
}

/// The checksums of one mount.
pub struct Integrity {
    enabled: bool,
    /// Per leg slot: its store while the leg is in sync.
    stores: RwLock<Vec<Option<Arc<Store>>>>,
    /// Files with checksums in memory, by identity (one object per file).
    live: Mutex<LiveSums>,
    /// Files with uncommitted changes.
    dirty: Mutex<HashMap<u64, Arc<FileSums>>>,
    /// Held by a commit, and by whoever copies a store file.
    commit_lock: Mutex<()>,
    generation: AtomicU64,
    /// The damaged and the diverged files.
    damage: DamageList,
    /// See [`Integrity::covered_more`].
    coverage_epoch: AtomicU64,
    /// Stamps not yet committed, per leg slot (None: remove the stamp).
    stamps: Mutex<HashMap<usize, HashMap<u64, Option<Stamp>>>>,
    /// Leg slots (bits) whose stores are read only when no other store is open: quiet legs.
    read_last: AtomicU64,
    pub counters: Counters,
}

impl Integrity {
    pub fn new(enabled: bool, legs: usize) -> Integrity {
        Integrity {
            enabled,
            stores: RwLock::new((0..legs).map(|_| None).collect()),
            live: Mutex::new(LiveSums::default()),
            dirty: Mutex::new(HashMap::new()),
            commit_lock: Mutex::new(()),
            generation: AtomicU64::new(0),
            damage: DamageList::default(),
            coverage_epoch: AtomicU64::new(0),
            read_last: AtomicU64::new(0),
            stamps: Mutex::new(HashMap::new()),
            counters: Counters::default(),
        }
    }

    /// Whether checksums are kept (`-o checksum`).
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Opens the stores of the in-sync legs at mount (`legs`: slot and root). A leg whose
    /// store is missing, unreadable or older than the newest is given a copy of the newest;
    /// if no leg has one, each gets an empty store. Returns the legs whose store could not be
    /// opened nor rebuilt (the caller drops them) and a line per store rebuilt.
    pub fn open_stores(&self, legs: &[(usize, PathBuf)]) -> (Vec<(usize, io::Error)>, Vec<String>) {
        let mut failed = Vec::new();
        let mut notes = Vec::new();
        if !self.enabled || legs.is_empty() {
            return (failed, notes);
        }
        // Per leg: slot, root, and its store with its generation if it opened.
        type Opened = (usize, PathBuf, Option<(Store, u64)>);
        let mut opened: Vec<Opened> = Vec::new();
        for (slot, root) in legs {
            let exists = store::store_path(root).exists();
            let s = if exists {
                match open_waiting(root) {
                    Ok(x) => Some(x),
                    Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                        notes.push(format!("{e}: rebuilt from another leg if one has a store"));
                        None
                    }
                    // Busy, unreadable, or of another format: never replaced.
                    Err(e) => {
                        failed.push((*slot, e));
                        continue;
                    }
                }
            } else {
                None
            };
            opened.push((*slot, root.clone(), s));
        }
        let newest = opened
            .iter()
            .filter_map(|(slot, _, s)| {
                s.as_ref()
                    .map(|(st, g)| (*g, *slot, st.path().to_path_buf()))
            })
            .max_by_key(|(g, _, _)| *g);
        let mut stores = self.stores.write();
        for (slot, root, s) in opened {
            let store = match (s, &newest) {
                (Some((st, g)), Some((ng, _, _))) if g == *ng => Ok(st),
                (s, Some((ng, nslot, npath))) => {
                    drop(s);
                    if store::store_path(&root).exists() {
                        let aside = store::store_path(&root).with_extension("redb.damaged");
                        let _ = std::fs::rename(store::store_path(&root), aside);
                    }
                    notes.push(format!(
                        "checksum store of '{}' rebuilt from leg {nslot}'s (generation {ng})",
                        root.display()
                    ));
                    store::copy_store(npath, &root).and_then(|()| Store::open(&root))
                }
                (s, None) => match s {
                    Some((st, _)) => Ok(st),
                    None => {
                        if store::store_path(&root).exists() {
                            let aside = store::store_path(&root).with_extension("redb.damaged");
                            let _ = std::fs::rename(store::store_path(&root), aside);
                        }
                        Store::open(&root)
                    }
                },
            };
            match store {
                Ok(st) => stores[slot] = Some(Arc::new(st)),
                Err(e) => failed.push((slot, e)),
            }
        }
        if let Some((g, _, _)) = newest {
            self.generation.store(g, Ordering::Relaxed);
        }
        (failed, notes)
    }

    /// A leg left the mirror: its store is no longer written. The store is closed on a thread
    /// of its own: closing writes its header, and a leg dropped because it hangs would hold
    /// the caller (a request) for as long as it hangs.
    pub fn detach(&self, slot: usize) {
        let gone = self.stores.write().get_mut(slot).and_then(Option::take);
        self.stamps.lock().remove(&slot);
        if let Some(s) = gone {
            let close = std::thread::Builder::new()
                .name("store-close".into())
                .spawn(move || drop(s));
            // No thread to spare: closed here after all.
            if let Err(e) = close {
                log::warn!("closing leg {slot}'s checksum store here: {e}");
            }
        }
    }

    /// Records (for the next commit) that leg `slot`'s copy of file `id` has the ctime
    /// `stamp` as the mirror left it (None: not known). Call once the change has settled:
    /// nothing of the mirror's is changing that copy.
    pub fn set_stamp(&self, slot: usize, id: u64, stamp: Option<Stamp>) {
        if self.enabled {
            self.stamps
                .lock()
                .entry(slot)
                .or_default()
                .insert(id, stamp);
        }
    }

    /// Leg `slot`'s stamp of file `id` (uncommitted first), None if not known.
    pub fn stamp(&self, slot: usize, id: u64) -> Option<Stamp> {
        if let Some(s) = self.stamps.lock().get(&slot).and_then(|m| m.get(&id)) {
            return *s;
        }
        self.store(slot)?.stamp(id).ok().flatten()
    }

    /// A leg joins the mirror (every change held off): its store becomes a copy of `from`'s,
    /// after the uncommitted checksums were committed.
    pub fn attach_copy(&self, slot: usize, root: &Path, from: usize) -> io::Result<()> {
        if !self.enabled {
            return Ok(());
        }
        for (leg, e) in self.commit() {
            log::error!("checksum commit to leg {leg} before a join failed: {e}");
        }
        let _c = self.commit_lock.lock();
        let src = self
            .stores
            .read()
            .get(from)
            .and_then(|s| s.clone())
            .ok_or_else(|| io::Error::other("the source leg has no checksum store"))?;
        store::copy_store(src.path(), root)?;
        self.stamps.lock().remove(&slot);
        let st = Store::open(root)?;
        self.stores.write()[slot] = Some(Arc::new(st));
        Ok(())
    }

    /// Whether the walk that gives files without checksums theirs has finished on these
    /// stores (`backfill` in `meta`).
    pub fn backfill_done(&self) -> bool {
        self.reader()
            .and_then(|s| s.meta("backfill").ok().flatten())
            .is_some()
    }

    /// Records in every store that the walk finished.
    pub fn set_backfill_done(&self) -> io::Result<()> {
        let _c = self.commit_lock.lock();
        let g = self.generation.load(Ordering::Relaxed);
        let stores: Vec<Arc<Store>> = self.stores.read().iter().flatten().cloned().collect();
        for s in stores {
            s.set_meta("backfill", g)?;
        }
        Ok(())
    }

    /// Files that had no checksums may have them now: whoever cached "no checksums" looks
    /// again ([`Integrity::coverage_epoch`]).
    pub fn covered_more(&self) {
        self.coverage_epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// Moves on whenever files without checksums get them in the background.
    pub fn coverage_epoch(&self) -> u64 {
        self.coverage_epoch.load(Ordering::Acquire)
    }

    /// How many legs have a store open.
    pub fn store_count(&self) -> usize {
        self.stores.read().iter().flatten().count()
    }

    /// The store reads are served from (the first leg that has one).
    fn reader(&self) -> Option<Arc<Store>> {
        let stores = self.stores.read();
        let last = self.read_last.load(Ordering::Relaxed);
        let quiet = |slot: usize| slot < 64 && last & (1 << slot) != 0;
        let mut open = stores.iter().enumerate().filter(|(_, s)| s.is_some());
        let first = open.clone().find(|&(slot, _)| !quiet(slot));
        first.or_else(|| open.next()).and_then(|(_, s)| s.clone())
    }

    /// The store of leg slot `slot` is read only when no other is open (a quiet leg).
    pub fn read_last(&self, slot: usize) {
        if slot < 64 {
            self.read_last.fetch_or(1 << slot, Ordering::Relaxed);
        }
    }

    /// Files with uncommitted checksums.
    pub fn dirty_files(&self) -> usize {
        self.dirty.lock().len()
    }

    /// Commits every uncommitted change to every store, durably, as one generation. Returns
    /// the legs whose store could not be written (the caller drops them).
    pub fn commit(&self) -> Vec<(usize, io::Error)> {
        self.commit_checked(|_| Ok(()))
    }

    /// [`Integrity::commit`], asking `check(slot)` first for each store (injected faults).
    pub fn commit_checked(
        &self,
        check: impl Fn(usize) -> io::Result<()>,
    ) -> Vec<(usize, io::Error)> {
        let _c = self.commit_lock.lock();
        let files: Vec<Arc<FileSums>> = self.dirty.lock().drain().map(|(_, f)| f).collect();
        let stamps = std::mem::take(&mut *self.stamps.lock());
        if files.is_empty() && stamps.is_empty() {
            return Vec::new();
        }
        for f in &files {
            f.registered.store(false, Ordering::Release);
        }
        let changes: Vec<FileChange> = files.iter().filter_map(|f| f.take_change()).collect();
        // Stamps alone are no new generation (they differ between legs anyway).
        let generation = if changes.is_empty() {
            self.generation.load(Ordering::Relaxed)
        } else {
            self.generation.fetch_add(1, Ordering::Relaxed) + 1
        };
        let stores: Vec<(usize, Arc<Store>)> = self
            .stores
            .read()
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.clone().map(|s| (i, s)))
            .collect();
        let mut failed = Vec::new();
        for (slot, s) in &stores {
            let mine: Vec<(u64, Option<Stamp>)> = stamps
                .get(slot)
                .map(|m| m.iter().map(|(&id, &s)| (id, s)).collect())
                .unwrap_or_default();
            if changes.is_empty() && mine.is_empty() {
                continue;
            }
            if let Err(e) = check(*slot).and_then(|()| s.commit(&changes, &mine, generation)) {
                failed.push((*slot, e));
            }
        }
        if failed.len() == stores.len() && !stores.is_empty() {
            // Nothing was written: keep the changes for the next try.
            for f in &files {
                f.restore_change();
                f.registered.store(false, Ordering::Release);
                self.mark_dirty(f);
            }
            let mut pending = self.stamps.lock();
            for (slot, m) in stamps {
                let p = pending.entry(slot).or_default();
                for (id, s) in m {
                    p.entry(id).or_insert(s);
                }
            }
        }
        for f in &files {
            f.trim_cache();
        }
        self.counters.commits.fetch_add(1, Ordering::Relaxed);
        failed
    }

    /// The committed checksums of file `id`, block by block up to the last block that is not
    /// zero; None if the file is not covered.
    pub fn committed(&self, id: u64) -> io::Result<Option<Vec<Sum>>> {
        let Some(store) = self.reader() else {
            return Ok(None);
        };
        if !store.has_file(id)? {
            return Ok(None);
        }
        let mut out = Vec::new();
        for (n, chunk) in store.chunks_of(id)? {
            out.resize((n * CHUNK_BLOCKS) as usize, zero_sum());
            out.extend(chunk);
        }
        trim_zeros(&mut out);
        Ok(Some(out))
    }

    /// Bytes of the covered files, at the last commit.
    pub fn covered_bytes(&self) -> u64 {
        self.reader()
            .and_then(|s| s.meta("covered_bytes").ok().flatten())
            .unwrap_or(0)
    }

    /// Files whose covered records are stored (all stores alike): files, records.
    pub fn stored_counts(&self) -> Option<(u64, u64)> {
        self.reader()?.counts().ok()
    }

    /// The store of leg `slot`, if it has one.
    pub fn store(&self, slot: usize) -> Option<Arc<Store>> {
        self.stores.read().get(slot).and_then(|s| s.clone())
    }
}

/// Opens a leg's store and reads its generation, waiting up to 30 s while it is busy (the
/// previous daemon of this mirror may still be letting go of it after an unmount).
fn open_waiting(root: &Path) -> io::Result<(Store, u64)> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match Store::open(root).and_then(|s| s.generation().map(|g| (s, g))) {
            Err(e)
                if e.kind() == io::ErrorKind::ResourceBusy
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::sum::{sum, BLOCK};
    use super::*;

    /// Slot and root of each test leg.
    fn leg_list(dirs: &[tempfile::TempDir]) -> Vec<(usize, PathBuf)> {
        dirs.iter()
            .enumerate()
            .map(|(i, d)| (i, d.path().to_path_buf()))
            .collect()
    }

    pub(super) fn mount(n: usize) -> (Vec<tempfile::TempDir>, Integrity) {
        let dirs: Vec<tempfile::TempDir> = (0..n)
            .map(|_| {
                let d = tempfile::tempdir().unwrap();
                std::fs::create_dir(d.path().join(crate::meta::META_DIR)).unwrap();
                d
            })
            .collect();
        let ig = Integrity::new(true, n);
        let legs = leg_list(&dirs);
        let (failed, _) = ig.open_stores(&legs);
        assert!(failed.is_empty());
        (dirs, ig)
    }

    pub(super) fn block(byte: u8) -> Vec<u8> {
        vec![byte; BLOCK as usize]
    }

    #[test]
    fn stamps_are_per_leg_and_kept_until_committed() {
        let (_d, ig) = mount(2);
        ig.new_file(1);
        ig.set_stamp(0, 1, Some((3, 4)));
        assert_eq!(ig.stamp(0, 1), Some((3, 4)));
        assert_eq!(ig.stamp(1, 1), None);
        assert!(ig.commit().is_empty());
        assert_eq!(ig.store(0).unwrap().stamp(1).unwrap(), Some((3, 4)));
        assert_eq!(ig.store(1).unwrap().stamp(1).unwrap(), None);
        // A stamp alone is committed without a new generation.
        let g = ig.store(0).unwrap().generation().unwrap();
        ig.set_stamp(1, 1, Some((5, 6)));
        assert!(ig.commit().is_empty());
        assert_eq!(ig.store(1).unwrap().stamp(1).unwrap(), Some((5, 6)));
        assert_eq!(ig.store(1).unwrap().generation().unwrap(), g);
        // A leg that leaves loses what it had not committed.
        ig.set_stamp(1, 1, None);
        ig.detach(1);
        assert_eq!(ig.stamp(1, 1), None);
    }

    #[test]
    fn commits_reach_every_store_and_survive_a_remount() {
        let (dirs, ig) = mount(2);
        let f = ig.new_file(5);
        let data: Vec<u8> = (0..3 * CHUNK_BLOCKS * BLOCK / 2)
            .map(|i| (i % 251) as u8)
            .collect();
        f.set(&ig, 0, &sum::sums_of(&data), 0).unwrap();
        assert!(ig.backlog() > 0);
        assert!(ig.commit().is_empty());
        assert_eq!(ig.backlog(), 0);
        for s in [ig.store(0).unwrap(), ig.store(1).unwrap()] {
            assert!(s.has_file(5).unwrap());
            assert_eq!(s.generation().unwrap(), 1);
        }
        drop(f);
        drop(ig);
        let ig = Integrity::new(true, 2);
        let legs = leg_list(&dirs);
        ig.open_stores(&legs);
        let f = ig.file(5).unwrap().expect("covered");
        assert_eq!(f.verify(&ig, 0, &data, true).unwrap(), Verdict::Good);
        assert!(ig.file(6).unwrap().is_none());
    }

    #[test]
    fn a_lost_or_older_store_is_rebuilt_from_the_newest() {
        let (dirs, ig) = mount(2);
        let f = ig.new_file(1);
        f.set(&ig, 0, &[sum(&block(3))], 0).unwrap();
        ig.commit();
        drop(f);
        drop(ig);
        std::fs::remove_file(store::store_path(dirs[1].path())).unwrap();
        let ig = Integrity::new(true, 2);
        let legs = leg_list(&dirs);
        let (failed, notes) = ig.open_stores(&legs);
        assert!(failed.is_empty());
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(ig.store(1).unwrap().has_file(1).unwrap());
    }
}
