//! Keeping the legs identical in the background, and changing which legs make up the mirror:
//! the resync of a leg that was out ([`resync`]), crash recovery at mount, the scrub
//! ([`scrub`]), the leg commands (`mirrorfs leg`, `user.mirrorfs.leg`, parsed in [`command`]),
//! and the sweep that flushes the change records and lets go of legs out of the mirror.
//!
//! Built on the mirror engine ([`Mirror`]) and the tree engine ([`crate::tree`]). It reaches the
//! core's live objects (the inodes the kernel holds, the open files) only through the narrow
//! [`LiveObjects`] trait, which the core implements: it knows nothing of FUSE, inodes or
//! handles, and holds no pointer back into the core.

mod backfill;
pub mod command;
mod expand;
mod resync;
mod scrub;

pub use command::{LegCommand, RepairFrom, ScrubCommand};
pub use resync::ResyncJob;
pub use scrub::{Repair as ScrubRepair, ScrubJob};

use crate::errno::{refuse, Errno, Refusal, Result};

/// A command's result: done, or refused with the reason.
pub type Outcome<T> = std::result::Result<T, Refusal>;
use crate::leg::{LegIdx, LegState};
use crate::mirror::outcome::DropReason;
use crate::mirror::Mirror;
use crate::stats::{JobState, ScanStats};
use crate::tree::{Progress, Throttle, TreeOptions};
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Stamps (see [`crate::integrity::classify`]) the copies on `legs` of the file `rel`, identity
/// `id`, after the recovery made them what the mirror holds. A copy that cannot be looked at
/// loses its stamp.
fn stamp_rel(mirror: &Mirror, legs: &[LegIdx], rel: &std::path::Path, id: u64) {
    use std::os::fd::AsFd;
    use std::os::unix::ffi::OsStrExt;
    let ig = mirror.integrity();
    for &l in legs {
        let st = mirror.leg(l).root().and_then(|root| {
            let fd = crate::sys::fd::open_beneath(root.as_fd(), rel.as_os_str().as_bytes())?;
            crate::sys::fd::fstat(fd.as_fd())
        });
        ig.set_stamp(l, id, st.ok().map(|st| crate::integrity::ctime_of(&st)));
    }
}

/// What the recovery needs of the core's live objects.
pub trait LiveObjects: Send + Sync {
    /// Gives every live object and open file its copy on `leg`, which now holds the same tree
    /// as the metadata leg. Called with every change held off (the mirror's barrier).
    fn attach_leg(&self, leg: LegIdx) -> Result<()>;
    /// Lets go of every descriptor on `leg`, which is out of the mirror.
    fn detach_leg(&self, leg: LegIdx);
    /// Records the checksum stamps (each in-sync copy's ctime) of the objects `inos` whose
    /// changes through the mount have settled (see [`crate::integrity::classify`]).
    fn stamp(&self, inos: &[u64]);
}

/// The background work of one mount.
pub struct Recovery {
    mirror: Arc<Mirror>,
    objects: Arc<dyn LiveObjects>,
    /// The tree engine's options for this mount (what is not part of the mirror).
    tree: TreeOptions,
    /// The mount point: a new leg may not be inside it.
    mount: PathBuf,
    resync: Mutex<Option<Arc<ResyncJob>>>,
    scrub: Mutex<Option<Arc<ScrubJob>>>,
    /// The last scrub that ended, this mount's or (read from the legs at mount) an earlier one.
    last_scrub: Mutex<Option<crate::meta::scrub_record::ScrubRecord>>,
    /// Checksums for the files without (`backfill.rs`).
    backfill: Mutex<Option<Arc<backfill::BackfillJob>>>,
    /// Bytes per second a resync or scrub may read or write; 0 = unlimited.
    speed_max: AtomicU64,
    /// The one throttle resyncs and scrubs share, so that a new `resync_speed_max` applies
    /// to a run that is going.
    throttle: Arc<Throttle>,
}

