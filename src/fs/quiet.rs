//! Quiet legs (`PATH=quiet`): lookups, listings and attribute reads leave them alone while
//! another in-sync leg can answer, so that their disks see only writes. An object looked up
//! without them is *lazy* there (`Inode::lazy_on`); the first change that needs its copy on
//! such a leg finds it by the object's path on a leg where it was found, one component at a
//! time without following symlinks, as a leg joining after its resync does.
//!
//! A path read from one leg names the object on the quiet leg only if no change of names is
//! half done: a rename, an unlink or an rmdir runs on the legs in parallel, so for a moment
//! one leg may have the new names and the other the old. Such changes are counted while they
//! run ([`NameChanges`]); a search that overlapped one is made again.

use super::inode::{Identity, Inode, InodeTable};
use crate::errno::{Errno, Result};
use crate::integrity;
use crate::leg::LegIdx;
use crate::mirror::Mirror;
use crate::sys;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// Searches made again, at most, while changes of names keep overlapping them; the last one
/// goes ahead with the checks of type and checksum identity alone.
const TRIES: u32 = 200;

/// Changes of names (rename, unlink, rmdir) that started and that finished.
#[derive(Default)]
pub struct NameChanges {
    started: AtomicU64,
    finished: AtomicU64,
}

/// One change of names under way; finished when dropped.
pub struct NameChange<'a>(&'a NameChanges);

impl Drop for NameChange<'_> {
    fn drop(&mut self) {
        self.0.finished.fetch_add(1, Ordering::SeqCst);
    }
}

impl NameChanges {
    /// A change of names begins (call it with the directories' locks held, so that no one
    /// waiting for it holds what it waits for).
    pub fn begin(&self) -> NameChange<'_> {
        self.started.fetch_add(1, Ordering::SeqCst);
        NameChange(self)
    }

    /// A mark to compare with later, when no change of names is under way.
    fn calm(&self) -> Option<u64> {
        let s = self.started.load(Ordering::SeqCst);
        (self.finished.load(Ordering::SeqCst) == s).then_some(s)
    }

    /// Whether no change of names began since `mark`.
    fn still(&self, mark: u64) -> bool {
        self.started.load(Ordering::SeqCst) == mark
    }
}

/// The resolver the inode table uses for lazy legs.
pub fn resolver(
    mirror: Arc<Mirror>,
    names: Arc<NameChanges>,
    table: Weak<InodeTable>,
) -> super::inode::Resolver {
    Box::new(move |inode, leg| {
        let table = table.upgrade().ok_or(Errno::INTERNAL)?;
        find(&mirror, &names, &table, inode, leg)
    })
}

/// Finds `inode` on `leg` by its path on another leg: its descriptor there and the device,
/// None if it has no name left (deleted while open). ENOENT if the leg lacks it (the legs
/// differ: the caller's operation then drops the leg), EIO if another type of object or
/// another file is there.
fn find(
    mirror: &Mirror,
    names: &NameChanges,
    table: &InodeTable,
    inode: &Arc<Inode>,
    leg: LegIdx,
) -> Result<Option<(OwnedFd, u64)>> {
    let root = mirror.leg(leg).root()?;
    let mut tries = 0;
    let (fd, rel) = loop {
        tries += 1;
        let last = tries >= TRIES;
        let Some(mark) = names.calm().or(last.then_some(0)) else {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        };
        let Some(rel) = path_elsewhere(mirror, inode, leg)? else {
            return Ok(None);
        };
        let found = match rel.as_slice() {
            sys::fd::ROOT_REL => sys::fd::reopen(root.as_fd(), libc::O_PATH | libc::O_DIRECTORY),
            _ => sys::fd::open_beneath(root.as_fd(), &rel),
        };
        let settled = names.still(mark) && path_elsewhere(mirror, inode, leg)? == Some(rel.clone());
        if last || settled {
            break (found?, rel);
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let st = sys::fd::fstat(fd.as_fd())?;
    let shown = String::from_utf8_lossy(&rel);
    if st.st_mode & libc::S_IFMT != inode.kind {
        log::error!("leg {leg} holds another type of object at '{shown}'");
        return Err(Errno::EIO);
    }
    if inode.is_regular() {
        let here = integrity::id_of(fd.as_fd());
        let there = inode
            .found_fd(mirror.metadata_leg())
            .ok()
            .and_then(|f| integrity::id_of(f.as_fd()));
        if here.is_some() && there.is_some() && here != there {
            log::error!("leg {leg} holds another file at '{shown}'");
            return Err(Errno::EIO);
        }
    }
    table.identify(
        inode.ino,
        Identity {
            leg,
            dev: st.st_dev,
            ino: st.st_ino,
        },
    );
    Ok(Some((fd, st.st_dev)))
}

/// The path of `inode` relative to the legs' root on a leg other than `not` where it was
/// found (the metadata leg first): None if it has no name (deleted while open), EIO if it was
/// found on no other leg.
fn path_elsewhere(mirror: &Mirror, inode: &Arc<Inode>, not: LegIdx) -> Result<Option<Vec<u8>>> {
    let n = mirror.legs().len();
    let order = std::iter::once(mirror.metadata_leg()).chain(0..n);
    for l in order.filter(|&l| l != not) {
        let Ok(fd) = inode.found_fd(l) else {
            continue;
        };
        let Some(path) = super::path_on(mirror, l, fd.as_fd()) else {
            continue;
        };
        if path.is_none() {
            // The name this descriptor was found by is gone. With no name left, neither is
            // the file's; with another (a hard link), which one is not known here: the leg
            // is let go of and resynced, rather than left without the changes.
            return match sys::fd::fstat(fd.as_fd())?.st_nlink {
                0 => Ok(None),
                _ => {
                    log::warn!(
                        "inode {}: its name on leg {l} is gone, another stands",
                        inode.ino
                    );
                    Err(Errno::EIO)
                }
            };
        }
        return Ok(path);
    }
    Err(Errno::EIO)
}
