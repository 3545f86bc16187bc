//! The mirror engine: the legs, fanning operations out to them, reconciling their answers,
//! dropping a leg that fails, and choosing the leg a read goes to.

mod changes;
pub mod deadline;
pub mod fanout;
pub mod fault;
mod members;
pub mod op;
pub mod outcome;
mod plan;
pub mod readahead;
pub mod reads;
pub mod routed;
mod space;

use crate::errno::{Errno, Result};
use crate::integrity::Integrity;
use crate::leg::{Leg, LegIdx};
use crate::meta::changes::ChangeLog;
use crate::meta::membership;
use crate::meta::superblock::LegSuperblock;
use crate::policy::{ReadPlan, ReadPolicy, ReadRequest};
use fanout::LegWorkers;
use fault::{FaultRule, Faults};
pub use op::Op;
use outcome::DropReason;
use parking_lot::{Mutex, RwLock};
use reads::{ReadHistory, ServiceFigures};
use std::sync::atomic::Ordering;

/// Read errors a leg may return (since the mount) before it is dropped instead of repaired: md's `max_corr_read_errors` is 20 as well.
pub const MAX_READ_ERRORS: u64 = 20;

/// A piece of a read that failed on a leg with an I/O-class error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FailedRead {
    pub leg: LegIdx,
    pub offset: u64,
    pub len: u32,
    pub errno: Errno,
}

/// What a routed read returned: the pieces in offset order, and the pieces that failed on
/// some leg first (to be repaired there).
pub struct ReadOutcome<T> {
    pub data: Vec<T>,
    pub failed: Vec<FailedRead>,
}

/// The length of what a read returned (to measure service time per byte).
pub trait ReadLen {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What the kernel may have cached of the mirror: told whenever mirrorfs itself changes what
/// the mount shows, behind the kernel's back (a scrub repair, a new metadata leg). Changes
/// made through the mount need no notice: the kernel saw them. Set once by the FUSE side
/// ([`Mirror::set_kernel_view`]); without a mount nothing is told.
pub trait KernelView: Send + Sync {
    /// The object at `rel` (its attributes, its data, its name in its parent) may have changed.
    fn path_changed(&self, rel: &std::path::Path);
    /// The metadata leg changed: every attribute the mount shows may differ.
    fn metadata_leg_changed(&self);
}

/// The legs of one mounted mirror and the machinery to use them together.
pub struct Mirror {
    legs: Vec<Leg>,
    /// Per leg, what its completed reads taught (service times, read positions).
    reads: Vec<Mutex<ReadHistory>>,
    workers: LegWorkers,
    /// What each kind of fan-out has cost lately on each leg (whether a part is worth a worker).
    op_costs: fanout::OpCosts,
    policy: RwLock<Box<dyn ReadPolicy>>,
    /// The superblocks as last written, by leg (None for a leg we cannot write).
    superblocks: Mutex<Vec<Option<LegSuperblock>>>,
    /// A superblock write failed: the next membership event writes every serving leg.
    superblocks_behind: std::sync::atomic::AtomicBool,
    /// Injected faults (tests).
    faults: Faults,
    /// Held while a read is routed and counted (see [`Mirror::route_read`]).
    routing: Mutex<()>,
    /// The clock policies see.
    clock: std::time::Instant,
    /// The write-intent log and the away logs.
    changes: ChangeLog,
    /// Set at unmount: background work stops.
    stopping: std::sync::atomic::AtomicBool,
    /// Every operation that changes the legs holds it shared; a leg joins the mirror (after
    /// its resync) holding it exclusively, so that no change is in flight that left it out.
    barrier: RwLock<()>,
    unlisted: std::sync::atomic::AtomicUsize,
    /// The checksums (`-o checksum`).
    integrity: Integrity,
    /// What is told of changes behind the kernel's back.
    kernel: std::sync::OnceLock<Box<dyn KernelView>>,
    /// The extent read-ahead (`readahead=`), run under `auto` only.
    readahead: readahead::ReadAhead,
    /// The policy in force is `auto`.
    auto: std::sync::atomic::AtomicBool,
    /// `leg_timeout=` in milliseconds (0: none; see `deadline.rs`).
    leg_timeout_ms: std::sync::atomic::AtomicU64,
}

impl Mirror {
    pub fn new(
        legs: Vec<Leg>,
        superblocks: Vec<Option<LegSuperblock>>,
        threads_per_leg: usize,
        policy: Box<dyn ReadPolicy>,
        write_intent: bool,
        checksum: bool,
    ) -> Result<Mirror> {
        let n_legs = legs.len();
        let workers = LegWorkers::new(legs.len(), threads_per_leg).map_err(|e| {
            log::error!(
                "cannot start {} I/O threads ({threads_per_leg} per leg): {e}",
                legs.len() * threads_per_leg
            );
            Errno::from(e)
        })?;
        let changes = ChangeLog::new(
            legs.iter().map(|l| l.path().clone()).collect(),
            write_intent,
        );
        // Members not here or not in sync from the start: record what changes meanwhile.
        let serving: Vec<LegIdx> = legs
            .iter()
            .filter(|l| l.is_in_sync())
            .map(|l| l.idx)
            .collect();
        for id in membership::out_ids(&superblocks, &serving) {
            changes.start_away(&id);
        }
        let integrity = Integrity::new(checksum, legs.len());
        for l in legs.iter().filter(|l| l.quiet) {
            integrity.read_last(l.idx);
        }
        let auto = policy.name() == "auto";
        Ok(Mirror {
            readahead: readahead::ReadAhead::new(n_legs, 0),
            auto: std::sync::atomic::AtomicBool::new(auto),
            leg_timeout_ms: std::sync::atomic::AtomicU64::new(0),
            integrity,
            reads: legs.iter().map(|_| Mutex::default()).collect(),
            legs,
            op_costs: fanout::OpCosts::new(n_legs),
            workers,
            policy: RwLock::new(policy),
            superblocks: Mutex::new(superblocks),
            superblocks_behind: std::sync::atomic::AtomicBool::new(false),
            faults: Faults::default(),
            routing: Mutex::new(()),
            clock: std::time::Instant::now(),
            changes,
            stopping: std::sync::atomic::AtomicBool::new(false),
            barrier: RwLock::new(()),
            unlisted: std::sync::atomic::AtomicUsize::new(0),
            kernel: std::sync::OnceLock::new(),
        })
    }

