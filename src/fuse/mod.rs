//! The FUSE adapter: each `fuser` callback becomes one call of the core and one reply.
//!
//! Boring on purpose (mountpoint-s3's `fuse.rs` is the model): no policy, leg or on-disk
//! knowledge lives here. Operations mirrorfs does not implement are listed at the end with the
//! errno userspace expects.

use crate::config::KernelCache;
use crate::errno::{Errno, Result};
use crate::fs::kernel::Notify;
use crate::fs::{Caller, MirrorFs, PassthroughTo, SetAttr, TimeSpec, XattrReply};
use crate::leg::LegIdx;
use fuser::{
    AccessFlags, BackingId, BsdFileFlags, CopyFileRangeFlags, FileHandle, Filesystem, FopenFlags,
    Generation, INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use std::ffi::OsStr;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// Largest read and write request: 1 MiB.
const MAX_IO: u32 = 1 << 20;

/// `fuser::Filesystem` over [`MirrorFs`].
pub struct MirrorFuse {
    fs: std::sync::Arc<MirrorFs>,
    cache: KernelCache,
    /// The kernel took FUSE_PASSTHROUGH (`passthrough=ro`).
    passthrough: bool,
    /// The kernel took FUSE_HANDLE_KILLPRIV_V2: dropping setuid/setgid on write, truncate
    /// and chown is the daemon's, and the kernel asks no GETATTR before each chown and no
    /// `security.capability` before every write.
    drops_privs: bool,
    /// The kernel offers zero-message opendir and [`KernelCache::zero_message_opendir`] wants
    /// it: OPENDIR is answered ENOSYS, and directories are listed without a handle.
    no_opendir: bool,
    backings: parking_lot::Mutex<Backings>,
}

/// The kernel's backing files (`passthrough=ro`): one per inode while any of its opens is
/// passed through (the kernel refuses a second one), given back at the last release.
#[derive(Default)]
struct Backings {
    /// By inode: the leg, the registered file, and how many open handles use it.
    by_ino: std::collections::HashMap<u64, (LegIdx, std::sync::Arc<BackingId>, usize)>,
    /// Passed-through handles, with their inode.
    handles: std::collections::HashMap<u64, u64>,
}

impl MirrorFuse {
    pub fn new(fs: std::sync::Arc<MirrorFs>, cache: KernelCache) -> MirrorFuse {
        MirrorFuse {
            fs,
            cache,
            passthrough: false,
            drops_privs: false,
            no_opendir: false,
            backings: Default::default(),
        }
    }

    /// The backing id of the passed-through open `fh` of `ino` (registered by the first open
    /// of the inode, shared by the others); counted until [`let_go`](Self::let_go).
    fn backing_for(
        &self,
        ino: u64,
        fh: u64,
        to: &PassthroughTo,
        register: impl FnOnce(&std::os::fd::OwnedFd) -> std::io::Result<BackingId>,
    ) -> std::io::Result<std::sync::Arc<BackingId>> {
        let mut b = self.backings.lock();
        let id = match b.by_ino.get_mut(&ino) {
            // The core keeps one leg file per inode while any open is passed through.
            Some((leg, id, n)) if *leg == to.leg => {
                *n += 1;
                id.clone()
            }
            _ => {
                let id = std::sync::Arc::new(register(&to.file)?);
                b.by_ino.insert(ino, (to.leg, id.clone(), 1));
                id
            }
        };
        b.handles.insert(fh, ino);
        Ok(id)
    }

    /// The handle `fh` is released: its inode's backing id goes with its last handle.
    fn let_go(&self, fh: u64) {
        let mut b = self.backings.lock();
        let Some(ino) = b.handles.remove(&fh) else {
            return;
        };
        if let Some((_, _, n)) = b.by_ino.get_mut(&ino) {
            *n -= 1;
            if *n == 0 {
                b.by_ino.remove(&ino);
            }
        }
    }

    /// The kernel refused to take the leg file as a backing file: the open fails (EIO) and its
    /// handle goes.
    fn backing_failed(&self, fh: u64, to: &PassthroughTo, e: std::io::Error) {
        log::error!(
            "passthrough=ro: the kernel refused leg {}'s file as a backing file ({e}); a leg on \
             a stacked filesystem (overlayfs, FUSE) cannot back passthrough: mount without \
             passthrough=ro",
            to.leg
        );
        let _ = self.fs.release(fh);
    }

    /// The flags of a file open: what the kernel keeps of it.
    fn file_open_flags(&self, flags: i32) -> FopenFlags {
        let mut f = FopenFlags::empty();
        if self.cache.keep_data {
            f |= FopenFlags::FOPEN_KEEP_CACHE;
        }
        // A read-only open has nothing to flush (its mtimes are aligned only after writes).
        if flags & libc::O_ACCMODE == libc::O_RDONLY {
            f |= FopenFlags::FOPEN_NOFLUSH;
        }
        f
    }
}

fn errno(e: Errno) -> fuser::Errno {
    fuser::Errno::from_i32(e.code())
}

/// The caller of a request (its supplementary groups are read when an operation needs them).
fn caller(req: &Request) -> Caller {
    Caller::new(req.uid(), req.gid(), req.pid())
}

fn time_spec(t: TimeOrNow) -> TimeSpec {
    match t {
        TimeOrNow::Now => TimeSpec::Now,
        TimeOrNow::SpecificTime(st) => match st.duration_since(UNIX_EPOCH) {
            Ok(d) => TimeSpec::At {
                sec: d.as_secs() as i64,
                nsec: d.subsec_nanos() as i64,
            },
            Err(e) => {
                let d = e.duration();
                let (mut sec, mut nsec) = (-(d.as_secs() as i64), -(d.subsec_nanos() as i64));
                if nsec < 0 {
                    sec -= 1;
                    nsec += 1_000_000_000;
                }
                TimeSpec::At { sec, nsec }
            }
        },
    }
}

fn log_err(op: &str, e: Errno) {
    // Expected answers (a missing name, an existing one) are not worth more than debug.
    match e.code() {
        libc::ENOENT
        | libc::EEXIST
        | libc::ENOTEMPTY
        | libc::ENODATA
        | libc::EACCES
        | libc::EPERM
        | libc::ENAMETOOLONG
        | libc::ENOTDIR
        | libc::EISDIR
        | libc::ERANGE
        | libc::ENOSPC
        | libc::EINVAL
        | libc::EXDEV
        | libc::ENOTSUP => {
            log::debug!("{op}: {e}")
        }
        _ => log::warn!("{op}: {e}"),
    }
}

macro_rules! reply_or_err {
    ($reply:expr, $op:expr, $res:expr, |$v:ident| $ok:expr) => {
        match $res {
            Ok($v) => $ok,
            Err(e) => {
                log_err($op, e);
                $reply.error(errno(e))
            }
        }
    };
}

fn reply_empty(reply: ReplyEmpty, op: &str, r: Result<()>) {
    reply_or_err!(reply, op, r, |_v| reply.ok())
}

fn reply_xattr(reply: ReplyXattr, op: &str, r: Result<XattrReply>) {
    reply_or_err!(reply, op, r, |v| match v {
        XattrReply::Size(n) => reply.size(n),
        XattrReply::Data(d) => reply.data(&d),
    })
}

impl MirrorFuse {
    /// The flags of a directory open: whether the kernel keeps its listing.
    fn dir_open_flags(&self) -> FopenFlags {
        match self.cache.listings {
            true => FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE,
            false => FopenFlags::empty(),
        }
    }
}

/// [`Notify`] through `fuser`'s notifier.
pub struct KernelNotifier(pub fuser::Notifier);

impl Notify for KernelNotifier {
    fn inval_inode(&self, ino: u64, data: bool) {
        // Offset -1: the attributes only; 0 with length 0: every cached page as well.
        let offset = if data { 0 } else { -1 };
        if let Err(e) = self.0.inval_inode(INodeNo(ino), offset, 0) {
            log::debug!("kernel notice: node {ino}: {e}");
        }
    }

    fn inval_entry(&self, parent: u64, name: &OsStr) {
        if let Err(e) = self.0.inval_entry(INodeNo(parent), name) {
            log::debug!("kernel notice: name {name:?} in node {parent}: {e}");
        }
    }
}

/// The attributes of a name that is not there (only its node id, 0, counts).
fn absent() -> fuser::FileAttr {
    fuser::FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: fuser::FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

impl Filesystem for MirrorFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        if let Err(n) = config.set_max_write(MAX_IO) {
            log::info!("kernel limits max_write to {n}");
            let _ = config.set_max_write(n);
        }
        let _ = config.set_max_readahead(MAX_IO);
        for flag in [
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_READDIRPLUS_AUTO,
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_ASYNC_DIO,
        ]
        .into_iter()
        .chain(
            self.cache
                .symlinks
                .then_some(InitFlags::FUSE_CACHE_SYMLINKS),
        )
        .chain(self.cache.acls.then_some(InitFlags::FUSE_POSIX_ACL))
        .chain(
            self.cache
                .inval_data_on_change
                .then_some(InitFlags::FUSE_AUTO_INVAL_DATA),
        ) {
            if let Err(refused) = config.add_capabilities(flag) {
                log::info!("kernel refused {refused:?}");
            }
        }
        if self.cache.zero_message_opendir {
            match config.add_capabilities(InitFlags::FUSE_NO_OPENDIR_SUPPORT) {
                Ok(()) => self.no_opendir = true,
                Err(refused) => log::info!("kernel refused {refused:?}"),
            }
        }
        match config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2) {
            Ok(()) => self.drops_privs = true,
            Err(refused) => log::info!("kernel refused {refused:?}"),
        }
        if self.cache.passthrough {
            // Backing files on a plain filesystem: this mount may itself be stacked once.
            let depth = config.set_max_stack_depth(1);
            match (depth, config.add_capabilities(InitFlags::FUSE_PASSTHROUGH)) {
                (Ok(_), Ok(())) => self.passthrough = true,
                _ => log::error!(
                    "passthrough=ro: the kernel does not offer FUSE passthrough; every open \
                     goes through the daemon"
                ),
            }
        }
        Ok(())
    }

    fn destroy(&mut self) {
        self.fs.unmount();
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let r = self.fs.lookup(parent.0, name, &caller(req));
        if r.as_ref().is_err_and(|e| *e == Errno::ENOENT) && !self.cache.negative.is_zero() {
            // Node id 0 with a timeout: the kernel remembers that the name is not there.
            return reply.entry(&self.cache.negative, &absent(), Generation(0));
        }
        reply_or_err!(reply, "lookup", r, |e| reply.entry(
            &self.cache.entry,
            &e.attr,
            Generation(0)
        ))
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.fs.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        reply_or_err!(reply, "getattr", self.fs.getattr(ino.0), |a| reply
            .attr(&self.cache.attr, &a))
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let set = SetAttr {
            fh: fh.map(|f| f.0),
            mode,
            uid,
            gid,
            size,
            atime: atime.map(time_spec),
            mtime: mtime.map(time_spec),
            drops_privs: self.drops_privs,
        };
        let r = self.fs.setattr(ino.0, &set, &caller(req));
        reply_or_err!(reply, "setattr", r, |a| reply.attr(&self.cache.attr, &a))
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        reply_or_err!(reply, "readlink", self.fs.readlink(ino.0), |t| reply
            .data(&t))
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let r = self.fs.mknod(parent.0, name, mode, rdev, &caller(req));
        reply_or_err!(reply, "mknod", r, |e| reply.entry(
            &self.cache.entry,
            &e.attr,
            Generation(0)
        ))
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let r = self.fs.mkdir(parent.0, name, mode, &caller(req));
        reply_or_err!(reply, "mkdir", r, |e| reply.entry(
            &self.cache.entry,
            &e.attr,
            Generation(0)
        ))
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(
            reply,
            "unlink",
            self.fs.unlink(parent.0, name, &caller(req)),
        )
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, "rmdir", self.fs.rmdir(parent.0, name, &caller(req)))
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let r = self
            .fs
            .symlink(parent.0, link_name, target.as_os_str(), &caller(req));
        reply_or_err!(reply, "symlink", r, |e| reply.entry(
            &self.cache.entry,
            &e.attr,
            Generation(0)
        ))
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = self.fs.rename(
            parent.0,
            name,
            newparent.0,
            newname,
            flags.bits(),
            &caller(req),
        );
        reply_empty(reply, "rename", r)
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        reply_or_err!(
            reply,
            "link",
            self.fs.link(ino.0, newparent.0, newname, &caller(req)),
            |e| reply.entry(&self.cache.entry, &e.attr, Generation(0))
        )
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let o = match self.fs.open_with(ino.0, flags.0, &caller(req)) {
            Ok(o) => o,
            Err(e) => {
                log_err("open", e);
                return reply.error(errno(e));
            }
        };
        match o.passthrough.as_ref().filter(|_| self.passthrough) {
            None => reply.opened(FileHandle(o.fh), self.file_open_flags(flags.0)),
            Some(to) => match self.backing_for(ino.0, o.fh, to, |f| reply.open_backing(f)) {
                // Only NOFLUSH and DIRECT_IO go with PASSTHROUGH (no page cache to keep).
                Ok(id) => {
                    let mut f = FopenFlags::FOPEN_NOFLUSH;
                    if to.direct_io {
                        // Its reads come to the daemon (the leg it was passed to has left).
                        f |= FopenFlags::FOPEN_DIRECT_IO;
                    }
                    reply.opened_passthrough(FileHandle(o.fh), f, &id)
                }
                Err(e) => {
                    self.backing_failed(o.fh, to, e);
                    reply.error(fuser::Errno::EIO)
                }
            },
        }
    }

    fn read(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let r = self.fs.read(fh.0, offset, size, req.pid());
        reply_or_err!(reply, "read", r, |d| reply.data(d.as_slice()))
    }

    fn write(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let drop_privs =
            self.drops_privs && write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        let r = match drop_privs {
            true => self.fs.drop_privs_for_write(fh.0, &caller(req)),
            false => Ok(()),
        };
        let r = r.and_then(|()| self.fs.write(fh.0, offset, data));
        reply_or_err!(reply, "write", r, |n| reply.written(n as u32))
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply_empty(reply, "flush", self.fs.flush(fh.0))
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.let_go(fh.0);
        reply_empty(reply, "release", self.fs.release(fh.0))
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply_empty(reply, "fsync", self.fs.fsync(fh.0, datasync))
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if self.no_opendir {
            // The kernel lists with handle 0 from now on, and keeps the listings itself.
            return reply.error(errno(Errno::ENOSYS));
        }
        reply_or_err!(
            reply,
            "opendir",
            self.fs.opendir(ino.0, &caller(req)),
            |fh| reply.opened(FileHandle(fh), self.dir_open_flags())
        )
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let r = self
            .fs
            .readdir(ino.0, fh.0, offset, |ino, next, kind, name| {
                reply.add(INodeNo(ino), next, crate::fs::attr::file_type(kind), name)
            });
        reply_or_err!(reply, "readdir", r, |_v| reply.ok())
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let ttl = self.cache.entry;
        let r = self.fs.readdirplus(ino.0, fh.0, offset, |e| {
            reply.add(
                e.entry.attr.ino,
                e.offset,
                e.name,
                &ttl,
                &e.entry.attr,
                Generation(0),
            )
        });
        reply_or_err!(reply, "readdirplus", r, |_v| reply.ok())
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.fs.releasedir(fh.0);
        reply.ok()
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply_empty(reply, "fsyncdir", self.fs.fsyncdir(ino.0, datasync))
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        reply_or_err!(reply, "statfs", self.fs.statfs(), |s| reply.statfs(
            s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize
        ))
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply_empty(
            reply,
            "setxattr",
            self.fs.setxattr(ino.0, name, value, flags, &caller(req)),
        )
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let r = self.fs.getxattr(ino.0, name, size, &caller(req));
        reply_xattr(reply, "getxattr", r)
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        reply_xattr(
            reply,
            "listxattr",
            self.fs.listxattr(ino.0, size, &caller(req)),
        )
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.fs.removexattr(ino.0, name, &caller(req));
        reply_empty(reply, "removexattr", r)
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        reply_empty(
            reply,
            "access",
            self.fs.access(ino.0, mask.bits(), &caller(req)),
        )
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let r = self.fs.create(parent.0, name, mode, flags, &caller(req));
        reply_or_err!(reply, "create", r, |v| reply.created(
            &self.cache.entry,
            &v.0.attr,
            Generation(0),
            FileHandle(v.1),
            self.file_open_flags(flags)
        ))
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        reply_empty(
            reply,
            "fallocate",
            self.fs.fallocate(fh.0, offset, length, mode),
        )
    }

    fn lseek(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        reply_or_err!(reply, "lseek", self.fs.lseek(fh.0, offset, whence), |o| {
            reply.offset(o)
        })
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        _ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        _ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        // The kernel caps one request below 4 GiB (a u32 reply).
        let len = len.min(u32::MAX as u64 & !0xfff);
        let r = self
            .fs
            .copy_file_range(fh_in.0, offset_in, fh_out.0, offset_out, len);
        reply_or_err!(reply, "copy_file_range", r, |n| reply.written(n as u32))
    }

    // Not implemented, on purpose:
    // - getlk/setlk: without FUSE_POSIX_LOCKS the kernel keeps POSIX and flock locks itself,
    //   which is right for a local filesystem;
    // - ioctl, poll, bmap: answered ENOSYS by fuser's defaults (no leg-specific ioctls are
    //   passed through).
}
