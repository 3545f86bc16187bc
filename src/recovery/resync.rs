//! Bringing a leg back up to date while the mirror serves: the resync; and, at mount, crash
//! recovery.
//!
//! A leg that is behind (stale at mount, dropped after an error, or re-added by
//! `mirrorfs leg add`) is resynced from the metadata leg (the first in-sync one) in the
//! background, by the tree engine ([`crate::tree`]), throttled by `resync_speed_max`:
//!
//! 1. **First pass**: the paths of its away log (what changed while it was away, plus the
//!    source's write-intent log), or the whole tree when there is no usable away log (full
//!    resync; its away log then says so until the leg joins, see
//!    [`crate::meta::changes::WHOLE_TREE`]).
//! 2. **Catch-up passes**: the paths changed meanwhile (the away record keeps growing while
//!    the leg resyncs), until few are left.
//! 3. **Join**: with every change held off (the mirror's barrier), the last changed paths are
//!    synced, the leg is flushed (`syncfs`), attached to every live inode and open file, and
//!    marked in sync; the superblocks stop recording it as dropped and its away logs go.
//!
//! While it resyncs the leg serves no read and takes no write from users: only the engine
//! writes it. If the daemon dies halfway, the leg is still recorded as dropped (stale) by the
//! others, and its away log is still there: the next mount resyncs it again from the start,
//! which converges (the engine is idempotent, see [`crate::tree`]). A resync that fails or is
//! cancelled leaves the leg out (FAULTED) in the same way.

use super::{scan_stats, spawn_job, Outcome, Recovery};
use crate::errno::{refuse, Errno, Refusal, Result};
use crate::leg::{LegIdx, LegState};
use crate::meta::changes::ChangeLog;
use crate::stats::{JobState, ScanStats};
use crate::sys;
use crate::tree::{self, Control, Phase, Progress, Throttle};
use parking_lot::Mutex;
use std::ffi::OsString;
use std::os::fd::AsFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Catch-up passes stop when fewer paths than this changed during the last one.
const FEW_CHANGES: usize = 256;
/// At most this many catch-up passes before joining anyway (the join pass then takes the
/// rest with changes held off).
const MAX_PASSES: u32 = 8;

/// What a resync's first pass covers. Its name (in the log) is the variant's, in lower case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::Display)]
#[strum(serialize_all = "lowercase")]
pub enum ResyncMode {
    /// The paths changed while the leg was away.
    Incremental,
    /// The whole tree.
    Full,
}

/// One resync, running or done (for the stats and `mirrorfs status`).
pub struct ResyncJob {
    pub target: LegIdx,
    pub mode: ResyncMode,
    pub progress: Arc<Progress>,
    pub cancel: Arc<AtomicBool>,
    pub state: Arc<Mutex<JobState>>,
    pub passes: AtomicU64,
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

    pub fn is_running(&self) -> bool {
        self.state.lock().is_running()
    }
}