    pub fn legs(&self) -> &[Leg] {
        &self.legs
    }

    pub fn leg(&self, idx: LegIdx) -> &Leg {
        &self.legs[idx]
    }

    /// Whether any injected fault is in force (see [`fault`]).
    pub fn faults_injected(&self) -> bool {
        self.faults.any()
    }

    /// Makes a leg fail chosen operations (tests; see [`fault`]).
    pub fn inject_fault(&self, rule: FaultRule) {
        self.faults.add(rule);
    }

    /// The injected faults in force.
    pub fn faults(&self) -> Vec<FaultRule> {
        self.faults.list()
    }

    /// Removes every injected fault.
    pub fn clear_faults(&self) {
        self.faults.clear();
    }

    /// `Err` if an injected fault says `leg` must fail `what` now.
    pub fn check_fault(&self, leg: LegIdx, what: &str) -> Result<()> {
        self.faults.check(leg, what)
    }

    /// As [`check_fault`](Self::check_fault), for an operation on the file `file`.
    pub fn check_fault_file(&self, leg: LegIdx, what: &str, file: Option<u64>) -> Result<()> {
        self.faults.check_file(leg, what, file)
    }

    /// From now on, changes behind the kernel's back are told to `view` (once; later calls
    /// are ignored).
    pub fn set_kernel_view(&self, view: Box<dyn KernelView>) {
        let _ = self.kernel.set(view);
    }

    /// mirrorfs changed the object at `rel` behind the kernel's back.
    pub fn kernel_path_changed(&self, rel: &std::path::Path) {
        if let Some(k) = self.kernel.get() {
            k.path_changed(rel);
        }
    }

    /// Opens (or rebuilds, or creates) the checksum store of every in-sync leg. Before the
    /// mount serves: after crash recovery's checks, or once the superblocks exist. A leg whose
    /// store can be neither opened nor rebuilt is dropped.
    ///
    /// A mount without checksums that may write (`checksum=off`, not `ro`) sets the legs'
    /// stores aside first (`checksums.redb.off`): it will change data without updating them,
    /// and a later mount with checksums must not take the old checksums for the truth.
    pub fn open_checksums(&self, read_only: bool) {
        if !self.integrity.enabled() {
            if !read_only {
                for l in self.in_sync_legs() {
                    if let Some(note) = crate::integrity::store::set_aside(&self.legs[l].path()) {
                        log::warn!("{note}");
                    }
                }
            }
            return;
        }
        if self.integrity.store_count() > 0 {
            return;
        }
        let legs: Vec<(LegIdx, std::path::PathBuf)> = self
            .in_sync_legs()
            .into_iter()
            .map(|l| (l, self.legs[l].path()))
            .collect();
        let (failed, notes) = self.integrity.open_stores(&legs);
        for n in notes {
            log::warn!("{n}");
        }
        for (leg, e) in failed {
            log::error!("leg {leg}: {e}");
            self.mark_failed(leg, "checksum store", DropReason::LegFault(Errno::EIO));
        }
    }

