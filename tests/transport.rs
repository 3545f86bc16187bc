//! `-o transport=auto|uring|devfuse` (issue 24): which transport a mount uses, and why, in the
//! stats; `uring` refused with the fix while the kernel's switch is off; the io_uring queues
//! doing the serving when it is on.
//!
//! The switch (`/sys/module/fuse/parameters/enable_uring`) is global, so these tests never
//! flip it: `make test` runs the suite once with it off and once with it on, and each test
//! here checks what that state must give.

#[macro_use]
mod common;

use common::*;
use std::fs;
use std::path::Path;

const SWITCH: &str = "/sys/module/fuse/parameters/enable_uring";

/// The kernel's switch; a kernel without one fails the test (this project's machines have it).
fn switch_on() -> bool {
    let s = fs::read_to_string(SWITCH)
        .unwrap_or_else(|e| panic!("{SWITCH}: {e} (a kernel without FUSE over io_uring)"));
    s.trim() == "Y"
}

fn possible_cpus() -> usize {
    let t = fs::read_to_string("/sys/devices/system/cpu/possible").unwrap();
    t.trim()
        .split(',')
        .map(|p| p.rsplit('-').next().unwrap().parse::<usize>().unwrap() + 1)
        .max()
        .unwrap()
}

/// CPU ticks (user + system) of the daemon's threads whose name starts with `prefix`.
fn thread_ticks(pid: i32, prefix: &str) -> (usize, u64) {
    let mut n = 0;
    let mut ticks = 0;
    for t in fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let comm = fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if !comm.trim().starts_with(prefix) || comm.contains("join") {
            continue;
        }
        n += 1;
        let stat = fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        let fields: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect();
        // Fields 14 and 15 of stat; after the ")" they are the 12th and 13th.
        ticks += fields
            .get(11)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0);
        ticks += fields
            .get(12)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0);
    }
    (n, ticks)
}

/// Creates, stats, writes and removes `n` files: a load of small requests.
fn small_requests(dir: &Path, n: usize) {
    fs::create_dir_all(dir).unwrap();
    for i in 0..n {
        let p = dir.join(format!("f{i}"));
        fs::write(&p, format!("file {i}")).unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), format!("file {i}"));
    }
    for i in 0..n {
        fs::remove_file(dir.join(format!("f{i}"))).unwrap();
    }
}

#[test]
fn the_stats_say_which_transport_serves_and_why() {
    require_fuse!();
    require_tool!("getfattr");
    let m = TestMirror::new(2).mount();
    let t = stats(m.mnt())
        .transport
        .expect("the stats have a transport once mounted");
    assert_eq!(
        getfattr_ok(&m.mnt().join(".mirrorfs"), "user.mirrorfs.transport"),
        "auto"
    );
    let pid = daemon_pids(m.mnt())[0];
    if switch_on() {
        assert_eq!(t.kind, "uring", "{t:?}");
        assert!(t.why.contains("transport=auto"), "{t:?}");
        assert_eq!(
            t.queues,
            possible_cpus(),
            "one queue per possible CPU: {t:?}"
        );
        assert_eq!(t.queue_depth, 16);
        let (queues, _) = thread_ticks(pid, "fuse-q");
        assert!(queues >= possible_cpus(), "queue threads: {queues}");
        // The rings serve: their threads do the work of a load of small requests.
        small_requests(&m.path("d"), 1500);
        let (_, ring) = thread_ticks(pid, "fuse-q");
        assert!(ring > 0, "the queue threads served nothing");
    } else {
        assert_eq!(t.kind, "devfuse", "{t:?}");
        assert!(t.why.contains("enable_uring is N"), "{t:?}");
        assert_eq!(t.queues, 0);
        assert_eq!(
            thread_ticks(pid, "fuse-q").0,
            0,
            "no queue threads over /dev/fuse"
        );
        small_requests(&m.path("d"), 300);
    }
}

#[test]
fn transport_uring_is_refused_with_the_fix_while_the_switch_is_off() {
    require_fuse!();
    let dirs = TestDirs::new(2);
    let out = run_mirrorfs(&[
        dirs.legs_arg(),
        path_str(&dirs.mnt),
        "-o".into(),
        "transport=uring".into(),
    ]);
    if switch_on() {
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let t = stats(&dirs.mnt).transport.unwrap();
        assert_eq!(t.kind, "uring", "{t:?}");
        assert!(t.why.contains("transport=uring"), "{t:?}");
        fs::write(dirs.mnt.join("x"), b"over the rings").unwrap();
        assert_content_on_legs(&dirs.legs, "x", b"over the rings");
        let u = run_mirrorfs(&["unmount".into(), path_str(&dirs.mnt)]);
        assert_eq!(u.status.code(), Some(0), "{u:?}");
        return;
    }
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("echo Y > /sys/module/fuse/parameters/enable_uring"),
        "the fix: {err}"
    );
    assert!(err.contains("transport=devfuse"), "{err}");
    assert!(!is_mounted(&dirs.mnt));
    for l in &dirs.legs {
        assert!(
            !l.join(".mirrorfs").exists(),
            "a refused mount touched {}",
            l.display()
        );
    }
}

#[test]
fn transport_devfuse_serves_whatever_the_switch() {
    require_fuse!();
    let m = TestMirror::new(2).option("transport=devfuse").mount();
    let t = stats(m.mnt()).transport.unwrap();
    assert_eq!(t.kind, "devfuse", "{t:?}");
    assert_eq!(t.why, "transport=devfuse");
    assert_eq!(thread_ticks(daemon_pids(m.mnt())[0], "fuse-q").0, 0);
    small_requests(&m.path("d"), 300);
}

#[test]
fn a_transport_that_does_not_exist_is_refused_in_one_line() {
    require_fuse!();
    let dirs = TestDirs::new(2);
    for bad in ["transport=rdma", "transport=", "transport"] {
        let out = run_mirrorfs(&[
            dirs.legs_arg(),
            path_str(&dirs.mnt),
            "-o".into(),
            bad.into(),
        ]);
        assert_eq!(out.status.code(), Some(1), "{bad}: {out:?}");
        let err = text(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{bad}: {err}");
        assert!(err.contains("transport"), "{bad}: {err}");
        assert!(!is_mounted(&dirs.mnt));
        for l in &dirs.legs {
            assert!(
                !l.join(".mirrorfs").exists(),
                "{bad} touched {}",
                l.display()
            );
        }
    }
}
