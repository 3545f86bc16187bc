//! Ownership and permissions: new nodes belong to the caller (uid, gid, setgid directories,
//! umask) on every leg, mode bits are enforced, and chown clears setuid like ext4 does.
//! Non-root actions run `/bin/sh` as nobody (65534:65534) with a chosen umask. Each test runs
//! on 2 and 3 legs, and on a mount with `no_default_permissions`, where the daemon enforces
//! the same rules by acting as the caller.

#[macro_use]
mod common;

use common::*;
use std::fs;
use std::path::{Path, PathBuf};

access_test!(
    nonroot_creates_own_files,
    setgid_directory_inheritance,
    umask_applies,
    nonroot_cannot_read_root_0600,
    chown_clears_setuid,
    nonowner_write_clears_setuid,
    nonowner_changes_clear_setuid,
    owner_chgrp_outside_the_group_clears_setgid,
);

fn everywhere(m: &Mounted, rel: &str) -> Vec<(String, PathBuf)> {
    let mut v = vec![("mnt".to_string(), m.path(rel))];
    for (i, l) in m.legs().iter().enumerate() {
        v.push((format!("leg{i}"), l.join(rel)));
    }
    v
}

/// Assert uid, gid and permission bits (`mode` = None: do not check) on the mount and legs.
#[track_caller]
fn assert_node(m: &Mounted, rel: &str, uid: u32, gid: u32, mode: Option<u32>) {
    for (w, p) in everywhere(m, rel) {
        let st = lstat_ok(&p);
        assert_eq!((st.st_uid, st.st_gid), (uid, gid), "owner of {rel} on {w}");
        if let Some(mode) = mode {
            assert_eq!(
                st.st_mode & 0o7777,
                mode,
                "mode of {rel} on {w}: got {:04o}, want {mode:04o}",
                st.st_mode & 0o7777
            );
        }
    }
}

fn public_dir(m: &Mounted, rel: &str) -> PathBuf {
    let p = m.path(rel);
    fs::create_dir(&p).unwrap();
    chmod(&p, 0o1777).unwrap();
    p
}

fn nonroot_creates_own_files(n: usize, opts: &[&str]) {
    require_fuse!();
    let m = TestMirror::new(n).options(opts).mount();
    let pubd = public_dir(&m, "pub");
    let q = shq(&pubd);
    sh_as_ok(
        NOBODY,
        NOGROUP,
        0o022,
        &format!(
            "cd {q} && echo hi > f && mkdir d && ln -s f l && mkfifo p && mkdir d/sub && \
             echo x > d/sub/g && ln f hard"
        ),
    );
    assert_node(&m, "pub/f", NOBODY, NOGROUP, Some(0o644));
    assert_node(&m, "pub/hard", NOBODY, NOGROUP, Some(0o644));
    assert_node(&m, "pub/d", NOBODY, NOGROUP, Some(0o755));
    assert_node(&m, "pub/l", NOBODY, NOGROUP, None);
    assert_node(&m, "pub/p", NOBODY, NOGROUP, Some(0o644));
    assert_node(&m, "pub/d/sub", NOBODY, NOGROUP, Some(0o755));
    assert_node(&m, "pub/d/sub/g", NOBODY, NOGROUP, Some(0o644));
    assert_content_on_legs(m.legs(), "pub/f", b"hi\n");

    // The owner may chmod; a non-root user may not give files away.
    sh_as_ok(NOBODY, NOGROUP, 0o022, &format!("chmod 600 {q}/f"));
    assert_node(&m, "pub/f", NOBODY, NOGROUP, Some(0o600));
    let out = sh_as(NOBODY, NOGROUP, 0o022, &format!("chown 0 {q}/f"));
    assert!(!out.status.success(), "nobody could chown its file to root");
    assert_node(&m, "pub/f", NOBODY, NOGROUP, Some(0o600));
    // Sticky dir: nobody cannot delete root's file in it.
    fs::write(pubd.join("rootfile"), b"r").unwrap();
    let out = sh_as(NOBODY, NOGROUP, 0o022, &format!("rm -f {q}/rootfile"));
    assert!(
        !out.status.success(),
        "nobody deleted root's file in a sticky directory"
    );
    assert_content_on_legs(m.legs(), "pub/rootfile", b"r");
    m.finish();
}

