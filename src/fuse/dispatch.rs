//! The adapter: each decoded request becomes one call of the core and one [`Answer`].
//!
//! Boring on purpose (mountpoint-s3's `fuse.rs` is the model): no policy, leg or on-disk
//! knowledge lives here, and nothing of the transport that brought the request. Both
//! transports (`devfuse.rs`, `uring.rs`) call [`MirrorFuse::handle`].

use super::abi::{self, fattr, fopen};
use super::reply::{self, Answer, Listing};
use super::request::Op;
use crate::config::KernelCache;
use crate::errno::{Errno, Result};
use crate::fs::{
    Caller, MirrorFs, PassthroughTo, PendingRead, ReadStart, SetAttr, TimeSpec, XattrReply,
};
use crate::leg::LegIdx;
use crate::sys::aligned::Lent;
use crate::sys::fusedev::BackingId;
use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

/// What the INIT exchange settled (`fuser`'s handshake, `session.rs`); a successor that takes
/// the session over gets it from the keeper (there is no second INIT).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Negotiated {
    /// The kernel took FUSE_PASSTHROUGH (`passthrough=ro`).
    pub passthrough: bool,
    /// The kernel took FUSE_HANDLE_KILLPRIV_V2: dropping setuid/setgid on write, truncate
    /// and chown is the daemon's, and the kernel asks no GETATTR before each chown and no
    /// `security.capability` before every write.
    pub drops_privs: bool,
    /// The kernel offers zero-message opendir and [`KernelCache::zero_message_opendir`] wants
    /// it: OPENDIR is answered ENOSYS, and directories are listed without a handle.
    pub no_opendir: bool,
    /// The kernel took FUSE_OVER_IO_URING: requests come on the rings once they are ready.
    pub uring: bool,
    /// The largest WRITE (and READ) the kernel sends.
    pub max_write: u32,
}

/// How a READ handed to [`MirrorFuse::read_begin`] goes on.
pub enum ReadBegun {
    /// Answered already.
    Answer(Answer),
    /// The legs' reads to run, then [`MirrorFuse::read_finish`].
    Legs(Box<PendingRead>),
    /// Only [`MirrorFuse::handle`] may answer it, on a thread that may block.
    Blocking,
}

/// Who may send requests when the mount is not `allow_other` (fuser's `SessionACL::Owner`).
#[derive(Clone, Copy, Debug)]
pub struct Access {
    pub owner: u32,
    pub allow_other: bool,
}

/// The FUSE adapter over [`MirrorFs`].
pub struct MirrorFuse {
    fs: Arc<MirrorFs>,
    cache: KernelCache,
    neg: Negotiated,
    access: Access,
    /// The connection's descriptor, for passthrough's backing files.
    dev: Arc<OwnedFd>,
    backings: parking_lot::Mutex<Backings>,
    /// Whether io_uring queues serve (set once they are registered): an injected transport
    /// fault then hits a queue thread, else a /dev/fuse reader.
    rings: std::sync::atomic::AtomicBool,
}

/// The kernel's backing files (`passthrough=ro`): one per inode while any of its opens is
/// passed through (the kernel refuses a second one), given back at the last release.
#[derive(Default)]
struct Backings {
    /// By inode: the leg, the registered file, and how many open handles use it.
    by_ino: HashMap<u64, (LegIdx, Arc<BackingId>, usize)>,
    /// Passed-through handles, with their inode.
    handles: HashMap<u64, u64>,
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
        | libc::ENOTSUP => log::debug!("{op}: {e}"),
        _ if e == Errno::INTERNAL => log::error!("{op}: {e}"),
        _ => log::warn!("{op}: {e}"),
    }
}

/// An answer from a result: its value through `ok`, its errno (logged) otherwise.
fn answer<T>(op: &str, r: Result<T>, ok: impl FnOnce(T) -> Answer) -> Answer {
    match r {
        Ok(v) => ok(v),
        Err(e) => {
            log_err(op, e);
            Answer::Error(e.for_caller())
        }
    }
}

fn empty(op: &str, r: Result<()>) -> Answer {
    answer(op, r, |()| Answer::ok())
}

