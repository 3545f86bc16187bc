//! Setting the mount-wide `user.mirrorfs.*` keys through a real mount (issue 5), with the real
//! `setfattr`: live changes read back on the root and on the control file; the right errno for
//! bad values (EINVAL), unknown keys (ENODATA) and keys that cannot change (EROFS), with nothing
//! changed on any leg; and copies out of the mount (`cp -a`, `rsync -aX`) carrying no control key.

#[macro_use]
mod common;

use common::*;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

#[test]
fn keys_set_live_or_refuse_with_the_right_errno() {
    require_fuse!();
    require_tool!("getfattr");
    require_tool!("setfattr");
    let m = TestMirror::new(2).option("read_policy=first").mount();
    fs::create_dir(m.path("dir")).unwrap();
    fs::write(m.path("dir/f"), b"data").unwrap();
    let ctl = m.path(".mirrorfs");
    let root = m.mnt().to_path_buf();

    // A good value, on the root and on the control file: read back from both.
    for at in [&root, &ctl] {
        setfattr(at, "user.mirrorfs.read_policy", "first")
            .unwrap_or_else(|e| panic!("set read_policy on {}: {e}", at.display()));
        assert_eq!(getfattr_ok(&root, "user.mirrorfs.read_policy"), "first");
        assert_eq!(getfattr_ok(&ctl, "user.mirrorfs.read_policy"), "first");
        assert_eq!(stats(m.mnt()).read_policy, "first");
    }

    let threads = getfattr_ok(&ctl, "user.mirrorfs.threads");
    let legs_before: Vec<_> = m.legs().iter().map(|l| snapshot_tree(l)).collect();
    for at in [&root, &ctl] {
        // Bad values: EINVAL, and the policy in force stays.
        for bad in ["nope", "leg:nosuchleg", "first,extra", "devid:", "devid:x"] {
            setfattr_fails(at, "user.mirrorfs.read_policy", bad, "Invalid argument");
            assert_eq!(getfattr_ok(at, "user.mirrorfs.read_policy"), "first");
        }
        assert_errno(
            set_xattr(at, "user.mirrorfs.read_policy", b"", 0),
            libc::EINVAL,
            "empty read_policy",
        );
        assert_errno(
            set_xattr(at, "user.mirrorfs.read_policy", b"\xff\xfe", 0),
            libc::EINVAL,
            "read_policy that is not UTF-8",
        );
        // Unknown keys: ENODATA, for reading and setting.
        setfattr_fails(at, "user.mirrorfs.nokey", "1", "No such attribute");
        match getfattr(at, "user.mirrorfs.nokey") {
            Ok(v) => panic!("getfattr of an unknown key gave {v:?}"),
            Err(e) => assert!(e.contains("No such attribute"), "{e}"),
        }
        assert_errno(
            remove_xattr(at, "user.mirrorfs.nokey"),
            libc::ENODATA,
            "removexattr unknown key",
        );
        // Options that cannot change while mounted, and the informational keys: EROFS.
        setfattr_fails(at, "user.mirrorfs.threads", "2", "Read-only file system");
        for k in ["version", "pid", "mount", "state", "legs", "stats", "ro"] {
            assert_errno(
                set_xattr(at, &format!("user.mirrorfs.{k}"), b"1", 0),
                libc::EROFS,
                &format!("setxattr user.mirrorfs.{k}"),
            );
        }
        for k in ["read_policy", "threads", "stats"] {
            assert_errno(
                remove_xattr(at, &format!("user.mirrorfs.{k}")),
                libc::EROFS,
                &format!("removexattr user.mirrorfs.{k}"),
            );
        }
        // stats_reset is write-only.
        assert_errno(
            get_xattr(at, "user.mirrorfs.stats_reset"),
            libc::ENODATA,
            "getxattr stats_reset",
        );
    }
    assert_eq!(getfattr_ok(&ctl, "user.mirrorfs.threads"), threads);
    assert_eq!(stats(m.mnt()).read_policy, "first");
    for (i, l) in m.legs().iter().enumerate() {
        assert_snapshot_eq(
            &legs_before[i],
            &snapshot_tree(l),
            "a leg after refused sets",
        );
    }

    // Per-file keys are read-only.
    let f = m.path("dir/f");
    for k in ["relpath", "allpaths", "readleg", "copies"] {
        setfattr_fails(
            &f,
            &format!("user.mirrorfs.{k}"),
            "x",
            "Read-only file system",
        );
        assert_errno(
            remove_xattr(&f, &format!("user.mirrorfs.{k}")),
            libc::EROFS,
            &format!("removexattr user.mirrorfs.{k}"),
        );
    }
    // Mount-wide keys are not answered on ordinary files, and nothing of the namespace is
    // ever stored on a leg.
    assert_errno(get_xattr(&f, STATS), libc::ENODATA, "stats on a file");
    assert_errno(
        set_xattr(&f, "user.mirrorfs.mine", b"1", 0),
        libc::EPERM,
        "storing a user.mirrorfs.* key on a file",
    );
    assert_errno(
        set_xattr(m.path("dir"), "user.mirrorfs.read_policy", b"first", 0),
        libc::EPERM,
        "a mount key on a directory below the root",
    );
    // The one name mirrorfs stores itself: a regular file's identity for its checksums
    // (docs/integrity.md), the same on every leg, and never shown through the mount.
    let mut ids = Vec::new();
    for p in m.leg_paths("dir/f").iter().chain(&m.leg_paths("dir")) {
        let names = list_xattr(p).unwrap();
        let ours: Vec<&String> = names
            .iter()
            .filter(|k| k.starts_with("user.mirrorfs."))
            .collect();
        if p.ends_with("f") {
            assert_eq!(ours, ["user.mirrorfs.id"], "{}", p.display());
            ids.push(get_xattr(p, "user.mirrorfs.id").unwrap());
        } else {
            assert!(ours.is_empty(), "{} carries {names:?}", p.display());
        }
    }
    assert!(ids.iter().all(|v| v.len() == 8 && *v == ids[0]), "{ids:?}");
    assert!(
        !list_xattr(m.path("dir/f"))
            .unwrap()
            .iter()
            .any(|k| k.starts_with("user.mirrorfs.")),
        "the identity shows through the mount"
    );
    m.finish();
}

