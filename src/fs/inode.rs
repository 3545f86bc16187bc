//! The inode table: FUSE inode numbers for leg objects.
//!
//! An inode holds one `O_PATH` descriptor per leg (passthrough_hp's design, once per leg), so
//! every namespace operation is an `*at()` call relative to the parent's descriptor on each leg.
//!
//! Inode numbers are ours, not a leg's: a number is found through the *identity* of the object
//! on any leg, `(leg, st_dev, st_ino)`. All names of a hard link therefore share one number, a
//! rename keeps it, and it does not depend on which leg serves reads. Identities outlive the
//! inode (the kernel may forget it and look it up again: it gets the same number back). A leg
//! can only reuse a backing inode number after the object is gone and its descriptors closed,
//! which happens only once the kernel has forgotten our inode, so a reused identity can never
//! collide with a live inode.

use crate::errno::{Errno, Result};
use crate::leg::LegIdx;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

/// The root's inode number (FUSE's `FUSE_ROOT_ID`).
pub const ROOT_INO: u64 = 1;

/// One object of the mirror.
pub struct Inode {
    pub ino: u64,
    /// `st_mode & S_IFMT`.
    pub kind: u32,
    /// Per leg: the `O_PATH` descriptor of this object on that leg (None where it could not be
    /// opened, e.g. the leg had already failed).
    fds: Vec<Option<OwnedFd>>,
    /// For directories: taken for writing by every operation that changes the directory's
    /// entries (on all legs), and for reading by lookups in it, so that a lookup never sees one
    /// leg before a change and another after it. Lock order: by ascending inode number.
    pub dir_lock: RwLock<()>,
}

impl Inode {
    /// This object's descriptor on `leg`.
    pub fn fd(&self, leg: LegIdx) -> Result<BorrowedFd<'_>> {
        self.fds
            .get(leg)
            .and_then(|f| f.as_ref())
            .map(|f| f.as_fd())
            .ok_or(Errno::EIO)
    }

    pub fn is_dir(&self) -> bool {
        self.kind == libc::S_IFDIR
    }

    pub fn is_symlink(&self) -> bool {
        self.kind == libc::S_IFLNK
    }

    pub fn is_regular(&self) -> bool {
        self.kind == libc::S_IFREG
    }
}

/// Where an object sits on one leg.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Identity {
    pub leg: LegIdx,
    pub dev: u64,
    pub ino: u64,
}

struct Entry {
    inode: Arc<Inode>,
    /// The kernel's lookup count.
    lookups: u64,
}

struct Inner {
    live: HashMap<u64, Entry>,
    identity: HashMap<Identity, u64>,
    next_ino: u64,
}

/// All inodes the kernel currently knows.
pub struct InodeTable {
    inner: Mutex<Inner>,
}

impl InodeTable {
    /// A table holding the root, whose descriptors are the legs' roots.
    pub fn new(root_fds: Vec<Option<OwnedFd>>, root_ids: &[Identity]) -> InodeTable {
        let mut identity = HashMap::new();
        for id in root_ids {
            identity.insert(*id, ROOT_INO);
        }
        let mut live = HashMap::new();
        live.insert(
            ROOT_INO,
            Entry {
                inode: Arc::new(Inode {
                    ino: ROOT_INO,
                    kind: libc::S_IFDIR,
                    fds: root_fds,
                    dir_lock: RwLock::new(()),
                }),
                lookups: 1,
            },
        );
        InodeTable {
            inner: Mutex::new(Inner {
                live,
                identity,
                next_ino: ROOT_INO + 1,
            }),
        }
    }

    /// The live inode `ino`.
    pub fn get(&self, ino: u64) -> Result<Arc<Inode>> {
        self.inner
            .lock()
            .live
            .get(&ino)
            .map(|e| e.inode.clone())
            .ok_or(Errno::ESTALE)
    }

