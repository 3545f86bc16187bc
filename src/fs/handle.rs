//! Open files and directories.

use super::inode::{Inode, IoMode};
use crate::errno::{Errno, Result};
use crate::leg::LegIdx;
use crate::policy::stream::StreamTracker;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Descriptors an open file was admitted for; given back when it closes.
pub struct Admission {
    counter: Arc<AtomicUsize>,
    n: usize,
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.counter.fetch_sub(self.n, Ordering::AcqRel);
    }
}

/// One leg's descriptor of an open file.
pub struct LegFd {
    fd: OwnedFd,
    /// Opened with `O_DIRECT` (buffers must be aligned).
    pub direct: bool,
}

impl AsFd for LegFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Opens on one leg with `O_DIRECT` when asked, falling back to a buffered descriptor where the
/// leg's filesystem refuses `O_DIRECT` (tmpfs). Returns the descriptor and whether it is direct.
pub(super) fn open_maybe_direct(
    flags: i32,
    open: impl Fn(i32) -> Result<OwnedFd>,
) -> Result<(OwnedFd, bool)> {
    if flags & libc::O_DIRECT != 0 {
        match open(flags) {
            Ok(fd) => return Ok((fd, true)),
            Err(Errno::EINVAL) => {}
            Err(e) => return Err(e),
        }
    }
    Ok((open(flags & !libc::O_DIRECT)?, false))
}

/// One leg's part in an open file.
enum Slot {
    /// The leg takes no part.
    Absent,
    /// Opened at its first use: a read-only open (see [`OpenFile::read_only`]).
    Later,
    Open(Arc<LegFd>),
}

/// A regular file opened through the mount: one real descriptor per leg.
pub struct OpenFile {
    pub inode: Arc<Inode>,
    _admission: Admission,
    /// Per leg: the descriptor; a leg that joins (after a resync) is attached afresh.
    fds: Vec<RwLock<Slot>>,
    /// The flags the file was opened with on the legs (to attach a leg later).
    pub flags: i32,
    /// Data was written since the last time the legs' mtimes were made equal.
    pub wrote: AtomicBool,
    /// The read streams of this open file (for the read policy).
    pub streams: Mutex<StreamTracker>,
    /// How the kernel reaches the data through this open (counted in the inode's `io`; none
    /// until [`with_io`](Self::with_io)).
    io: Option<IoKind>,
}

/// How the kernel reaches a file's data through one open (see `inode::IoMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoKind {
    /// Through the page cache and the daemon.
    Cached,
    /// Passed through to the leg file `IoMode::backing` (reads of a read-only open never
    /// reach the daemon; a writer's reads and writes still do, with direct I/O).
    Passthrough,
}

impl OpenFile {
    pub fn new(
        inode: Arc<Inode>,
        admission: Admission,
        fds: Vec<Option<(OwnedFd, bool)>>,
        flags: i32,
    ) -> OpenFile {
        inode.file_opened();
        OpenFile {
            inode,
            _admission: admission,
            fds: fds
                .into_iter()
                .map(|f| RwLock::new(Slot::from(f)))
                .collect(),
            flags,
            wrote: AtomicBool::new(false),
            streams: Mutex::new(StreamTracker::new()),
            io: None,
        }
    }

    /// Decides how this open (just made) reaches the data: `decide` sees the inode's `io`
    /// under its lock and says (or refuses the open); the open is counted there as that until
    /// it closes.
    pub fn with_io(
        mut self,
        decide: impl FnOnce(&mut IoMode) -> Result<IoKind>,
    ) -> Result<OpenFile> {
        let mut io = self.inode.io.lock();
        let kind = decide(&mut io)?;
        match kind {
            IoKind::Cached => io.cached += 1,
            IoKind::Passthrough => io.passthrough += 1,
        }
        drop(io);
        self.io = Some(kind);
        Ok(self)
    }

    pub fn io(&self) -> IoKind {
        self.io.unwrap_or(IoKind::Cached)
    }

    /// A read-only open of `inode` on `legs` (of `n`) whose descriptors are opened at their
    /// first use. Most read-only opens are answered from the kernel's page cache and never
    /// read through the daemon (`cache=full` keeps it across opens), so such an open costs no
    /// leg descriptor; the first read opens the leg the policy chose, and a read-repair the
    /// leg it repairs. Only where the kernel checked the caller's access (`default_permissions`,
    /// or an exec the core checked itself).
    pub fn read_only(
        inode: Arc<Inode>,
        admission: Admission,
        legs: &[LegIdx],
        n: usize,
        flags: i32,
    ) -> OpenFile {
        let mut f = OpenFile::new(inode, admission, (0..n).map(|_| None).collect(), flags);
        for &l in legs {
            if let Some(cell) = f.fds.get_mut(l) {
                *cell.get_mut() = Slot::Later;
            }
        }
        f
    }

