//! `queue`: the leg with the fewest outstanding requests ([`outstanding`]: our own in flight,
//! or the device's count when larger), ties broken at random (GlusterFS AFR
//! `read-hash-mode=3`, md raid1's least-pending on SSDs, but without their lowest-index bias:
//! Paul Luse measured a 70/30 split on two equal NVMe drives from it). No speed, no position:
//! good for equal flash legs, bad for sequential streams on disks (every request may change leg).

use super::{
    outstanding, pick_min_random, readable, LegView, ReadPlan, ReadPolicy, ReadRequest, TieBreak,
};

pub struct Queue {
    ties: TieBreak,
}

impl Queue {
    pub fn new() -> Queue {
        Queue {
            ties: TieBreak::default(),
        }
    }
}

impl Default for Queue {
    fn default() -> Queue {
        Queue::new()
    }
}

impl ReadPolicy for Queue {
    fn name(&self) -> String {
        "queue".to_string()
    }

    fn pick(&self, candidates: &[LegView], _req: &ReadRequest) -> ReadPlan {
        let c = readable(candidates);
        let q: Vec<f64> = c.iter().map(|l| f64::from(outstanding(l))).collect();
        ReadPlan::One(c[pick_min_random(&q, 0.0, &self.ties)].idx)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    #[test]
    fn least_outstanding() {
        let p = Queue::new();
        let dev = LegView {
            device_inflight: Some(9),
            ..leg(0, 1)
        };
        let table: Vec<(Vec<LegView>, usize)> = vec![
            (vec![leg(0, 3), leg(1, 2)], 1),
            (vec![leg(0, 0), leg(1, 2), leg(2, 1)], 0),
            (vec![dev, leg(1, 4)], 1),
            (vec![rot(0, 1), leg(1, 2)], 0),
        ];
        for (c, want) in table {
            assert_eq!(p.pick(&c, &req(0, 0, 4096)), ReadPlan::One(want), "{c:?}");
        }
    }

    #[test]
    fn ties_are_shared_evenly() {
        let p = Queue::new();
        let c = [leg(0, 2), leg(1, 2), leg(2, 5)];
        let mut n = [0u32; 3];
        for _ in 0..2000 {
            n[p.pick(&c, &req(0, 0, 4096)).first_leg()] += 1;
        }
        assert_eq!(n[2], 0);
        assert!(n[0] > 900 && n[1] > 900, "{n:?}");
    }
}