impl Recovery {
    /// The recovery of the mirror `mirror` mounted on `mount`; `hide_lost_found` when some leg
    /// is the root of its own filesystem (its `lost+found` is not part of the mirror).
    pub fn new(
        mirror: Arc<Mirror>,
        objects: Arc<dyn LiveObjects>,
        hide_lost_found: bool,
        mount: PathBuf,
    ) -> Arc<Recovery> {
        let tree = TreeOptions {
            skip_root_names: crate::meta::foreign_root_names(hide_lost_found),
            ..TreeOptions::default()
        };
        let in_sync: Vec<PathBuf> = mirror
            .in_sync_legs()
            .into_iter()
            .map(|l| mirror.leg(l).path())
            .collect();
        let last_scrub =
            crate::meta::scrub_record::ScrubRecord::newest(in_sync.iter().map(PathBuf::as_path));
        Arc::new(Recovery {
            last_scrub: Mutex::new(last_scrub),
            mirror,
            objects,
            tree,
            mount,
            resync: Mutex::new(None),
            scrub: Mutex::new(None),
            backfill: Mutex::new(None),
            speed_max: AtomicU64::new(0),
            throttle: Arc::new(Throttle::new(None)),
        })
    }

    /// Sets the resync and scrub speed limit, bytes per second (0: unlimited); it applies to
    /// the pass that is running.
    pub fn set_speed_max(&self, bytes: u64) {
        self.speed_max.store(bytes, Ordering::Relaxed);
        self.throttle.set_speed_max((bytes > 0).then_some(bytes));
    }

    pub fn speed_max(&self) -> u64 {
        self.speed_max.load(Ordering::Relaxed)
    }

    /// The running or last resync.
    pub fn resync_job(&self) -> Option<Arc<ResyncJob>> {
        self.resync.lock().clone()
    }

    /// The running or last scrub.
    pub fn scrub_job(&self) -> Option<Arc<ScrubJob>> {
        self.scrub.lock().clone()
    }

    /// The checksum stamps of the objects `inos` (see [`LiveObjects::stamp`]).
    pub fn stamp(&self, inos: &[u64]) {
        self.objects.stamp(inos);
    }

    /// The record of the last scrub that ended, since the mount or before it.
    pub fn last_scrub(&self) -> Option<crate::meta::scrub_record::ScrubRecord> {
        self.last_scrub.lock().clone()
    }

    /// At unmount: the running resync and scrub stop.
    pub fn cancel_all(&self) {
        self.cancel_resync();
        self.cancel_scrub();
    }

    /// Starts the sweep: every second, the away logs are flushed, idle write-intent entries
    /// cleared, and legs out of the mirror let go of, until the mirror is unmounted.
    pub fn start_sweeper(self: &Arc<Self>) -> std::io::Result<()> {
        let me = self.clone();
        std::thread::Builder::new()
            .name("changes".into())
            .spawn(move || {
                while !me.mirror.is_stopping() {
                    me.mirror.sweep_changes(&|inos| me.objects.stamp(inos));
                    me.release_dropped_legs();
                    std::thread::sleep(std::time::Duration::from_secs(1));
                }
            })
            .map(drop)
    }

    /// Lets go of every descriptor on legs that are out of the mirror (dropped, stale,
    /// missing, removed), so that their filesystems can be unmounted, checked and mounted
    /// again while the mirror serves; `mirrorfs leg add` opens the leg afresh from its path.
    pub fn release_dropped_legs(&self) {
        // Serialised with start_resync, which takes the leg back.
        let _slot = self.resync.lock();
        for leg in self.mirror.legs() {
            let out = matches!(
                leg.state(),
                LegState::Failed | LegState::Stale | LegState::Missing | LegState::Removed
            );
            if !out || leg.root().is_err() {
                continue;
            }
            self.objects.detach_leg(leg.idx);
            if leg.close_root() {
                log::info!(
                    "leg {} ('{}') is out of the mirror: its descriptors are closed",
                    leg.idx,
                    leg.path().display()
                );
            }
        }
    }

