//! The mirror engine: the legs, fanning operations out to them, reconciling their answers,
//! dropping a leg that fails, and choosing the leg a read goes to.
//!
//! This file holds [`Mirror`], its construction and the thin glue; each job of the engine is
//! a file of its own: the fan-out (`fanout.rs`, `op.rs`, `outcome.rs`), deadlines
//! (`deadline.rs`), free space (`space.rs`), membership (`members.rs`), the change records
//! (`changes.rs`), where a read goes (`plan.rs`), the blocking routed read (`read.rs`) and the
//! one whose I/O the caller runs (`routed.rs`), each leg's read history (`reads.rs`), the
//! read-ahead (`readahead.rs`), injected faults (`fault.rs`).

mod changes;
pub mod deadline;
pub mod fanout;
pub mod fault;
mod members;
pub mod op;
pub mod outcome;
mod plan;
mod read;
pub mod readahead;
pub mod reads;
pub mod routed;
mod space;

use crate::errno::{Errno, Result};
use crate::integrity::Integrity;
use crate::leg::{Leg, LegIdx};
use crate::lock_order::{Guard, Ordered, Rank};
use crate::meta::changes::ChangeLog;
use crate::meta::membership;
use crate::meta::superblock::LegSuperblock;
use crate::policy::ReadPolicy;
use fanout::LegWorkers;
use fault::{FaultRule, Faults};
pub use op::Op;
use outcome::DropReason;
use parking_lot::{Mutex, RwLock};
pub use read::{FailedRead, ReadLen, ReadOutcome, MAX_READ_ERRORS};
use reads::{ReadHistory, ServiceFigures};
use std::sync::atomic::Ordering;

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
    barrier: Ordered<RwLock<()>>,
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
            barrier: Ordered::rw(Rank::Barrier, 0, ()),
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
    #[track_caller]
    pub fn barrier(&self) -> Guard<parking_lot::RwLockReadGuard<'_, ()>> {
        self.barrier.read_recursive()
    }

    /// Held (exclusively) while a leg joins: no change is in flight.
    #[track_caller]
    pub fn exclusive(&self) -> Guard<parking_lot::RwLockWriteGuard<'_, ()>> {
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
