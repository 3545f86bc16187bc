//! Making one entry of a target leg identical to the same entry of a source leg: content by
//! differing ranges (sparse-aware), metadata, creation, replacement, hard links, removal.

use super::node::{self, Entry, Kind, Node, Place};
use super::progress::Progress;
use super::{Control, TreeOptions, CANCELLED};
use crate::errno::{Errno, Result};
use crate::sys;
use crate::sys::tree_support::cname;
use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

/// Comparison granularity inside a chunk: only differing blocks are written.
const BLOCK: usize = 4096;

/// Why an entry step stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fail {
    /// The source (the good leg) failed: skip the entry, change nothing for it.
    Src(Errno),
    /// The target failed.
    Tgt(Errno),
    Cancelled,
}

pub(crate) type R<T> = std::result::Result<T, Fail>;

pub(crate) trait Side<T> {
    fn src(self) -> R<T>;
    fn tgt(self) -> R<T>;
}

/// `side(e)`, unless `e` is the cancellation, which is nobody's failure.
fn blame(e: Errno, side: fn(Errno) -> Fail) -> Fail {
    if e == CANCELLED {
        Fail::Cancelled
    } else {
        side(e)
    }
}

impl<T> Side<T> for Result<T> {
    fn src(self) -> R<T> {
        self.map_err(|e| blame(e, Fail::Src))
    }
    fn tgt(self) -> R<T> {
        self.map_err(|e| blame(e, Fail::Tgt))
    }
}

/// What was done, for the reports.
#[derive(Clone, Debug, Default)]
pub(crate) struct CopyStats {
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub created: u64,
    pub updated: u64,
    pub removed: u64,
    pub linked: u64,
    /// Xattrs the target's filesystem refused (ENOTSUP, EPERM): not fatal, counted.
    pub xattr_refused: u64,
}

/// Per-run state of the copy code: options, control, buffers, statistics.
pub(crate) struct Ctx<'a> {
    pub opts: &'a TreeOptions,
    pub ctl: &'a Control,
    pub buf_a: Vec<u8>,
    pub buf_b: Vec<u8>,
    pub zeros: Vec<u8>,
    pub stats: CopyStats,
}

impl<'a> Ctx<'a> {
    /// An entry skipped because of `e` on `leg`: counted in the progress, passed to the hook,
    /// and returned for the run's report.
    pub fn entry_error(&self, rel: &Path, leg: usize, e: Errno) -> super::EntryError {
        Progress::add(&self.ctl.progress.errors, 1);
        self.ctl.hook.error(rel, leg, e);
        super::EntryError {
            path: rel.to_path_buf(),
            leg,
            errno: e.0,
        }
    }

    pub fn new(opts: &'a TreeOptions, ctl: &'a Control) -> Ctx<'a> {
        let chunk = opts.chunk_size.clamp(BLOCK, 64 << 20);
        Ctx {
            opts,
            ctl,
            buf_a: vec![0; chunk],
            buf_b: vec![0; chunk],
            zeros: vec![0; chunk],
            stats: CopyStats::default(),
        }
    }

    pub fn chunk(&self) -> usize {
        self.buf_a.len()
    }

    /// Accounts `bytes` walked (throttle and progress); ECANCELED once cancelled.
    pub fn step(&self, bytes: u64) -> Result<()> {
        Progress::add(&self.ctl.progress.bytes_done, bytes);
        self.ctl.throttle.consume(bytes, &self.ctl.cancel)
    }

    pub fn check_cancel(&self) -> R<()> {
        if self.ctl.cancelled() {
            Err(Fail::Cancelled)
        } else {
            Ok(())
        }
    }
}

/// How a non-directory target entry relates to its hard-link group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LinkPlan {
    /// The entry is its own inode on the target (or the first name of its group): update it in
    /// place, unless `must_break` (its inode is shared with names that must not change): then
    /// replace it by a new inode.
    Own { must_break: bool },
    /// The entry must be another name of the target's inode at this path (the group leader).
    LinkTo(PathBuf),
}

/// The target side of one entry.
pub(crate) struct Target<'a> {
    pub root: BorrowedFd<'a>,
    pub dir: BorrowedFd<'a>,
    pub name: &'a CStr,
}

impl Target<'_> {
    fn place(&self) -> Place<'_> {
        Place::Child {
            dir: self.dir,
            name: self.name,
        }
    }
}

