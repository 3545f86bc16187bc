//! Unmounting that releases the disks (issue 14, item 10): `umount.fuse.mirrorfs MNT`, called as
//! util-linux's umount calls a helper, and `mirrorfs unmount MNT`, return only once the daemon
//! has flushed the legs, marked them clean and exited. 20 rounds of writes, unmount, and an
//! immediate unmount of each leg's "disk" (a bind mount, which is busy while any descriptor of
//! the daemon is open in it): every disk unmount succeeds at the first try, and the superblocks
//! are clean for the next mount. (Without the helper, plain `umount MNT` followed at once by
//! the legs' unmount failed 10 times out of 10 on the machine this was written on.)

#[macro_use]
mod common;

use common::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn bind(src: &Path, dst: &Path) {
    let out = run(
        "mount",
        &[&"--bind", &src.as_os_str(), &dst.as_os_str()],
        TOOL_TIMEOUT,
    );
    assert_exit(&out, 0, "mount --bind");
}

/// The helper, as umount(8) runs it: a program named umount.fuse.mirrorfs.
fn helper(dir: &Path) -> PathBuf {
    let h = dir.join("umount.fuse.mirrorfs");
    std::os::unix::fs::symlink(mirrorfs_bin(), &h).unwrap();
    h
}

#[test]
fn twenty_rounds_the_leg_disks_unmount_at_once() {
    require_fuse!();
    let d = TestDirs::new(2);
    let disks: Vec<PathBuf> = (0..2).map(|i| d.root().join(format!("disk{i}"))).collect();
    for p in &disks {
        fs::create_dir(p).unwrap();
    }
    let h = helper(d.root());
    for round in 0..20 {
        for (disk, leg) in disks.iter().zip(&d.legs) {
            bind(disk, leg);
        }
        let mut m = mount_ok(&d.legs, &d.mnt, &[]);
        let pids = daemon_pids(&d.mnt);
        for i in 0..5 {
            fs::write(
                d.mnt.join(format!("r{round}-{i}")),
                pattern(256 * KIB, round * 10 + i),
            )
            .unwrap();
        }
        // Half the rounds through the helper as umount(8) calls it, half through the
        // subcommand.
        let out = if round % 2 == 0 {
            run_timeout(Command::new(&h).arg(&d.mnt).arg("-n"), TOOL_TIMEOUT)
        } else {
            run_mirrorfs(["unmount".as_ref(), d.mnt.as_os_str()])
        };
        assert_exit(&out, 0, &format!("round {round}: unmount"));
        assert!(!is_mounted(&d.mnt), "round {round}: still mounted");
        assert!(
            pids.iter().all(|p| !process_alive(*p)),
            "round {round}: the daemon {pids:?} is still running when unmount returned"
        );
        // The disks, at once: no retry.
        for leg in &d.legs {
            umount2(leg, 0).unwrap_or_else(|e| {
                let _ = umount2(leg, libc::MNT_DETACH);
                panic!(
                    "round {round}: umount {} right after unmounting the mirror: {e}",
                    leg.display()
                )
            });
        }
        for disk in &disks {
            let sb = superblock(disk);
            assert_eq!(sb["clean"], true, "round {round}: {}: {sb}", disk.display());
        }
        m.unmount(); // (already unmounted: forgets it)
    }
    // Everything written is on both disks.
    for disk in &disks {
        for round in 0..20u64 {
            assert_eq!(
                fs::read(disk.join(format!("r{round}-4"))).unwrap(),
                pattern(256 * KIB, round * 10 + 4)
            );
        }
    }
}

#[test]
fn refusals_and_lazy() {
    require_fuse!();
    let dir = tempfile::tempdir().unwrap();
    // Not mounted: exit 32, one line.
    let out = run_mirrorfs(["unmount".as_ref(), dir.path().as_os_str()]);
    assert_exit(&out, 32, "unmount of a directory that is not mounted");
    let h = helper(dir.path());
    let out = run_timeout(&mut Command::new(&h), TOOL_TIMEOUT);
    assert_exit(&out, 32, "the helper without a mount point");

    // Busy: refused, still mounted, the daemon still serving.
    let m = TestMirror::new(2).mount();
    fs::write(m.path("f"), b"open").unwrap();
    let f = fs::File::open(m.path("f")).unwrap();
    let out = run_mirrorfs(["unmount".as_ref(), m.mnt().as_os_str()]);
    assert_exit(&out, 32, "unmount while a file is open");
    assert!(
        text(&out.stderr).contains("target is busy"),
        "{}",
        text(&out.stderr)
    );
    assert!(is_mounted(m.mnt()));
    assert_eq!(fs::read(m.path("f")).unwrap(), b"open");
    // Lazy: detached at once; the daemon goes when the file is closed.
    let pids = m.daemon_pids().to_vec();
    let out = run_timeout(Command::new(&h).arg(m.mnt()).arg("-l"), TOOL_TIMEOUT);
    assert_exit(&out, 0, "lazy unmount");
    assert!(!is_mounted(m.mnt()));
    drop(f);
    assert!(
        wait_pids_gone(&pids, Duration::from_secs(10)),
        "the daemon did not exit once the last file was closed"
    );
    drop(m);
}

/// A mirror started by hand has a line in libmount's utab while it is mounted (so umount(8)
/// looks for umount.fuse.mirrorfs instead of taking its shortcut for plain `fuse`), and none
/// once it is unmounted; a line left by a daemon that was killed is pruned at the next mount.
#[test]
fn utab_entry_while_mounted() {
    require_fuse!();
    let entry = |mnt: &Path| {
        fs::read_to_string("/run/mount/utab")
            .unwrap_or_default()
            .lines()
            .any(|l| {
                l.split(' ')
                    .any(|f| f == format!("TARGET={}", mnt.display()))
                    && l.ends_with("OPTS=x-mirrorfs")
            })
    };
    // A line a killed daemon left behind (its mount is gone) is pruned by the next mount.
    let stale = Path::new("/nonexistent/mirrorfs-test-stale");
    {
        fs::create_dir_all("/run/mount").unwrap();
        let lock = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open("/run/mount/utab.lock")
            .unwrap();
        lock.lock().unwrap();
        let mut f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open("/run/mount/utab")
            .unwrap();
        use std::io::Write;
        writeln!(f, "SRC=x TARGET={} ROOT=/ OPTS=x-mirrorfs", stale.display()).unwrap();
    }
    assert!(entry(stale));
    let mut m = TestMirror::new(2).mount();
    assert!(entry(m.mnt()), "no utab line for {}", m.mnt().display());
    assert!(!entry(stale), "the stale line is still there");
    let mnt = m.mnt().to_path_buf();
    m.unmount();
    assert!(
        !entry(&mnt),
        "the utab line of {} outlived the mount",
        mnt.display()
    );
}
