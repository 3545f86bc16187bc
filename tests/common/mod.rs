//! Shared harness for the mirrorfs integration tests.
//!
//! * [`TestMirror`] builds a private temp dir with `leg0..legN-1` and `mnt`, mounts mirrorfs in
//!   background mode and returns a [`Mounted`] guard that unmounts on drop (even on panic).
//! * [`require_fuse!`] and [`require_tool!`] fail a test that lacks root, `/dev/fuse` or a
//!   tool, with the way to get it (`MIRRORFS_TEST_ALLOW_SKIP=1` skips it instead, counted).
//! * [`assert_legs_identical`] and [`assert_no_mirrorfs_leak`] are the invariants every
//!   operation test finishes with.
//! * Small libc helpers (errno, lstat, xattrs, running a command as another user).
//! * [`control`]: the control interface of a mount (the `user.mirrorfs.*` keys through the real
//!   `getfattr`/`setfattr`, the statistics, `mirrorfs status` and the other subcommands, waiting
//!   for a resync or a scrub).
//! * [`legs`]: the legs behind the mirror (superblocks, logs, corrupting a copy, a small tree
//!   to adopt) and mounting existing legs again by hand.
//! * [`ext4`]: a leg on an ext4 image on a loop device (read-only on demand, rot through the
//!   device).
//! * [`cachedisk`]: disks with a volatile write cache that a power cut empties (the
//!   `mirrorfs-cachedisk` binary), the loop devices over them and the cut itself.
//!
//! Each test file is a crate of its own and uses only part of this: unused helpers are allowed.
#![allow(dead_code)]

pub mod cachedisk;
pub mod control;
pub mod diskmodel;
pub mod ext4;
pub mod legs;

// The test files reach everything through `use common::*`; a file that uses nothing of one of
// these modules would otherwise warn about the re-export.
#[allow(unused_imports)]
pub use cachedisk::*;
#[allow(unused_imports)]
pub use control::*;
#[allow(unused_imports)]
pub use diskmodel::*;
#[allow(unused_imports)]
pub use ext4::*;
#[allow(unused_imports)]
pub use legs::*;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{CString, OsStr, OsString};
use std::fs;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// The uid/gid of `nobody`/`nogroup` on Debian.
pub const NOBODY: u32 = 65534;
pub const NOGROUP: u32 = 65534;

pub const KIB: usize = 1 << 10;
pub const MIB: usize = 1 << 20;

/// Path of the mirrorfs binary built by cargo for this test run.
pub fn mirrorfs_bin() -> &'static str {
    env!("CARGO_BIN_EXE_mirrorfs")
}

// ---------------------------------------------------------------------------------------------
// Root / FUSE requirement
// ---------------------------------------------------------------------------------------------

/// Name of the running test (libtest names each test thread after the test).
pub fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("<unnamed test>")
        .to_string()
}

