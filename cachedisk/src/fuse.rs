//! The FUSE side: a root directory holding one file, `disk`, whose requests go to the
//! [`Disk`].
//!
//! The file is opened with `FOPEN_DIRECT_IO`: the kernel keeps no page cache of it, so every
//! read and write of the loop driver (or of any program) reaches the daemon when it is made,
//! and nothing can sit in the kernel between a write and the cache it belongs to. Shared mmap
//! is refused for the same reason (no `FUSE_DIRECT_IO_ALLOW_MMAP`).
//!
//! Only FSYNC flushes the cache: FLUSH is sent at every close() and is not a disk's cache
//! flush. After a cut, every request on the disk fails with EIO (open, read, write, fsync,
//! flush, fallocate, truncate); the root directory and the file's attributes still answer, as
//! a dead disk's device node still exists, so that `ls` and `umount MNT` work.

use crate::disk::{Disk, Res};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use std::ffi::OsStr;
use std::fs::File;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

pub const NAME: &str = "disk";
const ROOT: u64 = 1;
const DISK: u64 = 2;
/// The attributes never change (the size is fixed), so the kernel may keep them.
const TTL: Duration = Duration::from_secs(1);

pub struct CacheDiskFs {
    pub disk: Arc<Disk<File>>,
    pub size: u64,
    pub started: SystemTime,
    /// One line on stderr per WRITE, FSYNC and FALLOCATE (`--trace`).
    pub trace: bool,
}

fn err(e: i32) -> Errno {
    Errno::from_i32(e)
}

impl CacheDiskFs {
    fn attr(&self, ino: u64) -> FileAttr {
        let (kind, perm, size, nlink) = if ino == ROOT {
            (FileType::Directory, 0o755, 0, 2)
        } else {
            (FileType::RegularFile, 0o644, self.size, 1)
        };
        FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: self.started,
            mtime: self.started,
            ctime: self.started,
            crtime: self.started,
            kind,
            perm,
            nlink,
            uid: unsafe { libc::geteuid() },
            gid: unsafe { libc::getegid() },
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    /// Requests other than on the disk file (the root directory has no data).
    fn disk_only(ino: INodeNo) -> Res<()> {
        if ino.0 == DISK {
            Ok(())
        } else {
            Err(libc::EISDIR)
        }
    }
}

impl Filesystem for CacheDiskFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // The loop driver's requests are up to its queue's max_sectors (1280 KiB here): 1 MiB
        // writes keep them to one or two FUSE requests each.
        let _ = config.set_max_write(1 << 20);
        Ok(())
    }

    fn destroy(&mut self) {
        // Unmounted without a cut: an orderly power-off writes the cache (see Disk::shutdown).
        match self.disk.shutdown() {
            Ok(n) if n > 0 => eprintln!("mirrorfs-cachedisk: unmounted: {n} cached blocks written"),
            Ok(_) => {}
            Err(e) => eprintln!(
                "mirrorfs-cachedisk: unmounted: writing the cache failed: {}",
                std::io::Error::from_raw_os_error(e)
            ),
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent.0 == ROOT && name == NAME {
            reply.entry(&TTL, &self.attr(DISK), Generation(0))
        } else {
            reply.error(Errno::ENOENT)
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match ino.0 {
            ROOT | DISK => reply.attr(&TTL, &self.attr(ino.0)),
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // A disk has a fixed size: a truncate (O_TRUNC included) is refused, unless to the size
        // it has; modes, owners and times are not kept (the attributes are the daemon's).
        match size {
            Some(_) if !self.disk.powered() => reply.error(Errno::EIO),
            Some(s) if ino.0 != DISK || s != self.size => reply.error(Errno::EPERM),
            _ => reply.attr(&TTL, &self.attr(ino.0)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if ino.0 != DISK {
            return reply.error(Errno::EISDIR);
        }
        if !self.disk.powered() {
            return reply.error(Errno::EIO);
        }
        // Stateless I/O (one file): the handle is not used.
        reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO)
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match Self::disk_only(ino).and_then(|()| self.disk.read(offset, u64::from(size))) {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(err(e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let r = Self::disk_only(ino).and_then(|()| self.disk.write(offset, data));
        if self.trace {
            eprintln!(
                "mirrorfs-cachedisk: {} write offset={offset} length={}: {:?}",
                crate::disk::monotonic_ns(),
                data.len(),
                r.map_err(std::io::Error::from_raw_os_error)
            );
        }
        match r {
            // Nothing taken: the write starts at or past the end, as on a block device.
            Ok(0) if !data.is_empty() => reply.error(Errno::ENOSPC),
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(err(e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(): not a cache flush. It fails only as every request does once the power is off.
        if self.disk.powered() {
            reply.ok()
        } else {
            reply.error(Errno::EIO)
        }
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let t = Instant::now();
        let r = Self::disk_only(ino).and_then(|()| self.disk.flush());
        if self.trace {
            eprintln!(
                "mirrorfs-cachedisk: {} fsync datasync={datasync}: {:?} in {:.1} ms",
                crate::disk::monotonic_ns(),
                r.map_err(std::io::Error::from_raw_os_error),
                t.elapsed().as_secs_f64() * 1000.0
            );
        }
        match r {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(err(e)),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        // The loop driver turns DISCARD into a punch hole and WRITE_ZEROES into a zero range
        // (or a punch hole), both with KEEP_SIZE: zeros in the cache, volatile like any write.
        // Plain allocation within the disk has nothing to do; nothing can grow it.
        let zeroing = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE;
        let known = zeroing | libc::FALLOC_FL_KEEP_SIZE;
        let r = Self::disk_only(ino).and_then(|()| {
            if mode & !known != 0 {
                Err(libc::EOPNOTSUPP)
            } else if mode & zeroing != 0 {
                self.disk.zero(offset, length)
            } else if !self.disk.powered() {
                Err(libc::EIO)
            } else if mode & libc::FALLOC_FL_KEEP_SIZE == 0
                && offset.saturating_add(length) > self.size
            {
                Err(libc::ENOSPC)
            } else {
                Ok(())
            }
        });
        if self.trace {
            eprintln!(
                "mirrorfs-cachedisk: {} fallocate mode={mode:#x} offset={offset} length={length}: {:?}",
                crate::disk::monotonic_ns(),
                r.map_err(std::io::Error::from_raw_os_error)
            );
        }
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(err(e)),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if ino.0 == ROOT {
            reply.opened(FileHandle(0), FopenFlags::empty())
        } else {
            reply.error(Errno::ENOTDIR)
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if ino.0 != ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        let entries = [
            (ROOT, FileType::Directory, "."),
            (ROOT, FileType::Directory, ".."),
            (DISK, FileType::RegularFile, NAME),
        ];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), (i + 1) as u64, *kind, name) {
                break;
            }
        }
        reply.ok()
    }
}
