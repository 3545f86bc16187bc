//! The control file `MOUNT/.mirrorfs` through a real mount (issue 5): an empty regular file at
//! the root only, absent from readdir, listing the mount-wide keys, and refusing every change
//! (write, truncate, chmod, xattrs, create over it, remove, rename, link) with the legs'
//! metadata folders left alone.

#[macro_use]
mod common;

use common::*;
use std::fs::{self, File};
use std::os::unix::fs::{symlink, OpenOptionsExt};

legs_test!(control_file_is_empty_hidden_and_unchangeable);

fn control_file_is_empty_hidden_and_unchangeable(n: usize) {
    require_fuse!();
    require_tool!("getfattr");
    let m = TestMirror::new(n).mount();
    let ctl = m.path(".mirrorfs");
    fs::write(m.path("f"), b"f").unwrap();
    fs::create_dir(m.path("d")).unwrap();
    let meta_before: Vec<_> = m
        .legs()
        .iter()
        .map(|l| snapshot_tree(&l.join(".mirrorfs")))
        .collect();
    assert!(
        meta_before[0].len() > 1,
        "the legs have a .mirrorfs/ folder"
    );

    // stat: an empty regular file.
    let st = stat(&ctl).expect("stat .mirrorfs");
    assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFREG);
    assert_eq!(st.st_size, 0);
    assert_eq!(st.st_nlink, 1);
    assert_eq!(lstat_ok(&ctl).st_ino, st.st_ino);
    let out = run("stat", &[&"-c", &"%F", &ctl], TOOL_TIMEOUT);
    assert_eq!(text(&out.stdout).trim(), "regular empty file");
    // Absent from readdir (ls -a), present for lookups.
    let out = run("ls", &[&"-a", &m.mnt()], TOOL_TIMEOUT);
    let names: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
    assert_eq!(names, vec![".", "..", "d", "f"], "ls -a of the root");
    assert_eq!(fs::read(&ctl).unwrap(), b"", "the control file reads empty");
    // Only at the root.
    assert_errno(lstat(m.path("d/.mirrorfs")), libc::ENOENT, "d/.mirrorfs");

    // getfattr -d lists the keys, and every listed key is readable.
    let out = run("getfattr", &[&"-d", &ctl], TOOL_TIMEOUT);
    assert!(out.status.success(), "getfattr -d: {}", text(&out.stderr));
    let dumped = text(&out.stdout);
    for k in [
        "stats",
        "version",
        "pid",
        "mount",
        "state",
        "legs",
        "read_policy",
        "threads",
    ] {
        assert!(
            dumped.contains(&format!("\nuser.mirrorfs.{k}=")),
            "getfattr -d .mirrorfs lacks {k}:\n{dumped}"
        );
    }
    let listed = list_xattr(&ctl).unwrap();
    assert!(listed.len() >= 8, "{listed:?}");
    for k in &listed {
        assert!(k.starts_with("user.mirrorfs."), "{k} listed on .mirrorfs");
        get_xattr(&ctl, k).unwrap_or_else(|e| panic!("listed key {k} is unreadable: {e}"));
    }
    assert!(!listed.iter().any(|k| k.ends_with(".stats_reset")));
    // Per-file keys belong to files, not to the control file.
    assert_errno(
        get_xattr(&ctl, "user.mirrorfs.relpath"),
        libc::ENODATA,
        "relpath of .mirrorfs",
    );

    // It cannot be written, truncated, replaced, or changed.
    assert_errno(
        fs::OpenOptions::new().write(true).open(&ctl),
        libc::EACCES,
        "open .mirrorfs for writing",
    );
    assert_errno(
        fs::OpenOptions::new().read(true).write(true).open(&ctl),
        libc::EACCES,
        "open .mirrorfs O_RDWR",
    );
    assert_errno(
        fs::OpenOptions::new().append(true).open(&ctl),
        libc::EACCES,
        "open .mirrorfs O_APPEND",
    );
    assert_errno(
        fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_TRUNC)
            .open(&ctl),
        libc::EPERM,
        "open .mirrorfs O_RDONLY|O_TRUNC",
    );
    assert_errno(fs::write(&ctl, b"x"), libc::EACCES, "write .mirrorfs");
    assert_errno(truncate(&ctl, 0), libc::EPERM, "truncate .mirrorfs");
    assert_errno(
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&ctl),
        libc::EEXIST,
        "O_CREAT|O_EXCL .mirrorfs",
    );
    assert_errno(chmod(&ctl, 0o600), libc::EPERM, "chmod .mirrorfs");
    assert_errno(chown(&ctl, NOBODY, NOGROUP), libc::EPERM, "chown .mirrorfs");
    assert_errno(
        utimensat(&ctl, ts(1, 0), ts(1, 0), false),
        libc::EPERM,
        "utimensat .mirrorfs",
    );
    assert_errno(
        set_xattr(&ctl, "user.note", b"1", 0),
        libc::EPERM,
        "setxattr user.note on .mirrorfs",
    );
    assert_errno(
        remove_xattr(&ctl, "user.note"),
        libc::ENODATA,
        "removexattr user.note on .mirrorfs",
    );
    assert_errno(fs::create_dir(&ctl), libc::EEXIST, "mkdir .mirrorfs");
    assert_errno(mkfifo(&ctl, 0o644), libc::EEXIST, "mkfifo .mirrorfs");
    assert_errno(symlink("f", &ctl), libc::EEXIST, "symlink .mirrorfs");
    assert_errno(
        fs::hard_link(m.path("f"), &ctl),
        libc::EEXIST,
        "link f as .mirrorfs",
    );
    assert_errno(fs::remove_dir(&ctl), libc::ENOTDIR, "rmdir .mirrorfs");
    assert_errno(
        fs::read_dir(&ctl).map(drop),
        libc::ENOTDIR,
        "opendir .mirrorfs",
    );
    assert_errno(
        File::create(m.path(".mirrorfs/x")),
        libc::ENOTDIR,
        "create .mirrorfs/x",
    );
    assert_errno(
        fs::rename(m.path("f"), &ctl),
        libc::EPERM,
        "rename f over .mirrorfs",
    );
    assert_errno(
        renameat2(m.path("f"), &ctl, libc::RENAME_NOREPLACE),
        libc::EEXIST,
        "RENAME_NOREPLACE f to .mirrorfs",
    );
    assert_errno(
        renameat2(m.path("f"), &ctl, libc::RENAME_EXCHANGE),
        libc::EPERM,
        "RENAME_EXCHANGE f with .mirrorfs",
    );
    assert_errno(
        fs::rename(m.path("d"), &ctl),
        libc::ENOTDIR,
        "rename a dir over .mirrorfs",
    );

    let st2 = stat(&ctl).unwrap();
    assert_eq!((st2.st_mode, st2.st_size), (st.st_mode, st.st_size));
    assert_eq!(fs::read(m.path("f")).unwrap(), b"f");
    for (i, l) in m.legs().iter().enumerate() {
        assert_snapshot_eq(
            &meta_before[i],
            &snapshot_tree(&l.join(".mirrorfs")),
            &format!("{}/.mirrorfs", l.display()),
        );
    }
    m.finish();
}

