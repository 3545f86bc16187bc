//! Comparing one entry across N legs: which aspects differ, which legs hold the same version,
//! and where the content differs.

use super::copy::Ctx;
use super::node::{self, Entry, Kind, Place};
use super::{Control, TreeOptions};
use crate::errno::{Errno, Result};
use crate::sys;
use serde::Serialize;
use std::collections::BTreeSet;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

/// Granularity of the range search inside a differing chunk.
const BLOCK: usize = 4096;

/// One aspect in which the copies of an entry differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DiffKind {
    /// Present on some legs, absent on others.
    Missing,
    /// File on one leg, directory (or symlink, device...) on another.
    Type,
    Size,
    /// Permission bits (`mode & 0o7777`).
    Mode,
    /// uid or gid.
    Owner,
    Mtime,
    SymlinkTarget,
    Rdev,
    Xattrs,
    Content,
    /// Hard-link structure: the names sharing an inode are not the same on every leg.
    HardLinks,
    /// The entry could not be read on some leg (the errno is in that leg's detail).
    ReadError,
}

/// What one leg holds at the path.
#[derive(Clone, Debug, Serialize)]
pub struct LegDetail {
    /// False when the leg's parent directory is itself missing or different (the difference
    /// is reported on the parent) or the leg is not part of the run.
    pub compared: bool,
    pub present: bool,
    pub kind: Option<Kind>,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub mtime_sec: i64,
    pub mtime_nsec: i64,
    pub nlink: u64,
    pub rdev: u64,
    pub symlink_target: Option<String>,
    /// First name (walk order) of this entry's inode on this leg, for multiply-linked files.
    pub link_leader: Option<PathBuf>,
    /// The errno when the entry could not be read on this leg.
    pub error: Option<i32>,
    /// Legs with the same version number hold identical copies (as far as compared).
    pub version: usize,
}

/// What happened to a difference in repair mode.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum RepairOutcome {
    NotRequested,
    /// The legs in `legs` were made identical to leg `from`.
    Repaired {
        from: usize,
        legs: Vec<usize>,
    },
    /// No version is held by more legs than any other (or the named source cannot be read).
    Tie,
    Failed {
        leg: usize,
        errno: i32,
    },
}

/// One entry whose copies differ.
#[derive(Clone, Debug, Serialize)]
pub struct Difference {
    pub path: PathBuf,
    pub kinds: Vec<DiffKind>,
    /// One per leg of the run, in the run's order.
    pub legs: Vec<LegDetail>,
    /// Byte ranges `[start, end)` where the content differs, within the size all legs have.
    pub ranges: Vec<(u64, u64)>,
    pub ranges_truncated: bool,
    /// Names of the xattrs that differ (lossy UTF-8).
    pub xattrs: Vec<String>,
    pub repair: RepairOutcome,
}

impl Difference {
    pub fn has(&self, k: DiffKind) -> bool {
        self.kinds.contains(&k)
    }
}

/// What one leg holds, as the comparer sees it.
pub(crate) enum LegState {
    /// Not compared (the parent directory is missing there).
    Skip,
    Absent,
    Error(Errno),
    Present(Entry),
}

impl LegState {
    pub fn entry(&self) -> Option<&Entry> {
        match self {
            LegState::Present(e) => Some(e),
            _ => None,
        }
    }
}

/// The outcome of [`compare_states`].
#[derive(Default, Debug)]
pub(crate) struct Cmp {
    pub kinds: BTreeSet<DiffKind>,
    /// Per leg; `usize::MAX` for skipped legs.
    pub versions: Vec<usize>,
    pub ranges: Vec<(u64, u64)>,
    pub ranges_truncated: bool,
    pub xattr_names: BTreeSet<Vec<u8>>,
}

/// Loads what leg `dir` holds at `name`.
pub(crate) fn load_state(
    dir: Option<BorrowedFd<'_>>,
    name: &std::ffi::CStr,
    opts: &TreeOptions,
) -> LegState {
    let Some(dir) = dir else {
        return LegState::Skip;
    };
    match node::open_at(dir, name) {
        Ok(None) => LegState::Absent,
        Ok(Some(n)) => match node::load(Place::Child { dir, name }, n, opts) {
            Ok(e) => LegState::Present(e),
            Err(e) if e == Errno::ENOENT => LegState::Absent,
            Err(e) => LegState::Error(e),
        },
        Err(e) => LegState::Error(e),
    }
}

