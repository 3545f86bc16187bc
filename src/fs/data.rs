//! Opening files and writing them (reading is `read.rs`).

use super::handle::{open_maybe_direct, Admission, IoKind, OpenFile};
use super::inode::{Backing, IoMode};
use super::{agree, Caller, Entry, MirrorFs, Opened, PassthroughTo};
use crate::errno::{Errno, Result};
use crate::leg::LegIdx;
use crate::mirror::Op;
use crate::sys;
use crate::sys::aligned::AlignedBuf;
use crate::sys::creds::CallerCredsGuard;
use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The kernel's `__FMODE_EXEC` bit in the flags of an open made by execve.
const FMODE_EXEC: i32 = 0o40;

/// The smallest write that is streamed (see [`streamed`]).
const STREAMED_WRITE: usize = 128 << 10;

/// Whether a write of `len` bytes at `offset` is streamed to the legs, its pages left out of
/// their page caches (`leg::LegWrites`): a large one (a copy, a download, a backup) that ends
/// on a checksum block's boundary. A small write, or one whose last block the next write will
/// complete, stays cached on the legs: the next write's checksum reads that block back
/// (`checksums.rs`, `sums_for_write`), and a program that writes a little at a time rereads
/// what it wrote.
fn streamed(offset: u64, len: usize) -> bool {
    len >= STREAMED_WRITE && (offset + len as u64).is_multiple_of(crate::integrity::sum::BLOCK)
}

/// Flags for a leg's own descriptor. `O_APPEND` is dropped: the kernel sends every write with
/// its final offset, and an appending descriptor would ignore it. The kernel's internal
/// `__FMODE_EXEC` bit is not an open flag.
fn leg_open_flags(flags: i32) -> i32 {
    flags & !(libc::O_APPEND | libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY | FMODE_EXEC)
}

impl MirrorFs {
    /// Opens the regular file `ino` on every in-sync leg (as `caller` when the core checks
    /// access: the leg's kernel checks read and write permission).
    pub fn open(&self, ino: u64, flags: i32, caller: &Caller) -> Result<u64> {
        self.open_with(ino, flags, caller).map(|o| o.fh)
    }

    /// [`open`](Self::open), saying how the kernel is to reach the data (`passthrough=ro`).
    pub fn open_with(&self, ino: u64, flags: i32, caller: &Caller) -> Result<Opened> {
        let _barrier = self.mirror.barrier();
        if ino == super::inode::CONTROL_INO {
            // Readable (it is empty); its keys are xattrs, not contents.
            return if flags & libc::O_ACCMODE == libc::O_RDONLY && flags & libc::O_TRUNC == 0 {
                Ok(Opened {
                    fh: super::control::CONTROL_FH,
                    passthrough: None,
                })
            } else {
                Err(Errno::EACCES)
            };
        }
        let inode = self.inodes.get(ino)?;
        if !inode.is_regular() {
            // Only regular files reach here (the kernel opens special files itself); never open
            // a FIFO or device on a leg on the user's behalf.
            return Err(if inode.is_dir() {
                Errno::EISDIR
            } else {
                Errno::EACCES
            });
        }
        // execve opens with the kernel's FMODE_EXEC bit: that needs execute permission, not
        // read permission (a mode 0711 program runs for everyone). The kernel checked the
        // execute bits; acting as the caller, the leg checks it for the caller, and the
        // descriptor itself is opened as the daemon.
        let exec = flags & FMODE_EXEC != 0;
        let flags = leg_open_flags(flags);
        // A read-only open does not look for the file on quiet legs: reads go there last,
        // and find it then if they must.
        let read_only = flags & libc::O_ACCMODE == libc::O_RDONLY && flags & libc::O_TRUNC == 0;
        let legs = match read_only {
            true => self.legs_known(&inode),
            false => self.legs_for(&inode),
        };
        if exec && !self.config.options.default_permissions {
            let leg = self.mirror.metadata_leg();
            self.checked(caller, || {
                sys::fd::access(inode.fd(leg)?.as_fd(), libc::X_OK)
            })?;
        }
        if flags & libc::O_TRUNC != 0 {
            Self::no_passthrough_readers(&inode.io.lock())?;
            self.will_change(&inode);
        }
        let admission = self.handles.admit(legs.len())?;
        let later_flags = flags & !(libc::O_TRUNC | libc::O_EXCL | libc::O_CREAT);
        if read_only && (exec || self.config.options.default_permissions) {
            // Nothing to check on the legs: their descriptors are opened at first use.
            let n = self.mirror.legs().len();
            let file = OpenFile::read_only(inode.clone(), admission, &legs, n, later_flags)
                .with_io(|io| Ok(self.reader_io(io, &inode, &legs)))?;
            return Ok(self.opened(file));
        }
        let later: Vec<LegIdx> = match read_only {
            true => self.mirror.quiet_among(&legs),
            false => Vec::new(),
        };
        let now: Vec<LegIdx> = legs
            .iter()
            .copied()
            .filter(|l| !later.contains(l))
            .collect();
        let opened = self.mirror.fan_out(&now, Op::Open, |leg| {
            let fd = inode.fd(leg)?;
            let fd = fd.as_fd();
            let open = |f| sys::fd::reopen(fd, f);
            match exec {
                true => open_maybe_direct(flags, open),
                false => self.checked(caller, || open_maybe_direct(flags, open)),
            }
        })?;
        if flags & libc::O_TRUNC != 0 {
            self.truncated_to_zero(&inode);
        }
        let file = self.open_file(inode, admission, opened, later_flags)?;
        for &l in &later {
            file.open_later(l);
        }
        Ok(self.opened(file))
    }

