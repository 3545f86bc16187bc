//! `lost+found`: at the root of a leg that is the root of its own filesystem it belongs to that
//! filesystem, so it is neither mirrored, compared nor shown; on a leg that is a plain
//! directory it is an ordinary name.

#[macro_use]
mod common;

use common::*;
use std::fs;

#[test]
fn lost_found_of_leg_filesystems_is_ignored() {
    require_fuse!();
    let mut dirs = TestDirs::new(2);
    dirs.mount_tmpfs_leg(0, "32m");
    dirs.mount_tmpfs_leg(1, "32m");
    // Only leg0 has a lost+found, with something in it, as after an fsck.
    let lf = dirs.legs[0].join("lost+found");
    fs::create_dir(&lf).unwrap();
    chmod(&lf, 0o700).unwrap();
    fs::write(lf.join("#1234"), b"orphan").unwrap();
    let lf_before = snapshot_tree(&lf);

    let m = TestMirror::new(2).with_dirs(dirs).mount(); // must not say "legs differ"
    assert_eq!(
        dir_names(m.mnt()),
        Vec::<String>::new(),
        "lost+found of a leg filesystem is shown through the mount"
    );
    assert_errno(
        lstat(m.path("lost+found")),
        libc::ENOENT,
        "lstat mnt/lost+found",
    );
    fs::write(m.path("f"), b"data").unwrap();
    fs::create_dir(m.path("d")).unwrap();
    assert_content_on_legs(m.legs(), "f", b"data");
    assert!(
        !m.leg(1).join("lost+found").exists(),
        "lost+found was mirrored to leg1"
    );
    assert_snapshot_eq(&lf_before, &snapshot_tree(&lf), "leg0/lost+found");
    m.finish();
}

#[test]
fn lost_found_on_plain_directory_legs_is_ordinary() {
    require_fuse!();
    let m = TestMirror::new(2).mount();
    fs::create_dir(m.path("lost+found")).expect("mkdir lost+found on plain-directory legs");
    fs::write(m.path("lost+found/x"), b"x").unwrap();
    assert_eq!(dir_names(m.mnt()), vec!["lost+found"]);
    assert_content_on_legs(m.legs(), "lost+found/x", b"x");
    m.finish();
}