fn xattr(op: &str, r: Result<XattrReply>) -> Answer {
    answer(op, r, |v| match v {
        XattrReply::Size(n) => Answer::of(&abi::GetxattrOut {
            size: n,
            padding: 0,
        }),
        XattrReply::Data(d) => Answer::Bytes(d),
    })
}

/// A SETATTR time: now, or the given seconds and nanoseconds.
fn time_spec(now: bool, sec: u64, nsec: u32) -> TimeSpec {
    match now {
        true => TimeSpec::Now,
        false => TimeSpec::At {
            sec: sec as i64,
            nsec: nsec as i64,
        },
    }
}

impl MirrorFuse {
    pub fn new(
        fs: Arc<MirrorFs>,
        cache: KernelCache,
        neg: Negotiated,
        access: Access,
        dev: Arc<OwnedFd>,
    ) -> MirrorFuse {
        MirrorFuse {
            fs,
            cache,
            neg,
            access,
            dev,
            backings: Default::default(),
            rings: Default::default(),
        }
    }

    /// The io_uring queues now serve.
    pub fn set_rings(&self) {
        self.rings.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the io_uring queues serve (and /dev/fuse carries only forgets and interrupts).
    pub fn rings(&self) -> bool {
        self.rings.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Acts on an injected transport fault (`fault` key, `transport=panic|error`), on the
    /// thread of a queue (`ring`) or of a /dev/fuse reader, whichever kind serves: panics, or
    /// returns the error that ends the thread. Without one set, a relaxed load.
    pub fn injected_fault(&self, ring: bool) -> std::io::Result<()> {
        if ring != self.rings.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(());
        }
        let now = |f| f != crate::fs::TransportFault::DieUnanswered;
        match self.fs.take_transport_fault_if(now) {
            None | Some(crate::fs::TransportFault::DieUnanswered) => Ok(()),
            Some(crate::fs::TransportFault::Panic) => panic!("injected transport fault"),
            Some(crate::fs::TransportFault::Error) => {
                Err(std::io::Error::other("injected transport fault"))
            }
        }
    }

    /// Fault injection (`transport=die-unanswered`): after a request that changes a name is
    /// done, the process dies before the answer goes out.
    pub fn injected_death(&self, opcode: u32) {
        use abi::op as o;
        let names = [
            o::MKDIR,
            o::MKNOD,
            o::SYMLINK,
            o::LINK,
            o::CREATE,
            o::UNLINK,
            o::RMDIR,
            o::RENAME,
            o::RENAME2,
        ];
        if !names.contains(&opcode) {
            return;
        }
        let die = |f| f == crate::fs::TransportFault::DieUnanswered;
        if self.fs.take_transport_fault_if(die).is_some() {
            log::error!("fault injection: opcode {opcode} done; dying before the answer");
            crate::sys::signal(std::process::id() as i32, libc::SIGKILL);
            loop {
                std::thread::park();
            }
        }
    }

    pub fn negotiated(&self) -> &Negotiated {
        &self.neg
    }

    /// The session ended: the core lets go of the legs.
    pub fn destroy(&self) {
        self.fs.unmount();
    }

    fn entry(&self, e: &crate::fs::Entry) -> Answer {
        Answer::of(&reply::entry(&e.attr, self.cache.entry, self.cache.attr))
    }

    /// The flags of a file open: what the kernel keeps of it.
    fn file_open_flags(&self, flags: i32) -> u32 {
        let mut f = 0;
        if self.cache.keep_data {
            f |= fopen::KEEP_CACHE;
        }
        // A read-only open has nothing to flush (its mtimes are aligned only after writes).
        if flags & libc::O_ACCMODE == libc::O_RDONLY {
            f |= fopen::NOFLUSH;
        }
        f
    }

    /// The flags of a directory open: whether the kernel keeps its listing.
    fn dir_open_flags(&self) -> u32 {
        match self.cache.listings {
            true => fopen::CACHE_DIR | fopen::KEEP_CACHE,
            false => 0,
        }
    }

    /// Whether the request's sender may use the mount (the kernel checks too, without
    /// `allow_other`); the kernel's own requests without a caller are let through.
    fn allowed(&self, h: &abi::InHeader, op: &Op<'_>) -> bool {
        if self.access.allow_other || h.uid == self.access.owner {
            return true;
        }
        matches!(
            op,
            Op::Destroy
                | Op::Read { .. }
                | Op::Readdir { .. }
                | Op::Forget { .. }
                | Op::BatchForget { .. }
                | Op::Write { .. }
                | Op::Fsync { .. }
                | Op::Fsyncdir { .. }
                | Op::Release { .. }
                | Op::Releasedir { .. }
        )
    }

    /// Starts a READ for a transport that runs the legs' reads itself (the core's
    /// [`MirrorFs::read_start_into`], which reads what it can straight into `into`, the
    /// memory the answer goes out from); any other request is [`ReadBegun::Blocking`].
    pub fn read_begin(&self, h: &abi::InHeader, op: Op<'_>, into: Option<Lent>) -> ReadBegun {
        if !self.allowed(h, &op) {
            self.fs.count_request();
            return ReadBegun::Answer(Answer::Error(libc::EACCES));
        }
        let Op::Read { fh, offset, size } = op else {
            return ReadBegun::Blocking;
        };
        match self.fs.read_start_into(fh, offset, size, h.pid, into) {
            ReadStart::Done(r) => {
                self.fs.count_request();
                ReadBegun::Answer(answer("read", r, Answer::Data))
            }
            ReadStart::Legs(p) => ReadBegun::Legs(p),
            ReadStart::Blocking => ReadBegun::Blocking,
        }
    }

    /// Finishes a READ begun with [`read_begin`](Self::read_begin): `got[i]` is what the leg
    /// read `i` gave. `None`: [`handle`](Self::handle) must answer it.
    pub fn read_finish(&self, p: Box<PendingRead>, got: &[Result<usize>]) -> Option<Answer> {
        let a = self.fs.read_end(p, got)?;
        self.fs.count_request();
        Some(answer("read", a, Answer::Data))
    }

    /// A request is answered (counted once, where it is answered; see the stats).
    /// The gate requests pass (closed while the session is handed over).
    pub fn gate(&self) -> &crate::fs::takeover::Gate {
        self.fs.gate()
    }

    pub fn count_request(&self) {
        self.fs.count_request();
    }

    /// Answers one request.
    pub fn handle(&self, h: &abi::InHeader, op: Op<'_>) -> Answer {
        if !self.allowed(h, &op) {
            return Answer::Error(libc::EACCES);
        }
        if h.unique & abi::UNIQUE_RESEND != 0 {
            if let Some(a) = self.done_before(h, &op) {
                return a;
            }
        }
        let fs = &*self.fs;
        let ino = h.nodeid;
        let caller = || Caller::new(h.uid, h.gid, h.pid);
        match op {
            Op::Lookup { name } => {
                let r = fs.lookup(ino, name, &caller());
                if r.as_ref().is_err_and(|e| *e == Errno::ENOENT) && !self.cache.negative.is_zero()
                {
                    // Node id 0 with a timeout: the kernel remembers that the name is not there.
                    let (entry_valid, entry_valid_nsec) = reply::ttl(self.cache.negative);
                    return Answer::of(&abi::EntryOut {
                        entry_valid,
                        entry_valid_nsec,
                        ..Default::default()
                    });
                }
                answer("lookup", r, |e| self.entry(&e))
            }
            Op::Forget { nlookup } => {
                fs.forget(ino, nlookup);
                Answer::Nothing
            }
            Op::BatchForget { nodes } => {
                for (node, n) in super::request::forgets(nodes) {
                    fs.forget(node, n);
                }
                Answer::Nothing
            }
            Op::Getattr { fh: _ } => answer("getattr", fs.getattr(ino), |a| {
                Answer::of(&reply::attr_out(&a, self.cache.attr))
            }),
            Op::Setattr(s) => {
                let has = |bit| s.valid & bit != 0;
                let set = SetAttr {
                    fh: has(fattr::FH).then_some(s.fh),
                    mode: has(fattr::MODE).then_some(s.mode),
                    uid: has(fattr::UID).then_some(s.uid),
                    gid: has(fattr::GID).then_some(s.gid),
                    size: has(fattr::SIZE).then_some(s.size),
                    atime: has(fattr::ATIME)
                        .then(|| time_spec(has(fattr::ATIME_NOW), s.atime, s.atimensec)),
                    mtime: has(fattr::MTIME)
                        .then(|| time_spec(has(fattr::MTIME_NOW), s.mtime, s.mtimensec)),
                    drops_privs: self.neg.drops_privs,
                };
                answer("setattr", fs.setattr(ino, &set, &caller()), |a| {
                    Answer::of(&reply::attr_out(&a, self.cache.attr))
                })
            }
            Op::Readlink => answer("readlink", fs.readlink(ino), Answer::Bytes),
            Op::Symlink { name, target } => {
                answer("symlink", fs.symlink(ino, name, target, &caller()), |e| {
                    self.entry(&e)
                })
            }
            Op::Mknod { name, mode, rdev } => {
                answer("mknod", fs.mknod(ino, name, mode, rdev, &caller()), |e| {
                    self.entry(&e)
                })
            }
            Op::Mkdir { name, mode } => {
                answer("mkdir", fs.mkdir(ino, name, mode, &caller()), |e| {
                    self.entry(&e)
                })
            }
            Op::Unlink { name } => empty("unlink", fs.unlink(ino, name, &caller())),
            Op::Rmdir { name } => empty("rmdir", fs.rmdir(ino, name, &caller())),
            Op::Rename {
                name,
                newdir,
                newname,
                flags,
            } => empty(
                "rename",
                fs.rename(ino, name, newdir, newname, flags, &caller()),
            ),
            Op::Link { oldnodeid, name } => {
                answer("link", fs.link(oldnodeid, ino, name, &caller()), |e| {
                    self.entry(&e)
                })
            }
            Op::Open { flags } => self.open(ino, flags, &caller()),
            Op::Read { fh, offset, size } => {
                answer("read", fs.read(fh, offset, size, h.pid), Answer::Data)
            }
            Op::Write {
                fh,
                offset,
                data,
                write_flags,
            } => {
                let r = match self.neg.drops_privs && write_flags & abi::WRITE_KILL_SUIDGID != 0 {
                    true => fs.drop_privs_for_write(fh, &caller()),
                    false => Ok(()),
                };
                let r = r.and_then(|()| fs.write(fh, offset, data));
                answer("write", r, |n| {
                    Answer::of(&abi::WriteOut {
                        size: n as u32,
                        padding: 0,
                    })
                })
            }
            Op::Statfs => answer("statfs", fs.statfs(), |s| {
                Answer::of(&abi::StatfsOut {
                    blocks: s.blocks,
                    bfree: s.bfree,
                    bavail: s.bavail,
                    files: s.files,
                    ffree: s.ffree,
                    bsize: s.bsize,
                    namelen: s.namelen,
                    frsize: s.frsize,
                    ..Default::default()
                })
            }),
            Op::Release { fh } => {
                self.let_go(fh);
                empty("release", fs.release(fh))
            }
            Op::Fsync { fh, datasync } => empty("fsync", fs.fsync(fh, datasync)),
            Op::Setxattr { name, value, flags } => {
                empty("setxattr", fs.setxattr(ino, name, value, flags, &caller()))
            }
            Op::Getxattr { name, size } => {
                xattr("getxattr", fs.getxattr(ino, name, size, &caller()))
            }
            Op::Listxattr { size } => xattr("listxattr", fs.listxattr(ino, size, &caller())),
            Op::Removexattr { name } => empty("removexattr", fs.removexattr(ino, name, &caller())),
            Op::Flush { fh } => empty("flush", fs.flush(fh)),
            Op::Opendir => {
                if self.neg.no_opendir {
                    // The kernel lists with handle 0 from now on, and keeps the listings itself.
                    return Answer::Error(libc::ENOSYS);
                }
                answer("opendir", fs.opendir(ino, &caller()), |fh| {
                    Answer::of(&abi::OpenOut {
                        fh,
                        open_flags: self.dir_open_flags(),
                        backing_id: 0,
                    })
                })
            }
            Op::Readdir {
                fh,
                offset,
                size,
                plus: false,
            } => {
                let mut l = Listing::new(size);
                let r = fs.readdir(ino, fh, offset, |ino, next, kind, name| {
                    l.add(ino, next, crate::fs::attr::file_type(kind), name)
                });
                answer("readdir", r, |()| l.into_answer())
            }
            Op::Readdir {
                fh,
                offset,
                size,
                plus: true,
            } => {
                let mut l = Listing::new(size);
                let r = fs.readdirplus(ino, fh, offset, |e| {
                    let out = reply::entry(&e.entry.attr, self.cache.entry, self.cache.attr);
                    l.add_plus(&out, e.offset, e.entry.attr.kind, e.name)
                });
                answer("readdirplus", r, |()| l.into_answer())
            }
            Op::Releasedir { fh } => {
                fs.releasedir(fh);
                Answer::ok()
            }
            Op::Fsyncdir { datasync } => empty("fsyncdir", fs.fsyncdir(ino, datasync)),
            Op::Access { mask } => empty("access", fs.access(ino, mask, &caller())),
            Op::Create { name, mode, flags } => answer(
                "create",
                fs.create(ino, name, mode, flags, &caller()),
                |v| {
                    Answer::of(&abi::CreateOut {
                        entry: reply::entry(&v.0.attr, self.cache.entry, self.cache.attr),
                        open: abi::OpenOut {
                            fh: v.1,
                            open_flags: self.file_open_flags(flags),
                            backing_id: 0,
                        },
                    })
                },
            ),
            Op::Fallocate {
                fh,
                offset,
                length,
                mode,
            } => empty("fallocate", fs.fallocate(fh, offset, length, mode)),
            Op::Lseek { fh, offset, whence } => {
                answer("lseek", fs.lseek(fh, offset, whence), |o| {
                    Answer::of(&abi::LseekOut { offset: o as u64 })
                })
            }
            Op::CopyFileRange {
                fh_in,
                off_in,
                fh_out,
                off_out,
                len,
            } => {
                // The reply's size is a u32: one request copies less than 4 GiB.
                let len = len.min(u32::MAX as u64 & !0xfff);
                let r = fs.copy_file_range(fh_in, off_in, fh_out, off_out, len);
                answer("copy_file_range", r, |n| {
                    Answer::of(&abi::WriteOut {
                        size: n as u32,
                        padding: 0,
                    })
                })
            }
            // Interrupts are not acted on: ENOSYS tells the kernel to send none from now on
            // (a request waits for its answer; a hung leg's is given by `leg_timeout`).
            Op::Interrupt => Answer::Error(libc::ENOSYS),
            Op::Destroy => Answer::ok(),
            // Not implemented, on purpose:
            // - getlk/setlk: without FUSE_POSIX_LOCKS the kernel keeps POSIX and flock locks
            //   itself, which is right for a local filesystem;
            // - ioctl, poll, bmap: no leg-specific ioctls are passed through;
            // - INIT after the handshake.
            Op::Unsupported(_) => Answer::Error(libc::ENOSYS),
        }
    }

    /// A request the kernel sent again after a takeover (`FUSE_NOTIFY_RESEND`): the server
    /// that read it may have done it before it died. Reads, writes (at the kernel's offsets),
    /// setattr, fsync and the like are done again as they are. A name operation whose effect
    /// is already there is answered as done, since doing it again would fail (EEXIST, ENOENT)
    /// where the program's call succeeded: the kernel holds the directory locked until the
    /// answer, so no other program can have made that effect meanwhile. `None`: do it.
    fn done_before(&self, h: &abi::InHeader, op: &Op<'_>) -> Option<Answer> {
        let fs = &*self.fs;
        let ino = h.nodeid;
        let caller = Caller::new(h.uid, h.gid, h.pid);
        // Looks a name up; the lookup the kernel would count is given back when the entry is
        // not answered.
        let there = |dir: u64, name: &std::ffi::OsStr| fs.lookup(dir, name, &caller).ok();
        let give_back = |e: &crate::fs::Entry| fs.forget(e.attr.ino.0, 1);
        let done = match op {
            Op::Mkdir { name, .. } | Op::Mknod { name, .. } | Op::Symlink { name, .. } => {
                there(ino, name).map(|e| self.entry(&e))
            }
            Op::Link { oldnodeid, name } => match there(ino, name) {
                Some(e) if e.attr.ino.0 == *oldnodeid => Some(self.entry(&e)),
                Some(e) => {
                    give_back(&e);
                    None
                }
                None => None,
            },
            Op::Create { name, flags, .. } => {
                let e = there(ino, name)?;
                let reopen = flags & !(libc::O_CREAT | libc::O_EXCL);
                match fs.open(e.attr.ino.0, reopen, &caller) {
                    Ok(fh) => Some(Answer::of(&abi::CreateOut {
                        entry: reply::entry(&e.attr, self.cache.entry, self.cache.attr),
                        open: abi::OpenOut {
                            fh,
                            open_flags: self.file_open_flags(*flags),
                            backing_id: 0,
                        },
                    })),
                    Err(_) => {
                        give_back(&e);
                        None
                    }
                }
            }
            Op::Unlink { name } | Op::Rmdir { name } => match there(ino, name) {
                Some(e) => {
                    give_back(&e);
                    None
                }
                None => Some(Answer::ok()),
            },
            Op::Rename {
                name,
                newdir,
                newname,
                flags,
            } => {
                if flags & libc::RENAME_EXCHANGE != 0 {
                    // Done or not, both names are there: doing it again would swap back. The
                    // program gets an error rather than an undone exchange.
                    log::error!(
                        "a RENAME_EXCHANGE sent again after a takeover: answered EIO (whether \
                         the server before did it cannot be told)"
                    );
                    return Some(Answer::Error(libc::EIO));
                }
                match (there(ino, name), there(*newdir, newname)) {
                    (None, Some(to)) => {
                        give_back(&to);
                        Some(Answer::ok())
                    }
                    (from, to) => {
                        from.iter().chain(to.iter()).for_each(give_back);
                        None
                    }
                }
            }
            _ => None,
        };
        if done.is_some() {
            log::info!(
                "request {} (opcode {}) sent again after a takeover: already done, answered so",
                h.unique & !abi::UNIQUE_RESEND,
                h.opcode
            );
        }
        done
    }

    fn open(&self, ino: u64, flags: i32, caller: &Caller) -> Answer {
        let o = match self.fs.open_with(ino, flags, caller) {
            Ok(o) => o,
            Err(e) => {
                log_err("open", e);
                return Answer::Error(e.for_caller());
            }
        };
        match o.passthrough.as_ref().filter(|_| self.neg.passthrough) {
            None => Answer::of(&abi::OpenOut {
                fh: o.fh,
                open_flags: self.file_open_flags(flags),
                backing_id: 0,
            }),
            Some(to) => match self.backing_for(ino, o.fh, to) {
                // Only NOFLUSH and DIRECT_IO go with PASSTHROUGH (no page cache to keep).
                Ok(id) => {
                    let mut f = fopen::PASSTHROUGH | fopen::NOFLUSH;
                    if to.direct_io {
                        // Its reads come to the daemon (the leg it was passed to has left).
                        f |= fopen::DIRECT_IO;
                    }
                    Answer::of(&abi::OpenOut {
                        fh: o.fh,
                        open_flags: f,
                        backing_id: id.id() as i32,
                    })
                }
                Err(e) => {
                    log::error!(
                        "passthrough=ro: the kernel refused leg {}'s file as a backing file \
                         ({e}); a leg on a stacked filesystem (overlayfs, FUSE) cannot back \
                         passthrough: mount without passthrough=ro",
                        to.leg
                    );
                    let _ = self.fs.release(o.fh);
                    Answer::Error(libc::EIO)
                }
            },
        }
    }

    /// The backing id of the passed-through open `fh` of `ino` (registered by the first open
    /// of the inode, shared by the others); counted until [`let_go`](Self::let_go).
    fn backing_for(
        &self,
        ino: u64,
        fh: u64,
        to: &PassthroughTo,
    ) -> std::io::Result<Arc<BackingId>> {
        let mut b = self.backings.lock();
        let id = match b.by_ino.get_mut(&ino) {
            // The core keeps one leg file per inode while any open is passed through.
            Some((leg, id, n)) if *leg == to.leg => {
                *n += 1;
                id.clone()
            }
            _ => {
                let id = Arc::new(BackingId::open(&self.dev, to.file.as_fd())?);
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
}
