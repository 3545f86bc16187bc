//! The inode table: FUSE inode numbers for leg objects.
//!
//! An inode holds one `O_PATH` descriptor per leg (passthrough_hp's design, once per leg), so
//! every namespace operation is an `*at()` call relative to the parent's descriptor on each leg.
//!
//! Its parts, one job each: which number an object has, kept past its inode (`numbers.rs`); the
//! bounded cache of the objects' descriptors (`fd_cache.rs`); how a regular file's open files
//! reach its data (`io_mode.rs`).

mod fd_cache;
mod io_mode;
mod numbers;

pub use fd_cache::{FdCache, Resolver};
pub use io_mode::{Backing, IoMode};
pub use numbers::{Identity, REMEMBERED};

use super::takeover;
use crate::errno::{Errno, Result};
use crate::leg::LegIdx;
use crate::lock_order::{Ordered, Rank};
use crate::sys;
use crate::sys::fd::FileHandle;
use fd_cache::LegObject;
use numbers::Numbers;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// The root's inode number (FUSE's `FUSE_ROOT_ID`).
pub const ROOT_INO: u64 = 1;

/// The control file `MOUNT/.mirrorfs`'s inode number (never given to a file on the legs).
pub const CONTROL_INO: u64 = 2;

/// Inodes forgotten between two tidyings of memory ([`InodeTable::tidy`]).
const TIDY_EVERY: usize = 8192;

/// One object of the mirror.
pub struct Inode {
    pub ino: u64,
    /// `st_mode & S_IFMT`.
    pub kind: u32,
    /// Per leg: this object on that leg (None where it could not be opened, e.g. the leg had
    /// already failed).
    /// Per leg; a leg that joins (after a resync) gets every object attached afresh.
    objects: Vec<RwLock<Option<Arc<LegObject>>>>,
    /// Legs (bits) this object has not been looked for on yet (quiet legs, which lookups
    /// leave alone): found through [`FdCache`]'s resolver at the first use of its descriptor
    /// there.
    lazy: AtomicU64,
    /// Held while the object is looked for on a quiet leg (one search at a time).
    resolving: Mutex<()>,
    /// Files open on this object: while any is, its descriptors stay open (a deleted file can
    /// no longer be reopened by handle).
    open_files: AtomicUsize,
    cache: Arc<FdCache>,
    /// For directories: taken for writing by every operation that changes the directory's
    /// entries (on all legs), and for reading by lookups in it, so that a lookup never sees one
    /// leg before a change and another after it. Lock order: `crate::lock_order`.
    pub dir_lock: Ordered<RwLock<()>>,
    /// For regular files: taken for reading by every change of the data (write, truncate,
    /// fallocate, copy_file_range; they run in parallel), and for writing by whoever copies
    /// data from one leg to another (read-repair, resync), so that a copy never puts back
    /// data older than a write that raced with it.
    pub data_lock: Ordered<RwLock<()>>,
    /// For regular files: its checksums, once looked for (see `fs/checksums.rs`).
    pub sums: Mutex<Sums>,
    /// For regular files: how its open files reach the data (`passthrough=ro`).
    pub io: Mutex<IoMode>,
    /// For regular files: the extent read-ahead plan of its sequential reader, if one is
    /// engaged (`mirror/readahead.rs`).
    pub readahead: Mutex<Option<Arc<crate::mirror::readahead::Stream>>>,
}

/// Held by every change of a file's data, inside its data lock: when it ends (however the
/// change went), the file's read-ahead buffers are dropped, so that no read after the change
/// is answered with bytes from before it.
pub struct DataChange<'a>(&'a Inode);

impl Drop for DataChange<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.0.readahead.lock().take() {
            s.invalidate();
        }
    }
}

/// What a regular file's checksums are.
#[derive(Clone, Default)]
pub enum Sums {
    /// Not looked for yet.
    #[default]
    Unknown,
    /// The file had none (from before checksums, or checksums are off) at this coverage
    /// epoch (`Integrity::coverage_epoch`): looked for again once it moves on.
    Uncovered(u64),
    Covered(Arc<crate::integrity::FileSums>),
}

