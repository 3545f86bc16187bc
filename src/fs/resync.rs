//! Bringing a leg back up to date while the mirror serves: the resync.
//!
//! A leg that is behind (stale at mount, dropped after an error, or re-added by
//! `mirrorfs leg add`) is resynced from the metadata leg (the first in-sync one) in the
//! background, by the tree engine ([`crate::tree`]), throttled by `resync_speed_max`:
//!
//! 1. **First pass**: the paths of its away log (what changed while it was away, plus the
//!    source's write-intent log), or the whole tree when there is no away log (full resync).
//! 2. **Catch-up passes**: the paths changed meanwhile (the away record keeps growing while
//!    the leg resyncs), until few are left.
//! 3. **Join**: with every change held off (the mirror's barrier), the last changed paths are
//!    synced, the leg is flushed (`syncfs`), attached to every live inode and open file, and
//!    marked in sync; the superblocks stop recording it as dropped and its away logs go.
//!
//! While it resyncs the leg serves no read and takes no write from users: only the engine
//! writes it. If the daemon dies halfway, the leg is still recorded as dropped (stale) by the
//! others, and its away log is still there: the next mount resyncs it again from the start,
//! which converges (the engine is idempotent, see [`crate::tree`]).

use super::MirrorFs;
use crate::errno::{Errno, Result};
use crate::leg::{LegIdx, LegState};
use crate::meta::changes::ChangeLog;
use crate::stats::ScanStats;
use crate::sys;
use crate::tree::{self, Control, Phase, Progress, Throttle, TreeOptions};
use parking_lot::Mutex;
use std::ffi::OsString;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Catch-up passes stop when fewer paths than this changed during the last one.
const FEW_CHANGES: usize = 256;
/// At most this many catch-up passes before joining anyway (the join pass then takes the
/// rest with changes held off).
const MAX_PASSES: u32 = 8;

/// One resync, running or done (for the stats and `mirrorfs status`).
pub struct ResyncJob {
    pub target: LegIdx,
    /// "incremental" or "full".
    pub mode: &'static str,
    pub progress: Arc<Progress>,
    pub cancel: Arc<AtomicBool>,
    /// running, finished, cancelled or failed (with the reason).
    pub state: Mutex<String>,
    pub passes: AtomicU64,
}

/// State of the recovery machinery of one mount.
pub struct Recovery {
    pub resync: Mutex<Option<Arc<ResyncJob>>>,
    /// Bytes per second a resync or scrub may read or write; 0 = unlimited.
    pub speed_max: AtomicU64,
    /// The one throttle resyncs and scrubs share, so that a new `resync_speed_max` applies
    /// to a run that is going.
    pub throttle: Arc<Throttle>,
}

impl Default for Recovery {
    fn default() -> Self {
        Recovery {
            resync: Mutex::new(None),
            speed_max: AtomicU64::new(0),
            throttle: Arc::new(Throttle::new(None)),
        }
    }
}

/// The engine's options for this mount: `.mirrorfs` and a leg filesystem's own `lost+found`
/// are not part of the mirror.
pub(super) fn tree_options(hide_lost_found: bool) -> TreeOptions {
    let mut skip = vec![OsString::from(crate::meta::META_DIR)];
    if hide_lost_found {
        skip.push(OsString::from("lost+found"));
    }
    TreeOptions {
        skip_root_names: skip,
        ..TreeOptions::default()
    }
}

/// Log records (relative paths, `.` for the root) as the engine's paths.
pub(super) fn to_paths(records: Vec<Vec<u8>>) -> Vec<PathBuf> {
    records
        .into_iter()
        .map(|r| {
            if r == b"." {
                PathBuf::new()
            } else {
                PathBuf::from(OsString::from_vec(r))
            }
        })
        .filter(|p| {
            p.components()
                .all(|c| matches!(c, std::path::Component::Normal(_)))
        })
        .collect()
}

impl ResyncJob {
    /// The job as the stats show it.
    pub fn scan_stats(&self, target_name: &str) -> ScanStats {
        scan_stats(
            &self.progress,
            &self.state.lock(),
            vec![target_name.to_string()],
        )
    }
}

