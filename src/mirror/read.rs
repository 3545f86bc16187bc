//! The blocking routed read: a read's pieces run on the legs its plan names, and the whole
//! read is asked again among the legs left when a leg fails a piece.

use super::outcome::{self, DropReason};
use super::reads::HandOver;
use super::Mirror;
use crate::errno::{Errno, Result};
use crate::leg::LegIdx;
use crate::policy::{ReadPiece, ReadPlan, ReadRequest};
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

/// One piece of a read as it was run: its leg, its offset and length, what the leg answered.
type PieceResult<T> = (LegIdx, u64, u32, Result<T>);

/// What the attempts at one read found so far: the legs not to ask again, and the pieces
/// that failed (for read-repair).
#[derive(Default)]
struct Attempts {
    tried: Vec<LegIdx>,
    failed: Vec<FailedRead>,
}

impl Attempts {
    /// The candidates not tried yet, in their order.
    fn left(&self, candidates: &[LegIdx]) -> Vec<LegIdx> {
        candidates
            .iter()
            .copied()
            .filter(|l| !self.tried.contains(l))
            .collect()
    }

    /// A piece failed on its leg: that leg is not asked again.
    fn failed(&mut self, f: FailedRead) {
        if !self.tried.contains(&f.leg) {
            self.tried.push(f.leg);
        }
        self.failed.push(f);
    }

    /// The error of a read no leg is left to ask.
    fn error(&self) -> Errno {
        // Every leg failed this read: the caller gets the error (EBADMSG if some copy
        // failed its checksums: the caller looks again, under the file's data lock); no
        // leg is dropped for it beyond what the error budget says.
        if self.failed.iter().any(|f| f.errno == Errno::EBADMSG) {
            return Errno::EBADMSG;
        }
        self.failed.first().map_or(Errno::EIO, |f| f.errno)
    }
}

