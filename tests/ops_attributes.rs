//! Attribute operations through a mirrorfs mount: chmod, chown/lchown, utimensat, statfs,
//! access(2). Every change must be visible through the mount and on every leg.

#[macro_use]
mod common;

use common::*;
use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

legs_test!(
    chmod_special_bits,
    chown_and_lchown,
    utimensat_explicit_now_omit,
    statfs_within_smallest_leg,
    access_checks,
);

/// (label, path) for the mount and every leg.
fn everywhere(m: &Mounted, rel: &str) -> Vec<(String, PathBuf)> {
    let mut v = vec![("mnt".to_string(), m.path(rel))];
    for (i, l) in m.legs().iter().enumerate() {
        v.push((format!("leg{i}"), l.join(rel)));
    }
    v
}

#[track_caller]
fn assert_mode_everywhere(m: &Mounted, rel: &str, mode: u32) {
    for (w, p) in everywhere(m, rel) {
        let got = lstat_ok(&p).st_mode & 0o7777;
        assert_eq!(
            got, mode,
            "mode of {rel} on {w}: got {got:04o}, want {mode:04o}"
        );
    }
}

#[track_caller]
fn assert_owner_everywhere(m: &Mounted, rel: &str, uid: u32, gid: u32) {
    for (w, p) in everywhere(m, rel) {
        let st = lstat_ok(&p);
        assert_eq!((st.st_uid, st.st_gid), (uid, gid), "owner of {rel} on {w}");
    }
}

fn chmod_special_bits(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    fs::write(m.path("f"), b"#!/bin/sh\n").unwrap();
    fs::create_dir(m.path("d")).unwrap();
    for mode in [0o4755, 0o2755, 0o6711, 0o7777, 0o1644, 0o0000, 0o0640] {
        chmod(m.path("f"), mode).unwrap_or_else(|e| panic!("chmod f {mode:o}: {e}"));
        assert_mode_everywhere(&m, "f", mode);
    }
    for mode in [0o1777, 0o2775, 0o3755, 0o7700, 0o0755] {
        chmod(m.path("d"), mode).unwrap_or_else(|e| panic!("chmod d {mode:o}: {e}"));
        assert_mode_everywhere(&m, "d", mode);
    }
    // fchmod on an open fd.
    let f = File::open(m.path("f")).unwrap();
    f.set_permissions(fs::Permissions::from_mode(0o4711))
        .expect("fchmod 4711");
    assert_mode_everywhere(&m, "f", 0o4711);
    drop(f);
    // chmod through a symlink changes the target, not the link.
    symlink("f", m.path("l")).unwrap();
    chmod(m.path("l"), 0o600).unwrap();
    assert_mode_everywhere(&m, "f", 0o600);
    assert_errno(
        chmod(m.path("missing"), 0o644),
        libc::ENOENT,
        "chmod missing",
    );
    m.finish();
}

fn chown_and_lchown(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    fs::write(m.path("f"), b"f").unwrap();
    fs::create_dir(m.path("d")).unwrap();
    chown(m.path("f"), 1234, 5678).expect("chown f 1234:5678");
    assert_owner_everywhere(&m, "f", 1234, 5678);
    // -1 leaves a field alone.
    chown(m.path("f"), 4321, u32::MAX).expect("chown f uid only");
    assert_owner_everywhere(&m, "f", 4321, 5678);
    chown(m.path("f"), u32::MAX, 42).expect("chown f gid only");
    assert_owner_everywhere(&m, "f", 4321, 42);
    chown(m.path("d"), NOBODY, NOGROUP).expect("chown d");
    assert_owner_everywhere(&m, "d", NOBODY, NOGROUP);
    // fchown.
    let fd = File::open(m.path("f")).unwrap();
    assert_eq!(unsafe { libc::fchown(fd.as_raw_fd(), 7, 8) }, 0, "fchown");
    drop(fd);
    assert_owner_everywhere(&m, "f", 7, 8);

    // lchown changes the link only; chown through the link changes the target.
    symlink("f", m.path("l")).unwrap();
    lchown(m.path("l"), 1111, 2222).expect("lchown l");
    assert_owner_everywhere(&m, "l", 1111, 2222);
    assert_owner_everywhere(&m, "f", 7, 8);
    chown(m.path("l"), 3333, 4444).expect("chown via symlink");
    assert_owner_everywhere(&m, "f", 3333, 4444);
    assert_owner_everywhere(&m, "l", 1111, 2222);

    // A symlink pointing outside the legs: lchown must not touch the outside file.
    let outside = m.root().join("outside");
    fs::write(&outside, b"not part of the mirror").unwrap();
    symlink(&outside, m.path("out")).unwrap();
    lchown(m.path("out"), 999, 999).expect("lchown out");
    let st = lstat_ok(&outside);
    assert_eq!(
        (st.st_uid, st.st_gid),
        (0, 0),
        "lchown of a symlink in the mount changed the file it points to"
    );
    assert_owner_everywhere(&m, "out", 999, 999);
    m.finish();
}

