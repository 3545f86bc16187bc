//! The scrub: compares every copy of every entry on the in-sync legs (metadata and content,
//! throttled by `resync_speed_max`), counts and lists the differences, and with repair makes
//! the odd copies identical to the good one: by majority with three or more legs, or from a
//! named leg.
//!
//! Runs in the background while the mirror serves. Each entry is compared with every change
//! held off (the mirror's barrier, per entry), so that a write in flight is never taken for a
//! difference; for a large file that holds writers back for as long as its comparison takes.

use super::{scan_stats, spawn_job, Outcome, Recovery};
use crate::errno::{refuse, Errno, Result};
use crate::leg::LegIdx;
use crate::mirror::Mirror;
use crate::stats::{JobState, ScanStats};
use crate::tree::{self, Control, Difference, EntryHook, Progress};
use parking_lot::Mutex;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

/// How a scrub repairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repair {
    /// Report only.
    Nothing,
    /// The version most legs hold (three legs or more).
    Majority,
    /// From this leg.
    From(LegIdx),
}

/// One scrub, running or done.
pub struct ScrubJob {
    pub legs: Vec<LegIdx>,
    pub repair: Repair,
    pub progress: Arc<Progress>,
    pub cancel: Arc<AtomicBool>,
    pub state: Arc<Mutex<JobState>>,
    /// The differing paths (at most [`LISTED`]), for `mirrorfs scrub status`.
    pub listed: Mutex<Vec<String>>,
}

/// Differences kept for display.
const LISTED: usize = 100;

impl ScrubJob {
    pub fn scan_stats(&self, names: Vec<String>) -> ScanStats {
        scan_stats(&self.progress, &self.state.lock(), names)
    }

    pub fn is_running(&self) -> bool {
        self.state.lock().is_running()
    }
}

/// Holds every change off while the engine looks at one entry, and counts the legs whose
/// copy differs from the version most legs hold.
struct ScrubHook {
    mirror: Arc<Mirror>,
    job: Weak<ScrubJob>,
}

impl EntryHook for ScrubHook {
    fn with_entry(&self, _path: &Path, work: &mut dyn FnMut()) {
        let _all = self.mirror.exclusive();
        work();
    }

    fn difference(&self, d: &Difference) {
        let Some(job) = self.job.upgrade() else {
            return;
        };
        // The copy taken as good: the named source's, or the version more legs hold than any
        // other. Every leg holding another version counts a checksum error (on a tie between
        // two legs, both do: nothing tells which one is right).
        let versions: Vec<usize> = d.legs.iter().map(|l| l.version).collect();
        let count = |v: usize| versions.iter().filter(|&&x| x == v).count();
        let good = match job.repair {
            Repair::From(l) => job.legs.iter().position(|&x| x == l).map(|i| versions[i]),
            _ => versions
                .iter()
                .copied()
                .find(|&v| versions.iter().all(|&o| o == v || count(o) < count(v))),
        };
        for (i, v) in versions.iter().enumerate() {
            if good != Some(*v) {
                if let Some(&leg) = job.legs.get(i) {
                    self.mirror
                        .leg(leg)
                        .counters
                        .checksum_errors
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let mut listed = job.listed.lock();
        if listed.len() < LISTED {
            let kinds: Vec<String> = d.kinds.iter().map(|k| format!("{k:?}")).collect();
            listed.push(format!("/{} ({})", d.path.display(), kinds.join(", ")));
        }
        log::warn!("scrub: /{} differs: {:?}", d.path.display(), d.kinds);
    }
}

impl Recovery {
    /// Starts a scrub of the in-sync legs. EBUSY while one runs; EINVAL for a repair that
    /// cannot work (majority with two legs, a source leg not in sync).
    pub fn start_scrub(self: &Arc<Self>, repair: Repair) -> Outcome<()> {
        let mut slot = self.scrub.lock();
        if slot.as_ref().is_some_and(|j| j.is_running()) {
            return refuse(
                Errno::EBUSY,
                "a scrub is running (mirrorfs scrub cancel stops it)",
            );
        }
        let legs = self.mirror.in_sync_legs();
        if legs.len() < 2 {
            return refuse(Errno::EINVAL, "a scrub compares legs: it needs two in sync");
        }
        let engine_repair = match repair {
            Repair::Nothing => tree::Repair::None,
            Repair::Majority if legs.len() >= 3 => tree::Repair::Majority,
            Repair::Majority => {
                return refuse(
                    Errno::EINVAL,
                    "a repair by majority needs three legs in sync or more; name the leg to \
                     repair from (--repair=LEG)",
                )
            }
            Repair::From(l) => match legs.iter().position(|&x| x == l) {
                Some(i) => tree::Repair::FromLeg(i),
                None => {
                    let name = &self.mirror.leg(l).name;
                    return refuse(
                        Errno::EINVAL,
                        format!("'{name}' is not in sync: it cannot be the source of a repair"),
                    );
                }
            },
        };
        let job = Arc::new(ScrubJob {
            legs,
            repair,
            progress: Arc::new(Progress::new()),
            cancel: Arc::new(AtomicBool::new(false)),
            state: Arc::new(Mutex::new(JobState::Running)),
            listed: Mutex::new(Vec::new()),
        });
        *slot = Some(job.clone());
        drop(slot);
        let me = self.clone();
        let thread_job = job.clone();
        spawn_job(
            "scrub",
            job.state.clone(),
            job.progress.clone(),
            || {},
            move || me.run_scrub(&thread_job, engine_repair),
        )
    }

    /// Cancels the running scrub, if any.
    pub fn cancel_scrub(&self) {
        if let Some(j) = self.scrub.lock().as_ref() {
            j.cancel.store(true, Ordering::Relaxed);
        }
    }

    fn run_scrub(&self, job: &Arc<ScrubJob>, repair: tree::Repair) {
        super::io_idle("scrub");
        let r = (|| -> Result<tree::ScrubReport> {
            let roots = job
                .legs
                .iter()
                .map(|&l| self.mirror.leg(l).root())
                .collect::<Result<Vec<_>>>()?;
            let fds: Vec<_> = roots.iter().map(|r| r.as_fd()).collect();
            let ctl = Control {
                progress: job.progress.clone(),
                cancel: job.cancel.clone(),
                throttle: self.throttle.clone(),
                hook: Arc::new(ScrubHook {
                    mirror: self.mirror.clone(),
                    job: Arc::downgrade(job),
                }),
            };
            tree::scrub(&fds, &self.tree, repair, &ctl)
        })();
        let state = match r {
            Ok(rep) if rep.cancelled => JobState::Cancelled,
            Ok(rep) => {
                log::warn!(
                    "scrub finished: {} entries, {} differences, {} repaired, {} left",
                    rep.entries,
                    rep.differences,
                    rep.repaired,
                    rep.unrepaired
                );
                JobState::Finished
            }
            Err(e) => {
                log::error!("scrub failed: {e}");
                JobState::Failed(e.to_string())
            }
        };
        *job.state.lock() = state;
    }
}
