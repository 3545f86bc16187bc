//! The legs behind a mirror, looked at and tampered with directly (superblocks, logs, a copy
//! corrupted behind the mirror's back, a small tree to adopt), reads through the mount that
//! reach a leg, and mounting existing legs again by hand (a remount with other options).

use super::*;
use serde_json::Value;
use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, OpenOptionsExt};

/// A leg's superblock as JSON.
#[track_caller]
pub fn superblock(leg: &Path) -> Value {
    let p = leg.join(".mirrorfs/superblock.json");
    let t = fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    serde_json::from_str(&t).unwrap_or_else(|e| panic!("{} does not parse: {e}", p.display()))
}

/// The records of a log of NUL-terminated paths (an absent log has none).
#[track_caller]
pub fn log_records(p: &Path) -> BTreeSet<String> {
    match fs::read(p) {
        Ok(b) => b
            .split(|&c| c == 0)
            .filter(|r| !r.is_empty())
            .map(|r| String::from_utf8_lossy(r).into_owned())
            .collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => BTreeSet::new(),
        Err(e) => panic!("read {}: {e}", p.display()),
    }
}

/// Flips the bytes `[offset, offset + len)` of a leg's copy directly, keeping its times: the
/// copy silently holds bad data, as a bad sector would.
#[track_caller]
pub fn corrupt_keeping_times(p: &Path, offset: u64, len: usize) {
    let md = fs::metadata(p).unwrap_or_else(|e| panic!("stat {}: {e}", p.display()));
    let f = OpenOptions::new().read(true).write(true).open(p).unwrap();
    let mut buf = vec![0u8; len];
    f.read_exact_at(&mut buf, offset).unwrap();
    for b in &mut buf {
        *b = !*b;
    }
    f.write_all_at(&buf, offset).unwrap();
    f.sync_all().unwrap();
    drop(f);
    utimensat(
        p,
        ts(md.atime(), md.atime_nsec()),
        ts(md.mtime(), md.mtime_nsec()),
        true,
    )
    .unwrap();
}

/// A small tree with folders, a symlink, a hard link, an xattr, an odd mode and set times.
pub fn populate(root: &Path, seed: u64) {
    fs::create_dir_all(root.join("a/b")).unwrap();
    fs::create_dir(root.join("empty")).unwrap();
    fs::write(root.join("top"), pattern(300_000, seed)).unwrap();
    fs::write(root.join("a/f1"), pattern(1_500_000, seed + 1)).unwrap();
    fs::write(root.join("a/b/f2"), pattern(4096, seed + 2)).unwrap();
    chmod(root.join("a/b/f2"), 0o600).unwrap();
    fs::hard_link(root.join("a/f1"), root.join("a/b/hard")).unwrap();
    std::os::unix::fs::symlink("a/f1", root.join("link")).unwrap();
    set_xattr(root.join("top"), "user.origin", b"adopted", 0).unwrap();
    utimensat(
        root.join("top"),
        ts(1_500_000_000, 0),
        ts(1_500_000_000, 123),
        true,
    )
    .unwrap();
}

// ---------------------------------------------------------------------------------------------
// Reads through the mount that reach a leg
// ---------------------------------------------------------------------------------------------

/// The `O_DIRECT` read size of [`read_direct`] in most tests (one FUSE request per read).
pub const DIRECT_CHUNK: usize = 64 * KIB;

/// Reads a whole file through `O_DIRECT` in `chunk`-byte `pread`s, one after the other. Each
/// `pread` of at most 128 KiB is exactly one FUSE read request, sent only once the previous one
/// is answered: the order in which the legs see reads is the order of the `pread`s. (A buffered
/// read lets readahead send several requests at once, answered in any order.)
#[track_caller]
pub fn read_direct(p: &Path, chunk: usize) -> Vec<u8> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(p)
        .unwrap_or_else(|e| panic!("open O_DIRECT {}: {e}", p.display()));
    let mut buf = AlignedBuf::new(chunk, 4096);
    let mut out = Vec::new();
    loop {
        let n = f
            .read_at(buf.as_mut_slice(), out.len() as u64)
            .unwrap_or_else(|e| panic!("O_DIRECT pread of {} at {}: {e}", p.display(), out.len()));
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf.as_slice()[..n]);
    }
}