fn setgid_directory_inheritance(n: usize, opts: &[&str]) {
    require_fuse!();
    let m = TestMirror::new(n).options(opts).mount();
    let users = 100; // group "users" on Debian
    fs::create_dir(m.path("sg")).unwrap();
    chown(m.path("sg"), 0, users).unwrap();
    chmod(m.path("sg"), 0o2777).unwrap();
    assert_node(&m, "sg", 0, users, Some(0o2777));

    // As root.
    fs::write(m.path("sg/f"), b"f").unwrap();
    fs::create_dir(m.path("sg/sub")).unwrap();
    std::os::unix::fs::symlink("f", m.path("sg/l")).unwrap();
    mkfifo(m.path("sg/p"), 0o644).unwrap();
    fs::write(m.path("sg/sub/f2"), b"f2").unwrap();
    assert_node(&m, "sg/f", 0, users, None);
    assert_node(&m, "sg/l", 0, users, None);
    assert_node(&m, "sg/p", 0, users, None);
    assert_node(&m, "sg/sub/f2", 0, users, None);
    for (w, p) in everywhere(&m, "sg/sub") {
        let st = lstat_ok(&p);
        assert_eq!(st.st_gid, users, "group of sg/sub on {w}");
        assert_ne!(
            st.st_mode & libc::S_ISGID,
            0,
            "sg/sub on {w} lost the setgid bit (mode {:04o})",
            st.st_mode & 0o7777
        );
    }

    // As nobody, who is not in the group: the directory's group still wins.
    let q = shq(m.path("sg"));
    sh_as_ok(
        NOBODY,
        NOGROUP,
        0o022,
        &format!("cd {q} && echo n > nf && mkdir nd"),
    );
    assert_node(&m, "sg/nf", NOBODY, users, Some(0o644));
    for (w, p) in everywhere(&m, "sg/nd") {
        let st = lstat_ok(&p);
        assert_eq!(
            (st.st_uid, st.st_gid),
            (NOBODY, users),
            "owner of sg/nd on {w}"
        );
        assert_ne!(
            st.st_mode & libc::S_ISGID,
            0,
            "sg/nd on {w} lost the setgid bit"
        );
    }
    // Outside the setgid dir, root's files get root's group.
    fs::write(m.path("plain"), b"").unwrap();
    assert_node(&m, "plain", 0, 0, None);
    m.finish();
}

fn umask_applies(n: usize, opts: &[&str]) {
    require_fuse!();
    let m = TestMirror::new(n).options(opts).mount();
    let q = shq(m.mnt());
    for (umask, tag) in [
        (0o022, "u022"),
        (0o077, "u077"),
        (0o027, "u027"),
        (0o000, "u000"),
    ] {
        sh_as_ok(
            0,
            0,
            umask,
            &format!("cd {q} && : > {tag}_f && mkdir {tag}_d && mkfifo {tag}_p"),
        );
        assert_node(&m, &format!("{tag}_f"), 0, 0, Some(0o666 & !umask));
        assert_node(&m, &format!("{tag}_d"), 0, 0, Some(0o777 & !umask));
        assert_node(&m, &format!("{tag}_p"), 0, 0, Some(0o666 & !umask));
    }
    // The same as nobody in a public dir.
    public_dir(&m, "pub");
    sh_as_ok(
        NOBODY,
        NOGROUP,
        0o027,
        &format!("cd {q}/pub && : > f && mkdir d"),
    );
    assert_node(&m, "pub/f", NOBODY, NOGROUP, Some(0o640));
    assert_node(&m, "pub/d", NOBODY, NOGROUP, Some(0o750));
    m.finish();
}

