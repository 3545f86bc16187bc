//! The tree engine: compares and synchronises the trees of legs, for resync and scrub.
//!
//! Plain Rust on directory descriptors: no FUSE, no knowledge of the running mount. Every
//! access is relative to a directory descriptor with `O_NOFOLLOW` / `AT_SYMLINK_NOFOLLOW`, one
//! name component at a time, so a symlink planted in a leg never makes the engine read or write
//! outside the legs. The daemon runs it on a background thread and sees it through
//! [`Control`]: shared progress counters ([`Progress`]), a cancel flag, a throttle
//! ([`Throttle`]) and an [`EntryHook`] that brackets the work on each entry (for locking
//! against concurrent writes, marking entries readable on a resyncing leg, logging).
//!
//! Entry points:
//! - [`compare_entry`]: what differs about one path across N legs;
//! - [`scrub`]: walk N legs, report differences, optionally repair them (by majority, or from a
//!   named leg);
//! - [`sync_full`]: make a target leg identical to a source leg (full resync);
//! - [`sync_paths`]: the same for a list of paths (incremental resync from a "changed while
//!   away" record or the write-intent log).
//!
//! # What a crash halfway leaves behind
//!
//! Nothing here is transactional; the guarantees rely on the daemon keeping the target leg
//! marked stale (not read, not trusted) until a sync has returned `Ok` with `cancelled ==
//! false`, and on re-running the sync after a crash. Each run is idempotent: re-running it
//! from the start converges.
//! - The source leg is never written by a sync (only read; its atimes may move).
//! - A regular file is updated in place: differing ranges are written, then the size, owner,
//!   xattrs, mode and mtime are set, in that order. A crash mid-file leaves a target file with
//!   a mix of old and new ranges and perhaps the old mtime; the next run compares content (not
//!   just size and mtime), so it finds and rewrites the ranges that still differ.
//! - An entry of the wrong type, a symlink with the wrong target, a device with the wrong
//!   rdev, or a file whose hard-link identity is wrong is removed and created again: a crash in
//!   between leaves the name missing on the target (the next run creates it).
//! - A directory is created with mode 0700, filled, and gets its final mode, owner, xattrs and
//!   mtime after its entries (so a crash leaves at worst a too-strict, too-new directory).
//! - Extra entries are removed depth-first with `unlinkat`; a crash leaves part of the subtree.
//! - A scrub repair is a sync of single entries from the good leg to the bad ones: the same
//!   holds, and the bad leg's copy stays bad (never worse than unreadable-in-part) until the
//!   next scrub repairs it again.
//! - Nothing is fsync'ed by the engine; the daemon calls `syncfs` on the target before it marks
//!   the leg in sync (a power loss before that leaves it stale, which is the safe side).
//!
//! # Choices
//! - `security.selinux` is ignored by default ([`TreeOptions::ignore_xattrs`]): the label is
//!   the target system's policy, not data; copying it can fail or be wrong on another host.
//!   Every other namespace the process can read is compared and copied (`user`, `trusted`,
//!   `security.capability`, `system.posix_acl_*`).
//! - atime and ctime are never compared; mtime of directories is compared only with
//!   [`TreeOptions::compare_dir_mtime`], but a sync always sets it. The leg roots are entries
//!   like any other directory: their mode, owner, xattrs and mtime are compared and synced
//!   too (a sync sets the target root's mtime last, after everything under it, `.mirrorfs/`
//!   included, has been written).
//! - Hard links: the *leader* of a link group is its first name in walk order (component-wise
//!   sorted path order); two legs have the same link structure when, for each name, its
//!   leader is the same on both.

mod compare;
mod copy;
mod links;
mod node;
mod progress;
mod scrub;
mod sync;
mod throttle;

pub use compare::{compare_entry, DiffKind, Difference, LegDetail, RepairOutcome};
pub use node::Kind;
pub use progress::{Phase, Progress, ProgressSnapshot};
pub use scrub::{scrub, Repair, ScrubReport};
pub use sync::{sync_full, sync_paths, SyncReport};
pub use throttle::Throttle;