    /// A file open by passthrough now takes no open that may write: ETXTBSY, as for a
    /// program being run. The kernel would pass the writer through to the same leg file,
    /// and a shared writable mapping of it would then change that leg's copy alone.
    fn no_passthrough_readers(io: &IoMode) -> Result<()> {
        match io.passthrough {
            0 => Ok(()),
            _ => Err(Errno::ETXTBSY),
        }
    }

    /// An open that may write (or was opened on every leg): through the page cache; refused
    /// while the file is open by passthrough.
    fn open_file(
        &self,
        inode: super::InodeRef,
        admission: Admission,
        opened: Vec<(LegIdx, (OwnedFd, bool))>,
        flags: i32,
    ) -> Result<OpenFile> {
        let n = self.mirror.legs().len();
        let mut fds: Vec<Option<(OwnedFd, bool)>> = (0..n).map(|_| None).collect();
        for (leg, f) in opened {
            fds[leg] = Some(f);
        }
        OpenFile::new(inode, admission, fds, flags).with_io(|io| {
            Self::no_passthrough_readers(io)?;
            Ok(IoKind::Cached)
        })
    }

    /// How a read-only open reaches the data, decided under the inode's `io` lock: by
    /// passthrough when `passthrough=ro` and no open of the file uses the page cache; the leg
    /// file is chosen by the first such open (see [`passthrough_leg`](Self::passthrough_leg)).
    fn reader_io(&self, io: &mut IoMode, inode: &super::InodeRef, legs: &[LegIdx]) -> IoKind {
        if !self.config.options.passthrough || io.cached > 0 {
            return IoKind::Cached;
        }
        if io.backing.is_some() {
            return IoKind::Passthrough;
        }
        let Some(leg) = self.passthrough_leg(legs) else {
            return IoKind::Cached;
        };
        match inode
            .fd(leg)
            .and_then(|p| sys::fd::reopen(p.as_fd(), libc::O_RDONLY))
        {
            Ok(file) => {
                let count = self.mirror.leg(leg).passthrough_files.clone();
                io.backing = Some(Backing::new(leg, file, count));
                IoKind::Passthrough
            }
            Err(e) => {
                log::warn!(
                    "cannot open inode {} on leg {leg} for passthrough: {e}",
                    inode.ino
                );
                IoKind::Cached
            }
        }
    }

    /// The leg a file's passthrough opens read: of `legs` (in sync, holding the file), not
    /// write-mostly if another can; a non-rotational one if any (an SSD before a disk); then
    /// the one the fewest passed-through files read now.
    fn passthrough_leg(&self, legs: &[LegIdx]) -> Option<LegIdx> {
        let leg = |l: LegIdx| self.mirror.leg(l);
        legs.iter().copied().min_by_key(|&l| {
            (
                leg(l).reads_last(),
                leg(l).rotational,
                leg(l).passthrough_files.load(Ordering::Relaxed),
            )
        })
    }

    /// The handle of `file` given out, and what the kernel is to be told.
    fn opened(&self, file: OpenFile) -> Opened {
        let inode = file.inode.clone();
        let kind = file.io();
        let fh = self.handles.insert_file(file);
        let passthrough = match kind {
            IoKind::Cached => None,
            IoKind::Passthrough => inode.io.lock().backing.as_ref().map(|b| PassthroughTo {
                leg: b.leg,
                file: b.file.clone(),
                // A reader whose leg left the mirror is served by the daemon from the others.
                direct_io: !self.legs_known(&inode).contains(&b.leg),
            }),
        };
        Opened { fh, passthrough }
    }