/// `devid:N` names a leg by its index: an index past the last leg is a bad value like any
/// other (EINVAL, no change), not a policy that silently falls back to the first leg.
#[test]
fn an_out_of_range_devid_is_refused() {
    require_fuse!();
    require_tool!("getfattr");
    require_tool!("setfattr");
    let m = TestMirror::new(2).option("read_policy=first").mount();
    for bad in ["devid:2", "devid:99"] {
        setfattr_fails(
            m.mnt(),
            "user.mirrorfs.read_policy",
            bad,
            "Invalid argument",
        );
        assert_eq!(getfattr_ok(m.mnt(), "user.mirrorfs.read_policy"), "first");
    }
    m.finish();
}

// ---------------------------------------------------------------------------------------------
// Copies out of the mount
// ---------------------------------------------------------------------------------------------

/// Every xattr name found under `dir` by `getfattr -d -m - -R`.
fn xattr_names_below(dir: &Path) -> Vec<String> {
    let out = run("getfattr", &[&"-d", &"-m", &"-", &"-R", &dir], TOOL_TIMEOUT);
    assert!(
        out.status.success(),
        "getfattr -R {}: {}",
        dir.display(),
        text(&out.stderr)
    );
    text(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with("# file:"))
        .map(|l| l.split('=').next().unwrap().to_string())
        .collect()
}

#[test]
fn copies_out_of_the_mount_carry_no_control_key() {
    require_fuse!();
    require_tool!("getfattr");
    require_tool!("rsync");
    let m = TestMirror::new(2).mount();
    fs::create_dir_all(m.path("tree/sub")).unwrap();
    fs::write(m.path("tree/f"), b"f").unwrap();
    fs::write(m.path("tree/sub/g"), pattern(10_000, 5)).unwrap();
    symlink("f", m.path("tree/link")).unwrap();
    set_xattr(m.path("tree/f"), "user.color", b"blue", 0).unwrap();
    set_xattr(m.path("tree/sub"), "user.dirnote", b"d", 0).unwrap();
    set_xattr(m.path("tree/sub/g"), "user.tag", b"g", 0).unwrap();
    set_xattr(m.mnt(), "user.rootnote", b"r", 0).unwrap();
    // The per-file keys answer, but are not listed.
    assert_eq!(
        get_xattr(m.path("tree/f"), "user.mirrorfs.relpath").unwrap(),
        b"/tree/f"
    );
    assert_eq!(
        list_xattr(m.path("tree/f")).unwrap(),
        vec!["user.color"],
        "listxattr of a file"
    );

    let out_dir = m.root().join("out");
    fs::create_dir(&out_dir).unwrap();
    let copies = [
        ("cp -a of a dir", out_dir.join("cp"), "cp", "tree"),
        ("cp -a of the root", out_dir.join("cproot"), "cp", "."),
        ("rsync -aX of a dir", out_dir.join("rsync"), "rsync", "tree"),
        (
            "rsync -aX of the root",
            out_dir.join("rsyncroot"),
            "rsync",
            ".",
        ),
    ];
    for (what, dest, tool, src) in &copies {
        let src = m.path(src);
        let out = if *tool == "cp" {
            run("cp", &[&"-a", &src, dest], TOOL_TIMEOUT)
        } else {
            let s = format!("{}/", path_str(&src));
            run("rsync", &[&"-aX", &s, dest], TOOL_TIMEOUT)
        };
        assert!(out.status.success(), "{what}: {}", text(&out.stderr));
        let names = xattr_names_below(dest);
        assert!(
            !names.iter().any(|k| k.contains("mirrorfs")),
            "{what} copied control keys: {names:?}"
        );
        for want in ["user.color", "user.dirnote", "user.tag"] {
            assert!(
                names.iter().any(|k| k == want),
                "{what} lost {want}: {names:?}"
            );
        }
    }
    for root_copy in ["cproot", "rsyncroot"] {
        let d = out_dir.join(root_copy);
        assert!(
            !d.join(".mirrorfs").exists(),
            "{root_copy}: the control file was copied"
        );
        assert_eq!(dir_names(&d), vec!["tree"], "{root_copy}");
        assert_eq!(get_xattr(&d, "user.rootnote").unwrap(), b"r");
    }
    m.finish();
}
