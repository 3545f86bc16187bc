//! Checksums for the files that have none: files from before checksums, or written while a
//! mount had them off. Runs in the background after the mount, walking the metadata leg's
//! tree; each file is hashed on every in-sync leg with every change held off (the barrier,
//! per file, as the scrub does), and gets its checksums only if every copy is the same. Copies
//! that differ are reported: no checksum decides which is right (a scrub with `--repair=LEG`
//! does). Throttled by `resync_speed_max`. When a walk finishes, the stores record it
//! (`backfill` in their `meta` table), so later mounts skip the walk until the stores are set
//! aside again.
//!
//! It runs only while every member of the mirror is in sync: a file's new identity goes on
//! every leg at once, and a leg that is out (missing, stale, resyncing) would miss it, since
//! this is no change through the mount that the change records would note for it. It waits
//! while the mirror is degraded, and goes on once it is whole again.

use super::{scan_stats, spawn_job, Outcome, Recovery};
use crate::errno::{Errno, Result};
use crate::integrity::{self, sum::Sum};
use crate::leg::{LegIdx, LegState};
use crate::stats::{JobState, ScanStats};
use crate::sys;
use crate::tree::Progress;
use parking_lot::Mutex;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// One walk, running or done.
pub struct BackfillJob {
    pub progress: Arc<Progress>,
    pub cancel: Arc<AtomicBool>,
    pub state: Arc<Mutex<JobState>>,
}

impl BackfillJob {
    pub fn scan_stats(&self, names: Vec<String>) -> ScanStats {
        scan_stats(&self.progress, &self.state.lock(), names)
    }
}

/// What happened to one file.
enum Outcome1 {
    /// It has checksums (had them, or got them now).
    Covered,
    /// Its copies differ: left without.
    Differ,
    /// Not a regular file, or gone.
    Skipped,
}

impl Recovery {
    /// Starts the walk unless the stores say it is done, or checksums are off.
    pub fn start_backfill(self: &Arc<Self>) -> Outcome<()> {
        let ig = self.mirror.integrity();
        if !ig.enabled() || ig.store_count() == 0 || ig.backfill_done() {
            return Ok(());
        }
        let job = Arc::new(BackfillJob {
            progress: Arc::new(Progress::new()),
            cancel: Arc::new(AtomicBool::new(false)),
            state: Arc::new(Mutex::new(JobState::Running)),
        });
        *self.backfill.lock() = Some(job.clone());
        let me = self.clone();
        let j = job.clone();
        spawn_job(
            "checksums",
            job.state.clone(),
            job.progress.clone(),
            || {},
            move || me.run_backfill(&j),
        )
    }

    /// The walk, if one ran since the mount.
    pub fn backfill_job(&self) -> Option<Arc<BackfillJob>> {
        self.backfill.lock().clone()
    }

