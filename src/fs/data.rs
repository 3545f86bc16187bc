//! Opening files and moving their data.

use super::handle::{Admission, OpenFile};
use super::{agree, Caller, Entry, MirrorFs};
use crate::errno::{Errno, Result};
use crate::leg::LegIdx;
use crate::policy::ReadRequest;
use crate::sys;
use crate::sys::aligned::AlignedBuf;
use crate::sys::creds::CallerCredsGuard;
use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;

/// Data read from a leg.
pub enum ReadData {
    Plain(Vec<u8>),
    Aligned(AlignedBuf, usize),
}

impl ReadData {
    pub fn as_slice(&self) -> &[u8] {
        match self {
            ReadData::Plain(v) => v,
            ReadData::Aligned(b, n) => &b.as_slice()[..*n],
        }
    }
}

/// Flags for a leg's own descriptor. `O_APPEND` is dropped: the kernel sends every write with
/// its final offset, and an appending descriptor would ignore it.
fn leg_open_flags(flags: i32) -> i32 {
    flags & !(libc::O_APPEND | libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY)
}

/// Opens on one leg with `O_DIRECT` when asked, falling back to a buffered descriptor where the
/// leg's filesystem refuses `O_DIRECT` (tmpfs). Returns the descriptor and whether it is direct.
fn open_maybe_direct(flags: i32, open: impl Fn(i32) -> Result<OwnedFd>) -> Result<(OwnedFd, bool)> {
    if flags & libc::O_DIRECT != 0 {
        match open(flags) {
            Ok(fd) => return Ok((fd, true)),
            Err(Errno::EINVAL) => {}
            Err(e) => return Err(e),
        }
    }
    Ok((open(flags & !libc::O_DIRECT)?, false))
}

impl MirrorFs {
    /// Opens the regular file `ino` on every in-sync leg.
    pub fn open(&self, ino: u64, flags: i32) -> Result<u64> {
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
        let flags = leg_open_flags(flags);
        let legs = self.mirror.in_sync_legs();
        let admission = self.handles.admit(legs.len())?;
        let opened = self.mirror.fan_out(&legs, "open", |leg| {
            let fd = inode.fd(leg)?;
            let fd = fd.as_fd();
            open_maybe_direct(flags, |f| sys::fd::reopen(fd, f))
        })?;
        Ok(self.insert_handle(inode, admission, opened))
    }

    fn insert_handle(
        &self,
        inode: super::InodeRef,
        admission: Admission,
        opened: Vec<(LegIdx, (OwnedFd, bool))>,
    ) -> u64 {
        let n = self.mirror.legs().len();
        let mut fds: Vec<Option<OwnedFd>> = (0..n).map(|_| None).collect();
        let mut direct = vec![false; n];
        for (leg, (fd, d)) in opened {
            fds[leg] = Some(fd);
            direct[leg] = d;
        }
        self.handles
            .insert_file(OpenFile::new(inode, admission, fds, direct))
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
        let cname = self.name_for_change(parent, name)?;
        let p = self.inodes.get(parent)?;
        if !p.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        let _dir = p.dir_lock.write();
        let flags = leg_open_flags(flags);
        let legs = self.mirror.in_sync_legs();
        let admission = self.handles.admit(legs.len())?;
        let made = self.mirror.fan_out(&legs, "create", |leg| {
            let dir = p.fd(leg)?;
            let dir = dir.as_fd();
            let (file, direct) = {
                let _creds = CallerCredsGuard::assume(caller)?;
                open_maybe_direct(flags, |f| sys::fd::create_at(dir, &cname, f, mode))?
            };
            let path_fd = sys::fd::open_path_at(dir, &cname)?;
            let st = sys::fd::fstat(path_fd.as_fd())?;
            Ok((path_fd, st, file, direct))
        })?;
        let mut found = Vec::new();
        let mut opened = Vec::new();
        for (leg, (path_fd, st, file, direct)) in made {
            found.push((leg, (path_fd, st)));
            opened.push((leg, (file, direct)));
        }
        let entry = self.claim_found(found);
        let inode = self.inodes.get(entry.attr.ino.0)?;
        let fh = self.insert_handle(inode, admission, opened);
        self.handles.file(fh)?.wrote.store(true, Ordering::Relaxed);
        Ok((entry, fh))
    }

