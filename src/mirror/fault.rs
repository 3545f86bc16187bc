//! Injected leg faults, for tests: md's "faulty" personality and dm-flakey serve the same
//! purpose. A rule makes one leg fail one kind of operation with a chosen errno, before the
//! operation reaches the leg. With no rule set, the cost is one relaxed atomic load.

use crate::errno::{Errno, Result};
use crate::leg::LegIdx;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Make `leg` fail operations named `op` (as the engine names them: "write", "read", "create",
/// "rename"...; "*" for all) with `errno`, `times` times (None: until cleared).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultRule {
    pub leg: LegIdx,
    pub op: String,
    pub errno: Errno,
    pub times: Option<u32>,
}

/// The rules in force.
#[derive(Default)]
pub struct Faults {
    any: AtomicBool,
    rules: Mutex<Vec<FaultRule>>,
}

impl Faults {
    pub fn add(&self, rule: FaultRule) {
        self.rules.lock().push(rule);
        self.any.store(true, Ordering::Release);
    }

    pub fn clear(&self) {
        self.rules.lock().clear();
        self.any.store(false, Ordering::Release);
    }

    /// `Err(errno)` if a rule says `leg` must fail `op` now.
    pub fn check(&self, leg: LegIdx, op: &str) -> Result<()> {
        if !self.any.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut rules = self.rules.lock();
        let Some(i) = rules
            .iter()
            .position(|r| r.leg == leg && (r.op == "*" || r.op == op))
        else {
            return Ok(());
        };
        let errno = rules[i].errno;
        if let Some(t) = rules[i].times.as_mut() {
            *t -= 1;
            if *t == 0 {
                rules.remove(i);
            }
        }
        Err(errno)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_match_leg_and_op_and_run_out() {
        let f = Faults::default();
        assert!(f.check(0, "write").is_ok());
        f.add(FaultRule {
            leg: 1,
            op: "write".into(),
            errno: Errno::EIO,
            times: Some(2),
        });
        assert!(f.check(0, "write").is_ok());
        assert!(f.check(1, "read").is_ok());
        assert_eq!(f.check(1, "write"), Err(Errno::EIO));
        assert_eq!(f.check(1, "write"), Err(Errno::EIO));
        assert!(f.check(1, "write").is_ok());
    }
}
