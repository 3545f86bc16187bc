//! `first`: always the first in-sync leg in leg order (btrfs's `read_policy=devid` idea).

use super::{LegView, ReadPolicy, ReadRequest};
use crate::leg::LegIdx;

pub struct First;

impl ReadPolicy for First {
    fn name(&self) -> &'static str {
        "first"
    }

    fn pick(&self, candidates: &[LegView], _req: &ReadRequest) -> LegIdx {
        candidates[0].idx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_first_candidate() {
        let c = [LegView { idx: 1 }, LegView { idx: 2 }];
        let r = ReadRequest {
            pid: 7,
            offset: 0,
            size: 4096,
        };
        assert_eq!(First.pick(&c, &r), 1);
    }
}
