//! The filesystem core: every FUSE operation as a plain method returning `Result<_, Errno>`.
//!
//! Knows inodes, handles and the mirror engine; knows nothing of `fuser`'s reply objects, so it
//! is tested without a kernel mount (the unit tests of `attr.rs`, `control.rs`, `dir.rs`,
//! `inode/` and `takeover.rs`, and `tests/core_mirror.rs`), then through a real one (`tests/`).
//!
//! Write paths and failure: every change goes to all in-sync legs in parallel through
//! [`Mirror::fan_out`]. A leg that fails with an I/O-class error, or answers differently from
//! the others, is dropped there (and recorded in the survivors' superblocks); the caller gets
//! the others' answer. A change that fails alike on every leg is the caller's error and changes
//! nothing anywhere.

pub mod attr;
pub mod handle;
pub mod inode;

mod checksums;
mod control;
mod data;
mod dir;
pub mod kernel;
mod live;
mod namespace;
mod quiet;
mod read;
mod stats;
pub mod takeover;
mod xattr;

use crate::errno::{Errno, Result};
use crate::leg::{Leg, LegIdx};
use crate::meta::superblock::LegSuperblock;
use crate::mirror::outcome::{is_leg_fault, DropReason};
use crate::mirror::Mirror;
use crate::mirror::Op;
use crate::policy::ReadPolicy;
use crate::recovery::Recovery;
use crate::sys;
use fuser::FileAttr;
use handle::HandleTable;
use inode::{Identity, Inode, InodeTable, CONTROL_INO, ROOT_INO};
use std::ffi::{CStr, CString, OsStr};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

pub use control::TransportFault;
pub use read::{LegRead, PendingRead, ReadData, ReadStart};
pub use sys::creds::Caller;

/// Longest name a leg accepts (NAME_MAX).
const NAME_MAX: usize = 255;

/// The answer to a lookup or a creation: the new entry's attributes.
#[derive(Clone, Debug)]
pub struct Entry {
    pub attr: FileAttr,
}

/// Attribute changes requested by `setattr`.
#[derive(Clone, Debug, Default)]
pub struct SetAttr {
    /// The open file the change came through (ftruncate, futimens...), if any.
    pub fh: Option<u64>,
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeSpec>,
    pub mtime: Option<TimeSpec>,
    /// The kernel leaves dropping setuid/setgid to the daemon (`FUSE_HANDLE_KILLPRIV_V2`):
    /// a chown, a truncate and a request with no change at all (the kernel's "remove
    /// privileges" before a write or fallocate) drop them here. Otherwise the kernel sends
    /// the reduced mode itself.
    pub drops_privs: bool,
}

impl SetAttr {
    /// Whether nothing is to change: with [`SetAttr::drops_privs`], the kernel asking for
    /// setuid/setgid to go.
    fn changes_nothing(&self) -> bool {
        self.mode.is_none()
            && self.uid.is_none()
            && self.gid.is_none()
            && self.size.is_none()
            && self.atime.is_none()
            && self.mtime.is_none()
    }
}

/// A time to set: a given instant, or "now" (resolved once, so every leg gets the same value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeSpec {
    Now,
    At { sec: i64, nsec: i64 },
}

/// The answer to `statfs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatFs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
}

/// What an open tells the kernel.
#[derive(Debug)]
pub struct Opened {
    pub fh: u64,
    /// `passthrough=ro`: the read-only open is passed through to this leg file (the same for
    /// every open of the inode while any is), with direct I/O when its reads must come to the
    /// daemon after all (the leg left the mirror since the file's first passthrough open).
    pub passthrough: Option<PassthroughTo>,
}

/// See [`Opened::passthrough`].
#[derive(Debug)]
pub struct PassthroughTo {
    pub leg: crate::leg::LegIdx,
    pub file: Arc<std::os::fd::OwnedFd>,
    pub direct_io: bool,
}