/// Reads the whole file once, through the mount.
#[track_caller]
pub fn read_once(m: &Mounted, rel: &str, want: &[u8]) {
    let got = fs::read(m.path(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"));
    assert_bytes_eq(&got, want, rel);
}

// ---------------------------------------------------------------------------------------------
// Mounting existing legs again
// ---------------------------------------------------------------------------------------------

/// A mount made by hand over existing legs (a remount, with other options); unmounted on drop.
/// Declare it after the [`Mounted`] that owns the dirs, so that it drops first.
pub struct Remounted {
    mnt: PathBuf,
    pids: Vec<i32>,
    mounted: bool,
}

/// Mounts `legs` on `mnt` with `opts`; `Err` with mirrorfs's output when it refuses.
pub fn try_mount(legs: &[PathBuf], mnt: &Path, opts: &[&str]) -> Result<Remounted, Output> {
    let mut args: Vec<OsString> = vec![legs_arg(legs).into(), mnt.into()];
    if !opts.is_empty() {
        args.push("-o".into());
        args.push(opts.join(",").into());
    }
    let out = run_mirrorfs(&args);
    if !out.status.success() {
        if is_mounted(mnt) {
            let _ = unmount_path(mnt);
            panic!(
                "mirrorfs {args:?} failed ({}) but left {} mounted",
                out.status,
                mnt.display()
            );
        }
        return Err(out);
    }
    assert!(
        is_mounted(mnt),
        "mirrorfs {args:?} exited 0 but {} is not mounted",
        mnt.display()
    );
    Ok(Remounted {
        mnt: mnt.to_path_buf(),
        pids: daemon_pids(mnt),
        mounted: true,
    })
}

/// As [`try_mount`], panicking with mirrorfs's stderr when the mount is refused.
#[track_caller]
pub fn mount_ok(legs: &[PathBuf], mnt: &Path, opts: &[&str]) -> Remounted {
    try_mount(legs, mnt, opts).unwrap_or_else(|out| {
        panic!(
            "mounting {} with {opts:?} was refused ({}): {}",
            legs_arg(legs),
            out.status,
            text(&out.stderr)
        )
    })
}

/// Asserts that mounting `legs` with `opts` is refused with exit status 1, nothing mounted;
/// returns mirrorfs's stderr.
#[track_caller]
pub fn mount_refused(legs: &[PathBuf], mnt: &Path, opts: &[&str]) -> String {
    match try_mount(legs, mnt, opts) {
        Ok(mut r) => {
            r.unmount();
            panic!("mounting {} with {opts:?} succeeded", legs_arg(legs));
        }
        Err(out) => {
            assert_eq!(
                out.status.code(),
                Some(1),
                "exit status of a refused mount; stderr: {}",
                text(&out.stderr)
            );
            assert!(!is_mounted(mnt), "a refused mount left {}", mnt.display());
            text(&out.stderr)
        }
    }
}

impl Remounted {
    /// The daemon's process ids.
    pub fn pids(&self) -> &[i32] {
        &self.pids
    }

    #[track_caller]
    pub fn unmount(&mut self) {
        if !self.mounted {
            return;
        }
        self.mounted = false;
        if let Err(e) = unmount_path(&self.mnt) {
            panic!("{e}");
        }
        assert!(
            wait_pids_gone(&self.pids, Duration::from_secs(10)),
            "mirrorfs daemon {:?} still running 10 s after umount",
            self.pids
        );
    }
}

impl Drop for Remounted {
    fn drop(&mut self) {
        if self.mounted {
            self.mounted = false;
            if let Err(e) = unmount_path(&self.mnt) {
                eprintln!("warning: {e}");
            }
            wait_pids_gone(&self.pids, Duration::from_secs(10));
        }
    }
}

/// Drops the pages the kernel caches of the file `p` (only that file: tests run in parallel,
/// and a global drop would empty the other tests' caches).
pub fn drop_cached_pages(p: &Path) {
    use std::os::fd::AsRawFd;
    let f = fs::File::open(p).unwrap();
    // SAFETY: a valid descriptor; the whole file.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(r, 0, "posix_fadvise(DONTNEED) on {}", p.display());
}
