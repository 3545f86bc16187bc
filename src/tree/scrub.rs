//! The scrub: walk N legs in step (sorted union of names, one entry at a time), report every
//! entry whose copies differ, and optionally repair it from the good copy.

use super::compare::{self, Cmp, LegState, RepairOutcome};
use super::copy::{self, Ctx, Fail, LinkPlan, Target};
use super::links::LinkMap;
use super::node::{self, Kind, Place};
use super::progress::{Phase, Progress};
use super::{Control, Difference, EntryError, TreeOptions, CANCELLED};
use crate::errno::{Errno, Result};
use crate::sys;
use serde::Serialize;
use std::collections::{BTreeSet, HashSet};
use std::ffi::{CStr, OsString};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

/// Whether and how a scrub repairs what it finds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repair {
    /// Report only.
    None,
    /// The version held by the most legs wins (it must be held by at least two, and by more
    /// legs than any other version); otherwise the difference is left as a tie. With two legs
    /// this never repairs anything.
    Majority,
    /// Leg `i` (an index into the legs given to the scrub) holds the good copy.
    FromLeg(usize),
}

/// The outcome of a scrub.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ScrubReport {
    pub entries: u64,
    pub differences: u64,
    pub repaired: u64,
    /// Differences left as they are (ties, failed repairs).
    pub unrepaired: u64,
    /// The differences, up to [`TreeOptions::max_reported`].
    pub listed: Vec<Difference>,
    pub errors: Vec<EntryError>,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub cancelled: bool,
}

/// Compares every entry of `legs` (at least two leg roots); with `repair`, makes the copies
/// that differ identical to the good one. Returns `Err` only for bad arguments or an
/// unreadable leg root; errors on single entries are counted, listed and passed to the hook,
/// and the scrub goes on. A cancel returns the report so far with `cancelled` set.
pub fn scrub(
    legs: &[BorrowedFd<'_>],
    opts: &TreeOptions,
    repair: Repair,
    ctl: &Control,
) -> Result<ScrubReport> {
    if legs.len() < 2 {
        return Err(Errno::EINVAL);
    }
    if let Repair::FromLeg(k) = repair {
        if k >= legs.len() {
            return Err(Errno::EINVAL);
        }
    }
    let p = &ctl.progress;
    p.reset();
    let mut s = Scrub {
        legs,
        ctx: Ctx::new(opts, ctl),
        bufs: Vec::new(),
        maps: (0..legs.len()).map(|_| LinkMap::default()).collect(),
        repair,
        report: ScrubReport::default(),
    };
    s.bufs = vec![vec![0u8; s.ctx.chunk()]; legs.len()];
    let r = (|| -> Result<()> {
        if opts.count_first {
            p.set_phase(Phase::Counting);
            let (entries, bytes) = count_tree(legs[0], opts, ctl)?;
            p.entries_total
                .store(entries, std::sync::atomic::Ordering::Relaxed);
            p.bytes_total
                .store(bytes, std::sync::atomic::Ordering::Relaxed);
        }
        p.set_phase(Phase::Running);
        s.root()
    })();
    s.report.bytes_read = s.ctx.stats.bytes_read;
    s.report.bytes_written = s.ctx.stats.bytes_written;
    match r {
        Ok(()) => {
            p.set_phase(Phase::Done);
            Ok(s.report)
        }
        Err(e) if e == CANCELLED => {
            p.set_phase(Phase::Cancelled);
            s.report.cancelled = true;
            Ok(s.report)
        }
        Err(e) => {
            p.set_phase(Phase::Failed);
            Err(e)
        }
    }
}

struct Scrub<'a> {
    legs: &'a [BorrowedFd<'a>],
    ctx: Ctx<'a>,
    bufs: Vec<Vec<u8>>,
    maps: Vec<LinkMap>,
    repair: Repair,
    report: ScrubReport,
}

