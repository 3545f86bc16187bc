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
    /// Identity on a leg -> inode number. Kept after the inode is forgotten, so that the same
    /// object gets the same number back.
    identity: HashMap<Identity, u64>,
    /// Inode number -> the identities that map to it (the reverse of `identity`), so that a
    /// number handed to a new object first drops every identity of the dead one it replaces.
    ids_of: HashMap<u64, Vec<Identity>>,
    next_ino: u64,
}

impl Inner {
    /// Makes `ino` the number of exactly the identities `ids`: stale identities of an earlier
    /// object with that number are dropped, and `ids` leave the numbers they had before.
    fn bind(&mut self, ino: u64, ids: &[Identity]) {
        if let Some(old) = self.ids_of.remove(&ino) {
            for id in old {
                if self.identity.get(&id) == Some(&ino) {
                    self.identity.remove(&id);
                }
            }
        }
        for id in ids {
            if let Some(prev) = self.identity.insert(*id, ino) {
                if prev != ino {
                    if let Some(v) = self.ids_of.get_mut(&prev) {
                        v.retain(|x| x != id);
                    }
                }
            }
        }
        self.ids_of.insert(ino, ids.to_vec());
    }

    fn fresh_number(&mut self) -> u64 {
        let n = self.next_ino;
        self.next_ino += 1;
        n
    }
}

/// All inodes the kernel currently knows.
pub struct InodeTable {
    inner: Mutex<Inner>,
}

impl InodeTable {
    /// A table holding the root, whose descriptors are the legs' roots.
    pub fn new(root_fds: Vec<Option<OwnedFd>>, root_ids: &[Identity]) -> InodeTable {
        let mut inner = Inner {
            live: HashMap::new(),
            identity: HashMap::new(),
            ids_of: HashMap::new(),
            next_ino: ROOT_INO + 1,
        };
        inner.bind(ROOT_INO, root_ids);
        inner.live.insert(
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
            inner: Mutex::new(inner),
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
    /// `ids` are its identities on the legs it was found on.
    ///
    /// If the object is already live (another name of a hard link, or a racing lookup), that
    /// inode is returned and `fds` are dropped. "The same object" means: the live inode's
    /// identities include every one of `ids` (a leg may have dropped out since, so a subset is
    /// enough). A number that only matches through some of them belonged to an object whose
    /// backing inode numbers a leg has since reused: the new object gets a fresh number.
    pub fn claim(&self, ids: &[Identity], fds: Vec<Option<OwnedFd>>, kind: u32) -> Arc<Inode> {
        let mut inner = self.inner.lock();
        let known = ids.iter().find_map(|id| inner.identity.get(id).copied());
        let mut reusable = None;
        if let Some(ino) = known {
            let same = inner
                .ids_of
                .get(&ino)
                .is_some_and(|have| ids.iter().all(|id| have.contains(id)));
            match inner.live.get_mut(&ino) {
                Some(e) if same && e.inode.kind == kind => {
                    e.lookups += 1;
                    return e.inode.clone();
                }
                Some(_) => {}
                None => reusable = Some(ino),
            }
        }
        let ino = match reusable {
            Some(ino) => ino,
            None => inner.fresh_number(),
        };
        inner.bind(ino, ids);
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
        let ino = inner.fresh_number();
        inner.bind(ino, &[id]);
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
    fn a_reused_backing_number_never_aliases_a_live_inode() {
        let t = InodeTable::new(vec![None], &[]);
        // A dies; a leg reuses one of its backing numbers for B (the other leg does not).
        let a = t.claim(&[id(0, 100), id(1, 200)], vec![None, None], libc::S_IFREG);
        t.forget(a.ino, 1);
        let b = t.claim(&[id(0, 300), id(1, 200)], vec![None, None], libc::S_IFREG);
        // Leg 0 now reuses A's other number for C while B is live: C must not become B.
        let c = t.claim(&[id(0, 100), id(1, 400)], vec![None, None], libc::S_IFREG);
        assert_ne!(c.ino, b.ino);
        // And B's own identities still find B.
        let b2 = t.claim(&[id(0, 300), id(1, 200)], vec![None, None], libc::S_IFREG);
        assert_eq!(b2.ino, b.ino);
    }

    #[test]
    fn root_is_never_forgotten() {
        let t = InodeTable::new(vec![None], &[]);
        t.forget(ROOT_INO, 100);
        assert!(t.get(ROOT_INO).is_ok());
        assert_eq!(t.get(999).err(), Some(Errno::ESTALE));
    }
}