    /// Calls `visit` with every regular file of the metadata leg's tree (and entries whose
    /// type the directory does not say), directories first found, last walked.
    fn walk(&self, job: &BackfillJob, visit: &mut dyn FnMut(&Path) -> Result<()>) -> Result<()> {
        let leg = self.mirror.metadata_leg();
        let root = self.mirror.leg(leg).root()?;
        let mut stack: Vec<PathBuf> = vec![PathBuf::new()];
        while let Some(dir) = stack.pop() {
            self.wait_until_whole(job)?;
            let fd = match open_rel(root.as_fd(), &dir) {
                Ok(fd) => fd,
                Err(Errno::ENOENT) => continue,
                Err(e) => return Err(e),
            };
            let entries = match sys::dir::read_dir(fd.as_fd()) {
                Ok(e) => e,
                Err(Errno::ENOENT) => continue,
                Err(e) => return Err(e),
            };
            for e in entries {
                if dir.as_os_str().is_empty() && self.tree.skip_root_names.contains(&e.name) {
                    continue;
                }
                let rel = dir.join(&e.name);
                match e.d_type {
                    libc::DT_DIR => stack.push(rel),
                    libc::DT_REG | libc::DT_UNKNOWN => visit(&rel)?,
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// The size of `rel` on the metadata leg if it is a regular file without checksums.
    fn uncovered_size(&self, rel: &Path) -> Option<u64> {
        let root = self.mirror.leg(self.mirror.metadata_leg()).root().ok()?;
        let fd = sys::fd::open_beneath(root.as_fd(), rel.as_os_str().as_bytes()).ok()?;
        let st = sys::fd::fstat(fd.as_fd()).ok()?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return None;
        }
        let covered = integrity::id_of(fd.as_fd())
            .is_some_and(|id| self.mirror.integrity().file(id).ok().flatten().is_some());
        (!covered).then_some(st.st_size as u64)
    }

    fn run_backfill(&self, job: &BackfillJob) {
        let mut differ = 0u64;
        let r = (|| -> Result<()> {
            // First the files and bytes to do (for the progress and `bytes_pending`).
            job.progress.set_phase(crate::tree::Phase::Counting);
            self.walk(job, &mut |rel| {
                if let Some(size) = self.uncovered_size(rel) {
                    Progress::add(&job.progress.entries_total, 1);
                    Progress::add(&job.progress.bytes_total, size);
                }
                Ok(())
            })?;
            job.progress.set_phase(crate::tree::Phase::Running);
            self.walk(job, &mut |rel| {
                match self.backfill_file(job, rel) {
                    Ok(Outcome1::Covered) => Progress::add(&job.progress.entries_done, 1),
                    Ok(Outcome1::Differ) => {
                        differ += 1;
                        Progress::add(&job.progress.differences, 1);
                        Progress::add(&job.progress.entries_done, 1);
                    }
                    Ok(Outcome1::Skipped) => {}
                    Err(Errno::ECANCELED) => return Err(Errno::ECANCELED),
                    Err(err) => {
                        Progress::add(&job.progress.errors, 1);
                        log::error!("checksums: /{}: {err}", rel.display());
                    }
                }
                Ok(())
            })
        })();
        let ig = self.mirror.integrity();
        for (leg, e) in ig.commit() {
            log::error!("checksums: commit to leg {leg}: {e}");
        }
        let state = match r {
            Ok(()) => {
                if job.progress.errors.load(Ordering::Relaxed) == 0 {
                    if let Err(e) = ig.set_backfill_done() {
                        log::error!("checksums: {e}");
                    }
                }
                log::warn!(
                    "checksums: every file without them walked: {} file(s) covered, {differ} \
                     left without (their copies differ: see mirrorfs scrub)",
                    job.progress.entries_done.load(Ordering::Relaxed) - differ
                );
                job.progress.set_phase(crate::tree::Phase::Done);
                JobState::Finished
            }
            Err(Errno::ECANCELED) => {
                job.progress.set_phase(crate::tree::Phase::Cancelled);
                JobState::Cancelled
            }
            Err(e) => {
                log::error!("checksums: the walk failed: {e}");
                job.progress.set_phase(crate::tree::Phase::Failed);
                JobState::Failed(e.to_string())
            }
        };
        *job.state.lock() = state;
    }

    /// Whether every member of the mirror is in sync.
    fn whole(&self) -> bool {
        let m = &self.mirror;
        m.unlisted_members() == 0
            && m.legs()
                .iter()
                .all(|l| matches!(l.state(), LegState::InSync | LegState::Removed))
    }

    /// Returns once the mirror is whole (ECANCELED if the walk is cancelled or the mirror
    /// unmounted meanwhile).
    fn wait_until_whole(&self, job: &BackfillJob) -> Result<()> {
        loop {
            if job.cancel.load(Ordering::Relaxed) || self.mirror.is_stopping() {
                return Err(Errno::ECANCELED);
            }
            if self.whole() {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
    }

    /// Gives `rel` checksums if it has none and its copies on every in-sync leg are the same.
    fn backfill_file(&self, job: &BackfillJob, rel: &Path) -> Result<Outcome1> {
        self.wait_until_whole(job)?;
        let ig = self.mirror.integrity();
        let _all = self.mirror.exclusive();
        if !self.whole() {
            // A leg left between the check and the barrier: this file again later.
            drop(_all);
            return self.backfill_file(job, rel);
        }
        let legs = self.mirror.in_sync_legs();
        let mut copies: Vec<(LegIdx, OwnedFd)> = Vec::new();
        for &l in &legs {
            let root = self.mirror.leg(l).root()?;
            match sys::fd::open_beneath(root.as_fd(), rel.as_os_str().as_bytes()) {
                Ok(fd) => copies.push((l, fd)),
                Err(Errno::ENOENT) => return Ok(Outcome1::Skipped),
                Err(e) => return Err(e),
            }
        }
        let Some((_, first)) = copies.first() else {
            return Ok(Outcome1::Skipped);
        };
        let st = sys::fd::fstat(first.as_fd())?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Ok(Outcome1::Skipped);
        }
        let id = integrity::id_of(first.as_fd());
        if let Some(id) = id {
            if ig.file(id).map_err(Errno::from)?.is_some() {
                // Covered already (a hard link of a file done, or written meanwhile).
                return Ok(Outcome1::Skipped);
            }
        }
        let mut all: Vec<Vec<Sum>> = Vec::new();
        for (_, fd) in &copies {
            let file = sys::fd::reopen(fd.as_fd(), libc::O_RDONLY)?;
            self.throttle.consume(st.st_size as u64, &job.cancel)?;
            let mut sums = integrity::hash_fd(file.as_fd()).map_err(Errno::from)?;
            integrity::trim_zeros(&mut sums);
            all.push(sums);
        }
        Progress::add(&job.progress.bytes_done, st.st_size as u64);
        if all.iter().any(|s| *s != all[0]) {
            log::warn!(
                "checksums: /{}: its copies differ: left without checksums (nothing says which \
                 copy is right; mirrorfs scrub lists it, --repair=LEG decides)",
                rel.display()
            );
            return Ok(Outcome1::Differ);
        }
        let id = match id {
            Some(id) => id,
            None => {
                let id = sys::random_u64();
                for (_, fd) in &copies {
                    sys::xattr::set(fd.as_fd(), integrity::ID_XATTR, &integrity::id_bytes(id), 0)?;
                }
                id
            }
        };
        ig.record_whole(id, all.swap_remove(0), st.st_size as u64);
        // Every change is held off for this file: its copies' ctimes now are the mirror's.
        for (l, fd) in &copies {
            let st = sys::fd::fstat(fd.as_fd()).ok();
            ig.set_stamp(*l, id, st.map(|st| integrity::ctime_of(&st)));
        }
        ig.covered_more();
        if ig.backlog() >= integrity::COMMIT_BACKLOG / 4 {
            for (leg, e) in ig.commit() {
                log::error!("checksums: commit to leg {leg}: {e}");
            }
        }
        Ok(Outcome1::Covered)
    }
}

/// Opens the directory `rel` beneath `root` (`O_PATH`).
fn open_rel(root: BorrowedFd<'_>, rel: &Path) -> Result<OwnedFd> {
    sys::fd::open_beneath(root, rel.as_os_str().as_bytes())
}