impl Scrub<'_> {
    fn root(&mut self) -> Result<()> {
        let rel = Path::new("");
        let roots = self
            .legs
            .iter()
            .map(|&l| node::open_root_node(l))
            .collect::<Result<Vec<_>>>()?;
        if let Some(d) = self.root_entry()? {
            self.record(d);
        }
        Progress::add(&self.ctx.ctl.progress.entries_done, 1);
        let dirs: Vec<Option<BorrowedFd<'_>>> = roots.iter().map(|n| Some(n.fd.as_fd())).collect();
        let repaired_before = self.report.repaired;
        self.dir(&dirs, rel)?;
        if self.report.repaired != repaired_before
            && self.repair != Repair::None
            && self.ctx.opts.compare_dir_mtime
        {
            // Repairs inside moved the roots' mtimes on the repaired legs.
            self.uncounted(|s| s.root_entry().map(drop))?;
        }
        self.ctx.ctl.hook.synced(rel);
        Ok(())
    }

    /// Compares the leg roots' own metadata (mode, owner, xattrs, mtime) and repairs it as
    /// asked; the difference, if any.
    fn root_entry(&mut self) -> Result<Option<Difference>> {
        let opts = self.ctx.opts;
        let rel = Path::new("");
        let mut states = Vec::new();
        for &l in self.legs {
            states.push(
                match node::open_root_node(l).and_then(|n| node::load(Place::Root, n, opts)) {
                    Ok(e) => LegState::Present(e),
                    Err(e) => LegState::Error(e),
                },
            );
        }
        let leaders = vec![None; self.legs.len()];
        let cmp = self.compare(&mut states, &leaders, rel)?;
        self.note_errors(rel, &states);
        if cmp.kinds.is_empty() {
            return Ok(None);
        }
        let mut d = compare::difference(rel, &states, &leaders, &cmp);
        d.repair = self.repair_with(rel, &states, &cmp, |s, g, b| {
            let (Some(ge), Some(_)) = (states[g].entry(), states[b].entry()) else {
                return Err(Fail::Tgt(Errno::EIO));
            };
            let mut t = node::open_root_node(s.legs[b]).map_err(Fail::Tgt)?;
            copy::sync_meta(&mut s.ctx, ge, Place::Root, &mut t, true, false).map(drop)
        })?;
        Ok(Some(d))
    }

    fn dir(&mut self, dirs: &[Option<BorrowedFd<'_>>], rel: &Path) -> Result<()> {
        let at_root = rel.as_os_str().is_empty();
        let mut view = dirs.to_vec();
        let mut names: BTreeSet<OsString> = BTreeSet::new();
        for (i, d) in dirs.iter().enumerate() {
            let Some(d) = d else { continue };
            match sys::dir::read_dir(*d) {
                Ok(list) => names.extend(
                    list.into_iter()
                        .map(|e| e.name)
                        .filter(|n| !self.ctx.opts.skipped(at_root, n)),
                ),
                Err(e) => {
                    self.error(rel, i, e);
                    view[i] = None;
                }
            }
        }
        for name in names {
            if self.ctx.ctl.cancelled() {
                return Err(CANCELLED);
            }
            self.entry(&view, &rel.join(&name), &name)?;
        }
        Ok(())
    }

    fn entry(
        &mut self,
        dirs: &[Option<BorrowedFd<'_>>],
        rel: &Path,
        name: &std::ffi::OsStr,
    ) -> Result<()> {
        let cname = sys::tree_support::cname(name)?;
        let hook = self.ctx.ctl.hook.clone();
        let mut sub: Vec<Option<node::Node>> = Vec::new();
        let mut res = Ok(());
        hook.with_entry(rel, &mut || {
            res = self.entry_locked(dirs, rel, &cname, &mut sub)
        });
        res?;
        Progress::add(&self.ctx.ctl.progress.entries_done, 1);
        if sub.iter().any(Option::is_some) {
            let repaired_before = self.report.repaired;
            let view: Vec<Option<BorrowedFd<'_>>> = sub
                .iter()
                .map(|n| n.as_ref().map(|n| n.fd.as_fd()))
                .collect();
            self.dir(&view, rel)?;
            if self.report.repaired != repaired_before
                && self.repair != Repair::None
                && self.ctx.opts.compare_dir_mtime
            {
                // Repairs inside moved this directory's mtime on the repaired legs.
                let mut res = Ok(());
                hook.with_entry(rel, &mut || res = self.realign_dir(dirs, rel, &cname));
                res?;
            }
        }
        hook.synced(rel);
        Ok(())
    }

    fn entry_locked(
        &mut self,
        dirs: &[Option<BorrowedFd<'_>>],
        rel: &Path,
        cname: &CStr,
        sub: &mut Vec<Option<node::Node>>,
    ) -> Result<()> {
        let opts = self.ctx.opts;
        let n = self.legs.len();
        let mut states: Vec<LegState> = (0..n)
            .map(|i| compare::load_state(dirs[i], cname, opts))
            .collect();
        let leaders: Vec<Option<PathBuf>> = states
            .iter()
            .enumerate()
            .map(|(i, s)| {
                s.entry()
                    .filter(|e| e.node.meta.is_linked())
                    .map(|e| self.maps[i].peek(rel, &e.node.meta))
            })
            .collect();
        let cmp = self.compare(&mut states, &leaders, rel)?;
        self.report.entries += 1;
        self.note_errors(rel, &states);
        let mut repaired: HashSet<usize> = HashSet::new();
        let mut good_leader = None;
        if !cmp.kinds.is_empty() {
            let mut d = compare::difference(rel, &states, &leaders, &cmp);
            d.repair = self.repair_with(rel, &states, &cmp, |s, g, b| {
                s.fix(dirs, rel, cname, g, b, &states, &leaders)
            })?;
            if let RepairOutcome::Repaired { from, legs } = &d.repair {
                repaired.extend(legs.iter().copied());
                good_leader = Some(leaders[*from].clone().unwrap_or_else(|| rel.to_path_buf()));
            }
            self.record(d);
        }
        // Link bookkeeping and the directories to descend into.
        sub.clear();
        for i in 0..n {
            let Some(d) = dirs[i] else {
                sub.push(None);
                continue;
            };
            if repaired.contains(&i) {
                let now = node::open_at(d, cname).ok().flatten();
                if let (Some(nd), Some(gl)) = (&now, &good_leader) {
                    self.maps[i].assign(&nd.meta, gl, true);
                }
                sub.push(now.filter(|nd| nd.meta.kind == Kind::Dir));
            } else {
                let st = std::mem::replace(&mut states[i], LegState::Absent);
                match st {
                    LegState::Present(e) => {
                        self.maps[i].leader_of(rel, &e.node.meta);
                        sub.push(Some(e.node).filter(|nd| nd.meta.kind == Kind::Dir));
                    }
                    _ => sub.push(None),
                }
            }
        }
        Ok(())
    }

    /// Chooses the good leg and runs `fix(self, good, bad)` for every other version.
    /// Compares the legs' copies of `rel`. Hard links are compared by the link-group
    /// leaders the walk found (`leaders`), not by link counts.
    fn compare(
        &mut self,
        states: &mut [LegState],
        leaders: &[Option<PathBuf>],
        rel: &Path,
    ) -> Result<Cmp> {
        compare::compare_states(&mut self.ctx, &mut self.bufs, states, leaders, rel, false)
    }

    fn repair_with(
        &mut self,
        rel: &Path,
        states: &[LegState],
        cmp: &Cmp,
        mut fix: impl FnMut(&mut Self, usize, usize) -> copy::R<()>,
    ) -> Result<RepairOutcome> {
        let readable = |i: usize| matches!(states[i], LegState::Present(_) | LegState::Absent);
        let good = match self.repair {
            Repair::None => return Ok(RepairOutcome::NotRequested),
            Repair::FromLeg(k) => match &states[k] {
                LegState::Present(_) | LegState::Absent => Some(k),
                LegState::Error(e) => {
                    self.report.unrepaired += 1;
                    return Ok(RepairOutcome::Failed { leg: k, errno: e.0 });
                }
                LegState::Skip => None,
            },
            Repair::Majority => {
                let mut counts: Vec<(usize, usize)> = Vec::new(); // (version, count)
                for i in (0..states.len()).filter(|&i| readable(i)) {
                    let v = cmp.versions[i];
                    match counts.iter_mut().find(|(cv, _)| *cv == v) {
                        Some(c) => c.1 += 1,
                        None => counts.push((v, 1)),
                    }
                }
                let max = counts.iter().map(|c| c.1).max().unwrap_or(0);
                let winners: Vec<usize> =
                    counts.iter().filter(|c| c.1 == max).map(|c| c.0).collect();
                if max >= 2 && winners.len() == 1 {
                    (0..states.len()).find(|&i| readable(i) && cmp.versions[i] == winners[0])
                } else {
                    None
                }
            }
        };
        let Some(g) = good else {
            self.report.unrepaired += 1;
            return Ok(RepairOutcome::Tie);
        };
        let gv = cmp.versions[g];
        let bad: Vec<usize> = (0..states.len())
            .filter(|&i| !matches!(states[i], LegState::Skip) && cmp.versions[i] != gv)
            .collect();
        for &b in &bad {
            match fix(self, g, b) {
                Ok(()) => {}
                Err(Fail::Cancelled) => return Err(CANCELLED),
                Err(Fail::Src(e)) => {
                    self.error(rel, g, e);
                    self.report.unrepaired += 1;
                    return Ok(RepairOutcome::Failed { leg: g, errno: e.0 });
                }
                Err(Fail::Tgt(e)) => {
                    self.error(rel, b, e);
                    self.report.unrepaired += 1;
                    return Ok(RepairOutcome::Failed { leg: b, errno: e.0 });
                }
            }
        }
        self.report.repaired += 1;
        Progress::add(&self.ctx.ctl.progress.repaired, 1);
        Ok(RepairOutcome::Repaired { from: g, legs: bad })
    }

    /// Makes leg `b`'s entry identical to leg `g`'s.
    #[allow(clippy::too_many_arguments)]
    fn fix(
        &mut self,
        dirs: &[Option<BorrowedFd<'_>>],
        rel: &Path,
        cname: &CStr,
        g: usize,
        b: usize,
        states: &[LegState],
        leaders: &[Option<PathBuf>],
    ) -> copy::R<()> {
        let Some(bdir) = dirs[b] else {
            return Ok(());
        };
        let tgt = Target {
            root: self.legs[b],
            dir: bdir,
            name: cname,
        };
        let ctx = &mut self.ctx;
        match &states[g] {
            LegState::Absent => copy::remove_entry(ctx, bdir, cname),
            LegState::Present(e) if e.node.meta.kind == Kind::Dir => {
                let existing = node::open_at(bdir, cname).map_err(Fail::Tgt)?;
                let (mut t, _) = copy::ensure_dir(ctx, &tgt, existing)?;
                let place = Place::Child {
                    dir: bdir,
                    name: cname,
                };
                let set_mtime = ctx.opts.compare_dir_mtime;
                copy::sync_meta(ctx, e, place, &mut t, set_mtime, false).map(drop)
            }
            LegState::Present(e) => {
                if matches!(states[b], LegState::Error(_)) {
                    // An unreadable copy is not compared again: it is replaced.
                    copy::remove_entry(ctx, bdir, cname)?;
                }
                let lg = leaders[g].clone().unwrap_or_else(|| rel.to_path_buf());
                let plan = if lg != rel {
                    LinkPlan::LinkTo(lg)
                } else {
                    let taken = states[b]
                        .entry()
                        .is_some_and(|be| self.maps[b].taken_by_other(&be.node.meta, rel));
                    LinkPlan::Own { must_break: taken }
                };
                copy::sync_nondir(ctx, e, &tgt, plan).map(drop)
            }
            _ => Ok(()),
        }
    }

    /// After repairs inside a directory: give its copies the good leg's mtime again.
    fn realign_dir(
        &mut self,
        dirs: &[Option<BorrowedFd<'_>>],
        rel: &Path,
        cname: &CStr,
    ) -> Result<()> {
        let opts = self.ctx.opts;
        let mut states: Vec<LegState> = (0..self.legs.len())
            .map(|i| compare::load_state(dirs[i], cname, opts))
            .collect();
        let leaders = vec![None; self.legs.len()];
        let cmp = self.compare(&mut states, &leaders, rel)?;
        if cmp.kinds.is_empty() {
            return Ok(());
        }
        self.uncounted(|s| {
            s.repair_with(rel, &states, &cmp, |s, g, b| {
                s.fix(dirs, rel, cname, g, b, &states, &leaders)
            })
            .map(drop)
        })
    }

    /// Runs `repair` without counting what it repairs: a directory's mtime moved by the
    /// repairs below it is not a difference of its own, but their consequence.
    fn uncounted(&mut self, repair: impl FnOnce(&mut Self) -> Result<()>) -> Result<()> {
        let (rep, unrep) = (self.report.repaired, self.report.unrepaired);
        repair(self)?;
        let fixed = self.report.repaired - rep;
        self.report.repaired = rep;
        self.report.unrepaired = unrep;
        self.ctx
            .ctl
            .progress
            .repaired
            .fetch_sub(fixed, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    fn record(&mut self, d: Difference) {
        self.report.differences += 1;
        Progress::add(&self.ctx.ctl.progress.differences, 1);
        self.ctx.ctl.hook.difference(&d);
        if self.report.listed.len() < self.ctx.opts.max_reported {
            self.report.listed.push(d);
        }
    }

    fn note_errors(&mut self, rel: &Path, states: &[LegState]) {
        for (i, s) in states.iter().enumerate() {
            if let LegState::Error(e) = s {
                self.error(rel, i, *e);
            }
        }
    }

    fn error(&mut self, rel: &Path, leg: usize, e: Errno) {
        let err = self.ctx.entry_error(rel, leg, e);
        self.report.errors.push(err);
    }
}

/// Entries and file bytes under `root` (each multiply-linked inode's bytes once), by a
/// metadata-only walk. Unreadable directories are skipped.
pub(crate) fn count_tree(
    root: BorrowedFd<'_>,
    opts: &TreeOptions,
    ctl: &Control,
) -> Result<(u64, u64)> {
    fn walk(
        dir: BorrowedFd<'_>,
        at_root: bool,
        opts: &TreeOptions,
        ctl: &Control,
        seen: &mut HashSet<node::InodeId>,
        acc: &mut (u64, u64),
    ) -> Result<()> {
        let Ok(list) = sys::dir::read_dir(dir) else {
            return Ok(());
        };
        for e in list {
            if ctl.cancelled() {
                return Err(CANCELLED);
            }
            if opts.skipped(at_root, &e.name) {
                continue;
            }
            let Ok(name) = sys::tree_support::cname(&e.name) else {
                continue;
            };
            let Ok(Some(n)) = node::open_at(dir, &name) else {
                continue;
            };
            acc.0 += 1;
            match n.meta.kind {
                Kind::Dir => walk(n.fd.as_fd(), false, opts, ctl, seen, acc)?,
                Kind::File if n.meta.nlink <= 1 || seen.insert(n.meta.id) => acc.1 += n.meta.size,
                _ => {}
            }
        }
        Ok(())
    }
    let mut acc = (1, 0);
    let mut seen = HashSet::new();
    walk(root, true, opts, ctl, &mut seen, &mut acc)?;
    Ok(acc)
}