/// Compares the states of one entry. `leaders[i]` is the link-group leader of leg i's entry
/// (for multiply-linked files). `nlink_counts`: compare link counts (when no walk gives the
/// leaders). Content read errors turn that leg's state into `Error`. Only `ECANCELED` is
/// returned as an error.
pub(crate) fn compare_states(
    ctx: &mut Ctx<'_>,
    bufs: &mut [Vec<u8>],
    states: &mut [LegState],
    leaders: &[Option<PathBuf>],
    rel: &Path,
    nlink_counts: bool,
) -> Result<Cmp> {
    let n = states.len();
    let mut eq = vec![vec![true; n]; n];
    let mut cmp = Cmp::default();
    let opts = ctx.opts;

    // Content first: a read error there changes a leg's state.
    if opts.compare_content {
        compare_content(ctx, bufs, states, leaders, rel, &mut eq, &mut cmp)?;
    }

    let compared: Vec<usize> = (0..n)
        .filter(|&i| !matches!(states[i], LegState::Skip))
        .collect();
    for &i in &compared {
        if matches!(states[i], LegState::Error(_)) {
            cmp.kinds.insert(DiffKind::ReadError);
            for (j, row) in eq.iter_mut().enumerate() {
                if j != i {
                    row[i] = false;
                }
            }
            eq[i].iter_mut().enumerate().for_each(|(j, v)| *v = j == i);
        }
    }
    let mut differ = |i: usize, j: usize, k: DiffKind, cmp: &mut Cmp| {
        eq[i][j] = false;
        eq[j][i] = false;
        cmp.kinds.insert(k);
    };
    for (a, &i) in compared.iter().enumerate() {
        for &j in &compared[a + 1..] {
            let (si, sj) = (&states[i], &states[j]);
            match (si, sj) {
                (LegState::Error(_), _) | (_, LegState::Error(_)) => continue,
                (LegState::Absent, LegState::Absent) => continue,
                (LegState::Present(_), LegState::Absent)
                | (LegState::Absent, LegState::Present(_)) => {
                    differ(i, j, DiffKind::Missing, &mut cmp);
                    continue;
                }
                _ => {}
            }
            let (Some(ei), Some(ej)) = (si.entry(), sj.entry()) else {
                continue;
            };
            let (mi, mj) = (&ei.node.meta, &ej.node.meta);
            if mi.kind != mj.kind {
                differ(i, j, DiffKind::Type, &mut cmp);
                continue;
            }
            let kind = mi.kind;
            if kind == Kind::File && mi.size != mj.size {
                differ(i, j, DiffKind::Size, &mut cmp);
            }
            if kind != Kind::Symlink && mi.perm != mj.perm {
                differ(i, j, DiffKind::Mode, &mut cmp);
            }
            if (mi.uid, mi.gid) != (mj.uid, mj.gid) {
                differ(i, j, DiffKind::Owner, &mut cmp);
            }
            let mtime_counts = kind != Kind::Dir || opts.compare_dir_mtime;
            if mtime_counts && mi.mtime != mj.mtime {
                differ(i, j, DiffKind::Mtime, &mut cmp);
            }
            if ei.link_target != ej.link_target {
                differ(i, j, DiffKind::SymlinkTarget, &mut cmp);
            }
            if matches!(kind, Kind::CharDev | Kind::BlockDev) && mi.rdev != mj.rdev {
                differ(i, j, DiffKind::Rdev, &mut cmp);
            }
            if ei.xattrs != ej.xattrs {
                differ(i, j, DiffKind::Xattrs, &mut cmp);
                let names: BTreeSet<&Vec<u8>> = ei.xattrs.keys().chain(ej.xattrs.keys()).collect();
                for k in names {
                    if ei.xattrs.get(k) != ej.xattrs.get(k) {
                        cmp.xattr_names.insert(k.clone());
                    }
                }
            }
            if kind != Kind::Dir {
                let links_differ = if nlink_counts {
                    mi.nlink != mj.nlink
                } else {
                    leaders[i] != leaders[j]
                };
                if links_differ {
                    differ(i, j, DiffKind::HardLinks, &mut cmp);
                }
            }
        }
    }
    // Versions: the equality relation is an intersection of equivalences, so classes are
    // well defined.
    cmp.versions = vec![usize::MAX; n];
    let mut next = 0;
    for &i in &compared {
        let same = compared
            .iter()
            .take_while(|&&j| j < i)
            .find(|&&j| eq[i][j])
            .copied();
        cmp.versions[i] = match same {
            Some(j) => cmp.versions[j],
            None => {
                next += 1;
                next - 1
            }
        };
    }
    Ok(cmp)
}

