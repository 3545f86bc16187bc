//! `/proc/self/mountinfo`, parsed once for everyone (the subcommands finding mirrorfs mounts,
//! the leg model finding the block device under a btrfs leg, the tests).
//!
//! A line: `ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER`.
//! Paths and the source have space, tab, newline and backslash written as octal escapes
//! (`\040`...), undone here.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

/// One mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    /// The device number of the mounted filesystem (`st_dev` of its files).
    pub major: u32,
    pub minor: u32,
    /// The directory of the filesystem that is mounted here.
    pub root: PathBuf,
    pub mount_point: PathBuf,
    /// Per-mount options (`rw,nosuid,...`).
    pub options: String,
    pub fstype: String,
    /// What was mounted (a device path, `tmpfs`, a FUSE fsname), unescaped.
    pub source: OsString,
    /// The filesystem's own options.
    pub super_options: String,
}

/// Undoes mountinfo's octal escapes (`\040` for a space); anything else is kept as it is.
pub fn unescape(s: &str) -> OsString {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b[i] == b'\\'
            && i + 4 <= b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c));
        if octal {
            let digit = |k: usize| u32::from(b[i + k] - b'0');
            if let Ok(v) = u8::try_from(digit(1) * 64 + digit(2) * 8 + digit(3)) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    OsString::from_vec(out)
}

/// Parses one line; `None` for a line that is not one.
pub fn parse_line(line: &str) -> Option<MountEntry> {
    let (left, right) = line.split_once(" - ")?;
    let l: Vec<&str> = left.split(' ').collect();
    let r: Vec<&str> = right.split(' ').collect();
    if l.len() < 6 || r.len() < 3 {
        return None;
    }
    let (major, minor) = l[2].split_once(':')?;
    Some(MountEntry {
        major: major.parse().ok()?,
        minor: minor.parse().ok()?,
        root: PathBuf::from(unescape(l[3])),
        mount_point: PathBuf::from(unescape(l[4])),
        options: l[5].to_string(),
        fstype: r[0].to_string(),
        source: unescape(r[1]),
        super_options: r[2].to_string(),
    })
}

/// Every line of `text` that parses.
pub fn parse(text: &str) -> Vec<MountEntry> {
    text.lines().filter_map(parse_line).collect()
}

/// The mounts this process sees now (none if `/proc` cannot be read).
pub fn read() -> Vec<MountEntry> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| parse(&t))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_escapes() {
        let line = r"36 35 0:42 / /mnt/my\040mirror rw,nosuid shared:1 - fuse.mirrorfs /a\040b:/c rw,user_id=0";
        let e = parse_line(line).unwrap();
        assert_eq!((e.major, e.minor), (0, 42));
        assert_eq!(e.mount_point, PathBuf::from("/mnt/my mirror"));
        assert_eq!(e.fstype, "fuse.mirrorfs");
        assert_eq!(e.source, OsString::from("/a b:/c"));
        assert_eq!(e.options, "rw,nosuid");
        assert_eq!(e.super_options, "rw,user_id=0");
        assert_eq!(unescape(r"/plain"), OsString::from("/plain"));
        assert_eq!(
            unescape(r"/x\0"),
            OsString::from(r"/x\0"),
            "too short to be an escape"
        );
        assert_eq!(unescape(r"/x\999"), OsString::from(r"/x\999"), "not octal");
        assert_eq!(unescape(r"\134"), OsString::from("\\"));
        assert!(parse_line("garbage").is_none());
        assert!(!read().is_empty(), "this process sees its own mounts");
    }
}
