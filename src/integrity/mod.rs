//! Checksums of every regular file's data, so that the mirror knows which copy is right.
//!
//! Each covered file has an identity (`identity.rs`), a random 64-bit number in the xattr
//! [`ID_XATTR`] of every leg's copy (the same on every leg; it survives renames and hard links,
//! and the tree engine copies it with the file). Its blocks' checksums ([`sum`]) live in every
//! in-sync leg's store ([`store`]), all alike.
//!
//! The daemon computes checksums from the bytes it is about to write (its own copy of the
//! request, never data read back from a leg) and keeps them in memory ([`FileSums`]) until the
//! next commit: the sweep commits them to every in-sync leg's store, after the legs were
//! flushed and before the write-intent entries are cleared ([`Integrity::commit`]). So a file
//! whose checksums on disk may disagree with its data is always in the write-intent log, and
//! after a crash it is resolved at mount (crash recovery), never reported as corruption.
//!
//! The files no leg could give back as written, and those changed behind the mirror's back,
//! are listed apart (`damage.rs`).

mod damage;
mod identity;
pub mod store;
pub mod sum;

pub use damage::{classify, ctime_of, Cause, Damage};
pub use identity::{id_bytes, id_from, id_of, ID_XATTR};

use damage::DamageList;
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use store::{FileChange, Stamp, Store};
use sum::{chunk_of, zero_sum, Sum, CHUNK_BLOCKS};

/// Records of a file kept in memory once committed (a clean file's cache).
const CACHED_CHUNKS: usize = 64;
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

/// The files with checksums in memory: a file's entry outlives its checksums (a weak
/// reference, which also keeps their allocation), so the entries of files no longer in
/// memory are dropped once the map has doubled since it was last pruned. Without that it
/// would hold an entry for every file the mount has ever looked at.
#[derive(Default)]
struct LiveSums {
    map: HashMap<u64, Weak<FileSums>>,
    /// The size at which the map is pruned next.
    prune_at: usize,
}

impl LiveSums {
    fn get(&self, id: &u64) -> Option<&Weak<FileSums>> {
        self.map.get(id)
    }

    fn insert(&mut self, id: u64, f: &Arc<FileSums>) {
        self.map.insert(id, Arc::downgrade(f));
        if self.map.len() >= self.prune_at {
            self.map.retain(|_, w| w.strong_count() > 0);
            self.map.shrink_to_fit();
            self.prune_at = (2 * self.map.len()).max(1024);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
    }
}

/// What a read found against the checksums.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every block as written.
    Good,
    /// These blocks are not (block numbers).
    Bad(Vec<u64>),
    /// The file has no checksums (not covered, or deleted): nothing to verify against.
    Unknown,
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

    /// The checksums of file `id`, or None if the file is not covered.
    pub fn file(&self, id: u64) -> io::Result<Option<Arc<FileSums>>> {
        if !self.enabled {
            return Ok(None);
        }
        let mut live = self.live.lock();
        if let Some(f) = live.get(&id).and_then(Weak::upgrade) {
            return Ok(Some(f));
        }
        let Some(store) = self.reader() else {
            return Ok(None);
        };
        let Some(size) = store.file_size(id)? else {
            return Ok(None);
        };
        let f = Arc::new(FileSums::new(id, false, size));
        live.insert(id, &f);
        Ok(Some(f))
    }

    /// Checksums for a new (or newly emptied) file `id`: every block zero until written.
    pub fn new_file(&self, id: u64) -> Arc<FileSums> {
        let f = Arc::new(FileSums::new(id, true, 0));
        f.state.lock().changed = true;
        self.live.lock().insert(id, &f);
        self.dirty.lock().insert(id, f.clone());
        f
    }

    fn mark_dirty(&self, f: &Arc<FileSums>) {
        // Once per commit per file: the global map is not taken on every write.
        if !f.registered.swap(true, Ordering::AcqRel) {
            self.dirty.lock().entry(f.id).or_insert_with(|| f.clone());
        }
    }