/// Reads the regular files among `states` chunk by chunk and compares them.
fn compare_content(
    ctx: &mut Ctx<'_>,
    bufs: &mut [Vec<u8>],
    states: &mut [LegState],
    leaders: &[Option<PathBuf>],
    rel: &Path,
    eq: &mut [Vec<bool>],
    cmp: &mut Cmp,
) -> Result<()> {
    let files: Vec<usize> = (0..states.len())
        .filter(|&i| {
            states[i]
                .entry()
                .is_some_and(|e| e.node.meta.kind == Kind::File)
        })
        .collect();
    if files.len() < 2 {
        return Ok(());
    }
    // Another name of an inode compared already on every leg: nothing new to read.
    let first = &leaders[files[0]];
    if first.as_deref().is_some_and(|l| l != rel) && files.iter().all(|&i| &leaders[i] == first) {
        return Ok(());
    }
    if ctx.ctl.hook.content_verified(rel) {
        // Read and found as written on every leg by the caller just now: walked (progress,
        // throttle) without reading it again.
        let max = files
            .iter()
            .filter_map(|&i| states[i].entry().map(|e| e.node.meta.size))
            .max()
            .unwrap_or(0);
        return ctx.step(max);
    }
    let mut fds = Vec::new();
    let mut live = Vec::new();
    for &i in &files {
        let e = states[i].entry().expect("a file");
        match sys::fd::reopen(e.node.fd.as_fd(), libc::O_RDONLY) {
            Ok(fd) => {
                fds.push((i, fd, e.node.meta.size));
                live.push(true);
            }
            Err(e) => states[i] = LegState::Error(e),
        }
    }
    let max_size = fds.iter().map(|f| f.2).max().unwrap_or(0);
    let chunk = ctx.chunk().min(bufs.first().map_or(0, Vec::len)) as u64;
    let mut off = 0u64;
    let mut lens = vec![0usize; fds.len()];
    while off < max_size {
        let want = chunk.min(max_size - off);
        for (k, (i, fd, size)) in fds.iter().enumerate() {
            if !live[k] {
                continue;
            }
            let len = want.min(size.saturating_sub(off)) as usize;
            match sys::fd::pread_full(fd.as_fd(), &mut bufs[*i][..len], off) {
                Ok(n) => {
                    lens[k] = n;
                    ctx.stats.bytes_read += n as u64;
                }
                Err(e) => {
                    live[k] = false;
                    states[*i] = LegState::Error(e);
                }
            }
        }
        let alive: Vec<usize> = (0..fds.len()).filter(|&k| live[k]).collect();
        for (a, &ka) in alive.iter().enumerate() {
            for &kb in &alive[a + 1..] {
                let (i, j) = (fds[ka].0, fds[kb].0);
                if !eq[i][j] {
                    continue;
                }
                let common = lens[ka].min(lens[kb]);
                if bufs[i][..common] != bufs[j][..common] {
                    cmp.kinds.insert(DiffKind::Content);
                    eq[i][j] = false;
                    eq[j][i] = false;
                } else if lens[ka] != lens[kb] {
                    // Only the length differs: that is the Size difference, not content.
                    eq[i][j] = false;
                    eq[j][i] = false;
                }
            }
        }
        // Ranges, within what every live leg has in this chunk.
        if alive.len() >= 2 {
            let common = alive.iter().map(|&k| lens[k]).min().unwrap_or(0);
            let base = fds[alive[0]].0;
            let differs = |lo: usize, hi: usize| {
                alive[1..]
                    .iter()
                    .any(|&k| bufs[fds[k].0][lo..hi] != bufs[base][lo..hi])
            };
            if differs(0, common) {
                let mut b = 0;
                while b < common {
                    let e = (b + BLOCK).min(common);
                    if differs(b, e) {
                        let mut lo = b;
                        while !differs(lo, lo + 1) {
                            lo += 1;
                        }
                        let mut hi = e;
                        while !differs(hi - 1, hi) {
                            hi -= 1;
                        }
                        push_range(cmp, off + lo as u64, off + hi as u64, ctx.opts.max_ranges);
                    }
                    b = e;
                }
            }
        }
        ctx.step(want)?;
        off += want;
    }
    Ok(())
}

