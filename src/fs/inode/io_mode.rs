//! The passthrough io-mode: how the open files of a regular file reach its data.

use crate::leg::LegIdx;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The leg file passthrough opens of a file are read from; counted in the leg's
/// `passthrough_files` while it lives.
pub struct Backing {
    pub leg: LegIdx,
    pub file: Arc<OwnedFd>,
    count: Arc<std::sync::atomic::AtomicU32>,
}

impl Backing {
    pub fn new(leg: LegIdx, file: OwnedFd, count: Arc<std::sync::atomic::AtomicU32>) -> Backing {
        count.fetch_add(1, Ordering::Relaxed);
        Backing {
            leg,
            file: Arc::new(file),
            count,
        }
    }
}

impl Drop for Backing {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How the open files of a regular file reach its data (the kernel's rules for FUSE
/// passthrough, `fs/iomode.c`): while any open is passed through to a leg's file, every open
/// of the inode must be passed through to that same file, and none may use the page cache.
#[derive(Default)]
pub struct IoMode {
    /// The leg file the kernel reads passthrough opens from, while any is open.
    pub backing: Option<Backing>,
    /// Open files passed through (including writers answered with direct I/O).
    pub passthrough: usize,
    /// Open files through the page cache.
    pub cached: usize,
}
