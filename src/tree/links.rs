//! Hard-link bookkeeping.
//!
//! The *leader* of a link group is its first name in walk order (sorted by components, the
//! order of a depth-first walk over sorted names). During a walk each leg keeps a [`LinkMap`]:
//! inode → leader of the group that inode stands for. On a leg that is only read, the first
//! path seen is the leader; on a leg being repaired, the map records what the engine made of
//! each inode, so that an inode is never updated in place for one group when it already
//! stands for another.
//!
//! An incremental sync does not walk everything, so it asks a [`SourceIndex`] instead: all the
//! names of every multiply-linked inode of the source, built by one metadata walk the first
//! time a listed entry turns out to have several names.

use super::node::{self, InodeId, Kind, Meta};
use super::TreeOptions;
use crate::errno::Result;
use crate::sys;
use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

/// inode → leader path, for non-directories with more than one name.
#[derive(Default, Debug)]
pub(crate) struct LinkMap {
    map: HashMap<InodeId, PathBuf>,
}

impl LinkMap {
    /// The leader of `rel` on a leg that is read: the first path seen with this inode
    /// (recorded now if `rel` is the first).
    pub fn leader_of(&mut self, rel: &Path, m: &Meta) -> PathBuf {
        if !m.is_linked() {
            return rel.to_path_buf();
        }
        self.map
            .entry(m.id)
            .or_insert_with(|| rel.to_path_buf())
            .clone()
    }

    /// What the inode `m` stands for, without recording anything.
    pub fn peek(&self, rel: &Path, m: &Meta) -> PathBuf {
        if !m.is_linked() {
            return rel.to_path_buf();
        }
        self.map
            .get(&m.id)
            .cloned()
            .unwrap_or_else(|| rel.to_path_buf())
    }

    /// The inode already stands for a group other than `leader`.
    pub fn taken_by_other(&self, m: &Meta, leader: &Path) -> bool {
        m.is_linked() && self.map.get(&m.id).is_some_and(|l| l != leader)
    }

    /// Records that the inode `m` now stands for the group led by `leader`.
    pub fn assign(&mut self, m: &Meta, leader: &Path, force: bool) {
        if m.kind != Kind::Dir && (force || m.nlink > 1) {
            self.map.insert(m.id, leader.to_path_buf());
        }
    }
}

/// Every name (in walk order) of every multiply-linked non-directory of a leg.
#[derive(Default, Debug)]
pub(crate) struct SourceIndex {
    names: HashMap<InodeId, Vec<PathBuf>>,
}

impl SourceIndex {
    /// Walks the whole leg (metadata only, skipping the root's skipped names).
    pub fn build(
        root: BorrowedFd<'_>,
        opts: &TreeOptions,
        cancel: &dyn Fn() -> bool,
    ) -> Result<SourceIndex> {
        let mut idx = SourceIndex::default();
        let root = node::open_root_node(root)?;
        idx.walk(root.fd.as_fd(), Path::new(""), opts, cancel)?;
        for v in idx.names.values_mut() {
            v.sort();
        }
        Ok(idx)
    }

    fn walk(
        &mut self,
        dir: BorrowedFd<'_>,
        rel: &Path,
        opts: &TreeOptions,
        cancel: &dyn Fn() -> bool,
    ) -> Result<()> {
        let mut entries = match sys::dir::read_dir(dir) {
            Ok(e) => e,
            Err(e) if super::is_race(e) => return Ok(()),
            Err(e) => return Err(e),
        };
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        for e in entries {
            if cancel() {
                return Err(super::CANCELLED);
            }
            if opts.skipped(rel.as_os_str().is_empty(), &e.name) {
                continue;
            }
            let name = sys::tree_support::cname(&e.name)?;
            let Some(n) = node::open_at(dir, &name)? else {
                continue;
            };
            let path = rel.join(&e.name);
            if n.meta.kind == Kind::Dir {
                self.walk(n.fd.as_fd(), &path, opts, cancel)?;
            } else if n.meta.nlink > 1 {
                self.names.entry(n.meta.id).or_default().push(path);
            }
        }
        Ok(())
    }

    /// All the names of the inode `m` (sorted; the first is the leader), if it was seen.
    pub fn names_of(&self, m: &Meta) -> Option<&[PathBuf]> {
        self.names.get(&m.id).map(Vec::as_slice)
    }
}
