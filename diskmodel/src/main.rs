//! `mirrorfs-diskmodel`: serves a directory through FUSE as if it sat on one device, so that
//! mirrorfs's tests and benchmarks can put legs on a disk, a remote link, a hanging or a failing
//! device on a machine that has none of them.
//!
//! ```text
//! mirrorfs-diskmodel [--disk hdd] [--latency-us N] [--hang-file P] [--fail-file P] SRC MNT
//! ```
//!
//! - `--disk hdd`: every read and write waits as the simulator's 7200 rpm disk
//!   (`mirrorfs_sim::device::Model::hdd`) would serve it: one head, so requests are served one
//!   at a time; none to position when a request starts where the previous one ended, else a
//!   seek growing with the distance plus the rotational wait; 150 MB/s. The file whose inode
//!   number on SRC's filesystem is I lies at disk address 100 GiB + (I mod 3,000) x 256 MiB.
//!   Metadata requests cost nothing (as if the disk's metadata were cached). The real read or
//!   write of SRC is done inside the modelled time, and a read that goes on where the last one
//!   ended, after the head idled, finds the idle time's worth (at most 2 MiB) already read by
//!   the drive's look-ahead. So the round trip of each FUSE request, and SRC's own device, leave
//!   no gap that a real drive or the simulator's disk would not have: read directly with 1 MiB
//!   requests the model gives about 145 MB/s, against the simulator's 149.
//! - `--latency-us N`: every request, metadata included, waits N µs more (a remote leg);
//!   requests overlap, as on a network link.
//! - `--hang-file P`: while P exists, every request waits (a hung device or server); they go
//!   on when it is removed.
//! - `--fail-file P`: while P exists, every request fails with EIO.
//!
//! File data is not cached by the kernel on the model's mount (direct I/O), so every read
//! reaches the model. It runs in the foreground until the mount is unmounted.

use fuser::{
    AccessFlags, BsdFileFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use mirrorfs_sim::device::Model;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const TTL: Duration = Duration::ZERO;
const GIB: u64 = 1 << 30;

struct Options {
    disk: Option<Model>,
    latency: Duration,
    hang_file: Option<PathBuf>,
    fail_file: Option<PathBuf>,
    src: PathBuf,
    mnt: PathBuf,
}

/// The disk's head: where the last request ended, and the clock the rotation follows.
struct Head {
    at: u64,
    /// When (ns on the model's clock) the last request ended: the head has been idle since.
    free_at: u64,
}

struct DiskModel {
    o: Options,
    head: Mutex<Head>,
    clock: Instant,
    /// FUSE inode number -> path under SRC.
    paths: Mutex<HashMap<u64, PathBuf>>,
    files: Mutex<HashMap<u64, std::sync::Arc<File>>>,
    dirs: Mutex<HashMap<u64, Listing>>,
    next_fh: std::sync::atomic::AtomicU64,
}

type Res<T> = Result<T, Errno>;

/// An open directory's entries, read at opendir: (inode number, kind, name).
type Listing = Vec<(u64, FileType, OsString)>;

fn last_errno() -> Errno {
    Errno::from_i32(
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO),
    )
}

fn io_errno(e: std::io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

fn cstr(p: &Path) -> Res<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| Errno::from_i32(libc::EINVAL))
}

fn check(r: libc::c_int) -> Res<()> {
    if r < 0 {
        Err(last_errno())
    } else {
        Ok(())
    }
}

fn kind_of(mode: u32) -> FileType {
    mirrorfs::fs::attr::file_type(mode & libc::S_IFMT)
}

/// An xattr call (`call(buffer, its length)`) into a buffer of `size` bytes, 0 asking only for
/// the size: the bytes, and the length the call returned.
fn xattr_call(
    size: u32,
    call: impl FnOnce(*mut libc::c_void, usize) -> isize,
) -> Res<(Vec<u8>, usize)> {
    let mut buf = vec![0u8; size as usize];
    let k = call(buf.as_mut_ptr().cast(), buf.len());
    if k < 0 {
        return Err(last_errno());
    }
    buf.truncate(k as usize);
    Ok((buf, k as usize))
}

fn reply_xattr(reply: ReplyXattr, size: u32, r: Res<(Vec<u8>, usize)>) {
    match r {
        Ok((_, k)) if size == 0 => reply.size(k as u32),
        Ok((b, _)) => reply.data(&b),
        Err(e) => reply.error(e),
    }
}

/// The FUSE inode number of a backing object: its own plus one (1 is the root's).
fn fuse_ino(st: &libc::stat) -> u64 {
    st.st_ino + 1
}