/// Log records (relative paths, `.` for the root) as the engine's paths; anything that is not
/// a plain relative path (a torn record, the [`crate::meta::changes::WHOLE_TREE`] mark) is
/// left out.
fn to_paths(records: Vec<Vec<u8>>) -> Vec<PathBuf> {
    records
        .into_iter()
        .map(|r| {
            if r == sys::fd::ROOT_REL {
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

impl Recovery {
    /// After a crash: makes the paths of the write-intent logs identical on every in-sync leg,
    /// copying from the metadata leg, before the mount serves anything. Returns how many
    /// paths were checked.
    pub fn recover_after_crash(&self) -> Result<usize> {
        let legs = self.mirror.in_sync_legs();
        let roots: Vec<PathBuf> = legs.iter().map(|&l| self.mirror.leg(l).path()).collect();
        let roots: Vec<&Path> = roots.iter().map(PathBuf::as_path).collect();
        let records = self.expand_records(&legs, ChangeLog::read_intent(&roots))?;
        let paths = to_paths(records);
        let Some((&source, rest)) = legs.split_first() else {
            return Ok(0);
        };
        // A file whose metadata-leg copy does not match its committed checksums while another
        // leg's does: that copy wins, and the others are made like it first.
        self.crash_winners(&legs, &paths)?;
        let src = self.mirror.leg(source).root()?;
        for &l in rest {
            let ctl = Control::new(None);
            let dst = self.mirror.leg(l).root()?;
            let r = tree::sync_paths(src.as_fd(), dst.as_fd(), &paths, &self.tree, &ctl)?;
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
        self.rehash_after_crash(src.as_fd(), &paths);
        Ok(paths.len())
    }

    /// The intent log's records with each directory cover and each identity record replaced by
    /// what it stands for ([`expand_cover`](super::expand::expand_cover), and
    /// [`find_identity`](super::expand::find_identity) on the first of `legs` the record
    /// names).
    fn expand_records(&self, legs: &[LegIdx], records: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>> {
        use super::expand::{expand_cover, find_identity};
        use crate::meta::changes::{parse_cover, parse_identity};
        if !records
            .iter()
            .any(|r| parse_cover(r).is_some() || parse_identity(r).is_some())
        {
            return Ok(records);
        }
        let roots = legs
            .iter()
            .map(|&l| self.mirror.leg(l).root())
            .collect::<Result<Vec<_>>>()?;
        let fds: Vec<_> = roots.iter().map(|r| r.as_fd()).collect();
        let skip = |dir: &[u8], name: &[u8]| {
            dir == sys::fd::ROOT_REL
                && self
                    .tree
                    .skip_root_names
                    .iter()
                    .any(|s| s.as_bytes() == name)
        };
        let ids: Vec<Option<String>> = legs.iter().map(|&l| self.mirror.leg_id(l)).collect();
        let mut out = Vec::new();
        for r in records {
            if let Some(cover) = parse_cover(&r) {
                let got = expand_cover(&fds, cover, &skip);
                log::info!(
                    "after the crash: the {}cover of /{} stands for {} path(s)",
                    if cover.subtree { "subtree " } else { "" },
                    String::from_utf8_lossy(cover.dir),
                    got.len()
                );
                out.extend(got);
            } else if let Some(named) = parse_identity(&r) {
                // The first of the legs that the record names: the object's names there.
                let found = ids.iter().enumerate().find_map(|(i, id)| {
                    let id = id.as_deref()?;
                    let &(_, ino) = named.iter().find(|(n, _)| *n == id)?;
                    Some((i, ino))
                });
                let Some((i, ino)) = found else {
                    log::warn!(
                        "the record {} names no leg in sync: the object it stands for is left \
                         to a scrub",
                        String::from_utf8_lossy(&r)
                    );
                    continue;
                };
                let got = find_identity(fds[i], ino, &skip);
                log::info!(
                    "the record {} stands for {} path(s) on '{}'",
                    String::from_utf8_lossy(&r),
                    got.len(),
                    self.mirror.leg(legs[i]).path().display()
                );
                out.extend(got);
            } else {
                out.push(r);
            }
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// For each regular file of the intent log with committed checksums: if the metadata leg's
    /// copy does not match them but another in-sync leg's does, that leg's copy is synced to
    /// every other leg (so the checksums decide, not the leg order).
    fn crash_winners(&self, legs: &[LegIdx], paths: &[PathBuf]) -> Result<()> {
        let ig = self.mirror.integrity();
        if !ig.enabled() || legs.len() < 2 {
            return Ok(());
        }
        let roots = legs
            .iter()
            .map(|&l| self.mirror.leg(l).root())
            .collect::<Result<Vec<_>>>()?;
        for p in paths {
            let rel = p.as_os_str().as_bytes();
            let leg_sums = |i: usize| -> Option<(u64, Vec<crate::integrity::sum::Sum>)> {
                let fd = crate::sys::fd::open_beneath(roots[i].as_fd(), rel).ok()?;
                let st = crate::sys::fd::fstat(fd.as_fd()).ok()?;
                if st.st_mode & libc::S_IFMT != libc::S_IFREG {
                    return None;
                }
                let id = crate::integrity::id_of(fd.as_fd())?;
                let file = crate::sys::fd::reopen(fd.as_fd(), libc::O_RDONLY).ok()?;
                let mut sums = crate::integrity::hash_fd(file.as_fd()).ok()?;
                crate::integrity::trim_zeros(&mut sums);
                Some((id, sums))
            };
            let Some((id, first)) = leg_sums(0) else {
                continue;
            };
            let Ok(Some(committed)) = ig.committed(id) else {
                continue;
            };
            if first == committed {
                continue;
            }
            let Some(w) =
                (1..legs.len()).find(|&i| leg_sums(i).is_some_and(|(_, s)| s == committed))
            else {
                continue;
            };
            log::warn!(
                "after the crash: /{}: leg {}'s copy matches the committed checksums and the \
                 metadata leg's does not: the other legs are made like leg {} (crash recovery, \
                 not corruption)",
                p.display(),
                legs[w],
                legs[w]
            );
            for (i, dst) in roots.iter().enumerate() {
                if i != w {
                    let ctl = Control::new(None);
                    tree::sync_paths(
                        roots[w].as_fd(),
                        dst.as_fd(),
                        std::slice::from_ref(p),
                        &self.tree,
                        &ctl,
                    )?;
                }
            }
        }
        Ok(())
    }

    /// After crash recovery made the intent log's files identical: their checksums are
    /// computed again from the metadata leg's copy and committed, so that a write the crash
    /// cut short is never taken for corruption.
    fn rehash_after_crash(&self, src: std::os::fd::BorrowedFd<'_>, paths: &[PathBuf]) {
        let ig = self.mirror.integrity();
        if !ig.enabled() {
            return;
        }
        let mut n = 0;
        for p in paths {
            let Ok(fd) = crate::sys::fd::open_beneath(src, p.as_os_str().as_bytes()) else {
                continue;
            };
            let size = match crate::sys::fd::fstat(fd.as_fd()) {
                Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFREG => st.st_size as u64,
                _ => continue,
            };
            let Ok(file) = crate::sys::fd::reopen(fd.as_fd(), libc::O_RDONLY) else {
                continue;
            };
            let Some(id) = crate::integrity::id_of(fd.as_fd()) else {
                continue;
            };
            match crate::integrity::hash_fd(file.as_fd()) {
                Ok(sums) => {
                    ig.record_whole(id, sums, size);
                    super::stamp_rel(&self.mirror, &self.mirror.in_sync_legs(), p, id);
                    n += 1;
                }
                Err(e) => log::error!("after the crash: cannot hash '{}': {e}", p.display()),
            }
        }
        if n > 0 {
            ig.counters
                .crash_resolved
                .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            for (leg, e) in ig.commit() {
                log::error!("after the crash: checksum commit to leg {leg} failed: {e}");
            }
            log::warn!("after the crash: checksums of {n} file(s) being written computed again (crash recovery, not corruption)");
        }
    }

    /// Starts resyncing `target` in the background (incremental when its away log is there
    /// and `full` is false). EBUSY while another resync runs, or while operations given up on
    /// after `leg_timeout` still run on the leg; EEXIST if it is in sync; EINVAL
    /// for a removed leg, or a directory that holds another member's or anyone's data.
    pub fn start_resync(self: &Arc<Self>, target: LegIdx, full: bool) -> Outcome<()> {
        let mut slot = self.resync.lock();
        let leg = self.mirror.leg(target);
        if let Some(j) = slot.as_ref().filter(|j| j.is_running()) {
            let other = &self.mirror.leg(j.target).name;
            return refuse(
                Errno::EBUSY,
                format!("a resync of '{other}' is running: one at a time (see mirrorfs status)"),
            );
        }
        let name = &leg.name;
        match leg.state() {
            LegState::InSync => {
                return refuse(Errno::EEXIST, format!("'{name}' is in sync already"))
            }
            LegState::Resyncing => {
                return refuse(Errno::EBUSY, format!("'{name}' is being resynced"))
            }
            LegState::Removed => {
                return refuse(
                    Errno::EINVAL,
                    format!("'{name}' was removed from the mirror"),
                )
            }
            LegState::Stale | LegState::Failed | LegState::Missing => {}
        }
        // A write given up on after `leg_timeout` may still land on the leg: after the resync
        // copied its range, it would make the leg differ unseen.
        let abandoned = leg.abandoned.load(std::sync::atomic::Ordering::Acquire);
        if abandoned > 0 {
            return refuse(
                Errno::EBUSY,
                format!(
                    "'{name}' has not yet answered {abandoned} operation(s) given up on after                      leg_timeout: try again once it answers (see the leg's `abandoned` in the stats)"
                ),
            );
        }
        let Some(id) = self.mirror.leg_id(target) else {
            return refuse(
                Errno::EINVAL,
                format!("'{name}' is no member of the mirror"),
            );
        };
        let path = leg.path();
        let cannot_open =
            |e: Errno| Refusal::new(e, format!("'{}' cannot be opened: {e}", path.display()));
        let root = leg.open_root().map_err(cannot_open)?;
        // The leg must be this member, or empty: never overwrite someone else's data. An
        // empty one (a new disk in the old one's place) has no history: it is filled in full.
        let mut full = full;
        let empty = || sys::dir::read_dir(root.as_fd()).map(|e| e.is_empty());
        match crate::meta::superblock::LegSuperblock::read(&path) {
            Ok(Some(sb)) if sb.leg_id == id => {}
            Ok(None) if empty().map_err(cannot_open)? => full = true,
            _ => {
                return refuse(
                    Errno::EINVAL,
                    format!(
                        "'{}' holds data that is not this member's: give it an empty directory \
                         (mirrorfs leg replace)",
                        path.display()
                    ),
                )
            }
        }
        let source = self.mirror.metadata_leg();
        let in_sync = self.mirror.in_sync_legs();
        // The away record as far as it goes now, on disk.
        self.mirror.changes().flush_away(&in_sync);
        let source_root = self.mirror.leg(source).path();
        let paths = match full {
            true => None,
            false => match ChangeLog::read_away(&source_root, &id) {
                Some(mut away) => {
                    // The source's intent log: changes of the last second before a crash.
                    away.extend(ChangeLog::read_intent(&[&source_root]));
                    Some(self.expand_records(&[source], away).map_err(cannot_open)?)
                }
                None => None,
            },
        };
        if paths.is_none() {
            // Until it has joined, this member needs a full resync, whatever happens to this one.
            self.mirror
                .changes()
                .mark_whole_tree(&id, &in_sync)
                .map_err(|e| {
                    Refusal::new(Errno::from(e), "the legs' away logs cannot be written")
                })?;
        }
        leg.set_state(LegState::Resyncing);
        self.mirror.changes().start_away(&id);
        // Every change from now on is a catch-up path; the first pass covers what came before.
        self.mirror.changes().take_changed(&id);
        let job = Arc::new(ResyncJob {
            target,
            mode: match paths {
                Some(_) => ResyncMode::Incremental,
                None => ResyncMode::Full,
            },
            progress: Arc::new(Progress::new()),
            cancel: Arc::new(AtomicBool::new(false)),
            state: Arc::new(Mutex::new(JobState::Running)),
            passes: AtomicU64::new(0),
        });
        *slot = Some(job.clone());
        drop(slot);
        log::warn!(
            "resync of leg {} ('{}') started ({} from '{}')",
            target,
            leg.path().display(),
            job.mode,
            source_root.display()
        );
        let me = self.clone();
        let failed = self.clone();
        let thread_job = job.clone();
        spawn_job(
            "resync",
            job.state.clone(),
            job.progress.clone(),
            // Nothing more is written: the leg stays out.
            move || failed.mirror.leg(target).set_state(LegState::Failed),
            move || {
                me.run_resync(&thread_job, source, &id, paths);
                me.resync_next_stale();
            },
        )
    }

    /// Cancels the running resync, if any (unmount, `mirrorfs leg fail`).
    pub fn cancel_resync(&self) {
        if let Some(j) = self.resync.lock().as_ref() {
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
                JobState::Finished
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
                match cancelled {
                    true => JobState::Cancelled,
                    false => JobState::Failed(e.to_string()),
                }
            }
        };
        *job.state.lock() = outcome;
    }

    /// Starts the resync of the next stale leg, if any (several legs that came back are
    /// resynced one after the other).
    pub fn resync_next_stale(self: &Arc<Self>) {
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
        let opts = &self.tree;

        let ctl = Control {
            progress: job.progress.clone(),
            cancel: job.cancel.clone(),
            throttle: self.throttle.clone(),
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
            let records = self.expand_records(&[source], records)?;
            let r = tree::sync_paths(src, dst, &to_paths(records), opts, &ctl)?;
            self.check_pass(&r)
        };
        job.passes.fetch_add(1, Ordering::Relaxed);
        let first = match paths {
            Some(p) => tree::sync_paths(src, dst, &to_paths(p), opts, &ctl)?,
            None => tree::sync_full(src, dst, opts, &ctl)?,
        };
        self.check_pass(&first)?;
        // Catch up with what changed meanwhile.
        let mut pending = self.mirror.changes().take_changed(id);
        for _ in 0..MAX_PASSES {
            if pending.len() < FEW_CHANGES {
                break;
            }
            pass(pending, self.throttle.clone())?;
            pending = self.mirror.changes().take_changed(id);
        }
        // Join, with every change held off (and no throttle: writers are waiting). The root's
        // own metadata always: the target's `.mirrorfs/` moved its mtime.
        let _all = self.mirror.exclusive();
        pending.extend(self.mirror.changes().take_changed(id));
        pending.push(sys::fd::ROOT_REL.to_vec());
        pass(pending, Arc::new(Throttle::new(None)))?;
        self.mirror.leg(target).flush()?;
        self.objects.attach_leg(target)?;
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
}