impl Inode {
    /// Marks a change of this file's data (see [`DataChange`]); take it inside the data lock.
    pub fn data_change(&self) -> DataChange<'_> {
        DataChange(self)
    }

    /// This object as the session log keeps it (`fs/takeover.rs`): its identities `ids` and,
    /// per leg, its file handle (none for a descriptor that is pinned: another filesystem
    /// than its leg's, which a successor looks up by path instead).
    fn takeover_node(&self, ids: &[Identity], lookups: u64) -> takeover::Node {
        let legs = self
            .objects
            .iter()
            .enumerate()
            .map(|(leg, o)| {
                let obj = o.read().clone()?;
                let id = ids.iter().find(|i| i.leg == leg)?;
                Some(takeover::LegNode {
                    dev: id.dev,
                    ino: id.ino,
                    handle: obj.handle().map(|h| h.to_bytes()).unwrap_or_default(),
                })
            })
            .collect();
        takeover::Node {
            kind: self.kind,
            lookups,
            legs,
        }
    }

    pub fn is_dir(&self) -> bool {
        self.kind == libc::S_IFDIR
    }

    /// Whether this object has its copy on `leg` (attached, or still to be looked for there).
    pub fn has_leg(&self, leg: LegIdx) -> bool {
        self.objects.get(leg).is_some_and(|o| o.read().is_some()) || self.lazy_on(leg)
    }

    pub fn is_symlink(&self) -> bool {
        self.kind == libc::S_IFLNK
    }

    pub fn is_regular(&self) -> bool {
        self.kind == libc::S_IFREG
    }

    /// A file was opened on this object (its descriptors must stay open until closed).
    pub fn file_opened(&self) {
        self.open_files.fetch_add(1, Ordering::AcqRel);
    }

    /// A file opened on this object was closed. At the last close, its read-ahead buffers
    /// are given back (a reader that is done holds no memory).
    pub fn file_closed(&self) {
        if self.open_files.fetch_sub(1, Ordering::AcqRel) == 1 {
            if let Some(s) = self.readahead.lock().take() {
                s.release();
            }
        }
    }
}

/// What [`InodeTable::attach_leg`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AttachReport {
    pub attached: usize,
    /// Live objects with no path any more (deleted while open).
    pub unresolved: usize,
}

struct Entry {
    inode: Arc<Inode>,
    /// The kernel's lookup count.
    lookups: u64,
}

struct Inner {
    live: HashMap<u64, Entry>,
    /// The numbers of the objects, live or not.
    numbers: Numbers,
    /// Inodes forgotten since memory was last tidied ([`InodeTable::tidy`]).
    forgotten: usize,
}

/// Gives back most of a map's room once it holds under a quarter of it.
fn shrink<K: Eq + std::hash::Hash, V>(m: &mut HashMap<K, V>) {
    if m.capacity() > 4 * m.len() + 1024 {
        m.shrink_to(2 * m.len());
    }
}

/// All inodes the kernel currently knows.
pub struct InodeTable {
    inner: Mutex<Inner>,
    cache: Arc<FdCache>,
}

impl InodeTable {
    /// A table holding the root, whose descriptors are the legs' roots (pinned). At most
    /// `fd_budget` other descriptors stay open at once.
    pub fn new(
        root_fds: Vec<Option<OwnedFd>>,
        root_ids: &[Identity],
        fd_budget: usize,
    ) -> InodeTable {
        Self::with_remembered(root_fds, root_ids, fd_budget, REMEMBERED)
    }