/// A test that cannot run here: it fails with the reason and the way to get what it needs,
/// unless the run asks to skip (`MIRRORFS_TEST_ALLOW_SKIP=1`); then it says SKIPPED, and adds
/// a line to `$MIRRORFS_SKIP_LOG` when set (`make test` counts them in its last line). A test
/// never passes by skipping unless asked.
pub fn cannot_run(why: &str) {
    let allowed = std::env::var("MIRRORFS_TEST_ALLOW_SKIP").is_ok_and(|v| v == "1");
    let line = format!("{}: {why}", test_name());
    if !allowed {
        panic!(
            "{line}. Run the tests as root with what scripts/install-test-deps.sh installs (make \
             test does), or set MIRRORFS_TEST_ALLOW_SKIP=1 to skip such tests"
        );
    }
    eprintln!("SKIPPED: {line}");
    if let Some(log) = std::env::var_os("MIRRORFS_SKIP_LOG") {
        use std::io::Write;
        if let Ok(mut f) = fs::OpenOptions::new().create(true).append(true).open(log) {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// True when the tests can mount: running as root and `/dev/fuse` exists. Otherwise see
/// [`cannot_run`].
pub fn fuse_available() -> bool {
    let root = unsafe { libc::geteuid() } == 0;
    let dev_fuse = Path::new("/dev/fuse").exists();
    if root && dev_fuse {
        return true;
    }
    cannot_run(&format!(
        "needs root and /dev/fuse (root={root}, /dev/fuse exists={dev_fuse})"
    ));
    false
}

/// Return early from the test when it cannot mount (see [`fuse_available`]).
#[macro_export]
macro_rules! require_fuse {
    () => {
        if !$crate::common::fuse_available() {
            return;
        }
    };
}

/// True when `tool` is on PATH. Otherwise see [`cannot_run`].
pub fn tool_available(tool: &str) -> bool {
    let found = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|d| d.join(tool).is_file()))
        .unwrap_or(false);
    if !found {
        cannot_run(&format!("needs `{tool}`, which is not installed"));
    }
    found
}

/// Return early from the test when a tool is missing (see [`tool_available`]).
#[macro_export]
macro_rules! require_tool {
    ($tool:expr) => {
        if !$crate::common::tool_available($tool) {
            return;
        }
    };
}

/// Generate `mod $name { two_legs, three_legs }` tests calling `$name(n_legs)`.
#[macro_export]
macro_rules! legs_test {
    ($($name:ident),+ $(,)?) => {
        $(
            mod $name {
                #[test]
                fn two_legs() {
                    super::$name(2);
                }
                #[test]
                fn three_legs() {
                    super::$name(3);
                }
            }
        )+
    };
}

/// Like [`legs_test!`], with a third case on a mount with `no_default_permissions` (the daemon,
/// not the kernel, enforces access): `mod $name { two_legs, three_legs,
/// no_default_permissions }` calling `$name(n_legs, options)`.
#[macro_export]
macro_rules! access_test {
    ($($name:ident),+ $(,)?) => {
        $(
            mod $name {
                #[test]
                fn two_legs() {
                    super::$name(2, &[]);
                }
                #[test]
                fn three_legs() {
                    super::$name(3, &[]);
                }
                #[test]
                fn no_default_permissions() {
                    super::$name(2, &["no_default_permissions"]);
                }
            }
        )+
    };
}

// ---------------------------------------------------------------------------------------------
// errno / libc helpers
// ---------------------------------------------------------------------------------------------

pub fn cstr<P: AsRef<Path>>(p: P) -> CString {
    CString::new(p.as_ref().as_os_str().as_bytes()).expect("path contains a NUL byte")
}

pub fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Turn a libc return value (-1 = error) into an io::Result.
pub fn cvt<T: PartialOrd + Copy + From<i8>>(ret: T) -> io::Result<T> {
    if ret < T::from(0) {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

pub fn errno_name(e: i32) -> String {
    let s = unsafe { std::ffi::CStr::from_ptr(libc::strerror(e)) };
    format!("errno {e} ({})", s.to_string_lossy())
}

/// errno of an io::Error (panics on errors without one).
pub fn errno_of(e: &io::Error) -> i32 {
    e.raw_os_error()
        .unwrap_or_else(|| panic!("error without errno: {e:?}"))
}

/// Assert that `r` failed with `expected` errno.
#[track_caller]
pub fn assert_errno<T: std::fmt::Debug>(r: io::Result<T>, expected: i32, what: &str) {
    match r {
        Ok(v) => panic!(
            "{what}: expected failure with {}, but it succeeded ({v:?})",
            errno_name(expected)
        ),
        Err(e) => {
            let got = errno_of(&e);
            assert_eq!(
                got,
                expected,
                "{what}: expected {}, got {}",
                errno_name(expected),
                errno_name(got)
            );
        }
    }
}

pub fn lstat<P: AsRef<Path>>(p: P) -> io::Result<libc::stat> {
    let c = cstr(&p);
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    cvt(unsafe { libc::lstat(c.as_ptr(), &mut st) })?;
    Ok(st)
}

pub fn stat<P: AsRef<Path>>(p: P) -> io::Result<libc::stat> {
    let c = cstr(&p);
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    cvt(unsafe { libc::stat(c.as_ptr(), &mut st) })?;
    Ok(st)
}

pub fn fstat(fd: i32) -> io::Result<libc::stat> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    cvt(unsafe { libc::fstat(fd, &mut st) })?;
    Ok(st)
}

#[track_caller]
pub fn lstat_ok<P: AsRef<Path>>(p: P) -> libc::stat {
    lstat(&p).unwrap_or_else(|e| panic!("lstat {}: {e}", p.as_ref().display()))
}

pub fn statvfs<P: AsRef<Path>>(p: P) -> io::Result<libc::statvfs> {
    let c = cstr(&p);
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    cvt(unsafe { libc::statvfs(c.as_ptr(), &mut st) })?;
    Ok(st)
}

pub fn mknod<P: AsRef<Path>>(p: P, mode: libc::mode_t, dev: libc::dev_t) -> io::Result<()> {
    let c = cstr(&p);
    cvt(unsafe { libc::mknod(c.as_ptr(), mode, dev) })?;
    Ok(())
}

pub fn mkfifo<P: AsRef<Path>>(p: P, mode: libc::mode_t) -> io::Result<()> {
    let c = cstr(&p);
    cvt(unsafe { libc::mkfifo(c.as_ptr(), mode) })?;
    Ok(())
}

pub fn chmod<P: AsRef<Path>>(p: P, mode: libc::mode_t) -> io::Result<()> {
    let c = cstr(&p);
    cvt(unsafe { libc::chmod(c.as_ptr(), mode) })?;
    Ok(())
}

pub fn chown<P: AsRef<Path>>(p: P, uid: u32, gid: u32) -> io::Result<()> {
    let c = cstr(&p);
    cvt(unsafe { libc::chown(c.as_ptr(), uid, gid) })?;
    Ok(())
}

pub fn lchown<P: AsRef<Path>>(p: P, uid: u32, gid: u32) -> io::Result<()> {
    let c = cstr(&p);
    cvt(unsafe { libc::lchown(c.as_ptr(), uid, gid) })?;
    Ok(())
}

pub fn truncate<P: AsRef<Path>>(p: P, len: i64) -> io::Result<()> {
    let c = cstr(&p);
    cvt(unsafe { libc::truncate(c.as_ptr(), len) })?;
    Ok(())
}

pub fn access<P: AsRef<Path>>(p: P, mode: i32) -> io::Result<()> {
    let c = cstr(&p);
    cvt(unsafe { libc::access(c.as_ptr(), mode) })?;
    Ok(())
}

/// `renameat2(AT_FDCWD, from, AT_FDCWD, to, flags)`.
pub fn renameat2<P: AsRef<Path>, Q: AsRef<Path>>(from: P, to: Q, flags: u32) -> io::Result<()> {
    let a = cstr(&from);
    let b = cstr(&to);
    cvt(unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            flags,
        )
    })?;
    Ok(())
}

/// `utimensat(AT_FDCWD, p, times, AT_SYMLINK_NOFOLLOW if nofollow)`.
pub fn utimensat<P: AsRef<Path>>(
    p: P,
    atime: libc::timespec,
    mtime: libc::timespec,
    nofollow: bool,
) -> io::Result<()> {
    let c = cstr(&p);
    let times = [atime, mtime];
    let flags = if nofollow {
        libc::AT_SYMLINK_NOFOLLOW
    } else {
        0
    };
    cvt(unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), flags) })?;
    Ok(())
}

/// The umask of this process, read without changing it (from /proc/self/status).
pub fn current_umask() -> u32 {
    let s = fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    s.lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .map(|v| u32::from_str_radix(v.trim(), 8).expect("parse Umask"))
        .unwrap_or(0o022)
}

pub fn ts(sec: i64, nsec: i64) -> libc::timespec {
    libc::timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    }
}

// --- xattrs (l* variants: never follow symlinks) ---

pub fn set_xattr<P: AsRef<Path>>(p: P, name: &str, value: &[u8], flags: i32) -> io::Result<()> {
    let c = cstr(&p);
    let n = CString::new(name).unwrap();
    cvt(unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            n.as_ptr(),
            value.as_ptr() as *const libc::c_void,
            value.len(),
            flags,
        )
    })?;
    Ok(())
}

