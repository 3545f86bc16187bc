//! Leg operations with a deadline (`leg_timeout=`).
//!
//! A leg that hangs (a remote filesystem whose server is gone, a disk that stopped answering)
//! never returns from the syscall: no signal ends it, and the thread in it is lost until the
//! leg answers. So an operation that must not wait for ever runs on its leg's worker, owning
//! everything it touches (its descriptor, its buffer), and its caller waits for it only until
//! the deadline. A part still running then is *abandoned*: the caller goes on without it (the
//! leg is dropped from the mirror), and the part finishes whenever the leg answers, touching
//! nothing but what it owns. The leg counts its abandoned parts (`Leg::abandoned`); it may not
//! be resynced while any is still to finish, since a write landing after the resync copied
//! its range would make the leg differ without anyone knowing.

use super::op::Op;
use super::outcome::DropReason;
use super::Mirror;
use crate::errno::{Errno, Result};
use crate::leg::{InflightGuard, LegIdx};
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError};
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A leg operation that owns what it needs.
pub type OwnedOp<T> = Box<dyn FnOnce() -> Result<T> + Send + 'static>;

const RUNNING: u8 = 0;
const DONE: u8 = 1;
const ABANDONED: u8 = 2;

/// One part handed to a leg's worker.
pub struct Pending<T> {
    rx: Receiver<Result<T>>,
    state: Arc<AtomicU8>,
    abandoned: Arc<AtomicU32>,
}

/// Wraps `op` into a job for a leg's worker, and what its caller waits on. `abandoned` is the
/// leg's count of parts given up on.
pub fn prepare<T: Send + 'static>(
    op: OwnedOp<T>,
    abandoned: Arc<AtomicU32>,
) -> (Box<dyn FnOnce() + Send + 'static>, Pending<T>) {
    let (tx, rx) = bounded(1);
    let state = Arc::new(AtomicU8::new(RUNNING));
    let (job_state, job_abandoned) = (state.clone(), abandoned.clone());
    let job = Box::new(move || {
        let r =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(op)).unwrap_or(Err(Errno::EIO));
        let done = job_state
            .compare_exchange(RUNNING, DONE, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        match done {
            true => {
                let _ = tx.send(r);
            }
            false => {
                job_abandoned.fetch_sub(1, Ordering::AcqRel);
            }
        }
    });
    (
        job,
        Pending {
            rx,
            state,
            abandoned,
        },
    )
}

impl<T> Pending<T> {
    /// The part's result, waiting at most until `deadline` (for ever if None). None: not
    /// done by then, and given up on (counted in the leg's abandoned parts until it ends).
    pub fn wait(self, deadline: Option<Instant>) -> Option<Result<T>> {
        let Some(deadline) = deadline else {
            return Some(self.rx.recv().unwrap_or(Err(Errno::EIO)));
        };
        let left = deadline.saturating_duration_since(Instant::now());
        match self.rx.recv_timeout(left) {
            Ok(r) => return Some(r),
            Err(RecvTimeoutError::Disconnected) => return Some(Err(Errno::EIO)),
            Err(RecvTimeoutError::Timeout) => {}
        }
        self.abandoned.fetch_add(1, Ordering::AcqRel);
        match self
            .state
            .compare_exchange(RUNNING, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => None,
            // It finished just now after all.
            Err(_) => {
                self.abandoned.fetch_sub(1, Ordering::AcqRel);
                Some(self.rx.recv().unwrap_or(Err(Errno::EIO)))
            }
        }
    }
}

/// The deadline of an operation starting now under `timeout` (None: no deadline).
pub fn deadline(timeout: Option<Duration>) -> Option<Instant> {
    timeout.map(|t| Instant::now() + t)
}

