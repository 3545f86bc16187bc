//! The core's live objects as the recovery sees them ([`LiveObjects`]): attaching a leg that
//! has joined to every inode the kernel holds and every open file, and letting go of a leg
//! that is out of the mirror.

use super::handle::HandleTable;
use super::inode::InodeTable;
use crate::errno::{Errno, Result};
use crate::leg::LegIdx;
use crate::mirror::Mirror;
use crate::recovery::LiveObjects;
use crate::sys;
use std::os::fd::AsFd;
use std::sync::Arc;

/// The inode and handle tables, shared with the core.
pub(super) struct Live {
    pub mirror: Arc<Mirror>,
    pub inodes: Arc<InodeTable>,
    pub handles: Arc<HandleTable>,
}

impl LiveObjects for Live {
    /// For each live regular file among `inos` that has checksums: each in-sync copy's ctime
    /// now. A copy that cannot be looked at loses its stamp (not known, rather than wrong).
    fn stamp(&self, inos: &[u64]) {
        let ig = self.mirror.integrity();
        for &ino in inos {
            let Ok(inode) = self.inodes.get(ino) else {
                continue;
            };
            if !inode.is_regular() {
                continue;
            }
            let id = match &*inode.sums.lock() {
                super::inode::Sums::Covered(f) => f.id,
                _ => match inode
                    .fd(self.mirror.metadata_leg())
                    .ok()
                    .and_then(|fd| crate::integrity::id_of(fd.as_fd()))
                {
                    Some(id) => id,
                    None => continue,
                },
            };
            for leg in self.mirror.in_sync_legs() {
                if !inode.has_leg(leg) {
                    continue;
                }
                let st = inode.fd(leg).and_then(|fd| sys::fd::fstat(fd.as_fd()));
                ig.set_stamp(leg, id, st.ok().map(|st| crate::integrity::ctime_of(&st)));
            }
        }
    }

    /// Gives every live inode and open file its copy on `target` (which holds the same tree as
    /// the metadata leg now), found by the inode's path on the metadata leg, one component at
    /// a time without following symlinks. An open file gets a descriptor on the leg's copy,
    /// opened with its flags minus `O_TRUNC`/`O_EXCL`/`O_CREAT` (an old one, from before the
    /// leg left, may name a file the resync replaced).
    fn attach_leg(&self, target: LegIdx) -> Result<()> {
        let leg = self.mirror.leg(target);
        let leg_root = leg.root()?;
        let root = sys::fd::reopen(leg_root.as_fd(), libc::O_PATH | libc::O_DIRECTORY)?;
        let report = self.inodes.attach_leg(target, root, |inode| {
            let Some(rel) = super::relpath(&self.mirror, inode) else {
                return Ok(None);
            };
            if rel == sys::fd::ROOT_REL {
                return Ok(None);
            }
            match sys::fd::open_beneath(leg_root.as_fd(), &rel) {
                Ok(fd) => Ok(Some(fd)),
                Err(Errno::ENOENT) => Ok(None),
                Err(e) => Err(e),
            }
        })?;
        for h in self.handles.open_files() {
            if !h.inode.has_leg(target) {
                h.attach(target, None);
                continue;
            }
            let path_fd = h.inode.fd(target)?;
            let opened =
                super::handle::open_maybe_direct(h.flags, |f| sys::fd::reopen(path_fd.as_fd(), f))?;
            h.attach(target, Some(opened));
        }
        log::info!(
            "leg {target} attached to {} live object(s) ({} deleted while open left without it)",
            report.attached,
            report.unresolved
        );
        Ok(())
    }

    /// Before letting go of `leg`, every live object still to be found on a quiet leg is
    /// found there, by its path on `leg` if no other leg has it (the path is the kernel's
    /// memory of the descriptor, read without touching the leg's device).
    fn detach_leg(&self, leg: LegIdx) {
        let lazy_legs: Vec<LegIdx> = self
            .mirror
            .in_sync_legs()
            .into_iter()
            .filter(|&l| self.mirror.leg(l).quiet)
            .collect();
        if !lazy_legs.is_empty() {
            for inode in self.inodes.live_inodes() {
                for &l in &lazy_legs {
                    if inode.lazy_on(l) {
                        if let Err(e) = inode.fd(l) {
                            log::warn!("inode {}: not found on quiet leg {l}: {e}", inode.ino);
                        }
                    }
                }
            }
        }
        self.inodes.detach_leg(leg);
        let open: Vec<_> = self
            .handles
            .open_files()
            .iter()
            .filter_map(|h| h.attach(leg, None))
            .collect();
        super::handle::close_elsewhere(leg, open);
    }
}