    /// The inode for an object found (or made) on the legs, counting one kernel lookup.
    /// `ids[0]` is the identity on the metadata leg. If the object is already live (another
    /// name of a hard link, or a racing lookup), that inode is returned and `fds` are dropped.
    pub fn claim(&self, ids: &[Identity], fds: Vec<Option<OwnedFd>>, kind: u32) -> Arc<Inode> {
        let mut inner = self.inner.lock();
        let known = ids.iter().find_map(|id| inner.identity.get(id).copied());
        if let Some(ino) = known {
            if let Some(e) = inner.live.get_mut(&ino) {
                if e.inode.kind == kind {
                    e.lookups += 1;
                    let inode = e.inode.clone();
                    for id in ids {
                        inner.identity.insert(*id, ino);
                    }
                    return inode;
                }
            }
        }
        let ino = match known {
            Some(ino) if !inner.live.contains_key(&ino) => ino,
            _ => {
                let n = inner.next_ino;
                inner.next_ino += 1;
                n
            }
        };
        for id in ids {
            inner.identity.insert(*id, ino);
        }
        let inode = Arc::new(Inode {
            ino,
            kind,
            fds,
            dir_lock: RwLock::new(()),
        });
        inner.live.insert(
            ino,
            Entry {
                inode: inode.clone(),
                lookups: 1,
            },
        );
        inode
    }

    /// The inode number a directory entry will have once looked up (for `d_ino` in listings),
    /// reserving one if the object was never seen.
    pub fn number_for(&self, id: Identity) -> u64 {
        let mut inner = self.inner.lock();
        if let Some(&ino) = inner.identity.get(&id) {
            return ino;
        }
        let ino = inner.next_ino;
        inner.next_ino += 1;
        inner.identity.insert(id, ino);
        ino
    }

    /// The kernel drops `n` lookups of `ino`; at zero the inode and its descriptors go.
    pub fn forget(&self, ino: u64, n: u64) {
        if ino == ROOT_INO {
            return;
        }
        let mut inner = self.inner.lock();
        if let Some(e) = inner.live.get_mut(&ino) {
            e.lookups = e.lookups.saturating_sub(n);
            if e.lookups == 0 {
                inner.live.remove(&ino);
            }
        }
    }

    /// How many inodes are live (the root included).
    pub fn live_count(&self) -> usize {
        self.inner.lock().live.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(leg: usize, ino: u64) -> Identity {
        Identity { leg, dev: 1, ino }
    }

    #[test]
    fn hard_links_share_a_number_and_forget_frees() {
        let t = InodeTable::new(vec![None], &[id(0, 2)]);
        let a = t.claim(&[id(0, 10), id(1, 20)], vec![None, None], libc::S_IFREG);
        let b = t.claim(&[id(0, 10), id(1, 20)], vec![None, None], libc::S_IFREG);
        assert_eq!(a.ino, b.ino);
        assert_eq!(t.live_count(), 2);
        t.forget(a.ino, 1);
        assert_eq!(t.live_count(), 2);
        t.forget(a.ino, 1);
        assert_eq!(t.live_count(), 1);
        // Looked up again after being forgotten: the same number.
        let c = t.claim(&[id(0, 10), id(1, 20)], vec![None, None], libc::S_IFREG);
        assert_eq!(c.ino, a.ino);
    }

    #[test]
    fn listing_numbers_match_later_lookups() {
        let t = InodeTable::new(vec![None], &[]);
        let n = t.number_for(id(0, 55));
        let i = t.claim(&[id(0, 55)], vec![None], libc::S_IFDIR);
        assert_eq!(i.ino, n);
        assert_ne!(t.number_for(id(0, 56)), n);
    }

    #[test]
    fn root_is_never_forgotten() {
        let t = InodeTable::new(vec![None], &[]);
        t.forget(ROOT_INO, 100);
        assert!(t.get(ROOT_INO).is_ok());
        assert_eq!(t.get(999).err(), Some(Errno::ESTALE));
    }
}