/// A progress snapshot in the stats' form.
pub(super) fn scan_stats(progress: &Progress, state: &str, legs: Vec<String>) -> ScanStats {
    let s = progress.snapshot();
    ScanStats {
        state: state.to_string(),
        legs,
        started_unix_s: s.started_unix,
        elapsed_s: s.elapsed_secs as u64,
        done_entries: s.entries_done,
        total_entries: s.entries_total,
        done_bytes: s.bytes_done,
        total_bytes: s.bytes_total,
        rate: s.bytes_per_sec as u64,
        eta_s: if state == "running" {
            s.eta_secs.map(|e| e as u64)
        } else {
            None
        },
        differences: s.differences,
        repaired: s.repaired,
        errors: s.errors,
    }
}

impl MirrorFs {
    /// After a crash: makes the paths of the write-intent logs identical on every in-sync leg,
    /// copying from the metadata leg, before the mount serves anything. Returns how many
    /// paths were checked.
    pub fn recover_after_crash(&self) -> Result<usize> {
        let legs = self.mirror.in_sync_legs();
        let paths: Vec<PathBuf> = legs.iter().map(|&l| self.mirror.leg(l).path()).collect();
        let roots: Vec<&std::path::Path> = paths.iter().map(PathBuf::as_path).collect();
        let paths = to_paths(ChangeLog::read_intent(&roots));
        let Some((&source, rest)) = legs.split_first() else {
            return Ok(0);
        };
        let src = self.mirror.leg(source).root()?;
        let opts = tree_options(self.config.hide_lost_found);
        for &l in rest {
            let ctl = Control::new(None);
            let dst = self.mirror.leg(l).root()?;
            let r = tree::sync_paths(src.as_fd(), dst.as_fd(), &paths, &opts, &ctl)?;
            log::warn!(
                "after the crash: {} path(s) from the write-intent log checked on '{}': {} \
                 created, {} updated, {} removed",
                paths.len(),
                self.mirror.leg(l).path().display(),
                r.created,
                r.updated,
                r.removed
            );
        }
        Ok(paths.len())
    }

    /// Sets the resync and scrub speed limit, bytes per second (0: unlimited).
    pub fn set_resync_speed_max(&self, bytes: u64) {
        self.recovery.speed_max.store(bytes, Ordering::Relaxed);
        self.recovery
            .throttle
            .set_speed_max((bytes > 0).then_some(bytes));
    }

    /// The running or last resync.
    pub fn resync_job(&self) -> Option<Arc<ResyncJob>> {
        self.recovery.resync.lock().clone()
    }

    /// Starts resyncing `target` in the background (incremental when its away log is there
    /// and `full` is false). EBUSY while another resync runs; EEXIST if it is in sync.
    pub fn start_resync(self: &Arc<Self>, target: LegIdx, full: bool) -> Result<()> {
        let mut slot = self.recovery.resync.lock();
        if slot.as_ref().is_some_and(|j| *j.state.lock() == "running") {
            return Err(Errno::EBUSY);
        }
        let leg = self.mirror.leg(target);
        match leg.state() {
            LegState::InSync => return Err(Errno::EEXIST),
            LegState::Resyncing => return Err(Errno::EBUSY),
            LegState::Removed => return Err(Errno::EINVAL),
            LegState::Stale | LegState::Failed | LegState::Missing => {}
        }
        let id = self.mirror.leg_id(target).ok_or(Errno::EINVAL)?;
        let root = leg.open_root()?;
        // The leg must be this member, or empty: never overwrite someone else's data. An
        // empty one (a new disk in the old one's place) has no history: it is filled in full.
        let mut full = full;
        match crate::meta::superblock::LegSuperblock::read(&leg.path()) {
            Ok(Some(sb)) if sb.leg_id == id => {}
            Ok(None) if sys::dir::read_dir(root.as_fd())?.is_empty() => full = true,
            _ => return Err(Errno::EINVAL),
        }
        let source = self.mirror.metadata_leg();
        // The away record as far as it goes now, on disk.
        self.mirror
            .changes()
            .flush_away(&self.mirror.in_sync_legs());
        let paths = if full {
            None
        } else {
            ChangeLog::read_away(&self.mirror.leg(source).path(), &id).map(|mut away| {
                // The source's intent log: changes of the last second before a crash.
                away.extend(ChangeLog::read_intent(&[&self.mirror.leg(source).path()]));
                away
            })
        };
        if paths.is_none() {
            // Until it has joined, this member needs a full resync, whatever happens to this one.
            self.mirror
                .changes()
                .mark_whole_tree(&id, &self.mirror.in_sync_legs())
                .map_err(Errno::from)?;
        }
        leg.set_state(LegState::Resyncing);
        self.mirror.changes().start_away(&id);
        // Every change from now on is a catch-up path; the first pass covers what came before.
        self.mirror.changes().take_changed(&id);
        let job = Arc::new(ResyncJob {
            target,
            mode: if paths.is_some() {
                "incremental"
            } else {
                "full"
            },
            progress: Arc::new(Progress::new()),
            cancel: Arc::new(AtomicBool::new(false)),
            state: Mutex::new("running".into()),
            passes: AtomicU64::new(0),
        });
        *slot = Some(job.clone());
        drop(slot);
        log::warn!(
            "resync of leg {} ('{}') started ({} from '{}')",
            target,
            leg.path().display(),
            job.mode,
            self.mirror.leg(source).path().display()
        );
        let fs = self.clone();
        let thread_job = job.clone();
        let started = std::thread::Builder::new()
            .name("resync".into())
            .spawn(move || {
                let run =
                    std::panic::AssertUnwindSafe(|| fs.run_resync(&thread_job, source, &id, paths));
                if std::panic::catch_unwind(run).is_err() {
                    // A bug, not the data: the leg stays out and the job says so.
                    fs.mirror.leg(thread_job.target).set_state(LegState::Failed);
                    thread_job.progress.set_phase(Phase::Failed);
                    *thread_job.state.lock() = "failed: internal error (see the log)".into();
                }
                fs.resync_next_stale();
            });
        if let Err(e) = started {
            // Nothing was written: the leg stays out, and the job says why.
            leg.set_state(LegState::Failed);
            job.progress.set_phase(Phase::Failed);
            *job.state.lock() = format!("failed: cannot start its thread: {e}");
            log::error!("resync of leg {target}: cannot start its thread: {e}");
            return Err(Errno::EAGAIN);
        }
        Ok(())
    }

