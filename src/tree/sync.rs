//! Resync: make a target leg identical to a source leg, for the whole tree or for a list of
//! paths.

use super::copy::{self, Ctx, Fail, LinkPlan, Side, Target, R};
use super::links::{LinkMap, SourceIndex};
use super::node::{self, Kind, Meta, Node, Place};
use super::progress::{Phase, Progress};
use super::{is_race, Control, EntryError, TreeOptions};
use crate::errno::{Errno, Result};
use crate::sys;
use crate::sys::tree_support::cname;
use serde::Serialize;
use std::collections::{BTreeSet, HashSet};
use std::ffi::{CStr, OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

/// The outcome of a sync.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SyncReport {
    /// Entries looked at.
    pub entries: u64,
    /// Entries created on the target (files, directories, symlinks, nodes).
    pub created: u64,
    /// Entries changed in place (content, size, owner, mode, mtime, xattrs).
    pub updated: u64,
    /// Entries removed from the target (every entry of a removed subtree counts).
    pub removed: u64,
    /// Hard links made on the target.
    pub linked: u64,
    /// Bytes read from both legs (compare) and written to the target.
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Xattrs the target's filesystem refused (not fatal).
    pub xattrs_refused: u64,
    /// Entries skipped (source unreadable, or the tree kept changing): leg 0 = source,
    /// 1 = target. The daemon should keep the target stale if this is not empty.
    pub errors: Vec<EntryError>,
    pub cancelled: bool,
}

/// Makes the whole tree of `target` identical to `source` (both leg roots): creates what is
/// missing, replaces entries of the wrong type, removes extra entries, rewrites only the
/// differing ranges of files, sets owner, xattrs, mode and mtime, reproduces hard links as
/// links, keeps holes. The root's skipped names are left alone on both sides.
///
/// `Err(errno)`: the target failed (an I/O-class error, ENOSPC...): the daemon decides whether
/// the leg is lost. Source-side errors skip the entry (never deleting anything because of
/// them) and are listed in the report. A cancel returns the report with `cancelled` set.
pub fn sync_full(
    source: BorrowedFd<'_>,
    target: BorrowedFd<'_>,
    opts: &TreeOptions,
    ctl: &Control,
) -> Result<SyncReport> {
    let mut s = Syncer::new(source, target, opts, ctl, false);
    let p = &ctl.progress;
    p.reset();
    let r = (|| -> R<()> {
        if opts.count_first {
            p.set_phase(Phase::Counting);
            let (entries, bytes) = super::scrub::count_tree(source, opts, ctl).src()?;
            p.entries_total.store(entries, Ordering::Relaxed);
            p.bytes_total.store(bytes, Ordering::Relaxed);
        }
        p.set_phase(Phase::Running);
        s.root(true)
    })();
    s.finish(r)
}

/// Makes each of `paths` (relative to the leg roots, `""` = the root directory) identical on
/// `target` to `source`, as one entry each:
/// - a path missing on the source (or under a missing directory) is removed from the target
///   (a whole subtree if it is a directory there);
/// - a non-directory is synced like in [`sync_full`] (content by ranges, metadata); if it has
///   several names on the source, its whole link group is synced (first name, then every other
///   name linked to it), so a write through one name or a new link is reproduced;
/// - a directory gets its metadata, its extra entries removed, and its missing entries (or
///   entries of another type) created with their whole subtree; entries present on both sides
///   with the same type are not descended into (they are in the list if they changed);
/// - a path whose parent is missing on the target creates the first missing ancestor with its
///   whole subtree.
///
/// A rename arrives as its two paths and becomes a removal and a creation; order does not
/// matter, since every path ends as it is on the source now. The mtimes of the parents of the
/// listed paths are set afterwards. Errors as for [`sync_full`].
pub fn sync_paths(
    source: BorrowedFd<'_>,
    target: BorrowedFd<'_>,
    paths: &[PathBuf],
    opts: &TreeOptions,
    ctl: &Control,
) -> Result<SyncReport> {
    let mut list: Vec<PathBuf> = Vec::with_capacity(paths.len());
    for p in paths {
        node::components(p)?;
        list.push(p.components().collect());
    }
    list.sort();
    list.dedup();
    let mut s = Syncer::new(source, target, opts, ctl, true);
    let p = &ctl.progress;
    p.reset();
    p.entries_total.store(list.len() as u64, Ordering::Relaxed);
    p.set_phase(Phase::Running);
    let r = (|| -> R<()> {
        for rel in &list {
            s.ctx.check_cancel()?;
            if rel.as_os_str().is_empty() {
                s.root(false)?;
            } else {
                if let Some(first) = rel.components().next() {
                    if opts.skipped(true, first.as_os_str()) {
                        continue;
                    }
                }
                s.path(rel)?;
            }
            Progress::add(&p.entries_done, 1);
        }
        for parent in std::mem::take(&mut s.parents) {
            s.ctx.check_cancel()?;
            s.dir_meta_at(&parent)?;
        }
        Ok(())
    })();
    s.finish(r)
}

