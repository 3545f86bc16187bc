//! `latency`: the least expected completion time, `(outstanding + 1) x service time`, the
//! service time being the leg's time-decayed mean for reads of this size class (small or
//! large; for large reads size / measured bandwidth when known). From GlusterFS AFR
//! `read-hash-mode=5` and dm-multipath `historical-service-time`; unlike btrfs's latency
//! proposal it uses a decaying average, not one since boot. A leg not yet measured counts as
//! fast as the fastest measured one (so that it gets reads and thereby a measurement). Ties at
//! random. No stream stickiness: on a rotational pair a sequential stream may change leg often.

use super::{
    outstanding, pick_min_random, readable, service_estimates, LegView, ReadPlan, ReadPolicy,
    ReadRequest, TieBreak,
};

pub struct Latency {
    ties: TieBreak,
}

impl Latency {
    pub fn new() -> Latency {
        Latency {
            ties: TieBreak::default(),
        }
    }
}

impl Default for Latency {
    fn default() -> Latency {
        Latency::new()
    }
}

impl ReadPolicy for Latency {
    fn name(&self) -> String {
        "latency".to_string()
    }

    fn pick(&self, candidates: &[LegView], req: &ReadRequest) -> ReadPlan {
        let c = readable(candidates);
        let svc = service_estimates(&c, req.size);
        let ect: Vec<f64> = c
            .iter()
            .zip(&svc)
            .map(|(l, s)| f64::from(outstanding(l) + 1) * s)
            .collect();
        ReadPlan::One(c[pick_min_random(&ect, 0.0, &self.ties)].idx)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    fn timed(idx: usize, inflight: u32, small: u32) -> LegView {
        LegView {
            small_read_us: Some(small),
            ..leg(idx, inflight)
        }
    }

    #[test]
    fn least_expected_completion() {
        let p = Latency::new();
        let table: Vec<(Vec<LegView>, u32, usize)> = vec![
            // Fast leg with a queue still beats an idle slow one until (q+1) x 80 > 625.
            (vec![timed(0, 6, 80), timed(1, 0, 625)], 4096, 0),
            (vec![timed(0, 8, 80), timed(1, 0, 625)], 4096, 1),
            // Unmeasured legs are taken as fast as the best: they compete on queue.
            (vec![timed(0, 2, 500), leg(1, 1)], 4096, 1),
            // Large reads use bandwidth: leg 1 is 4x faster per byte.
            (
                vec![
                    LegView {
                        read_bandwidth: Some(100 << 20),
                        ..leg(0, 0)
                    },
                    LegView {
                        read_bandwidth: Some(400 << 20),
                        ..leg(1, 2)
                    },
                ],
                1 << 20,
                1,
            ),
        ];
        for (c, size, want) in table {
            assert_eq!(p.pick(&c, &req(0, 0, size)), ReadPlan::One(want), "{c:?}");
        }
    }
}
