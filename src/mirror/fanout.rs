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

use super::op::Op;
use crate::leg::LegIdx;
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

#[cfg(test)]
mod tests {
    use super::*;
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
}
