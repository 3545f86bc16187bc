//! The scrub: compares every copy of every entry on the in-sync legs (metadata and content,
//! throttled by `resync_speed_max`), counts and lists the differences, and with repair makes
//! the odd copies identical to the good one: by majority with three or more legs, or from a
//! named leg.
//!
//! Runs in the background while the mirror serves. Each entry is compared with every change
//! held off (the mirror's barrier, per entry), so that a write in flight is never taken for a
//! difference; for a large file that holds writers back for as long as its comparison takes.
//!
//! A file with checksums is first verified block by block on every leg (`verify_checksums`):
//! a copy whose blocks fail is rewritten there from a copy that verifies, whatever repair was
//! asked (the checksums say which copy is right), one log line per finding; blocks that no
//! copy holds as written are listed as damaged. What the checksums cannot decide (files from
//! before them, metadata) is left to the comparison, which reports it, or repairs it as asked.

use super::{scan_stats, spawn_job, Outcome, Recovery};
use crate::errno::{refuse, Errno, Result};
use crate::leg::LegIdx;
use crate::meta::scrub_record::ScrubRecord;
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
    /// The entry being compared, while every copy of it verified against its checksums.
    verified: Mutex<Option<std::path::PathBuf>>,
}

impl EntryHook for ScrubHook {
    fn with_entry(&self, path: &Path, work: &mut dyn FnMut()) {
        let _all = self.mirror.exclusive();
        let Some(job) = self.job.upgrade() else {
            return work();
        };
        let checked = match verify_checksums(&self.mirror, &job, path) {
            Ok(c) => c,
            Err(e) => {
                log::error!("scrub: checksums of /{}: {e}", path.display());
                job.progress.errors.fetch_add(1, Ordering::Relaxed);
                Checked::default()
            }
        };
        *self.verified.lock() = checked.verified.then(|| path.to_path_buf());
        work();
        *self.verified.lock() = None;
        let diverged = checked.diverged;
        if let (Some(id), false) = (diverged, job.repair == Repair::Nothing) {
            // The comparison made the copies identical from the leg the user named (or the
            // majority): their checksums are those of that version now.
            if let Err(e) = rehash(&self.mirror, &job, path, id) {
                log::error!(
                    "scrub: checksums of /{} after the repair: {e}",
                    path.display()
                );
            }
        }
    }

    fn content_verified(&self, path: &Path) -> bool {
        self.verified.lock().as_deref() == Some(path)
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
        if matches!(d.repair, crate::tree::RepairOutcome::Repaired { .. }) {
            // The copy the mount shows may be one that was overwritten.
            self.mirror.kernel_path_changed(&d.path);
        }
    }
}

/// Computes the checksums of `rel` (identity `id`) again from the first leg's copy and commits
/// them: after a repair the user chose made a diverged version the file's.
fn rehash(mirror: &Mirror, job: &ScrubJob, rel: &Path, id: u64) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let root = mirror.leg(job.legs[0]).root()?;
    let fd = crate::sys::fd::open_beneath(root.as_fd(), rel.as_os_str().as_bytes())?;
    let file = crate::sys::fd::reopen(fd.as_fd(), libc::O_RDONLY)?;
    let sums = crate::integrity::hash_fd(file.as_fd()).map_err(Errno::from)?;
    let ig = mirror.integrity();
    let size = crate::sys::fd::fstat(file.as_fd())?.st_size as u64;
    ig.record_whole(id, sums, size);
    super::stamp_rel(mirror, &job.legs, rel, id);
    for (leg, e) in ig.commit() {
        log::error!("scrub: checksum commit to leg {leg}: {e}");
    }
    log::warn!(
        "scrub: /{}: checksums computed again from the repaired copies",
        rel.display()
    );
    Ok(())
}

/// What [`verify_checksums`] found.
#[derive(Default)]
struct Checked {
    /// Some copy diverged: the file's identity.
    diverged: Option<u64>,
    /// Every scrub leg holds a copy, and every copy verified in full (or was repaired): the
    /// contents are known to be the same, and the engine need not compare them again.
    verified: bool,
}