/// Removes `dir/name` on a target, a directory with all its subtree (depth first, `*at`
/// calls, never following a symlink). Missing is fine.
pub(crate) fn remove_entry(ctx: &mut Ctx<'_>, dir: BorrowedFd<'_>, name: &CStr) -> R<()> {
    for attempt in 0..3 {
        let Some(n) = node::open_at(dir, name).tgt()? else {
            return Ok(());
        };
        let is_dir = n.meta.kind == Kind::Dir;
        if is_dir {
            for child in sys::dir::read_dir(n.fd.as_fd()).tgt()? {
                ctx.check_cancel()?;
                remove_entry(ctx, n.fd.as_fd(), &cname(&child.name).tgt()?)?;
            }
        }
        match sys::fd::unlink_at(dir, name, is_dir) {
            Ok(()) => {
                ctx.stats.removed += 1;
                return Ok(());
            }
            Err(e) if e == Errno::ENOENT => return Ok(()),
            // Something was created meanwhile, or the name now holds another type: again.
            Err(e)
                if (e == Errno::ENOTEMPTY || e == Errno::EISDIR || e == Errno::ENOTDIR)
                    && attempt < 2 => {}
            Err(e) => return Err(Fail::Tgt(e)),
        }
    }
    Err(Fail::Tgt(Errno::ENOTEMPTY))
}

/// Makes `tgt` a directory (removing what else is there); returns it and whether it was made.
pub(crate) fn ensure_dir(
    ctx: &mut Ctx<'_>,
    tgt: &Target<'_>,
    existing: Option<Node>,
) -> R<(Node, bool)> {
    if let Some(n) = existing {
        if n.meta.kind == Kind::Dir {
            return Ok((n, false));
        }
        remove_entry(ctx, tgt.dir, tgt.name)?;
    }
    match sys::fd::mkdir_at(tgt.dir, tgt.name, 0o700) {
        Ok(()) => ctx.stats.created += 1,
        Err(e) if e == Errno::EEXIST => {}
        Err(e) => return Err(Fail::Tgt(e)),
    }
    match node::open_at(tgt.dir, tgt.name).tgt()? {
        Some(n) if n.meta.kind == Kind::Dir => Ok((n, true)),
        _ => Err(Fail::Tgt(Errno::ENOENT)),
    }
}

/// Makes the non-directory `tgt` identical to `src`. Returns the target's node afterwards and
/// whether anything was changed.
pub(crate) fn sync_nondir(
    ctx: &mut Ctx<'_>,
    src: &Entry,
    tgt: &Target<'_>,
    mut plan: LinkPlan,
) -> R<(Node, bool)> {
    let s = &src.node.meta;
    let mut existing = node::open_at(tgt.dir, tgt.name).tgt()?;
    let mut changed = false;

    if let LinkPlan::LinkTo(leader) = &plan {
        match link_to_leader(ctx, src, tgt, leader, existing.take())? {
            Some((n, c)) => {
                let mut n = n;
                // The leader was synced first; its metadata is shared. Check anyway (cheap).
                let c2 = sync_meta(ctx, src, tgt.place(), &mut n, true, false)?;
                return Ok((n, c || c2));
            }
            // The leader is not usable on the target: give this name its own copy.
            None => {
                plan = LinkPlan::Own { must_break: true };
                existing = node::open_at(tgt.dir, tgt.name).tgt()?;
            }
        }
    }
    let LinkPlan::Own { must_break } = plan else {
        unreachable!()
    };

    let replace = match &existing {
        None => false,
        Some(t) => {
            t.meta.kind != s.kind
                || (must_break && t.meta.nlink > 1)
                || (matches!(s.kind, Kind::CharDev | Kind::BlockDev) && t.meta.rdev != s.rdev)
                || (s.kind == Kind::Symlink
                    && sys::fd::read_link(t.fd.as_fd()).tgt()?.as_slice()
                        != src.link_target.as_deref().unwrap_or_default())
        }
    };
    if replace {
        remove_entry(ctx, tgt.dir, tgt.name)?;
        existing = None;
        changed = true;
    }

    let (mut t, fresh) = match existing {
        Some(t) => (t, false),
        None => {
            create_nondir(ctx, src, tgt)?;
            ctx.stats.created += 1;
            changed = true;
            match node::open_at(tgt.dir, tgt.name).tgt()? {
                Some(n) => (n, true),
                None => return Err(Fail::Tgt(Errno::ENOENT)),
            }
        }
    };
    let mut wrote = false;
    if s.kind == Kind::File {
        let sfd = sys::fd::reopen(src.node.fd.as_fd(), libc::O_RDONLY).src()?;
        let tfd = sys::fd::reopen(t.fd.as_fd(), libc::O_RDWR).tgt()?;
        wrote = sync_content(ctx, sfd.as_fd(), tfd.as_fd(), s.size, fresh)?;
        t.restat().tgt()?;
    }
    let c = sync_meta(ctx, src, tgt.place(), &mut t, true, wrote)?;
    if (wrote || c) && !fresh && !replace {
        ctx.stats.updated += 1;
    }
    Ok((t, changed || wrote || c))
}