fn nonroot_cannot_read_root_0600(n: usize, opts: &[&str]) {
    require_fuse!();
    let m = TestMirror::new(n).options(opts).mount();
    fs::write(m.path("secret"), b"top secret\n").unwrap();
    chmod(m.path("secret"), 0o600).unwrap();
    fs::write(m.path("public"), b"hello\n").unwrap();
    chmod(m.path("public"), 0o644).unwrap();
    fs::create_dir(m.path("private")).unwrap();
    chmod(m.path("private"), 0o700).unwrap();
    fs::write(m.path("private/inner"), b"inner\n").unwrap();
    chmod(m.path("private/inner"), 0o644).unwrap();

    // Positive control: nobody can read a 0644 file.
    let out = sh_as_ok(
        NOBODY,
        NOGROUP,
        0o022,
        &format!("cat {}", shq(m.path("public"))),
    );
    assert_eq!(out.stdout, b"hello\n");

    for (what, script) in [
        (
            "read a 0600 root file",
            format!("cat {}", shq(m.path("secret"))),
        ),
        (
            "append to a 0600 root file",
            format!("echo x >> {}", shq(m.path("secret"))),
        ),
        (
            "read a file in a 0700 root dir",
            format!("cat {}", shq(m.path("private/inner"))),
        ),
        (
            "create a file in the 0755 root-owned mount root",
            format!(": > {}", shq(m.path("newfile"))),
        ),
    ] {
        let out = sh_as(NOBODY, NOGROUP, 0o022, &script);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("Permission denied"),
            "nobody could {what} (or failed otherwise): status {}, stdout {:?}, stderr {err:?}",
            out.status,
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(
            !out.stdout
                .windows(6)
                .any(|w| w == b"secret" || w == b"inner\n"),
            "nobody read protected data: {what}"
        );
    }
    assert_content_on_legs(m.legs(), "secret", b"top secret\n");
    assert_errno(lstat(m.path("newfile")), libc::ENOENT, "newfile");
    m.finish();
}

/// Run `f` on a plain file of the backing filesystem (ext4 here) to learn what the kernel
/// does there: the reference for the mount.
fn reference_mode(root: &Path, name: &str, f: impl Fn(&Path)) -> u32 {
    let dir = root.join("reference");
    let _ = fs::create_dir(&dir);
    chmod(&dir, 0o755).unwrap();
    let p = dir.join(name);
    f(&p);
    lstat_ok(&p).st_mode & 0o7777
}

fn chown_clears_setuid(n: usize, opts: &[&str]) {
    require_fuse!();
    let m = TestMirror::new(n).options(opts).mount();
    for (name, mode) in [
        ("suid", 0o4755),
        ("sgid", 0o2755),
        ("both", 0o6755),
        ("sgid_nox", 0o2745),
    ] {
        let setup = |p: &Path| {
            fs::write(p, b"#!/bin/sh\n").unwrap();
            chmod(p, mode).unwrap();
            chown(p, 1000, 1000).unwrap();
        };
        let want = reference_mode(m.root(), name, setup);
        setup(&m.path(name));
        assert_node(&m, name, 1000, 1000, Some(want));
    }
    // Plain ext4 clears setuid on chown by root: check the reference agrees with the brief.
    let st = lstat_ok(m.root().join("reference/suid"));
    assert_eq!(
        st.st_mode & 0o7777,
        0o755,
        "reference: chown clears setuid on ext4"
    );
    m.finish();
}

fn nonowner_write_clears_setuid(n: usize, opts: &[&str]) {
    require_fuse!();
    let m = TestMirror::new(n).options(opts).mount();
    let run = |p: &Path| {
        fs::write(p, b"#!/bin/sh\n").unwrap();
        chmod(p, 0o4777).unwrap();
        sh_as_ok(NOBODY, NOGROUP, 0o022, &format!("echo more >> {}", shq(p)));
    };
    let want = reference_mode(m.root(), "w", run);
    run(&m.path("w"));
    assert_node(&m, "w", 0, 0, Some(want));
    assert_content_on_legs(m.legs(), "w", b"#!/bin/sh\nmore\n");
    m.finish();
}