/// Verifies every block of the file `rel` on each of the scrub's legs against its checksums,
/// and rewrites bad blocks from a copy that verifies (called with every change held off).
/// Nothing to do for a file without checksums, or for anything but a regular file. A copy
/// that fails and was changed on its leg since the mirror last wrote it
/// ([`crate::integrity::classify`]) diverged: reported, not repaired; returns the file's
/// identity then. Every copy that verifies (or was repaired) gets its stamp afresh.
fn verify_checksums(mirror: &Mirror, job: &ScrubJob, rel: &Path) -> Result<Checked> {
    use crate::integrity::{self, sum, Verdict};
    use crate::sys;
    use std::os::unix::ffi::OsStrExt;
    let ig = mirror.integrity();
    if !ig.enabled() || rel.as_os_str().is_empty() {
        return Ok(Checked::default());
    }
    // The copies: (leg, read descriptor, write descriptor opened when needed).
    let mut copies = Vec::new();
    let mut id = None;
    for &leg in &job.legs {
        let root = mirror.leg(leg).root()?;
        let fd = match sys::fd::open_beneath(root.as_fd(), rel.as_os_str().as_bytes()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => continue,
            Err(e) => return Err(e),
        };
        let st = sys::fd::fstat(fd.as_fd())?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Ok(Checked::default());
        }
        if id.is_none() {
            id = integrity::id_of(fd.as_fd());
        }
        copies.push((leg, fd));
    }
    let Some(id) = id else {
        return Ok(Checked::default());
    };
    let Some(f) = ig.file(id).map_err(|e| {
        log::error!("scrub: {e}");
        Errno::EIO
    })?
    else {
        return Ok(Checked::default());
    };
    let stats = copies
        .iter()
        .map(|(_, fd)| sys::fd::fstat(fd.as_fd()))
        .collect::<Result<Vec<_>>>()?;
    let fingerprint = |st: &libc::stat| (st.st_size, st.st_mtime, st.st_mtime_nsec);
    // A file whose changes through the mount have not settled (still in the intent log) has
    // no valid stamps yet.
    let settled = !mirror.changes().is_dirty_path(rel.as_os_str().as_bytes());
    let stamps: Vec<_> = copies
        .iter()
        .map(|(leg, _)| if settled { ig.stamp(*leg, id) } else { None })
        .collect();
    // Copy i failed where copy g verifies: rot, or changed on its leg?
    let cause = |i: usize, g: usize| {
        let differs = fingerprint(&stats[g]) != fingerprint(&stats[i]);
        integrity::classify(stamps[i], integrity::ctime_of(&stats[i]), differs)
    };
    let mut failed = vec![false; copies.len()];
    let mut all_good = copies.len() == job.legs.len() && copies.len() >= 2;
    let mut diverged = false;
    let readers = copies
        .iter()
        .map(|(leg, fd)| Ok((*leg, sys::fd::reopen(fd.as_fd(), libc::O_RDONLY)?)))
        .collect::<Result<Vec<_>>>()?;
    let step = sum::CHUNK_BYTES as usize;
    let mut offset = 0u64;
    let mut bufs: Vec<Vec<u8>> = readers.iter().map(|_| vec![0u8; step]).collect();
    loop {
        let mut lens = Vec::new();
        let mut verdicts = Vec::new();
        for (i, (_, fd)) in readers.iter().enumerate() {
            let n = sys::fd::pread_full(fd.as_fd(), &mut bufs[i], offset)?;
            lens.push(n);
            let v = f
                .verify(ig, offset, &bufs[i][..n], n < step)
                .map_err(|_| Errno::EIO)?;
            all_good &= v == Verdict::Good;
            verdicts.push(v);
        }
        let good = verdicts.iter().position(|v| !matches!(v, Verdict::Bad(_)));
        for (i, v) in verdicts.iter().enumerate() {
            let Verdict::Bad(blocks) = v else { continue };
            let leg = readers[i].0;
            let l = mirror.leg(leg);
            let (a, z) = (
                blocks[0] * sum::BLOCK,
                (blocks[blocks.len() - 1] + 1) * sum::BLOCK,
            );
            failed[i] = true;
            if let Some(g) = good.filter(|&g| cause(i, g) == integrity::Cause::Diverged) {
                // Changed on its leg: reported, left to the comparison (and to a repair the
                // user names).
                diverged = true;
                ig.record_diverged(format!("/{}", rel.display()), &l.name);
                let line = format!(
                    "/{} on leg {leg} ('{}'): differs from its checksums at bytes {a}..{z}, \
                     and was changed on its leg since the mirror last wrote it (leg {} \
                     verifies): changed behind the mirror's back (diverged), not repaired",
                    rel.display(),
                    l.path().display(),
                    readers[g].0
                );
                log::warn!("scrub: {line}");
                let mut listed = job.listed.lock();
                if listed.len() < LISTED {
                    listed.push(line);
                }
                continue;
            }
            l.counters.checksum_errors.fetch_add(1, Ordering::Relaxed);
            job.progress.differences.fetch_add(1, Ordering::Relaxed);
            let action = match good {
                Some(g) => {
                    let (gleg, gn) = (readers[g].0, lens[g]);
                    // A repair is no change of the file: the copy keeps the good copy's times.
                    let fix = sys::fd::fstat(copies[g].1.as_fd()).and_then(|gst| {
                        let w = sys::fd::reopen(copies[i].1.as_fd(), libc::O_WRONLY)?;
                        sys::fd::pwrite_full(w.as_fd(), &bufs[g][..gn], offset)?;
                        let t = |s: i64, ns: i64| libc::timespec {
                            tv_sec: s,
                            tv_nsec: ns,
                        };
                        sys::fd::set_times(
                            copies[i].1.as_fd(),
                            t(gst.st_atime, gst.st_atime_nsec),
                            t(gst.st_mtime, gst.st_mtime_nsec),
                        )
                    });
                    match fix {
                        Ok(_) => {
                            failed[i] = false;
                            mirror.kernel_path_changed(rel);
                            l.counters.read_repairs.fetch_add(1, Ordering::Relaxed);
                            job.progress.repaired.fetch_add(1, Ordering::Relaxed);
                            format!("repaired from leg {gleg}")
                        }
                        Err(e) => format!("repair failed: {e}"),
                    }
                }
                None => "no leg holds these bytes as written: listed as damaged".to_string(),
            };
            let line = format!(
                "/{} on leg {leg} ('{}'): checksum error at bytes {a}..{z}: {action}",
                rel.display(),
                l.path().display()
            );
            log::warn!("scrub: {line}");
            let mut listed = job.listed.lock();
            if listed.len() < LISTED {
                listed.push(line);
            }
        }
        if good.is_none() && verdicts.iter().any(|v| matches!(v, Verdict::Bad(_))) {
            ig.record_damage(id, format!("/{}", rel.display()), offset, step as u64);
        }
        if lens.iter().all(|&n| n < step) {
            break;
        }
        offset += step as u64;
    }
    // Each copy that is now as written: its ctime as it stands is the mirror's (every change
    // is held off), its stamp from now on.
    for (i, (leg, fd)) in copies.iter().enumerate() {
        if settled && !failed[i] {
            let st = sys::fd::fstat(fd.as_fd()).ok();
            ig.set_stamp(*leg, id, st.map(|st| integrity::ctime_of(&st)));
        }
    }
    Ok(Checked {
        diverged: diverged.then_some(id),
        verified: all_good && !diverged && !failed.contains(&true),
    })
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
                    verified: Mutex::new(None),
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
        // On record before the state says it is over, so whoever sees it over sees its record.
        self.record_scrub(job, &state);
        *job.state.lock() = state;
    }

    /// Keeps how the scrub `job` ended (`state`): in memory, and on every leg it compared that
    /// is still in sync (`.mirrorfs/last-scrub.json`), so that the next mounts know when the
    /// mirror was last scrubbed. A leg that cannot take it is logged, nothing more: the record
    /// only ever says when a scrub ran.
    fn record_scrub(&self, job: &ScrubJob, state: &JobState) {
        let names = job
            .legs
            .iter()
            .map(|&l| self.mirror.leg(l).name.clone())
            .collect();
        let s = scan_stats(&job.progress, state, names);
        // The end as the scrub's own figures say it (what `mirrorfs_scan_end_timestamp_seconds`
        // shows); now, for a scrub that failed before it started counting.
        let now = if s.started_unix_s > 0 {
            s.started_unix_s + s.elapsed_s
        } else {
            crate::sys::now_timespec().tv_sec.max(0) as u64
        };
        let mut last = self.last_scrub.lock();
        let previous = last.as_ref().and_then(|r| r.last_finished_unix_s);
        let finished = s.state == JobState::Finished;
        let record = ScrubRecord {
            state: s.state.to_string(),
            legs: s.legs,
            started_unix_s: s.started_unix_s,
            ended_unix_s: now,
            done_entries: s.done_entries,
            done_bytes: s.done_bytes,
            differences: s.differences,
            repaired: s.repaired,
            errors: s.errors,
            last_finished_unix_s: if finished { Some(now) } else { previous },
        };
        for &l in &job.legs {
            let leg = self.mirror.leg(l);
            if leg.state() != crate::leg::LegState::InSync {
                continue;
            }
            if let Err(e) = record.write(&leg.path()) {
                log::warn!(
                    "scrub: cannot keep its record on leg {l} ('{}'): {e}",
                    leg.path().display()
                );
            }
        }
        *last = Some(record);
    }
}
