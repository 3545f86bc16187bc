//! Running one operation on several legs at once.
//!
//! Each leg has its own small pool of worker threads fed by a `crossbeam-channel` queue. A
//! fan-out runs the operation for the first leg on the calling thread and hands the others to
//! their legs' workers, then waits for all of them: a write costs about the slowest leg, not
//! the sum of the legs.
//!
//! Handing a part to a worker is not free: waking it and waiting for it costs tens of
//! microseconds on a busy machine, more than a metadata operation on a local disk takes.
//! [`LegWorkers::run_costed`] learns what each kind of operation costs on each leg
//! ([`OpCosts`]) and runs the other legs' parts one after another on the calling thread when
//! they are all cheap; a slow leg (a disk seeking, a remote filesystem, an `fsync`) keeps its
//! own thread, so a slow operation still costs about the slowest leg, not the sum.
//!
//! The operation is borrowed, not `'static`: the caller's data (a write's buffer) is not copied.
//! This is sound because [`LegWorkers::run`] never returns before every job it sent has
//! finished (each job reports through a channel even if the operation panics).
//!
//! [`Mirror::fan_out`] puts it together for a change: the legs dropped meanwhile left out,
//! injected faults applied, the answers reconciled ([`reconcile`]), and the legs that failed
//! or disagreed dropped.

use super::op::Op;
use super::outcome::{reconcile, DropReason};
use super::Mirror;
use crate::errno::{Errno, Result};
use crate::leg::{InflightGuard, LegIdx};
use crossbeam_channel::{unbounded, Sender};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::Instant;

/// A part of an operation expected to take less than this (µs) on every leg but the first is
/// run on the calling thread, after the first's.
pub const INLINE_BELOW_US: u32 = 50;

/// What each kind of operation ([`Op`]: each its own estimate) has cost lately on each leg: a
/// moving average of its running times in microseconds (a new sample counts for a quarter; a
/// slower one at once for half).
pub struct OpCosts {
    legs: Vec<[AtomicU32; Op::ALL.len()]>,
}

impl OpCosts {
    pub fn new(n_legs: usize) -> OpCosts {
        OpCosts {
            legs: (0..n_legs)
                .map(|_| std::array::from_fn(|_| AtomicU32::new(0)))
                .collect(),
        }
    }

    /// The estimate for `op` on `leg`, in µs (0 until measured).
    pub fn get(&self, leg: LegIdx, op: Op) -> u32 {
        self.legs
            .get(leg)
            .map_or(0, |l| l[op as usize].load(Ordering::Relaxed))
    }

    /// One run of `op` on `leg` took `us`.
    pub fn record(&self, leg: LegIdx, op: Op, us: u32) {
        let Some(cell) = self.legs.get(leg).map(|l| &l[op as usize]) else {
            return;
        };
        let old = cell.load(Ordering::Relaxed);
        let new = if us > old {
            old / 2 + us / 2
        } else {
            old - old / 4 + us / 4
        };
        cell.store(new, Ordering::Relaxed);
    }

    /// Whether the parts of `op` on every leg of `legs` after the first are cheap enough to
    /// run on the calling thread.
    pub fn cheap(&self, legs: &[LegIdx], op: Op) -> bool {
        legs.iter()
            .skip(1)
            .all(|&l| self.get(l, op) < INLINE_BELOW_US)
    }
}

/// A job for a leg's worker.
pub type Job = Box<dyn FnOnce() + Send + 'static>;
type LegOp<'a, T> = dyn Fn(LegIdx) -> T + Sync + 'a;