    /// [`new`](Self::new), keeping at most `remembered` numbers that are not live.
    fn with_remembered(
        root_fds: Vec<Option<OwnedFd>>,
        root_ids: &[Identity],
        fd_budget: usize,
        remembered: usize,
    ) -> InodeTable {
        let roots: Vec<_> = root_fds
            .iter()
            .map(|f| f.as_ref().map(|f| f.as_fd()))
            .collect();
        let mut devs = vec![0; root_fds.len()];
        for id in root_ids {
            if let Some(d) = devs.get_mut(id.leg) {
                *d = id.dev;
            }
        }
        let cache = Arc::new(FdCache::new(&roots, devs, fd_budget));
        let mut inner = Inner {
            live: HashMap::new(),
            numbers: Numbers::new(remembered, CONTROL_INO + 1),
            forgotten: 0,
        };
        inner.numbers.bind(ROOT_INO, root_ids);
        inner.live.insert(
            ROOT_INO,
            Entry {
                inode: Arc::new(Inode {
                    ino: ROOT_INO,
                    kind: libc::S_IFDIR,
                    objects: root_fds
                        .into_iter()
                        .map(|f| {
                            RwLock::new(f.map(|fd| Arc::new(LegObject::new(Arc::new(fd), false))))
                        })
                        .collect(),
                    lazy: AtomicU64::new(0),
                    resolving: Mutex::new(()),
                    open_files: AtomicUsize::new(0),
                    cache: cache.clone(),
                    dir_lock: Ordered::rw(Rank::Dir, ROOT_INO, ()),
                    data_lock: Ordered::rw(Rank::Data, ROOT_INO, ()),
                    sums: Mutex::new(Sums::Uncovered(u64::MAX)),
                    io: Mutex::new(IoMode::default()),
                    readahead: Mutex::new(None),
                }),
                lookups: 1,
            },
        );
        InodeTable {
            inner: Mutex::new(inner),
            cache,
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

    /// The live inode of the object whose identity on `id.leg` is `id`, if its descriptor
    /// there is open, counting one kernel lookup; None otherwise (then [`claim`](Self::claim)
    /// it). An open descriptor holds the object on its leg, so the leg cannot have given its
    /// inode number to another object: that one leg's identity says "the same object". Once
    /// the descriptor was closed (the cache's budget), only every leg's identity says it.
    pub fn claim_live(&self, id: &Identity, kind: u32) -> Option<Arc<Inode>> {
        let (ino, inode) = {
            let inner = self.inner.lock();
            let ino = *inner.numbers.identity.get(id)?;
            let known = inner.numbers.known.get(&ino)?;
            if !known.ids.contains(id) {
                return None;
            }
            (ino, inner.live.get(&ino)?.inode.clone())
        };
        // The descriptor's lock is never taken under the table's.
        if inode.kind != kind || !inode.holds_open(id.leg) {
            return None;
        }
        let mut inner = self.inner.lock();
        let e = inner.live.get_mut(&ino)?;
        if !Arc::ptr_eq(&e.inode, &inode) {
            return None;
        }
        self.looked_up(ino, e);
        Some(inode)
    }

    /// Counts one more kernel lookup of the live inode `ino` (and says so in the session log).
    fn looked_up(&self, ino: u64, e: &mut Entry) {
        e.lookups += 1;
        if let Some(j) = self.cache.journal.get() {
            j.lookups(ino, e.lookups);
        }
    }

    /// The inode for an object found (or made) on the legs, counting one kernel lookup.
    /// `ids` are its identities on the legs it was found on; `lazy` (bits) the legs it was
    /// not looked for on, where it is found at first use (a quiet leg).
    ///
    /// If the object is already live (another name of a hard link, or a racing lookup), that
    /// inode is returned and `fds` are dropped. "The same object" means: the live inode's
    /// identities include every one of `ids` (a leg may have dropped out since, so a subset is
    /// enough). A number that only matches through some of them belonged to an object whose
    /// backing inode numbers a leg has since reused: the new object gets a fresh number.
    pub fn claim(
        &self,
        ids: &[Identity],
        fds: Vec<Option<OwnedFd>>,
        kind: u32,
        lazy: u64,
    ) -> Arc<Inode> {
        let mut inner = self.inner.lock();
        let known = ids
            .iter()
            .find_map(|id| inner.numbers.identity.get(id).copied());
        let mut reusable = None;
        if let Some(ino) = known {
            let same = inner
                .numbers
                .known
                .get(&ino)
                .is_some_and(|have| ids.iter().all(|id| have.ids.contains(id)));
            match inner.live.get_mut(&ino) {
                Some(e) if same && e.inode.kind == kind => {
                    self.looked_up(ino, e);
                    return e.inode.clone();
                }
                Some(_) => {}
                None => reusable = Some(ino),
            }
        }
        let ino = match reusable {
            Some(ino) => ino,
            None => inner.numbers.fresh_number(),
        };
        self.make_live(inner, ino, ids, fds, kind, lazy, 1)
    }

    /// Makes `ino` the live inode of the object with identities `ids` and descriptors `fds`,
    /// with the kernel's lookup count `lookups` (and says so in the session log).
    #[allow(clippy::too_many_arguments)]
    fn make_live(
        &self,
        mut inner: parking_lot::MutexGuard<'_, Inner>,
        ino: u64,
        ids: &[Identity],
        fds: Vec<Option<OwnedFd>>,
        kind: u32,
        lazy: u64,
        lookups: u64,
    ) -> Arc<Inode> {
        inner.numbers.bind(ino, ids);
        inner.numbers.set_live(ino);
        let mut reopenable = Vec::new();
        let objects = fds
            .into_iter()
            .enumerate()
            .map(|(leg, f)| {
                RwLock::new(f.map(|fd| {
                    let dev = ids.iter().find(|i| i.leg == leg).map_or(0, |i| i.dev);
                    let r = self.cache.reopenable(leg, dev);
                    if r {
                        reopenable.push(leg);
                    }
                    Arc::new(LegObject::new(Arc::new(fd), r))
                }))
            })
            .collect();
        let inode = Arc::new(Inode {
            ino,
            kind,
            objects,
            lazy: AtomicU64::new(lazy),
            resolving: Mutex::new(()),
            open_files: AtomicUsize::new(0),
            cache: self.cache.clone(),
            dir_lock: Ordered::rw(Rank::Dir, ino, ()),
            data_lock: Ordered::rw(Rank::Data, ino, ()),
            sums: Mutex::new(Sums::Unknown),
            io: Mutex::new(IoMode::default()),
            readahead: Mutex::new(None),
        });
        inner.live.insert(
            ino,
            Entry {
                inode: inode.clone(),
                lookups,
            },
        );
        // Under the table's lock, so that the log has a number's birth and end in the order
        // they happened (a number forgotten and handed out again).
        if let Some(j) = self.cache.journal.get() {
            j.node(ino, &inode.takeover_node(ids, lookups));
        }
        drop(inner);
        for leg in reopenable {
            self.cache.opened(Arc::downgrade(&inode), leg);
        }
        inode
    }

    /// Keeps the session log from now on (`fs/takeover.rs`; set once, before any request).
    pub fn set_journal(&self, journal: Arc<takeover::Journal>) {
        let _ = self.cache.journal.set(journal);
    }

    /// Takes over the node ids of a serving process that died (`fs/takeover.rs`). Each node is
    /// found on the legs by its file handles and checked to be the same object (device and
    /// inode number), then made live with the kernel's lookup count. A leg where it cannot be
    /// found that way (no handle, or `in_sync` legs whose handle fails) is left to the
    /// resolver: the object is looked for there by path when first needed. A node found on no
    /// leg is lost, and the kernel's requests for it get ESTALE. Returns the numbers lost.
    pub fn restore(&self, state: &takeover::State, in_sync: &[bool]) -> Vec<u64> {
        let mut lost = Vec::new();
        for (&ino, node) in &state.nodes {
            if ino <= CONTROL_INO || node.lookups == 0 {
                continue;
            }
            let mut ids = Vec::new();
            let mut fds = Vec::new();
            let mut lazy = 0u64;
            for (leg, &sync) in in_sync.iter().enumerate() {
                let rec = node.legs.get(leg).cloned().flatten();
                let found = rec.as_ref().filter(|_| sync).and_then(|r| {
                    let h = FileHandle::from_bytes(&r.handle)?;
                    let mount = self.cache.mount_fds.get(leg)?.read().clone()?;
                    let fd = sys::fd::open_by_handle(mount.as_fd(), &h).ok()?;
                    let st = sys::fd::fstat(fd.as_fd()).ok()?;
                    (st.st_dev == r.dev && st.st_ino == r.ino).then_some(fd)
                });
                match (found, rec) {
                    (Some(fd), Some(r)) => {
                        ids.push(Identity {
                            leg,
                            dev: r.dev,
                            ino: r.ino,
                        });
                        fds.push(Some(fd));
                    }
                    _ => {
                        fds.push(None);
                        if sync && leg < 64 {
                            lazy |= 1 << leg;
                        }
                    }
                }
            }
            if ids.is_empty() {
                lost.push(ino);
                continue;
            }
            let inner = self.inner.lock();
            if inner.live.contains_key(&ino) {
                continue;
            }
            self.make_live(inner, ino, &ids, fds, node.kind, lazy, node.lookups);
        }
        let mut inner = self.inner.lock();
        inner.numbers.next_ino = inner.numbers.next_ino.max(state.top_ino + 1);
        lost
    }

    /// The live inodes as the session log keeps them (a successor's first snapshot).
    pub fn takeover_nodes(&self) -> std::collections::BTreeMap<u64, takeover::Node> {
        let inner = self.inner.lock();
        inner
            .live
            .iter()
            .filter(|(&ino, _)| ino > CONTROL_INO)
            .map(|(&ino, e)| {
                let ids: Vec<Identity> = inner
                    .numbers
                    .known
                    .get(&ino)
                    .map(|k| k.ids.to_vec())
                    .unwrap_or_default();
                (ino, e.inode.takeover_node(&ids, e.lookups))
            })
            .collect()
    }

    /// The highest number handed out so far.
    pub fn top_number(&self) -> u64 {
        self.inner.lock().numbers.next_ino.saturating_sub(1)
    }

    /// Sets how objects are found on the legs they were not looked for on (once).
    pub fn set_resolver(&self, resolver: Resolver) {
        let _ = self.cache.resolver.set(resolver);
    }

    /// The object `ino` was found on a leg after its lookup: `id` is one more identity of it.
    pub fn identify(&self, ino: u64, id: Identity) {
        let mut inner = self.inner.lock();
        if inner.numbers.known.contains_key(&ino) {
            inner.numbers.add_identity(ino, id);
        }
    }

    /// The inode number a directory entry will have once looked up (for `d_ino` in listings),
    /// reserving one if the object is not known. A number that is not live counts as seen
    /// now: it is the last of the kept ones to go.
    pub fn number_for(&self, id: Identity) -> u64 {
        let mut inner = self.inner.lock();
        if let Some(&ino) = inner.numbers.identity.get(&id) {
            if !inner.live.contains_key(&ino) {
                inner.numbers.set_idle(ino);
            }
            return ino;
        }
        let ino = inner.numbers.fresh_number();
        inner.numbers.bind(ino, &[id]);
        inner.numbers.set_idle(ino);
        ino
    }

    /// The kernel drops `n` lookups of `ino`; at zero the inode and its descriptors go.
    pub fn forget(&self, ino: u64, n: u64) {
        if ino == ROOT_INO || ino == CONTROL_INO {
            return;
        }
        let mut inner = self.inner.lock();
        let mut tidy = false;
        // The descriptors of the inode, if this was its last lookup and nothing else holds it:
        // closed after the table's lock. The last close of an unlinked file is where the leg
        // frees it (ext4_evict_inode, tens of microseconds), and no lookup should wait for
        // that. The inode itself goes here, as it always did: freed before the number's
        // memory is kept (`set_idle`), so that what stays is not scattered among freed pages.
        let mut closing = Vec::new();
        if let Some(e) = inner.live.get_mut(&ino) {
            e.lookups = e.lookups.saturating_sub(n);
            if let Some(j) = self.cache.journal.get() {
                match e.lookups {
                    0 => j.gone(ino),
                    left => j.lookups(ino, left),
                }
            }
            if e.lookups == 0 {
                if let Some(gone) = inner
                    .live
                    .remove(&ino)
                    .and_then(|e| Arc::into_inner(e.inode))
                {
                    closing = gone.into_descriptors();
                }
                inner.numbers.set_idle(ino);
                inner.forgotten += 1;
                // Also once most of what the kernel held is gone (it let go of a large tree):
                // then the eviction order's references to the dead are most of what it holds.
                tidy = inner.forgotten >= TIDY_EVERY
                    || (inner.forgotten >= 64 && inner.live.len() <= inner.forgotten);
                if tidy {
                    inner.forgotten = 0;
                }
            }
        }
        drop(inner);
        drop(closing);
        if tidy {
            let mut inner = self.inner.lock();
            // The maps keep the room of their largest size: give it back once they are far
            // smaller (the kernel forgot a large tree, and the remembered numbers are capped).
            shrink(&mut inner.live);
            shrink(&mut inner.numbers.identity);
            shrink(&mut inner.numbers.known);
            drop(inner);
            self.tidy();
        }
    }

    /// After many inodes were forgotten (the kernel let go of a large tree): lets go of the
    /// fd cache's references to dead inodes (each keeps the dead inode's memory allocated),
    /// then has the allocator give the freed memory back, on a thread of its own, once the
    /// forgets have paused for [`sys::host::TRIM_QUIET`]. Without
    /// this, the daemon's resident memory stays at its peak after the kernel forgot every
    /// inode: free, but in pages that also hold a few live blocks, or that glibc keeps.
    fn tidy(&self) {
        self.cache.prune();
        sys::host::give_back_free_memory_soon();
    }

    /// Attaches `leg` (just brought in sync) to every live inode: `root` becomes the root's
    /// object there, and `resolve` finds every other live object on the leg (by its path on an
    /// in-sync leg). An object `resolve` cannot find (`Ok(None)`: deleted while open) stays
    /// without a copy on the leg, and operations on it leave the leg out. Runs while no
    /// operation is in flight (the mirror's barrier is held).
    pub fn attach_leg(
        &self,
        leg: LegIdx,
        root: OwnedFd,
        resolve: impl Fn(&Arc<Inode>) -> Result<Option<OwnedFd>>,
    ) -> Result<AttachReport> {
        let root_st = sys::fd::fstat(root.as_fd())?;
        // The leg may be another directory than before (`leg replace`): every object and the
        // way to reopen them are found afresh.
        self.detach_leg(leg);
        if let Some(cell) = self.cache.mount_fds.get(leg) {
            *cell.write() = FdCache::mount_fd_for(root.as_fd()).map(Arc::new);
        }
        if let Some(d) = self.cache.root_devs.get(leg) {
            d.store(root_st.st_dev, Ordering::Relaxed);
        }
        let inodes: Vec<Arc<Inode>> = self
            .inner
            .lock()
            .live
            .values()
            .map(|e| e.inode.clone())
            .collect();
        let mut report = AttachReport::default();
        for inode in inodes {
            inode.clear_lazy(leg);
            let fd = if inode.ino == ROOT_INO {
                Some(sys::fd::reopen(
                    root.as_fd(),
                    libc::O_PATH | libc::O_DIRECTORY,
                )?)
            } else {
                resolve(&inode)?
            };
            let Some(fd) = fd else {
                report.unresolved += 1;
                continue;
            };
            let st = sys::fd::fstat(fd.as_fd())?;
            if st.st_mode & libc::S_IFMT != inode.kind {
                return Err(Errno::EIO);
            }
            let id = Identity {
                leg,
                dev: st.st_dev,
                ino: st.st_ino,
            };
            let reopenable = inode.ino != ROOT_INO && self.cache.reopenable(leg, st.st_dev);
            *inode.objects[leg].write() = Some(Arc::new(LegObject::new(Arc::new(fd), reopenable)));
            {
                let mut inner = self.inner.lock();
                // (Not known: forgotten meanwhile, and its number already dropped.)
                if inner.numbers.known.contains_key(&inode.ino) {
                    inner.numbers.add_identity(inode.ino, id);
                }
            }
            if reopenable {
                self.cache.opened(Arc::downgrade(&inode), leg);
            }
            report.attached += 1;
        }
        Ok(report)
    }

    /// Drops every object's copy on `leg`, and the way to reopen them (before it is attached
    /// afresh, or when the leg has left the mirror, so that its filesystem can be unmounted).
    pub fn detach_leg(&self, leg: LegIdx) {
        if let Some(cell) = self.cache.mount_fds.get(leg) {
            *cell.write() = None;
        }
        for inode in self.live_inodes() {
            inode.clear_lazy(leg);
            let Some(cell) = inode.objects.get(leg) else {
                continue;
            };
            if let Some(obj) = cell.write().take() {
                if obj.reopenable && obj.fd.lock().take().is_some() {
                    self.cache.closed(1);
                }
            }
        }
    }

    /// Every live inode (for [`attach_leg`](Self::attach_leg)'s callers and checks).
    pub fn live_inodes(&self) -> Vec<Arc<Inode>> {
        self.inner
            .lock()
            .live
            .values()
            .map(|e| e.inode.clone())
            .collect()
    }

    /// The number of the live inode that `id` is an identity of, if any.
    pub fn live_number(&self, id: &Identity) -> Option<u64> {
        let inner = self.inner.lock();
        let ino = *inner.numbers.identity.get(id)?;
        inner.live.contains_key(&ino).then_some(ino)
    }

    /// How many inodes are live (the root included).
    pub fn live_count(&self) -> usize {
        self.inner.lock().live.len()
    }

    /// How many leg identities map to a number (those of live inodes included).
    pub fn known_count(&self) -> usize {
        self.inner.lock().numbers.identity.len()
    }

    /// How many reopenable descriptors are open (bounded by the budget).
    pub fn cached_fds(&self) -> usize {
        self.cache.open_count()
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn id(leg: usize, ino: u64) -> Identity {
        Identity { leg, dev: 1, ino }
    }

    #[test]
    fn hard_links_share_a_number_and_forget_frees() {
        let t = InodeTable::new(vec![None], &[id(0, 2)], 64);
        let a = t.claim(&[id(0, 10), id(1, 20)], vec![None, None], libc::S_IFREG, 0);
        let b = t.claim(&[id(0, 10), id(1, 20)], vec![None, None], libc::S_IFREG, 0);
        assert_eq!(a.ino, b.ino);
        assert_eq!(t.live_count(), 2);
        t.forget(a.ino, 1);
        assert_eq!(t.live_count(), 2);
        t.forget(a.ino, 1);
        assert_eq!(t.live_count(), 1);
        // Looked up again after being forgotten: the same number.
        let c = t.claim(&[id(0, 10), id(1, 20)], vec![None, None], libc::S_IFREG, 0);
        assert_eq!(c.ino, a.ino);
    }

    #[test]
    fn memory_is_given_back_once_the_forgets_pause() {
        let t = InodeTable::new(vec![None], &[], 64);
        let before = sys::host::trims();
        // A tidy every 10 ms for 300 ms, as a long `rm -rf` asks for them: no trim meanwhile.
        for _ in 0..30 {
            t.tidy();
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let during = sys::host::trims() - before;
        // Then one, once they have paused.
        let start = std::time::Instant::now();
        while sys::host::trims() == before + during
            && start.elapsed() < std::time::Duration::from_secs(10)
        {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        std::thread::sleep(3 * sys::host::TRIM_QUIET);
        let after = sys::host::trims() - before;
        // Other tests tidy too, and a thread of this one may sleep past TRIM_QUIET under
        // load: a few trims at most, where trimming at each tidy made about 30.
        assert!(during <= 2, "{during} trims while tidies kept coming");
        assert!((1..=4).contains(&after), "{after} trims in all");
    }

    #[test]
    fn root_is_never_forgotten() {
        let t = InodeTable::new(vec![None], &[], 64);
        t.forget(ROOT_INO, 100);
        assert!(t.get(ROOT_INO).is_ok());
        assert_eq!(t.get(999).err(), Some(Errno::ESTALE));
    }
}
