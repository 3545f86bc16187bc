//! Daemon lifecycle: background mode returns once the mount answers and lets go of the
//! caller's stdio; foreground mode (`-f`) ends with exit 0 on SIGTERM, SIGINT and umount, and
//! on a signal that comes while a program is inside the mount, once it lets go.

#[macro_use]
mod common;

use common::*;
use std::fs;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Start `mirrorfs -f LEGS MNT` and wait until it is mounted.
fn start_foreground(d: &TestDirs) -> Child {
    start_foreground_with(d, &[])
}

/// Kills and reaps the foreground child and unmounts, whatever happens in the test.
struct FgGuard<'a> {
    child: Child,
    mnt: &'a std::path::Path,
}

impl Drop for FgGuard<'_> {
    fn drop(&mut self) {
        if is_mounted(self.mnt) {
            let _ = unmount_path(self.mnt);
        }
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `mirrorfs -f` ends with exit 0 on `sig`, unmounted, the legs identical. With `busy`, a file
/// stays open on the mount for that long after the signal: a plain unmount fails then (EBUSY),
/// and the daemon must try again until the program lets go, not lose the signal.
fn foreground_signal(sig: i32, busy: Option<Duration>) {
    require_fuse!();
    let d = TestDirs::new(2);
    let mut g = FgGuard {
        child: start_foreground(&d),
        mnt: &d.mnt,
    };
    fs::write(d.mnt.join("f"), b"fg").unwrap();
    assert_content_on_legs(&d.legs, "f", b"fg");
    let open = busy.map(|_| fs::File::open(d.mnt.join("f")).unwrap());
    assert_eq!(
        unsafe { libc::kill(g.child.id() as i32, sig) },
        0,
        "kill({sig})"
    );
    if let Some(hold) = busy {
        std::thread::sleep(hold);
        assert!(
            g.child.try_wait().unwrap().is_none(),
            "the daemon ended while a file was open on its mount"
        );
        drop(open);
    }
    let st = wait_timeout(
        &mut g.child,
        Duration::from_secs(20),
        "mirrorfs -f after signal",
    );
    let err = fs::read_to_string(d.root().join("fg.stderr")).unwrap_or_default();
    assert_eq!(
        st.code(),
        Some(0),
        "mirrorfs -f exit status after signal {sig}: {st}; stderr: {err}"
    );
    assert!(
        wait_mounted(&d.mnt, false, Duration::from_secs(5)),
        "{} is still mounted after mirrorfs -f exited on signal {sig}",
        d.mnt.display()
    );
    assert_legs_identical(&d.legs);
}

#[test]
fn foreground_exits_zero_on_sigterm() {
    foreground_signal(libc::SIGTERM, None);
}

#[test]
fn foreground_exits_zero_on_sigint() {
    foreground_signal(libc::SIGINT, None);
}

/// Held a moment, then longer than the 2 s after which the daemon says in the log that it
/// waits for the mount to be free.
#[test]
fn a_signal_while_the_mount_is_busy_unmounts_once_it_is_not() {
    foreground_signal(libc::SIGTERM, Some(Duration::from_millis(500)));
}

#[test]
fn a_signal_while_the_mount_stays_busy_waits_for_it() {
    foreground_signal(libc::SIGTERM, Some(Duration::from_secs(3)));
}

#[test]
fn foreground_exits_zero_on_umount() {
    require_fuse!();
    let d = TestDirs::new(3);
    let mut g = FgGuard {
        child: start_foreground(&d),
        mnt: &d.mnt,
    };
    fs::write(d.mnt.join("f"), b"x").unwrap();
    let out = run_timeout(Command::new("umount").arg(&d.mnt), Duration::from_secs(20));
    assert!(
        out.status.success(),
        "umount: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let st = wait_timeout(
        &mut g.child,
        Duration::from_secs(20),
        "mirrorfs -f after umount",
    );
    let err = fs::read_to_string(d.root().join("fg.stderr")).unwrap_or_default();
    assert_eq!(
        st.code(),
        Some(0),
        "mirrorfs -f exit status after umount: {st}; stderr: {err}"
    );
    assert_legs_identical(&d.legs);
}

#[test]
fn background_returns_once_mount_answers() {
    require_fuse!();
    let mut m = TestMirror::new(2).mount();
    // Right after the parent exits, the mount is there and answers.
    let st_mnt = lstat_ok(m.mnt());
    let st_parent = lstat_ok(m.root());
    assert_ne!(
        st_mnt.st_dev, st_parent.st_dev,
        "the mount point is not a separate filesystem when mirrorfs returns"
    );
    let e = mount_entry_at(m.mnt()).unwrap();
    assert!(e.fstype.starts_with("fuse"), "fstype is {:?}", e.fstype);
    assert!(dir_names(m.mnt()).is_empty());
    assert!(
        !m.daemon_pids().is_empty(),
        "no mirrorfs process with the mount point in its command line"
    );
    let pids = m.daemon_pids().to_vec();
    m.unmount(); // asserts the daemon exits
    for p in pids {
        assert!(!process_alive(p), "daemon {p} alive after umount");
    }
}

#[test]
fn background_daemon_releases_stdio() {
    require_fuse!();
    // If the daemon kept our pipes open, `out=$(mirrorfs ...)` would hang forever.
    let d = TestDirs::new(2);
    let mut child = Command::new(mirrorfs_bin())
        .arg(d.legs_arg())
        .arg(&d.mnt)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let t = std::thread::spawn(move || {
        use std::io::Read;
        let mut v = Vec::new();
        let _ = so.read_to_end(&mut v);
        let _ = se.read_to_end(&mut v);
        v
    });
    let st = wait_timeout(&mut child, Duration::from_secs(30), "mirrorfs (background)");
    let start = Instant::now();
    while !t.is_finished() && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let released = t.is_finished();
    let pids = daemon_pids(&d.mnt);
    let _ = unmount_path(&d.mnt);
    wait_pids_gone(&pids, Duration::from_secs(10));
    assert!(st.success(), "mirrorfs exit status {st}");
    assert!(
        released,
        "the background daemon still holds the caller's stdout/stderr 5 s after the parent exited"
    );
}

#[test]
fn background_daemon_exits_on_umount_command() {
    require_fuse!();
    let m = TestMirror::new(2).mount();
    let pids = m.daemon_pids().to_vec();
    fs::write(m.path("f"), b"x").unwrap();
    let out = run_timeout(Command::new("umount").arg(m.mnt()), Duration::from_secs(20));
    assert!(
        out.status.success(),
        "umount: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!is_mounted(m.mnt()), "still mounted after umount");
    assert!(
        wait_pids_gone(&pids, Duration::from_secs(10)),
        "daemon {pids:?} still running 10 s after umount"
    );
    assert_legs_identical(m.legs());
}

#[test]
fn foreground_debug_logs_to_stderr() {
    require_fuse!();
    let d = TestDirs::new(2);
    let mut g = FgGuard {
        child: start_foreground_with(&d, &["-d"]),
        mnt: &d.mnt,
    };
    fs::write(d.mnt.join("f"), b"debug").unwrap();
    assert_eq!(fs::read(d.mnt.join("f")).unwrap(), b"debug");
    assert_eq!(unsafe { libc::kill(g.child.id() as i32, libc::SIGTERM) }, 0);
    let st = wait_timeout(&mut g.child, Duration::from_secs(20), "mirrorfs -f -d");
    let err = fs::read_to_string(d.root().join("fg.stderr")).unwrap_or_default();
    assert_eq!(
        st.code(),
        Some(0),
        "mirrorfs -f -d exit status: {st}; stderr: {err}"
    );
    assert!(
        !err.trim().is_empty(),
        "mirrorfs -f -d logged nothing on stderr"
    );
}