/// The answer to `getxattr`/`listxattr`: the value, or only its size when asked with size 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum XattrReply {
    Size(u32),
    Data(Vec<u8>),
}

/// Settings of the core.
#[derive(Clone, Debug)]
pub struct FsConfig {
    /// Hide a root-level `lost+found` (some leg is the root of its own filesystem).
    pub hide_lost_found: bool,
    /// Most cached `O_PATH` descriptors open at once (see [`inode`]); the rest of the
    /// open-file limit is left for open files.
    pub fd_budget: usize,
    /// Most leg descriptors open files may hold together; an open beyond it gets ENFILE
    /// before any leg is touched.
    pub open_fd_budget: usize,
    /// The mount point (`user.mirrorfs.mount`).
    pub mount: std::path::PathBuf,
    /// The mount options (`-o`). The core reads `threads` (I/O workers per leg),
    /// `minfreespace`, `write_intent`, `fault_injection` and `default_permissions` (when false,
    /// the core checks access by running each leg operation as the caller, see
    /// [`MirrorFs::checked`]); `user.mirrorfs.<option>` shows each.
    pub options: crate::config::MountConfig,
}

/// The default reserve of a leg of `total` bytes.
pub fn default_reserve(total: u64) -> u64 {
    (4u64 << 30).min(total / 20)
}

/// What `user.mirrorfs.restart` calls ([`MirrorFs::set_restart_hook`]): the refusal's errno
/// and why, when the restart cannot be done.
pub type RestartHook =
    Box<dyn Fn(&[u8]) -> std::result::Result<(), (crate::errno::Errno, String)> + Send + Sync>;

/// The mirrored filesystem.
pub struct MirrorFs {
    mirror: Arc<Mirror>,
    inodes: Arc<InodeTable>,
    handles: Arc<HandleTable>,
    /// Listings of passes without a handle (the kernel's zero-message opendir).
    listings: dir::Listings,
    config: FsConfig,
    /// When the filesystem was set up (uptime in the stats).
    started: std::time::Instant,
    /// Resync, crash recovery, scrub, leg commands, the sweep (they reach the inodes and
    /// open files through [`live::Live`]).
    recovery: Arc<Recovery>,
    /// Why control writes were refused, for the callers to read back.
    last_errors: control::LastErrors,
    /// Between the keys and the daemon's event notifier (`notify_test`, `notify_last`).
    events: control::EventBus,
    /// A missing `security.selinux` is answered ENOTSUP (`selinux_xattr=`, resolved at mount).
    selinux_enotsup: bool,
    /// Renames, unlinks and rmdirs under way (for finding objects on quiet legs).
    names: Arc<quiet::NameChanges>,
    /// How requests reach the daemon, as the FUSE layer set it up (the stats' `transport`).
    transport: parking_lot::Mutex<Option<crate::stats::TransportStats>>,
    /// Requests the FUSE layer answered ([`MirrorFs::count_request`]).
    requests: std::sync::atomic::AtomicU64,
    /// The keeper of the session, when there is one (the stats' `keeper`).
    keeper: parking_lot::Mutex<Option<crate::stats::KeeperStats>>,
    /// Who hands the session to a successor when `user.mirrorfs.restart` is written (set by
    /// the daemon when a keeper holds the session).
    restart: parking_lot::Mutex<Option<RestartHook>>,
    /// Closed when this server hands its session over ([`takeover::Gate`]).
    gate: takeover::Gate,
    /// Reads whose leg reads their caller ran ([`MirrorFs::read_start`]), and those of them
    /// that [`MirrorFs::read_end`] sent back to [`MirrorFs::read`].
    pub(crate) ring_reads: std::sync::atomic::AtomicU64,
    pub(crate) ring_reads_redone: std::sync::atomic::AtomicU64,
    /// An injected [`control::TransportFault`] not yet taken (0: none).
    transport_fault: std::sync::atomic::AtomicU8,
}