impl Mirror {
    /// `leg_timeout=`: how long a leg may take to answer a read, a write, an fsync or a
    /// free-space query before it is dropped (None: for ever).
    pub fn leg_timeout(&self) -> Option<std::time::Duration> {
        match self.leg_timeout_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(std::time::Duration::from_millis(ms)),
        }
    }

    pub fn set_leg_timeout(&self, t: std::time::Duration) {
        let ms = u64::try_from(t.as_millis()).unwrap_or(u64::MAX);
        // A timeout below a millisecond is a millisecond (0 stays "none").
        let ms = if t.is_zero() { 0 } else { ms.max(1) };
        self.leg_timeout_ms.store(ms, Ordering::Relaxed);
    }

    /// Runs `op` on `leg` within `leg_timeout`: on its worker, waiting until the deadline
    /// (on this thread, as before, without one). A leg that has not answered by then is
    /// dropped (the last in-sync leg never is), and the caller gets ETIMEDOUT: a read is then
    /// asked of another leg. See the notes at the top of this file.
    pub fn timed<T: Send + 'static>(&self, leg: LegIdx, what: &str, op: OwnedOp<T>) -> Result<T> {
        let Some(timeout) = self.leg_timeout() else {
            return op();
        };
        let pending = self.hand_over(leg, op);
        match pending.wait(deadline(Some(timeout))) {
            Some(r) => r,
            None => {
                self.timed_out(leg, what, timeout);
                Err(Errno::ETIMEDOUT)
            }
        }
    }

    /// As [`fan_out_file`](Self::fan_out_file), within `leg_timeout` (see
    /// [`timed`](Self::timed)): `make(leg)` gives each leg's part, owning what it touches, on
    /// this thread. A leg whose part is not done by the deadline is dropped, and the change
    /// stands on the others.
    pub fn fan_out_owned<T, F>(
        &self,
        legs: &[LegIdx],
        kind: Op,
        file: Option<u64>,
        make: F,
    ) -> Result<Vec<(LegIdx, T)>>
    where
        T: Send + 'static,
        F: Fn(LegIdx) -> Result<OwnedOp<T>> + Sync,
    {
        let Some(timeout) = self.leg_timeout() else {
            return self.fan_out_file(legs, kind, file, |leg| make(leg)?());
        };
        let what = kind.name();
        let kept = self.not_failed(legs)?;
        let until = deadline(Some(timeout));
        let mut results: Vec<(LegIdx, Result<T>)> = Vec::with_capacity(kept.len());
        let mut pending = Vec::with_capacity(kept.len());
        for &leg in &kept {
            let guard = InflightGuard::new(&self.legs[leg]);
            match self
                .faults
                .check_file(leg, what, file)
                .and_then(|()| make(leg))
            {
                Err(e) => results.push((leg, Err(e))),
                Ok(op) => {
                    pending.push((leg, self.hand_over(leg, op), guard));
                }
            }
        }
        for (leg, p, _guard) in pending {
            let r = p.wait(until).unwrap_or_else(|| {
                self.timed_out(leg, what, timeout);
                Err(Errno::ETIMEDOUT)
            });
            results.push((leg, r));
        }
        results.sort_by_key(|(l, _)| kept.iter().position(|k| k == l));
        self.settle(what, results)
    }

    /// Hands `op` to one of `leg`'s workers (runs it here if there is none).
    pub(super) fn hand_over<T: Send + 'static>(&self, leg: LegIdx, op: OwnedOp<T>) -> Pending<T> {
        let (job, pending) = prepare(op, self.legs[leg].abandoned.clone());
        if let Err(job) = self.workers.submit(leg, job) {
            job();
        }
        pending
    }

    /// `leg` did not answer `what` within `timeout`: it is dropped (unless it is the last).
    fn timed_out(&self, leg: LegIdx, what: &str, timeout: std::time::Duration) {
        log::error!(
            "leg {leg} ('{}'): {what} not answered in {} s (leg_timeout)",
            self.legs[leg].path().display(),
            timeout.as_secs_f64()
        );
        self.legs[leg]
            .counters
            .timeouts
            .fetch_add(1, Ordering::Relaxed);
        self.mark_failed(leg, what, DropReason::LegFault(Errno::ETIMEDOUT));
    }
}

#[cfg(test)]
mod tests {
    use super::super::fault::FaultRule;
    use super::super::test_mirror;
    use super::*;
    use crate::leg::LegState;

    #[test]
    fn a_part_done_in_time_gives_its_result() {
        let n = Arc::new(AtomicU32::new(0));
        let (job, p) = prepare(Box::new(|| Ok(7)), n.clone());
        std::thread::spawn(job);
        let r = p.wait(deadline(Some(Duration::from_secs(60))));
        assert_eq!(r, Some(Ok(7)));
        assert_eq!(n.load(Ordering::Acquire), 0);
    }

    #[test]
    fn a_late_part_is_abandoned_and_counted_until_it_ends() {
        let n = Arc::new(AtomicU32::new(0));
        let (release_tx, release_rx) = bounded::<()>(1);
        let (job, p) = prepare(
            Box::new(move || {
                let _ = release_rx.recv();
                Ok(1)
            }),
            n.clone(),
        );
        let t = std::thread::spawn(job);
        let start = Instant::now();
        assert_eq!(p.wait(deadline(Some(Duration::from_millis(50)))), None);
        assert!(start.elapsed() < Duration::from_secs(30));
        assert_eq!(n.load(Ordering::Acquire), 1, "counted while it hangs");
        release_tx.send(()).unwrap();
        t.join().unwrap();
        assert_eq!(n.load(Ordering::Acquire), 0, "and no more once it ended");
    }

    /// Blocks the part it runs until its sender sends or goes.
    fn hanging(done: u32) -> (OwnedOp<u32>, crossbeam_channel::Sender<()>) {
        let (tx, rx) = bounded::<()>(1);
        let op: OwnedOp<u32> = Box::new(move || {
            let _ = rx.recv();
            Ok(done)
        });
        (op, tx)
    }