pub fn get_xattr<P: AsRef<Path>>(p: P, name: &str) -> io::Result<Vec<u8>> {
    let c = cstr(&p);
    let n = CString::new(name).unwrap();
    loop {
        let size =
            cvt(unsafe { libc::lgetxattr(c.as_ptr(), n.as_ptr(), std::ptr::null_mut(), 0) })?;
        let mut buf = vec![0u8; size as usize + 1];
        match cvt(unsafe {
            libc::lgetxattr(
                c.as_ptr(),
                n.as_ptr(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
            )
        }) {
            Ok(len) => {
                buf.truncate(len as usize);
                return Ok(buf);
            }
            Err(e) if e.raw_os_error() == Some(libc::ERANGE) => continue,
            Err(e) => return Err(e),
        }
    }
}

pub fn list_xattr<P: AsRef<Path>>(p: P) -> io::Result<Vec<String>> {
    let c = cstr(&p);
    loop {
        let size = cvt(unsafe { libc::llistxattr(c.as_ptr(), std::ptr::null_mut(), 0) })?;
        let mut buf = vec![0u8; size as usize + 1];
        match cvt(unsafe {
            libc::llistxattr(c.as_ptr(), buf.as_mut_ptr() as *mut libc::c_char, buf.len())
        }) {
            Ok(len) => {
                buf.truncate(len as usize);
                let mut names: Vec<String> = buf
                    .split(|b| *b == 0)
                    .filter(|s| !s.is_empty())
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect();
                names.sort();
                return Ok(names);
            }
            Err(e) if e.raw_os_error() == Some(libc::ERANGE) => continue,
            Err(e) => return Err(e),
        }
    }
}

pub fn remove_xattr<P: AsRef<Path>>(p: P, name: &str) -> io::Result<()> {
    let c = cstr(&p);
    let n = CString::new(name).unwrap();
    cvt(unsafe { libc::lremovexattr(c.as_ptr(), n.as_ptr()) })?;
    Ok(())
}

/// All xattrs of a path (not following symlinks): name -> value. Names we may not read
/// (EPERM/EACCES/ENODATA races) are recorded with an empty marker value.
pub fn all_xattrs<P: AsRef<Path>>(p: P) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let names = match list_xattr(&p) {
        Ok(n) => n,
        Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => return out,
        Err(e) => panic!("llistxattr {}: {e}", p.as_ref().display()),
    };
    for name in names {
        let v = match get_xattr(&p, &name) {
            Ok(v) => v,
            Err(e) => format!("<unreadable: {e}>").into_bytes(),
        };
        out.insert(name, v);
    }
    out
}

/// A buffer of `len` bytes whose address is aligned to `align` (for O_DIRECT).
/// The daemon's open (not `O_PATH`) descriptors on each leg's copy of `rel`, from
/// `/proc/PID/fd` and `fdinfo`. A passed-through file keeps one on its leg; read-only opens
/// open none until they read through the daemon.
pub fn daemon_open_fds_on(m: &Mounted, rel: &str) -> Vec<usize> {
    let pid = m.daemon_pids()[0];
    let targets: Vec<_> = fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let info = fs::read_to_string(format!(
                "/proc/{pid}/fdinfo/{}",
                e.file_name().to_string_lossy()
            ))
            .ok()?;
            let flags = info
                .lines()
                .find_map(|l| l.strip_prefix("flags:"))
                .and_then(|f| i32::from_str_radix(f.trim(), 8).ok())?;
            if flags & libc::O_PATH != 0 {
                return None;
            }
            fs::read_link(e.path()).ok()
        })
        .collect();
    m.leg_paths(rel)
        .iter()
        .map(|p| targets.iter().filter(|t| *t == p).count())
        .collect()
}

/// A shared writable mapping (`MAP_SHARED`, `PROT_READ | PROT_WRITE`) of the first `len`
/// bytes of an open file; unmapped when dropped.
pub struct SharedMap {
    ptr: *mut libc::c_void,
    len: usize,
}

impl SharedMap {
    #[track_caller]
    pub fn new(f: &std::fs::File, len: usize) -> SharedMap {
        use std::os::fd::AsRawFd;
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(
            ptr,
            libc::MAP_FAILED,
            "mmap(MAP_SHARED, PROT_WRITE): {}",
            io::Error::last_os_error()
        );
        SharedMap { ptr, len }
    }

    pub fn bytes(&mut self) -> &mut [u8] {
        unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut u8, self.len) }
    }

    /// `msync(MS_SYNC)`.
    #[track_caller]
    pub fn sync(&self) {
        let r = unsafe { libc::msync(self.ptr, self.len, libc::MS_SYNC) };
        assert_eq!(r, 0, "msync: {}", io::Error::last_os_error());
    }
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}

pub struct AlignedBuf {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl AlignedBuf {
    pub fn new(len: usize, align: usize) -> Self {
        let layout = std::alloc::Layout::from_size_align(len, align).unwrap();
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null(), "aligned allocation failed");
        AlignedBuf { ptr, layout }
    }
    pub fn as_slice(&self) -> &[u8] {
        unsafe { std::slice::from_raw_parts(self.ptr, self.layout.size()) }
    }
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        unsafe { std::alloc::dealloc(self.ptr, self.layout) }
    }
}

/// Deterministic pseudo-random bytes (xorshift), so data mismatches are reproducible.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        for b in x.to_le_bytes() {
            if v.len() < len {
                v.push(b);
            }
        }
    }
    v
}

/// Compare two byte slices, panicking with the first differing offset.
#[track_caller]
pub fn assert_bytes_eq(got: &[u8], want: &[u8], what: &str) {
    if got == want {
        return;
    }
    let first = got
        .iter()
        .zip(want.iter())
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    panic!(
        "{what}: content differs: got {} bytes, want {} bytes, first difference at offset {first} \
         (got {:?}, want {:?})",
        got.len(),
        want.len(),
        got.get(first..(first + 16).min(got.len())),
        want.get(first..(first + 16).min(want.len())),
    );
}

/// Assert that `rel` has exactly `want` as content on every leg.
#[track_caller]
pub fn assert_content_on_legs(legs: &[PathBuf], rel: &str, want: &[u8]) {
    for leg in legs {
        let p = leg.join(rel);
        let got = fs::read(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
        assert_bytes_eq(&got, want, &format!("leg file {}", p.display()));
    }
}

// ---------------------------------------------------------------------------------------------
// Running commands
// ---------------------------------------------------------------------------------------------

/// Wait for a child up to `timeout`; kill it (and panic) when it takes longer.
pub fn wait_timeout(child: &mut Child, timeout: Duration, what: &str) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            return st;
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {timeout:?}, killed");
        }
        sleep(Duration::from_millis(20));
    }
}