fn push_range(cmp: &mut Cmp, start: u64, end: u64, max: usize) {
    let full = cmp.ranges.len() >= max.max(1);
    if let Some(last) = cmp.ranges.last_mut() {
        if last.1 == start {
            last.1 = end;
            return;
        }
        if full {
            last.1 = end;
            cmp.ranges_truncated = true;
            return;
        }
    }
    cmp.ranges.push((start, end));
}

/// The report of a difference.
pub(crate) fn difference(
    rel: &Path,
    states: &[LegState],
    leaders: &[Option<PathBuf>],
    cmp: &Cmp,
) -> Difference {
    let legs = states
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut d = LegDetail {
                compared: !matches!(s, LegState::Skip),
                present: false,
                kind: None,
                mode: 0,
                uid: 0,
                gid: 0,
                size: 0,
                mtime_sec: 0,
                mtime_nsec: 0,
                nlink: 0,
                rdev: 0,
                symlink_target: None,
                link_leader: None,
                error: None,
                version: cmp.versions.get(i).copied().unwrap_or(usize::MAX),
            };
            match s {
                LegState::Present(e) => {
                    let m = &e.node.meta;
                    d.present = true;
                    d.kind = Some(m.kind);
                    d.mode = m.perm;
                    d.uid = m.uid;
                    d.gid = m.gid;
                    d.size = m.size;
                    (d.mtime_sec, d.mtime_nsec) = m.mtime;
                    d.nlink = m.nlink;
                    d.rdev = m.rdev;
                    d.symlink_target = e
                        .link_target
                        .as_ref()
                        .map(|t| String::from_utf8_lossy(t).into_owned());
                    if m.is_linked() {
                        d.link_leader = leaders.get(i).cloned().flatten();
                    }
                }
                LegState::Error(e) => {
                    d.present = true;
                    d.error = Some(e.0);
                }
                _ => {}
            }
            d
        })
        .collect();
    Difference {
        path: rel.to_path_buf(),
        kinds: cmp.kinds.iter().copied().collect(),
        legs,
        ranges: cmp.ranges.clone(),
        ranges_truncated: cmp.ranges_truncated,
        xattrs: cmp
            .xattr_names
            .iter()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect(),
        repair: RepairOutcome::NotRequested,
    }
}

/// What differs about the one entry `path` (relative to the leg roots; `""` is the root)
/// across `legs` (at least two). `None` when every leg holds the same entry. Without a walk
/// there are no link-group leaders: the hard-link structure is compared through the link
/// counts. Progress bytes and the throttle apply to the content read.
pub fn compare_entry(
    legs: &[BorrowedFd<'_>],
    path: &Path,
    opts: &TreeOptions,
    ctl: &Control,
) -> Result<Option<Difference>> {
    if legs.len() < 2 {
        return Err(Errno::EINVAL);
    }
    node::components(path)?;
    let mut ctx = Ctx::new(opts, ctl);
    let mut states = Vec::new();
    let is_root = path.as_os_str().is_empty();
    for &root in legs {
        let st = if is_root {
            match node::open_root_node(root).and_then(|n| node::load(Place::Root, n, opts)) {
                Ok(e) => LegState::Present(e),
                Err(e) => LegState::Error(e),
            }
        } else {
            let name = sys::tree_support::cname(path.file_name().ok_or(Errno::EINVAL)?)?;
            match node::open_dir_rel(root, path.parent().unwrap_or(Path::new(""))) {
                Ok(Some(dir)) => load_state(Some(dir.fd.as_fd()), &name, opts),
                Ok(None) => LegState::Absent,
                Err(e) => LegState::Error(e),
            }
        };
        states.push(st);
    }
    let leaders = vec![None; legs.len()];
    let mut bufs = vec![vec![0u8; ctx.chunk()]; legs.len()];
    let cmp = compare_states(&mut ctx, &mut bufs, &mut states, &leaders, path, true)?;
    if cmp.kinds.is_empty() {
        return Ok(None);
    }
    Ok(Some(difference(path, &states, &leaders, &cmp)))
}