/// Removing, renaming or linking the control file: refused with EPERM, as every other change
/// to it, and the legs' metadata folders stay.
#[test]
fn control_file_cannot_be_removed_renamed_or_linked() {
    require_fuse!();
    let m = TestMirror::new(2).mount();
    let ctl = m.path(".mirrorfs");
    fs::write(m.path("f"), b"f").unwrap();
    let meta_before: Vec<_> = m
        .legs()
        .iter()
        .map(|l| snapshot_tree(&l.join(".mirrorfs")))
        .collect();
    let mut wrong = Vec::new();
    let mut check = |r: std::io::Result<()>, what: &str| match r {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {}
        Err(e) => wrong.push(format!("{what}: {e}, want EPERM")),
        Ok(()) => wrong.push(format!("{what}: succeeded, want EPERM")),
    };
    check(fs::remove_file(&ctl), "unlink .mirrorfs");
    check(fs::rename(&ctl, m.path("stolen")), "rename .mirrorfs away");
    check(
        renameat2(&ctl, m.path("f"), libc::RENAME_EXCHANGE),
        "RENAME_EXCHANGE .mirrorfs with f",
    );
    check(
        fs::hard_link(&ctl, m.path("hl")),
        "link .mirrorfs to another name",
    );
    assert!(
        lstat(m.path("stolen")).is_err() && lstat(m.path("hl")).is_err(),
        "the control file got a second name"
    );
    assert!(stat(&ctl).is_ok(), "the control file is gone");
    for (i, l) in m.legs().iter().enumerate() {
        assert_snapshot_eq(
            &meta_before[i],
            &snapshot_tree(&l.join(".mirrorfs")),
            &format!("{}/.mirrorfs", l.display()),
        );
    }
    assert!(wrong.is_empty(), "wrong errnos:\n  {}", wrong.join("\n  "));
    m.finish();
}