    /// Creates and opens a regular file on every in-sync leg, as the caller.
    pub fn create(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        flags: i32,
        caller: &Caller,
    ) -> Result<(Entry, u64)> {
        let _barrier = self.mirror.barrier();
        let cname = self.name_for_change(parent, name)?;
        let p = self.inodes.get(parent)?;
        if !p.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        let _dir = p.dir_lock.write();
        let flags = leg_open_flags(flags);
        let legs = self.legs_for(&p);
        self.mirror.check_space(&legs, 0)?;
        let admission = self.handles.admit(legs.len())?;
        self.will_change_dir(&p);
        // The new file's checksum identity goes on each copy before its attributes are read
        // for the reply, so the ctime the kernel caches is already the final one.
        let id = self.new_checksum_id();
        let made = self.mirror.fan_out(&legs, Op::Create, |leg| {
            let dir = p.fd(leg)?;
            let dir = dir.as_fd();
            let (file, direct) = {
                let _creds = CallerCredsGuard::assume(caller)?;
                open_maybe_direct(flags, |f| sys::fd::create_at(dir, &cname, f, mode))?
            };
            let path_fd = sys::fd::open_path_at(dir, &cname)?;
            // Through the new file's own descriptor: no path through /proc.
            let identified = id.is_some_and(|id| Self::give_new_id(file.as_fd(), id));
            let st = sys::fd::fstat(path_fd.as_fd())?;
            Ok((path_fd, st, file, direct, identified))
        })?;
        let mut found = Vec::new();
        let mut opened = Vec::new();
        let mut identified = true;
        for (leg, (path_fd, st, file, direct, ok)) in made {
            found.push((leg, (path_fd, st)));
            opened.push((leg, (file, direct)));
            identified &= ok;
        }
        let entry = self.claim_found(found, &[]);
        let inode = self.inodes.get(entry.attr.ino.0)?;
        // Under the directory's cover from birth: its writes need no record of their own.
        self.created_in(&inode, &p, name);
        if let Some(id) = id {
            self.adopt_new_id(&inode, id, identified);
        }
        // A leg that joins later opens the file again: never with O_TRUNC or O_EXCL.
        let later = flags & !(libc::O_TRUNC | libc::O_EXCL | libc::O_CREAT);
        let file = self.open_file(inode, admission, opened, later)?;
        file.wrote.store(true, Ordering::Relaxed);
        Ok((entry, self.handles.insert_file(file)))
    }

    /// Drops setuid/setgid from the file open as `fh` before `caller` writes to it: the kernel
    /// marked the write `FUSE_WRITE_KILL_SUIDGID` (the caller lacks `CAP_FSETID`) and leaves
    /// this to the daemon (`FUSE_HANDLE_KILLPRIV_V2`).
    pub fn drop_privs_for_write(&self, fh: u64, caller: &Caller) -> Result<()> {
        let _barrier = self.mirror.barrier();
        let h = self.handles.file(fh)?;
        if let Some(mode) = self.mode_without_privs(&h.inode, caller, false)? {
            self.will_change(&h.inode);
            self.set_mode_everywhere(&h.inode, mode)?;
        }
        Ok(())
    }