    /// The leg a command names; EINVAL, naming the legs there are, for none.
    fn leg_named(&self, what: &std::ffi::OsStr) -> Outcome<LegIdx> {
        self.mirror.find_leg(what).ok_or_else(|| {
            let names: Vec<&str> = self.mirror.legs().iter().map(|l| l.name.as_str()).collect();
            Refusal::new(
                Errno::EINVAL,
                format!(
                    "no leg '{}' (the legs: {}, or a leg's directory)",
                    what.to_string_lossy(),
                    names.join(", ")
                ),
            )
        })
    }

    /// The name of leg `l`, for messages.
    fn name(&self, l: LegIdx) -> &str {
        &self.mirror.leg(l).name
    }

    /// `l` may leave the mirror: it is not the last in-sync leg (EBUSY).
    fn not_the_last(&self, l: LegIdx) -> Outcome<()> {
        if self.mirror.in_sync_legs() == [l] {
            return refuse(
                Errno::EBUSY,
                format!(
                    "'{}' is the last leg in sync: the mirror would have none",
                    self.name(l)
                ),
            );
        }
        Ok(())
    }

    /// `user.mirrorfs.leg` (see [`LegCommand`]). Nothing changes unless it can be done; a
    /// refusal says why: EINVAL for a command or leg that does not parse, EBUSY for the last
    /// in-sync leg or while a resync of it runs, EEXIST to add a leg in sync, ENOTEMPTY for a
    /// new directory that holds something.
    pub fn leg_command(self: &Arc<Self>, value: &[u8]) -> Outcome<()> {
        let Some(command) = LegCommand::parse(value) else {
            return refuse(
                Errno::EINVAL,
                "not a leg command: fail LEG, add LEG [full], remove LEG, or replace LEG NEWDIR",
            );
        };
        match command {
            LegCommand::Fail(leg) => {
                let l = self.leg_named(&leg)?;
                self.not_the_last(l)?;
                if self.resync_job().is_some_and(|j| j.target == l) {
                    self.cancel_resync();
                }
                self.mirror
                    .mark_failed(l, "mirrorfs leg fail", DropReason::Requested);
                Ok(())
            }
            LegCommand::Add { leg, full } => self.start_resync(self.leg_named(&leg)?, full),
            LegCommand::Remove(leg) => {
                let l = self.leg_named(&leg)?;
                self.mirror.remove_member(l).map_err(|e| match e {
                    Errno::EBUSY => Refusal::new(
                        e,
                        format!(
                            "'{}' is {}: only a leg out of the mirror can be removed (leg fail \
                             it first)",
                            self.name(l),
                            self.mirror.leg(l).state()
                        ),
                    ),
                    e => e.into(),
                })
            }
            LegCommand::Replace { leg, new } => {
                let l = self.leg_named(&leg)?;
                let new = self.check_new_leg(&new)?;
                if self
                    .resync_job()
                    .is_some_and(|j| j.target == l && j.is_running())
                {
                    return refuse(
                        Errno::EBUSY,
                        format!("'{}' is being resynced (leg fail stops that)", self.name(l)),
                    );
                }
                if self.mirror.leg(l).is_in_sync() {
                    self.not_the_last(l)?;
                    self.mirror
                        .mark_failed(l, "mirrorfs leg replace", DropReason::Requested);
                }
                self.mirror.replace_member(l, &new)?;
                self.start_resync(l, true)
            }
        }
    }

    /// `user.mirrorfs.scrub` (see [`ScrubCommand`]).
    pub fn scrub_command(self: &Arc<Self>, value: &[u8]) -> Outcome<()> {
        let Some(command) = ScrubCommand::parse(value) else {
            return refuse(
                Errno::EINVAL,
                "not a scrub command: start, start repair, start repair=LEG, or cancel",
            );
        };
        match command {
            ScrubCommand::Start(RepairFrom::Leg(leg)) => {
                self.start_scrub(scrub::Repair::From(self.leg_named(&leg)?))
            }
            ScrubCommand::Start(RepairFrom::Majority) => self.start_scrub(scrub::Repair::Majority),
            ScrubCommand::Start(RepairFrom::Nothing) => self.start_scrub(scrub::Repair::Nothing),
            ScrubCommand::Cancel => {
                self.cancel_scrub();
                Ok(())
            }
        }
    }

