//! `md`: md raid1's `read_balance()` / `choose_best_rdev()` (Linux 6.9+), on our leg views:
//!
//! 1. a read that starts where a leg's previous read ended (`last_read_end`, md's
//!    `next_seq_sect`) goes to that leg at once, the first such leg in leg order;
//! 2. else, if any candidate is non-rotational or some leg is idle, the leg with the fewest
//!    outstanding requests (the first in leg order on ties, as md's strict `<`);
//! 3. else (all rotational, all busy) the leg whose last read ended closest to this offset
//!    (md's `head_position`; a leg whose last read was in another file counts as far away).
//!
//! md lets a sequential read on an SSD move to an idle disk once the run reaches the device's
//! `io_opt`; `io_opt` is 0 on most devices and we do not know it, so, as md then does, a
//! sequential read never moves. The weaknesses are md's: a sequential stream that starts on
//! the slow leg of a hybrid pair stays there; random reads on equal legs lean towards the first
//! leg (ties); interleaved streams in one file break each other's detection.

use super::{outstanding, readable, LegView, ReadPlan, ReadPolicy, ReadRequest};

pub struct Md;

impl ReadPolicy for Md {
    fn name(&self) -> String {
        "md".to_string()
    }

    fn pick(&self, candidates: &[LegView], req: &ReadRequest) -> ReadPlan {
        let c = readable(candidates);
        let mut min_pending: Option<(usize, u32)> = None;
        let mut closest: Option<(usize, u64)> = None;
        for l in c.iter() {
            if l.last_read_end == Some((req.file, req.offset)) {
                return ReadPlan::One(l.idx);
            }
            let pending = outstanding(l);
            let dist = match l.last_read_end {
                Some((f, end)) if f == req.file => end.abs_diff(req.offset),
                _ => u64::MAX,
            };
            if min_pending.is_none_or(|(_, p)| pending < p) {
                min_pending = Some((l.idx, pending));
            }
            if closest.is_none_or(|(_, d)| dist < d) {
                closest = Some((l.idx, dist));
            }
        }
        let any_nonrot = c.iter().any(|l| !l.rotational);
        match (min_pending, closest) {
            (Some((l, p)), _) if any_nonrot || p == 0 => ReadPlan::One(l),
            (_, Some((l, _))) => ReadPlan::One(l),
            _ => ReadPlan::One(c[0].idx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    fn at(mut l: LegView, file: u64, end: u64) -> LegView {
        l.last_read_end = Some((file, end));
        l
    }

    #[test]
    fn read_balance_table() {
        let table: Vec<(Vec<LegView>, u64, usize)> = vec![
            // Sequential: stays, however busy.
            (vec![rot(0, 0), at(rot(1, 9), 7, 4096)], 4096, 1),
            (vec![leg(0, 0), at(leg(1, 9), 7, 4096)], 4096, 1),
            // Same end in another file is not sequential.
            (vec![rot(0, 2), at(rot(1, 1), 8, 4096)], 4096, 0),
            // Some leg idle: least pending.
            (vec![at(rot(0, 3), 7, 100), rot(1, 0)], 1 << 30, 1),
            // All rotational and busy: closest position.
            (
                vec![at(rot(0, 1), 7, 1 << 20), at(rot(1, 4), 7, 1 << 30)],
                1 << 30,
                1,
            ),
            (
                vec![at(rot(0, 1), 7, 1 << 20), at(rot(1, 4), 7, 1 << 30)],
                1 << 19,
                0,
            ),
            // Any non-rotational leg: least pending, first on ties.
            (vec![at(rot(0, 2), 7, 1 << 20), leg(1, 2)], 1 << 30, 0),
            (vec![at(rot(0, 3), 7, 1 << 30), leg(1, 2)], 1 << 20, 1),
            // Nobody placed in this file, all busy: the first.
            (vec![rot(0, 5), rot(1, 1)], 0, 0),
        ];
        for (c, offset, want) in table {
            assert_eq!(
                Md.pick(&c, &req(0, offset, 4096)),
                ReadPlan::One(want),
                "{c:?} @{offset}"
            );
        }
    }
}
