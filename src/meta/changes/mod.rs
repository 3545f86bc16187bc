//! Which paths may differ between the legs: the write-intent log and the "changed while away"
//! logs.
//!
//! **Write-intent log** (md's bitmap idea, per path): before the first change to a file or a
//! directory that is clean, its path relative to the leg root is appended to
//! `.mirrorfs/intent.log` on every in-sync leg and flushed (`fdatasync`); only then does the
//! change reach any leg. Entries are cleared lazily: a sweep every second takes the entries
//! idle for [`IDLE`], flushes those objects on every leg, and rewrites the log without them
//! (atomically). A clean unmount flushes everything and empties the log. After a crash, the
//! union of the legs' intent logs lists every path whose copies may differ; everything else is
//! identical on every leg.
//!
//! **Away logs** (`away.rs`): while a member is not in sync, every in-sync leg keeps the paths
//! changed since it left, for its return.
//!
//! **Directory covers** (md's bitmap pays one flush per region, not per write): a directory
//! about to get new entries gets one *cover* record, `/c<T>/<dir path>`, and whatever is
//! created in it while the cover stands is covered without a record of its own: a `tar`
//! extract pays one flush per directory, not one per file. After a crash, a cover stands for
//! the directory itself and every entry in it whose ctime on some leg is at or after `T` (two
//! seconds before the cover was written; ctime cannot be set by users), or whose type, size,
//! mode or mtime differ between the legs, or that some leg lacks (`expand_cover` in
//! `recovery/expand.rs`). A cover stays while anything it covers is dirty: each change to a
//! covered object renews it.
//!
//! A directory created under a cover is covered from birth by the same record (an *inherited*
//! cover, kept in memory only): a `tar` extract of a whole tree into one directory pays one
//! flush in all. After a crash a cover also stands, recursively, for what is in every
//! subdirectory whose ctime on some leg is at or after `T`: such a directory was created or
//! changed after `T`, and every entry created in it since moved its ctime again, so a
//! directory born under the cover is always among them.
//!
//! **Subtree covers** (`/s<T>/<dir>`): after [`SUBTREE_AFTER`](dirty::SUBTREE_AFTER) covers
//! within [`IDLE`] under one directory below the root, the next directory there that needs a
//! cover gets a subtree cover of that directory instead, and every directory below it is
//! covered without a record while it stands (an `rm -rf` of an old tree pays a few flushes).
//! After a crash it stands for what a cover does, looking into every directory below it, recent
//! or not.
//!
//! **Renames** (`rename.rs`): before a rename reaches any leg, what is dirty at or below the
//! moved name is recorded again under the new paths.
//!
//! **Identity records** (`/i<leg id>=<inode>,...`, [`identity_record`]): a file with several
//! names that is dirty under one of them, or changed through an open descriptor after that
//! name went, is recorded by what it is on each leg, its inode number there, not by a path:
//! once its name is gone, a record of that name would stand for nothing after a crash, while
//! the file lives on under its other names. Before a name goes while others keep the object,
//! what is dirty under it is recorded again by identity ([`ChangeLog::dirty_at`],
//! [`ChangeLog::record_identity`]). After a crash such a record stands for every name the object
//! has on the first in-sync leg it names (`find_identity` in `recovery/expand.rs`: one walk of
//! that leg's tree).
//!
//! One file per job: the records' format on disk (`format.rs`), the in-memory dirty index
//! (`dirty.rs`), rename planning (`rename.rs`), the away logs (`away.rs`). What covers and
//! identity records stand for after a crash is worked out by the resync, in
//! `recovery/expand.rs`. What is here: the state they share, and the intent log's flush.

mod away;
mod dirty;
mod format;
mod rename;

use away::Away;
use dirty::{Cover, Dirty};
pub use dirty::{Sweep, IDLE};
pub use rename::Renaming;

pub(crate) use format::child_path;
use format::{append, log_path};
pub use format::{
    away_log_name, identity_record, parse_cover, parse_identity, read_log, CoverRecord,
    COVER_SLACK, INTENT_LOG, WHOLE_TREE,
};

use crate::lock_order::{Ordered, Rank};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