/// `Some` when the target entry now is (or already was) a name of the leader's inode.
fn link_to_leader(
    ctx: &mut Ctx<'_>,
    src: &Entry,
    tgt: &Target<'_>,
    leader: &Path,
    existing: Option<Node>,
) -> R<Option<(Node, bool)>> {
    let (Some(lname), Some(lparent)) = (leader.file_name(), leader.parent()) else {
        return Ok(None);
    };
    let Some(ldir) = node::open_dir_rel(tgt.root, lparent).tgt()? else {
        return Ok(None);
    };
    let lname = cname(lname).tgt()?;
    let Some(l) = node::open_at(ldir.fd.as_fd(), &lname).tgt()? else {
        return Ok(None);
    };
    if l.meta.kind != src.node.meta.kind || l.meta.kind == Kind::Dir {
        return Ok(None);
    }
    if let Some(e) = &existing {
        if e.meta.id == l.meta.id {
            return Ok(Some((existing.unwrap(), false)));
        }
        remove_entry(ctx, tgt.dir, tgt.name)?;
    }
    match sys::fd::link_by_name_at(ldir.fd.as_fd(), &lname, tgt.dir, tgt.name) {
        Ok(()) => {}
        // Too many links, or a filesystem without hard links: a copy is the best we can do.
        Err(e) if e.0 == libc::EMLINK || e == Errno::EPERM || e == Errno::ENOTSUP => {
            return Ok(None)
        }
        Err(e) => return Err(Fail::Tgt(e)),
    }
    ctx.stats.linked += 1;
    match node::open_at(tgt.dir, tgt.name).tgt()? {
        Some(n) => Ok(Some((n, true))),
        None => Err(Fail::Tgt(Errno::ENOENT)),
    }
}

fn create_nondir(ctx: &mut Ctx<'_>, src: &Entry, tgt: &Target<'_>) -> R<()> {
    let s = &src.node.meta;
    let r = match s.kind {
        Kind::File => {
            sys::fd::create_at(tgt.dir, tgt.name, libc::O_RDWR | libc::O_EXCL, 0o600).map(drop)
        }
        Kind::Symlink => {
            let target = std::ffi::CString::new(src.link_target.clone().unwrap_or_default())
                .map_err(|_| Errno::EINVAL);
            match target {
                Ok(t) => sys::fd::symlink_at(&t, tgt.dir, tgt.name),
                Err(e) => Err(e),
            }
        }
        Kind::Dir => Err(Errno::EISDIR),
        k => sys::fd::mknod_at(tgt.dir, tgt.name, k.ifmt() | 0o600, s.rdev),
    };
    match r {
        Ok(()) => Ok(()),
        // Created meanwhile (a race): take it away and try once more.
        Err(e) if e == Errno::EEXIST => {
            remove_entry(ctx, tgt.dir, tgt.name)?;
            create_nondir_once(src, tgt)
        }
        Err(e) => Err(Fail::Tgt(e)),
    }
}

fn create_nondir_once(src: &Entry, tgt: &Target<'_>) -> R<()> {
    let s = &src.node.meta;
    match s.kind {
        Kind::File => sys::fd::create_at(tgt.dir, tgt.name, libc::O_RDWR | libc::O_EXCL, 0o600)
            .map(drop)
            .tgt(),
        Kind::Symlink => {
            let t = std::ffi::CString::new(src.link_target.clone().unwrap_or_default())
                .map_err(|_| Fail::Src(Errno::EINVAL))?;
            sys::fd::symlink_at(&t, tgt.dir, tgt.name).tgt()
        }
        Kind::Dir => Err(Fail::Tgt(Errno::EISDIR)),
        k => sys::fd::mknod_at(tgt.dir, tgt.name, k.ifmt() | 0o600, s.rdev).tgt(),
    }
}

