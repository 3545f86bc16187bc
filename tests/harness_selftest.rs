//! Checks of the test harness itself (no FUSE needed): `legs_differences` must see every kind
//! of difference the operation tests rely on, and ignore the root-level `.mirrorfs` and
//! `lost+found`.

mod common;

use common::*;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn twin_legs(setup: impl Fn(&Path)) -> TestDirs {
    let d = TestDirs::new(2);
    setup(&d.legs[0]);
    let out = run_timeout(
        Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", d.legs[0].display()))
            .arg(&d.legs[1]),
        Duration::from_secs(30),
    );
    assert!(out.status.success());
    d
}

fn base(leg: &Path) {
    fs::create_dir_all(leg.join("d/e")).unwrap();
    fs::write(leg.join("d/f"), b"hello").unwrap();
    fs::write(leg.join("g"), pattern(3 << 20, 9)).unwrap();
    symlink("d/f", leg.join("s")).unwrap();
    fs::hard_link(leg.join("g"), leg.join("d/g2")).unwrap();
}

#[track_caller]
/// Writes `content` to `p` (as a new file when `new_inode`, breaking any hard link) and puts
/// back its old atime and mtime, so that only the content or the link structure differs.
fn rewrite_keeping_times(p: &Path, content: &[u8], new_inode: bool) {
    let st = lstat_ok(p);
    if new_inode {
        fs::remove_file(p).unwrap();
    }
    fs::write(p, content).unwrap();
    utimensat(
        p,
        ts(st.st_atime, st.st_atime_nsec),
        ts(st.st_mtime, st.st_mtime_nsec),
        false,
    )
    .unwrap();
}

fn assert_detects(d: &TestDirs, needle: &str) {
    let diffs = legs_differences(&d.legs);
    assert!(
        diffs.iter().any(|x| x.contains(needle)),
        "difference {needle:?} not detected; got {diffs:?}"
    );
}

#[test]
fn identical_copies_pass_and_root_metadata_is_ignored() {
    let d = twin_legs(base);
    fs::create_dir(d.legs[0].join(".mirrorfs")).unwrap();
    fs::write(d.legs[0].join(".mirrorfs/sb"), b"0").unwrap();
    fs::create_dir(d.legs[1].join("lost+found")).unwrap();
    assert_legs_identical(&d.legs);
}

#[test]
fn detects_content_size_mode_owner_mtime() {
    let d = twin_legs(base);
    // Same size, one byte differs deep inside a big file (keep mtime equal).
    let p = d.legs[1].join("g");
    let mut c = fs::read(&p).unwrap();
    c[2_500_000] ^= 1;
    rewrite_keeping_times(&p, &c, false);
    assert_detects(&d, "content differs at offset 2500000");

    let d = twin_legs(base);
    fs::write(d.legs[1].join("d/f"), b"hello!").unwrap();
    assert_detects(&d, "size 5 vs 6");

    let d = twin_legs(base);
    chmod(d.legs[1].join("d/e"), 0o2755).unwrap();
    assert_detects(&d, "mode 0755 vs 2755");

    let d = twin_legs(base);
    lchown(d.legs[1].join("s"), 5, 6).unwrap();
    assert_detects(&d, "owner 0:0 vs 5:6");

    let d = twin_legs(base);
    utimensat(
        d.legs[1].join("d/f"),
        ts(0, libc::UTIME_OMIT),
        ts(1000, 1),
        false,
    )
    .unwrap();
    assert_detects(&d, "mtime");
}

#[test]
fn detects_xattrs_symlinks_links_and_missing() {
    let d = twin_legs(base);
    set_xattr(d.legs[0].join("d"), "user.k", b"v", 0).unwrap();
    assert_detects(&d, "xattrs");

    let d = twin_legs(base);
    fs::remove_file(d.legs[1].join("s")).unwrap();
    symlink("d/F", d.legs[1].join("s")).unwrap();
    assert_detects(&d, "symlink target");

    // Break the hard link on leg1, keeping content and mtime.
    let d = twin_legs(base);
    let p = d.legs[1].join("d/g2");
    let c = fs::read(&p).unwrap();
    rewrite_keeping_times(&p, &c, true);
    assert_detects(&d, "hard-link groups differ");
    assert_detects(&d, "nlink 2 vs 1");

    let d = twin_legs(base);
    fs::write(d.legs[1].join("extra"), b"").unwrap();
    assert_detects(&d, "extra: present on");

    let d = twin_legs(base);
    fs::remove_dir(d.legs[1].join("d/e")).unwrap();
    fs::write(d.legs[1].join("d/e"), b"").unwrap();
    assert_detects(&d, "type directory vs regular file");

    let d = twin_legs(base);
    fs::remove_file(d.legs[1].join("d/f")).unwrap();
    mknod(
        d.legs[1].join("d/f"),
        libc::S_IFCHR | 0o644,
        libc::makedev(1, 3),
    )
    .ok();
    assert!(!legs_differences(&d.legs).is_empty());
}

#[test]
fn snapshots_see_any_change() {
    let d = twin_legs(base);
    let before = snapshot_tree(&d.legs[0]);
    assert_eq!(before, snapshot_tree(&d.legs[0]));
    fs::create_dir(d.legs[0].join(".mirrorfs")).unwrap();
    let after = snapshot_tree(&d.legs[0]);
    let r = std::panic::catch_unwind(|| assert_snapshot_eq(&before, &after, "leg"));
    assert!(r.is_err(), "creating .mirrorfs was not seen");
}

#[test]
fn mountinfo_parses() {
    let e = mount_entry_at("/proc").expect("/proc is a mount point");
    assert_eq!(e.fstype, "proc");
    assert!(!is_mounted("/definitely/not/mounted"));
}
