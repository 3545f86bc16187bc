//! `nonrot`: the seed patch exactly (Timofey Titovets, linux-btrfs, Dec 2017, "enhance
//! raid1/10 balance heuristic", v1; `../shared/seeds/000_*`):
//!
//! - if any leg is non-rotational, only non-rotational legs compete, and among them the one
//!   with the shortest queue wins; the queue is rounded up to a multiple of 2 ("try prevent
//!   switch for every sneeze"), the first leg in leg order wins ties (the patch's strict `<`);
//! - if every leg rotates, `pid % n`, as btrfs did before.
//!
//! The patch's queue is the block device's requests pending plus in flight; ours is
//! [`outstanding`]: our own in-flight reads and writes, or the device's count when that is
//! larger. Its known weaknesses, kept on purpose: a slow leg never serves while a fast one is
//! up (no spill-over), a rotational pair gets nothing better than `pid`, and the rotational
//! flag is trusted.

use super::{outstanding, readable, LegView, ReadPlan, ReadPolicy, ReadRequest};

pub struct Nonrot;

/// The patch's `ALIGN(sum, 2)`.
fn rounded(q: u32) -> u32 {
    q.div_ceil(2) * 2
}

impl ReadPolicy for Nonrot {
    fn name(&self) -> String {
        "nonrot".to_string()
    }

    fn pick(&self, candidates: &[LegView], req: &ReadRequest) -> ReadPlan {
        let c = readable(candidates);
        let mut best: Option<(&LegView, u32)> = None;
        for l in c.iter().filter(|l| !l.rotational) {
            let q = rounded(outstanding(l));
            if best.is_none_or(|(_, bq)| q < bq) {
                best = Some((l, q));
            }
        }
        match best {
            Some((l, _)) => ReadPlan::One(l.idx),
            None => ReadPlan::One(c[req.pid as usize % c.len()].idx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    #[test]
    fn the_seed_patch() {
        let ssd = |i, q| leg(i, q);
        let dev = |i, q, d| LegView {
            device_inflight: Some(d),
            ..leg(i, q)
        };
        let table: Vec<(Vec<LegView>, u32, usize)> = vec![
            // Hybrid: the SSD, however deep its queue.
            (vec![rot(0, 0), ssd(1, 40)], 0, 1),
            (vec![ssd(0, 40), rot(1, 0)], 1, 0),
            // Both SSD: least queue, rounded up to 2: 1 and 2 tie, the first wins.
            (vec![ssd(0, 2), ssd(1, 1)], 0, 0),
            (vec![ssd(0, 3), ssd(1, 2)], 0, 1),
            (vec![ssd(0, 0), ssd(1, 0)], 1, 0),
            (vec![ssd(0, 5), ssd(1, 6)], 1, 0),
            // The device's count when it is larger.
            (vec![dev(0, 0, 8), ssd(1, 3)], 0, 1),
            // All rotational: pid % n, whatever the queues.
            (vec![rot(0, 30), rot(1, 0)], 0, 0),
            (vec![rot(0, 30), rot(1, 0)], 7, 1),
            // Three legs, two SSDs.
            (vec![rot(0, 0), ssd(1, 4), ssd(2, 3)], 0, 1),
            (vec![rot(0, 0), ssd(1, 5), ssd(2, 3)], 0, 2),
        ];
        for (c, pid, want) in table {
            assert_eq!(
                Nonrot.pick(&c, &req(pid, 0, 32768)),
                ReadPlan::One(want),
                "{c:?}"
            );
        }
    }
}
