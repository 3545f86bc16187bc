//! Read policies: given a snapshot of the legs that may serve a read, pick one.
//!
//! A policy is a pure function of its inputs (no I/O, no clock), so that it can be tested with
//! tables and compared in a simulator. One policy per file; the registry below maps each
//! user-facing name to its constructor.

pub mod first;

use crate::leg::LegIdx;

/// What a policy may know of one candidate leg.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LegView {
    pub idx: LegIdx,
}

/// The read being routed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadRequest {
    pub pid: u32,
    pub offset: u64,
    pub size: u32,
}

/// A read policy.
pub trait ReadPolicy: Send + Sync {
    /// The name users give in `read_policy=`.
    fn name(&self) -> &'static str;
    /// Picks one of `candidates` (never empty; in leg order).
    fn pick(&self, candidates: &[LegView], req: &ReadRequest) -> LegIdx;
}

/// Every policy name `read_policy=` accepts.
pub const POLICY_NAMES: &[&str] = &["first"];

/// The policy called `name`, or `None` for an unknown name.
pub fn by_name(name: &str) -> Option<Box<dyn ReadPolicy>> {
    match name {
        "first" => Some(Box::new(first::First)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registered_name_resolves_to_itself() {
        for name in POLICY_NAMES {
            assert_eq!(by_name(name).unwrap().name(), *name);
        }
        assert!(by_name("fastest-please").is_none());
    }
}