/// The results of a split read's pieces, run leg by leg (`by_leg`: each leg's results in
/// the order of its pieces), back into the pieces' (offset) order.
fn in_offset_order<T>(
    pieces: &[ReadPiece],
    by_leg: Vec<(LegIdx, Vec<Result<T>>)>,
) -> Vec<PieceResult<T>> {
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

impl Mirror {
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
        let mut attempts = Attempts::default();
        loop {
            let left = attempts.left(candidates);
            let Some((plan, _inflight, hand_overs)) = self.route_read(&left, req) else {
                return Err(attempts.error());
            };
            on_plan(&plan);
            let results = self.run_plan(&plan, req, what, &hand_overs, &op);
            if let Some(data) = self.take_results(results, req, what, &mut attempts)? {
                return Ok(ReadOutcome {
                    data,
                    failed: attempts.failed,
                });
            }
        }
    }

    /// Runs the pieces of `plan` (each with its hand-over, in `hand_overs`): an unsplit read
    /// on this thread, a split one's pieces on their legs' workers. The results come back in
    /// offset order.
    fn run_plan<T, F>(
        &self,
        plan: &ReadPlan,
        req: &ReadRequest,
        what: &str,
        hand_overs: &[HandOver],
        op: &F,
    ) -> Vec<PieceResult<T>>
    where
        T: Send + 'static + ReadLen,
        F: Fn(LegIdx, u64, u32) -> Result<T> + Sync,
    {
        let timed = |i: usize, p: &ReadPiece| self.read_piece(req, what, &hand_overs[i], p, op);
        match plan {
            ReadPlan::One(leg) | ReadPlan::Spread(leg) => {
                let whole = ReadPiece {
                    leg: *leg,
                    offset: req.offset,
                    len: req.size,
                };
                vec![(*leg, req.offset, req.size, timed(0, &whole))]
            }
            ReadPlan::Split(pieces) => {
                // Each leg once (the pieces may alternate between legs), running its
                // pieces in order: every piece is read exactly once.
                let by_leg = self.workers.run(&plan.legs(), |leg| {
                    pieces
                        .iter()
                        .enumerate()
                        .filter(|(_, p)| p.leg == leg)
                        .map(|(i, p)| timed(i, p))
                        .collect::<Vec<_>>()
                });
                in_offset_order(pieces, by_leg)
            }
        }
    }

    /// Reads `piece` by `op`, unless an injected fault fails it first, and teaches its leg's
    /// read history what it cost (`h`: the piece's hand-over).
    fn read_piece<T, F>(
        &self,
        req: &ReadRequest,
        what: &str,
        h: &HandOver,
        piece: &ReadPiece,
        op: &F,
    ) -> Result<T>
    where
        T: ReadLen,
        F: Fn(LegIdx, u64, u32) -> Result<T>,
    {
        let leg = piece.leg;
        self.faults.check_file(leg, what, Some(req.file))?;
        let start = std::time::Instant::now();
        let r = op(leg, piece.offset, piece.len)?;
        let elapsed = start.elapsed().as_micros() as u64;
        self.reads[leg]
            .lock()
            .record(h, r.len() as u64, elapsed, self.now_us());
        Ok(r)
    }

    /// Goes through the pieces' results: the data, in offset order, when every piece was read;
    /// None when some piece failed on its leg (noted in `attempts`: the read is asked again
    /// elsewhere); a caller's error as is.
    fn take_results<T>(
        &self,
        results: Vec<PieceResult<T>>,
        req: &ReadRequest,
        what: &str,
        attempts: &mut Attempts,
    ) -> Result<Option<Vec<T>>> {
        let mut out = Vec::with_capacity(results.len());
        let mut retry = false;
        for (leg, offset, len, r) in results {
            let f = match r {
                Ok(v) => {
                    out.push(v);
                    continue;
                }
                Err(errno) => FailedRead {
                    leg,
                    offset,
                    len,
                    errno,
                },
            };
            match f.errno {
                // The copy read does not match its checksums: asked again elsewhere,
                // and repaired (and counted) by the caller once confirmed.
                Errno::EBADMSG => {}
                e if outcome::is_leg_fault(e) => self.count_read_fault(&f, req.file, what),
                e => return Err(e),
            }
            attempts.failed(f);
            retry = true;
        }
        Ok((!retry).then_some(out))
    }

    /// `f` failed on its leg with a leg fault: counted, against the leg's error budget too,
    /// and the leg dropped once past it ([`MAX_READ_ERRORS`]).
    fn count_read_fault(&self, f: &FailedRead, file: u64, what: &str) {
        let (leg, e) = (f.leg, f.errno);
        self.legs[leg]
            .counters
            .read_errors
            .fetch_add(1, Ordering::Relaxed);
        // Not the counter `stats_reset` zeroes: the budget is the leg's own.
        let errors = self.legs[leg].read_faults.fetch_add(1, Ordering::Relaxed) + 1;
        log::warn!(
            "leg {} ('{}'): {what} of {} bytes at {} of inode {} failed: {e}",
            leg,
            self.legs[leg].path().display(),
            f.len,
            f.offset,
            file
        );
        if errors > MAX_READ_ERRORS {
            self.mark_failed(leg, what, DropReason::LegFault(e));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fault::FaultRule;
    use super::super::plan::tests::{fix_plan, piece, read};
    use super::super::test_mirror;
    use super::*;
    use crate::leg::LegState;
    use std::sync::Mutex;

    /// What a test read returned: where it was read.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct Got(LegIdx, u64, u32);

    impl ReadLen for Got {
        fn len(&self) -> usize {
            self.2 as usize
        }
    }

    /// Reads `req` among legs 0 and 1 with `answer(leg)` (None: the data), and says which
    /// plans it ran.
    fn run(
        m: &Mirror,
        req: &ReadRequest,
        answer: impl Fn(LegIdx) -> Option<Errno> + Sync,
    ) -> (Result<ReadOutcome<Got>>, Vec<ReadPlan>) {
        let mut plans = Vec::new();
        let r = m.read_routed(
            &[0, 1],
            req,
            "read",
            |p| plans.push(p.clone()),
            |leg, offset, len| match answer(leg) {
                None => Ok(Got(leg, offset, len)),
                Some(e) => Err(e),
            },
        );
        (r, plans)
    }

    fn read_errors(m: &Mirror, leg: LegIdx) -> u64 {
        m.leg(leg).counters.read_errors.load(Ordering::Relaxed)
    }

    #[test]
    fn a_read_goes_where_the_policy_says() {
        let (_d, m) = test_mirror::plain(2);
        let req = read(4096, 8192);
        let (r, plans) = run(&m, &req, |_| None);
        let out = r.unwrap();
        assert_eq!(out.data, vec![Got(0, 4096, 8192)]);
        assert!(out.failed.is_empty());
        assert_eq!(plans, vec![ReadPlan::One(0)]);
        assert_eq!(m.leg(0).inflight.load(Ordering::Acquire), 0);
    }

    #[test]
    fn a_leg_fault_is_counted_and_the_read_asked_again_elsewhere() {
        let (_d, m) = test_mirror::plain(2);
        let req = read(0, 4096);
        let (r, plans) = run(&m, &req, |leg| (leg == 0).then_some(Errno::EIO));
        let out = r.unwrap();
        assert_eq!(out.data, vec![Got(1, 0, 4096)]);
        let failed = FailedRead {
            leg: 0,
            offset: 0,
            len: 4096,
            errno: Errno::EIO,
        };
        assert_eq!(out.failed, vec![failed]);
        assert_eq!(plans, vec![ReadPlan::One(0), ReadPlan::One(1)]);
        assert_eq!(read_errors(&m, 0), 1);
        assert_eq!(m.leg(0).read_faults.load(Ordering::Relaxed), 1);
        assert!(m.leg(0).is_in_sync(), "repaired, not dropped");
    }

    #[test]
    fn a_leg_past_its_error_budget_is_dropped() {
        let (_d, m) = test_mirror::plain(2);
        let req = read(0, 4096);
        m.leg(0)
            .read_faults
            .store(MAX_READ_ERRORS - 1, Ordering::Relaxed);
        let eio = |leg: LegIdx| (leg == 0).then_some(Errno::EIO);
        assert!(run(&m, &req, eio).0.is_ok());
        assert!(m.leg(0).is_in_sync(), "at its budget");
        assert!(run(&m, &req, eio).0.is_ok());
        assert_eq!(m.leg(0).state(), LegState::Failed, "past it");
    }

    #[test]
    fn a_checksum_mismatch_is_asked_elsewhere_and_wins_when_all_fail() {
        let (_d, m) = test_mirror::plain(2);
        let req = read(0, 4096);
        let (r, _) = run(&m, &req, |leg| (leg == 0).then_some(Errno::EBADMSG));
        let out = r.unwrap();
        assert_eq!(out.data, vec![Got(1, 0, 4096)]);
        assert_eq!(out.failed[0].errno, Errno::EBADMSG);
        assert_eq!(
            read_errors(&m, 0),
            0,
            "counted by the caller once confirmed"
        );
        let (r, plans) = run(&m, &req, |leg| Some([Errno::EIO, Errno::EBADMSG][leg]));
        assert_eq!(r.err(), Some(Errno::EBADMSG));
        assert_eq!(plans.len(), 2);
        // Else the first leg's error.
        let (r, _) = run(&m, &req, |leg| Some([Errno::EROFS, Errno::EIO][leg]));
        assert_eq!(r.err(), Some(Errno::EROFS));
        assert!(m.leg(0).is_in_sync() && m.leg(1).is_in_sync());
    }

    #[test]
    fn a_callers_error_is_returned_at_once() {
        let (_d, m) = test_mirror::plain(2);
        let (r, plans) = run(&m, &read(0, 4096), |_| Some(Errno::ENOENT));
        assert_eq!(r.err(), Some(Errno::ENOENT));
        assert_eq!(plans, vec![ReadPlan::One(0)], "not asked of leg 1");
        assert_eq!(read_errors(&m, 0), 0);
    }

    #[test]
    fn an_injected_fault_fails_the_piece_before_it_is_read() {
        let (_d, m) = test_mirror::plain(2);
        let req = read(0, 4096);
        m.inject_fault(FaultRule {
            leg: 0,
            op: "read".into(),
            errno: Errno::EIO,
            times: Some(1),
            file: Some(req.file),
        });
        let asked = Mutex::new(Vec::new());
        let (r, _) = run(&m, &req, |leg| {
            asked.lock().unwrap().push(leg);
            None
        });
        assert_eq!(r.unwrap().data, vec![Got(1, 0, 4096)]);
        assert_eq!(*asked.lock().unwrap(), vec![1]);
        assert_eq!(read_errors(&m, 0), 1);
    }

    #[test]
    fn a_split_read_reads_each_piece_once_and_answers_in_offset_order() {
        let (_d, m) = test_mirror::plain(2);
        let k = 64 << 10;
        let req = read(0, 3 * k as u32);
        let pieces = vec![
            piece(0, 0, k as u32),
            piece(1, k, k as u32),
            piece(0, 2 * k, k as u32),
        ];
        fix_plan(&m, ReadPlan::Split(pieces));
        let out = run(&m, &req, |_| None).0.unwrap();
        let want = vec![
            Got(0, 0, k as u32),
            Got(1, k, k as u32),
            Got(0, 2 * k, k as u32),
        ];
        assert_eq!(out.data, want);
        // A piece that fails: the whole read again among the legs left (the plan, naming
        // leg 1, is unusable there: the first candidate reads it all).
        let (r, plans) = run(&m, &req, |leg| (leg == 1).then_some(Errno::EIO));
        let out = r.unwrap();
        assert_eq!(out.data, vec![Got(0, 0, 3 * k as u32)]);
        assert_eq!(out.failed.len(), 1);
        assert_eq!((out.failed[0].leg, out.failed[0].offset), (1, k));
        assert_eq!(plans[1], ReadPlan::One(0));
        for l in [0, 1] {
            assert_eq!(m.leg(l).inflight.load(Ordering::Acquire), 0);
        }
    }

    #[test]
    fn attempts_leave_out_the_legs_that_failed() {
        let mut a = Attempts::default();
        assert_eq!(a.error(), Errno::EIO, "nothing failed: EIO");
        let f = |leg, errno| FailedRead {
            leg,
            offset: 0,
            len: 1,
            errno,
        };
        a.failed(f(2, Errno::EROFS));
        a.failed(f(2, Errno::EIO));
        assert_eq!(a.left(&[0, 1, 2, 3]), vec![0, 1, 3]);
        assert_eq!(a.tried, vec![2]);
        assert_eq!(a.error(), Errno::EROFS);
        a.failed(f(0, Errno::EBADMSG));
        assert_eq!(a.left(&[0, 1, 2, 3]), vec![1, 3]);
        assert_eq!(a.error(), Errno::EBADMSG);
    }

    #[test]
    fn split_results_come_back_in_offset_order() {
        let pieces = [piece(1, 0, 10), piece(0, 10, 10), piece(1, 20, 5)];
        let by_leg = vec![(1, vec![Ok('a'), Ok('c')]), (0, vec![Err(Errno::EIO)])];
        let got = in_offset_order(&pieces, by_leg);
        assert_eq!(
            got,
            vec![
                (1, 0, 10, Ok('a')),
                (0, 10, 10, Err(Errno::EIO)),
                (1, 20, 5, Ok('c')),
            ]
        );
    }
}