    /// Waits (a while at most) until `leg` has no abandoned part left.
    fn none_abandoned(m: &Mirror, leg: LegIdx) -> bool {
        let until = Instant::now() + Duration::from_secs(30);
        while m.leg(leg).abandoned.load(Ordering::Acquire) != 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        m.leg(leg).abandoned.load(Ordering::Acquire) == 0
    }

    #[test]
    fn a_leg_timeout_is_whole_milliseconds_and_zero_is_none() {
        let (_d, m) = test_mirror::plain(1);
        assert_eq!(m.leg_timeout(), None);
        m.set_leg_timeout(Duration::from_micros(300));
        assert_eq!(m.leg_timeout(), Some(Duration::from_millis(1)));
        m.set_leg_timeout(Duration::from_millis(2500));
        assert_eq!(m.leg_timeout(), Some(Duration::from_millis(2500)));
        m.set_leg_timeout(Duration::ZERO);
        assert_eq!(m.leg_timeout(), None);
    }

    #[test]
    fn a_timed_op_runs_here_without_a_timeout_and_on_the_legs_worker_with_one() {
        let (_d, m) = test_mirror::plain(2);
        let thread = || -> OwnedOp<Option<String>> {
            Box::new(|| Ok(std::thread::current().name().map(String::from)))
        };
        let here = std::thread::current().name().map(String::from);
        assert_eq!(m.timed(1, "test", thread()), Ok(here));
        m.set_leg_timeout(Duration::from_secs(60));
        assert_eq!(m.timed(1, "test", thread()), Ok(Some("leg1-io0".into())));
        let enoent: OwnedOp<()> = Box::new(|| Err(Errno::ENOENT));
        assert_eq!(m.timed(1, "test", enoent), Err(Errno::ENOENT));
        assert!(
            m.leg(1).is_in_sync(),
            "an answer in time, even an error, keeps the leg"
        );
    }

    #[test]
    fn a_leg_late_to_answer_is_dropped_but_never_the_last() {
        let (_d, m) = test_mirror::plain(2);
        m.set_leg_timeout(Duration::from_millis(200));
        let (op, release) = hanging(1);
        assert_eq!(m.timed(1, "flush", op), Err(Errno::ETIMEDOUT));
        assert_eq!(m.leg(1).state(), LegState::Failed);
        assert_eq!(m.leg(1).counters.timeouts.load(Ordering::Relaxed), 1);
        assert_eq!(
            m.leg(1).abandoned.load(Ordering::Acquire),
            1,
            "its part still runs"
        );
        release.send(()).unwrap();
        assert!(
            none_abandoned(&m, 1),
            "and is no longer counted once it ended"
        );
        // Leg 0 is the last in sync: late too, it is counted but kept.
        let (op, release) = hanging(0);
        assert_eq!(m.timed(0, "flush", op), Err(Errno::ETIMEDOUT));
        assert_eq!(m.leg(0).counters.timeouts.load(Ordering::Relaxed), 1);
        assert!(m.leg(0).is_in_sync());
        drop(release);
        assert!(none_abandoned(&m, 0));
    }

    #[test]
    fn an_owned_fan_out_stands_on_the_legs_that_answered_in_time() {
        let (_d, m) = test_mirror::plain(3);
        m.set_leg_timeout(Duration::from_millis(500));
        let (hold, held) = bounded::<()>(1);
        let r = m.fan_out_owned(&[0, 1, 2], Op::Write, None, |leg| {
            let held = held.clone();
            let op: OwnedOp<usize> = Box::new(move || {
                if leg == 2 {
                    let _ = held.recv();
                }
                Ok(leg * 10)
            });
            Ok(op)
        });
        assert_eq!(r, Ok(vec![(0, 0), (1, 10)]));
        assert_eq!(m.leg(2).state(), LegState::Failed);
        assert_eq!(m.leg(2).counters.timeouts.load(Ordering::Relaxed), 1);
        drop(hold);
        // An injected fault fails a leg's part before it is handed over: a write error.
        m.inject_fault(FaultRule {
            leg: 1,
            op: "write".into(),
            errno: Errno::EIO,
            times: Some(1),
            file: None,
        });
        let quick = |leg: LegIdx| -> Result<OwnedOp<usize>> { Ok(Box::new(move || Ok(leg))) };
        assert_eq!(
            m.fan_out_owned(&[0, 1], Op::Write, None, quick),
            Ok(vec![(0, 0)])
        );
        assert_eq!(m.leg(1).state(), LegState::Failed);
        assert_eq!(m.leg(1).counters.write_errors.load(Ordering::Relaxed), 1);
        // Nothing but dropped legs: EIO, and nothing runs.
        let never = |_: LegIdx| -> Result<OwnedOp<usize>> { panic!("a dropped leg's part") };
        assert_eq!(
            m.fan_out_owned(&[1, 2], Op::Write, None, never),
            Err(Errno::EIO)
        );
        assert!(none_abandoned(&m, 2));
    }
}