impl MirrorFs {
    /// A filesystem over already-validated legs.
    pub fn new(
        legs: Vec<Leg>,
        superblocks: Vec<Option<LegSuperblock>>,
        policy: Box<dyn ReadPolicy>,
        config: FsConfig,
    ) -> Result<MirrorFs> {
        let mut root_fds = Vec::new();
        let mut root_ids = Vec::new();
        for leg in &legs {
            if !leg.is_in_sync() {
                root_fds.push(None);
                continue;
            }
            let fd = sys::fd::open_root(&leg.path())?;
            let st = sys::fd::fstat(std::os::fd::AsFd::as_fd(&fd))?;
            root_ids.push(Identity {
                leg: leg.idx,
                dev: st.st_dev,
                ino: st.st_ino,
            });
            root_fds.push(Some(fd));
        }
        for leg in &legs {
            let reserve = match config.options.minfreespace {
                Some(r) => r,
                None => default_reserve(leg.space().map(|(total, _)| total).unwrap_or(0)),
            };
            leg.reserve
                .store(reserve, std::sync::atomic::Ordering::Relaxed);
        }
        let mirror = Mirror::new(
            legs,
            superblocks,
            config.options.threads,
            policy,
            config.options.write_intent,
            config.options.checksums(),
        )?;
        mirror.readahead().set_limit(config.options.readahead);
        mirror.set_leg_timeout(config.options.leg_timeout);
        let mirror = Arc::new(mirror);
        let inodes = Arc::new(InodeTable::new(root_fds, &root_ids, config.fd_budget));
        let names = Arc::new(quiet::NameChanges::default());
        inodes.set_resolver(quiet::resolver(
            mirror.clone(),
            names.clone(),
            Arc::downgrade(&inodes),
        ));
        let handles = Arc::new(HandleTable::new(config.open_fd_budget));
        let live = live::Live {
            mirror: mirror.clone(),
            inodes: inodes.clone(),
            handles: handles.clone(),
        };
        let recovery = Recovery::new(
            mirror.clone(),
            Arc::new(live),
            config.hide_lost_found,
            config.mount.clone(),
        );
        recovery.set_speed_max(config.options.resync_speed_max);
        let selinux_enotsup = config.options.selinux_xattr.enotsup();
        Ok(MirrorFs {
            selinux_enotsup,
            names,
            mirror,
            inodes,
            handles,
            listings: Default::default(),
            config,
            started: std::time::Instant::now(),
            recovery,
            last_errors: control::LastErrors::default(),
            events: control::EventBus::default(),
            transport: Default::default(),
            requests: Default::default(),
            keeper: Default::default(),
            restart: Default::default(),
            gate: Default::default(),
            ring_reads: Default::default(),
            ring_reads_redone: Default::default(),
            transport_fault: Default::default(),
        })
    }

    /// Says how requests reach the daemon (the FUSE layer, once the session is set up).
    pub fn set_transport(&self, t: crate::stats::TransportStats) {
        *self.transport.lock() = Some(t);
    }

    /// Who hands the session to a successor (`user.mirrorfs.restart`): given the key's value
    /// (a program, or nothing for this one), it answers at once and hands over afterwards.
    pub fn set_restart_hook(&self, hook: RestartHook) {
        *self.restart.lock() = Some(hook);
    }

    /// The gate every request passes ([`takeover::Gate`]).
    pub fn gate(&self) -> &takeover::Gate {
        &self.gate
    }