    /// Lets go of every descriptor on legs that are out of the mirror (dropped, stale,
    /// missing, removed), so that their filesystems can be unmounted, checked and mounted again
    /// while the mirror serves; `mirrorfs leg add` opens the leg afresh from its path. Called
    /// by the background sweep.
    pub fn release_dropped_legs(&self) {
        // Serialised with start_resync, which takes the leg back.
        let _slot = self.recovery.resync.lock();
        for leg in self.mirror.legs() {
            if !matches!(
                leg.state(),
                LegState::Failed | LegState::Stale | LegState::Missing | LegState::Removed
            ) || leg.root().is_err()
            {
                continue;
            }
            self.inodes.detach_leg(leg.idx);
            for h in self.handles.open_files() {
                h.attach(leg.idx, None);
            }
            if leg.close_root() {
                log::info!(
                    "leg {} ('{}') is out of the mirror: its descriptors are closed",
                    leg.idx,
                    leg.path().display()
                );
            }
        }
    }

    /// Cancels the running resync, if any (unmount, `mirrorfs leg fail`).
    pub fn cancel_resync(&self) {
        if let Some(j) = self.recovery.resync.lock().as_ref() {
            j.cancel.store(true, Ordering::Relaxed);
        }
    }

    fn run_resync(&self, job: &ResyncJob, source: LegIdx, id: &str, paths: Option<Vec<Vec<u8>>>) {
        let target = job.target;
        let r = self.resync_passes(job, source, id, paths);
        let leg = self.mirror.leg(target);
        let outcome = match r {
            Ok(()) => {
                log::warn!(
                    "resync of leg {} ('{}') finished: the leg is in sync again",
                    target,
                    leg.path().display()
                );
                job.progress.set_phase(Phase::Done);
                "finished".to_string()
            }
            Err(e) => {
                leg.set_state(LegState::Failed);
                let cancelled = e == Errno::ECANCELED;
                job.progress.set_phase(if cancelled {
                    Phase::Cancelled
                } else {
                    Phase::Failed
                });
                log::error!(
                    "resync of leg {} ('{}') {}: {e}; it stays out of the mirror",
                    target,
                    leg.path().display(),
                    if cancelled { "cancelled" } else { "failed" }
                );
                if cancelled {
                    "cancelled".to_string()
                } else {
                    format!("failed: {e}")
                }
            }
        };
        *job.state.lock() = outcome;
    }

