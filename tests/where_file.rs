//! `mirrorfs where FILE`: each leg's copy of a file and whether it is in sync, on a real mount:
//! a file, a directory, a symlink (not followed) and the root, by absolute and relative paths;
//! a copy changed behind the mirror's back; a leg dropped from the mirror; a path outside any
//! mirror.

#[macro_use]
mod common;

use common::*;
use serde_json::Value;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;

/// `mirrorfs where --json FILE` run in `cwd`: exit code and the parsed object.
fn where_json(cwd: &Path, file: &str) -> (Option<i32>, Value) {
    let out = run_timeout(
        Command::new(mirrorfs_bin())
            .args(["where", "--json", file])
            .current_dir(cwd),
        TOOL_TIMEOUT,
    );
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "where --json {file}: {e}\n{}{}",
            text(&out.stdout),
            text(&out.stderr)
        )
    });
    (out.status.code(), v)
}

#[test]
fn every_copy_of_file_dir_symlink_and_root() {
    require_fuse!();
    let m = TestMirror::new(3).mount();
    fs::create_dir(m.path("d")).unwrap();
    fs::write(m.path("d/f"), b"data").unwrap();
    symlink("f", m.path("d/l")).unwrap();
    symlink("/nonexistent", m.path("dangling")).unwrap();
    for (cwd, arg, rel) in [
        (m.root().to_path_buf(), path_str(&m.path("d/f")), "d/f"),
        (m.path("d"), "f".to_string(), "d/f"),
        (m.path("d"), "l".to_string(), "d/l"),
        (m.mnt().to_path_buf(), "dangling".to_string(), "dangling"),
        (m.mnt().to_path_buf(), "d".to_string(), "d"),
        (m.path("d"), "..".to_string(), ""),
        (m.mnt().to_path_buf(), ".".to_string(), ""),
    ] {
        let (code, v) = where_json(&cwd, &arg);
        assert_eq!(code, Some(0), "where {arg} in {}: {v}", cwd.display());
        assert_eq!(v["mount"], path_str(m.mnt()), "{v}");
        assert_eq!(v["relpath"], format!("/{rel}"), "{v}");
        let copies = v["copies"].as_array().unwrap();
        assert_eq!(copies.len(), 3, "{v}");
        for (i, c) in copies.iter().enumerate() {
            let want = if rel.is_empty() {
                m.leg(i).to_path_buf()
            } else {
                m.leg(i).join(rel)
            };
            assert_eq!(c["leg"], format!("leg{i}"), "{v}");
            assert_eq!(c["path"], path_str(&want), "{v}");
            assert_eq!(c["copy"], "in_sync", "{v}");
            assert_eq!(c["in_sync"], true, "{v}");
            assert!(fs::symlink_metadata(&want).is_ok(), "{}", want.display());
        }
    }
    // The text report: one line per leg.
    let out = run_mirrorfs(["where".as_ref(), m.path("d/f").as_os_str()]);
    assert_exit(&out, 0, "where d/f");
    let report = text(&out.stdout);
    for i in 0..3 {
        let line = status_leg_line(&report, &format!("leg{i}"));
        assert!(
            line.contains(&path_str(&m.leg(i).join("d/f"))) && line.ends_with("in sync"),
            "{report}"
        );
    }
    m.finish();
}

#[test]
fn copies_out_of_sync_are_named() {
    require_fuse!();
    let m = TestMirror::new(3).mount();
    fs::write(m.path("f"), b"data").unwrap();
    fs::write(m.path("g"), b"data").unwrap();
    // A copy changed behind the mirror's back (a longer file on leg2).
    fs::write(m.leg(2).join("f"), b"data, changed on the leg").unwrap();
    let (code, v) = where_json(m.mnt(), "f");
    assert_eq!(code, Some(1), "{v}");
    let c = &v["copies"][2];
    assert_eq!(
        (
            c["copy"].as_str(),
            c["exists"].as_bool(),
            c["matches"].as_bool(),
            c["in_sync"].as_bool()
        ),
        (Some("in_sync"), Some(true), Some(false), Some(false)),
        "{v}"
    );
    assert_eq!(v["copies"][0]["in_sync"], true);
    let out = run_mirrorfs(["where".as_ref(), m.path("f").as_os_str()]);
    assert_exit(&out, 1, "where f with a changed copy");
    assert!(
        status_leg_line(&text(&out.stdout), "leg2").contains("DIFFERS"),
        "{}",
        text(&out.stdout)
    );
    fs::write(m.leg(2).join("f"), b"data").unwrap(); // (size back; mtime still differs)

    // leg1 dropped: its copies are not in sync, whatever they hold.
    mirrorfs_ok(&[&"leg", &"fail", &m.mnt(), &"leg1"]);
    fs::write(m.path("g"), b"changed while leg1 is out").unwrap();
    let (code, v) = where_json(m.mnt(), "g");
    assert_eq!(code, Some(1), "{v}");
    let c = &v["copies"][1];
    assert_eq!(
        (
            c["leg_state"].as_str(),
            c["copy"].as_str(),
            c["in_sync"].as_bool()
        ),
        (Some("FAULTED"), Some("stale"), Some(false)),
        "{v}"
    );
    assert_eq!(v["copies"][0]["in_sync"], true, "{v}");
    assert_eq!(v["copies"][2]["in_sync"], true, "{v}");
    let out = run_mirrorfs(["where".as_ref(), m.path("g").as_os_str()]);
    assert!(
        status_leg_line(&text(&out.stdout), "leg1").contains("NOT IN SYNC"),
        "{}",
        text(&out.stdout)
    );
    // (The legs now differ on purpose: unmount without the identical-legs check.)
    drop(m);
}

#[test]
fn outside_a_mirror_or_nonexistent() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("f"), b"x").unwrap();
    let out = run_mirrorfs(["where".as_ref(), dir.path().join("f").as_os_str()]);
    assert_exit(&out, 2, "where on a file in no mirror");
    assert!(text(&out.stderr).contains("not inside a mirrorfs mount"));
    let out = run_mirrorfs(["where".as_ref(), dir.path().join("nope").as_os_str()]);
    assert_exit(&out, 2, "where on a file that does not exist");
    let out = run_mirrorfs(["where"]);
    assert_exit(&out, 2, "where without a file");
}
