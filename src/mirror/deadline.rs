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

use crate::errno::{Errno, Result};
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
