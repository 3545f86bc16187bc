//! Injected leg faults, for tests: md's "faulty" personality and dm-flakey serve the same
//! purpose. A rule makes one leg fail one kind of operation with a chosen errno, before the
//! operation reaches the leg. With no rule set, the cost is one relaxed atomic load.

use crate::errno::{Errno, Result};
use crate::leg::LegIdx;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Make `leg` fail operations named `op` (as the engine names them: "write", "read", "create",
/// "rename"...; "*" for all) with `errno`, `times` times (None: until cleared); only for the
/// file with inode number `file` when it is set (reads and writes of that file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultRule {
    pub leg: LegIdx,
    pub op: String,
    pub errno: Errno,
    pub times: Option<u32>,
    pub file: Option<u64>,
}

impl FaultRule {
    /// Parses `leg=LEG op=NAME errno=EIO|EROFS|ENOSPC|ENODEV|NUMBER [times=N]` (spaces or
    /// commas between fields), the form the `user.mirrorfs.fault` key takes. `find_leg` finds
    /// the leg `leg=` names, as every other command does ([`crate::leg::find`]: its name,
    /// `legN`, or its directory).
    pub fn parse(
        text: &str,
        find_leg: &dyn Fn(&str) -> Option<LegIdx>,
        file: Option<u64>,
    ) -> Option<FaultRule> {
        let mut rule = FaultRule {
            leg: usize::MAX,
            op: "*".into(),
            errno: Errno::EIO,
            times: None,
            file,
        };
        for field in text.split([' ', ',']).filter(|f| !f.is_empty()) {
            let (k, v) = field.split_once('=')?;
            match k {
                "leg" => rule.leg = find_leg(v)?,
                "op" => rule.op = v.to_string(),
                "errno" => {
                    rule.errno = match v {
                        "EIO" => Errno::EIO,
                        "EROFS" => Errno::EROFS,
                        "ENOSPC" => Errno::ENOSPC,
                        "ENODEV" => Errno::ENODEV,
                        "ENXIO" => Errno::ENXIO,
                        n => Errno(crate::value::count(n, 1, 4095).ok()? as i32),
                    }
                }
                "times" => {
                    rule.times = Some(crate::value::count(v, 1, u32::MAX.into()).ok()? as u32)
                }
                _ => return None,
            }
        }
        (rule.leg != usize::MAX).then_some(rule)
    }
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

    /// The rules in force (`user.mirrorfs.fault` reads them back).
    pub fn list(&self) -> Vec<FaultRule> {
        self.rules.lock().clone()
    }

    /// Whether any rule is in force (a relaxed look, for paths that leave the checking to
    /// another).
    pub fn any(&self) -> bool {
        self.any.load(Ordering::Acquire)
    }

    /// `Err(errno)` if a rule says `leg` must fail `op` now.
    pub fn check(&self, leg: LegIdx, op: &str) -> Result<()> {
        self.check_file(leg, op, None)
    }

    /// As [`check`](Self::check), for an operation on the file `file`: rules for that file
    /// apply as well as the general ones.
    pub fn check_file(&self, leg: LegIdx, op: &str, file: Option<u64>) -> Result<()> {
        if !self.any.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut rules = self.rules.lock();
        let Some(i) = rules.iter().position(|r| {
            r.leg == leg && (r.op == "*" || r.op == op) && (r.file.is_none() || r.file == file)
        }) else {
            return Ok(());
        };
        let errno = rules[i].errno;
        if let Some(t) = rules[i].times.as_mut() {
            *t -= 1;
            if *t == 0 {
                rules.remove(i);
                if rules.is_empty() {
                    self.any.store(false, Ordering::Release);
                }
            }
        }
        Err(errno)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn rules_match_leg_and_op_and_run_out() {
        let f = Faults::default();
        assert!(f.check(0, "write").is_ok());
        f.add(FaultRule {
            leg: 1,
            op: "write".into(),
            errno: Errno::EIO,
            times: Some(2),
            file: None,
        });
        assert!(f.check(0, "write").is_ok());
        assert!(f.check(1, "read").is_ok());
        assert_eq!(f.check(1, "write"), Err(Errno::EIO));
        assert_eq!(f.check(1, "write"), Err(Errno::EIO));
        assert!(f.check(1, "write").is_ok());
    }

    #[test]
    fn file_rules_hit_only_their_file_and_parse_from_text() {
        // The legs are found as every command finds them (leg::find): a name, legN, a
        // directory; a bare number is no leg.
        let dirs = [Path::new("/d/a"), Path::new("/d/b")];
        let legs = [("ssd", dirs[0]), ("hdd", dirs[1])];
        let find = |w: &str| crate::leg::find(std::ffi::OsStr::new(w), &legs);
        let r = FaultRule::parse("leg=hdd op=read errno=EIO times=1", &find, Some(7)).unwrap();
        assert_eq!(
            (r.leg, r.op.as_str(), r.times, r.file),
            (1, "read", Some(1), Some(7))
        );
        assert_eq!(
            FaultRule::parse("leg=leg1,errno=28", &find, None)
                .unwrap()
                .errno,
            Errno::ENOSPC
        );
        assert_eq!(FaultRule::parse("leg=/d/a", &find, None).unwrap().leg, 0);
        assert!(FaultRule::parse("leg=1", &find, None).is_none());
        assert!(FaultRule::parse("leg=leg2", &find, None).is_none());
        assert!(FaultRule::parse("leg=usb", &find, None).is_none());
        assert!(FaultRule::parse("leg=leg1 colour=red", &find, None).is_none());
        assert!(FaultRule::parse("op=read", &find, None).is_none());
        let f = Faults::default();
        f.add(r);
        assert!(f.check_file(1, "read", Some(8)).is_ok());
        assert!(f.check_file(1, "read", None).is_ok());
        assert_eq!(f.check_file(1, "read", Some(7)), Err(Errno::EIO));
        assert!(f.check_file(1, "read", Some(7)).is_ok());
    }
}
