//! The descriptor cache: the objects' `O_PATH` descriptors, at most a budget of them open.
//!
//! Descriptors are a bounded cache, not a pin: the kernel may hold hundreds of thousands of
//! inodes (a `tar` of a source tree), more than the open-file limit allows descriptors. Once
//! more than `budget` descriptors are open, the oldest are closed, and reopened through the
//! object's kernel *file handle* (`open_by_handle_at`) when next needed. The handle
//! (`name_to_handle_at`) is taken when first needed, from the descriptor still open: when the
//! cache closes it, or a session log records the object; most objects (an `rm -rf`'s, a
//! `tar`'s) never need one. Objects on filesystems without handles, on another filesystem
//! than their leg's root, and objects with open files keep their descriptors.

use super::Inode;
use crate::errno::{Errno, Result};
use crate::fs::takeover;
use crate::leg::LegIdx;
use crate::sys;
use crate::sys::fd::FileHandle;
use parking_lot::{Mutex, RwLock};
use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

/// One object on one leg.
pub(super) struct LegObject {
    /// Whether the descriptor may be closed and reopened by handle; false: it is pinned.
    pub(super) reopenable: bool,
    /// Reopens the object when its descriptor was closed (taken when first needed).
    handle: std::sync::OnceLock<FileHandle>,
    /// The `O_PATH` descriptor, while open.
    pub(super) fd: Mutex<Option<Arc<OwnedFd>>>,
}

impl LegObject {
    pub(super) fn new(fd: Arc<OwnedFd>, reopenable: bool) -> LegObject {
        LegObject {
            reopenable,
            handle: std::sync::OnceLock::new(),
            fd: Mutex::new(Some(fd)),
        }
    }

    /// The object's file handle, taken from its descriptor the first time (None: the
    /// descriptor is pinned, or its filesystem gave no handle for it).
    pub(super) fn handle(&self) -> Option<&FileHandle> {
        if !self.reopenable {
            return None;
        }
        if let Some(h) = self.handle.get() {
            return Some(h);
        }
        let fd = self.fd.lock().clone()?;
        self.handle_from(&fd)
    }

    fn handle_from(&self, fd: &OwnedFd) -> Option<&FileHandle> {
        let (h, _mount_id) = sys::fd::file_handle(fd.as_fd()).ok()??;
        Some(self.handle.get_or_init(|| h))
    }
}

impl Inode {
    /// This object's `O_PATH` descriptor on `leg`, reopened through its file handle if the
    /// cache had closed it, or looked for there first if it was not yet (a quiet leg). ENOENT
    /// if the object is gone from the leg; [`Errno::INTERNAL`] if it was never found there and
    /// is not to be looked for (the caller should have asked [`has_leg`](Self::has_leg)).
    pub fn fd(self: &Arc<Self>, leg: LegIdx) -> Result<Arc<OwnedFd>> {
        match self.objects.get(leg).and_then(|o| o.read().clone()) {
            Some(obj) => self.object_fd(&obj, leg),
            None if self.lazy_on(leg) => self.resolve(leg),
            None => Err(Errno::INTERNAL),
        }
    }

    /// The descriptor on `leg` if the object was found there (never looks for it: a lazy
    /// leg answers [`Errno::INTERNAL`]).
    pub fn found_fd(self: &Arc<Self>, leg: LegIdx) -> Result<Arc<OwnedFd>> {
        let obj = self
            .objects
            .get(leg)
            .and_then(|o| o.read().clone())
            .ok_or(Errno::INTERNAL)?;
        self.object_fd(&obj, leg)
    }

    /// Whether this object is still to be looked for on `leg`.
    pub fn lazy_on(&self, leg: LegIdx) -> bool {
        leg < 64 && self.lazy.load(Ordering::Acquire) & (1 << leg) != 0
    }

    pub(super) fn clear_lazy(&self, leg: LegIdx) {
        if leg < 64 {
            self.lazy.fetch_and(!(1 << leg), Ordering::AcqRel);
        }
    }