/// fio's job for a leg that hangs or dies (`leg_timeout.rs`, `remote_sshfs.rs`): random 4 KiB
/// reads and writes on a 32 MiB file for `secs`, 4 MiB/s each way, reads checked against what
/// it wrote (crc32c), `extra` arguments after those, its JSON report in `out` (stderr beside
/// it, `.err`).
pub fn fio_randrw_job(file: &Path, out: &Path, secs: u32, extra: &[&str]) -> Child {
    Command::new("fio")
        .args([
            "--name=randrw",
            "--rw=randrw",
            "--bs=4k",
            "--size=32m",
            "--ioengine=psync",
            "--time_based",
            "--rate=4m,4m",
            "--verify=crc32c",
            "--verify_state_save=0",
            "--output-format=json",
        ])
        .args(extra)
        .arg(format!("--runtime={secs}"))
        .arg(format!("--filename={}", file.display()))
        .arg(format!("--output={}", out.display()))
        .current_dir(out.parent().unwrap())
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(out.with_extension("err")).unwrap())
        .spawn()
        .expect("spawn fio")
}

/// fio's JSON report in `out` (fio may print lines before it).
pub fn fio_json(out: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(out).unwrap_or_default();
    let json = &text[text.find('{').expect("fio's JSON report")..];
    serde_json::from_str(json).expect("fio's JSON report")
}

/// The slowest read and write of the first job in fio's report `out` (total latency, s), and
/// its error count (1 when the report has none).
pub fn fio_worst(out: &Path) -> (f64, f64, u64) {
    let v = fio_json(out);
    let job = &v["jobs"][0];
    let max = |dir: &str| job[dir]["lat_ns"]["max"].as_f64().unwrap_or(0.0) / 1e9;
    (
        max("read"),
        max("write"),
        job["error"].as_u64().unwrap_or(1),
    )
}

/// Gives a child that was asked to end (its mount unmounted, a signal sent) `grace` to exit,
/// then kills it. Whether it exited by itself.
pub fn end_child(child: &mut Child, grace: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < grace {
        if let Ok(Some(_)) = child.try_wait() {
            return true;
        }
        sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

/// Run a command with a timeout, capturing stdout and stderr.
pub fn run_timeout(cmd: &mut Command, timeout: Duration) -> Output {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
    // Drain the pipes in threads so a chatty child cannot block.
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let t1 = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = so.read_to_end(&mut v);
        v
    });
    let t2 = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = se.read_to_end(&mut v);
        v
    });
    let status = wait_timeout(&mut child, timeout, &what);
    // A daemonized grandchild may keep the pipes open: do not wait forever for EOF.
    let stdout = join_timeout(t1, Duration::from_secs(2));
    let stderr = join_timeout(t2, Duration::from_secs(2));
    Output {
        status,
        stdout,
        stderr,
    }
}

fn join_timeout(t: std::thread::JoinHandle<Vec<u8>>, timeout: Duration) -> Vec<u8> {
    let start = Instant::now();
    while !t.is_finished() {
        if start.elapsed() > timeout {
            return b"<pipe still held open by another process>".to_vec();
        }
        sleep(Duration::from_millis(10));
    }
    t.join().unwrap_or_default()
}

/// Bytes as text (lossy), for messages and reports.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A path as a string (lossy).
pub fn path_str(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// How long a tool the tests run (getfattr, setfattr, cp, rsync, mount...) may take before it
/// counts as hung.
pub const TOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// Run `prog ARGS...` with a timeout, capturing stdout and stderr.
pub fn run(prog: &str, args: &[&dyn AsRef<OsStr>], timeout: Duration) -> Output {
    let mut cmd = Command::new(prog);
    for a in args {
        cmd.arg(a.as_ref());
    }
    run_timeout(&mut cmd, timeout)
}

/// Run mirrorfs with `args` (30 s timeout).
pub fn run_mirrorfs<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new(mirrorfs_bin());
    cmd.args(args).env_remove("RUST_LOG");
    run_timeout(&mut cmd, Duration::from_secs(30))
}

/// Run `sh -c script` as uid/gid (groups cleared), with `umask`, in `/`.
pub fn sh_as(uid: u32, gid: u32, umask: u32, script: &str) -> Output {
    let full = format!("umask {umask:03o}\n{script}");
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c").arg(full).current_dir("/").uid(uid).gid(gid);
    run_timeout(&mut cmd, Duration::from_secs(30))
}

