//! The change log's format on disk: its records, and the files that hold them.
//!
//! Records are NUL-terminated paths (paths may hold newlines), relative to the leg root,
//! without a leading `/`; the root itself is `.`. A record starting with `/` is not a path: a
//! cover (`/c`, `/s`), an identity (`/i`), or the away logs' [`WHOLE_TREE`].

use crate::meta::META_DIR;
use crate::sys::fd::ROOT_REL;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// How far before a cover's writing its time `T` is put: covers the coarse clock that stamps
/// ctimes, which lags the clock a cover reads.
pub(super) const COVER_SLACK_SECS: u64 = 2;

/// [`COVER_SLACK_SECS`] as a duration: a test that needs entries older than a cover written
/// now waits this long (and a margin) instead of restating it.
pub const COVER_SLACK: std::time::Duration = std::time::Duration::from_secs(COVER_SLACK_SECS);

/// The cover record of the directory at `dir` (a relative path, `.` for the root), written at
/// `now_secs` (seconds since the epoch).
/// A subtree cover (`/s<T>/<dir>`, `subtree`) stands for the whole tree below `dir`.
pub(super) fn cover_record(dir: &[u8], now_secs: u64, subtree: bool) -> Vec<u8> {
    cover_record_at(dir, now_secs.saturating_sub(COVER_SLACK_SECS), subtree)
}

/// The cover record of `dir` with the time `t` itself (a cover moved by a rename keeps it).
pub(super) fn cover_record_at(dir: &[u8], t: u64, subtree: bool) -> Vec<u8> {
    let kind = if subtree { 's' } else { 'c' };
    let mut r = format!("/{kind}{t}/").into_bytes();
    r.extend_from_slice(dir);
    r
}

/// A cover record, read back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoverRecord<'a> {
    /// Changes at or after this time (seconds since the epoch) are covered.
    pub t: u64,
    /// The directory, relative to the leg root (`.` for the root).
    pub dir: &'a [u8],
    /// A subtree cover: every directory below `dir` is looked into, not only recent ones.
    pub subtree: bool,
}

/// A cover record's time, directory and kind, or `None` if `record` is not a cover.
pub fn parse_cover(record: &[u8]) -> Option<CoverRecord<'_>> {
    let (subtree, rest) = match record.strip_prefix(b"/c") {
        Some(rest) => (false, rest),
        None => (true, record.strip_prefix(b"/s")?),
    };
    let slash = rest.iter().position(|&b| b == b'/')?;
    let t = std::str::from_utf8(&rest[..slash]).ok()?.parse().ok()?;
    let dir = &rest[slash + 1..];
    (!dir.is_empty()).then_some(CoverRecord { t, dir, subtree })
}

/// The identity record of an object that is `ino` on the leg whose member id is `id`, for
/// each `(id, ino)` of `ids` (see [`crate::meta::changes`]): `/i<id>=<ino>,<id>=<ino>...`.
pub fn identity_record(ids: &[(String, u64)]) -> Vec<u8> {
    let pairs: Vec<String> = ids.iter().map(|(id, ino)| format!("{id}={ino}")).collect();
    format!("/i{}", pairs.join(",")).into_bytes()
}

/// An identity record, read back: the leg ids and the object's inode number on each; `None`
/// if `record` is not one.
pub fn parse_identity(record: &[u8]) -> Option<Vec<(&str, u64)>> {
    let rest = std::str::from_utf8(record.strip_prefix(b"/i")?).ok()?;
    let ids: Option<Vec<(&str, u64)>> = rest
        .split(',')
        .map(|p| {
            let (id, ino) = p.split_once('=')?;
            Some((id, ino.parse().ok()?))
        })
        .collect();
    ids.filter(|v| !v.is_empty() && v.iter().all(|(id, _)| !id.is_empty()))
}

/// The write-intent log's file name in `.mirrorfs/`.
pub const INTENT_LOG: &str = "intent.log";

/// The away-log record that stands for the whole tree (no path starts with `/`).
pub const WHOLE_TREE: &[u8] = b"/";

/// The file name of the away log of the leg `leg_id`.
pub fn away_log_name(leg_id: &str) -> String {
    format!("away-{leg_id}.log")
}

/// Reads a log of NUL-terminated paths; an absent log is empty. A torn last record (a crash
/// in the middle of an append) is kept: it names a path too, possibly cut short, and resyncing
/// a path that does not exist is harmless.
pub fn read_log(path: &Path) -> std::io::Result<Vec<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(bytes
            .split(|&b| b == 0)
            .filter(|r| !r.is_empty())
            .map(<[u8]>::to_vec)
            .collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

pub(super) fn log_path(leg_root: &Path, name: &str) -> PathBuf {
    leg_root.join(META_DIR).join(name)
}

pub(super) fn append(path: &Path, records: &[&[u8]], sync: bool) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    let mut buf = Vec::new();
    for r in records {
        buf.extend_from_slice(r);
        buf.push(0);
    }
    f.write_all(&buf)?;
    if sync {
        f.sync_data()?;
    }
    Ok(())
}

/// Replaces the log `name` in the `.mirrorfs/` of the leg at `leg_root` by `records`,
/// atomically ([`crate::sys::replace::replace_file`]: temporary file, fsync, rename, fsync of
/// the folder). The folder must exist.
pub(super) fn rewrite(leg_root: &Path, name: &str, records: &[&[u8]]) -> std::io::Result<()> {
    let mut buf = Vec::new();
    for r in records {
        buf.extend_from_slice(r);
        buf.push(0);
    }
    let dir = crate::meta::open_meta_dir(leg_root, false)?;
    crate::sys::replace::replace_file_with(&dir, name, 0o600, &buf)
}

/// Seconds since the epoch.
pub(super) fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The path of `name` in the directory at `dir` (`.` for the root).
pub(crate) fn child_path(dir: &[u8], name: &[u8]) -> Vec<u8> {
    if dir == ROOT_REL {
        return name.to_vec();
    }
    let mut p = dir.to_vec();
    p.push(b'/');
    p.extend_from_slice(name);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cover_record_reads_back() {
        let s = cover_record(b"a/b", 100, true);
        assert_eq!(s, b"/s98/a/b");
        assert_eq!(
            parse_cover(&s),
            Some(CoverRecord {
                t: 98,
                dir: b"a/b",
                subtree: true
            })
        );
        assert_eq!(parse_cover(b"/x98/a"), None);
    }

    #[test]
    fn what_is_not_an_identity_record_is_not_read_as_one() {
        for not in [&b"/c12/d"[..], b"/i", b"/iaa", b"/iaa=x", b"/i=5", b"d/f"] {
            assert_eq!(parse_identity(not), None, "{not:?}");
        }
    }
}
