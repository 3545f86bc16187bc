//! `round-robin[:BYTES]`: rotate over the legs, staying on each for a run of BYTES read
//! (btrfs 6.14 `read_policy=round-robin[:BYTES]`, `btrfs_read_rr`; default 256 KiB,
//! `BTRFS_DEFAULT_RR_MIN_CONTIG_READ`).
//!
//! As in btrfs the counter is global to the mount (all files, all readers): the leg is
//! `(bytes read so far / BYTES) % legs`, the bytes counted before this read. So a run is
//! "BYTES of whatever anyone read", not one stream's contiguous run, and, as in btrfs, a read
//! of a multiple of 2 x BYTES keeps landing on the same leg of a pair (1 MiB reads at the
//! 256 KiB default on two legs all go to one leg). No load or speed input.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{readable, LegView, ReadPlan, ReadPolicy, ReadRequest};

/// btrfs's default run, 256 KiB.
pub const DEFAULT_RUN: u64 = 256 * 1024;

pub struct RoundRobin {
    /// `None`: the default run, and the name without a parameter.
    run: Option<u64>,
    bytes_read: AtomicU64,
}

impl RoundRobin {
    pub fn new(run: Option<u64>) -> RoundRobin {
        RoundRobin {
            run,
            bytes_read: AtomicU64::new(0),
        }
    }
}

/// The shortest run `round-robin:SIZE` takes (btrfs rounds to the sector size; we refuse what
/// does not make sense rather than round silently).
pub const MIN_RUN: u64 = 4096;
/// The longest run `round-robin:SIZE` takes.
pub const MAX_RUN: u64 = 1 << 30;

impl ReadPolicy for RoundRobin {
    fn name(&self) -> String {
        match self.run {
            None => "round-robin".to_string(),
            Some(n) => format!("round-robin:{}", crate::value::show_size_exact(n)),
        }
    }

    fn pick(&self, candidates: &[LegView], req: &ReadRequest) -> ReadPlan {
        let c = readable(candidates);
        let run = self.run.unwrap_or(DEFAULT_RUN);
        let before = self
            .bytes_read
            .fetch_add(u64::from(req.size), Ordering::Relaxed);
        ReadPlan::One(c[((before / run) % c.len() as u64) as usize].idx)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    fn legs_of(p: &RoundRobin, c: &[LegView], sizes: &[u32]) -> Vec<usize> {
        sizes
            .iter()
            .map(|&s| p.pick(c, &req(1, 0, s)).first_leg())
            .collect()
    }

    #[test]
    fn stays_for_a_run_then_moves() {
        let c = [leg(0, 0), leg(1, 0)];
        let p = RoundRobin::new(None);
        // 64 KiB reads: four on a leg (256 KiB), then the next leg.
        let got = legs_of(&p, &c, &[65536; 10]);
        assert_eq!(got, vec![0, 0, 0, 0, 1, 1, 1, 1, 0, 0]);
    }

    #[test]
    fn custom_run_and_three_legs() {
        let c = [leg(0, 0), leg(3, 0), leg(4, 0)];
        let p = RoundRobin::new(Some(8192));
        assert_eq!(p.name(), "round-robin:8K");
        let got = legs_of(&p, &c, &[4096; 8]);
        assert_eq!(got, vec![0, 0, 3, 3, 4, 4, 0, 0]);
    }

    #[test]
    fn btrfs_quirk_large_reads_land_on_one_leg_of_a_pair() {
        let c = [leg(0, 0), leg(1, 0)];
        let p = RoundRobin::new(None);
        assert_eq!(legs_of(&p, &c, &[1 << 20; 4]), vec![0, 0, 0, 0]);
    }

    #[test]
    fn run_lengths_take_the_size_syntax() {
        let legs = ["a".to_string()];
        for (spec, name) in [
            ("round-robin:262144", "round-robin:256K"),
            ("round-robin:1M", "round-robin:1M"),
            ("round-robin:4k", "round-robin:4K"),
            ("round-robin:1.5M", "round-robin:1.5M"),
            ("round-robin:64 KiB", "round-robin:64K"),
            ("round-robin:1234567", "round-robin:1234567B"),
        ] {
            assert_eq!(
                super::super::by_name_among(spec, &legs).unwrap().name(),
                name
            );
        }
        for bad in ["", "0", "4095", "-5", "2G", "1.5", "1e9", "inf"] {
            let spec = format!("round-robin:{bad}");
            assert!(
                super::super::by_name_among(&spec, &legs).is_none(),
                "{spec}"
            );
        }
    }
}