/// Worker pools, one per leg.
pub struct LegWorkers {
    queues: Vec<Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl LegWorkers {
    /// Starts `threads_per_leg` workers for each of `n_legs` legs. A thread that cannot be
    /// started (a pids or memory limit) is an error, and the ones already started are stopped.
    pub fn new(n_legs: usize, threads_per_leg: usize) -> std::io::Result<LegWorkers> {
        let mut workers = LegWorkers {
            queues: Vec::new(),
            threads: Vec::new(),
        };
        for leg in 0..n_legs {
            let (tx, rx) = unbounded::<Job>();
            workers.queues.push(tx);
            for t in 0..threads_per_leg.max(1) {
                let rx = rx.clone();
                let h = std::thread::Builder::new()
                    .name(format!("leg{leg}-io{t}"))
                    .spawn(move || {
                        while let Ok(job) = rx.recv() {
                            job();
                        }
                    })?;
                workers.threads.push(h);
            }
        }
        Ok(workers)
    }

    /// Hands `job` to one of `leg`'s workers; gives it back if there is none.
    pub fn submit(&self, leg: LegIdx, job: Job) -> std::result::Result<(), Job> {
        match self.queues.get(leg) {
            Some(q) => q.send(job).map_err(|e| e.0),
            None => Err(job),
        }
    }

    /// Runs `op(leg)` for every leg in `legs` in parallel and returns `(leg, result)` in the
    /// order of `legs`.
    #[allow(unsafe_code)]
    pub fn run<T, F>(&self, legs: &[LegIdx], op: F) -> Vec<(LegIdx, T)>
    where
        T: Send + 'static,
        F: Fn(LegIdx) -> T + Sync,
    {
        let Some((&first, rest)) = legs.split_first() else {
            return Vec::new();
        };
        if rest.is_empty() {
            return vec![(first, op(first))];
        }
        let op_ref: &LegOp<'_, T> = &op;
        // SAFETY: only the lifetime is erased. Every job holding this reference is waited for
        // below (the loop receives exactly one message per job sent, and a job always sends,
        // panics included) before `op` goes out of scope.
        let op_static: &'static LegOp<'static, T> = unsafe { std::mem::transmute(op_ref) };
        let (done_tx, done_rx) = unbounded();
        let mut sent = 0;
        let mut inline = Vec::new();
        for &leg in rest {
            let tx = done_tx.clone();
            let job: Job = Box::new(move || {
                let r = catch_unwind(AssertUnwindSafe(|| op_static(leg)));
                let _ = tx.send((leg, r));
            });
            match self.queues.get(leg).map(|q| q.send(job)) {
                Some(Ok(())) => sent += 1,
                // No worker (cannot happen once started): run it here instead.
                _ => inline.push(leg),
            }
        }
        let mut results: Vec<(LegIdx, std::thread::Result<T>)> = Vec::with_capacity(legs.len());
        results.push((first, catch_unwind(AssertUnwindSafe(|| op(first)))));
        for leg in inline {
            results.push((leg, catch_unwind(AssertUnwindSafe(|| op(leg)))));
        }
        for _ in 0..sent {
            results.push(done_rx.recv().expect("a job always reports"));
        }
        let mut out = Vec::with_capacity(legs.len());
        for &leg in legs {
            let i = results
                .iter()
                .position(|(l, _)| *l == leg)
                .expect("one result per leg");
            let (_, r) = results.swap_remove(i);
            match r {
                Ok(v) => out.push((leg, v)),
                Err(panic) => resume_unwind(panic),
            }
        }
        out
    }
}

impl LegWorkers {
    /// As [`run`](Self::run) for an operation of the kind `kind`: each part is timed into
    /// `costs`, and when the parts of the legs after the first are all cheap
    /// ([`OpCosts::cheap`]) they run on this thread, one after another, instead of on their
    /// workers. Every part runs either way; a panic is raised once all have.
    pub fn run_costed<T, F>(
        &self,
        costs: &OpCosts,
        kind: Op,
        legs: &[LegIdx],
        op: F,
    ) -> Vec<(LegIdx, T)>
    where
        T: Send + 'static,
        F: Fn(LegIdx) -> T + Sync,
    {
        let timed = |leg: LegIdx| {
            let t = Instant::now();
            let r = op(leg);
            let us = u32::try_from(t.elapsed().as_micros()).unwrap_or(u32::MAX);
            costs.record(leg, kind, us);
            r
        };
        if legs.len() < 2 || !costs.cheap(legs, kind) {
            return self.run(legs, timed);
        }
        let results: Vec<(LegIdx, std::thread::Result<T>)> = legs
            .iter()
            .map(|&l| (l, catch_unwind(AssertUnwindSafe(|| timed(l)))))
            .collect();
        results
            .into_iter()
            .map(|(l, r)| match r {
                Ok(v) => (l, v),
                Err(panic) => resume_unwind(panic),
            })
            .collect()
    }
}

impl Drop for LegWorkers {
    fn drop(&mut self) {
        self.queues.clear();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Mirror {
    /// Runs `op` on every leg in `legs` in parallel, reconciles the answers, drops legs that
    /// failed or disagreed, and returns the successful legs' values (or the caller's error).
    pub fn fan_out<T, F>(&self, legs: &[LegIdx], kind: Op, op: F) -> Result<Vec<(LegIdx, T)>>
    where
        T: Send + 'static,
        F: Fn(LegIdx) -> Result<T> + Sync,
    {
        self.fan_out_file(legs, kind, None, op)
    }

    /// As [`fan_out`](Self::fan_out), for an operation on one file (inode number `file`), so
    /// that faults injected for that file apply.
    pub fn fan_out_file<T, F>(
        &self,
        legs: &[LegIdx],
        kind: Op,
        file: Option<u64>,
        op: F,
    ) -> Result<Vec<(LegIdx, T)>>
    where
        T: Send + 'static,
        F: Fn(LegIdx) -> Result<T> + Sync,
    {
        let kept = self.not_failed(legs)?;
        let what = kind.name();
        let results = self.workers.run_costed(&self.op_costs, kind, &kept, |leg| {
            let _inflight = InflightGuard::new(&self.legs[leg]);
            self.faults.check_file(leg, what, file)?;
            op(leg)
        });
        self.settle(what, results)
    }

    /// Reconciles the legs' answers to `what`, drops the legs that failed or disagreed (a
    /// leg fault counts as a write error), and returns the successful legs' values (or the
    /// caller's error).
    pub(super) fn settle<T>(
        &self,
        what: &str,
        results: Vec<(LegIdx, Result<T>)>,
    ) -> Result<Vec<(LegIdx, T)>> {
        let out = reconcile(results);
        self.internal_faults(what, &out.internal);
        for (leg, why) in out.drop {
            if matches!(why, DropReason::LegFault(_)) {
                self.legs[leg]
                    .counters
                    .write_errors
                    .fetch_add(1, Ordering::Relaxed);
            }
            self.mark_failed(leg, what, why);
        }
        out.answer
    }

    /// Says that `legs`' parts of `what` met a fault of mirrorfs itself ([`Errno::INTERNAL`]):
    /// an error in the log, and the legs kept, since their disks did nothing wrong. Their copy
    /// of what `what` changed may differ from the others' until a scrub finds it.
    pub fn internal_faults(&self, what: &str, legs: &[LegIdx]) {
        for &leg in legs {
            log::error!(
                "leg {leg} ('{}'): {what}: internal error of mirrorfs (state it should hold is \
                 missing); the leg is kept, and a scrub finds any copy this left different",
                self.legs[leg].path().display()
            );
        }
    }

    /// Of `legs`, those not dropped since the caller chose them (its intent record failed,
    /// say): they get no part of the change. EIO if none is left.
    pub(super) fn not_failed(&self, legs: &[LegIdx]) -> Result<Vec<LegIdx>> {
        let kept: Vec<LegIdx> = legs
            .iter()
            .copied()
            .filter(|&l| self.legs[l].state() != crate::leg::LegState::Failed)
            .collect();
        if kept.is_empty() && !legs.is_empty() {
            return Err(Errno::EIO);
        }
        Ok(kept)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fault::FaultRule;
    use super::super::test_mirror;
    use super::*;
    use crate::leg::LegState;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Condvar, Mutex};
    use std::time::{Duration, Instant};

    #[test]
    fn runs_every_leg_once_in_order() {
        let w = LegWorkers::new(3, 2).unwrap();
        let count = AtomicUsize::new(0);
        let out = w.run(&[2, 0, 1], |leg| {
            count.fetch_add(1, Ordering::SeqCst);
            leg * 10
        });
        assert_eq!(out, vec![(2, 20), (0, 0), (1, 10)]);
        assert_eq!(count.load(Ordering::SeqCst), 3);
    }

    /// Each job says it has started, then waits until all three have: that can only happen if
    /// the three run at the same time (run one after the other, the first would wait for the
    /// others in vain). Shown by overlap, not by elapsed time, so a busy machine cannot break
    /// it; the deadline only ends a failing run, a passing one never comes near it.
    #[test]
    fn legs_run_in_parallel() {
        let w = LegWorkers::new(3, 1).unwrap();
        let started = Mutex::new(0usize);
        let all_started = Condvar::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        let out = w.run(&[0, 1, 2], |_| {
            let mut n = started.lock().unwrap();
            *n += 1;
            all_started.notify_all();
            while *n < 3 {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                n = all_started.wait_timeout(n, left).unwrap().0;
            }
            // How many jobs had started when this one went on.
            *n
        });
        assert_eq!(
            out,
            vec![(0, 3), (1, 3), (2, 3)],
            "a job went on before the three had started: they did not run at once"
        );
    }

    #[test]
    fn costs_learn_what_is_slow_and_forget_it() {
        let c = OpCosts::new(2);
        let (fsync, mkdir) = (Op::Fsync, Op::Mkdir);
        assert!(c.cheap(&[0, 1], fsync), "unmeasured: cheap");
        c.record(1, fsync, 8_000);
        assert!(!c.cheap(&[0, 1], fsync), "one slow fsync on leg1 is enough");
        assert!(
            c.cheap(&[1, 0], fsync),
            "the first leg's part always runs here"
        );
        assert!(
            c.cheap(&[0, 1], mkdir),
            "another kind keeps its own estimate"
        );
        // The kinds a hash of their names once put together: each its own now.
        for (fast, slow) in [
            (Op::Write, Op::Setattr),
            (Op::Open, Op::Link),
            (Op::Create, Op::CopyFileRange),
        ] {
            for _ in 0..40 {
                c.record(1, fast, 5);
            }
            c.record(1, slow, 20_000);
            assert!(c.cheap(&[0, 1], fast), "{fast:?}");
            assert!(!c.cheap(&[0, 1], slow), "{slow:?} after {fast:?}");
        }
        for _ in 0..40 {
            c.record(1, fsync, 10);
        }
        assert!(
            c.cheap(&[0, 1], fsync),
            "{} after 40 quick runs",
            c.get(1, fsync)
        );
    }

    /// Cheap parts run on the calling thread, in order; an expensive one on the workers (its
    /// part overlaps the first leg's, which can only happen on two threads).
    #[test]
    fn cheap_parts_run_here_and_slow_ones_on_the_workers() {
        let w = LegWorkers::new(2, 1).unwrap();
        let c = OpCosts::new(2);
        let slot = Op::Setattr;
        let here = std::thread::current().id();
        let out = w.run_costed(&c, slot, &[0, 1], |_| std::thread::current().id() == here);
        assert_eq!(out, vec![(0, true), (1, true)]);
        c.record(1, slot, 10 * INLINE_BELOW_US);
        let out = w.run_costed(&c, slot, &[0, 1], |_| std::thread::current().id() == here);
        assert_eq!(out, vec![(0, true), (1, false)]);
        let r = catch_unwind(AssertUnwindSafe(|| {
            let c = OpCosts::new(2);
            w.run_costed(&c, slot, &[0, 1], |leg| {
                if leg == 0 {
                    panic!("boom")
                }
            })
        }));
        assert!(r.is_err());
    }

    /// The case, through the fan-out: a slow truncate (a setattr) on leg 1, then a
    /// run of fast writes there. The truncate's part must still go to leg 1's worker: while
    /// the two kinds shared a hashed slot, the writes made it look cheap and it ran inline,
    /// after leg 0's part instead of beside it.
    #[test]
    fn a_run_of_fast_writes_never_sends_a_slow_truncate_inline() {
        let w = LegWorkers::new(2, 1).unwrap();
        let c = OpCosts::new(2);
        let here = std::thread::current().id();
        let inline = |kind| {
            let out = w.run_costed(&c, kind, &[0, 1], |_| std::thread::current().id() == here);
            out[1].1
        };
        c.record(1, Op::Setattr, 20_000);
        for _ in 0..100 {
            c.record(1, Op::Write, 5);
        }
        assert!(inline(Op::Write), "fast writes run inline");
        assert!(!inline(Op::Setattr), "the slow truncate keeps its worker");
        // The same for the other kinds a hash of their names once put together.
        for (fast, slow) in [(Op::Open, Op::Link), (Op::Create, Op::CopyFileRange)] {
            c.record(1, slow, 20_000);
            for _ in 0..100 {
                c.record(1, fast, 5);
            }
            assert!(!c.cheap(&[0, 1], slow), "{slow:?} after a run of {fast:?}");
        }
    }

    #[test]
    fn borrowed_data_is_safe_and_panics_propagate() {
        let w = LegWorkers::new(2, 1).unwrap();
        let data = vec![1u8; 1000];
        let out = w.run(&[0, 1], |_| data.iter().map(|&b| b as usize).sum::<usize>());
        assert_eq!(out, vec![(0, 1000), (1, 1000)]);
        let r = catch_unwind(AssertUnwindSafe(|| {
            w.run(&[0, 1], |leg| {
                if leg == 1 {
                    panic!("boom")
                }
            })
        }));
        assert!(r.is_err());
        // The pool still works after a panic.
        assert_eq!(w.run(&[0, 1], |l| l), vec![(0, 0), (1, 1)]);
    }

    fn write_errors(m: &Mirror, leg: LegIdx) -> u64 {
        m.leg(leg).counters.write_errors.load(Ordering::Relaxed)
    }

    #[test]
    fn a_fan_out_drops_the_leg_that_failed_and_answers_with_the_others() {
        let (_d, m) = test_mirror::plain(3);
        let r = m.fan_out(&[0, 1, 2], Op::Mkdir, |leg| match leg {
            1 => Err(Errno::EIO),
            _ => Ok(leg),
        });
        assert_eq!(r, Ok(vec![(0, 0), (2, 2)]));
        assert_eq!(m.leg(1).state(), LegState::Failed);
        assert_eq!(write_errors(&m, 1), 1);
        assert_eq!(m.in_sync_legs(), vec![0, 2]);
        // The dropped leg gets no part of the next change, even when the caller names it.
        let ran = Mutex::new(Vec::new());
        let r = m.fan_out(&[0, 1, 2], Op::Mkdir, |leg| {
            ran.lock().unwrap().push(leg);
            Ok(())
        });
        assert_eq!(r, Ok(vec![(0, ()), (2, ())]));
        let mut ran = ran.into_inner().unwrap();
        ran.sort_unstable();
        assert_eq!(ran, vec![0, 2]);
    }

    #[test]
    fn a_callers_error_everywhere_is_the_answer_and_a_leg_that_disagrees_goes() {
        let (_d, m) = test_mirror::plain(2);
        let r = m.fan_out(&[0, 1], Op::Unlink, |_| Err::<(), _>(Errno::ENOENT));
        assert_eq!(r, Err(Errno::ENOENT));
        assert_eq!(m.in_sync_legs(), vec![0, 1]);
        let r = m.fan_out(&[0, 1], Op::Unlink, |leg| match leg {
            1 => Err(Errno::ENOENT),
            _ => Ok(()),
        });
        assert_eq!(r, Ok(vec![(0, ())]));
        assert_eq!(m.leg(1).state(), LegState::Failed);
        assert_eq!(
            write_errors(&m, 1),
            0,
            "it disagreed: no write error of its disk"
        );
        // Only dropped legs named: EIO, and nothing runs.
        let r = m.fan_out(&[1], Op::Unlink, |_| -> Result<()> {
            panic!("ran on a dropped leg")
        });
        assert_eq!(r, Err(Errno::EIO));
    }

    #[test]
    fn an_internal_fault_keeps_the_leg() {
        let (_d, m) = test_mirror::plain(2);
        let r = m.fan_out(&[0, 1], Op::Setattr, |leg| match leg {
            1 => Err(Errno::INTERNAL),
            _ => Ok(leg),
        });
        assert_eq!(r, Ok(vec![(0, 0)]));
        assert_eq!(m.in_sync_legs(), vec![0, 1]);
        assert_eq!(write_errors(&m, 1), 0);
    }

    #[test]
    fn a_fault_injected_for_one_file_hits_only_that_file() {
        let (_d, m) = test_mirror::plain(2);
        m.inject_fault(FaultRule {
            leg: 1,
            op: "write".into(),
            errno: Errno::EIO,
            times: None,
            file: Some(7),
        });
        let r = m.fan_out_file(&[0, 1], Op::Write, Some(8), Ok);
        assert_eq!(r, Ok(vec![(0, 0), (1, 1)]));
        let r = m.fan_out_file(&[0, 1], Op::Fsync, Some(7), Ok);
        assert_eq!(r, Ok(vec![(0, 0), (1, 1)]), "another kind of operation");
        let r = m.fan_out_file(&[0, 1], Op::Write, Some(7), Ok);
        assert_eq!(r, Ok(vec![(0, 0)]));
        assert_eq!(m.leg(1).state(), LegState::Failed);
        assert_eq!(write_errors(&m, 1), 1);
    }
}