    /// A keeper (process `pid`) holds the session; it was taken over `restarts` times, the
    /// last because of `cause` (the stats' `keeper`).
    pub fn set_keeper(&self, pid: u32, restarts: u64, cause: &str) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        *self.keeper.lock() = Some(crate::stats::KeeperStats {
            keeper_pid: pid,
            restarts,
            last_cause: cause.to_string(),
            last_restart_unix_s: if restarts > 0 { now } else { 0 },
        });
    }

    /// The FUSE layer answered a request (the stats' `transport.requests`).
    pub fn count_request(&self) {
        self.requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn mirror(&self) -> &Mirror {
        &self.mirror
    }

    /// The background work: resync, crash recovery, scrub, leg commands, the sweep.
    pub fn recovery(&self) -> &Arc<Recovery> {
        &self.recovery
    }

    /// At a clean unmount: background work stops, and the legs are flushed and marked clean.
    pub fn unmount(&self) {
        self.recovery.cancel_all();
        let recovery = self.recovery.clone();
        self.mirror.mark_clean(&|inos| recovery.stamp(inos));
    }

    /// How many inodes the kernel holds (root included); 1 after a clean unmount.
    pub fn live_inodes(&self) -> usize {
        self.inodes.live_count()
    }

    /// How many cached (reopenable) leg descriptors are open.
    pub fn cached_fds(&self) -> usize {
        self.inodes.cached_fds()
    }

    /// How many files and directories are open.
    pub fn open_handles(&self) -> usize {
        self.handles.len()
    }

    /// Names at the root that belong to the legs, not to the mirror (and the control file's).
    fn is_reserved(&self, parent: u64, name: &OsStr) -> bool {
        parent == ROOT_INO
            && (crate::meta::is_foreign_root_name(name, self.config.hide_lost_found)
                || name == control::CONTROL_NAME)
    }

    /// Checks a name for a lookup: too long, or reserved (`ENOENT`: it does not exist here).
    fn name_for_lookup(&self, parent: u64, name: &OsStr) -> Result<CString> {
        if name.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        if self.is_reserved(parent, name) || name == "." || name == ".." {
            return Err(Errno::ENOENT);
        }
        CString::new(name.as_bytes()).map_err(|_| Errno::EINVAL)
    }

    /// Checks a name that is about to be created or replaced (`EPERM` for reserved names).
    fn name_for_change(&self, parent: u64, name: &OsStr) -> Result<CString> {
        if name.len() > NAME_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        if self.is_reserved(parent, name) {
            return Err(Errno::EPERM);
        }
        if name == "." || name == ".." || name.is_empty() {
            return Err(Errno::EINVAL);
        }
        CString::new(name.as_bytes()).map_err(|_| Errno::EINVAL)
    }

    /// The in-sync legs `inode` has its copy on (all of them, except for an object deleted
    /// while open that a leg joining later could not find), for a change: the object is
    /// found first on the quiet legs it was not looked for on yet, so that the change reaches
    /// it there.
    fn legs_for(&self, inode: &InodeRef) -> Vec<LegIdx> {
        let legs = self.legs_known(inode);
        for &l in &legs {
            if inode.lazy_on(l) {
                // Not found (deleted while open): the leg is left out below. Another error
                // is the operation's on that leg, which then drops it.
                let _ = inode.fd(l);
            }
        }
        legs.into_iter().filter(|&l| inode.has_leg(l)).collect()
    }

    /// As [`legs_for`](Self::legs_for), without looking for the object on quiet legs (for
    /// reads: the read policy leaves those legs last).
    fn legs_known(&self, inode: &InodeRef) -> Vec<LegIdx> {
        self.mirror
            .in_sync_legs()
            .into_iter()
            .filter(|&l| inode.has_leg(l))
            .collect()
    }

    /// Records durably that `inode` is about to change (write-intent and away logs; see
    /// [`crate::meta::changes`]). Call before the change reaches any leg. An object whose name
    /// it was found by is gone while others keep it (a hard-linked file written through a
    /// descriptor opened by the removed name) is recorded by identity.
    fn will_change(&self, inode: &InodeRef) {
        self.mirror.will_change(inode.ino, || {
            self.leg_relpath(inode).or_else(|| match inode.is_dir() {
                true => None,
                false => self.identity_record(1, |leg| inode.found_fd(leg)),
            })
        });
    }

    /// Before the name `name` in `dir` goes (an unlink on `legs`): what is dirty under that
    /// name and keeps other names is recorded by identity, since a record of the name would
    /// stand for nothing after a crash ([`crate::meta::changes`], identity records).
    fn unlinking(&self, dir: &InodeRef, name: &CStr) {
        let inos = self.mirror.changes().dirty_at(dir.ino, name.to_bytes());
        if inos.is_empty() {
            return;
        }
        let Some(record) = self.identity_record(2, |leg| {
            sys::fd::open_path_at(dir.fd(leg)?.as_fd(), name).map(Arc::new)
        }) else {
            return;
        };
        self.mirror.record_identity(&inos, record);
    }

    /// The identity record of the object `fd_of` gives on each in-sync leg (its inode number
    /// there, by leg id), if it has at least `links` names on the metadata leg: None when it
    /// has fewer (deleted: nothing to record) or cannot be looked at there.
    fn identity_record(
        &self,
        links: libc::nlink_t,
        fd_of: impl Fn(LegIdx) -> Result<Arc<std::os::fd::OwnedFd>>,
    ) -> Option<Vec<u8>> {
        let meta = self.mirror.metadata_leg();
        let mut ids = Vec::new();
        for leg in self.mirror.in_sync_legs() {
            let st = fd_of(leg).and_then(|fd| sys::fd::fstat(fd.as_fd()));
            let st = match st {
                Ok(st) => st,
                Err(_) if leg != meta => continue,
                Err(e) => {
                    log::warn!("cannot look at a changed object on the metadata leg: {e}");
                    return None;
                }
            };
            if leg == meta && st.st_nlink < links {
                return None;
            }
            if let Some(id) = self.mirror.leg_id(leg) {
                ids.push((id, st.st_ino));
            }
        }
        if ids.is_empty() {
            log::warn!(
                "a hard-linked file changed through a name that is gone cannot be recorded by \
                 identity (no leg id): after a crash now only a scrub compares its copies"
            );
            return None;
        }
        Some(crate::meta::changes::identity_record(&ids))
    }

    /// As [`will_change`](Self::will_change) for a directory about to get a new entry: see
    /// [`crate::meta::changes`] (directory covers).
    fn will_change_dir(&self, dir: &InodeRef) {
        self.mirror
            .will_change_dir(dir.ino, || self.leg_relpath(dir));
    }

    /// `inode` was just created as `name` in `dir` (after [`will_change_dir`](Self::will_change_dir)):
    /// dirty under the directory's cover.
    fn created_in(&self, inode: &InodeRef, dir: &InodeRef, name: &OsStr) {
        self.mirror
            .changes()
            .created_in(inode.ino, dir.ino, name.as_bytes(), inode.is_dir());
    }

    /// The path of `inode` relative to the legs' root (`.` for the root), from the metadata
    /// leg; `None` when it has none (deleted while open).
    fn leg_relpath(&self, inode: &InodeRef) -> Option<Vec<u8>> {
        relpath(&self.mirror, inode)
    }

    /// Runs one leg operation `op` on this thread with the caller's identity when the core
    /// checks access itself (`no_default_permissions`): the leg's kernel then applies mode
    /// bits, ACLs, sticky directories and ownership rules exactly as it would to the caller,
    /// and its refusal (EACCES, EPERM) is the caller's answer on every leg alike. With
    /// `default_permissions` the kernel has checked already and `op` runs as the daemon.
    fn checked<T>(&self, caller: &Caller, op: impl FnOnce() -> Result<T>) -> Result<T> {
        if self.config.options.default_permissions {
            return op();
        }
        let _creds = sys::creds::CallerCredsGuard::assume(caller)?;
        op()
    }

    /// Runs a cheap query on the metadata leg, falling back to the next in-sync leg (and
    /// dropping the first) if it fails with an I/O-class error.
    fn on_metadata_leg<T>(&self, what: &str, mut op: impl FnMut(LegIdx) -> Result<T>) -> Result<T> {
        loop {
            let leg = self.mirror.metadata_leg();
            match self.mirror.check_fault(leg, what).and_then(|()| op(leg)) {
                Err(e) if is_leg_fault(e) => {
                    self.mirror.mark_failed(leg, what, DropReason::LegFault(e));
                    if self.mirror.leg(leg).is_in_sync() {
                        return Err(e);
                    }
                }
                r => return r,
            }
        }
    }

    /// Gives the copies on `legs[1..]` the mtime the copy on `legs[0]` has, so the copies stay
    /// identical to tools that compare times (tar -d, rsync). Each leg stamps its own clock
    /// when it creates, writes or truncates; this runs after those.
    fn align_mtime<D, F>(&self, legs: &[LegIdx], what: Op, fd_of: F) -> Result<()>
    where
        D: std::os::fd::AsFd,
        F: Fn(LegIdx) -> Result<D> + Sync,
    {
        self.align_times(legs, what, false, fd_of)
    }

    /// As [`align_mtime`](Self::align_mtime), the atime as well when `atime` is set.
    fn align_times<D, F>(&self, legs: &[LegIdx], what: Op, atime: bool, fd_of: F) -> Result<()>
    where
        D: std::os::fd::AsFd,
        F: Fn(LegIdx) -> Result<D> + Sync,
    {
        let Some((&first, rest)) = legs.split_first() else {
            return Ok(());
        };
        if rest.is_empty() {
            return Ok(());
        }
        let st = sys::fd::fstat(fd_of(first)?.as_fd())?;
        let mtime = libc::timespec {
            tv_sec: st.st_mtime,
            tv_nsec: st.st_mtime_nsec,
        };
        let first_atime = match atime {
            true => libc::timespec {
                tv_sec: st.st_atime,
                tv_nsec: st.st_atime_nsec,
            },
            false => libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::UTIME_OMIT,
            },
        };
        self.mirror
            .fan_out(rest, what, |leg| {
                sys::fd::set_times(fd_of(leg)?.as_fd(), first_atime, mtime)
            })
            .map(drop)
    }

    /// The attributes of `inode`, from the metadata leg.
    fn stat_inode(&self, inode: &InodeRef) -> Result<FileAttr> {
        self.on_metadata_leg("getattr", |leg| {
            let st = sys::fd::fstat(inode.fd(leg)?.as_fd())?;
            Ok(attr::from_stat(&st, inode.ino))
        })
    }

    pub fn getattr(&self, ino: u64) -> Result<FileAttr> {
        if ino == CONTROL_INO {
            return Ok(self.control_attr());
        }
        let inode = self.inodes.get(ino)?;
        self.stat_inode(&inode)
    }

    pub fn forget(&self, ino: u64, nlookup: u64) {
        self.inodes.forget(ino, nlookup);
    }

    pub fn statfs(&self) -> Result<StatFs> {
        const BSIZE: u64 = 4096;
        let legs = self.mirror.in_sync_legs();
        let mut out: Option<StatFs> = None;
        for leg in legs {
            let st = match self
                .mirror
                .leg(leg)
                .root()
                .and_then(|r| sys::fd::statvfs(r.as_fd()))
            {
                Ok(st) => st,
                Err(e) if is_leg_fault(e) => {
                    self.mirror
                        .mark_failed(leg, "statfs", DropReason::LegFault(e));
                    continue;
                }
                Err(e) => return Err(e),
            };
            let fr = st.f_frsize.max(1);
            let s = StatFs {
                blocks: st.f_blocks * fr / BSIZE,
                bfree: st.f_bfree * fr / BSIZE,
                bavail: st.f_bavail * fr / BSIZE,
                files: st.f_files,
                ffree: st.f_ffree,
                bsize: BSIZE as u32,
                namelen: NAME_MAX as u32,
                frsize: BSIZE as u32,
            };
            out = Some(match out {
                None => s,
                Some(o) => StatFs {
                    blocks: o.blocks.min(s.blocks),
                    bfree: o.bfree.min(s.bfree),
                    bavail: o.bavail.min(s.bavail),
                    files: o.files.min(s.files),
                    ffree: o.ffree.min(s.ffree),
                    ..o
                },
            });
        }
        out.ok_or(Errno::EIO)
    }

    pub fn access(&self, ino: u64, mask: i32, caller: &Caller) -> Result<()> {
        if ino == CONTROL_INO {
            return if mask & libc::X_OK != 0 {
                Err(Errno::EACCES)
            } else {
                Ok(())
            };
        }
        let inode = self.inodes.get(ino)?;
        if mask == libc::F_OK {
            return Ok(());
        }
        self.on_metadata_leg("access", |leg| {
            let fd = inode.fd(leg)?;
            let fd = fd.as_fd();
            let _creds = sys::creds::CallerCredsGuard::assume(caller)?;
            sys::fd::access(fd, mask)
        })
    }
}

