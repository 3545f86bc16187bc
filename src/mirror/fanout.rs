//! Running one operation on several legs at once.
//!
//! Each leg has its own small pool of worker threads fed by a `crossbeam-channel` queue. A
//! fan-out runs the operation for the first leg on the calling thread and hands the others to
//! their legs' workers, then waits for all of them: a write costs about the slowest leg, not
//! the sum of the legs.
//!
//! The operation is borrowed, not `'static`: the caller's data (a write's buffer) is not copied.
//! This is sound because [`LegWorkers::run`] never returns before every job it sent has
//! finished (each job reports through a channel even if the operation panics).

use crate::leg::LegIdx;
use crossbeam_channel::{unbounded, Sender};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::thread::JoinHandle;

type Job = Box<dyn FnOnce() + Send + 'static>;
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