/// Sets owner, xattrs, mode and (when `set_mtime`) mtime of `tgt` to those of `src`, each
/// only if it differs (`force_mtime`: set it anyway, the content was just written).
pub(crate) fn sync_meta(
    ctx: &mut Ctx<'_>,
    src: &Entry,
    place: Place<'_>,
    tgt: &mut Node,
    set_mtime: bool,
    force_mtime: bool,
) -> R<bool> {
    let s = &src.node.meta;
    let mut changed = false;
    if (tgt.meta.uid, tgt.meta.gid) != (s.uid, s.gid) {
        sys::fd::chown(tgt.fd.as_fd(), s.uid, s.gid).tgt()?;
        tgt.restat().tgt()?;
        changed = true;
    }
    let txa = node::read_xattrs(place, tgt, ctx.opts).tgt()?;
    if txa != src.xattrs {
        for (k, v) in &src.xattrs {
            if txa.get(k) != Some(v) {
                match node::set_xattr(place, tgt, k, v) {
                    Ok(()) => {}
                    Err(e) if refused(e) => ctx.stats.xattr_refused += 1,
                    Err(e) => return Err(Fail::Tgt(e)),
                }
            }
        }
        for k in txa.keys() {
            if !src.xattrs.contains_key(k) {
                match node::remove_xattr(place, tgt, k) {
                    Ok(()) => {}
                    Err(e) if e == Errno::ENODATA => {}
                    Err(e) if refused(e) => ctx.stats.xattr_refused += 1,
                    Err(e) => return Err(Fail::Tgt(e)),
                }
            }
        }
        // An ACL moves the mode's group bits; a capability goes with a chown.
        tgt.restat().tgt()?;
        changed = true;
    }
    if s.kind != Kind::Symlink && tgt.meta.perm != s.perm {
        sys::fd::chmod(tgt.fd.as_fd(), s.perm).tgt()?;
        changed = true;
    }
    if set_mtime && (force_mtime || tgt.meta.mtime != s.mtime) {
        let ts = |(sec, nsec): (i64, i64)| libc::timespec {
            tv_sec: sec,
            tv_nsec: nsec,
        };
        match place {
            Place::Root => sys::fd::set_times(tgt.fd.as_fd(), ts(s.atime), ts(s.mtime)).tgt()?,
            Place::Child { dir, name } => {
                sys::tree_support::set_times_at(dir, name, ts(s.atime), ts(s.mtime)).tgt()?
            }
        }
        changed |= tgt.meta.mtime != s.mtime;
    }
    if changed {
        tgt.restat().tgt()?;
    }
    Ok(changed)
}

fn refused(e: Errno) -> bool {
    e == Errno::ENOTSUP || e == Errno(libc::EOPNOTSUPP) || e == Errno::EPERM || e == Errno::EACCES
}

/// The data segments of `fd` within `[from, to)` (SEEK_DATA / SEEK_HOLE); the whole range
/// when the filesystem cannot tell.
pub(crate) fn data_segments(fd: BorrowedFd<'_>, from: u64, to: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut pos = from;
    while pos < to {
        let d = match sys::fd::lseek(fd, pos as i64, libc::SEEK_DATA) {
            Ok(d) => d as u64,
            Err(e) if e == Errno::ENXIO => break,
            Err(_) => return vec![(from, to)],
        };
        if d >= to {
            break;
        }
        let h = match sys::fd::lseek(fd, d as i64, libc::SEEK_HOLE) {
            Ok(h) => (h as u64).min(to),
            Err(_) => to,
        };
        if h <= d {
            out.push((d, to));
            break;
        }
        out.push((d, h));
        pos = h;
    }
    out
}