    /// Starts the resync of the next stale leg, if any (several legs that came back are
    /// resynced one after the other).
    fn resync_next_stale(self: &Arc<Self>) {
        if self.mirror.is_stopping() {
            return;
        }
        let next = self
            .mirror
            .legs()
            .iter()
            .find(|l| l.state() == LegState::Stale)
            .map(|l| l.idx);
        if let Some(l) = next {
            if let Err(e) = self.start_resync(l, false) {
                log::error!("cannot start the resync of leg {l}: {e}");
            }
        }
    }

    fn resync_passes(
        &self,
        job: &ResyncJob,
        source: LegIdx,
        id: &str,
        paths: Option<Vec<Vec<u8>>>,
    ) -> Result<()> {
        let target = job.target;
        let src_root = self.mirror.leg(source).root()?;
        let dst_root = self.mirror.leg(target).root()?;
        let (src, dst) = (src_root.as_fd(), dst_root.as_fd());
        let opts = tree_options(self.config.hide_lost_found);

        let ctl = Control {
            progress: job.progress.clone(),
            cancel: job.cancel.clone(),
            throttle: self.recovery.throttle.clone(),
            hook: Arc::new(tree::NoHook),
        };
        // One pass: the paths changed since the last, with its own progress counters (the
        // job's show the first pass), throttled unless `throttle` says otherwise.
        let pass = |records: Vec<Vec<u8>>, throttle: Arc<Throttle>| -> Result<()> {
            job.passes.fetch_add(1, Ordering::Relaxed);
            let ctl = Control {
                progress: Arc::new(Progress::new()),
                throttle,
                ..ctl.clone()
            };
            let r = tree::sync_paths(src, dst, &to_paths(records), &opts, &ctl)?;
            self.check_pass(&r)
        };
        job.passes.fetch_add(1, Ordering::Relaxed);
        let first = match paths {
            Some(p) => tree::sync_paths(src, dst, &to_paths(p), &opts, &ctl)?,
            None => tree::sync_full(src, dst, &opts, &ctl)?,
        };
        self.check_pass(&first)?;
        // Catch up with what changed meanwhile.
        let mut pending = self.mirror.changes().take_changed(id);
        for _ in 0..MAX_PASSES {
            if pending.len() < FEW_CHANGES {
                break;
            }
            pass(pending, self.recovery.throttle.clone())?;
            pending = self.mirror.changes().take_changed(id);
        }
        // Join, with every change held off (and no throttle: writers are waiting).
        let _all = self.mirror.exclusive();
        pending.extend(self.mirror.changes().take_changed(id));
        pass(pending, Arc::new(Throttle::new(None)))?;
        self.mirror.leg(target).flush()?;
        self.attach_leg(target)?;
        self.mirror.join_leg(target, id);
        Ok(())
    }

    /// ECANCELED if the pass was cancelled or the mirror is being unmounted.
    fn check_pass(&self, r: &tree::SyncReport) -> Result<()> {
        if r.cancelled || self.mirror.is_stopping() {
            return Err(Errno::ECANCELED);
        }
        Ok(())
    }

    /// Gives every live inode and open file its copy on `target` (which holds the same tree
    /// as the metadata leg now). Called with every change held off.
    fn attach_leg(&self, target: LegIdx) -> Result<()> {
        let leg = self.mirror.leg(target);
        let leg_root = leg.root()?;
        let root = sys::fd::reopen(leg_root.as_fd(), libc::O_PATH | libc::O_DIRECTORY)?;
        let report = self.inodes.attach_leg(target, root, |inode| {
            let Some(rel) = self.leg_relpath(inode) else {
                return Ok(None);
            };
            if rel == b"." {
                return Ok(None);
            }
            match sys::fd::open_beneath(leg_root.as_fd(), &rel) {
                Ok(fd) => Ok(Some(fd)),
                Err(Errno::ENOENT) => Ok(None),
                Err(e) => Err(e),
            }
        })?;
        // Open files: a descriptor on the leg's new copy (an old one, from before the leg
        // left, may name a file the resync replaced).
        for h in self.handles.open_files() {
            if !h.inode.has_leg(target) {
                h.attach(target, None);
                continue;
            }
            let path_fd = h.inode.fd(target)?;
            let opened =
                super::data::open_maybe_direct(h.flags, |f| sys::fd::reopen(path_fd.as_fd(), f))?;
            h.attach(target, Some(opened));
        }
        log::info!(
            "leg {target} attached to {} live object(s) ({} deleted while open left without it)",
            report.attached,
            report.unresolved
        );
        Ok(())
    }
}
