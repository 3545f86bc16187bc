//! `first`: always the first in-sync leg in leg order (btrfs's `read_policy=devid` idea), a
//! write-mostly leg only when no other leg can serve.

use super::{readable, LegView, ReadPlan, ReadPolicy, ReadRequest};

pub struct First;

impl ReadPolicy for First {
    fn name(&self) -> String {
        "first".to_string()
    }

    fn pick(&self, candidates: &[LegView], _req: &ReadRequest) -> ReadPlan {
        ReadPlan::One(readable(candidates)[0].idx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_first_candidate() {
        let c = [
            LegView {
                idx: 1,
                ..Default::default()
            },
            LegView {
                idx: 2,
                ..Default::default()
            },
        ];
        let r = ReadRequest {
            pid: 7,
            size: 4096,
            ..Default::default()
        };
        assert_eq!(First.pick(&c, &r), ReadPlan::One(1));
    }
}
