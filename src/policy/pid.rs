//! `pid`: the reader's pid modulo the number of legs (btrfs's default `read_policy=pid`,
//! `first + current->pid % num_stripes` in `find_live_mirror`). No load, speed or position
//! input: one thread always reads from the same leg, which is fine for many readers on equal
//! legs and bad for one reader (it uses one leg) or for legs of different speeds (a reader that
//! lands on the slow leg reads at its speed: seed 000, 53 against 417 MB/s).

use super::{readable, LegView, ReadPlan, ReadPolicy, ReadRequest};

pub struct Pid;

impl ReadPolicy for Pid {
    fn name(&self) -> String {
        "pid".to_string()
    }

    fn pick(&self, candidates: &[LegView], req: &ReadRequest) -> ReadPlan {
        let c = readable(candidates);
        ReadPlan::One(c[req.pid as usize % c.len()].idx)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    #[test]
    fn pid_modulo_candidates() {
        let two = [leg(0, 9), leg(1, 0)];
        let three = [leg(0, 0), leg(2, 0), leg(5, 0)];
        let table: &[(&[LegView], u32, usize)] = &[
            (&two, 0, 0),
            (&two, 1, 1),
            (&two, 4242, 0),
            (&two, 4243, 1),
            (&three, 3, 0),
            (&three, 4, 2),
            (&three, 5, 5),
        ];
        for (c, pid, want) in table {
            assert_eq!(
                Pid.pick(c, &req(*pid, 0, 4096)),
                ReadPlan::One(*want),
                "pid {pid}"
            );
        }
    }
}
