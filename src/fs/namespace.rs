//! Lookups and changes to names and attributes.

use super::{attr, Caller, Entry, InodeRef, MirrorFs, SetAttr, TimeSpec};
use crate::errno::{Errno, Result};
use crate::leg::LegIdx;
use crate::mirror::outcome::{reconcile, DropReason};
use crate::mirror::Op;
use crate::sys;
use crate::sys::creds::CallerCredsGuard;
use crate::sys::fd::Stat;
use std::ffi::{CStr, OsStr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use super::inode::{Identity, CONTROL_INO};

impl MirrorFs {
    pub fn lookup(&self, parent: u64, name: &OsStr, caller: &Caller) -> Result<Entry> {
        if Self::is_control_name(parent, name) {
            return Ok(Entry {
                attr: self.control_attr(),
            });
        }
        let cname = self.name_for_lookup(parent, name)?;
        let p = self.inodes.get(parent)?;
        if !p.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        let _dir = p.dir_lock.read();
        self.lookup_locked(&p, &cname, caller)
    }

    /// Finds `name` in `p` on every in-sync leg but the quiet ones (see `fs/quiet.rs`), as
    /// `caller` when the core checks access (search permission on `p`). The caller holds
    /// `p.dir_lock`.
    pub(super) fn lookup_locked(
        &self,
        p: &InodeRef,
        name: &CStr,
        caller: &Caller,
    ) -> Result<Entry> {
        let (legs, quiet) = self.lookup_legs(p);
        let results = legs
            .iter()
            .map(|&leg| {
                let r = self.mirror.check_fault(leg, "lookup");
                let r = r.and_then(|()| p.fd(leg)).and_then(|dir| {
                    let fd = self.checked(caller, || sys::fd::open_path_at(dir.as_fd(), name))?;
                    let st = sys::fd::fstat(fd.as_fd())?;
                    Ok((fd, st))
                });
                (leg, r)
            })
            .collect();
        let out = reconcile(results);
        self.mirror.internal_faults("lookup", &out.internal);
        for (leg, why) in out.drop {
            self.mirror.mark_failed(leg, "lookup", why);
        }
        let found = out.answer?;
        Ok(self.claim_found(found, &quiet))
    }

    /// The legs a lookup in `p` asks (its in-sync legs, less the quiet ones), and the quiet
    /// ones, where the object is found at first use.
    fn lookup_legs(&self, p: &InodeRef) -> (Vec<LegIdx>, Vec<LegIdx>) {
        let mut legs = self.legs_known(p);
        let quiet = self.mirror.quiet_among(&legs);
        legs.retain(|l| !quiet.contains(l));
        (legs, quiet)
    }

    /// The entry `name` in `p` when the object there is already a live inode whose descriptor
    /// on the first leg a lookup asks is open (see [`InodeTable::claim_live`]): one `fstatat`
    /// there instead of opening and `fstat`ing it on every leg. None: look it up.
    pub(super) fn lookup_live(&self, p: &InodeRef, name: &CStr) -> Option<Entry> {
        let leg = *self.lookup_legs(p).0.first()?;
        self.mirror.check_fault(leg, "lookup").ok()?;
        let st = sys::fd::stat_at(p.fd(leg).ok()?.as_fd(), name).ok()?;
        let id = Identity {
            leg,
            dev: st.st_dev,
            ino: st.st_ino,
        };
        let inode = self.inodes.claim_live(&id, st.st_mode & libc::S_IFMT)?;
        Some(Entry {
            attr: attr::from_stat(&st, inode.ino),
        })
    }

    /// Turns per-leg `(O_PATH fd, stat)` of one object into an inode (one kernel lookup) and
    /// its entry; it is still to be found on the legs `lazy`. A leg whose object is of another
    /// type than the first leg's is dropped.
    pub(super) fn claim_found(
        &self,
        found: Vec<(LegIdx, (OwnedFd, Stat))>,
        lazy: &[LegIdx],
    ) -> Entry {
        let n = self.mirror.legs().len();
        let kind = found[0].1 .1.st_mode & libc::S_IFMT;
        let first_stat = found[0].1 .1;
        let mut fds: Vec<Option<OwnedFd>> = (0..n).map(|_| None).collect();
        let mut ids = Vec::new();
        for (leg, (fd, st)) in found {
            if st.st_mode & libc::S_IFMT != kind {
                log::error!(
                    "leg {leg} holds a different type of object than leg {}",
                    self.mirror.metadata_leg()
                );
                self.mirror
                    .mark_failed(leg, "lookup", DropReason::Disagreed(Errno::EIO));
                continue;
            }
            ids.push(Identity {
                leg,
                dev: st.st_dev,
                ino: st.st_ino,
            });
            fds[leg] = Some(fd);
        }
        let lazy = lazy
            .iter()
            .filter(|&&l| l < 64)
            .fold(0u64, |m, &l| m | 1 << l);
        let inode = self.inodes.claim(&ids, fds, kind, lazy);
        Entry {
            attr: attr::from_stat(&first_stat, inode.ino),
        }
    }

    /// Creates a node named `name` in `parent` on every in-sync leg, as the caller, with
    /// `make(parent_fd_on_leg, name)`, and returns its entry. A regular file (`mknod`) gets
    /// the checksum identity `id` on each copy, as `create` gives one.
    fn create_node(
        &self,
        parent: u64,
        name: &OsStr,
        caller: &Caller,
        what: Op,
        id: Option<u64>,
        make: impl Fn(BorrowedFd<'_>, &CStr) -> Result<()> + Sync,
    ) -> Result<Entry> {
        let _barrier = self.mirror.barrier();
        let cname = self.name_for_change(parent, name)?;
        let p = self.inodes.get(parent)?;
        if !p.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        let _dir = p.dir_lock.write();
        let legs = self.legs_for(&p);
        self.mirror.check_space(&legs, 0)?;
        self.will_change_dir(&p);
        let found = self.mirror.fan_out(&legs, what, |leg| {
            let dir = p.fd(leg)?;
            let dir = dir.as_fd();
            {
                let _creds = CallerCredsGuard::assume(caller)?;
                make(dir, &cname)?;
            }
            let fd = sys::fd::open_path_at(dir, &cname)?;
            let identified = id.is_some_and(|id| Self::give_new_id(fd.as_fd(), id));
            let st = sys::fd::fstat(fd.as_fd())?;
            Ok((fd, (st, identified)))
        })?;
        let identified = found.iter().all(|(_, (_, (_, ok)))| *ok);
        let found = found
            .into_iter()
            .map(|(leg, (fd, (st, _)))| (leg, (fd, st)))
            .collect();
        let entry = self.claim_found(found, &[]);
        if let Ok(inode) = self.inodes.get(entry.attr.ino.0) {
            // Under the directory's cover from birth: its first changes need no record.
            self.created_in(&inode, &p, name);
            if let Some(id) = id {
                self.adopt_new_id(&inode, id, identified);
            }
        }
        if entry.attr.kind != fuser::FileType::Directory {
            // A directory's mtime moves with every entry; a new node's must match at birth.
            // The node exists and the kernel counts this lookup from here on, so a failure
            // below (a leg dropped by fan_out) must not turn into an error for the caller.
            let inode = self.inodes.get(entry.attr.ino.0)?;
            let legs = self.legs_for(&inode);
            if let Err(e) = self.align_mtime(&legs, Op::SetMtime, |leg| inode.fd(leg)) {
                log::warn!("{what}: cannot align the new node's mtime: {e}");
            }
            if let Ok(attr) = self.stat_inode(&inode) {
                return Ok(Entry { attr });
            }
        }
        Ok(entry)
    }

    pub fn mknod(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        rdev: u32,
        caller: &Caller,
    ) -> Result<Entry> {
        let id = match mode & libc::S_IFMT {
            0 | libc::S_IFREG => self.new_checksum_id(),
            _ => None,
        };
        self.create_node(parent, name, caller, Op::Mknod, id, |dir, n| {
            sys::fd::mknod_at(dir, n, mode, rdev as u64)
        })
    }

    pub fn mkdir(&self, parent: u64, name: &OsStr, mode: u32, caller: &Caller) -> Result<Entry> {
        self.create_node(parent, name, caller, Op::Mkdir, None, |dir, n| {
            sys::fd::mkdir_at(dir, n, mode)
        })
    }

    pub fn symlink(
        &self,
        parent: u64,
        name: &OsStr,
        target: &OsStr,
        caller: &Caller,
    ) -> Result<Entry> {
        let t = std::ffi::CString::new(target.as_bytes()).map_err(|_| Errno::EINVAL)?;
        self.create_node(parent, name, caller, Op::Symlink, None, |dir, n| {
            sys::fd::symlink_at(&t, dir, n)
        })
    }

    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        let inode = self.inodes.get(ino)?;
        if !inode.is_symlink() {
            return Err(Errno::EINVAL);
        }
        self.on_metadata_leg("readlink", |leg| sys::fd::read_link(inode.fd(leg)?.as_fd()))
    }

    fn remove(&self, parent: u64, name: &OsStr, dir_entry: bool, caller: &Caller) -> Result<()> {
        let _barrier = self.mirror.barrier();
        if Self::is_control_name(parent, name) {
            return Err(Errno::EPERM);
        }
        let cname = self.name_for_lookup(parent, name)?;
        let p = self.inodes.get(parent)?;
        let _dir = p.dir_lock.write();
        // A cover: an `rm -rf` or a `find -delete` pays a few records, not one per directory.
        self.will_change_dir(&p);
        let legs = self.legs_for(&p);
        let what = if dir_entry { Op::Rmdir } else { Op::Unlink };
        let (last_link, shared) = match dir_entry {
            true => (None, None),
            false => self.removal_of(&p, &cname, &legs),
        };
        if !dir_entry {
            self.unlinking(&p, &cname);
        }
        let _change = self.names.begin();
        self.mirror
            .fan_out(&legs, what, |leg| {
                let dir = p.fd(leg)?;
                self.checked(caller, || {
                    sys::fd::unlink_at(dir.as_fd(), &cname, dir_entry)
                })
            })
            .map(drop)?;
        self.forget_checksums(last_link);
        // The file's other names keep it: one name fewer moved its copies' ctimes.
        self.stamp_copies(shared);
        Ok(())
    }

    pub fn unlink(&self, parent: u64, name: &OsStr, caller: &Caller) -> Result<()> {
        self.remove(parent, name, false, caller)
    }

    pub fn rmdir(&self, parent: u64, name: &OsStr, caller: &Caller) -> Result<()> {
        self.remove(parent, name, true, caller)
    }

    /// `renameat2`, with `RENAME_NOREPLACE` and `RENAME_EXCHANGE` passed to every leg.
    pub fn rename(
        &self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
        caller: &Caller,
    ) -> Result<()> {
        let _barrier = self.mirror.barrier();
        if Self::is_control_name(parent, name) {
            return Err(Errno::EPERM);
        }
        let old = self.name_for_lookup(parent, name)?;
        let new = self.name_for_change(newparent, newname)?;
        let p = self.inodes.get(parent)?;
        let np = self.inodes.get(newparent)?;
        // Lock order (`crate::lock_order`): ascending inode number.
        let (_a, _b) = if parent == newparent {
            (Some(p.dir_lock.write()), None)
        } else if parent < newparent {
            let a = p.dir_lock.write();
            (Some(a), Some(np.dir_lock.write()))
        } else {
            let b = np.dir_lock.write();
            (Some(p.dir_lock.write()), Some(b))
        };
        // The new parent's cover also stands for the moved object's content after a crash
        // (its ctime moves with the rename), whatever record it had under its old path.
        self.will_change_dir(&np);
        if parent != newparent {
            self.will_change_dir(&p);
        }
        let to = self.legs_for(&np);
        let legs: Vec<LegIdx> = self
            .legs_for(&p)
            .into_iter()
            .filter(|l| to.contains(l))
            .collect();
        // A file replaced by the rename loses its last name.
        let replaced = match flags & (libc::RENAME_EXCHANGE | libc::RENAME_NOREPLACE) {
            0 => self.last_link_id(&np, &new),
            _ => None,
        };
        // A renamed file's copies' ctimes move (both files', for an exchange).
        let moved = self.entry_copies(&p, &old, &legs);
        let exchanged = (flags & libc::RENAME_EXCHANGE != 0)
            .then(|| self.entry_copies(&np, &new, &legs))
            .flatten();
        // What is dirty at or below the moved paths is recorded under the new ones first.
        let dirs = || Some((self.leg_relpath(&p)?, self.leg_relpath(&np)?));
        let names = (old.as_bytes().to_vec(), new.as_bytes().to_vec());
        let exchange = flags & libc::RENAME_EXCHANGE != 0;
        let moving = self
            .mirror
            .renaming(names, exchange, (parent, newparent), dirs);
        let _change = self.names.begin();
        let r = self.mirror.fan_out(&legs, Op::Rename, |leg| {
            let (from, to) = (p.fd(leg)?, np.fd(leg)?);
            self.checked(caller, || {
                sys::fd::rename_at(from.as_fd(), &old, to.as_fd(), &new, flags)
            })
        });
        self.mirror.renamed(moving, r.is_ok(), dirs);
        r.map(drop)?;
        self.forget_checksums(replaced);
        self.stamp_copies(moved);
        self.stamp_copies(exchanged);
        Ok(())
    }

    /// A new name for `ino`; the reply carries fresh attributes (nlink and ctime moved).
    pub fn link(
        &self,
        ino: u64,
        newparent: u64,
        newname: &OsStr,
        caller: &Caller,
    ) -> Result<Entry> {
        let _barrier = self.mirror.barrier();
        if ino == CONTROL_INO {
            return Err(Errno::EPERM);
        }
        let new = self.name_for_change(newparent, newname)?;
        let inode = self.inodes.get(ino)?;
        if inode.is_dir() {
            return Err(Errno::EPERM);
        }
        let np = self.inodes.get(newparent)?;
        let _dir = np.dir_lock.write();
        self.will_change_dir(&np);
        let legs: Vec<LegIdx> = self
            .legs_for(&np)
            .into_iter()
            .filter(|&l| inode.has_leg(l))
            .collect();
        // Acting as the caller, the source is named by its path (see `link_as_caller`).
        let source = (!self.config.options.default_permissions)
            .then(|| self.leg_relpath(&inode))
            .map(|p| p.ok_or(Errno::ENOENT))
            .transpose()?;
        self.mirror.fan_out(&legs, Op::Link, |leg| {
            let dir = np.fd(leg)?;
            match &source {
                None => sys::fd::link_at(inode.fd(leg)?.as_fd(), dir.as_fd(), &new),
                Some(rel) => self.link_as_caller(leg, rel, dir.as_fd(), &new, caller),
            }
        })?;
        // A new name moved the copies' ctimes.
        self.recovery.stamp(&[ino]);
        self.lookup_locked(&np, &new, caller)
    }

    /// `link` on one leg as the caller, so that the leg's kernel applies its rules (search
    /// permission, `fs.protected_hardlinks`, write permission on the new parent): the source is
    /// named by its path `rel` under the leg root (opened one component at a time as the
    /// daemon, the last one looked up as the caller). A descriptor would not do: linking one
    /// needs CAP_DAC_READ_SEARCH, which the caller's identity does not carry.
    fn link_as_caller(
        &self,
        leg: LegIdx,
        rel: &[u8],
        new_dir: BorrowedFd<'_>,
        new: &CStr,
        caller: &Caller,
    ) -> Result<()> {
        let (parent, name) = match rel.iter().rposition(|&b| b == b'/') {
            Some(i) => (&rel[..i], &rel[i + 1..]),
            None => (sys::fd::ROOT_REL, rel),
        };
        let name = std::ffi::CString::new(name).map_err(|_| Errno::EINVAL)?;
        let root = self.mirror.leg(leg).root()?;
        let dir = sys::fd::open_beneath(root.as_fd(), parent)?;
        self.checked(caller, || {
            sys::fd::link_by_name_at(dir.as_fd(), &name, new_dir, new)
        })
    }

    pub fn setattr(&self, ino: u64, set: &SetAttr, caller: &Caller) -> Result<fuser::FileAttr> {
        let _barrier = self.mirror.barrier();
        if ino == CONTROL_INO {
            return Err(Errno::EPERM);
        }
        let inode = self.inodes.get(ino)?;
        // A truncate through an open, writable file (ftruncate, or an open with O_TRUNC) uses
        // that file's descriptors: the access was checked when it was opened, as the kernel
        // does (a file created with mode 0 can still be truncated through its descriptor).
        let handle = match (set.size, set.fh) {
            (Some(_), Some(fh)) => self
                .handles
                .file(fh)
                .ok()
                .filter(|h| h.flags & libc::O_ACCMODE != libc::O_RDONLY),
            _ => None,
        };
        // "Both times to now" (utimes(NULL), touch) needs only write permission where explicit
        // times need ownership. Acting as the caller, the legs get UTIME_NOW itself so that
        // their kernel applies that rule, and their times are made equal afterwards; as the
        // daemon, "now" is resolved once and every leg gets the same value.
        let touch = !self.config.options.default_permissions
            && set.atime == Some(TimeSpec::Now)
            && set.mtime == Some(TimeSpec::Now);
        let now = sys::now_timespec();
        let resolve = |t: Option<TimeSpec>| match t {
            None => libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::UTIME_OMIT,
            },
            Some(TimeSpec::Now) if touch => libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::UTIME_NOW,
            },
            Some(TimeSpec::Now) => now,
            Some(TimeSpec::At { sec, nsec }) => libc::timespec {
                tv_sec: sec,
                tv_nsec: nsec,
            },
        };
        let (atime, mtime) = (resolve(set.atime), resolve(set.mtime));
        // A write by someone else than the owner makes the kernel drop setuid/setgid with a
        // mode change in the writer's name, which the owner's rules would refuse: a change
        // that only drops those bits needs only what writing needs (write permission), as on
        // a local filesystem.
        // (Only without FUSE_HANDLE_KILLPRIV_V2: with it the kernel sends no such change.)
        let kill_priv = !set.drops_privs
            && !self.config.options.default_permissions
            && self.only_drops_suid(&inode, set)?;
        let drop_privs = match set.drops_privs {
            true => self.privs_to_drop(&inode, set, caller)?,
            false => None,
        };
        if kill_priv {
            let leg = self.mirror.metadata_leg();
            self.checked(caller, || {
                sys::fd::access(inode.fd(leg)?.as_fd(), libc::W_OK)
            })?;
        }
        let as_caller = |op: &dyn Fn() -> Result<()>| match kill_priv {
            true => op(),
            false => self.checked(caller, op),
        };
        self.will_change(&inode);
        let legs = self.legs_for(&inode);
        let sums = set.size.and_then(|_| self.sums(&inode));
        // A cut inside a block reads the block's kept part for its new checksum: exclusive.
        let _shared = (set.size.is_some() && sums.is_none()).then(|| inode.data_lock.read());
        let _exclusive = sums.is_some().then(|| inode.data_lock.write());
        let _change = set.size.map(|_| inode.data_change());
        let tail = match (&sums, set.size) {
            (Some(f), Some(size)) => self.tail_sum(&inode, f, size)?,
            _ => None,
        };
        self.mirror.fan_out(&legs, Op::Setattr, |leg| {
            let fd = inode.fd(leg)?;
            let fd = fd.as_fd();
            if let Some(size) = set.size {
                if !inode.is_regular() {
                    return Err(if inode.is_dir() {
                        Errno::EISDIR
                    } else {
                        Errno::EINVAL
                    });
                }
                match handle.as_ref().and_then(|h| h.fd(leg).ok()) {
                    Some(f) => sys::fd::ftruncate(f.as_fd(), size)?,
                    None => self.checked(caller, || sys::fd::truncate(fd, size))?,
                }
            }
            as_caller(&|| {
                // Ownership first: a chown clears setuid/setgid bits, and an explicit mode in
                // the same request (the kernel sends the cleared mode with it) must win.
                if set.uid.is_some() || set.gid.is_some() {
                    sys::fd::chown(fd, set.uid.unwrap_or(u32::MAX), set.gid.unwrap_or(u32::MAX))?;
                }
                if let Some(mode) = set.mode {
                    if !inode.is_symlink() {
                        sys::fd::chmod(fd, mode & 0o7777)?;
                    }
                }
                if set.atime.is_some() || set.mtime.is_some() {
                    sys::fd::set_times(fd, atime, mtime)?;
                }
                Ok(())
            })
        })?;
        if let Some(mode) = drop_privs {
            self.set_mode_everywhere(&inode, mode)?;
        }
        match (&sums, set.size) {
            (Some(f), Some(size)) => f
                .truncate(self.mirror.integrity(), size, tail)
                .map_err(|e| self.checksum_failure(&inode, e))?,
            (None, Some(0)) if inode.is_regular() => self.truncated_to_zero(&inode),
            _ => {}
        }
        // The legs still in sync, not `legs`: one may have been dropped by the change above.
        if touch {
            // Each leg stamped its own clock.
            let legs = self.legs_for(&inode);
            self.align_times(&legs, Op::SetTimes, true, |leg| inode.fd(leg))?;
        } else if set.size.is_some() && set.mtime.is_none() {
            // Each leg stamped its own clock if the size changed.
            let legs = self.legs_for(&inode);
            self.align_mtime(&legs, Op::SetMtime, |leg| inode.fd(leg))?;
        }
        self.stat_inode(&inode)
    }

    /// The mode `inode` is left with when `set` by `caller` drops its setuid/setgid bits
    /// ([`attr::without_privs`]), if that changes it: a chown always, a truncate when the
    /// caller lacks `CAP_FSETID`, and an empty request (the kernel decided already). Read
    /// before the change: the group that counts is the file's group before a chown.
    fn privs_to_drop(
        &self,
        inode: &InodeRef,
        set: &SetAttr,
        caller: &Caller,
    ) -> Result<Option<u32>> {
        let chown = set.uid.is_some() || set.gid.is_some();
        let truncate = set.size.is_some();
        if set.mode.is_some() || !(chown || truncate || set.changes_nothing()) {
            return Ok(None);
        }
        let gated = truncate && !chown;
        self.mode_without_privs(inode, caller, gated)
    }

    /// The mode `inode` keeps once a change by `caller` drops its privileges, if that differs
    /// from its mode now. `gated`: not at all if the caller holds `CAP_FSETID` (a write or a
    /// truncate; a chown drops them from anyone).
    pub(super) fn mode_without_privs(
        &self,
        inode: &InodeRef,
        caller: &Caller,
        gated: bool,
    ) -> Result<Option<u32>> {
        if !inode.is_regular() {
            return Ok(None);
        }
        let now = self.stat_inode(inode)?;
        let mode = u32::from(now.perm) & 0o7777;
        if mode & (libc::S_ISUID | libc::S_ISGID) == 0 {
            return Ok(None);
        }
        let capable = || caller.has_cap(sys::creds::CAP_FSETID);
        if gated && capable() {
            return Ok(None);
        }
        let kept = attr::without_privs(mode, || caller.in_group(now.gid) || capable());
        Ok((kept != mode).then_some(kept))
    }

    /// Sets `inode`'s permission bits to `mode` on every leg it is in sync on, as the daemon.
    pub(super) fn set_mode_everywhere(&self, inode: &InodeRef, mode: u32) -> Result<()> {
        let legs = self.legs_for(inode);
        self.mirror.fan_out(&legs, Op::DropSetuid, |leg| {
            sys::fd::chmod(inode.fd(leg)?.as_fd(), mode)
        })?;
        Ok(())
    }

    /// Whether `set` only takes setuid/setgid bits off `inode`'s mode (the kernel's
    /// "kill privileges" after a write or truncate, when it does not leave that to us).
    fn only_drops_suid(&self, inode: &InodeRef, set: &SetAttr) -> Result<bool> {
        let Some(mode) = set.mode else {
            return Ok(false);
        };
        let others = set.uid.is_some()
            || set.gid.is_some()
            || set.size.is_some()
            || set.atime.is_some()
            || set.mtime.is_some();
        if others {
            return Ok(false);
        }
        let now = u32::from(self.stat_inode(inode)?.perm) & 0o7777;
        let new = mode & 0o7777;
        let privs = libc::S_ISUID | libc::S_ISGID;
        // The same but for setuid/setgid, of which some are taken off and none added.
        Ok(new & !privs == now & !privs && new & privs != now & privs && new & !now == 0)
    }
}
