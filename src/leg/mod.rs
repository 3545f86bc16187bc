//! A leg: one backing directory, normally on its own disk, holding a full copy of the mirror.

use crate::errno::Result;
use crate::sys;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// Position of a leg in the leg list given at mount (its slot).
pub type LegIdx = usize;

/// Whether a leg takes part in reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LegState {
    /// Holds the same data as every other in-sync leg; gets every write, may serve reads.
    InSync,
    /// Dropped after an I/O error or a disagreement; gets nothing until it is resynced.
    Failed,
}

/// A backing directory and what we know of it.
pub struct Leg {
    pub idx: LegIdx,
    /// The leg's name in stats and in `read_policy=leg:NAME` (`=name=LABEL`, else `legN`).
    pub name: String,
    /// The path given by the user (canonical).
    pub path: PathBuf,
    /// `O_PATH` descriptor of the leg's root directory.
    root: OwnedFd,
    /// Device of the leg root.
    pub dev: u64,
    state: AtomicU8,
    pub counters: LegCounters,
}

/// Plain per-leg counters (the stats issue exposes them).
#[derive(Default)]
pub struct LegCounters {
    pub read_ops: AtomicU64,
    pub read_bytes: AtomicU64,
    pub write_ops: AtomicU64,
    pub write_bytes: AtomicU64,
    pub read_errors: AtomicU64,
    pub write_errors: AtomicU64,
}

impl Leg {
    /// Opens the leg root at `path`.
    pub fn open(idx: LegIdx, path: &Path) -> Result<Leg> {
        let root = sys::fd::open_root(path)?;
        let st = sys::fd::fstat(root.as_fd())?;
        Ok(Leg {
            idx,
            name: format!("leg{idx}"),
            path: path.to_path_buf(),
            root,
            dev: st.st_dev,
            state: AtomicU8::new(LegState::InSync as u8),
            counters: LegCounters::default(),
        })
    }

    pub fn root(&self) -> BorrowedFd<'_> {
        self.root.as_fd()
    }

    pub fn state(&self) -> LegState {
        match self.state.load(Ordering::Acquire) {
            0 => LegState::InSync,
            _ => LegState::Failed,
        }
    }

    pub fn is_in_sync(&self) -> bool {
        self.state() == LegState::InSync
    }

    /// Marks the leg failed; returns false if it already was.
    pub(crate) fn set_failed(&self) -> bool {
        self.state.swap(LegState::Failed as u8, Ordering::AcqRel) != LegState::Failed as u8
    }
}