    /// Finds this object on the lazy leg `leg` with the cache's resolver and keeps it. None
    /// from the resolver (no name left: deleted while open) leaves the object without a copy
    /// there, as a leg joining later would (`has_leg` is then false): ENOENT.
    fn resolve(self: &Arc<Self>, leg: LegIdx) -> Result<Arc<OwnedFd>> {
        let _one = self.resolving.lock();
        if let Some(obj) = self.objects[leg].read().clone() {
            return self.object_fd(&obj, leg);
        }
        if !self.lazy_on(leg) {
            return Err(Errno::INTERNAL);
        }
        let resolver = self.cache.resolver.get().ok_or(Errno::INTERNAL)?;
        let Some((fd, dev)) = resolver(self, leg)? else {
            self.clear_lazy(leg);
            return Err(Errno::ENOENT);
        };
        let reopenable = self.cache.reopenable(leg, dev);
        let fd = Arc::new(fd);
        *self.objects[leg].write() = Some(Arc::new(LegObject::new(fd.clone(), reopenable)));
        self.clear_lazy(leg);
        if reopenable {
            self.cache.opened(Arc::downgrade(self), leg);
        }
        Ok(fd)
    }

    /// Whether this object's descriptor on `leg` is open now (not closed by the cache, nor
    /// still to be found on a lazy leg).
    pub fn holds_open(&self, leg: LegIdx) -> bool {
        self.objects
            .get(leg)
            .and_then(|o| o.read().clone())
            .is_some_and(|obj| obj.fd.lock().is_some())
    }

    fn object_fd(self: &Arc<Self>, obj: &Arc<LegObject>, leg: LegIdx) -> Result<Arc<OwnedFd>> {
        let mut slot = obj.fd.lock();
        if let Some(fd) = slot.as_ref() {
            return Ok(fd.clone());
        }
        // A descriptor is closed only once its handle is taken (`close_cached`).
        let handle = obj.handle.get().ok_or(Errno::INTERNAL)?;
        let mount = self.cache.mount_fds[leg]
            .read()
            .clone()
            .ok_or(Errno::INTERNAL)?;
        let fd = match sys::fd::open_by_handle(mount.as_fd(), handle) {
            Ok(fd) => Arc::new(fd),
            Err(Errno::ESTALE) => return Err(Errno::ENOENT),
            Err(e) => return Err(e),
        };
        *slot = Some(fd.clone());
        drop(slot);
        self.cache.opened(Arc::downgrade(self), leg);
        Ok(fd)
    }

    /// The descriptors of an inode that goes, taken out to be closed by the caller (and out of
    /// the cache's count).
    pub(super) fn into_descriptors(mut self) -> Vec<Arc<OwnedFd>> {
        let mut fds = Vec::new();
        let mut counted = 0;
        for o in self.objects.iter_mut() {
            let Some(obj) = o.get_mut().take() else {
                continue;
            };
            let fd = obj.fd.lock().take();
            if let Some(fd) = fd {
                counted += obj.reopenable as usize;
                fds.push(fd);
            }
        }
        self.cache.closed(counted);
        fds
    }

    /// Closes the descriptor on `leg` if it can be reopened later: `Some(true)` if it was
    /// closed, `Some(false)` if there was none to close (or its filesystem gave no handle for
    /// it: it stays open, counted, until the object goes), `None` while a file is open on the
    /// object (it must stay open; ask again later).
    fn close_cached(&self, leg: LegIdx) -> Option<bool> {
        if self.open_files.load(Ordering::Acquire) > 0 {
            return None;
        }
        let Some(obj) = self.objects.get(leg).and_then(|o| o.read().clone()) else {
            return Some(false);
        };
        if !obj.reopenable {
            return Some(false);
        }
        let mut slot = obj.fd.lock();
        let handled = match slot.as_ref() {
            Some(fd) => obj.handle.get().is_some() || obj.handle_from(fd).is_some(),
            None => false,
        };
        Some(handled && slot.take().is_some())
    }
}

impl Drop for Inode {
    fn drop(&mut self) {
        let open = self
            .objects
            .iter_mut()
            .filter_map(|o| o.get_mut().clone())
            .filter(|o| o.reopenable && o.fd.lock().is_some())
            .count();
        self.cache.closed(open);
    }
}

/// Finds an object on a leg it was not looked for on (a quiet leg): its descriptor there and
/// the device it is on, or None if it has no name left (deleted while open).
pub type Resolver =
    Box<dyn Fn(&Arc<Inode>, LegIdx) -> Result<Option<(OwnedFd, u64)>> + Send + Sync>;