    /// Writes to every in-sync leg in parallel. A leg that fails is dropped and the write
    /// succeeds on the others; if every leg fails alike, the caller gets that error.
    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> Result<usize> {
        let _barrier = self.mirror.barrier();
        let h = self.handles.file(fh)?;
        let legs = self.writable_legs(&h);
        let aligned = legs
            .iter()
            .any(|&l| h.is_direct(l))
            .then(|| AlignedBuf::copy_of(data));
        self.mirror.check_space(&legs, data.len() as u64)?;
        self.will_change(&h.inode);
        let sums = self.sums(&h.inode);
        // A write that keeps part of a block reads that part to compute the block's new
        // checksum: no other change of the file may run meanwhile.
        let partial = sums.is_some() && Self::write_is_partial(offset, data.len());
        let _shared = (!partial).then(|| h.inode.data_lock.read());
        let _exclusive = partial.then(|| h.inode.data_lock.write());
        let _change = h.inode.data_change();
        let new_sums = match &sums {
            Some(f) => Some(self.sums_for_write(&h.inode, f, offset, data)?),
            None => None,
        };
        // Errors are counted where the legs' answers are reconciled (a leg fault drops the leg
        // and counts a write error there; a caller error is no error of the leg's).
        let streamed = streamed(offset, data.len());
        let written = match self.mirror.leg_timeout() {
            None => self
                .mirror
                .fan_out_file(&legs, Op::Write, Some(h.inode.ino), |leg| {
                    let (buf, direct) = match (&aligned, h.is_direct(leg)) {
                        (Some(a), true) => (a.as_slice(), true),
                        _ => (data, false),
                    };
                    let writes = &self.mirror.leg(leg).writes;
                    writes.pwrite(h.fd(leg)?.as_fd(), buf, offset, streamed && !direct)
                })?,
            // Each leg's part owns a copy of the data: one that hangs past the deadline is
            // left behind, and this write goes on without it.
            Some(_) => {
                let plain: Arc<[u8]> = Arc::from(data);
                let aligned = aligned.map(Arc::new);
                self.mirror
                    .fan_out_owned(&legs, Op::Write, Some(h.inode.ino), |leg| {
                        let fd = h.fd(leg)?;
                        let op: crate::mirror::deadline::OwnedOp<usize> =
                            match (&aligned, h.is_direct(leg)) {
                                (Some(a), true) => {
                                    let a = a.clone();
                                    Box::new(move || {
                                        sys::fd::pwrite_full(fd.as_fd(), a.as_slice(), offset)
                                    })
                                }
                                _ => {
                                    let d = plain.clone();
                                    let w = self.mirror.leg(leg).writes.clone();
                                    Box::new(move || w.pwrite(fd.as_fd(), &d, offset, streamed))
                                }
                            };
                        Ok(op)
                    })?
            }
        };
        for (leg, n) in &written {
            let c = &self.mirror.leg(*leg).counters;
            c.write_ops.fetch_add(1, Ordering::Relaxed);
            c.write_bytes.fetch_add(*n as u64, Ordering::Relaxed);
        }
        h.wrote.store(true, Ordering::Relaxed);
        if let (Some(f), Some((first, new))) = (&sums, new_sums) {
            let end = offset + data.len() as u64;
            f.set(self.mirror.integrity(), first, &new, end)
                .map_err(|e| self.checksum_failure(&h.inode, e))?;
        }
        agree(&self.mirror, "write", &written)
    }

    /// The in-sync legs this handle has a descriptor on.
    fn writable_legs(&self, h: &OpenFile) -> Vec<LegIdx> {
        h.legs()
            .into_iter()
            .filter(|&l| self.mirror.leg(l).is_in_sync())
            .collect()
    }

    /// After data changed through `h`, gives every leg's copy the metadata leg's mtime.
    fn align_mtimes(&self, h: &OpenFile) -> Result<()> {
        if !h.wrote.swap(false, Ordering::AcqRel) {
            return Ok(());
        }
        self.align_mtime(&self.writable_legs(h), Op::SetMtime, |leg| h.fd(leg))?;
        // That moved the copies' ctimes, maybe after the sweep stamped the file as settled.
        self.recovery.stamp(&[h.inode.ino]);
        Ok(())
    }

    pub fn flush(&self, fh: u64) -> Result<()> {
        let _barrier = self.mirror.barrier();
        if fh == super::control::CONTROL_FH {
            return Ok(());
        }
        let h = self.handles.file(fh)?;
        self.align_mtimes(&h)
    }

    pub fn release(&self, fh: u64) -> Result<()> {
        let _barrier = self.mirror.barrier();
        if fh == super::control::CONTROL_FH {
            return Ok(());
        }
        let r = match self.handles.file(fh) {
            Ok(h) => {
                let r = self.align_mtimes(&h);
                // The descriptors on legs out of the mirror are not closed here: on a leg
                // that hangs, the close would wait for it (see `close_elsewhere`).
                for leg in h.legs() {
                    if !self.mirror.leg(leg).is_in_sync() {
                        let fd = h.attach(leg, None);
                        super::handle::close_elsewhere(leg, fd.into_iter().collect());
                    }
                }
                r
            }
            Err(e) => Err(e),
        };
        self.handles.remove(fh);
        r
    }

    pub fn fsync(&self, fh: u64, datasync: bool) -> Result<()> {
        let _barrier = self.mirror.barrier();
        if fh == super::control::CONTROL_FH {
            return Ok(());
        }
        let h = self.handles.file(fh)?;
        self.align_mtimes(&h)?;
        let legs = self.writable_legs(&h);
        self.mirror
            .fan_out_owned(&legs, Op::Fsync, None, |leg| {
                let fd = h.fd(leg)?;
                Ok(Box::new(move || sys::fd::fsync(fd.as_fd(), datasync)))
            })
            .map(drop)
    }

