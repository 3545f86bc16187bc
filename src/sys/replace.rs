//! Replacing a file atomically, the one way mirrorfs does it: a new file beside the old one,
//! written and flushed, renamed over the name, and the directory flushed. A reader sees the
//! old contents or the new, never a mix; after a crash the name holds one or the other.

use super::fd;
use crate::errno::Errno;
use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU64, Ordering};

/// Replaces `dir/name` with a new file that `write` fills, atomically:
///
/// 1. a temporary file `.NAME.PID.N.tmp` is created in `dir` (`O_CREAT | O_EXCL |
///    O_NOFOLLOW`, read-write, `mode` as `open(2)` takes it: the process's umask applies);
/// 2. `write` writes it (it gets the file at offset 0; it may read it back, and seek);
/// 3. the file is flushed with `fsync`;
/// 4. it is renamed over `name`, within `dir`;
/// 5. `dir` is flushed with `fsync`, so the rename itself survives a crash.
///
/// Until step 4 the old file (if any) is untouched; an error before it removes the temporary
/// file. An error of step 5 is returned although the name already holds the new file (it may
/// not be on disk yet).
///
/// Why `fsync` and not `fdatasync`: for a file just created, both must write its blocks and
/// its size (the metadata needed to read the data back), so `fdatasync` saves nothing here
/// (the inode is new, all of it is dirty); but only `fsync` promises the rest of the inode,
/// the mode and the owner, which the file must have once it carries the name.
///
/// `dir` must be a directory opened for reading (not `O_PATH`: `fsync` refuses those; see
/// [`fd::open_dir`] and [`fd::open_dir_at`]). `name` is a single component. A crash between
/// steps 1 and 4 leaves the temporary file behind; its name carries the process id, so it is
/// never reused by another writer, nor replaced, and the next replacement of `name` removes
/// it once that process is gone ([`remove_stale`]).
pub fn replace_file(
    dir: BorrowedFd<'_>,
    name: impl AsRef<OsStr>,
    mode: u32,
    write: impl FnOnce(&mut File) -> io::Result<()>,
) -> io::Result<()> {
    let name = name.as_ref();
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes == b"." || bytes == b".." || bytes.contains(&b'/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("'{}' is not a file name", name.to_string_lossy()),
        ));
    }
    let target = CString::new(bytes).map_err(|_| io::ErrorKind::InvalidInput)?;
    // Refused before anything is written: the last step could not be done.
    if fd::status_flags(dir).map_err(io::Error::from)? & libc::O_PATH != 0 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    remove_stale(dir, bytes);
    let (tmp, file) = create_temporary(dir, bytes, mode)?;
    let mut file = File::from(file);
    let written = write(&mut file)
        .and_then(|()| file.sync_all())
        .and_then(|()| fd::rename_at(dir, &tmp, dir, &target, 0).map_err(io::Error::from));
    drop(file);
    if let Err(e) = written {
        let _ = fd::unlink_at(dir, &tmp, false);
        return Err(e);
    }
    fd::fsync(dir, false).map_err(io::Error::from)
}