/// The budget of cached, reopenable descriptors, and what is needed to reopen them.
pub struct FdCache {
    /// Looks objects up on lazy legs (set once, by the core).
    pub(super) resolver: std::sync::OnceLock<Resolver>,
    /// Per leg: a readable descriptor of the leg root, naming its filesystem for
    /// `open_by_handle_at`; None where handles cannot be used.
    pub(super) mount_fds: Vec<RwLock<Option<Arc<OwnedFd>>>>,
    /// Per leg: the device of the leg root (objects on other devices are pinned).
    pub(super) root_devs: Vec<AtomicU64>,
    /// Most reopenable descriptors open at once (all legs together).
    budget: usize,
    /// Reopenable descriptors open now.
    open: AtomicUsize,
    /// Descriptors in the order they were opened: the oldest are closed first.
    order: Mutex<VecDeque<(Weak<Inode>, LegIdx)>>,
    /// The session log a successor replays, when a keeper holds the session (set once).
    pub(super) journal: std::sync::OnceLock<Arc<takeover::Journal>>,
}

impl FdCache {
    /// A cache over legs whose roots are `roots` (their `O_PATH` descriptors) on `root_devs`.
    pub fn new(
        roots: &[Option<std::os::fd::BorrowedFd<'_>>],
        root_devs: Vec<u64>,
        budget: usize,
    ) -> FdCache {
        // A leg can reopen by handle when its filesystem makes handles and we may open them
        // (CAP_DAC_READ_SEARCH): tried once, on the leg root.
        let mount_fds = roots
            .iter()
            .map(|r| RwLock::new(r.and_then(Self::mount_fd_for).map(Arc::new)))
            .collect();
        FdCache {
            resolver: std::sync::OnceLock::new(),
            mount_fds,
            root_devs: root_devs.into_iter().map(AtomicU64::new).collect(),
            budget: budget.max(16),
            open: AtomicUsize::new(0),
            order: Mutex::new(VecDeque::new()),
            journal: std::sync::OnceLock::new(),
        }
    }

    /// A descriptor to open handles with on the leg whose root is `root`, if its filesystem
    /// makes handles and we may open them (CAP_DAC_READ_SEARCH): tried once, on the root.
    pub(super) fn mount_fd_for(root: std::os::fd::BorrowedFd<'_>) -> Option<OwnedFd> {
        let mount = sys::fd::open_mount_fd(root).ok()?;
        let (h, _) = sys::fd::file_handle(root).ok()??;
        sys::fd::open_by_handle(mount.as_fd(), &h).ok()?;
        Some(mount)
    }

    /// How many reopenable descriptors are open.
    pub fn open_count(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Whether the descriptor of an object on `leg` on device `dev` may be closed and
    /// reopened by handle (the leg makes handles, and the object is on its root's
    /// filesystem); false pins it.
    pub(super) fn reopenable(&self, leg: LegIdx, dev: u64) -> bool {
        self.mount_fds.get(leg).is_some_and(|m| m.read().is_some())
            && self.root_devs.get(leg).map(|d| d.load(Ordering::Relaxed)) == Some(dev)
    }

    /// A reopenable descriptor was opened; closes the oldest ones while over budget. One whose
    /// object has a file open must stay open: it goes back to the end, to be closed later.
    pub(super) fn opened(&self, inode: Weak<Inode>, leg: LegIdx) {
        self.open.fetch_add(1, Ordering::AcqRel);
        let mut order = self.order.lock();
        order.push_back((inode, leg));
        // Entries put back by this call: once the queue holds nothing else, stop.
        let mut put_back = 0;
        while self.open.load(Ordering::Acquire) > self.budget && put_back < order.len() {
            let Some((w, l)) = order.pop_front() else {
                break;
            };
            let Some(i) = w.upgrade() else { continue };
            match i.close_cached(l) {
                Some(true) => {
                    self.open.fetch_sub(1, Ordering::AcqRel);
                }
                Some(false) => {}
                None => {
                    drop(i);
                    order.push_back((w, l));
                    put_back += 1;
                }
            }
        }
        // Entries of inodes that died meanwhile pile up when nothing is evicted: drop them.
        if order.len() > 4 * self.budget {
            drop_dead(&mut order);
        }
    }

    /// Drops the entries of dead inodes from the eviction order: a `Weak` keeps its inode's
    /// memory allocated (not its descriptors) until it goes.
    pub(super) fn prune(&self) {
        let mut order = self.order.lock();
        drop_dead(&mut order);
        if order.capacity() > 2 * order.len() + 1024 {
            order.shrink_to_fit();
        }
    }

    /// Entries in the eviction order (tests).
    #[cfg(test)]
    fn queued(&self) -> usize {
        self.order.lock().len()
    }

    pub(super) fn closed(&self, n: usize) {
        if n > 0 {
            self.open.fetch_sub(n, Ordering::AcqRel);
        }
    }
}

/// Drops the eviction-order entries whose inode has died.
fn drop_dead(order: &mut VecDeque<(Weak<Inode>, LegIdx)>) {
    order.retain(|(w, _)| w.strong_count() > 0);
}

#[cfg(test)]
mod tests {
    use super::super::tests::id;
    use super::super::{Identity, InodeTable, ROOT_INO};
    use super::*;

    /// A table over one real leg (a temporary directory), so that descriptors are reopenable
    /// by handle and queued for eviction (root, for open_by_handle_at).
    struct RealLeg {
        dir: std::path::PathBuf,
        dev: u64,
        t: InodeTable,
    }

    impl RealLeg {
        fn new(tag: &str, budget: usize) -> RealLeg {
            let dir = std::env::temp_dir().join(format!("mirrorfs-{tag}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let root = sys::fd::open_root(&dir).unwrap();
            let st = sys::fd::fstat(root.as_fd()).unwrap();
            let root_id = Identity {
                leg: 0,
                dev: st.st_dev,
                ino: st.st_ino,
            };
            let t = InodeTable::new(vec![Some(root)], &[root_id], budget);
            let leg = RealLeg {
                dir,
                dev: st.st_dev,
                t,
            };
            assert!(
                leg.t.cache.mount_fds[0].read().is_some(),
                "file handles are not usable here (this test needs root)"
            );
            leg
        }

        fn id(&self, ino: u64) -> Identity {
            Identity {
                leg: 0,
                dev: self.dev,
                ino,
            }
        }

        /// Creates the file `f<n>` and claims it: its inode and its backing inode number.
        fn make(&self, n: usize) -> (Arc<Inode>, u64) {
            let name = std::ffi::CString::new(format!("f{n}")).unwrap();
            std::fs::write(self.dir.join(format!("f{n}")), b"x").unwrap();
            let root = self.t.get(ROOT_INO).unwrap().fd(0).unwrap();
            let fd = sys::fd::open_path_at(root.as_fd(), &name).unwrap();
            let st = sys::fd::fstat(fd.as_fd()).unwrap();
            let inode = self
                .t
                .claim(&[self.id(st.st_ino)], vec![Some(fd)], libc::S_IFREG, 0);
            (inode, st.st_ino)
        }
    }

    impl Drop for RealLeg {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    #[test]
    fn tidying_lets_go_of_forgotten_inodes() {
        let leg = RealLeg::new("tidy", 1000);
        let t = &leg.t;
        let inos: Vec<u64> = (0..50).map(|n| leg.make(n).0.ino).collect();
        assert_eq!(t.cache.queued(), 50);
        for ino in inos {
            t.forget(ino, 1);
        }
        // Each queued entry still holds its dead inode's memory, until tidied.
        assert_eq!(t.cache.queued(), 50);
        t.tidy();
        assert_eq!(t.cache.queued(), 0);
    }

    #[test]
    fn a_descriptor_kept_open_by_a_file_waits_its_turn_and_closes_later() {
        let leg = RealLeg::new("turn", 16);
        let t = &leg.t;
        let make = |n| leg.make(n).0;
        let first = make(0);
        first.file_opened();
        let mut rest: Vec<_> = (1..40).map(make).collect();
        // Its file is open: it stays, the others go in its place.
        assert!(first.holds_open(0));
        assert!(t.cached_fds() <= 16, "{} cached", t.cached_fds());
        first.file_closed();
        // Closed, it goes when its turn comes again (it was not dropped from the order).
        rest.extend((40..80).map(make));
        assert!(
            !first.holds_open(0),
            "the descriptor stayed open past the budget"
        );
        assert!(t.cached_fds() <= 16, "{} cached", t.cached_fds());
        // And it comes back through its handle when asked for.
        assert!(sys::fd::fstat(first.fd(0).unwrap().as_fd()).is_ok());
    }

    /// An object's file handle is taken only when its descriptor is closed, or when asked for
    /// (the session log): an object whose descriptor stays open never pays for one.
    #[test]
    fn a_handle_is_taken_only_when_the_descriptor_closes_or_it_is_asked_for() {
        let leg = RealLeg::new("lazyhandle", 16);
        let t = &leg.t;
        let obj = |i: &Arc<Inode>| i.objects[0].read().clone().unwrap();
        let (first, first_ino) = leg.make(0);
        let asked = leg.make(1).0;
        assert!(obj(&first).handle.get().is_none(), "taken when found");
        assert!(obj(&asked).handle().is_some(), "taken when asked for");
        let fresh = (2..10).map(|n| leg.make(n).0).collect::<Vec<_>>();
        assert!(fresh.iter().all(|i| obj(i).handle.get().is_none()));
        let _more: Vec<_> = (10..40).map(|n| leg.make(n).0).collect();
        assert!(!first.holds_open(0), "closed past the budget");
        assert!(obj(&first).handle.get().is_some(), "taken as it closed");
        let st = sys::fd::fstat(first.fd(0).unwrap().as_fd()).unwrap();
        assert_eq!(st.st_ino, first_ino, "reopened by it");
        assert!(t.cached_fds() <= 16, "{} cached", t.cached_fds());
    }

    /// One leg's identity finds a live inode only while its descriptor there is open: once the
    /// cache closed it, the leg may have given the number to another object, and only a full
    /// claim (every leg's identity) decides. Each find counts a kernel lookup.
    #[test]
    fn a_live_inode_is_found_by_one_identity_only_while_its_descriptor_is_open() {
        let leg = RealLeg::new("live", 16);
        let t = &leg.t;
        let make = |n| leg.make(n);
        let leg_id = |ino| leg.id(ino);
        let (a, a_ino) = make(0);
        let found = t.claim_live(&leg_id(a_ino), libc::S_IFREG).expect("found");
        assert!(Arc::ptr_eq(&found, &a));
        assert!(
            t.claim_live(&leg_id(a_ino), libc::S_IFDIR).is_none(),
            "another type"
        );
        assert!(t
            .claim_live(&leg_id(a_ino + 1_000_000), libc::S_IFREG)
            .is_none());
        // Two lookups counted (the claim and the find): two forgets let it go.
        t.forget(a.ino, 1);
        assert!(t.get(a.ino).is_ok());
        t.forget(a.ino, 1);
        assert!(t.get(a.ino).is_err());
        assert!(
            t.claim_live(&leg_id(a_ino), libc::S_IFREG).is_none(),
            "not live"
        );
        // Live, but its descriptor closed by the budget: not found by one identity.
        let (b, b_ino) = make(1);
        let _rest: Vec<_> = (2..40).map(make).collect();
        assert!(
            !b.holds_open(0),
            "the budget closed it ({} cached)",
            t.cached_fds()
        );
        assert!(t.claim_live(&leg_id(b_ino), libc::S_IFREG).is_none());
    }

    /// State the table should hold and does not (no object on a leg, and none to look for;
    /// no handle to reopen a closed descriptor by) is a fault of mirrorfs, not of the leg: a
    /// fan-out that met EIO here took it for a failing disk and dropped a healthy leg.
    #[test]
    fn missing_state_is_an_internal_fault_not_a_leg_error() {
        let t = InodeTable::new(vec![None, None], &[id(0, 2), id(1, 2)], 64);
        let i = t.claim(&[id(0, 10)], vec![None, None], libc::S_IFREG, 0);
        assert!(!i.lazy_on(1));
        assert_eq!(i.fd(1).err(), Some(Errno::INTERNAL), "never found on leg 1");
        assert_eq!(i.found_fd(1).err(), Some(Errno::INTERNAL));
        assert_eq!(
            i.fd(0).err(),
            Some(Errno::INTERNAL),
            "no descriptor, no handle"
        );
        assert!(!crate::mirror::outcome::is_leg_fault(Errno::INTERNAL));
    }
}
