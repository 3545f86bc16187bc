//! Each file's checksums in memory: verify a read, set a write's, truncate, delete.

use super::store::FileChange;
use super::sum::{self, chunk_of, zero_sum, Sum, CHUNK_BLOCKS};
use super::Integrity;
use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

/// Records of a file kept in memory once committed (a clean file's cache).
const CACHED_CHUNKS: usize = 64;

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

    pub(super) fn mark_dirty(&self, f: &Arc<FileSums>) {
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
}

/// One file's checksums in memory: the records read from the store so far and the ones
/// changed since the last commit.
pub struct FileSums {
    pub id: u64,
    state: Mutex<State>,
    /// In [`Integrity`]'s map of files to commit.
    pub(super) registered: std::sync::atomic::AtomicBool,
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

    /// The file's size when these checksums saw every change of it since it was created,
    /// emptied or hashed whole (`fresh`): its bytes past that are zeros. `None` for a file
    /// whose checksums came from the store, whose size there may be older than its copies'.
    pub fn fresh_size(&self) -> Option<u64> {
        let st = self.state.lock();
        (st.fresh && !st.deleted).then_some(st.size)
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

    pub(super) fn take_change(&self) -> Option<FileChange> {
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

    pub(super) fn restore_change(&self) {
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

    pub(super) fn trim_cache(&self) {
        let mut st = self.state.lock();
        st.taken = None;
        if st.chunks.len() > CACHED_CHUNKS && st.dirty.is_empty() && st.drop_from.is_none() {
            st.chunks.clear();
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

// Last in the file: scripts/module-deps.py reads a file only up to its first `#[cfg(test)]`,
// and `LiveSums::len` is one.
/// The files with checksums in memory: a file's entry outlives its checksums (a weak
/// reference, which also keeps their allocation), so the entries of files no longer in
/// memory are dropped once the map has doubled since it was last pruned. Without that it
/// would hold an entry for every file the mount has ever looked at.
#[derive(Default)]
pub(super) struct LiveSums {
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

#[cfg(test)]
mod tests {
    use super::super::sum::{sum, BLOCK};
    use super::super::tests::{block, mount};
    use super::*;

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