/// Every change a user without CAP_FSETID makes to a setuid/setgid file's data drops the
/// bits, as on ext4: truncate, O_DIRECT write, fallocate, and a write to a file whose setgid
/// marks mandatory locking (no group execute), which keeps it for a group member only.
fn nonowner_changes_clear_setuid(n: usize, opts: &[&str]) {
    require_fuse!();
    let m = TestMirror::new(n).options(opts).mount();
    let cases: [(&str, u32, &str); 5] = [
        ("truncate", 0o6777, "truncate -s 3 F"),
        (
            "odirect",
            0o4777,
            "dd if=/dev/zero of=F bs=4096 count=1 oflag=direct conv=notrunc status=none",
        ),
        ("fallocate", 0o6777, "fallocate -l 65536 F"),
        ("lockmark", 0o2767, "echo more >> F"),
        ("plain", 0o0777, "echo more >> F"),
    ];
    for (name, mode, script) in cases {
        let run = |p: &Path| {
            fs::write(p, vec![b'x'; 8192]).unwrap();
            chmod(p, mode).unwrap();
            sh_as_ok(NOBODY, NOGROUP, 0o022, &script.replace('F', &shq(p)));
        };
        let want = reference_mode(m.root(), name, run);
        assert_eq!(
            want & 0o6000,
            0,
            "reference: {name} dropped the bits on ext4 ({want:o})"
        );
        run(&m.path(name));
        assert_node(&m, name, 0, 0, Some(want));
    }
    m.finish();
}

/// An owner who moves a file to their own group from one they are not in loses its setgid
/// bit even without group execute (the kernel's `in_group_or_capable` rule), and setuid with
/// it; root's chgrp keeps that setgid.
fn owner_chgrp_outside_the_group_clears_setgid(n: usize, opts: &[&str]) {
    require_fuse!();
    let m = TestMirror::new(n).options(opts).mount();
    for (name, mode, by_root) in [
        ("lockmark", 0o2745, false),
        ("both", 0o6745, false),
        ("lockmark_root", 0o2745, true),
    ] {
        let run = |p: &Path| {
            fs::write(p, b"x").unwrap();
            chown(p, NOBODY, 0).unwrap();
            chmod(p, mode).unwrap();
            match by_root {
                true => chown(p, u32::MAX, NOGROUP).unwrap(),
                false => {
                    sh_as_ok(
                        NOBODY,
                        NOGROUP,
                        0o022,
                        &format!("chgrp {NOGROUP} {}", shq(p)),
                    );
                }
            }
        };
        let want = reference_mode(m.root(), name, run);
        run(&m.path(name));
        assert_node(&m, name, NOBODY, NOGROUP, Some(want));
    }
    let st = lstat_ok(m.root().join("reference/lockmark"));
    assert_eq!(st.st_mode & 0o7777, 0o745, "reference: ext4 drops it");
    let st = lstat_ok(m.root().join("reference/lockmark_root"));
    assert_eq!(st.st_mode & 0o7777, 0o2745, "reference: root keeps it");
    m.finish();
}

access_test!(nonmember_chmod_setgid_is_stripped);

/// A user who is not in a file's group cannot set its setgid bit: chmod g+s silently drops
/// it (as on ext4, which is the reference here).
fn nonmember_chmod_setgid_is_stripped(n: usize, opts: &[&str]) {
    require_fuse!();
    let m = TestMirror::new(n).options(opts).mount();
    let users = 100;
    let setup_dir = |dir: &Path| {
        fs::create_dir_all(dir).unwrap();
        chown(dir, 0, users).unwrap();
        chmod(dir, 0o2777).unwrap();
    };
    let ref_dir = m.root().join("reference-sg");
    setup_dir(&ref_dir);
    setup_dir(&m.path("sg"));
    let script = |dir: &Path| {
        format!(
            "cd {} && echo x > f && chmod 2755 f && mkdir d && chmod 2750 d",
            shq(dir)
        )
    };
    sh_as_ok(NOBODY, NOGROUP, 0o022, &script(&ref_dir));
    sh_as_ok(NOBODY, NOGROUP, 0o022, &script(&m.path("sg")));
    for rel in ["f", "d"] {
        let want = lstat_ok(ref_dir.join(rel)).st_mode & 0o7777;
        assert_node(&m, &format!("sg/{rel}"), NOBODY, users, Some(want));
    }
    m.finish();
}
