//! Paths that name legs reach the daemon intact and mean what they meant where they were
//! typed: `mirrorfs leg` resolves a relative path in the caller's directory (the daemon's is
//! `/`), and carries paths with spaces, newlines and bytes that are not UTF-8. The daemon lets
//! go of the directory it was started from, so that its filesystem can be unmounted.

#[macro_use]
mod common;

use common::*;
use mirrorfs::stats::LegState;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// `mirrorfs ARGS` run in `cwd`; panics unless it exits 0.
#[track_caller]
fn mirrorfs_in(cwd: &Path, args: &[&OsStr]) {
    let out = run_timeout(
        Command::new(mirrorfs_bin()).args(args).current_dir(cwd),
        Duration::from_secs(30),
    );
    assert!(
        out.status.success(),
        "mirrorfs {args:?} in {}: {}",
        cwd.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn leg_commands_take_relative_and_unusual_paths() {
    require_fuse!();
    let m = TestMirror::new(2).mount();
    let mnt = m.mnt().to_path_buf();
    fs::write(m.path("f"), b"data").unwrap();
    // Somewhere else than the legs' parent, to make "relative" mean something.
    let elsewhere = m.root().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();

    // By a relative path from another directory: ../leg1 from `elsewhere`.
    mirrorfs_in(
        &elsewhere,
        &[
            OsStr::new("leg"),
            OsStr::new("fail"),
            mnt.as_os_str(),
            OsStr::new("../leg1"),
        ],
    );
    assert_eq!(stats(&mnt).legs[1].state, LegState::Failed);
    fs::write(m.path("g"), b"while away").unwrap();
    mirrorfs_in(
        &elsewhere,
        &[
            OsStr::new("leg"),
            OsStr::new("add"),
            mnt.as_os_str(),
            OsStr::new("../leg1"),
        ],
    );
    wait_resynced(&mnt);

    // Replaced by a directory whose name holds a space, a newline and a byte that is not
    // UTF-8, given relative to the caller's directory.
    let odd = OsString::from_vec(b"new disk\nno \xff utf-8".to_vec());
    let new_leg: PathBuf = elsewhere.join(&odd);
    fs::create_dir(&new_leg).unwrap();
    mirrorfs_in(
        &elsewhere,
        &[
            OsStr::new("leg"),
            OsStr::new("replace"),
            mnt.as_os_str(),
            OsStr::new("leg1"),
            &odd,
        ],
    );
    let st = wait_resynced(&mnt);
    assert_eq!(
        st.legs[1].path,
        new_leg.to_string_lossy(),
        "the replacement is the directory the caller meant"
    );
    let legs = vec![m.leg(0).to_path_buf(), new_leg.clone()];
    assert_legs_identical(&legs);
    assert_content_on_legs(&legs, "g", b"while away");

    // The same path as a NUL-separated command written directly; then `leg add` by that
    // path, relative, from the caller's directory.
    let mut value = b"fail\0".to_vec();
    value.extend_from_slice(new_leg.as_os_str().as_encoded_bytes());
    set_xattr(&mnt, "user.mirrorfs.leg", &value, 0).unwrap();
    assert_eq!(stats(&mnt).legs[1].state, LegState::Failed);
    mirrorfs_in(
        &elsewhere,
        &[OsStr::new("leg"), OsStr::new("add"), mnt.as_os_str(), &odd],
    );
    wait_resynced(&mnt);
    // And the plain text form setfattr users type.
    set_xattr(&mnt, "user.mirrorfs.leg", b"fail leg1", 0).unwrap();
    set_xattr(&mnt, "user.mirrorfs.leg", b"add leg1", 0).unwrap();
    wait_resynced(&mnt);
    drop(m);
}

/// The daemon's working directory is `/`, whatever directory it was started from: a disk
/// the mount command was typed on can be unmounted afterwards.
#[test]
fn the_daemon_lets_go_of_its_starting_directory() {
    require_fuse!();
    let d = TestDirs::new(2);
    let usb = d.root().join("usb");
    fs::create_dir(&usb).unwrap();
    let out = run_timeout(
        Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(&usb),
        Duration::from_secs(10),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Started from inside the tmpfs, with relative paths to the legs and the mount point.
    let rel = |p: &Path| PathBuf::from("..").join(p.file_name().unwrap());
    let out = run_timeout(
        Command::new(mirrorfs_bin())
            .arg(format!(
                "{}:{}",
                rel(&d.legs[0]).display(),
                rel(&d.legs[1]).display()
            ))
            .arg(rel(&d.mnt))
            .current_dir(&usb),
        Duration::from_secs(30),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pid: i32 = String::from_utf8(get_xattr(&d.mnt, "user.mirrorfs.pid").unwrap())
        .unwrap()
        .parse()
        .unwrap();
    let pids = vec![pid];
    for pid in &pids {
        let cwd = fs::read_link(format!("/proc/{pid}/cwd")).unwrap();
        assert_eq!(cwd, Path::new("/"), "daemon {pid}'s working directory");
    }
    let unmounted = run_timeout(Command::new("umount").arg(&usb), Duration::from_secs(10));
    let umount_err = String::from_utf8_lossy(&unmounted.stderr).into_owned();
    unmount_path(&d.mnt).unwrap();
    if !unmounted.status.success() {
        let _ = run_timeout(
            Command::new("umount").arg("-l").arg(&usb),
            Duration::from_secs(10),
        );
    }
    assert!(
        wait_pids_gone(&pids, Duration::from_secs(10)),
        "the daemon did not exit"
    );
    assert!(
        unmounted.status.success(),
        "the directory mirrorfs was started from stays busy: {umount_err}"
    );
}

/// A refused command says which condition failed (the daemon keeps the reason for the
/// caller, `user.mirrorfs.last_error`), in one line.
#[test]
fn refusals_say_why() {
    require_fuse!();
    let m = TestMirror::new(2).mount();
    let mnt = m.mnt().to_path_buf();
    let full = m.root().join("full");
    fs::create_dir(&full).unwrap();
    fs::write(full.join("x"), b"x").unwrap();
    let refused = |args: &[&OsStr], why: &str| {
        let out = run_timeout(
            Command::new(mirrorfs_bin()).args(args),
            Duration::from_secs(30),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(why), "{args:?}: want {why:?}, got {err}");
    };
    let (leg, add, fail, remove, replace) = (
        OsStr::new("leg"),
        OsStr::new("add"),
        OsStr::new("fail"),
        OsStr::new("remove"),
        OsStr::new("replace"),
    );
    let m_ = mnt.as_os_str();
    refused(
        &[leg, add, m_, OsStr::new("leg0")],
        "'leg0' is in sync already",
    );
    // Not a leg's name: sent as a directory, resolved here (the message shows the path).
    refused(
        &[leg, fail, m_, OsStr::new("nope")],
        "nope' (the legs: leg0, leg1",
    );
    refused(
        &[leg, replace, m_, OsStr::new("leg1"), full.as_os_str()],
        "is not empty",
    );
    refused(
        &[leg, remove, m_, OsStr::new("leg1")],
        "only a leg out of the mirror can be removed",
    );
    refused(
        &[
            OsStr::new("scrub"),
            OsStr::new("start"),
            m_,
            OsStr::new("--repair"),
        ],
        "needs three legs in sync or more",
    );
    refused(
        &[
            OsStr::new("set"),
            m_,
            OsStr::new("read_policy"),
            OsStr::new("nope"),
        ],
        "invalid value for 'read_policy': 'nope' (valid: auto",
    );
    refused(
        &[
            OsStr::new("set"),
            m_,
            OsStr::new("threads"),
            OsStr::new("2"),
        ],
        "'threads' cannot be changed while mounted",
    );
    let out = run_timeout(
        Command::new(mirrorfs_bin()).args([leg, fail, m_, OsStr::new("leg0")]),
        Duration::from_secs(30),
    );
    assert!(out.status.success());
    refused(
        &[leg, fail, m_, OsStr::new("leg1")],
        "'leg1' is the last leg in sync",
    );
    // Nothing changed but the leg failed on purpose.
    let st = stats(&mnt);
    assert_eq!(st.legs[0].state, LegState::Failed);
    assert_eq!(st.legs[1].state, LegState::InSync);
    assert!(dir_names(&full) == vec!["x".to_string()]);
}
