//! Mount options of docs/cli-contract.md: the defaults (allow_other and default_permissions
//! as root), the options mount(8)/mount.fuse3 pass, `ro`, `fsname=` and the tunables.

#[macro_use]
mod common;

use common::*;
use std::fs;

#[test]
fn defaults_allow_other_and_default_permissions() {
    require_fuse!();
    let m = TestMirror::new(2).mount();
    let e = mount_entry_at(m.mnt()).unwrap();
    for opt in ["default_permissions", "allow_other"] {
        assert!(
            e.super_options.split(',').any(|o| o == opt),
            "{opt} is not on by default: {:?}",
            e.super_options
        );
    }
    m.finish();
}

#[test]
fn no_default_permissions_turns_it_off() {
    require_fuse!();
    let m = TestMirror::new(2).option("no_default_permissions").mount();
    let e = mount_entry_at(m.mnt()).unwrap();
    assert!(
        !e.super_options
            .split(',')
            .any(|o| o == "default_permissions"),
        "default_permissions still set: {:?}",
        e.super_options
    );
    m.finish();
}

#[test]
fn mount_helper_options_accepted() {
    require_fuse!();
    for opts in [
        "rw,dev,suid,exec,atime,relatime,nodiratime,defaults,nofail,_netdev,auto,noauto,nouser,async",
        "nodev,nosuid,noexec,noatime,sync,dirsync,user,users",
        "strictatime",
    ] {
        let m = TestMirror::new(2).option(opts).mount();
        fs::write(m.path("f"), b"ok").unwrap_or_else(|e| panic!("write with -o {opts}: {e}"));
        assert_content_on_legs(m.legs(), "f", b"ok");
        m.finish();
    }
}

#[test]
fn tunables_accepted() {
    require_fuse!();
    let m = TestMirror::new(3)
        .option("threads=4")
        .option("attr_timeout=0")
        .option("entry_timeout=0.5")
        .option("read_policy=first")
        .mount();
    fs::write(m.path("f"), pattern(1 << 20, 1)).unwrap();
    assert_bytes_eq(
        &fs::read(m.path("f")).unwrap(),
        &pattern(1 << 20, 1),
        "read back",
    );
    m.finish();
}

#[test]
fn fsname_shows_in_mountinfo() {
    require_fuse!();
    let m = TestMirror::new(2).option("fsname=my-mirror").mount();
    let e = mount_entry_at(m.mnt()).unwrap();
    assert_eq!(e.source, "my-mirror", "mount source with fsname=my-mirror");
    m.finish();
}

#[test]
fn ro_refuses_changes() {
    require_fuse!();
    // First mount read-write to create a file, then remount read-only.
    let mut m = TestMirror::new(2).mount();
    fs::write(m.path("f"), b"before").unwrap();
    fs::create_dir(m.path("d")).unwrap();
    m.unmount();
    let legs: Vec<_> = m.legs().to_vec();
    let before: Vec<_> = legs.iter().map(|l| user_tree(l)).collect();
    let args = vec![
        legs_arg(&legs).into(),
        m.mnt().as_os_str().to_owned(),
        "-o".into(),
        "ro".into(),
    ];
    let out = run_mirrorfs(&args);
    assert!(
        out.status.success(),
        "mount -o ro: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pids = daemon_pids(m.mnt());
    let mnt = m.mnt().to_path_buf();
    let check = std::panic::catch_unwind(|| {
        assert_eq!(fs::read(mnt.join("f")).unwrap(), b"before");
        assert_errno(fs::write(mnt.join("f"), b"x"), libc::EROFS, "write on ro");
        assert_errno(fs::write(mnt.join("g"), b"x"), libc::EROFS, "create on ro");
        assert_errno(fs::create_dir(mnt.join("e")), libc::EROFS, "mkdir on ro");
        assert_errno(fs::remove_file(mnt.join("f")), libc::EROFS, "unlink on ro");
        assert_errno(chmod(mnt.join("f"), 0o600), libc::EROFS, "chmod on ro");
        assert_errno(
            set_xattr(mnt.join("f"), "user.x", b"1", 0),
            libc::EROFS,
            "setxattr on ro",
        );
    });
    let _ = unmount_path(m.mnt());
    wait_pids_gone(&pids, std::time::Duration::from_secs(10));
    if let Err(e) = check {
        std::panic::resume_unwind(e);
    }
    for (l, b) in legs.iter().zip(before.iter()) {
        assert_snapshot_eq(
            b,
            &user_tree(l),
            &format!("{} after a ro mount", l.display()),
        );
    }
}

/// Snapshot of a leg without its `.mirrorfs` (a ro mount may still touch the superblock).
fn user_tree(leg: &std::path::Path) -> std::collections::BTreeMap<std::path::PathBuf, String> {
    snapshot_tree(leg)
        .into_iter()
        .filter(|(k, _)| !k.starts_with(".mirrorfs") && k.as_os_str() != ".")
        .collect()
}

/// `-o config=FILE`: the file's options (one per line, `#` comments, blanks ignored) take
/// effect; an option after `config=` wins over the file; `mirrorfs get MNT config` names it.
#[test]
fn config_file_options_take_effect() {
    require_fuse!();
    let conf = tempfile::NamedTempFile::new().unwrap();
    fs::write(
        conf.path(),
        "# the mirror of this test\n\nthreads = 3\nread_policy=first   # fixed leg\n\
         fsname=from-config\nattr_timeout=2\n",
    )
    .unwrap();
    let m = TestMirror::new(2)
        .option(&format!("config={}", conf.path().display()))
        .option("attr_timeout=0.5")
        .mount();
    let get = |key: &str| mirrorfs_ok(&[&"get", &m.mnt(), &key]).trim().to_string();
    assert_eq!(get("threads"), "3");
    assert_eq!(get("read_policy"), "first");
    assert_eq!(get("attr_timeout"), "0.5", "the option after config= wins");
    assert_eq!(get("config"), conf.path().to_string_lossy());
    assert_eq!(mount_entry_at(m.mnt()).unwrap().source, "from-config");
    fs::write(m.path("f"), b"ok").unwrap();
    assert_content_on_legs(m.legs(), "f", b"ok");
    m.finish();
}