/// Like [`sh_as`] but panics unless the script succeeds.
#[track_caller]
pub fn sh_as_ok(uid: u32, gid: u32, umask: u32, script: &str) -> Output {
    let out = sh_as(uid, gid, umask, script);
    assert!(
        out.status.success(),
        "script as {uid}:{gid} failed ({}):\n{script}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Run `sh -c script` as root in `/` and panic unless it succeeds; returns stdout.
#[track_caller]
pub fn sh_ok(script: &str) -> String {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c").arg(script).current_dir("/");
    let out = run_timeout(&mut cmd, Duration::from_secs(300));
    assert!(
        out.status.success(),
        "script failed ({}):\n{script}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Single-quote a path for sh.
pub fn shq<P: AsRef<Path>>(p: P) -> String {
    let s = p.as_ref().to_string_lossy();
    format!("'{}'", s.replace('\'', "'\\''"))
}

// ---------------------------------------------------------------------------------------------
// Mount table and daemon processes
// ---------------------------------------------------------------------------------------------

/// One line of /proc/self/mountinfo (the library's parser: one for everyone).
pub use mirrorfs::sys::mountinfo::MountEntry;

pub fn mount_entries() -> Vec<MountEntry> {
    mirrorfs::sys::mountinfo::read()
}

/// The mount entry at `mnt` (the topmost one), if any.
pub fn mount_entry_at<P: AsRef<Path>>(mnt: P) -> Option<MountEntry> {
    let mnt = mnt.as_ref();
    mount_entries()
        .into_iter()
        .rev()
        .find(|e| e.mount_point == mnt)
}

pub fn is_mounted<P: AsRef<Path>>(mnt: P) -> bool {
    mount_entry_at(mnt).is_some()
}

/// Wait until `mnt` is (or is not) a mount point.
pub fn wait_mounted<P: AsRef<Path>>(mnt: P, want: bool, timeout: Duration) -> bool {
    let start = Instant::now();
    loop {
        if is_mounted(&mnt) == want {
            return true;
        }
        if start.elapsed() > timeout {
            return false;
        }
        sleep(Duration::from_millis(20));
    }
}

/// Polls `cond` every 100 ms for up to `timeout`; true once it holds.
pub fn wait_for(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() > timeout {
            return false;
        }
        sleep(Duration::from_millis(100));
    }
}

/// Pids of running mirrorfs processes (executable name contains "mirrorfs") whose command
/// line has an argument equal to (or ending in) `mnt`.
pub fn daemon_pids<P: AsRef<Path>>(mnt: P) -> Vec<i32> {
    let mnt = mnt.as_ref().as_os_str().as_bytes().to_vec();
    let me = std::process::id() as i32;
    let mut pids = Vec::new();
    let Ok(rd) = fs::read_dir("/proc") else {
        return pids;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me || !process_alive(pid) {
            continue;
        }
        let Ok(exe) = fs::read_link(format!("/proc/{pid}/exe")) else {
            continue;
        };
        let exe_name = exe
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !exe_name.contains("mirrorfs") {
            continue;
        }
        let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let hit = cmdline
            .split(|b| *b == 0)
            .any(|a| a == mnt.as_slice() || a.ends_with(&mnt) && a.len() > mnt.len());
        if hit {
            pids.push(pid);
        }
    }
    pids
}

/// True while `pid` exists and is not a zombie.
pub fn process_alive(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => {
            // "pid (comm) S ...": the state follows the last ')'.
            match s.rfind(')') {
                Some(i) => !matches!(s[i + 1..].trim_start().chars().next(), Some('Z' | 'X')),
                None => true,
            }
        }
        Err(_) => false,
    }
}

/// Wait until none of `pids` is alive.
pub fn wait_pids_gone(pids: &[i32], timeout: Duration) -> bool {
    let start = Instant::now();
    loop {
        if pids.iter().all(|p| !process_alive(*p)) {
            return true;
        }
        if start.elapsed() > timeout {
            return false;
        }
        sleep(Duration::from_millis(20));
    }
}

/// umount2(mnt, flags).
pub fn umount2<P: AsRef<Path>>(mnt: P, flags: i32) -> io::Result<()> {
    let c = cstr(&mnt);
    cvt(unsafe { libc::umount2(c.as_ptr(), flags) })?;
    Ok(())
}

/// Unmount `mnt`, retrying on EBUSY for a few seconds, then lazily. Returns Err with a
/// description when a plain unmount never succeeded.
pub fn unmount_path<P: AsRef<Path>>(mnt: P) -> Result<(), String> {
    let mnt = mnt.as_ref();
    let start = Instant::now();
    loop {
        if !is_mounted(mnt) {
            return Ok(());
        }
        match umount2(mnt, 0) {
            Ok(()) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && start.elapsed().as_secs() < 5 => {
                sleep(Duration::from_millis(100));
            }
            Err(e) => {
                let _ = umount2(mnt, libc::MNT_DETACH);
                return Err(format!(
                    "umount {} failed ({e}); detached it lazily",
                    mnt.display()
                ));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// TestMirror
// ---------------------------------------------------------------------------------------------

/// A private temp dir with `leg0..legN-1` and `mnt`, not yet mounted.
pub struct TestDirs {
    pub tmp: tempfile::TempDir,
    pub legs: Vec<PathBuf>,
    pub mnt: PathBuf,
    /// Extra mounts made for the test (e.g. a small tmpfs as a leg), unmounted on drop.
    extra_mounts: Vec<PathBuf>,
}

impl Drop for TestDirs {
    fn drop(&mut self) {
        for p in self.extra_mounts.iter().rev() {
            if let Err(e) = unmount_path(p) {
                eprintln!("warning: {e}");
            }
        }
    }
}

impl TestDirs {
    pub fn new(n_legs: usize) -> Self {
        let tmp = tempfile::Builder::new()
            .prefix("mirrorfs-test-")
            .tempdir()
            .expect("create temp dir");
        // Let non-root users (nobody) reach the mount point.
        chmod(tmp.path(), 0o755).expect("chmod temp dir");
        let legs: Vec<PathBuf> = (0..n_legs)
            .map(|i| tmp.path().join(format!("leg{i}")))
            .collect();
        for l in &legs {
            fs::create_dir(l).expect("create leg");
            chmod(l, 0o755).unwrap();
        }
        let mnt = tmp.path().join("mnt");
        fs::create_dir(&mnt).expect("create mnt");
        chmod(&mnt, 0o755).unwrap();
        TestDirs {
            tmp,
            legs,
            mnt,
            extra_mounts: Vec::new(),
        }
    }

    /// Put leg `i` on its own tmpfs of `size` (e.g. "64m"); unmounted when the dirs drop.
    pub fn mount_tmpfs_leg(&mut self, i: usize, size: &str) {
        let leg = self.legs[i].clone();
        let out = run_timeout(
            Command::new("mount")
                .args(["-t", "tmpfs", "-o"])
                .arg(format!("size={size},mode=0755"))
                .arg("tmpfs")
                .arg(&leg),
            Duration::from_secs(30),
        );
        assert!(
            out.status.success(),
            "mount tmpfs on {}: {}",
            leg.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        self.extra_mounts.push(leg);
    }

    pub fn root(&self) -> &Path {
        self.tmp.path()
    }

    /// `mirrorfs LEGS MNT -o OPTS` (in the background), as a user would type it: its output.
    pub fn mount_with(&self, opts: &str) -> Output {
        run_mirrorfs([
            self.legs_arg(),
            path_str(&self.mnt),
            "-o".into(),
            opts.into(),
        ])
    }

    /// The `LEG0:LEG1:...` argument.
    pub fn legs_arg(&self) -> String {
        legs_arg(&self.legs)
    }
}

pub fn legs_arg(legs: &[PathBuf]) -> String {
    legs.iter()
        .map(|l| l.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(":")
}

/// Builder for a mounted mirror.
pub struct TestMirror {
    n_legs: usize,
    options: Vec<String>,
    dirs: Option<TestDirs>,
}

impl TestMirror {
    pub fn new(n_legs: usize) -> Self {
        TestMirror {
            n_legs,
            options: Vec::new(),
            dirs: None,
        }
    }

    /// Add a `-o` option (`"x=y"` or `"flag"`).
    pub fn option(mut self, opt: &str) -> Self {
        self.options.push(opt.to_string());
        self
    }

    /// Add several `-o` options.
    pub fn options(mut self, opts: &[&str]) -> Self {
        self.options.extend(opts.iter().map(|o| o.to_string()));
        self
    }

    /// Use prepared dirs (e.g. legs pre-populated before the first mount).
    pub fn with_dirs(mut self, dirs: TestDirs) -> Self {
        self.n_legs = dirs.legs.len();
        self.dirs = Some(dirs);
        self
    }

    /// Mount in background mode; panics with mirrorfs's stderr if that fails.
    pub fn mount(self) -> Mounted {
        let dirs = self.dirs.unwrap_or_else(|| TestDirs::new(self.n_legs));
        let mut args: Vec<OsString> = vec![dirs.legs_arg().into(), dirs.mnt.clone().into()];
        if !self.options.is_empty() {
            args.push("-o".into());
            args.push(self.options.join(",").into());
        }
        mount_with_args(dirs, args)
    }
}

/// Run mirrorfs (background mode) with `args` over `dirs` and return the guard.
pub fn mount_with_args(dirs: TestDirs, args: Vec<OsString>) -> Mounted {
    let out = run_mirrorfs(&args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        // Clean up in case something got mounted anyway.
        let _ = unmount_path(&dirs.mnt);
        panic!(
            "mirrorfs {:?} failed with {}:\nstderr: {stderr}\nstdout: {}",
            args,
            out.status,
            String::from_utf8_lossy(&out.stdout)
        );
    }
    // The contract: the parent exits 0 only once the mount answers.
    let mounted = is_mounted(&dirs.mnt);
    let pids = daemon_pids(&dirs.mnt);
    let guard = Mounted {
        dirs,
        pids,
        mounted,
    };
    assert!(
        mounted,
        "mirrorfs {args:?} exited 0 but {} is not in /proc/self/mountinfo (stderr: {stderr})",
        guard.mnt().display()
    );
    guard
}

/// A mounted mirror. Unmounts on drop.
pub struct Mounted {
    dirs: TestDirs,
    pids: Vec<i32>,
    mounted: bool,
}

impl Mounted {
    pub fn mnt(&self) -> &Path {
        &self.dirs.mnt
    }
    /// `mnt/rel`
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dirs.mnt.join(rel)
    }
    pub fn legs(&self) -> &[PathBuf] {
        &self.dirs.legs
    }
    pub fn leg(&self, i: usize) -> &Path {
        &self.dirs.legs[i]
    }
    /// `leg_i/rel` for every leg.
    pub fn leg_paths(&self, rel: &str) -> Vec<PathBuf> {
        self.dirs.legs.iter().map(|l| l.join(rel)).collect()
    }
    pub fn root(&self) -> &Path {
        self.dirs.root()
    }
    /// Pids of the daemon found right after mounting.
    pub fn daemon_pids(&self) -> &[i32] {
        &self.pids
    }
    pub fn is_mounted(&self) -> bool {
        self.mounted
    }

    /// Unmount, asserting that it works and that the daemon exits within 10 s.
    #[track_caller]
    pub fn unmount(&mut self) {
        if !self.mounted {
            return;
        }
        let r = unmount_path(&self.dirs.mnt);
        self.mounted = false;
        if let Err(e) = r {
            panic!("{e}");
        }
        assert!(
            wait_pids_gone(&self.pids, Duration::from_secs(10)),
            "mirrorfs daemon {:?} still running 10 s after umount {}",
            self.pids,
            self.dirs.mnt.display()
        );
    }

    /// Mounts the same legs on the same mount point again, after [`Mounted::unmount`] (or
    /// [`Mounted::check_and_unmount`]), with `options`; panics with mirrorfs's stderr if that
    /// fails.
    #[track_caller]
    pub fn mount_again(&mut self, options: &[&str]) {
        assert!(!self.mounted, "{} is still mounted", self.mnt().display());
        let mut args: Vec<OsString> =
            vec![self.dirs.legs_arg().into(), self.dirs.mnt.clone().into()];
        if !options.is_empty() {
            args.push("-o".into());
            args.push(options.join(",").into());
        }
        let out = run_mirrorfs(&args);
        assert!(
            out.status.success(),
            "mirrorfs {args:?} failed again: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.mounted = is_mounted(&self.dirs.mnt);
        self.pids = daemon_pids(&self.dirs.mnt);
        assert!(
            self.mounted,
            "mirrorfs {args:?} exited 0 but nothing is mounted"
        );
    }

    /// The closing checks of every operation test: no `.mirrorfs` leak, legs identical while
    /// mounted, clean unmount, legs identical after unmount.
    #[track_caller]
    pub fn finish(mut self) {
        self.check_and_unmount();
    }

    /// [`Mounted::finish`] without dropping the dirs: the legs can still be inspected after.
    #[track_caller]
    pub fn check_and_unmount(&mut self) {
        assert_no_mirrorfs_leak(self.mnt());
        assert_legs_identical(self.legs());
        self.unmount();
        assert_legs_identical(self.legs());
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if !self.mounted {
            return;
        }
        self.mounted = false;
        if let Err(e) = unmount_path(&self.dirs.mnt) {
            eprintln!("warning: {e}");
        }
        if !wait_pids_gone(&self.pids, Duration::from_secs(10)) {
            eprintln!(
                "warning: mirrorfs daemon {:?} of {} still running after unmount",
                self.pids,
                self.dirs.mnt.display()
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Leg comparison
// ---------------------------------------------------------------------------------------------

/// What we compare for one path of a leg.
#[derive(Debug, Clone)]
struct LegEntry {
    abs: PathBuf,
    fmt: u32,
    mode: u32,
    uid: u32,
    gid: u32,
    size: u64,
    mtime: Option<(i64, i64)>,
    rdev: Option<u64>,
    link_target: Option<PathBuf>,
    xattrs: BTreeMap<String, Vec<u8>>,
    ino: u64,
    nlink: u64,
}

fn kind_name(fmt: u32) -> &'static str {
    match fmt {
        libc::S_IFREG => "regular file",
        libc::S_IFDIR => "directory",
        libc::S_IFLNK => "symlink",
        libc::S_IFIFO => "fifo",
        libc::S_IFSOCK => "socket",
        libc::S_IFCHR => "char device",
        libc::S_IFBLK => "block device",
        _ => "unknown",
    }
}

fn leg_entry(abs: &Path) -> LegEntry {
    let md = fs::symlink_metadata(abs).unwrap_or_else(|e| panic!("lstat {}: {e}", abs.display()));
    let fmt = md.mode() & libc::S_IFMT;
    let ft = md.file_type();
    LegEntry {
        abs: abs.to_path_buf(),
        fmt,
        mode: md.mode() & 0o7777,
        uid: md.uid(),
        gid: md.gid(),
        size: md.size(),
        mtime: if ft.is_file() {
            Some((md.mtime(), md.mtime_nsec()))
        } else {
            None
        },
        rdev: if ft.is_char_device() || ft.is_block_device() {
            Some(md.rdev())
        } else {
            None
        },
        link_target: if ft.is_symlink() {
            Some(fs::read_link(abs).unwrap_or_else(|e| panic!("readlink {}: {e}", abs.display())))
        } else {
            None
        },
        xattrs: all_xattrs(abs),
        ino: md.ino(),
        nlink: md.nlink(),
    }
}

/// Walk a leg: relative path -> entry ("." is the leg root). Skips the root-level
/// `.mirrorfs` and `lost+found`.
fn walk_leg(leg: &Path) -> BTreeMap<PathBuf, LegEntry> {
    let mut out = BTreeMap::new();
    out.insert(PathBuf::from("."), leg_entry(leg));
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = leg.join(&rel);
        let rd = fs::read_dir(&dir).unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()));
        for e in rd {
            let e = e.unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()));
            let name = e.file_name();
            if rel.as_os_str().is_empty() && (name == ".mirrorfs" || name == "lost+found") {
                continue;
            }
            let r = rel.join(&name);
            let ent = leg_entry(&leg.join(&r));
            if ent.fmt == libc::S_IFDIR {
                stack.push(r.clone());
            }
            out.insert(r, ent);
        }
    }
    out
}

/// Compare two regular files byte by byte; Some(description) if they differ.
fn file_content_diff(a: &Path, b: &Path) -> Option<String> {
    let mut fa = match fs::File::open(a) {
        Ok(f) => f,
        Err(e) => return Some(format!("cannot open {}: {e}", a.display())),
    };
    let mut fb = match fs::File::open(b) {
        Ok(f) => f,
        Err(e) => return Some(format!("cannot open {}: {e}", b.display())),
    };
    let mut ba = vec![0u8; 1 << 20];
    let mut bb = vec![0u8; 1 << 20];
    let mut off: u64 = 0;
    loop {
        let na = read_full(&mut fa, &mut ba);
        let nb = read_full(&mut fb, &mut bb);
        let n = na.min(nb);
        if let Some(i) = (0..n).find(|&i| ba[i] != bb[i]) {
            return Some(format!(
                "content differs at offset {} ({:#04x} vs {:#04x})",
                off + i as u64,
                ba[i],
                bb[i]
            ));
        }
        if na != nb {
            return Some(format!(
                "content length differs after offset {}",
                off + n as u64
            ));
        }
        if na == 0 {
            return None;
        }
        off += na as u64;
    }
}

fn read_full(f: &mut fs::File, buf: &mut [u8]) -> usize {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => panic!("read: {e}"),
        }
    }
    n
}

fn fmt_xattrs(x: &BTreeMap<String, Vec<u8>>) -> String {
    let parts: Vec<String> = x
        .iter()
        .map(|(k, v)| format!("{k}={:?}", String::from_utf8_lossy(v)))
        .collect();
    format!("{{{}}}", parts.join(", "))
}

/// Hard-link groups of a walked leg: sets of relative paths sharing an inode (non-dirs only,
/// groups of one path left out).
fn link_groups(w: &BTreeMap<PathBuf, LegEntry>) -> BTreeSet<BTreeSet<PathBuf>> {
    let mut by_ino: BTreeMap<u64, BTreeSet<PathBuf>> = BTreeMap::new();
    for (rel, e) in w {
        if e.fmt != libc::S_IFDIR {
            by_ino.entry(e.ino).or_default().insert(rel.clone());
        }
    }
    by_ino.into_values().filter(|g| g.len() > 1).collect()
}

/// Differences between the trees of the legs (empty = identical).
pub fn legs_differences(legs: &[PathBuf]) -> Vec<String> {
    assert!(!legs.is_empty());
    let walks: Vec<_> = legs.iter().map(|l| walk_leg(l)).collect();
    let mut diffs = Vec::new();
    let base = &walks[0];
    let base_leg = &legs[0];
    for (i, w) in walks.iter().enumerate().skip(1) {
        let leg = &legs[i];
        let a: BTreeSet<&PathBuf> = base.keys().collect();
        let b: BTreeSet<&PathBuf> = w.keys().collect();
        for p in a.difference(&b) {
            diffs.push(format!(
                "{}: present on {} but missing on {}",
                p.display(),
                base_leg.display(),
                leg.display()
            ));
        }
        for p in b.difference(&a) {
            diffs.push(format!(
                "{}: present on {} but missing on {}",
                p.display(),
                leg.display(),
                base_leg.display()
            ));
        }
        for p in a.intersection(&b) {
            let x = &base[*p];
            let y = &w[*p];
            let mut d = Vec::new();
            if x.fmt != y.fmt {
                d.push(format!("type {} vs {}", kind_name(x.fmt), kind_name(y.fmt)));
            } else {
                if x.fmt == libc::S_IFREG || x.fmt == libc::S_IFLNK {
                    if x.size != y.size {
                        d.push(format!("size {} vs {}", x.size, y.size));
                    } else if x.fmt == libc::S_IFREG {
                        if let Some(c) = file_content_diff(&x.abs, &y.abs) {
                            d.push(c);
                        }
                    }
                }
                if x.mtime != y.mtime {
                    d.push(format!("mtime {:?} vs {:?} (sec, nsec)", x.mtime, y.mtime));
                }
                if x.rdev != y.rdev {
                    d.push(format!("rdev {:?} vs {:?}", x.rdev, y.rdev));
                }
                if x.link_target != y.link_target {
                    d.push(format!(
                        "symlink target {:?} vs {:?}",
                        x.link_target, y.link_target
                    ));
                }
            }
            if x.mode != y.mode {
                d.push(format!("mode {:04o} vs {:04o}", x.mode, y.mode));
            }
            if x.uid != y.uid || x.gid != y.gid {
                d.push(format!("owner {}:{} vs {}:{}", x.uid, x.gid, y.uid, y.gid));
            }
            if x.xattrs != y.xattrs {
                d.push(format!(
                    "xattrs {} vs {}",
                    fmt_xattrs(&x.xattrs),
                    fmt_xattrs(&y.xattrs)
                ));
            }
            if x.fmt != libc::S_IFDIR && x.nlink != y.nlink {
                d.push(format!("nlink {} vs {}", x.nlink, y.nlink));
            }
            if !d.is_empty() {
                diffs.push(format!(
                    "{}: {} (leg {} vs leg {})",
                    p.display(),
                    d.join("; "),
                    base_leg.display(),
                    leg.display()
                ));
            }
        }
        let ga = link_groups(base);
        let gb = link_groups(w);
        if ga != gb {
            diffs.push(format!(
                "hard-link groups differ: {:?} on {} vs {:?} on {}",
                ga,
                base_leg.display(),
                gb,
                leg.display()
            ));
        }
    }
    diffs
}

/// Assert that all legs hold the same tree (see module docs for what is compared).
#[track_caller]
pub fn assert_legs_identical(legs: &[PathBuf]) {
    let diffs = legs_differences(legs);
    if !diffs.is_empty() {
        let shown: Vec<&String> = diffs.iter().take(40).collect();
        panic!(
            "legs differ ({} differences):\n  {}",
            diffs.len(),
            shown
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n  ")
        );
    }
}

/// `.mirrorfs` is not listed in the mount root, and `mnt/.mirrorfs` is the control file (an
/// empty regular file), never the legs' metadata folder: nothing can be reached below it.
#[track_caller]
pub fn assert_no_mirrorfs_leak(mnt: &Path) {
    let names: Vec<OsString> = fs::read_dir(mnt)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", mnt.display()))
        .map(|e| e.expect("readdir entry").file_name())
        .collect();
    assert!(
        !names.iter().any(|n| n == ".mirrorfs"),
        ".mirrorfs is listed in the mount root {}: {names:?}",
        mnt.display()
    );
    let st = stat(mnt.join(".mirrorfs")).expect("stat(mnt/.mirrorfs): the control file");
    assert_eq!(
        (st.st_mode & libc::S_IFMT, st.st_size),
        (libc::S_IFREG, 0),
        "mnt/.mirrorfs is not an empty regular file"
    );
    assert_errno(
        stat(mnt.join(".mirrorfs/superblock.json")),
        libc::ENOTDIR,
        "stat(mnt/.mirrorfs/superblock.json)",
    );
}

/// Names in a directory (sorted), without `.` and `..`.
pub fn dir_names<P: AsRef<Path>>(p: P) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(&p)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", p.as_ref().display()))
        .map(|e| {
            e.expect("readdir")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    v.sort();
    v
}

// ---------------------------------------------------------------------------------------------
// Snapshots (bad-input tests: "nothing on any leg changed")
// ---------------------------------------------------------------------------------------------

/// A full description of a tree (everything, `.mirrorfs` included), for before/after checks.
pub fn snapshot_tree(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    fn describe(p: &Path) -> String {
        let md = match fs::symlink_metadata(p) {
            Ok(m) => m,
            Err(e) => return format!("<lstat error {e}>"),
        };
        let mut s = format!(
            "mode={:o} uid={} gid={} size={} mtime={}.{:09} ino={} nlink={}",
            md.mode(),
            md.uid(),
            md.gid(),
            if md.is_dir() { 0 } else { md.size() },
            md.mtime(),
            md.mtime_nsec(),
            md.ino(),
            md.nlink()
        );
        if md.file_type().is_symlink() {
            s += &format!(" -> {:?}", fs::read_link(p).ok());
        } else if md.is_file() {
            let c = fs::read(p).unwrap_or_default();
            s += &format!(" content={:?}", String::from_utf8_lossy(&c));
        }
        // A file's checksum identity (`user.mirrorfs.id`, docs/integrity.md) is mirrorfs's own
        // metadata, given to adopted files in the background: not part of the data.
        let mut x = all_xattrs(p);
        x.remove("user.mirrorfs.id");
        s += &format!(" xattrs={}", fmt_xattrs(&x));
        s
    }
    out.insert(PathBuf::from("."), describe(root));
    if !root.is_dir()
        || fs::symlink_metadata(root)
            .map(|m| m.file_type().is_symlink())
            .unwrap_or(false)
    {
        return out;
    }
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        let Ok(rd) = fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            let r = rel.join(e.file_name());
            let abs = root.join(&r);
            if fs::symlink_metadata(&abs)
                .map(|m| m.is_dir())
                .unwrap_or(false)
            {
                stack.push(r.clone());
            }
            out.insert(r, describe(&abs));
        }
    }
    out
}

/// Assert two snapshots are equal, listing the differing paths.
#[track_caller]
pub fn assert_snapshot_eq(
    before: &BTreeMap<PathBuf, String>,
    after: &BTreeMap<PathBuf, String>,
    what: &str,
) {
    if before == after {
        return;
    }
    let mut d = Vec::new();
    for (k, v) in before {
        match after.get(k) {
            None => d.push(format!("{}: removed", k.display())),
            Some(w) if w != v => d.push(format!("{}: {v} -> {w}", k.display())),
            _ => {}
        }
    }
    for k in after.keys() {
        if !before.contains_key(k) {
            d.push(format!("{}: created", k.display()));
        }
    }
    panic!("{what} changed:\n  {}", d.join("\n  "));
}

/// Starts `mirrorfs -f EXTRA... LEGS MNT` over `d`, its stderr in `ROOT/fg.stderr`, and waits
/// (20 s at most) until it is mounted.
pub fn start_foreground_with(d: &TestDirs, extra: &[&str]) -> std::process::Child {
    let errfile = fs::File::create(d.root().join("fg.stderr")).unwrap();
    let mut child = std::process::Command::new(mirrorfs_bin())
        .arg("-f")
        .args(extra)
        .arg(d.legs_arg())
        .arg(&d.mnt)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(errfile)
        .spawn()
        .expect("spawn mirrorfs -f");
    if !wait_mounted(&d.mnt, true, Duration::from_secs(20)) {
        let _ = child.kill();
        let _ = child.wait();
        let err = fs::read_to_string(d.root().join("fg.stderr")).unwrap_or_default();
        panic!("mirrorfs -f did not mount within 20 s; stderr: {err}");
    }
    child
}

/// What a caller's request fails with once the daemon is gone: ENOTCONN once the connection is
/// down, ECONNABORTED for a request the daemon had taken, and, over io_uring, ECANCELED for a
/// request the kernel was handing to a queue whose thread had died (`fuse_uring_send_in_task`
/// finds the task dead).
pub const DEAD_DAEMON_ERRNOS: [i32; 3] = [libc::ENOTCONN, libc::ECONNABORTED, libc::ECANCELED];
