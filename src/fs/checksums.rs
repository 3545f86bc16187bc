//! What the core does with checksums: finds a file's, gives new files theirs, computes a
//! write's from its own bytes, verifies reads and repairs a copy that fails them.
//!
//! Locking: a change that must read old bytes to compute its checksums (a write that does
//! not cover whole blocks, a truncation inside a block, a punched hole's edges) holds the
//! file's data lock exclusively, so the old bytes and the new checksums cannot race with
//! another change. Reads take no lock; a read whose copy fails its checksums looks again
//! under the exclusive data lock (a write in flight is then over) before calling it bad.

use super::inode::{Inode, Sums};
use super::MirrorFs;
use crate::errno::{Errno, Result};
use crate::integrity::sum::{self, Sum, BLOCK};
use crate::integrity::{self, FileSums, Verdict};
use crate::leg::LegIdx;
use crate::mirror::outcome::DropReason;
use crate::mirror::Op;
use crate::sys;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A range of a file as read from one leg.
pub(super) struct LegRead {
    pub leg: LegIdx,
    pub data: Vec<u8>,
}

/// A covered file's identity and its copies' descriptors on some legs.
pub(super) type EntryCopies = (u64, Vec<(LegIdx, std::os::fd::OwnedFd)>);

impl MirrorFs {
    /// The checksums of `inode` (a regular file), or None if it has none.
    pub(super) fn sums(&self, inode: &Arc<Inode>) -> Option<Arc<FileSums>> {
        let ig = self.mirror.integrity();
        if !ig.enabled() || !inode.is_regular() {
            return None;
        }
        let mut slot = inode.sums.lock();
        let epoch = ig.coverage_epoch();
        match &*slot {
            Sums::Covered(f) => return Some(f.clone()),
            // u64::MAX: the root, never a file.
            Sums::Uncovered(e) if *e == epoch || *e == u64::MAX => return None,
            Sums::Uncovered(_) | Sums::Unknown => {}
        }
        let leg = self.mirror.metadata_leg();
        let id = match inode.fd(leg) {
            Ok(fd) => match sys::xattr::get(fd.as_fd(), integrity::ID_XATTR, 8) {
                Ok((v, _)) => integrity::id_from(&v),
                Err(Errno::ENODATA) | Err(Errno::ENOTSUP) => None,
                Err(_) => return None,
            },
            Err(_) => return None,
        };
        let found = match id {
            Some(id) => match ig.file(id) {
                Ok(f) => f,
                Err(e) => {
                    log::error!("checksums of inode {}: {e}", inode.ino);
                    return None;
                }
            },
            None => None,
        };
        *slot = match &found {
            Some(f) => Sums::Covered(f.clone()),
            None => Sums::Uncovered(epoch),
        };
        found
    }

    /// Gives `inode`, which is empty (just created, or truncated to nothing), an identity on
    /// `legs` and checksums. Left without (uncovered) where a leg refuses the xattr.
    pub(super) fn cover_empty(&self, inode: &Arc<Inode>, legs: &[LegIdx]) {
        let ig = self.mirror.integrity();
        if !ig.enabled() || !inode.is_regular() {
            return;
        }
        let id = sys::random_u64();
        let value = integrity::id_bytes(id);
        let set = self.mirror.fan_out(legs, Op::SetChecksumId, |leg| {
            sys::xattr::set(inode.fd(leg)?.as_fd(), integrity::ID_XATTR, &value, 0)
        });
        *inode.sums.lock() = match set {
            Ok(done) if done.len() == legs.len() => Sums::Covered(ig.new_file(id)),
            _ => Sums::Uncovered(ig.coverage_epoch()),
        };
    }

    /// A fresh identity for a file about to be created, if checksums are on.
    pub(super) fn new_checksum_id(&self) -> Option<u64> {
        self.mirror.integrity().enabled().then(sys::random_u64)
    }

    /// Gives the copy `fd` (just created) the identity `id`, unless it is not empty or has one
    /// already (the name existed on this leg after all). True if it has `id` now. One
    /// `setxattr` that only creates: an identity already there (or anything under its name)
    /// is left as it is.
    pub(super) fn give_new_id(fd: std::os::fd::BorrowedFd<'_>, id: u64) -> bool {
        let empty = sys::fd::fstat(fd).is_ok_and(|st| st.st_size == 0);
        empty
            && sys::xattr::set(
                fd,
                integrity::ID_XATTR,
                &integrity::id_bytes(id),
                libc::XATTR_CREATE,
            )
            .is_ok()
    }