    /// A directory that may become a leg: it exists, is empty (but for a `lost+found`), and is
    /// neither a leg, inside one, around one, nor in the mount. Returns it canonical.
    fn check_new_leg(&self, path: &Path) -> Outcome<PathBuf> {
        let shown = path.display();
        let Ok(p) = std::fs::canonicalize(path) else {
            return refuse(Errno::ENOENT, format!("'{shown}' does not exist"));
        };
        if !p.is_dir() {
            return refuse(Errno::ENOTDIR, format!("'{shown}' is not a directory"));
        }
        if p.starts_with(&self.mount) || self.mount.starts_with(&p) {
            return refuse(
                Errno::EINVAL,
                format!("'{shown}' is in the mount point, or holds it"),
            );
        }
        for l in self.mirror.legs() {
            let lp = l.path();
            if p.starts_with(&lp) || lp.starts_with(&p) {
                return refuse(
                    Errno::EINVAL,
                    format!("'{shown}' is leg '{}', inside it, or holds it", l.name),
                );
            }
        }
        let busy = std::fs::read_dir(&p)
            .map_err(|e| Refusal::new(Errno::from(e), format!("'{shown}' cannot be read")))?
            .flatten()
            .any(|e| e.file_name() != "lost+found");
        if busy {
            return refuse(
                Errno::ENOTEMPTY,
                format!("'{shown}' is not empty: a new leg starts empty"),
            );
        }
        Ok(p)
    }
}

/// A job's progress in the stats' form.
fn scan_stats(progress: &Progress, state: &JobState, legs: Vec<String>) -> ScanStats {
    let s = progress.snapshot();
    ScanStats {
        state: state.clone(),
        legs,
        started_unix_s: s.started_unix,
        elapsed_s: s.elapsed_secs as u64,
        done_entries: s.entries_done,
        total_entries: s.entries_total,
        done_bytes: s.bytes_done,
        total_bytes: s.bytes_total,
        rate: s.bytes_per_sec as u64,
        eta_s: if state.is_running() {
            s.eta_secs.map(|e| e as u64)
        } else {
            None
        },
        differences: s.differences,
        repaired: s.repaired,
        errors: s.errors,
    }
}

/// Puts the calling job's thread in the idle I/O class, so that a scrub (which only checks)
/// gives way to the mount's own I/O, as `btrfs scrub` does; a resync, which restores
/// redundancy, keeps the normal class. A failure is logged: the job runs anyway.
pub(crate) fn io_idle(job: &str) {
    if let Err(e) = crate::sys::io_priority_idle() {
        log::warn!("{job}: cannot use the idle I/O class: {e}");
    }
}

/// Runs `job` on a thread of its own named `name`. A thread that cannot start, or a job that
/// panics (a bug, never the data), ends with `failed` and `on_failure` run; never a job stuck
/// "running".
fn spawn_job(
    name: &str,
    state: Arc<Mutex<JobState>>,
    progress: Arc<Progress>,
    on_failure: impl Fn() + Send + Sync + 'static,
    job: impl FnOnce() + Send + 'static,
) -> Outcome<()> {
    let on_failure = Arc::new(on_failure);
    let (state2, progress2, on_failure2) = (state.clone(), progress.clone(), on_failure.clone());
    let name2 = name.to_string();
    let started = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
                log::error!("{name2}: internal error; the job stops (see the log above)");
                progress2.set_phase(crate::tree::Phase::Failed);
                *state2.lock() = JobState::Failed("internal error (see the log)".into());
                on_failure2();
            }
        });
    if let Err(e) = started {
        log::error!("{name}: cannot start its thread: {e}");
        progress.set_phase(crate::tree::Phase::Failed);
        *state.lock() = JobState::Failed(format!("cannot start its thread: {e}"));
        on_failure();
        return refuse(
            Errno::EAGAIN,
            format!("{name}: cannot start its thread: {e}"),
        );
    }
    Ok(())
}
