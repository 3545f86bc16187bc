//! Unmounting that returns only once the daemon has let go of its legs.
//!
//! The kernel's unmount of a FUSE mount returns as soon as the mount is gone; the daemon then
//! still flushes the legs, writes their clean superblocks and closes its descriptors, which
//! takes a moment. Unmounting a leg's disk right after `umount MNT` (what systemd does at
//! shutdown, mirror first and its disks next) then fails with "target is busy", and a power
//! loss in that moment finds the legs not clean. So `mirrorfs unmount MNT`, and the same
//! program installed as `/sbin/umount.fuse.mirrorfs` (util-linux's umount runs
//! `umount.<type>` when it exists, for `umount MNT` and for systemd), unmount and then wait
//! until the daemon process has exited: by then every leg is flushed, marked clean and closed.

use super::control;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The exit status of umount(8) for a failed unmount.
pub const EXIT_FAILED: i32 = 32;

/// How long to wait for the daemon by default.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(120);

/// The process start time (`/proc/PID/stat` field 22), so that a reused pid is not taken
/// for the daemon; `None` once it is gone, or a zombie with no thread left (then its
/// descriptors are closed: a leader shows Z as soon as it exits itself, while the other
/// threads, which share the descriptors, may still be going).
fn start_time(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    // Field 3 is the state, 20 the number of threads, 22 the start time.
    let threads: u64 = fields.nth(16)?.parse().ok()?;
    let started = fields.nth(1)?.parse().ok()?;
    if (state == "Z" || state == "X") && threads <= 1 {
        return None;
    }
    Some(started)
}

/// The daemon serving `mount`: its pid and start time, read before unmounting.
fn daemon_of(mount: &Path) -> Option<(u32, u64)> {
    let pid: u32 = String::from_utf8(control::get(mount, "pid").ok()?)
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some((pid, start_time(pid)?))
}

/// Unmounts `mount` (lazily with `lazy`, forced with `force`) and waits up to `wait` for its
/// daemon to exit. Prints one line and returns [`EXIT_FAILED`] when the unmount fails.
pub fn unmount(mount: &Path, lazy: bool, force: bool, wait: Duration) -> i32 {
    let daemon = daemon_of(mount);
    let flags = if lazy { libc::MNT_DETACH } else { 0 } | if force { libc::MNT_FORCE } else { 0 };
    if let Err(e) = crate::sys::umount(mount, flags) {
        // A user's own mount: fusermount3 may do what the syscall may not.
        let done = e.raw_os_error() == Some(libc::EPERM)
            && std::process::Command::new("fusermount3")
                .arg(if lazy { "-uz" } else { "-u" })
                .arg(mount)
                .status()
                .is_ok_and(|s| s.success());
        if !done {
            let why = match e.raw_os_error() {
                Some(libc::EBUSY) => "target is busy".to_string(),
                Some(libc::EINVAL) => "not mounted".to_string(),
                _ => e.to_string(),
            };
            eprintln!("mirrorfs: {}: cannot unmount: {why}", mount.display());
            return EXIT_FAILED;
        }
    }
    // A lazy unmount ends only when the last user lets go: nothing to wait for now.
    let Some((pid, started)) = daemon.filter(|_| !lazy) else {
        return 0;
    };
    let t0 = Instant::now();
    while start_time(pid) == Some(started) {
        if t0.elapsed() > wait {
            eprintln!(
                "mirrorfs: {}: unmounted, but its daemon (pid {pid}) has not exited after {}s: \
                 its legs may still be busy",
                mount.display(),
                wait.as_secs()
            );
            return 0;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    0
}

/// Run as `umount.fuse.mirrorfs` (or `umount.mirrorfs`) by umount(8):
/// `umount.fuse.mirrorfs TARGET [-flnrv] [-N NS] [-t TYPE]`.
pub fn helper(args: &[OsString]) -> i32 {
    let mut target: Option<PathBuf> = None;
    let (mut lazy, mut force) = (false, false);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let s = a.to_string_lossy();
        match s.as_ref() {
            "-N" | "--namespace" => {
                eprintln!("mirrorfs: umount helper: -N (another mount namespace) is not supported");
                return EXIT_FAILED;
            }
            "-t" | "--types" => {
                it.next();
            }
            _ if s.starts_with('-') && s.len() > 1 => {
                lazy |= s.contains('l');
                force |= s.contains('f');
            }
            _ => target = Some(PathBuf::from(a)),
        }
    }
    let Some(target) = target else {
        eprintln!("mirrorfs: umount helper: no mount point given");
        return EXIT_FAILED;
    };
    unmount(&target, lazy, force, DEFAULT_WAIT)
}