    /// After a creation: `inode` is covered by `id` if every copy took it (`identified`).
    pub(super) fn adopt_new_id(&self, inode: &Arc<Inode>, id: u64, identified: bool) {
        let ig = self.mirror.integrity();
        *inode.sums.lock() = match identified {
            true => Sums::Covered(ig.new_file(id)),
            false => Sums::Uncovered(ig.coverage_epoch()),
        };
    }

    /// Reads `len` bytes at `offset` (a block boundary) of `inode` from `leg`, through a fresh
    /// read-only descriptor.
    fn read_leg(
        &self,
        inode: &Arc<Inode>,
        leg: LegIdx,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>> {
        self.mirror.check_fault_file(leg, "read", Some(inode.ino))?;
        let fd = sys::fd::reopen(inode.fd(leg)?.as_fd(), libc::O_RDONLY)?;
        let mut buf = vec![0u8; len];
        let n = sys::fd::pread_full(fd.as_fd(), &mut buf, offset)?;
        buf.truncate(n);
        Ok(buf)
    }

    /// Whether `data`, read at `offset` asking for `asked` bytes, is as written.
    fn verdict(&self, f: &FileSums, offset: u64, data: &[u8], asked: usize) -> Verdict {
        match f.verify(self.mirror.integrity(), offset, data, data.len() < asked) {
            Ok(v) => v,
            Err(e) => {
                log::error!("checksums of file {:x}: {e}", f.id);
                Verdict::Unknown
            }
        }
    }

    /// The blocks of `data` (read at `offset`, asking `len` bytes) that fail their checksums.
    fn bad_blocks(&self, f: &FileSums, offset: u64, data: &[u8], len: usize) -> Vec<u64> {
        match self.verdict(f, offset, data, len) {
            Verdict::Bad(v) => v,
            _ => Vec::new(),
        }
    }

    /// The range `offset..offset + len` (block-aligned) from the first in-sync leg whose copy
    /// verifies, with the legs that did not. Call with the data lock held.
    fn first_good(
        &self,
        inode: &Arc<Inode>,
        f: &FileSums,
        offset: u64,
        len: usize,
    ) -> (Option<LegRead>, Vec<LegRead>) {
        let mut bad = Vec::new();
        for leg in self.legs_known(inode) {
            let Ok(data) = self.read_leg(inode, leg, offset, len) else {
                continue;
            };
            match self.verdict(f, offset, &data, len) {
                Verdict::Bad(_) => bad.push(LegRead { leg, data }),
                _ => return (Some(LegRead { leg, data }), bad),
            }
        }
        (None, bad)
    }

    /// The old contents of block `block` for a change that keeps part of it: from a leg whose
    /// copy verifies. If none does, the metadata leg's bytes, and the file is listed as
    /// damaged there (the change then gives them a checksum again: they are what the file
    /// holds now).
    fn old_block(&self, inode: &Arc<Inode>, f: &FileSums, block: u64) -> Result<Vec<u8>> {
        let (good, bad) = self.first_good(inode, f, block * BLOCK, BLOCK as usize);
        if let Some(g) = good {
            for b in &bad {
                self.rewrite_copy(inode, b.leg, g.leg, block * BLOCK, &g.data, &[block]);
            }
            return Ok(g.data);
        }
        let range = (block * BLOCK, BLOCK);
        self.note_damage(inode, f, range);
        match bad.into_iter().next() {
            Some(b) => Ok(b.data),
            None => Err(Errno::EIO),
        }
    }

    fn note_damage(&self, inode: &Arc<Inode>, f: &FileSums, (offset, len): (u64, u64)) {
        let path = self.display_path(inode);
        log::error!(
            "checksum error in '{path}' at bytes {offset}..{}: no leg holds the data as written",
            offset + len
        );
        self.mirror
            .integrity()
            .record_damage(f.id, path, offset, len);
    }

    /// The file's path in the mirror, for the log and the damaged-file list.
    pub(super) fn display_path(&self, inode: &Arc<Inode>) -> String {
        match self.leg_relpath(inode) {
            Some(p) if p.is_empty() => "/".into(),
            Some(p) => format!("/{}", String::from_utf8_lossy(&p)),
            None => format!("(inode {})", inode.ino),
        }
    }

    /// The checksums a write of `data` at `offset` gives its blocks (first block, sums).
    /// Blocks the write covers only in part keep their other bytes: those are read (and
    /// verified) first, so that rot already there never gets a fresh checksum.
    pub(super) fn sums_for_write(
        &self,
        inode: &Arc<Inode>,
        f: &FileSums,
        offset: u64,
        data: &[u8],
    ) -> Result<(u64, Vec<Sum>)> {
        let first = sum::block_of(offset);
        let end = offset + data.len() as u64;
        if offset.is_multiple_of(BLOCK) && (end.is_multiple_of(BLOCK) || data.is_empty()) {
            return Ok((first, sum::sums_of(data)));
        }
        let start = first * BLOCK;
        let mut buf = vec![0u8; (sum::align_up(end) - start) as usize];
        // A block wholly past the end of a file whose every write these checksums saw (one
        // created or emptied since it was last hashed whole) holds zeros: nothing to read.
        let fresh_end = f.fresh_size();
        let old_block = |block: u64| match fresh_end {
            Some(size) if block * BLOCK >= size => Ok(Vec::new()),
            _ => self.old_block(inode, f, block),
        };
        if !offset.is_multiple_of(BLOCK) {
            let old = old_block(first)?;
            buf[..old.len()].copy_from_slice(&old);
        }
        let last = sum::block_of(end - 1);
        if !end.is_multiple_of(BLOCK) && (last != first || offset.is_multiple_of(BLOCK)) {
            let old = old_block(last)?;
            let at = ((last - first) * BLOCK) as usize;
            buf[at..at + old.len()].copy_from_slice(&old);
        }
        let at = (offset - start) as usize;
        buf[at..at + data.len()].copy_from_slice(data);
        Ok((first, sum::sums_of(&buf)))
    }

    /// Whether a write of `len` bytes at `offset` must read old bytes (not whole blocks).
    pub(super) fn write_is_partial(offset: u64, len: usize) -> bool {
        !offset.is_multiple_of(BLOCK) || !(offset + len as u64).is_multiple_of(BLOCK)
    }

    /// The new checksum of the block holding `size` when the file is cut (or grown) to
    /// `size` bytes: its bytes up to `size`, then zeros. None when `size` is on a boundary.
    pub(super) fn tail_sum(
        &self,
        inode: &Arc<Inode>,
        f: &FileSums,
        size: u64,
    ) -> Result<Option<Sum>> {
        if size.is_multiple_of(BLOCK) {
            return Ok(None);
        }
        let mut old = self.old_block(inode, f, sum::block_of(size))?;
        old.truncate((size % BLOCK) as usize);
        Ok(Some(sum::sum(&old)))
    }

    /// Checksums for a punched (or zeroed) range `offset..offset + len` of a file of `size`
    /// bytes: (first block, sums) of the blocks it touches inside the file.
    pub(super) fn sums_for_zeroing(
        &self,
        inode: &Arc<Inode>,
        f: &FileSums,
        offset: u64,
        len: u64,
        size: u64,
    ) -> Result<Option<(u64, Vec<Sum>)>> {
        let end = offset.saturating_add(len).min(sum::align_up(size));
        if offset >= end {
            return Ok(None);
        }
        let first = sum::block_of(offset);
        let last = sum::block_of(end - 1);
        let mut out = Vec::with_capacity((last - first + 1) as usize);
        for b in first..=last {
            let (bs, be) = (b * BLOCK, (b + 1) * BLOCK);
            if offset <= bs && end >= be {
                out.push(sum::zero_sum());
                continue;
            }
            let mut old = self.old_block(inode, f, b)?;
            old.resize(BLOCK as usize, 0);
            let from = offset.max(bs) - bs;
            let to = end.min(be) - bs;
            old[from as usize..to as usize].fill(0);
            out.push(sum::sum(&old));
        }
        Ok(Some((first, out)))
    }

    /// Writes `good` (from leg `from`) over leg `bad`'s copy at `offset`, checks the copy
    /// again, and counts and logs the repair; `blocks` are the blocks found bad (for the log).
    /// The caller holds the data lock.
    fn rewrite_copy(
        &self,
        inode: &Arc<Inode>,
        bad: LegIdx,
        from: LegIdx,
        offset: u64,
        good: &[u8],
        blocks: &[u64],
    ) {
        let leg = self.mirror.leg(bad);
        let path = self.display_path(inode);
        let (first, last) = match (blocks.first(), blocks.last()) {
            (Some(&a), Some(&z)) => (a * BLOCK, (z + 1) * BLOCK),
            _ => (offset, offset + good.len() as u64),
        };
        // Rot or a change made on the leg itself? The one rule: integrity::classify. A file
        // open for writing through the mount is being changed by it: rot. One whose changes
        // have not settled yet (still in the intent log) has no valid stamp yet.
        let ig = self.mirror.integrity();
        let id = self.sums(inode).map(|f| f.id);
        let stat = |l: LegIdx| sys::fd::fstat(inode.fd(l)?.as_fd());
        if let (Ok(b), Ok(g), false) = (stat(bad), stat(from), self.changing(inode)) {
            let differs = (b.st_size, b.st_mtime, b.st_mtime_nsec)
                != (g.st_size, g.st_mtime, g.st_mtime_nsec);
            let stamp = match (id, self.mirror.changes().is_dirty(inode.ino)) {
                (Some(id), false) => ig.stamp(bad, id),
                _ => None,
            };
            if integrity::classify(stamp, integrity::ctime_of(&b), differs)
                == integrity::Cause::Diverged
            {
                ig.record_diverged(path.clone(), &leg.name);
                log::warn!(
                    "leg {bad} ('{}'): '{path}' does not match its checksums at bytes \
                     {first}..{last}, and the copy was changed on its leg since the mirror \
                     last wrote it (its ctime moved): changed behind the mirror's back \
                     (diverged); not repaired (docs/integrity.md)",
                    leg.path().display(),
                );
                return;
            }
        }
        leg.counters.checksum_errors.fetch_add(1, Ordering::Relaxed);
        let r = self
            .mirror
            .check_fault_file(bad, "repair", Some(inode.ino))
            .and_then(|()| sys::fd::reopen(inode.fd(bad)?.as_fd(), libc::O_WRONLY))
            .and_then(|fd| sys::fd::pwrite_full(fd.as_fd(), good, offset))
            .and_then(|_| self.read_leg(inode, bad, offset, good.len()))
            .and_then(|back| {
                if back == good {
                    Ok(())
                } else {
                    Err(Errno::EIO)
                }
            })
            // A repair is no change of the file: the copy keeps the good copy's mtime.
            .and_then(|()| self.align_mtime(&[from, bad], Op::Repair, |l| inode.fd(l)));
        match r {
            Ok(()) => {
                leg.counters.read_repairs.fetch_add(1, Ordering::Relaxed);
                // The repair moved the copy's ctime: its stamp follows.
                if let (Some(id), Ok(st)) = (id, stat(bad)) {
                    ig.set_stamp(bad, id, Some(integrity::ctime_of(&st)));
                }
                log::warn!(
                    "leg {bad} ('{}'): checksum error in '{path}' at bytes {first}..{last}: \
                     repaired from leg {from}",
                    leg.path().display(),
                );
            }
            Err(e) => {
                log::error!(
                    "leg {bad} ('{}'): checksum error in '{path}' at bytes {first}..{last}: \
                     the repair failed ({e})",
                    leg.path().display(),
                );
                leg.counters.write_errors.fetch_add(1, Ordering::Relaxed);
                self.mirror
                    .mark_failed(bad, "checksum repair", DropReason::LegFault(e));
            }
        }
    }

    /// Whether `inode` is being changed through the mount (its copies' mtimes may differ until
    /// it is closed).
    fn changing(&self, inode: &Arc<Inode>) -> bool {
        self.handles
            .open_files()
            .iter()
            .any(|h| Arc::ptr_eq(&h.inode, inode) && h.flags & libc::O_ACCMODE != libc::O_RDONLY)
    }

    /// A read found leg `bad`'s copy of `offset..offset + len` not as written: looked at
    /// again under the data lock (a write may have been in flight), and if still bad,
    /// repaired from a leg whose copy verifies.
    pub(super) fn repair_checksum(
        &self,
        inode: &Arc<Inode>,
        f: &FileSums,
        bad: LegIdx,
        offset: u64,
        len: usize,
    ) {
        let _barrier = self.mirror.barrier();
        let _data = inode.data_lock.write();
        if !self.mirror.leg(bad).is_in_sync() {
            return;
        }
        let Ok(now) = self.read_leg(inode, bad, offset, len) else {
            return;
        };
        let Verdict::Bad(blocks) = self.verdict(f, offset, &now, len) else {
            return;
        };
        let (good, _) = self.first_good(inode, f, offset, len);
        match good {
            Some(g) => self.rewrite_copy(inode, bad, g.leg, offset, &g.data, &blocks),
            None => self.note_damage(inode, f, (offset, len as u64)),
        }
    }

    /// Every leg's copy failed its checksums for this read: looked at again under the data
    /// lock. The first copy that verifies is the answer (the others are repaired from it);
    /// if none does, the file is damaged there and the caller gets EIO.
    pub(super) fn read_when_all_bad(
        &self,
        inode: &Arc<Inode>,
        f: &FileSums,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>> {
        let _barrier = self.mirror.barrier();
        let _data = inode.data_lock.write();
        let (good, bad) = self.first_good(inode, f, offset, len);
        match good {
            Some(g) => {
                for b in &bad {
                    let blocks = self.bad_blocks(f, offset, &b.data, len);
                    self.rewrite_copy(inode, b.leg, g.leg, offset, &g.data, &blocks);
                }
                Ok(g.data)
            }
            None => {
                for b in &bad {
                    let c = &self.mirror.leg(b.leg).counters;
                    c.checksum_errors.fetch_add(1, Ordering::Relaxed);
                }
                // Name the blocks that are bad on every leg.
                let mut blocks: Option<Vec<u64>> = None;
                for b in &bad {
                    if let Verdict::Bad(v) = self.verdict(f, offset, &b.data, len) {
                        blocks = Some(match blocks {
                            None => v,
                            Some(prev) => prev.into_iter().filter(|x| v.contains(x)).collect(),
                        });
                    }
                }
                let blocks = blocks.unwrap_or_default();
                match (blocks.first(), blocks.last()) {
                    (Some(&a), Some(&z)) => {
                        self.note_damage(inode, f, (a * BLOCK, (z - a + 1) * BLOCK))
                    }
                    _ => self.note_damage(inode, f, (offset, len as u64)),
                }
                Err(Errno::EIO)
            }
        }
    }

    /// A checksum store could not be read: logged; the caller gets EIO.
    pub(super) fn checksum_failure(&self, inode: &Arc<Inode>, e: std::io::Error) -> Errno {
        log::error!("checksums of '{}': {e}", self.display_path(inode));
        Errno::EIO
    }

    /// `inode` was truncated to nothing (O_TRUNC, or a truncate to 0): its checksums are
    /// all zero now, and a file without checksums gets them (it is empty: nothing to hash).
    pub(super) fn truncated_to_zero(&self, inode: &Arc<Inode>) {
        match self.sums(inode) {
            Some(f) => {
                if let Err(e) = f.truncate(self.mirror.integrity(), 0, None) {
                    self.checksum_failure(inode, e);
                }
            }
            None => self.cover_empty(inode, &self.legs_for(inode)),
        }
    }

    /// Reads the whole file, verifying (and repairing) it block range by block range: before
    /// a change that moves data (collapse or insert range). Call with the data lock held.
    pub(super) fn verify_whole(&self, inode: &Arc<Inode>, f: &FileSums) -> Result<()> {
        let step = sum::CHUNK_BYTES as usize;
        let mut offset = 0u64;
        loop {
            let (good, bad) = self.first_good(inode, f, offset, step);
            let Some(g) = good else {
                self.note_damage(inode, f, (offset, step as u64));
                return Err(Errno::EIO);
            };
            for b in &bad {
                let blocks = self.bad_blocks(f, offset, &b.data, step);
                self.rewrite_copy(inode, b.leg, g.leg, offset, &g.data, &blocks);
            }
            if g.data.len() < step {
                return Ok(());
            }
            offset += step as u64;
        }
    }

    /// Computes the whole file's checksums again from the metadata leg's copy (after a change
    /// that moved data). Call with the data lock held.
    pub(super) fn rehash(&self, inode: &Arc<Inode>, f: &FileSums) -> Result<()> {
        let leg = self.mirror.metadata_leg();
        let fd = sys::fd::reopen(inode.fd(leg)?.as_fd(), libc::O_RDONLY)?;
        let sums = integrity::hash_fd(fd.as_fd()).map_err(|e| self.checksum_failure(inode, e))?;
        let size = sys::fd::fstat(fd.as_fd())?.st_size as u64;
        self.mirror.integrity().record_whole(f.id, sums, size);
        Ok(())
    }

    /// The stat of the regular file `name` in `dir` on the metadata leg, with that leg's
    /// descriptor of `dir` (None: checksums are off, or it is something else).
    fn regular_entry(
        &self,
        dir: &Arc<Inode>,
        name: &std::ffi::CStr,
    ) -> Option<(Arc<std::os::fd::OwnedFd>, libc::stat)> {
        if !self.mirror.integrity().enabled() {
            return None;
        }
        let d = dir.fd(self.mirror.metadata_leg()).ok()?;
        let st = sys::fd::stat_at(d.as_fd(), name).ok()?;
        (st.st_mode & libc::S_IFMT == libc::S_IFREG).then_some((d, st))
    }

    /// The identity of the regular file `name` in `dir` if this is its last name (so that
    /// removing the name removes the file), from the metadata leg.
    pub(super) fn last_link_id(&self, dir: &Arc<Inode>, name: &std::ffi::CStr) -> Option<u64> {
        let (d, st) = self.regular_entry(dir, name)?;
        (st.st_nlink == 1).then(|| integrity::id_at(d.as_fd(), name))?
    }

    /// What removing the name `name` in `dir` (a covered regular file) asks of the checksums,
    /// from one look at the metadata leg: the file's identity when this is its last name (its
    /// checksums go with it, [`forget_checksums`](Self::forget_checksums)), or its copies on
    /// `legs` when another name keeps it (their ctimes move, [`entry_copies`](Self::entry_copies)).
    /// A `stat` and a `getxattrat` of the name: an `rm -rf` pays this for every file.
    pub(super) fn removal_of(
        &self,
        dir: &Arc<Inode>,
        name: &std::ffi::CStr,
        legs: &[LegIdx],
    ) -> (Option<u64>, Option<EntryCopies>) {
        let Some((d, st)) = self.regular_entry(dir, name) else {
            return (None, None);
        };
        match st.st_nlink {
            1 => (integrity::id_at(d.as_fd(), name), None),
            _ => (None, self.copies_of(d.as_fd(), dir, name, legs)),
        }
    }

    /// The copies on `legs` of the covered regular file at `dir`/`name`, with its identity:
    /// descriptors opened before a change that moves their ctime without changing data
    /// (rename, or removing one of several names), which still name the file after it, for
    /// [`stamp_copies`](Self::stamp_copies). None for anything else.
    pub(super) fn entry_copies(
        &self,
        dir: &Arc<Inode>,
        name: &std::ffi::CStr,
        legs: &[LegIdx],
    ) -> Option<EntryCopies> {
        let (d, _) = self.regular_entry(dir, name)?;
        self.copies_of(d.as_fd(), dir, name, legs)
    }

    /// `meta_dir`: the metadata leg's descriptor of `dir`.
    fn copies_of(
        &self,
        meta_dir: std::os::fd::BorrowedFd<'_>,
        dir: &Arc<Inode>,
        name: &std::ffi::CStr,
        legs: &[LegIdx],
    ) -> Option<EntryCopies> {
        let id = integrity::id_at(meta_dir, name)?;
        let fds = legs
            .iter()
            .filter_map(|&l| {
                let fd = sys::fd::open_path_at(dir.fd(l).ok()?.as_fd(), name).ok()?;
                Some((l, fd))
            })
            .collect();
        Some((id, fds))
    }

    /// After such a change: each copy's ctime is its stamp (see [`integrity::classify`]).
    pub(super) fn stamp_copies(&self, copies: Option<EntryCopies>) {
        let Some((id, fds)) = copies else { return };
        let ig = self.mirror.integrity();
        for (leg, fd) in fds {
            let st = sys::fd::fstat(fd.as_fd()).ok();
            ig.set_stamp(leg, id, st.map(|st| integrity::ctime_of(&st)));
        }
    }

    /// The file `id` is gone: its checksums go at the next commit.
    pub(super) fn forget_checksums(&self, id: Option<u64>) {
        let ig = self.mirror.integrity();
        match id.map(|id| ig.file(id)) {
            Some(Ok(Some(f))) => f.delete(ig),
            Some(Err(e)) => log::error!("checksums of a removed file: {e}"),
            _ => {}
        }
    }
}