fn timespec_of(st: &libc::stat) -> ((i64, i64), (i64, i64)) {
    (
        (st.st_atime, st.st_atime_nsec),
        (st.st_mtime, st.st_mtime_nsec),
    )
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn utimensat_explicit_now_omit(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    fs::write(m.path("f"), b"times").unwrap();
    fs::create_dir(m.path("d")).unwrap();
    let a = (1_000_000_000, 123_456_789);
    let mt = (1_500_000_000, 987_654_321);

    for rel in ["f", "d"] {
        utimensat(m.path(rel), ts(a.0, a.1), ts(mt.0, mt.1), false)
            .unwrap_or_else(|e| panic!("utimensat {rel}: {e}"));
        for (w, p) in everywhere(&m, rel) {
            assert_eq!(
                timespec_of(&lstat_ok(&p)),
                (a, mt),
                "(atime, mtime) of {rel} on {w} after explicit utimensat"
            );
        }
    }

    // UTIME_OMIT for atime, a new explicit mtime.
    let mt2 = (1_600_000_000, 5);
    utimensat(
        m.path("f"),
        ts(0, libc::UTIME_OMIT),
        ts(mt2.0, mt2.1),
        false,
    )
    .expect("utimensat OMIT/explicit");
    for (w, p) in everywhere(&m, "f") {
        assert_eq!(
            timespec_of(&lstat_ok(&p)),
            (a, mt2),
            "(atime, mtime) on {w} after UTIME_OMIT atime"
        );
    }
    // UTIME_NOW for mtime, UTIME_OMIT for atime.
    let before = now_secs();
    utimensat(
        m.path("f"),
        ts(0, libc::UTIME_OMIT),
        ts(0, libc::UTIME_NOW),
        false,
    )
    .expect("utimensat OMIT/NOW");
    let after = now_secs();
    let st_m = lstat_ok(m.path("f"));
    assert_eq!(
        (st_m.st_atime, st_m.st_atime_nsec),
        a,
        "atime kept (UTIME_OMIT)"
    );
    assert!(
        st_m.st_mtime >= before - 1 && st_m.st_mtime <= after + 1,
        "UTIME_NOW mtime {} not within [{before}, {after}]",
        st_m.st_mtime
    );
    for (w, p) in everywhere(&m, "f") {
        let st = lstat_ok(&p);
        assert_eq!(
            (st.st_mtime, st.st_mtime_nsec),
            (st_m.st_mtime, st_m.st_mtime_nsec),
            "mtime on {w} equals the mount's after UTIME_NOW"
        );
        assert_eq!((st.st_atime, st.st_atime_nsec), a, "atime on {w}");
    }
    // Both NOW (utimes(path, NULL) is the same).
    utimensat(
        m.path("d"),
        ts(0, libc::UTIME_NOW),
        ts(0, libc::UTIME_NOW),
        false,
    )
    .expect("utimensat NOW/NOW");
    let st = lstat_ok(m.path("d"));
    assert!(st.st_atime >= before - 1 && st.st_mtime >= before - 1);

    // AT_SYMLINK_NOFOLLOW sets the link's own times.
    symlink("f", m.path("l")).unwrap();
    let f_before = timespec_of(&lstat_ok(m.path("f")));
    let lt = (1_200_000_000, 777);
    utimensat(m.path("l"), ts(lt.0, lt.1), ts(lt.0, lt.1), true)
        .expect("utimensat AT_SYMLINK_NOFOLLOW");
    for (w, p) in everywhere(&m, "l") {
        let st = lstat_ok(&p);
        assert_eq!(
            (st.st_mtime, st.st_mtime_nsec),
            lt,
            "mtime of the symlink itself on {w}"
        );
    }
    assert_eq!(
        timespec_of(&lstat_ok(m.path("f"))),
        f_before,
        "setting a symlink's times changed its target"
    );
    // A write bumps mtime and every leg gets the same one.
    fs::write(m.path("f"), b"new").unwrap();
    let st_m = lstat_ok(m.path("f"));
    assert!(st_m.st_mtime >= before - 1, "mtime after write");
    for (w, p) in everywhere(&m, "f") {
        let st = lstat_ok(&p);
        assert_eq!(
            (st.st_mtime, st.st_mtime_nsec),
            (st_m.st_mtime, st_m.st_mtime_nsec),
            "mtime on {w} after a write"
        );
    }
    m.finish();
}

fn bytes(st: &libc::statvfs) -> (u128, u128, u128) {
    let f = st.f_frsize as u128;
    (
        st.f_blocks as u128 * f,
        st.f_bfree as u128 * f,
        st.f_bavail as u128 * f,
    )
}

fn statfs_within_smallest_leg(n: usize) {
    require_fuse!();
    // The last leg is a small tmpfs, so the smallest leg is known.
    let mut dirs = TestDirs::new(n);
    dirs.mount_tmpfs_leg(n - 1, "64m");
    let m = TestMirror::new(n).with_dirs(dirs).mount();
    // The daemon writes its own state to the legs as it likes, so the smallest leg is taken
    // before and after the mount's answer, and the larger of the two bounds it.
    let smallest = |field: fn(&libc::statvfs) -> u128| {
        m.legs()
            .iter()
            .map(|l| field(&statvfs(l).unwrap()))
            .min()
            .unwrap()
    };
    let (total_before, avail_before) = (smallest(|s| bytes(s).0), smallest(|s| bytes(s).2));
    let sm = statvfs(m.mnt()).expect("statvfs on the mount");
    let min_total = total_before.max(smallest(|s| bytes(s).0));
    let min_avail = avail_before.max(smallest(|s| bytes(s).2));
    let (total, free, avail) = bytes(&sm);
    assert!(sm.f_frsize > 0 && sm.f_bsize > 0, "f_frsize/f_bsize are 0");
    assert!(total > 0, "f_blocks is 0");
    assert!(
        total <= min_total,
        "mount reports {total} bytes total, more than the smallest leg ({min_total})"
    );
    assert!(
        avail <= min_avail,
        "mount reports {avail} bytes available, more than the smallest leg ({min_avail})"
    );
    assert!(avail <= free && free <= total, "bavail <= bfree <= blocks");
    assert!(
        sm.f_namemax > 0 && sm.f_namemax <= 255,
        "f_namemax is {}",
        sm.f_namemax
    );
    // Writing data shows up in the free space of the mount.
    fs::write(m.path("fill"), pattern(8 << 20, 5)).unwrap();
    let (_, _, avail2) = bytes(&statvfs(m.mnt()).unwrap());
    assert!(
        avail2 < avail,
        "available space did not drop after writing 8 MiB ({avail} -> {avail2})"
    );
    m.finish();
}

fn access_ok(p: &Path, mode: i32) -> bool {
    access(p, mode).is_ok()
}

fn access_checks(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    for (name, mode) in [
        ("r644", 0o644),
        ("x755", 0o755),
        ("none", 0o000),
        ("x100", 0o100),
    ] {
        fs::write(m.path(name), b"x").unwrap();
        chmod(m.path(name), mode).unwrap();
    }
    fs::create_dir(m.path("d000")).unwrap();
    chmod(m.path("d000"), 0o000).unwrap();

    // As root: read/write always, execute only with an x bit (files), search on dirs always.
    let p = |s: &str| m.path(s);
    assert!(access_ok(&p("r644"), libc::F_OK));
    assert!(access_ok(&p("r644"), libc::R_OK | libc::W_OK));
    assert_errno(
        access(p("r644"), libc::X_OK),
        libc::EACCES,
        "root X_OK on 0644",
    );
    assert!(access_ok(&p("x755"), libc::R_OK | libc::W_OK | libc::X_OK));
    assert!(access_ok(&p("none"), libc::R_OK | libc::W_OK));
    assert_errno(
        access(p("none"), libc::X_OK),
        libc::EACCES,
        "root X_OK on 0000",
    );
    assert!(access_ok(&p("x100"), libc::X_OK), "root X_OK on 0100");
    assert!(access_ok(&p("d000"), libc::R_OK | libc::W_OK | libc::X_OK));
    assert_errno(
        access(p("missing"), libc::F_OK),
        libc::ENOENT,
        "access missing",
    );

    // As nobody (dash's `test` uses access/faccessat).
    let script = ["r644", "x755", "none", "x100"]
        .iter()
        .map(|f| {
            let q = shq(m.path(f));
            format!(
                "printf '%s:' {f}; test -r {q} && printf r; test -w {q} && printf w; \
                 test -x {q} && printf x; echo"
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    let out = sh_as(NOBODY, NOGROUP, 0o022, &script);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "r644:r\nx755:rx\nnone:\nx100:\n",
        "access(2) as nobody (stderr: {})",
        String::from_utf8_lossy(&out.stderr)
    );
    m.finish();
}

legs_test!(mtime_identical_on_legs_after_each_change);

/// Every operation that sets a regular file's mtime must leave the same mtime (to the
/// nanosecond) on every leg. Each kind of change is repeated on many files, so that a mirror
/// that lets each leg's kernel stamp its own time is caught reliably, not by chance.
fn mtime_identical_on_legs_after_each_change(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    type Op = fn(&Path);
    let ops: Vec<(&str, Op)> = vec![
        ("create", |p| {
            File::create(p).unwrap();
        }),
        ("pwrite", |p| {
            use std::os::unix::fs::FileExt;
            File::options()
                .write(true)
                .open(p)
                .unwrap()
                .write_all_at(b"data", 3)
                .unwrap();
        }),
        ("open O_TRUNC", |p| {
            File::options().write(true).truncate(true).open(p).unwrap();
        }),
        ("truncate", |p| truncate(p, 12345).unwrap()),
        ("ftruncate", |p| {
            File::options()
                .write(true)
                .open(p)
                .unwrap()
                .set_len(77)
                .unwrap();
        }),
        ("append", |p| {
            use std::io::Write;
            File::options()
                .append(true)
                .open(p)
                .unwrap()
                .write_all(b"tail")
                .unwrap();
        }),
        ("fallocate", |p| {
            let f = File::options().write(true).open(p).unwrap();
            assert_eq!(unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, 65536) }, 0);
        }),
        ("punch hole", |p| {
            let f = File::options().write(true).open(p).unwrap();
            let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
            assert_eq!(unsafe { libc::fallocate(f.as_raw_fd(), mode, 0, 4096) }, 0);
        }),
        ("copy_file_range", |p| {
            let src = File::open(p.with_file_name("src")).unwrap();
            let dst = File::options().write(true).open(p).unwrap();
            let (mut a, mut b) = (0i64, 0i64);
            let r = unsafe {
                libc::copy_file_range(src.as_raw_fd(), &mut a, dst.as_raw_fd(), &mut b, 100, 0)
            };
            assert_eq!(r, 100);
        }),
        ("mmap write", |p| unsafe {
            let f = File::options().read(true).write(true).open(p).unwrap();
            let ptr = libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            );
            assert_ne!(ptr, libc::MAP_FAILED);
            *(ptr as *mut u8) = 1;
            assert_eq!(libc::msync(ptr, 4096, libc::MS_SYNC), 0);
            libc::munmap(ptr, 4096);
        }),
        ("mknod S_IFREG", |p| {
            let _ = fs::remove_file(p);
            mknod(p, libc::S_IFREG | 0o644, 0).unwrap();
        }),
    ];
    let mut bad: Vec<String> = Vec::new();
    for (i, (name, op)) in ops.iter().enumerate() {
        let dir = m.path(&format!("op{i}"));
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("src"), pattern(8192, 1)).unwrap();
        let mut diverged = 0;
        let mut example = String::new();
        for k in 0..40 {
            let rel = format!("op{i}/f{k}");
            let p = m.path(&rel);
            if *name != "create" && *name != "mknod S_IFREG" {
                fs::write(&p, pattern(8192, k)).unwrap();
                // Give every leg the same starting time, so only `op` can make them differ.
                utimensat(&p, ts(1_000_000_000, 0), ts(1_000_000_000, 0), false).unwrap();
            }
            op(&p);
            let times: Vec<(i64, i64)> = m
                .leg_paths(&rel)
                .iter()
                .map(|lp| {
                    let st = lstat_ok(lp);
                    (st.st_mtime, st.st_mtime_nsec)
                })
                .collect();
            if times.iter().any(|t| *t != times[0]) {
                diverged += 1;
                example = format!("{rel}: {times:?}");
            }
        }
        if diverged > 0 {
            bad.push(format!(
                "{name}: legs got different mtimes on {diverged}/40 files (e.g. {example})"
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "mtime differs between legs after:\n  {}",
        bad.join("\n  ")
    );
    m.finish();
}

legs_test!(
    ctime_advances_on_change,
    dir_mtime_advances_on_entry_changes
);

fn ctime_of(p: &Path) -> (i64, i64) {
    let st = lstat_ok(p);
    (st.st_ctime, st.st_ctime_nsec)
}

/// Every change of a file bumps its ctime, and stat shows it at once (no stale cache).
fn ctime_advances_on_change(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    let f = m.path("f");
    fs::write(&f, b"x").unwrap();
    type Op = Box<dyn Fn(&Mounted)>;
    let ops: Vec<(&str, Op)> = vec![
        ("chmod", Box::new(|m| chmod(m.path("f"), 0o600).unwrap())),
        ("chown", Box::new(|m| chown(m.path("f"), 1, 1).unwrap())),
        (
            "write",
            Box::new(|m| fs::write(m.path("f"), b"yy").unwrap()),
        ),
        ("truncate", Box::new(|m| truncate(m.path("f"), 1).unwrap())),
        (
            "setxattr",
            Box::new(|m| set_xattr(m.path("f"), "user.c", b"1", 0).unwrap()),
        ),
        (
            "link",
            Box::new(|m| fs::hard_link(m.path("f"), m.path("g")).unwrap()),
        ),
        (
            "unlink other name",
            Box::new(|m| fs::remove_file(m.path("g")).unwrap()),
        ),
        (
            "rename",
            Box::new(|m| {
                fs::rename(m.path("f"), m.path("f2")).unwrap();
                fs::rename(m.path("f2"), m.path("f")).unwrap();
            }),
        ),
        (
            "utimensat",
            Box::new(|m| utimensat(m.path("f"), ts(5, 0), ts(5, 0), false).unwrap()),
        ),
    ];
    for (name, op) in ops {
        let before = ctime_of(&f);
        std::thread::sleep(std::time::Duration::from_millis(20));
        op(&m);
        let after = ctime_of(&f);
        assert!(
            after > before,
            "ctime did not advance after {name}: {before:?} -> {after:?}"
        );
    }
    m.finish();
}

/// Creating, renaming and removing entries bumps the directory's mtime, seen at once.
fn dir_mtime_advances_on_entry_changes(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    fs::create_dir(m.path("d")).unwrap();
    fs::create_dir(m.path("o")).unwrap();
    let mt = |p: &Path| {
        let st = lstat_ok(p);
        (st.st_mtime, st.st_mtime_nsec)
    };
    type Op = Box<dyn Fn(&Mounted)>;
    let ops: Vec<(&str, Op)> = vec![
        (
            "create",
            Box::new(|m| fs::write(m.path("d/a"), b"").unwrap()),
        ),
        (
            "mkdir",
            Box::new(|m| fs::create_dir(m.path("d/sub")).unwrap()),
        ),
        (
            "rename within",
            Box::new(|m| fs::rename(m.path("d/a"), m.path("d/b")).unwrap()),
        ),
        (
            "rename out",
            Box::new(|m| fs::rename(m.path("d/b"), m.path("o/b")).unwrap()),
        ),
        (
            "symlink",
            Box::new(|m| symlink("x", m.path("d/l")).unwrap()),
        ),
        (
            "unlink",
            Box::new(|m| fs::remove_file(m.path("d/l")).unwrap()),
        ),
        (
            "rmdir",
            Box::new(|m| fs::remove_dir(m.path("d/sub")).unwrap()),
        ),
    ];
    for (name, op) in ops {
        let before = mt(&m.path("d"));
        std::thread::sleep(std::time::Duration::from_millis(20));
        op(&m);
        let after = mt(&m.path("d"));
        assert!(
            after > before,
            "mtime of the directory did not advance after {name}: {before:?} -> {after:?}"
        );
    }
    m.finish();
}