    /// The checksums.
    pub fn integrity(&self) -> &Integrity {
        &self.integrity
    }

    /// Held (shared) by every operation that changes the legs, for its whole duration.
    pub fn barrier(&self) -> parking_lot::RwLockReadGuard<'_, ()> {
        self.barrier.read_recursive()
    }

    /// Held (exclusively) while a leg joins: no change is in flight.
    pub fn exclusive(&self) -> parking_lot::RwLockWriteGuard<'_, ()> {
        self.barrier.write()
    }

    /// Whether the mirror is being unmounted (background work stops).
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// The measured read figures of `leg` (for the statistics).
    pub fn service_figures(&self, leg: LegIdx) -> ServiceFigures {
        self.reads[leg].lock().figures()
    }

    /// Microseconds on the mirror's monotonic clock (the time policies see).
    pub fn now_us(&self) -> u64 {
        self.clock.elapsed().as_micros() as u64
    }

    /// The leg a user means by `what` (its name, `legN`, or its directory; see
    /// [`crate::leg::find`]).
    pub fn find_leg(&self, what: &std::ffi::OsStr) -> Option<LegIdx> {
        let paths: Vec<std::path::PathBuf> = self.legs.iter().map(|l| l.path()).collect();
        let legs: Vec<(&str, &std::path::Path)> = self
            .legs
            .iter()
            .zip(&paths)
            .map(|(l, p)| (l.name.as_str(), p.as_path()))
            .collect();
        crate::leg::find(what, &legs)
    }
    /// Runs a read of `req.size` bytes at `req.offset` where the policy says: `op(leg, offset,
    /// len)` reads one piece from one leg. A split plan runs its pieces in parallel on the
    /// legs' workers. Returns the pieces' results in offset order (one for an unsplit read).
    ///
    /// `on_plan` learns the plan before the I/O starts (the stream tracker records it).
    /// On a leg fault the leg's error is counted and the whole read is asked again of the
    /// policy among the legs left; a caller error is returned as is. The ranges that failed
    /// come back with the data, for read-repair ([`ReadOutcome::failed`]); a leg is not dropped
    /// here unless it is past [`MAX_READ_ERRORS`].
    pub fn read_routed<T, F>(
        &self,
        candidates: &[LegIdx],
        req: &ReadRequest,
        what: &str,
        mut on_plan: impl FnMut(&ReadPlan),
        op: F,
    ) -> Result<ReadOutcome<T>>
    where
        T: Send + 'static + ReadLen,
        F: Fn(LegIdx, u64, u32) -> Result<T> + Sync,
    {
        let mut tried: Vec<LegIdx> = Vec::new();
        let mut failed: Vec<FailedRead> = Vec::new();
        loop {
            let left: Vec<LegIdx> = candidates
                .iter()
                .copied()
                .filter(|l| !tried.contains(l))
                .collect();
            let Some((plan, _inflight, hand_overs)) = self.route_read(&left, req) else {
                // Every leg failed this read: the caller gets the error (EBADMSG if some copy
                // failed its checksums: the caller looks again, under the file's data lock); no
                // leg is dropped for it beyond what the error budget says.
                if failed.iter().any(|f| f.errno == Errno::EBADMSG) {
                    return Err(Errno::EBADMSG);
                }
                return Err(failed.first().map_or(Errno::EIO, |f| f.errno));
            };
            on_plan(&plan);
            let timed = |piece: usize, leg: LegIdx, offset: u64, len: u32| -> Result<T> {
                self.faults.check_file(leg, what, Some(req.file))?;
                let start = std::time::Instant::now();
                let r = op(leg, offset, len)?;
                let elapsed = start.elapsed().as_micros() as u64;
                self.reads[leg].lock().record(
                    &hand_overs[piece],
                    r.len() as u64,
                    elapsed,
                    self.now_us(),
                );
                Ok(r)
            };
            let results: Vec<(LegIdx, u64, u32, Result<T>)> = match &plan {
                ReadPlan::One(leg) | ReadPlan::Spread(leg) => vec![(
                    *leg,
                    req.offset,
                    req.size,
                    timed(0, *leg, req.offset, req.size),
                )],
                ReadPlan::Split(pieces) => {
                    // Each leg once (the pieces may alternate between legs), running its
                    // pieces in order: every piece is read exactly once.
                    let mut legs: Vec<LegIdx> = Vec::new();
                    for p in pieces.iter() {
                        if !legs.contains(&p.leg) {
                            legs.push(p.leg);
                        }
                    }
                    let by_leg = self.workers.run(&legs, |leg| {
                        pieces
                            .iter()
                            .enumerate()
                            .filter(|(_, p)| p.leg == leg)
                            .map(|(i, p)| timed(i, leg, p.offset, p.len))
                            .collect::<Vec<_>>()
                    });
                    // Back into offset order.
                    let mut per_leg: Vec<(LegIdx, std::vec::IntoIter<Result<T>>)> = by_leg
                        .into_iter()
                        .map(|(l, v)| (l, v.into_iter()))
                        .collect();
                    pieces
                        .iter()
                        .map(|p| {
                            let it = per_leg
                                .iter_mut()
                                .find(|(l, _)| *l == p.leg)
                                .expect("every piece's leg ran");
                            (
                                p.leg,
                                p.offset,
                                p.len,
                                it.1.next().expect("one result per piece"),
                            )
                        })
                        .collect()
                }
            };
            let mut out = Vec::with_capacity(results.len());
            let mut retry = false;
            for (leg, offset, len, r) in results {
                match r {
                    Ok(v) => out.push(v),
                    Err(Errno::EBADMSG) => {
                        // The copy read does not match its checksums: asked again elsewhere,
                        // and repaired (and counted) by the caller once confirmed.
                        if !tried.contains(&leg) {
                            tried.push(leg);
                        }
                        failed.push(FailedRead {
                            leg,
                            offset,
                            len,
                            errno: Errno::EBADMSG,
                        });
                        retry = true;
                    }
                    Err(e) if outcome::is_leg_fault(e) => {
                        self.legs[leg]
                            .counters
                            .read_errors
                            .fetch_add(1, Ordering::Relaxed);
                        // Not the counter `stats_reset` zeroes: the budget is the leg's own.
                        let errors = self.legs[leg].read_faults.fetch_add(1, Ordering::Relaxed) + 1;
                        log::warn!(
                            "leg {} ('{}'): {what} of {len} bytes at {offset} of inode {} failed: {e}",
                            leg,
                            self.legs[leg].path().display(),
                            req.file
                        );
                        if !tried.contains(&leg) {
                            tried.push(leg);
                        }
                        if errors > MAX_READ_ERRORS {
                            self.mark_failed(leg, what, DropReason::LegFault(e));
                        }
                        failed.push(FailedRead {
                            leg,
                            offset,
                            len,
                            errno: e,
                        });
                        retry = true;
                    }
                    Err(e) => return Err(e),
                }
            }
            if !retry {
                return Ok(ReadOutcome { data: out, failed });
            }
        }
    }
}

