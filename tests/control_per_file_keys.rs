//! The per-file keys through a real mount (issue 5), read with the real `getfattr`: `relpath`,
//! `allpaths` (one backing path per leg), `readleg` and `copies`; they follow a rename and are
//! never listed.

#[macro_use]
mod common;

use common::*;
use serde_json::Value;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

legs_test!(per_file_keys);

fn per_file_keys(n: usize) {
    require_fuse!();
    require_tool!("getfattr");
    let m = TestMirror::new(n).option("read_policy=first").mount();
    fs::create_dir(m.path("dir")).unwrap();
    let data = pattern(50_000, 9);
    fs::write(m.path("dir/f"), &data).unwrap();

    assert_eq!(
        getfattr_ok(&m.path("dir/f"), "user.mirrorfs.relpath"),
        "/dir/f"
    );
    assert_eq!(getfattr_ok(&m.path("dir"), "user.mirrorfs.relpath"), "/dir");
    assert_eq!(getfattr_ok(m.mnt(), "user.mirrorfs.relpath"), "/");

    let all = getfattr(&m.path("dir/f"), "user.mirrorfs.allpaths").unwrap();
    let paths: Vec<PathBuf> = all
        .split(|b| *b == 0)
        .map(|s| PathBuf::from(String::from_utf8(s.to_vec()).unwrap()))
        .collect();
    assert_eq!(paths.len(), n, "one backing path per leg: {paths:?}");
    for (i, bp) in paths.iter().enumerate() {
        let want = fs::canonicalize(m.leg(i)).unwrap().join("dir/f");
        assert_eq!(bp, &want, "backing path on leg {i}");
        assert_bytes_eq(&fs::read(bp).unwrap(), &data, &bp.display().to_string());
        assert_eq!(
            fs::metadata(bp).unwrap().ino(),
            lstat_ok(m.leg(i).join("dir/f")).st_ino
        );
    }

    assert_eq!(
        getfattr_ok(&m.path("dir/f"), "user.mirrorfs.readleg"),
        "leg0"
    );

    let copies: Value =
        serde_json::from_str(&getfattr_ok(&m.path("dir/f"), "user.mirrorfs.copies")).unwrap();
    let obj = copies.as_object().expect("copies is an object");
    assert_eq!(obj.len(), n, "{copies}");
    for i in 0..n {
        assert_eq!(copies[format!("leg{i}")], "in_sync", "{copies}");
    }

    // The keys follow a rename.
    fs::rename(m.path("dir/f"), m.path("dir/g")).unwrap();
    assert_eq!(
        getfattr_ok(&m.path("dir/g"), "user.mirrorfs.relpath"),
        "/dir/g"
    );
    // They are not listed.
    let out = run(
        "getfattr",
        &[&"-d", &"-m", &"-", &m.path("dir/g")],
        TOOL_TIMEOUT,
    );
    assert!(
        !text(&out.stdout).contains("mirrorfs"),
        "getfattr -d lists control keys on a file: {}",
        text(&out.stdout)
    );
    m.finish();
}