/// Checks that every leg returned the same value; legs that did not are dropped. Returns the
/// metadata-most (first) leg's value.
fn agree<T: PartialEq + Copy + std::fmt::Debug>(
    mirror: &Mirror,
    what: &str,
    values: &[(LegIdx, T)],
) -> Result<T> {
    let Some(&(_, first)) = values.first() else {
        return Err(Errno::EIO);
    };
    for &(leg, v) in &values[1..] {
        if v != first {
            log::error!(
                "{what}: leg {leg} answered {v:?}, leg {} answered {first:?}",
                values[0].0
            );
            mirror.mark_failed(leg, what, DropReason::Disagreed(Errno::EIO));
        }
    }
    Ok(first)
}

/// The path of `inode` relative to the legs' root (`.` for the root), from the metadata leg;
/// `None` when it has none (deleted while open).
fn relpath(mirror: &Mirror, inode: &InodeRef) -> Option<Vec<u8>> {
    let leg = mirror.metadata_leg();
    path_on(mirror, leg, inode.fd(leg).ok()?.as_fd())?
}

/// The path of the object whose descriptor on `leg` is `fd`, relative to the legs' root (`.`
/// for the root), as the kernel remembers it: `Some(None)` when that name no longer leads to
/// the object (deleted while open, or, for a hard-linked file, the name it was found by
/// removed while another stands); None if it cannot be read or is not under the leg.
///
/// Whether the name still leads to the object is asked of the objects, never read from the
/// name: the kernel appends " (deleted)" to a name that is gone, and a file may have a name of
/// its own that ends so.
fn path_on(
    mirror: &Mirror,
    leg: LegIdx,
    fd: std::os::fd::BorrowedFd<'_>,
) -> Option<Option<Vec<u8>>> {
    let p = sys::fd::path_of(fd).ok()?;
    let rel = p.strip_prefix(mirror.leg(leg).path()).ok()?;
    let rel = match rel.as_os_str().as_bytes() {
        b"" => sys::fd::ROOT_REL.to_vec(),
        b => b.to_vec(),
    };
    let st = sys::fd::fstat(fd).ok()?;
    if st.st_nlink == 0 {
        return Some(None);
    }
    let root = mirror.leg(leg).root().ok()?;
    let same = sys::fd::open_beneath(root.as_fd(), &rel)
        .and_then(|o| sys::fd::fstat(o.as_fd()))
        .is_ok_and(|o| (o.st_dev, o.st_ino) == (st.st_dev, st.st_ino));
    Some(same.then_some(rel))
}

/// Shared by the submodules: the inode, as an `Arc`.
type InodeRef = Arc<Inode>;