use crate::errno::Errno;
use serde::Serialize;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Options of a run.
#[derive(Clone, Debug)]
pub struct TreeOptions {
    /// Names at a leg's root that are not part of the mirror: never compared, synced or
    /// deleted. Default: `.mirrorfs` and `lost+found`.
    pub skip_root_names: Vec<OsString>,
    /// Xattr names neither compared nor copied. Default: `security.selinux`.
    pub ignore_xattrs: Vec<Vec<u8>>,
    /// Content is read and compared in chunks of this size (default 1 MiB).
    pub chunk_size: usize,
    /// Count entries and bytes first (a metadata-only walk) so that progress has totals and an
    /// ETA. Default true.
    pub count_first: bool,
    /// Compare directories' mtimes (scrub, [`compare_entry`]). Default false.
    pub compare_dir_mtime: bool,
    /// Compare file content (scrub, [`compare_entry`]); false = metadata-only scrub.
    pub compare_content: bool,
    /// At most this many differing ranges are listed per file (the rest are merged into the
    /// last one and `ranges_truncated` is set).
    pub max_ranges: usize,
    /// At most this many differences are kept in a [`ScrubReport`] (all are counted and all go
    /// through [`EntryHook::difference`]).
    pub max_reported: usize,
}

impl Default for TreeOptions {
    fn default() -> Self {
        TreeOptions {
            skip_root_names: vec![OsString::from(".mirrorfs"), OsString::from("lost+found")],
            ignore_xattrs: vec![b"security.selinux".to_vec()],
            chunk_size: 1 << 20,
            count_first: true,
            compare_dir_mtime: false,
            compare_content: true,
            max_ranges: 64,
            max_reported: 10_000,
        }
    }
}

impl TreeOptions {
    pub(crate) fn skipped(&self, rel_parent_is_root: bool, name: &std::ffi::OsStr) -> bool {
        rel_parent_is_root && self.skip_root_names.iter().any(|n| n == name)
    }
}

/// Called by the engine around its work on each entry. All methods have do-nothing defaults.
pub trait EntryHook: Send + Sync {
    /// Runs `work`, which compares and changes the entry `path` (for a directory: its own
    /// existence, type and metadata, not its subtree). The daemon takes its per-path lock
    /// around it so that no write interleaves with the engine's on that entry.
    fn with_entry(&self, path: &Path, work: &mut dyn FnMut()) {
        let _ = path;
        work()
    }

    /// The entry `path` is now identical on the target (sync) or on every leg (scrub repair).
    /// For a directory this is called once its subtree is done.
    fn synced(&self, path: &Path) {
        let _ = path;
    }

    /// Whether every copy of `path` was just found as written by a check of the caller's own
    /// (the checksums), inside [`EntryHook::with_entry`]: the engine then does not read and
    /// compare the contents again (metadata and sizes it still compares).
    fn content_verified(&self, path: &Path) -> bool {
        let _ = path;
        false
    }

    /// A difference was found (scrub).
    fn difference(&self, d: &Difference) {
        let _ = d;
    }

    /// An entry was skipped because of an error on `leg` (an index into the legs given to
    /// the run; for a sync 0 = source, 1 = target).
    fn error(&self, path: &Path, leg: usize, errno: Errno) {
        let _ = (path, leg, errno);
    }
}

/// The default hook.
pub struct NoHook;
impl EntryHook for NoHook {}

/// What a run shares with the daemon.
#[derive(Clone)]
pub struct Control {
    pub progress: Arc<Progress>,
    pub cancel: Arc<AtomicBool>,
    pub throttle: Arc<Throttle>,
    pub hook: Arc<dyn EntryHook>,
}

impl Default for Control {
    fn default() -> Self {
        Control::new(None)
    }
}

impl Control {
    /// Fresh counters, cancel flag unset, no hook; `speed_max` in bytes per second.
    pub fn new(speed_max: Option<u64>) -> Control {
        Control {
            progress: Arc::new(Progress::new()),
            cancel: Arc::new(AtomicBool::new(false)),
            throttle: Arc::new(Throttle::new(speed_max)),
            hook: Arc::new(NoHook),
        }
    }

    pub fn with_hook(mut self, hook: Arc<dyn EntryHook>) -> Control {
        self.hook = hook;
        self
    }

    /// Asks the run to stop as soon as it can (within one chunk or one throttle step).
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }

    pub(crate) fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }
}

/// An entry skipped because of an error that did not stop the run.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct EntryError {
    pub path: PathBuf,
    /// Index of the leg (for a sync: 0 = source, 1 = target).
    pub leg: usize,
    pub errno: i32,
}

/// `ECANCELED`, what a cancelled step returns internally.
pub(crate) const CANCELLED: Errno = Errno(libc::ECANCELED);

/// Errors that mean "the tree changed under us", not "the leg is failing".
pub(crate) fn is_race(e: Errno) -> bool {
    matches!(
        e.0,
        libc::ENOENT | libc::EEXIST | libc::ENOTEMPTY | libc::ENOTDIR | libc::ELOOP
    )
}