fn attr(st: &libc::stat, ino: u64) -> FileAttr {
    mirrorfs::fs::attr::from_stat(st, ino)
}

fn lstat(p: &Path) -> Res<libc::stat> {
    let c = cstr(p)?;
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    check(unsafe { libc::lstat(c.as_ptr(), &mut st) })?;
    Ok(st)
}

fn fstat(f: &File) -> Res<libc::stat> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    check(unsafe { libc::fstat(f.as_raw_fd(), &mut st) })?;
    Ok(st)
}

fn utime(t: Option<TimeOrNow>) -> libc::timespec {
    match t {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(TimeOrNow::Now) => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(TimeOrNow::SpecificTime(t)) => {
            let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
            libc::timespec {
                tv_sec: d.as_secs() as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            }
        }
    }
}

impl DiskModel {
    /// What every request goes through: the hang, the failure and the latency.
    fn gate(&self) -> Res<()> {
        if let Some(h) = &self.o.hang_file {
            while h.exists() {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        if self.o.fail_file.as_ref().is_some_and(|f| f.exists()) {
            return Err(Errno::from_i32(libc::EIO));
        }
        if !self.o.latency.is_zero() {
            std::thread::sleep(self.o.latency);
        }
        Ok(())
    }

    /// A data request of `len` bytes at `offset` of `file`: through [`gate`](Self::gate), then
    /// `io` (the real read or write of SRC) done while the modelled disk serves it. The
    /// request takes the model's service time, or `io`'s own time if that is longer: the
    /// real I/O is hidden inside the modelled time, so SRC's own device (shared by every
    /// model on the machine) adds no gap that the modelled disk would not have.
    ///
    /// A read that continues where the last one ended, after the head idled, finds part of it
    /// read by the drive's look-ahead (`Model::disk_service_after_idle_ns`): each request's
    /// round trip through FUSE would otherwise leave a gap that neither a real drive nor the
    /// simulator's disk has.
    fn on_disk<T>(
        &self,
        read: bool,
        file: u64,
        offset: u64,
        len: u64,
        io: impl FnOnce() -> Res<T>,
    ) -> Res<T> {
        self.gate()?;
        let Some(model) = &self.o.disk else {
            return io();
        };
        let addr = 100 * GIB + (file % 3000) * (256 << 20) + offset;
        let mut head = self.head.lock();
        let start = Instant::now();
        let now = self.clock.elapsed().as_nanos() as u64;
        let idle = if read {
            now.saturating_sub(head.free_at)
        } else {
            0
        };
        let ns = model
            .disk_service_after_idle_ns(head.at, addr, len, now, idle)
            .unwrap_or(0);
        let r = io();
        if let Some(rest) = Duration::from_nanos(ns).checked_sub(start.elapsed()) {
            std::thread::sleep(rest);
        }
        head.at = addr + len;
        head.free_at = self.clock.elapsed().as_nanos() as u64;
        r
    }

    fn path(&self, ino: INodeNo) -> Res<PathBuf> {
        self.paths
            .lock()
            .get(&ino.0)
            .cloned()
            .ok_or(Errno::from_i32(libc::ESTALE))
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Res<PathBuf> {
        Ok(self.path(parent)?.join(name))
    }

    /// Looks `p` up: its attributes, remembering its path.
    fn entry(&self, p: PathBuf) -> Res<FileAttr> {
        let st = lstat(&p)?;
        let ino = if p == self.o.src { 1 } else { fuse_ino(&st) };
        self.paths.lock().insert(ino, p);
        Ok(attr(&st, ino))
    }

    /// A new object made by the daemon (root) belongs to the caller, as on a local disk.
    fn own(&self, p: &Path, req: &Request) -> Res<()> {
        let c = cstr(p)?;
        check(unsafe { libc::lchown(c.as_ptr(), req.uid(), req.gid()) })
    }

    fn file(&self, fh: FileHandle) -> Res<std::sync::Arc<File>> {
        self.files
            .lock()
            .get(&fh.0)
            .cloned()
            .ok_or(Errno::from_i32(libc::EBADF))
    }

    fn open_file(&self, p: &Path, flags: i32, mode: u32) -> Res<u64> {
        let c = cstr(p)?;
        // O_DIRECT stays above: the backing file's page cache is not the model's business.
        let flags =
            (flags & !(libc::O_DIRECT | libc::O_APPEND)) | libc::O_CLOEXEC | libc::O_NOFOLLOW;
        let fd = unsafe { libc::open(c.as_ptr(), flags, mode) };
        if fd < 0 {
            return Err(last_errno());
        }
        let fh = self
            .next_fh
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let f = unsafe { File::from_raw_fd(fd) };
        self.files.lock().insert(fh, std::sync::Arc::new(f));
        Ok(fh)
    }

    fn rename_paths(&self, from: &Path, to: &Path, exchange: bool) {
        let mut paths = self.paths.lock();
        let moved = |p: &Path, a: &Path, b: &Path| p.strip_prefix(a).ok().map(|rest| b.join(rest));
        for p in paths.values_mut() {
            let new = if exchange {
                moved(p, from, to).or_else(|| moved(p, to, from))
            } else {
                moved(p, from, to)
            };
            if let Some(n) = new {
                *p = n;
            }
        }
    }

    fn open_flags() -> FopenFlags {
        FopenFlags::FOPEN_DIRECT_IO
    }
}

macro_rules! reply {
    ($reply:expr, $r:expr, |$v:ident| $ok:expr) => {
        match $r {
            Ok($v) => $ok,
            Err(e) => $reply.error(e),
        }
    };
}

impl Filesystem for DiskModel {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_readahead(1 << 20);
        let _ = config.add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let r = self
            .gate()
            .and_then(|()| self.entry(self.child(parent, name)?));
        reply!(reply, r, |a| reply.entry(&TTL, &a, Generation(0)))
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let r = self.gate().and_then(|()| {
            let st = match fh.map(|f| self.file(f)) {
                Some(Ok(f)) => fstat(&f)?,
                _ => lstat(&self.path(ino)?)?,
            };
            Ok(attr(&st, ino.0))
        });
        reply!(reply, r, |a| reply.attr(&TTL, &a))
    }

    fn setattr(
        &self,
        _req: &Request,
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
        let r = self.gate().and_then(|()| {
            let p = self.path(ino)?;
            let c = cstr(&p)?;
            if uid.is_some() || gid.is_some() {
                check(unsafe {
                    libc::lchown(c.as_ptr(), uid.unwrap_or(u32::MAX), gid.unwrap_or(u32::MAX))
                })?;
            }
            if let Some(m) = mode {
                check(unsafe { libc::chmod(c.as_ptr(), m & 0o7777) })?;
            }
            if let Some(s) = size {
                match fh.map(|f| self.file(f)) {
                    Some(Ok(f)) => f.set_len(s).map_err(io_errno)?,
                    _ => check(unsafe { libc::truncate(c.as_ptr(), s as libc::off_t) })?,
                }
            }
            if atime.is_some() || mtime.is_some() {
                let t = [utime(atime), utime(mtime)];
                check(unsafe {
                    libc::utimensat(
                        libc::AT_FDCWD,
                        c.as_ptr(),
                        t.as_ptr(),
                        libc::AT_SYMLINK_NOFOLLOW,
                    )
                })?;
            }
            Ok(attr(&lstat(&p)?, ino.0))
        });
        reply!(reply, r, |a| reply.attr(&TTL, &a))
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let r = self
            .gate()
            .and_then(|()| std::fs::read_link(self.path(ino)?).map_err(io_errno));
        reply!(reply, r, |t| reply.data(t.as_os_str().as_bytes()))
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
        let r = self.gate().and_then(|()| {
            let p = self.child(parent, name)?;
            let c = cstr(&p)?;
            check(unsafe { libc::mknod(c.as_ptr(), mode, libc::dev_t::from(rdev)) })?;
            self.own(&p, req)?;
            self.entry(p)
        });
        reply!(reply, r, |a| reply.entry(&TTL, &a, Generation(0)))
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
        let r = self.gate().and_then(|()| {
            let p = self.child(parent, name)?;
            let c = cstr(&p)?;
            check(unsafe { libc::mkdir(c.as_ptr(), mode) })?;
            self.own(&p, req)?;
            self.entry(p)
        });
        reply!(reply, r, |a| reply.entry(&TTL, &a, Generation(0)))
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.gate().and_then(|()| {
            let c = cstr(&self.child(parent, name)?)?;
            check(unsafe { libc::unlink(c.as_ptr()) })
        });
        reply!(reply, r, |_v| reply.ok())
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.gate().and_then(|()| {
            let c = cstr(&self.child(parent, name)?)?;
            check(unsafe { libc::rmdir(c.as_ptr()) })
        });
        reply!(reply, r, |_v| reply.ok())
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let r = self.gate().and_then(|()| {
            let p = self.child(parent, link_name)?;
            std::os::unix::fs::symlink(target, &p).map_err(io_errno)?;
            self.own(&p, req)?;
            self.entry(p)
        });
        reply!(reply, r, |a| reply.entry(&TTL, &a, Generation(0)))
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = self.gate().and_then(|()| {
            let (from, to) = (self.child(parent, name)?, self.child(newparent, newname)?);
            let (a, b) = (cstr(&from)?, cstr(&to)?);
            let bits = flags.bits();
            check(unsafe {
                libc::renameat2(libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), bits)
            })?;
            self.rename_paths(&from, &to, bits & libc::RENAME_EXCHANGE != 0);
            Ok(())
        });
        reply!(reply, r, |_v| reply.ok())
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = self.gate().and_then(|()| {
            let to = self.child(newparent, newname)?;
            std::fs::hard_link(self.path(ino)?, &to).map_err(io_errno)?;
            let st = lstat(&to)?;
            Ok(attr(&st, ino.0))
        });
        reply!(reply, r, |a| reply.entry(&TTL, &a, Generation(0)))
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let r = self
            .gate()
            .and_then(|()| self.open_file(&self.path(ino)?, flags.0, 0));
        reply!(reply, r, |fh| reply
            .opened(FileHandle(fh), Self::open_flags()))
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let r = self.file(fh).and_then(|f| {
            self.on_disk(true, ino.0, offset, u64::from(size), || {
                let mut buf = vec![0u8; size as usize];
                let mut n = 0;
                while n < buf.len() {
                    match f.read_at(&mut buf[n..], offset + n as u64) {
                        Ok(0) => break,
                        Ok(k) => n += k,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(io_errno(e)),
                    }
                }
                buf.truncate(n);
                Ok(buf)
            })
        });
        reply!(reply, r, |d| reply.data(&d))
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let r = self.file(fh).and_then(|f| {
            self.on_disk(false, ino.0, offset, data.len() as u64, || {
                f.write_all_at(data, offset).map_err(io_errno)?;
                Ok(data.len())
            })
        });
        reply!(reply, r, |n| reply.written(n as u32))
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok()
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
        self.files.lock().remove(&fh.0);
        reply.ok()
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let r = self.gate().and_then(|()| {
            let f = self.file(fh)?;
            if datasync {
                f.sync_data()
            } else {
                f.sync_all()
            }
            .map_err(io_errno)
        });
        reply!(reply, r, |_v| reply.ok())
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let r = self.gate().and_then(|()| {
            let p = self.path(ino)?;
            let mut entries = vec![
                (ino.0, FileType::Directory, OsString::from(".")),
                (1, FileType::Directory, OsString::from("..")),
            ];
            for e in std::fs::read_dir(&p).map_err(io_errno)? {
                let e = e.map_err(io_errno)?;
                let Ok(st) = lstat(&e.path()) else { continue };
                entries.push((fuse_ino(&st), kind_of(st.st_mode), e.file_name()));
            }
            let fh = self
                .next_fh
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.dirs.lock().insert(fh, entries);
            Ok(fh)
        });
        reply!(reply, r, |fh| reply
            .opened(FileHandle(fh), FopenFlags::empty()))
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let dirs = self.dirs.lock();
        let Some(entries) = dirs.get(&fh.0) else {
            return reply.error(Errno::from_i32(libc::EBADF));
        };
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), (i + 1) as u64, *kind, name) {
                break;
            }
        }
        reply.ok()
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.dirs.lock().remove(&fh.0);
        reply.ok()
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let r = self.gate().and_then(|()| {
            File::open(self.path(ino)?)
                .and_then(|d| d.sync_all())
                .map_err(io_errno)
        });
        reply!(reply, r, |_v| reply.ok())
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let r = self.gate().and_then(|()| {
            let c = cstr(&self.o.src)?;
            let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
            check(unsafe { libc::statvfs(c.as_ptr(), &mut s) })?;
            Ok(s)
        });
        reply!(reply, r, |s| reply.statfs(
            s.f_blocks,
            s.f_bfree,
            s.f_bavail,
            s.f_files,
            s.f_ffree,
            s.f_bsize as u32,
            s.f_namemax as u32,
            s.f_frsize as u32
        ))
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let r = self.gate().and_then(|()| {
            let (p, n) = (cstr(&self.path(ino)?)?, cstr(Path::new(name))?);
            check(unsafe {
                libc::lsetxattr(
                    p.as_ptr(),
                    n.as_ptr(),
                    value.as_ptr().cast(),
                    value.len(),
                    flags,
                )
            })
        });
        reply!(reply, r, |_v| reply.ok())
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let r = self.gate().and_then(|()| {
            let (p, n) = (cstr(&self.path(ino)?)?, cstr(Path::new(name))?);
            xattr_call(size, |b, len| unsafe {
                libc::lgetxattr(p.as_ptr(), n.as_ptr(), b, len)
            })
        });
        reply_xattr(reply, size, r)
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let r = self.gate().and_then(|()| {
            let p = cstr(&self.path(ino)?)?;
            xattr_call(size, |b, len| unsafe {
                libc::llistxattr(p.as_ptr(), b.cast(), len)
            })
        });
        reply_xattr(reply, size, r)
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self.gate().and_then(|()| {
            let (p, n) = (cstr(&self.path(ino)?)?, cstr(Path::new(name))?);
            check(unsafe { libc::lremovexattr(p.as_ptr(), n.as_ptr()) })
        });
        reply!(reply, r, |_v| reply.ok())
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // The kernel checks the modes (default_permissions).
        reply.ok()
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
        let r = self.gate().and_then(|()| {
            let p = self.child(parent, name)?;
            let fh = self.open_file(&p, flags | libc::O_CREAT, mode)?;
            self.own(&p, req)?;
            Ok((self.entry(p)?, fh))
        });
        reply!(reply, r, |v| reply.created(
            &TTL,
            &v.0,
            Generation(0),
            FileHandle(v.1),
            Self::open_flags()
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
        let r = self.gate().and_then(|()| {
            let f = self.file(fh)?;
            check(unsafe { libc::fallocate(f.as_raw_fd(), mode, offset as i64, length as i64) })
        });
        reply!(reply, r, |_v| reply.ok())
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
        let r = self.gate().and_then(|()| {
            let f = self.file(fh)?;
            let o = unsafe { libc::lseek(f.as_raw_fd(), offset, whence) };
            if o < 0 {
                Err(last_errno())
            } else {
                Ok(o)
            }
        });
        reply!(reply, r, |o| reply.offset(o))
    }
}