/// Mirrors over temporary directories, for the unit tests of the engine's parts.
#[cfg(test)]
pub(crate) mod test_mirror {
    use super::Mirror;
    use crate::leg::spec::LegSpec;
    use crate::leg::Leg;
    use crate::meta::superblock::LegSuperblock;

    /// A mirror over `n` empty directories (`leg0`, `leg1`...) of one temporary directory,
    /// every leg in sync, read policy `first`, no write-intent log, no checksums, no
    /// superblocks.
    pub fn plain(n: usize) -> (tempfile::TempDir, Mirror) {
        build(n, false, false)
    }

    /// As [`plain`], with a write-intent log if `write_intent` and, if `superblocks`, a new
    /// mirror's superblocks written on every leg (each listing every member).
    pub fn build(n: usize, write_intent: bool, superblocks: bool) -> (tempfile::TempDir, Mirror) {
        with_specs(&vec![LegSpec::default(); n], write_intent, superblocks)
    }

    /// As [`build`], a leg with the attributes of each of `specs` (quiet, write-mostly...).
    pub fn with_specs(
        specs: &[LegSpec],
        write_intent: bool,
        superblocks: bool,
    ) -> (tempfile::TempDir, Mirror) {
        let n = specs.len();
        let d = tempfile::tempdir().unwrap();
        let mut legs = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            let dir = d.path().join(format!("leg{i}"));
            std::fs::create_dir(&dir).unwrap();
            let dir = dir.canonicalize().unwrap();
            legs.push(Leg::open(i, &dir, spec).unwrap());
        }
        let mut sbs: Vec<Option<LegSuperblock>> = vec![None; n];
        if superblocks {
            let mut all: Vec<LegSuperblock> =
                (0..n).map(|i| LegSuperblock::new("test", i, n)).collect();
            let ids: Vec<String> = all.iter().map(|s| s.leg_id.clone()).collect();
            for (sb, leg) in all.iter_mut().zip(&legs) {
                sb.members = ids.clone();
                sb.write(&leg.path()).unwrap();
            }
            sbs = all.into_iter().map(Some).collect();
        }
        let policy = crate::policy::by_name("first", n, &|_| None).unwrap();
        let m = Mirror::new(legs, sbs, 1, policy, write_intent, false).unwrap();
        (d, m)
    }
}