/// Removes the temporary files of `name` that processes no longer running left in `dir` (a
/// crash between the creation and the rename): `.NAME.PID.N.tmp` with PID neither this
/// process nor any live one. Each replacement of a name tidies its own leftovers, so they
/// never pile up; a file whose process is alive (or whose id was reused) is left alone.
/// Best effort: a directory that cannot be listed is left as it is.
fn remove_stale(dir: BorrowedFd<'_>, name: &[u8]) {
    let Ok(entries) = std::fs::read_dir(OsStr::from_bytes(fd::proc_path(dir).as_bytes())) else {
        return;
    };
    let me = std::process::id();
    for e in entries.flatten() {
        let file = e.file_name();
        let Some(pid) = file
            .as_bytes()
            .strip_prefix(b".")
            .and_then(|f| f.strip_prefix(name))
            .and_then(|f| f.strip_prefix(b"."))
            .and_then(|f| f.strip_suffix(b".tmp"))
            .and_then(|f| std::str::from_utf8(f).ok())
            .and_then(|f| f.split_once('.'))
            .filter(|(_, n)| n.bytes().all(|b| b.is_ascii_digit()) && !n.is_empty())
            .and_then(|(p, _)| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != me && !super::process_alive(pid) {
            if let Ok(c) = CString::new(file.as_bytes()) {
                let _ = fd::unlink_at(dir, &c, false);
            }
        }
    }
}

/// How many temporary files this process made.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// Creates the temporary file for `name` in `dir`: `.NAME.PID.N.tmp`, N counting this
/// process's temporary files (a name some earlier process with the same id left is skipped).
fn create_temporary(
    dir: BorrowedFd<'_>,
    name: &[u8],
    mode: u32,
) -> io::Result<(CString, std::os::fd::OwnedFd)> {
    let mut tries = 0;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let mut tmp = Vec::with_capacity(name.len() + 32);
        tmp.push(b'.');
        tmp.extend_from_slice(name);
        tmp.extend_from_slice(format!(".{}.{n}.tmp", std::process::id()).as_bytes());
        let tmp = CString::new(tmp).map_err(|_| io::ErrorKind::InvalidInput)?;
        match fd::create_at(dir, &tmp, libc::O_RDWR | libc::O_EXCL, mode) {
            Ok(f) => return Ok((tmp, f)),
            Err(Errno(libc::EEXIST)) if tries < 100 => tries += 1,
            Err(e) => return Err(e.into()),
        }
    }
}