    /// Uncommitted records (for the sweep's backlog rule).
    pub fn backlog(&self) -> usize {
        let files: Vec<Arc<FileSums>> = self.dirty.lock().values().cloned().collect();
        files.iter().map(|f| f.state.lock().dirty.len()).sum()
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

    /// Commits the full checksums of file `id`, `size` bytes long (rehashed from a leg's copy
    /// after a crash, or for a file from before checksums), replacing what the store had.
    pub fn record_whole(&self, id: u64, sums: Vec<Sum>, size: u64) {
        let f = {
            let mut live = self.live.lock();
            match live.get(&id).and_then(Weak::upgrade) {
                Some(f) => f,
                None => {
                    let f = Arc::new(FileSums::new(id, true, size));
                    live.insert(id, &f);
                    f
                }
            }
        };
        {
            let mut st = f.state.lock();
            st.chunks.clear();
            st.dirty.clear();
            st.drop_from = Some(0);
            st.fresh = true;
            st.deleted = false;
            st.changed = true;
            st.size = size;
            for (n, c) in sums.chunks(CHUNK_BLOCKS as usize).enumerate() {
                let mut v = c.to_vec();
                v.resize(CHUNK_BLOCKS as usize, zero_sum());
                st.chunks.insert(n as u64, v);
                st.dirty.insert(n as u64);
            }
        }
        self.mark_dirty(&f);
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

/// One file's checksums in memory: the records read from the store so far and the ones
/// changed since the last commit.
pub struct FileSums {
    pub id: u64,
    state: Mutex<State>,
    /// In [`Integrity`]'s map of files to commit.
    registered: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
struct State {
    /// Records in memory (each [`CHUNK_BLOCKS`] long).
    chunks: HashMap<u64, Vec<Sum>>,
    /// Records changed since the last commit.
    dirty: BTreeSet<u64>,
    /// Stored records from this number on are gone (truncated) at the next commit.
    drop_from: Option<u64>,
    /// The store holds nothing for this file that still counts (new, or rewritten whole).
    fresh: bool,
    /// Removed: the store's records go at the next commit, and nothing is verified.
    deleted: bool,
    /// Something to commit (records, a truncation, a removal, or a new file's record).
    changed: bool,
    /// The file's size (for the stores' `covered_bytes`).
    size: u64,
    /// What the last [`FileSums::take_change`] took, until the commit is known to be written.
    taken: Option<(BTreeSet<u64>, Option<u64>)>,
}

impl FileSums {
    fn new(id: u64, fresh: bool, size: u64) -> FileSums {
        FileSums {
            id,
            state: Mutex::new(State {
                fresh,
                size,
                ..Default::default()
            }),
            registered: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn load<'a>(&self, ig: &Integrity, st: &'a mut State, n: u64) -> io::Result<&'a mut Vec<Sum>> {
        if !st.chunks.contains_key(&n) {
            let from_store = !st.fresh && st.drop_from.is_none_or(|d| n < d);
            let c = match (from_store, ig.reader()) {
                (true, Some(s)) => s.chunk(self.id, n)?,
                _ => vec![zero_sum(); CHUNK_BLOCKS as usize],
            };
            st.chunks.insert(n, c);
        }
        Ok(st.chunks.get_mut(&n).expect("inserted"))
    }

    /// The file is `size` bytes long now (a change that grew it without new data: fallocate).
    pub fn set_size(self: &Arc<Self>, ig: &Integrity, size: u64) {
        {
            let mut st = self.state.lock();
            if st.size == size {
                return;
            }
            st.size = size;
            st.changed = true;
        }
        ig.mark_dirty(self);
    }

    /// Whether the file was removed (nothing to verify).
    pub fn is_deleted(&self) -> bool {
        self.state.lock().deleted
    }

    /// Checks `data`, read at block boundary `offset`. `short`: the read returned less than
    /// asked (the copy ends there), so the block after it must be past the end of the file
    /// too.
    pub fn verify(
        &self,
        ig: &Integrity,
        offset: u64,
        data: &[u8],
        short: bool,
    ) -> io::Result<Verdict> {
        debug_assert_eq!(offset % sum::BLOCK, 0);
        // Hashed before the lock is taken: concurrent reads of one file hash in parallel.
        let got = sum::sums_of(data);
        let mut st = self.state.lock();
        if st.deleted {
            return Ok(Verdict::Unknown);
        }
        let first = offset / sum::BLOCK;
        let mut bad = Vec::new();
        let mut n = 0u64;
        for (i, s) in got.iter().enumerate() {
            let block = first + i as u64;
            let (c, k) = chunk_of(block);
            if self.load(ig, &mut st, c)?[k] != *s {
                bad.push(block);
            }
            n += 1;
        }
        if short && (data.len() as u64).is_multiple_of(sum::BLOCK) {
            // The copy ends exactly at a block boundary: the next block must be beyond the
            // end of the file (zero), or the copy is missing data.
            let block = first + n;
            let (c, k) = chunk_of(block);
            if self.load(ig, &mut st, c)?[k] != zero_sum() {
                bad.push(block);
            }
        }
        ig.counters
            .verified_blocks
            .fetch_add(n - bad.len().min(n as usize) as u64, Ordering::Relaxed);
        Ok(if bad.is_empty() {
            Verdict::Good
        } else {
            Verdict::Bad(bad)
        })
    }

    /// The checksum block `block` should have.
    pub fn expected(&self, ig: &Integrity, block: u64) -> io::Result<Sum> {
        let mut st = self.state.lock();
        let (c, k) = chunk_of(block);
        Ok(self.load(ig, &mut st, c)?[k])
    }

    /// Blocks from `first` on now hold data with these checksums; the file is at least `end`
    /// bytes long now.
    pub fn set(
        self: &Arc<Self>,
        ig: &Integrity,
        first: u64,
        sums: &[Sum],
        end: u64,
    ) -> io::Result<()> {
        {
            let mut st = self.state.lock();
            st.size = st.size.max(end);
            for (i, s) in sums.iter().enumerate() {
                let (c, k) = chunk_of(first + i as u64);
                self.load(ig, &mut st, c)?[k] = *s;
                st.dirty.insert(c);
            }
            st.changed = true;
        }
        ig.mark_dirty(self);
        ig.clear_damage(
            self.id,
            Some((first * sum::BLOCK, sums.len() as u64 * sum::BLOCK)),
        );
        Ok(())
    }

    /// The file is now `size` bytes long; `tail` is the new checksum of the block holding the
    /// end (when the end is inside a block).
    pub fn truncate(
        self: &Arc<Self>,
        ig: &Integrity,
        size: u64,
        tail: Option<Sum>,
    ) -> io::Result<()> {
        {
            let mut st = self.state.lock();
            // Blocks from `end` on are zero.
            let end = sum::align_up(size) / sum::BLOCK;
            let (c, k) = chunk_of(end);
            if k > 0 {
                let chunk = self.load(ig, &mut st, c)?;
                for s in &mut chunk[k..] {
                    *s = zero_sum();
                }
                st.dirty.insert(c);
            }
            let keep = if k > 0 { c + 1 } else { c };
            st.chunks.retain(|&n, _| n < keep);
            st.dirty.retain(|&n| n < keep);
            st.drop_from = Some(st.drop_from.map_or(keep, |d| d.min(keep)));
            st.size = size;
            if let Some(t) = tail {
                let (c, k) = chunk_of(size / sum::BLOCK);
                self.load(ig, &mut st, c)?[k] = t;
                st.dirty.insert(c);
            }
            st.changed = true;
        }
        ig.mark_dirty(self);
        Ok(())
    }

    /// The file is gone: its records go at the next commit.
    pub fn delete(self: &Arc<Self>, ig: &Integrity) {
        {
            let mut st = self.state.lock();
            st.deleted = true;
            st.changed = true;
            st.chunks.clear();
            st.dirty.clear();
        }
        ig.mark_dirty(self);
        ig.clear_damage(self.id, None);
    }

    fn take_change(&self) -> Option<FileChange> {
        let mut st = self.state.lock();
        if !st.changed {
            return None;
        }
        st.changed = false;
        let dirty = std::mem::take(&mut st.dirty);
        let drop_from = st.drop_from.take();
        let chunks = dirty
            .iter()
            .filter_map(|n| st.chunks.get(n).map(|c| (*n, c.clone())))
            .collect();
        st.taken = Some((dirty, drop_from));
        if !st.deleted {
            // Committed: what the store holds counts from now on.
            st.fresh = false;
        }
        Some(FileChange {
            size: st.size,
            id: self.id,
            delete: st.deleted,
            drop_from: if st.deleted { None } else { drop_from },
            chunks: if st.deleted { Vec::new() } else { chunks },
        })
    }

    fn restore_change(&self) {
        let mut st = self.state.lock();
        if let Some((dirty, drop_from)) = st.taken.take() {
            st.dirty.extend(dirty);
            st.drop_from = match (st.drop_from, drop_from) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            st.changed = true;
        }
    }

    fn trim_cache(&self) {
        let mut st = self.state.lock();
        st.taken = None;
        if st.chunks.len() > CACHED_CHUNKS && st.dirty.is_empty() && st.drop_from.is_none() {
            st.chunks.clear();
        }
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

/// The checksums of a whole file, read through `fd` (after a crash, or for a file from before
/// checksums). Reads 1 MiB at a time.
pub fn hash_fd(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<Vec<Sum>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; sum::CHUNK_BYTES as usize];
    let mut off = 0u64;
    loop {
        let n = crate::sys::fd::pread_full(fd, &mut buf, off)
            .map_err(|e| io::Error::from_raw_os_error(e.code()))?;
        out.extend(sum::sums_of(&buf[..n]));
        if n < buf.len() {
            return Ok(out);
        }
        off += n as u64;
    }
}

/// Drops trailing checksums of zero blocks (they are implied past the end of a file).
pub fn trim_zeros(sums: &mut Vec<Sum>) {
    let keep = sums
        .iter()
        .rposition(|&s| s != zero_sum())
        .map_or(0, |i| i + 1);
    sums.truncate(keep);
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
    fn entries_of_files_no_longer_in_memory_are_dropped() {
        let mut live = LiveSums::default();
        let kept: Vec<_> = (0..3000)
            .map(|id| Arc::new(FileSums::new(id, true, 0)))
            .collect();
        for f in &kept {
            live.insert(f.id, f);
        }
        // A hundred thousand files seen once each, their checksums gone from memory since.
        for id in 10_000..110_000 {
            live.insert(id, &Arc::new(FileSums::new(id, true, 0)));
            assert!(live.len() <= 2 * 3000 + 1024, "{}", live.len());
        }
        for f in &kept {
            assert!(live.get(&f.id).and_then(Weak::upgrade).is_some());
        }
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
    fn written_blocks_verify_and_others_do_not() {
        let (_d, ig) = mount(2);
        let f = ig.new_file(11);
        let data = [block(1), block(2), b"tail".to_vec()].concat();
        f.set(&ig, 0, &sum::sums_of(&data), 0).unwrap();
        assert_eq!(f.verify(&ig, 0, &data, true).unwrap(), Verdict::Good);
        let mut rotten = data.clone();
        rotten[BLOCK as usize + 17] ^= 0x40;
        assert_eq!(
            f.verify(&ig, 0, &rotten, true).unwrap(),
            Verdict::Bad(vec![1])
        );
        // A copy that lost its last block: short, and the next block is not zero.
        assert_eq!(
            f.verify(&ig, 0, &data[..2 * BLOCK as usize], true).unwrap(),
            Verdict::Bad(vec![2])
        );
        // Past the end: zeros.
        assert_eq!(f.verify(&ig, 3 * BLOCK, &[], true).unwrap(), Verdict::Good);
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
    fn truncation_zeroes_the_tail_and_drops_records() {
        let (_d, ig) = mount(1);
        let f = ig.new_file(9);
        let data: Vec<u8> = (0..2 * CHUNK_BLOCKS * BLOCK)
            .map(|i| (i % 13) as u8 + 1)
            .collect();
        f.set(&ig, 0, &sum::sums_of(&data), 0).unwrap();
        ig.commit();
        // Cut inside block 3: block 3 keeps 100 bytes.
        let size = 3 * BLOCK + 100;
        let tail = sum(&data[3 * BLOCK as usize..size as usize]);
        f.truncate(&ig, size, Some(tail)).unwrap();
        ig.commit();
        let fresh = Arc::new(FileSums::new(9, false, 0));
        assert_eq!(
            fresh.verify(&ig, 0, &data[..size as usize], true).unwrap(),
            Verdict::Good
        );
        assert_eq!(fresh.expected(&ig, CHUNK_BLOCKS + 5).unwrap(), zero_sum());
        assert_eq!(ig.stored_counts(), Some((1, 1)));
    }

    #[test]
    fn a_removed_file_leaves_nothing_and_verifies_nothing() {
        let (_d, ig) = mount(2);
        let f = ig.new_file(3);
        f.set(&ig, 0, &[sum(&block(7))], 0).unwrap();
        ig.commit();
        f.delete(&ig);
        assert_eq!(
            f.verify(&ig, 0, &block(8), false).unwrap(),
            Verdict::Unknown
        );
        ig.commit();
        assert_eq!(ig.stored_counts(), Some((0, 0)));
        assert!(ig.file(3).unwrap().is_none() || ig.file(3).unwrap().unwrap().is_deleted());
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

    #[test]
    fn a_whole_file_recorded_again_replaces_what_was_there() {
        let (_d, ig) = mount(1);
        let f = ig.new_file(8);
        f.set(&ig, 0, &[sum(&block(1)), sum(&block(2))], 0).unwrap();
        ig.commit();
        // Known and not known in memory alike.
        ig.record_whole(8, vec![sum(&block(3))], 4096);
        ig.record_whole(9, vec![sum(&block(4))], 4096);
        assert!(ig.commit().is_empty());
        assert_eq!(f.verify(&ig, 0, &block(3), true).unwrap(), Verdict::Good);
        let g = ig.file(9).unwrap().expect("recorded");
        assert_eq!(g.verify(&ig, 0, &block(4), true).unwrap(), Verdict::Good);
    }
}