    /// Reads from the one leg the read policy picks; an I/O error there is retried on another
    /// in-sync leg (and the failing leg dropped).
    pub fn read(&self, fh: u64, offset: u64, size: u32, pid: u32) -> Result<ReadData> {
        let h = self.handles.file(fh)?;
        let req = ReadRequest {
            pid,
            file: h.inode.ino,
            offset,
            size,
            ..Default::default()
        };
        let data = self.mirror.read_from(&h.legs(), &req, "read", |leg| {
            let fd = h.fd(leg)?;
            let fd = fd.as_fd();
            let data = if h.is_direct(leg) {
                let mut buf = AlignedBuf::new(size as usize);
                let n = sys::fd::pread_full(fd, buf.as_mut_slice(), offset)?;
                ReadData::Aligned(buf, n)
            } else {
                let mut buf = vec![0u8; size as usize];
                let n = sys::fd::pread_full(fd, &mut buf, offset)?;
                buf.truncate(n);
                ReadData::Plain(buf)
            };
            let c = &self.mirror.leg(leg).counters;
            c.read_ops.fetch_add(1, Ordering::Relaxed);
            c.read_bytes
                .fetch_add(data.as_slice().len() as u64, Ordering::Relaxed);
            Ok(data)
        })?;
        Ok(data)
    }

    /// Writes to every in-sync leg in parallel. A leg that fails is dropped and the write
    /// succeeds on the others; if every leg fails alike, the caller gets that error.
    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> Result<usize> {
        let h = self.handles.file(fh)?;
        let legs = self.writable_legs(&h);
        let aligned = legs
            .iter()
            .any(|&l| h.is_direct(l))
            .then(|| AlignedBuf::copy_of(data));
        let written = self.mirror.fan_out(&legs, "write", |leg| {
            let fd = h.fd(leg)?;
            let fd = fd.as_fd();
            let buf = match (&aligned, h.is_direct(leg)) {
                (Some(a), true) => a.as_slice(),
                _ => data,
            };
            let r = sys::fd::pwrite_full(fd, buf, offset);
            let c = &self.mirror.leg(leg).counters;
            match r {
                Ok(n) => {
                    c.write_ops.fetch_add(1, Ordering::Relaxed);
                    c.write_bytes.fetch_add(n as u64, Ordering::Relaxed);
                }
                Err(_) => {
                    c.write_errors.fetch_add(1, Ordering::Relaxed);
                }
            }
            r
        })?;
        h.wrote.store(true, Ordering::Relaxed);
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
        self.align_mtime(&self.writable_legs(h), "set mtime", |leg| h.fd(leg))
    }

    pub fn flush(&self, fh: u64) -> Result<()> {
        let h = self.handles.file(fh)?;
        self.align_mtimes(&h)
    }

    pub fn release(&self, fh: u64) -> Result<()> {
        let r = match self.handles.file(fh) {
            Ok(h) => self.align_mtimes(&h),
            Err(e) => Err(e),
        };
        self.handles.remove(fh);
        r
    }

    pub fn fsync(&self, fh: u64, datasync: bool) -> Result<()> {
        let h = self.handles.file(fh)?;
        self.align_mtimes(&h)?;
        let legs = self.writable_legs(&h);
        self.mirror
            .fan_out(&legs, "fsync", |leg| sys::fd::fsync(h.fd(leg)?, datasync))
            .map(drop)
    }

    pub fn fallocate(&self, fh: u64, offset: u64, length: u64, mode: i32) -> Result<()> {
        let h = self.handles.file(fh)?;
        let legs = self.writable_legs(&h);
        self.mirror.fan_out(&legs, "fallocate", |leg| {
            sys::fd::fallocate(h.fd(leg)?, mode, offset, length)
        })?;
        h.wrote.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// SEEK_DATA / SEEK_HOLE (and the others) answered by the metadata leg's copy.
    pub fn lseek(&self, fh: u64, offset: i64, whence: i32) -> Result<i64> {
        let h = self.handles.file(fh)?;
        self.on_metadata_leg("lseek", |leg| sys::fd::lseek(h.fd(leg)?, offset, whence))
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
        let hi = self.handles.file(fh_in)?;
        let ho = self.handles.file(fh_out)?;
        let legs: Vec<LegIdx> = self
            .writable_legs(&ho)
            .into_iter()
            .filter(|&l| hi.fd(l).is_ok())
            .collect();
        let copied = self.mirror.fan_out(&legs, "copy_file_range", |leg| {
            sys::fd::copy_file_range_full(hi.fd(leg)?, off_in, ho.fd(leg)?, off_out, len)
        })?;
        ho.wrote.store(true, Ordering::Relaxed);
        agree(&self.mirror, "copy_file_range", &copied)
    }
}