    pub fn fd(&self, leg: LegIdx) -> Result<Arc<LegFd>> {
        // No slot, or no descriptor on a leg this open has none on: a fault of ours (the
        // caller should have kept to the open's legs), never taken for the leg's.
        let cell = self.fds.get(leg).ok_or(Errno::INTERNAL)?;
        match &*cell.read() {
            Slot::Open(f) => return Ok(f.clone()),
            Slot::Absent => return Err(Errno::INTERNAL),
            Slot::Later => {}
        }
        let mut slot = cell.write();
        if let Slot::Open(f) = &*slot {
            return Ok(f.clone());
        }
        if matches!(*slot, Slot::Absent) {
            return Err(Errno::INTERNAL);
        }
        let path = self.inode.fd(leg)?;
        let (fd, direct) =
            open_maybe_direct(self.flags, |f| crate::sys::fd::reopen(path.as_fd(), f))?;
        let f = Arc::new(LegFd { fd, direct });
        *slot = Slot::Open(f.clone());
        Ok(f)
    }

    /// The descriptor on `leg` is opened at its first use (a read-only open leaves quiet
    /// legs for later).
    pub fn open_later(&self, leg: LegIdx) {
        if let Some(cell) = self.fds.get(leg) {
            *cell.write() = Slot::Later;
        }
    }

    pub fn is_direct(&self, leg: LegIdx) -> bool {
        self.fds
            .get(leg)
            .is_some_and(|f| matches!(&*f.read(), Slot::Open(f) if f.direct))
    }

    /// Legs this handle has (or will open on use) a descriptor on.
    pub fn legs(&self) -> Vec<LegIdx> {
        (0..self.fds.len())
            .filter(|&l| !matches!(*self.fds[l].read(), Slot::Absent))
            .collect()
    }

    /// Gives the handle a (new) descriptor on `leg` (a leg that joined after the open), or
    /// none. Returns the descriptor it had, for the caller to close out of the slot's lock:
    /// closing a file on a FUSE leg (sshfs) sends FLUSH and waits for the leg's server, which
    /// may hang, and every read and write of the file takes that lock.
    pub fn attach(&self, leg: LegIdx, fd: Option<(OwnedFd, bool)>) -> Option<Arc<LegFd>> {
        let cell = self.fds.get(leg)?;
        match std::mem::replace(&mut *cell.write(), Slot::from(fd)) {
            Slot::Open(old) => Some(old),
            Slot::Later | Slot::Absent => None,
        }
    }
}

/// Closes descriptors of a leg out of the mirror on a thread of their own: on a leg that
/// hangs (a FUSE leg whose server stopped answering) each close waits for the server (FLUSH),
/// and neither the sweeper nor a request the mount serves must wait with it. Closed here if no
/// thread can be had.
pub fn close_elsewhere(leg: LegIdx, fds: Vec<Arc<LegFd>>) {
    if fds.is_empty() {
        return;
    }
    let n = fds.len();
    let spawned = std::thread::Builder::new()
        .name(format!("leg{leg}-close"))
        .spawn(move || {
            drop(fds);
            log::info!("leg {leg}: {n} descriptor(s) of a leg out of the mirror closed");
        });
    if let Err(e) = spawned {
        log::warn!("leg {leg}: no thread to close its descriptors on ({e}): closed in place");
    }
}

impl From<Option<(OwnedFd, bool)>> for Slot {
    fn from(fd: Option<(OwnedFd, bool)>) -> Slot {
        match fd {
            Some((fd, direct)) => Slot::Open(Arc::new(LegFd { fd, direct })),
            None => Slot::Absent,
        }
    }
}

impl Drop for OpenFile {
    fn drop(&mut self) {
        let mut io = self.inode.io.lock();
        match self.io {
            None => {}
            Some(IoKind::Cached) => io.cached = io.cached.saturating_sub(1),
            Some(IoKind::Passthrough) => {
                io.passthrough = io.passthrough.saturating_sub(1);
                if io.passthrough == 0 {
                    io.backing = None;
                }
            }
        }
        drop(io);
        self.inode.file_closed();
    }
}

/// One entry of a directory listing as the mount shows it.
#[derive(Clone, Debug)]
pub struct DirEntry {
    pub ino: u64,
    /// `S_IFMT` bits (0 when the leg did not say).
    pub kind: u32,
    pub name: OsString,
}

/// A directory opened through the mount. The listing is read once, when the kernel asks for
/// offset 0, and served from memory for the following calls (offset = index + 1).
pub struct OpenDir {
    pub inode: Arc<Inode>,
    pub entries: Mutex<Option<Arc<Vec<DirEntry>>>>,
}

enum Handle {
    File(Arc<OpenFile>),
    Dir(Arc<OpenDir>),
}