/// [`replace_file`] with `contents`.
pub fn replace_file_with(
    dir: impl AsFd,
    name: impl AsRef<OsStr>,
    mode: u32,
    contents: &[u8],
) -> io::Result<()> {
    use std::io::Write;
    replace_file(dir.as_fd(), name, mode, |f| f.write_all(contents))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};
    use std::os::unix::fs::PermissionsExt;

    fn names(dir: &std::path::Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn writes_a_new_file_with_its_mode_and_leaves_no_temporary() {
        let d = tempfile::tempdir().unwrap();
        let dir = fd::open_dir(d.path()).unwrap();
        replace_file_with(&dir, "f", 0o600, b"one").unwrap();
        assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"one");
        let mode = std::fs::metadata(d.path().join("f")).unwrap().permissions();
        assert_eq!(mode.mode() & 0o7777, 0o600);
        assert_eq!(names(d.path()), ["f"]);
        // The mode is the new file's, not the old one's.
        replace_file_with(&dir, "f", 0o400, b"two, longer").unwrap();
        assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"two, longer");
        let mode = std::fs::metadata(d.path().join("f")).unwrap().permissions();
        assert_eq!(mode.mode() & 0o7777, 0o400);
        assert_eq!(names(d.path()), ["f"]);
    }

    #[test]
    fn the_old_file_stays_whole_until_the_rename() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("f"), b"old contents").unwrap();
        let old_ino =
            std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(d.path().join("f")).unwrap());
        let reader = File::open(d.path().join("f")).unwrap();
        let dir = fd::open_dir(d.path()).unwrap();
        replace_file(dir.as_fd(), "f", 0o644, |f| {
            f.write_all(b"new")?;
            // Halfway through, the name still holds the old file, whole.
            assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"old contents");
            // The writer may read back what it wrote.
            f.rewind()?;
            let mut back = String::new();
            f.read_to_string(&mut back)?;
            assert_eq!(back, "new");
            f.write_all(b" contents")
        })
        .unwrap();
        assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"new contents");
        let new_ino =
            std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(d.path().join("f")).unwrap());
        assert_ne!(old_ino, new_ino, "a new file, not the old one rewritten");
        // One already open keeps the old contents.
        let mut r = String::new();
        (&reader).read_to_string(&mut r).unwrap();
        assert_eq!(r, "old contents");
        assert_eq!(names(d.path()), ["f"]);
    }

    #[test]
    fn a_failing_writer_leaves_the_old_file_and_no_temporary() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("f"), b"old").unwrap();
        let dir = fd::open_dir(d.path()).unwrap();
        let e = replace_file(dir.as_fd(), "f", 0o600, |f| {
            f.write_all(b"half of it")?;
            Err(io::Error::other("the writer gives up"))
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "the writer gives up");
        assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"old");
        assert_eq!(names(d.path()), ["f"]);
        // Nor when there was no file before.
        let e = replace_file(
            dir.as_fd(),
            "g",
            0o600,
            |_| Err(io::ErrorKind::Other.into()),
        );
        assert!(e.is_err());
        assert_eq!(names(d.path()), ["f"]);
    }

    #[test]
    fn refuses_what_is_not_one_name_and_a_directory_it_cannot_flush() {
        let d = tempfile::tempdir().unwrap();
        let dir = fd::open_dir(d.path()).unwrap();
        for bad in ["", ".", "..", "a/b"] {
            let e = replace_file_with(&dir, bad, 0o600, b"x").unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
        // Over a directory: the rename fails, and the temporary goes.
        std::fs::create_dir(d.path().join("sub")).unwrap();
        assert!(replace_file_with(&dir, "sub", 0o600, b"x").is_err());
        assert_eq!(names(d.path()), ["sub"]);
        // An O_PATH descriptor cannot be flushed: refused before anything is written.
        let opath = fd::open_root(d.path()).unwrap();
        let e = replace_file_with(&opath, "f", 0o600, b"x").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBADF));
        assert_eq!(names(d.path()), ["sub"]);
    }

    #[test]
    fn a_temporary_left_by_a_dead_process_is_removed_by_the_next_replacement() {
        let d = tempfile::tempdir().unwrap();
        let dir = fd::open_dir(d.path()).unwrap();
        // 4,194,304 is the highest pid_max: no process has these ids.
        let dead = [".f.99999999.0.tmp", ".f.4194305.12.tmp"];
        let kept = [
            ".g.99999999.0.tmp".to_string(),              // another name's
            ".f.99999999.x.tmp".to_string(),              // not our form
            format!(".f.{}.999.tmp", std::process::id()), // this process's own
            ".f.1.0.tmp".to_string(),                     // init's: alive
        ];
        for s in dead
            .iter()
            .map(|s| s.to_string())
            .chain(kept.iter().cloned())
        {
            std::fs::write(d.path().join(s), b"left by a crash").unwrap();
        }
        replace_file_with(&dir, "f", 0o600, b"new").unwrap();
        let mut want: Vec<String> = kept.to_vec();
        want.push("f".into());
        want.sort();
        assert_eq!(names(d.path()), want);
    }

    #[test]
    fn a_temporary_left_by_a_crash_is_neither_reused_nor_removed() {
        let d = tempfile::tempdir().unwrap();
        let dir = fd::open_dir(d.path()).unwrap();
        // Files under the next names this process would take (other tests may take some of
        // them first: then the names are skipped all the same).
        let (pid, n) = (std::process::id(), NEXT.load(Ordering::Relaxed));
        let stale: Vec<String> = (n..n + 3).map(|i| format!(".f.{pid}.{i}.tmp")).collect();
        for s in &stale {
            std::fs::write(d.path().join(s), b"left by a crash").unwrap();
        }
        replace_file_with(&dir, "f", 0o600, b"new").unwrap();
        assert_eq!(std::fs::read(d.path().join("f")).unwrap(), b"new");
        for s in &stale {
            assert_eq!(std::fs::read(d.path().join(s)).unwrap(), b"left by a crash");
        }
        assert_eq!(names(d.path()).len(), 4);
    }
}