    pub fn fallocate(&self, fh: u64, offset: u64, length: u64, mode: i32) -> Result<()> {
        let _barrier = self.mirror.barrier();
        let h = self.handles.file(fh)?;
        let legs = self.writable_legs(&h);
        let frees = mode & (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_COLLAPSE_RANGE) != 0;
        self.mirror
            .check_space(&legs, if frees { 0 } else { length })?;
        self.will_change(&h.inode);
        let sums = self.sums(&h.inode);
        let zeroes = mode & (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE) != 0;
        let shifts = mode & (libc::FALLOC_FL_COLLAPSE_RANGE | libc::FALLOC_FL_INSERT_RANGE) != 0;
        // Allocating changes no byte; zeroing and shifting do, and their checksums are
        // computed around the change (exclusively, see `fs/checksums.rs`).
        let exclusive = sums.is_some() && (zeroes || shifts);
        let _shared = (!exclusive).then(|| h.inode.data_lock.read());
        let _exclusive = exclusive.then(|| h.inode.data_lock.write());
        let _change = h.inode.data_change();
        let new_sums = match (&sums, zeroes) {
            (Some(f), true) => {
                let size = self
                    .on_metadata_leg("fstat", |leg| sys::fd::fstat(h.fd(leg)?.as_fd()))?
                    .st_size as u64;
                self.sums_for_zeroing(&h.inode, f, offset, length, size)?
            }
            _ => None,
        };
        if let (Some(f), true) = (&sums, shifts) {
            // Verified before the data moves, so rot does not move into a fresh checksum.
            self.verify_whole(&h.inode, f)?;
        }
        self.mirror.fan_out(&legs, Op::Fallocate, |leg| {
            sys::fd::fallocate(h.fd(leg)?.as_fd(), mode, offset, length)
        })?;
        h.wrote.store(true, Ordering::Relaxed);
        if let (Some(f), Some((first, new))) = (&sums, new_sums) {
            f.set(self.mirror.integrity(), first, &new, 0)
                .map_err(|e| self.checksum_failure(&h.inode, e))?;
        }
        if let (Some(f), true) = (&sums, shifts) {
            self.rehash(&h.inode, f)?;
        } else if let (Some(f), 0) = (&sums, mode & libc::FALLOC_FL_KEEP_SIZE) {
            // It may have grown the file (zeros: no checksum changes, but the size counts).
            let st = self.on_metadata_leg("fstat", |leg| sys::fd::fstat(h.fd(leg)?.as_fd()))?;
            f.set_size(self.mirror.integrity(), st.st_size as u64);
        }
        Ok(())
    }

    /// SEEK_DATA / SEEK_HOLE (and the others) answered by the metadata leg's copy.
    pub fn lseek(&self, fh: u64, offset: i64, whence: i32) -> Result<i64> {
        let h = self.handles.file(fh)?;
        self.on_metadata_leg("lseek", |leg| {
            sys::fd::lseek(h.fd(leg)?.as_fd(), offset, whence)
        })
    }

    /// Copies between two open files on every leg (each leg copies its own copy, in parallel).
    pub fn copy_file_range(
        &self,
        fh_in: u64,
        off_in: u64,
        fh_out: u64,
        off_out: u64,
        len: u64,
    ) -> Result<u64> {
        let _barrier = self.mirror.barrier();
        let hi = self.handles.file(fh_in)?;
        let ho = self.handles.file(fh_out)?;
        if self.sums(&ho.inode).is_some() || self.sums(&hi.inode).is_some() {
            // Each leg would copy its own copy, unverified, and the daemon would never see the
            // bytes to checksum: the kernel falls back to reading and writing through the
            // mount, which verifies the source and checksums the destination.
            return Err(Errno::EOPNOTSUPP);
        }
        let legs: Vec<LegIdx> = self
            .writable_legs(&ho)
            .into_iter()
            .filter(|&l| hi.fd(l).is_ok())
            .collect();
        self.mirror.check_space(&legs, len)?;
        self.will_change(&ho.inode);
        let _data = ho.inode.data_lock.read();
        let _change = ho.inode.data_change();
        let copied = self.mirror.fan_out(&legs, Op::CopyFileRange, |leg| {
            sys::fd::copy_file_range_full(
                hi.fd(leg)?.as_fd(),
                off_in,
                ho.fd(leg)?.as_fd(),
                off_out,
                len,
            )
        })?;
        ho.wrote.store(true, Ordering::Relaxed);
        agree(&self.mirror, "copy_file_range", &copied)
    }
}