/// Makes the content of `tfd` (open read-write) equal to `sfd`'s, `size` bytes. Only
/// differing blocks are written; the source's holes stay holes on a fresh target and are
/// punched (or zeroed) on an old one only where it holds non-zero data. Returns whether
/// anything was written.
fn sync_content(
    ctx: &mut Ctx<'_>,
    sfd: BorrowedFd<'_>,
    tfd: BorrowedFd<'_>,
    size: u64,
    fresh: bool,
) -> R<bool> {
    let mut wrote = false;
    let tsize = sys::fd::fstat(tfd).tgt()?.st_size as u64;
    if tsize != size {
        sys::fd::ftruncate(tfd, size).tgt()?;
        wrote = true;
    }
    let chunk = ctx.chunk() as u64;
    let mut pos = 0u64;
    for (ds, de) in data_segments(sfd, 0, size) {
        if ds > pos {
            wrote |= zero_range(ctx, tfd, pos, ds, fresh)?;
        }
        let mut off = ds;
        while off < de {
            ctx.check_cancel()?;
            let len = chunk.min(de - off) as usize;
            let n = sys::fd::pread_full(sfd, &mut ctx.buf_a[..len], off).src()?;
            ctx.stats.bytes_read += n as u64;
            if n == 0 {
                // The source shrank under us: the next run (or the write path) fixes the rest.
                break;
            }
            if fresh {
                if ctx.buf_a[..n] != ctx.zeros[..n] {
                    sys::fd::pwrite_full(tfd, &ctx.buf_a[..n], off).tgt()?;
                    ctx.stats.bytes_written += n as u64;
                    wrote = true;
                }
            } else {
                let m = sys::fd::pread_full(tfd, &mut ctx.buf_b[..n], off).tgt()?;
                ctx.stats.bytes_read += m as u64;
                if m < n {
                    ctx.buf_b[m..n].fill(0);
                }
                if ctx.buf_a[..n] != ctx.buf_b[..n] {
                    wrote |= write_differing(ctx, tfd, n, off)?;
                }
            }
            ctx.step(n as u64).src()?;
            off += n as u64;
        }
        pos = de;
    }
    if pos < size {
        wrote |= zero_range(ctx, tfd, pos, size, fresh)?;
    }
    Ok(wrote)
}

/// Writes the blocks of `buf_a[..n]` that differ from `buf_b[..n]` at `off`.
fn write_differing(ctx: &mut Ctx<'_>, tfd: BorrowedFd<'_>, n: usize, off: u64) -> R<bool> {
    let mut i = 0;
    let mut wrote = false;
    while i < n {
        let end = (i + BLOCK).min(n);
        if ctx.buf_a[i..end] == ctx.buf_b[i..end] {
            i = end;
            continue;
        }
        // A run of differing blocks: one write.
        let start = i;
        let mut j = end;
        while j < n {
            let e = (j + BLOCK).min(n);
            if ctx.buf_a[j..e] == ctx.buf_b[j..e] {
                break;
            }
            j = e;
        }
        sys::fd::pwrite_full(tfd, &ctx.buf_a[start..j], off + start as u64).tgt()?;
        ctx.stats.bytes_written += (j - start) as u64;
        wrote = true;
        i = j;
    }
    Ok(wrote)
}

/// The source has a hole over `[from, to)`: make the target read zeros there without
/// allocating anything a fresh file would not have.
fn zero_range(ctx: &mut Ctx<'_>, tfd: BorrowedFd<'_>, from: u64, to: u64, fresh: bool) -> R<bool> {
    // A hole costs no reads, but it is walked: count it.
    Progress::add(&ctx.ctl.progress.bytes_done, to - from);
    if fresh {
        return Ok(false);
    }
    let chunk = ctx.chunk() as u64;
    let mut wrote = false;
    for (ds, de) in data_segments(tfd, from, to) {
        let mut off = ds;
        while off < de {
            ctx.check_cancel()?;
            let len = chunk.min(de - off) as usize;
            let n = sys::fd::pread_full(tfd, &mut ctx.buf_b[..len], off).tgt()?;
            ctx.stats.bytes_read += n as u64;
            ctx.ctl.throttle.consume(n as u64, &ctx.ctl.cancel).src()?;
            if n == 0 {
                break;
            }
            if ctx.buf_b[..n] != ctx.zeros[..n] {
                let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
                match sys::fd::fallocate(tfd, punch, off, n as u64) {
                    Ok(()) => {}
                    Err(e) if e == Errno::ENOTSUP || e == Errno(libc::EOPNOTSUPP) => {
                        sys::fd::pwrite_full(tfd, &ctx.zeros[..n], off).tgt()?;
                        ctx.stats.bytes_written += n as u64;
                    }
                    Err(e) => return Err(Fail::Tgt(e)),
                }
                wrote = true;
            }
            off += n as u64;
        }
    }
    Ok(wrote)
}
