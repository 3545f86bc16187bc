//! The commands written to `user.mirrorfs.leg` and `user.mirrorfs.scrub`, as bytes: parsing
//! (the daemon) and encoding (the `mirrorfs` command) live here, so both sides speak one
//! protocol.
//!
//! A value's fields are separated by NUL bytes when it holds one, so that a path may hold
//! spaces, newlines and bytes that are not UTF-8 (`mirrorfs leg` always writes this form);
//! otherwise by whitespace (`setfattr -n user.mirrorfs.leg -v 'fail leg1' MNT`). Empty fields
//! are ignored. A leg is named by its name, `legN`, or its directory ([`crate::leg::find`]);
//! the `mirrorfs` command sends directories as absolute paths.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

/// `user.mirrorfs.leg`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LegCommand {
    /// Drop a leg on purpose.
    Fail(OsString),
    /// Resync a member back in (`full`: compare the whole tree, not only what changed).
    Add { leg: OsString, full: bool },
    /// Forget a member that is out of the mirror.
    Remove(OsString),
    /// Put an empty directory in a member's place, and fill it.
    Replace { leg: OsString, new: PathBuf },
}

/// How a scrub repairs what differs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RepairFrom {
    /// Report only.
    Nothing,
    /// The version most legs hold (three legs or more).
    Majority,
    /// This leg's copy.
    Leg(OsString),
}

/// `user.mirrorfs.scrub`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScrubCommand {
    Start(RepairFrom),
    Cancel,
}

/// The fields of a value (see the module's documentation).
fn fields(value: &[u8]) -> Vec<&[u8]> {
    if value.contains(&0) {
        value.split(|&b| b == 0).filter(|f| !f.is_empty()).collect()
    } else {
        value
            .split(|b| b.is_ascii_whitespace())
            .filter(|f| !f.is_empty())
            .collect()
    }
}

fn os(field: &[u8]) -> OsString {
    OsStr::from_bytes(field).to_os_string()
}

/// The NUL-separated form of `fields`.
fn encode(fields: &[&OsStr]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in fields {
        out.extend_from_slice(f.as_bytes());
        out.push(0);
    }
    out
}

impl LegCommand {
    /// `fail LEG`, `add LEG [full]` (also `resync`), `remove LEG`, `replace LEG NEWDIR`;
    /// `None` for anything else.
    pub fn parse(value: &[u8]) -> Option<LegCommand> {
        Some(match fields(value).as_slice() {
            [b"fail", leg] => LegCommand::Fail(os(leg)),
            [b"add" | b"resync", leg] => LegCommand::Add {
                leg: os(leg),
                full: false,
            },
            [b"add" | b"resync", leg, b"full"] => LegCommand::Add {
                leg: os(leg),
                full: true,
            },
            [b"remove", leg] => LegCommand::Remove(os(leg)),
            [b"replace", leg, new] => LegCommand::Replace {
                leg: os(leg),
                new: PathBuf::from(os(new)),
            },
            _ => return None,
        })
    }

    /// The value that says this command, NUL-separated.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            LegCommand::Fail(leg) => encode(&[OsStr::new("fail"), leg]),
            LegCommand::Add { leg, full: false } => encode(&[OsStr::new("add"), leg]),
            LegCommand::Add { leg, full: true } => {
                encode(&[OsStr::new("add"), leg, OsStr::new("full")])
            }
            LegCommand::Remove(leg) => encode(&[OsStr::new("remove"), leg]),
            LegCommand::Replace { leg, new } => {
                encode(&[OsStr::new("replace"), leg, new.as_os_str()])
            }
        }
    }
}

impl ScrubCommand {
    /// `start`, `start repair` (or `repair=majority`), `start repair=LEG`, `cancel`.
    pub fn parse(value: &[u8]) -> Option<ScrubCommand> {
        Some(match fields(value).as_slice() {
            [b"start"] => ScrubCommand::Start(RepairFrom::Nothing),
            [b"start", b"repair" | b"repair=majority"] => ScrubCommand::Start(RepairFrom::Majority),
            [b"start", r] => {
                let leg = r.strip_prefix(b"repair=").filter(|l| !l.is_empty())?;
                ScrubCommand::Start(RepairFrom::Leg(os(leg)))
            }
            [b"cancel"] => ScrubCommand::Cancel,
            _ => return None,
        })
    }

    /// The value that says this command, NUL-separated.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            ScrubCommand::Start(RepairFrom::Nothing) => encode(&[OsStr::new("start")]),
            ScrubCommand::Start(RepairFrom::Majority) => {
                encode(&[OsStr::new("start"), OsStr::new("repair")])
            }
            ScrubCommand::Start(RepairFrom::Leg(leg)) => {
                let mut r = OsString::from("repair=");
                r.push(leg);
                encode(&[OsStr::new("start"), &r])
            }
            ScrubCommand::Cancel => encode(&[OsStr::new("cancel")]),
        }
    }
}

/// `OsString` from raw bytes (tests, the command line).
pub fn os_from_bytes(b: Vec<u8>) -> OsString {
    OsString::from_vec(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_nul_forms() {
        assert_eq!(
            LegCommand::parse(b"fail leg1"),
            Some(LegCommand::Fail("leg1".into()))
        );
        assert_eq!(
            LegCommand::parse(b"  add\tssd full\n"),
            Some(LegCommand::Add {
                leg: "ssd".into(),
                full: true
            })
        );
        let odd = os_from_bytes(b"/mnt/new disk/\n\xff".to_vec());
        let c = LegCommand::Replace {
            leg: "leg1".into(),
            new: PathBuf::from(&odd),
        };
        assert_eq!(LegCommand::parse(&c.encode()), Some(c));
        for c in [
            LegCommand::Fail("/a b".into()),
            LegCommand::Add {
                leg: "x".into(),
                full: false,
            },
            LegCommand::Remove("leg0".into()),
        ] {
            assert_eq!(LegCommand::parse(&c.encode()), Some(c));
        }
        for s in [
            ScrubCommand::Start(RepairFrom::Nothing),
            ScrubCommand::Start(RepairFrom::Majority),
            ScrubCommand::Start(RepairFrom::Leg("/p q".into())),
            ScrubCommand::Cancel,
        ] {
            assert_eq!(ScrubCommand::parse(&s.encode()), Some(s));
        }
    }

    #[test]
    fn anything_else_is_refused() {
        for bad in [
            &b""[..],
            b" ",
            b"fail",
            b"fail a b",
            b"add a partial",
            b"replace a",
            b"replace a b c",
            b"remove\0",
            b"\0\0",
            b"frobnicate leg0",
            b"FAIL leg0",
        ] {
            assert_eq!(LegCommand::parse(bad), None, "{bad:?}");
        }
        for bad in [
            &b""[..],
            b"start repair=",
            b"start again",
            b"start repair extra",
            b"stop",
        ] {
            assert_eq!(ScrubCommand::parse(bad), None, "{bad:?}");
        }
    }
}
