//! `devid:N` and `leg:NAME`: always one chosen leg while it can serve (btrfs 6.14
//! `read_policy=devid:N`, `btrfs_read_preferred`). N is the leg's index in the leg list, counted
//! from 0 (not a btrfs devid, which counts from 1); `leg:NAME` names the leg by its name
//! (`=name=LABEL` in the leg list, else its path). When the chosen leg is not a candidate
//! (failed, not in sync for this file, or write-mostly while another leg can serve), the first
//! candidate in leg order serves, as btrfs falls back to the first stripe.

use super::LegIdx;

use super::{readable, LegView, ReadPlan, ReadPolicy, ReadRequest};

pub struct Devid {
    idx: LegIdx,
    /// The leg's name when given as `leg:NAME` (for [`ReadPolicy::name`]).
    named: Option<String>,
}

impl Devid {
    pub fn index(idx: LegIdx) -> Devid {
        Devid { idx, named: None }
    }

    pub fn named(idx: LegIdx, name: &str) -> Devid {
        Devid {
            idx,
            named: Some(name.to_string()),
        }
    }
}

impl ReadPolicy for Devid {
    fn name(&self) -> String {
        match &self.named {
            Some(n) => format!("leg:{n}"),
            None => format!("devid:{}", self.idx),
        }
    }

    fn pick(&self, candidates: &[LegView], _req: &ReadRequest) -> ReadPlan {
        let c = readable(candidates);
        let l = c.iter().find(|l| l.idx == self.idx).unwrap_or(&c[0]);
        ReadPlan::One(l.idx)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    #[test]
    fn the_chosen_leg_or_the_first() {
        let c = [leg(0, 0), leg(2, 99)];
        let table = [(0, 0), (2, 2), (1, 0), (7, 0)];
        for (want_idx, got) in table {
            assert_eq!(
                Devid::index(want_idx).pick(&c, &req(3, 0, 4096)),
                ReadPlan::One(got)
            );
        }
        assert_eq!(
            Devid::named(2, "usb").pick(&c, &req(3, 0, 4096)),
            ReadPlan::One(2)
        );
        assert_eq!(Devid::named(2, "usb").name(), "leg:usb");
        assert_eq!(Devid::index(2).name(), "devid:2");
    }
}