struct Syncer<'a> {
    src_root: BorrowedFd<'a>,
    tgt_root: BorrowedFd<'a>,
    ctx: Ctx<'a>,
    src_map: LinkMap,
    tgt_map: LinkMap,
    /// Incremental mode: link groups come from the source index, not from walk order.
    incremental: bool,
    index: Option<SourceIndex>,
    done_groups: HashSet<PathBuf>,
    /// Incremental mode: directories whose entries may have changed (their mtime is set last).
    parents: BTreeSet<PathBuf>,
    report: SyncReport,
}

impl<'a> Syncer<'a> {
    fn new(
        src_root: BorrowedFd<'a>,
        tgt_root: BorrowedFd<'a>,
        opts: &'a TreeOptions,
        ctl: &'a Control,
        incremental: bool,
    ) -> Syncer<'a> {
        Syncer {
            src_root,
            tgt_root,
            ctx: Ctx::new(opts, ctl),
            src_map: LinkMap::default(),
            tgt_map: LinkMap::default(),
            incremental,
            index: None,
            done_groups: HashSet::new(),
            parents: BTreeSet::new(),
            report: SyncReport::default(),
        }
    }

    fn finish(mut self, r: R<()>) -> Result<SyncReport> {
        let st = &self.ctx.stats;
        self.report.created = st.created;
        self.report.updated = st.updated;
        self.report.removed = st.removed;
        self.report.linked = st.linked;
        self.report.bytes_read = st.bytes_read;
        self.report.bytes_written = st.bytes_written;
        self.report.xattrs_refused = st.xattr_refused;
        let p = &self.ctx.ctl.progress;
        match r {
            Ok(()) => {
                p.set_phase(Phase::Done);
                Ok(self.report)
            }
            Err(Fail::Cancelled) => {
                p.set_phase(Phase::Cancelled);
                self.report.cancelled = true;
                Ok(self.report)
            }
            Err(Fail::Src(e)) | Err(Fail::Tgt(e)) => {
                p.set_phase(Phase::Failed);
                Err(e)
            }
        }
    }

    fn error(&mut self, rel: &Path, leg: usize, e: Errno) {
        let err = self.ctx.entry_error(rel, leg, e);
        self.report.errors.push(err);
    }

    /// The root: metadata (never its mtime), then (when `recurse`) the whole tree, or (not)
    /// only its direct entries' existence.
    fn root(&mut self, recurse: bool) -> R<()> {
        let rel = Path::new("");
        let sroot = node::open_root_node(self.src_root).src()?;
        let mut troot = node::open_root_node(self.tgt_root).tgt()?;
        if recurse {
            self.children(&sroot, &troot, rel)?;
        } else {
            self.shallow_children(&sroot, &troot, rel)?;
        }
        self.root_meta(&mut troot)?;
        self.report.entries += 1;
        if recurse {
            Progress::add(&self.ctx.ctl.progress.entries_done, 1);
        }
        self.ctx.ctl.hook.synced(rel);
        Ok(())
    }

    /// The roots' own metadata (mode, owner, xattrs, mtime), after everything under them.
    fn root_meta(&mut self, troot: &mut node::Node) -> R<()> {
        let hook = self.ctx.ctl.hook.clone();
        let mut res = Ok(());
        hook.with_entry(Path::new(""), &mut || {
            res = (|| {
                let src = node::load(
                    Place::Root,
                    node::open_root_node(self.src_root).src()?,
                    self.ctx.opts,
                )
                .src()?;
                troot.restat().tgt()?;
                let c = copy::sync_meta(&mut self.ctx, &src, Place::Root, troot, true, false)?;
                self.changed(c);
                Ok(())
            })()
        });
        res
    }

    fn changed(&mut self, c: bool) {
        if c {
            Progress::add(&self.ctx.ctl.progress.differences, 1);
            Progress::add(&self.ctx.ctl.progress.repaired, 1);
        }
    }

    /// Sorted union of the names of two directories (root's skipped names left out). `None`
    /// when the source cannot be listed (the error is recorded; nothing is removed).
    fn names(&mut self, sdir: &Node, tdir: &Node, rel: &Path) -> R<Option<BTreeSet<OsString>>> {
        let at_root = rel.as_os_str().is_empty();
        let src = match sys::dir::read_dir(sdir.fd.as_fd()) {
            Ok(l) => l,
            Err(e) => {
                self.error(rel, 0, e);
                return Ok(None);
            }
        };
        let tgt = sys::dir::read_dir(tdir.fd.as_fd()).tgt()?;
        let opts = self.ctx.opts;
        Ok(Some(
            src.into_iter()
                .chain(tgt)
                .map(|e| e.name)
                .filter(|n| !opts.skipped(at_root, n))
                .collect(),
        ))
    }

    /// Full sync of every entry of a directory present on both legs.
    fn children(&mut self, sdir: &Node, tdir: &Node, rel: &Path) -> R<()> {
        let Some(names) = self.names(sdir, tdir, rel)? else {
            return Ok(());
        };
        for name in names {
            self.ctx.check_cancel()?;
            self.child(sdir, tdir, &rel.join(&name), &name)?;
        }
        Ok(())
    }

    /// Incremental sync of a directory present on both legs: extra entries removed, missing
    /// ones (or of another type) created with their subtree, the others left alone.
    fn shallow_children(&mut self, sdir: &Node, tdir: &Node, rel: &Path) -> R<()> {
        let Some(names) = self.names(sdir, tdir, rel)? else {
            return Ok(());
        };
        for name in names {
            self.ctx.check_cancel()?;
            let c = cname(&name).src()?;
            let s = node::open_at(sdir.fd.as_fd(), &c).src();
            let t = node::open_at(tdir.fd.as_fd(), &c).tgt()?;
            let same = match (&s, &t) {
                (Ok(Some(s)), Some(t)) => s.meta.kind == t.meta.kind,
                _ => false,
            };
            if !same {
                self.child(sdir, tdir, &rel.join(&name), &name)?;
            }
        }
        Ok(())
    }

    /// Syncs one entry (and, for a directory, its subtree), handling per-entry errors: the
    /// source's are recorded and skipped; races are retried once; the target's stop the run.
    fn child(&mut self, sdir: &Node, tdir: &Node, rel: &Path, name: &OsStr) -> R<()> {
        let c = cname(name).src()?;
        if self.incremental {
            self.prepare_group(sdir, &c, rel)?;
        }
        let hook = self.ctx.ctl.hook.clone();
        let mut attempt = 0;
        let sub = loop {
            let mut res = Ok(None);
            hook.with_entry(rel, &mut || res = self.entry(sdir, tdir, rel, &c));
            match res {
                Ok(sub) => break sub,
                Err(Fail::Cancelled) => return Err(Fail::Cancelled),
                Err(Fail::Src(e)) | Err(Fail::Tgt(e)) if is_race(e) && attempt == 0 => {
                    attempt += 1;
                }
                Err(Fail::Src(e)) => {
                    self.error(rel, 0, e);
                    return Ok(());
                }
                Err(Fail::Tgt(e)) if is_race(e) => {
                    self.error(rel, 1, e);
                    return Ok(());
                }
                Err(f @ Fail::Tgt(_)) => return Err(f),
            }
        };
        self.report.entries += 1;
        if !self.incremental {
            Progress::add(&self.ctx.ctl.progress.entries_done, 1);
        }
        if let Some((s, t)) = sub {
            self.children(&s, &t, rel)?;
            let mut res = Ok(());
            hook.with_entry(rel, &mut || res = self.dir_meta(sdir, tdir, &c));
            match res {
                Ok(()) => {}
                Err(Fail::Cancelled) => return Err(Fail::Cancelled),
                Err(Fail::Src(e)) => self.error(rel, 0, e),
                Err(Fail::Tgt(e)) if is_race(e) => self.error(rel, 1, e),
                Err(f) => return Err(f),
            }
        }
        hook.synced(rel);
        Ok(())
    }

    /// One entry under the hook's lock. For a directory: makes it exist and returns both
    /// nodes for the descent (its metadata is set after its entries).
    fn entry(&mut self, sdir: &Node, tdir: &Node, rel: &Path, c: &CStr) -> R<Option<(Node, Node)>> {
        let tgt = Target {
            root: self.tgt_root,
            dir: tdir.fd.as_fd(),
            name: c,
        };
        let Some(sn) = node::open_at(sdir.fd.as_fd(), c).src()? else {
            if node::open_at(tdir.fd.as_fd(), c).tgt()?.is_some() {
                copy::remove_entry(&mut self.ctx, tdir.fd.as_fd(), c)?;
                self.changed(true);
            }
            return Ok(None);
        };
        let existing = node::open_at(tdir.fd.as_fd(), c).tgt()?;
        if sn.meta.kind == Kind::Dir {
            let (t, created) = copy::ensure_dir(&mut self.ctx, &tgt, existing)?;
            self.changed(created);
            return Ok(Some((sn, t)));
        }
        let src = node::load(
            Place::Child {
                dir: sdir.fd.as_fd(),
                name: c,
            },
            sn,
            self.ctx.opts,
        )
        .src()?;
        let (plan, leader) = self.plan(rel, &src.node.meta, existing.as_ref().map(|n| &n.meta))?;
        let (t, changed) = copy::sync_nondir(&mut self.ctx, &src, &tgt, plan)?;
        self.tgt_map
            .assign(&t.meta, &leader, src.node.meta.is_linked());
        self.changed(changed);
        Ok(None)
    }

    /// The directory `sdir/c`'s metadata (mtime included) onto `tdir/c`.
    fn dir_meta(&mut self, sdir: &Node, tdir: &Node, c: &CStr) -> R<()> {
        let Some(sn) = node::open_at(sdir.fd.as_fd(), c).src()? else {
            return Ok(());
        };
        if sn.meta.kind != Kind::Dir {
            return Ok(());
        }
        let place = Place::Child {
            dir: sdir.fd.as_fd(),
            name: c,
        };
        let src = node::load(place, sn, self.ctx.opts).src()?;
        let Some(mut t) = node::open_at(tdir.fd.as_fd(), c).tgt()? else {
            return Ok(());
        };
        if t.meta.kind != Kind::Dir {
            return Ok(());
        }
        let tplace = Place::Child {
            dir: tdir.fd.as_fd(),
            name: c,
        };
        let changed = copy::sync_meta(&mut self.ctx, &src, tplace, &mut t, true, false)?;
        self.changed(changed);
        Ok(())
    }

    /// [`Syncer::dir_meta`] for a path (incremental: the parents of the listed paths).
    fn dir_meta_at(&mut self, rel: &Path) -> R<()> {
        let (Some(name), Some(parent)) = (rel.file_name(), rel.parent()) else {
            let mut troot = node::open_root_node(self.tgt_root).tgt()?;
            return self.root_meta(&mut troot);
        };
        let (Some(sp), Some(tp)) = (
            node::open_dir_rel(self.src_root, parent).src()?,
            node::open_dir_rel(self.tgt_root, parent).tgt()?,
        ) else {
            return Ok(());
        };
        let c = cname(name).src()?;
        let hook = self.ctx.ctl.hook.clone();
        let mut res = Ok(());
        hook.with_entry(rel, &mut || res = self.dir_meta(&sp, &tp, &c));
        match res {
            Err(Fail::Src(e)) => {
                self.error(rel, 0, e);
                Ok(())
            }
            Err(Fail::Tgt(e)) if is_race(e) => {
                self.error(rel, 1, e);
                Ok(())
            }
            r => r,
        }
    }

    /// How the non-directory `rel` relates to its link group, and that group's leader.
    fn plan(&mut self, rel: &Path, s: &Meta, t: Option<&Meta>) -> R<(LinkPlan, PathBuf)> {
        let own = rel.to_path_buf();
        if !self.incremental {
            let leader = self.src_map.leader_of(rel, s);
            if leader != rel {
                return Ok((LinkPlan::LinkTo(leader.clone()), leader));
            }
            let must_break = t.is_some_and(|t| self.tgt_map.taken_by_other(t, rel));
            return Ok((LinkPlan::Own { must_break }, own));
        }
        // Incremental: no walk order to rely on; an inode shared on the target may have names
        // we will not visit, so it is never changed in place unless its group is intact.
        let tgt_linked = t.is_some_and(Meta::is_linked);
        if !s.is_linked() {
            return Ok((
                LinkPlan::Own {
                    must_break: tgt_linked,
                },
                own,
            ));
        }
        let names = self.index()?.names_of(s).map(<[PathBuf]>::to_vec);
        let Some(names) = names.filter(|n| n.iter().any(|x| x == rel)) else {
            return Ok((
                LinkPlan::Own {
                    must_break: tgt_linked,
                },
                own,
            ));
        };
        let leader = names[0].clone();
        if leader != rel {
            return Ok((LinkPlan::LinkTo(leader.clone()), leader));
        }
        let intact = t.is_some_and(|t| {
            t.kind == s.kind
                && t.nlink == s.nlink
                && names[1..].iter().all(|n| {
                    matches!(node::open_rel(self.tgt_root, n), Ok(Some(x)) if x.meta.id == t.id)
                })
        });
        Ok((
            LinkPlan::Own {
                must_break: tgt_linked && !intact,
            },
            own,
        ))
    }

    fn index(&mut self) -> R<&SourceIndex> {
        if self.index.is_none() {
            let ctl = self.ctx.ctl;
            let idx =
                SourceIndex::build(self.src_root, self.ctx.opts, &|| ctl.cancelled()).src()?;
            self.index = Some(idx);
        }
        Ok(self.index.as_ref().expect("just built"))
    }

    /// Incremental mode, before an entry: if it is a multiply-linked file, sync its group's
    /// leader first and then link every other name of the group, each as its own entry.
    fn prepare_group(&mut self, sdir: &Node, c: &CStr, rel: &Path) -> R<()> {
        let Ok(Some(sn)) = node::open_at(sdir.fd.as_fd(), c) else {
            return Ok(());
        };
        if !sn.meta.is_linked() {
            return Ok(());
        }
        let Some(names) = self.index()?.names_of(&sn.meta).map(<[PathBuf]>::to_vec) else {
            return Ok(());
        };
        let leader = names[0].clone();
        if !self.done_groups.insert(leader.clone()) {
            return Ok(());
        }
        if leader != rel {
            self.path(&leader)?;
        }
        for n in &names[1..] {
            if n != rel {
                self.path(n)?;
            }
        }
        Ok(())
    }

    /// Incremental sync of one listed path.
    fn path(&mut self, rel: &Path) -> R<()> {
        let (Some(name), Some(parent)) = (rel.file_name(), rel.parent()) else {
            return self.root(false);
        };
        self.parents.insert(parent.to_path_buf());
        let sp = match node::open_dir_rel(self.src_root, parent) {
            Ok(sp) => sp,
            Err(e) => {
                self.error(rel, 0, e);
                return Ok(());
            }
        };
        let tp = node::open_dir_rel(self.tgt_root, parent).tgt()?;
        match (sp, tp) {
            (_, None) if !parent.as_os_str().is_empty() && self.src_has_dir(parent) => {
                // A new directory on the way: create the first missing one, whole.
                let mut anc = PathBuf::new();
                for comp in parent.components() {
                    anc.push(comp);
                    if node::open_dir_rel(self.tgt_root, &anc).tgt()?.is_none() {
                        return self.path(&anc);
                    }
                }
                Ok(())
            }
            (None, Some(tp)) => {
                // Gone on the source (with a parent): gone on the target.
                let c = cname(name).src()?;
                let hook = self.ctx.ctl.hook.clone();
                let mut res = Ok(());
                hook.with_entry(rel, &mut || {
                    res = copy::remove_entry(&mut self.ctx, tp.fd.as_fd(), &c);
                });
                res?;
                hook.synced(rel);
                Ok(())
            }
            (Some(sp), Some(tp)) => {
                let c = cname(name).src()?;
                let is_dir_on_both = matches!(
                    (node::open_at(sp.fd.as_fd(), &c), node::open_at(tp.fd.as_fd(), &c)),
                    (Ok(Some(s)), Ok(Some(t))) if s.meta.kind == Kind::Dir && t.meta.kind == Kind::Dir
                );
                if !is_dir_on_both {
                    return self.child(&sp, &tp, rel, name);
                }
                let (Ok(Some(sd)), Ok(Some(td))) = (
                    node::open_at(sp.fd.as_fd(), &c),
                    node::open_at(tp.fd.as_fd(), &c),
                ) else {
                    return Ok(());
                };
                self.shallow_children(&sd, &td, rel)?;
                let hook = self.ctx.ctl.hook.clone();
                let mut res = Ok(());
                hook.with_entry(rel, &mut || res = self.dir_meta(&sp, &tp, &c));
                match res {
                    Err(Fail::Src(e)) => self.error(rel, 0, e),
                    Err(Fail::Tgt(e)) if is_race(e) => self.error(rel, 1, e),
                    r => r?,
                }
                self.report.entries += 1;
                hook.synced(rel);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn src_has_dir(&self, rel: &Path) -> bool {
        matches!(node::open_dir_rel(self.src_root, rel), Ok(Some(_)))
    }
}