fn usage() -> ! {
    eprintln!(
        "usage: mirrorfs-diskmodel [--disk hdd] [--latency-us N] [--hang-file P] [--fail-file P] SRC MNT"
    );
    std::process::exit(2)
}

fn parse() -> Options {
    let mut o = Options {
        disk: None,
        latency: Duration::ZERO,
        hang_file: None,
        fail_file: None,
        src: PathBuf::new(),
        mnt: PathBuf::new(),
    };
    let mut args = std::env::args().skip(1);
    let mut positional = Vec::new();
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--disk" => match value().as_str() {
                "hdd" => o.disk = Some(Model::hdd()),
                d => {
                    eprintln!("mirrorfs-diskmodel: unknown disk '{d}' (known: hdd)");
                    std::process::exit(2)
                }
            },
            "--latency-us" => {
                let v = value();
                let us: u64 = v.parse().unwrap_or_else(|_| {
                    eprintln!("mirrorfs-diskmodel: --latency-us: not a number: '{v}'");
                    std::process::exit(2)
                });
                o.latency = Duration::from_micros(us);
            }
            "--hang-file" => o.hang_file = Some(value().into()),
            "--fail-file" => o.fail_file = Some(value().into()),
            _ if a.starts_with('-') => usage(),
            _ => positional.push(PathBuf::from(a)),
        }
    }
    let [src, mnt] = <[PathBuf; 2]>::try_from(positional).unwrap_or_else(|_| usage());
    o.src = std::fs::canonicalize(&src).unwrap_or_else(|e| {
        eprintln!("mirrorfs-diskmodel: '{}': {e}", src.display());
        std::process::exit(1)
    });
    o.mnt = mnt;
    o
}

fn main() {
    let o = parse();
    let mnt = o.mnt.clone();
    let fs = DiskModel {
        paths: Mutex::new(HashMap::from([(1, o.src.clone())])),
        o,
        head: Mutex::new(Head { at: 0, free_at: 0 }),
        clock: Instant::now(),
        files: Mutex::new(HashMap::new()),
        dirs: Mutex::new(HashMap::new()),
        next_fh: std::sync::atomic::AtomicU64::new(1),
    };
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName("diskmodel".into()),
        fuser::MountOption::DefaultPermissions,
        fuser::MountOption::Dev,
        fuser::MountOption::Suid,
    ];
    config.acl = fuser::SessionACL::All;
    config.n_threads = Some(16);
    match fuser::Session::new(fs, &mnt, &config).and_then(|s| s.run()) {
        Ok(()) => {}
        Err(e) => {
            eprintln!("mirrorfs-diskmodel: '{}': {e}", mnt.display());
            std::process::exit(1)
        }
    }
}