impl Handle {
    /// This handle as the session log keeps it.
    fn takeover(&self) -> super::takeover::Open {
        match self {
            Handle::File(f) => super::takeover::Open {
                ino: f.inode.ino,
                flags: f.flags,
                dir: false,
            },
            Handle::Dir(d) => super::takeover::Open {
                ino: d.inode.ino,
                flags: libc::O_RDONLY | libc::O_DIRECTORY,
                dir: true,
            },
        }
    }
}

/// File handles given to the kernel. Numbers are never reused within a mount.
pub struct HandleTable {
    map: Mutex<HashMap<u64, Handle>>,
    next: AtomicU64,
    /// The session log a successor replays, when a keeper holds the session (set once).
    journal: std::sync::OnceLock<Arc<super::takeover::Journal>>,
    /// Leg descriptors held by open files now.
    open_fds: Arc<AtomicUsize>,
    /// Most leg descriptors open files may hold.
    fd_limit: usize,
}

impl HandleTable {
    /// A table whose open files may hold at most `fd_limit` leg descriptors together.
    pub fn new(fd_limit: usize) -> HandleTable {
        HandleTable {
            map: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            journal: std::sync::OnceLock::new(),
            open_fds: Arc::new(AtomicUsize::new(0)),
            fd_limit,
        }
    }

    /// Admits an open that needs `n` leg descriptors, or refuses it with ENFILE *before* any
    /// leg is touched. Without this, the daemon's own open-file limit would make one leg's
    /// open (or its O_TRUNC) succeed and another's fail, and the legs would part.
    pub fn admit(&self, n: usize) -> Result<Admission> {
        let before = self.open_fds.fetch_add(n, Ordering::AcqRel);
        let admission = Admission {
            counter: self.open_fds.clone(),
            n,
        };
        if before + n > self.fd_limit {
            return Err(Errno::ENFILE);
        }
        Ok(admission)
    }

    fn insert(&self, h: Handle) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        let mut map = self.map.lock();
        if let Some(j) = self.journal.get() {
            j.open(fh, &h.takeover());
        }
        map.insert(fh, h);
        fh
    }

    /// Keeps the session log from now on (`fs/takeover.rs`; set once, before any request).
    pub fn set_journal(&self, journal: Arc<super::takeover::Journal>) {
        let _ = self.journal.set(journal);
    }

    /// Takes over the file handle `fh` of a serving process that died: it answers as `f`.
    pub fn restore_file(&self, fh: u64, f: OpenFile) {
        self.restore(fh, Handle::File(Arc::new(f)));
    }

    /// Takes over the directory handle `fh` of a serving process that died.
    pub fn restore_dir(&self, fh: u64, d: OpenDir) {
        self.restore(fh, Handle::Dir(Arc::new(d)));
    }

    fn restore(&self, fh: u64, h: Handle) {
        let mut map = self.map.lock();
        if let Some(j) = self.journal.get() {
            j.open(fh, &h.takeover());
        }
        map.insert(fh, h);
        self.next.fetch_max(fh + 1, Ordering::Relaxed);
    }

    /// Hands out only numbers above `top` from now on.
    pub fn numbers_above(&self, top: u64) {
        self.next.fetch_max(top + 1, Ordering::Relaxed);
    }

    /// The open handles as the session log keeps them (a successor's first snapshot).
    pub fn takeover_opens(&self) -> std::collections::BTreeMap<u64, super::takeover::Open> {
        self.map
            .lock()
            .iter()
            .map(|(&fh, h)| (fh, h.takeover()))
            .collect()
    }

    /// The highest number handed out so far.
    pub fn top_number(&self) -> u64 {
        self.next.load(Ordering::Relaxed).saturating_sub(1)
    }

    pub fn insert_file(&self, f: OpenFile) -> u64 {
        self.insert(Handle::File(Arc::new(f)))
    }

    pub fn insert_dir(&self, d: OpenDir) -> u64 {
        self.insert(Handle::Dir(Arc::new(d)))
    }

    pub fn file(&self, fh: u64) -> Result<Arc<OpenFile>> {
        match self.map.lock().get(&fh) {
            Some(Handle::File(f)) => Ok(f.clone()),
            _ => Err(Errno::EBADF),
        }
    }

    pub fn dir(&self, fh: u64) -> Result<Arc<OpenDir>> {
        match self.map.lock().get(&fh) {
            Some(Handle::Dir(d)) => Ok(d.clone()),
            _ => Err(Errno::EBADF),
        }
    }

    /// Forgets `fh`; the descriptors close when the last user is done with them.
    pub fn remove(&self, fh: u64) {
        let mut map = self.map.lock();
        if map.remove(&fh).is_some() {
            if let Some(j) = self.journal.get() {
                j.close(fh);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.map.lock().len()
    }

    /// Every open file (to attach a leg that joined).
    pub fn open_files(&self) -> Vec<Arc<OpenFile>> {
        self.map
            .lock()
            .values()
            .filter_map(|h| match h {
                Handle::File(f) => Some(f.clone()),
                Handle::Dir(_) => None,
            })
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