/// The state of the change log, behind one lock: the dirty index, the away logs, the renames
/// under way.
struct Inner {
    /// Dirty objects by the mirror's inode number.
    dirty: HashMap<u64, Dirty>,
    /// The same by path (several when a deleted object's path was taken again): a rename
    /// finds what it moves without looking at every dirty object.
    by_path: std::collections::BTreeMap<Vec<u8>, Vec<u64>>,
    /// Directory covers by the directory's inode number (subtree covers:
    /// [`SUBTREE_KEY`](dirty::SUBTREE_KEY)).
    covers: HashMap<u64, Cover>,
    /// The directories of the last covers written, and when.
    recent: std::collections::VecDeque<(Instant, Vec<u8>)>,
    /// The next subtree cover's key.
    next_subtree: u64,
    away: Vec<Away>,
    /// The records of renames under way, by [`Renaming::id`]: written before the rename
    /// reaches a leg, kept by every rewrite until [`ChangeLog::renamed`].
    moving: HashMap<u64, Vec<Vec<u8>>>,
    next_move: u64,
}

/// The change records of one mounted mirror.
pub struct ChangeLog {
    /// Leg roots, by leg index (a `mirrorfs leg replace` changes one).
    roots: parking_lot::RwLock<Vec<PathBuf>>,
    /// Whether the write-intent log is kept (`write_intent=off` turns it off).
    intent: bool,
    inner: Ordered<Mutex<Inner>>,
}

impl ChangeLog {
    pub fn new(roots: Vec<PathBuf>, intent: bool) -> ChangeLog {
        ChangeLog {
            roots: parking_lot::RwLock::new(roots),
            intent,
            inner: Ordered::mutex(
                Rank::ChangeLog,
                0,
                Inner {
                    dirty: HashMap::new(),
                    by_path: Default::default(),
                    covers: HashMap::new(),
                    recent: Default::default(),
                    next_subtree: 0,
                    away: Vec::new(),
                    moving: HashMap::new(),
                    next_move: 0,
                },
            ),
        }
    }

    fn root(&self, leg: usize) -> PathBuf {
        self.roots.read()[leg].clone()
    }

    /// Leg `leg` lives at `path` from now on (`mirrorfs leg replace`).
    pub fn set_root(&self, leg: usize, path: PathBuf) {
        self.roots.write()[leg] = path;
    }

    pub fn intent_enabled(&self) -> bool {
        self.intent
    }

    /// Appends `record` to the intent log of every leg in `legs` and flushes it, the legs in
    /// parallel; the legs that failed, with the error.
    fn record(&self, legs: &[usize], record: &[u8]) -> Vec<(usize, std::io::Error)> {
        self.record_all(legs, &[record])
    }

    /// As [`record`](Self::record), for several records at once (one flush per leg).
    fn record_all(&self, legs: &[usize], records: &[&[u8]]) -> Vec<(usize, std::io::Error)> {
        let one = |l: usize| append(&log_path(&self.root(l), INTENT_LOG), records, true);
        let Some((&first, rest)) = legs.split_first() else {
            return Vec::new();
        };
        std::thread::scope(|s| {
            // A leg whose thread cannot be started (a pids limit) is written here, after.
            let others: Vec<_> = rest
                .iter()
                .map(|&l| {
                    (
                        l,
                        std::thread::Builder::new().spawn_scoped(s, move || one(l)),
                    )
                })
                .collect();
            let mut failed: Vec<(usize, std::io::Error)> =
                one(first).err().map(|e| (first, e)).into_iter().collect();
            for (l, h) in others {
                let r = match h {
                    Ok(h) => h.join().unwrap_or_else(|_| {
                        Err(std::io::Error::other("the intent log's writer panicked"))
                    }),
                    Err(_) => one(l),
                };
                if let Err(e) = r {
                    failed.push((l, e));
                }
            }
            failed
        })
    }
}

/// What the unit tests of the change log and of its crash-time expansion share.
#[cfg(test)]
pub(crate) mod testing {
    use crate::meta::META_DIR;
    use std::path::PathBuf;

    /// `n` leg roots in a temporary directory, each with its `.mirrorfs/`.
    pub(crate) fn legs(n: usize) -> (tempfile::TempDir, Vec<PathBuf>) {
        let d = tempfile::tempdir().unwrap();
        let v: Vec<PathBuf> = (0..n)
            .map(|i| {
                let p = d.path().join(format!("l{i}"));
                std::fs::create_dir_all(p.join(META_DIR)).unwrap();
                p
            })
            .collect();
        (d, v)
    }
}
