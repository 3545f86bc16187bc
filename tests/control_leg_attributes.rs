//! Leg attributes (`LEG=name=...,rot|nonrot,writemostly`) through a real mount (issue 5): shown
//! in the statistics, `readleg`, `copies` and `mirrorfs status`; bad ones refuse the mount and
//! write nothing on any leg.

#[macro_use]
mod common;

use common::*;
use serde_json::Value;
use std::ffi::OsString;
use std::fs;
use std::path::Path;

#[test]
fn leg_attributes_show_in_stats() {
    require_fuse!();
    require_tool!("getfattr");
    let dirs = TestDirs::new(2);
    let legs = format!(
        "{}=name=fast,nonrot:{}=rot,writemostly",
        path_str(&dirs.legs[0]),
        path_str(&dirs.legs[1])
    );
    let mnt = dirs.mnt.clone();
    let m = mount_with_args(
        dirs,
        vec![
            legs.into(),
            mnt.into(),
            "-o".into(),
            "read_policy=first".into(),
        ],
    );
    let st = stats(m.mnt());
    let (a, b) = (&st.legs[0], &st.legs[1]);
    assert_eq!(
        (
            a.name.as_str(),
            a.rotational,
            a.rotational_source.as_str(),
            a.writemostly
        ),
        ("fast", false, "option", false),
        "leg0 with name=fast,nonrot"
    );
    assert_eq!(
        (
            b.name.as_str(),
            b.rotational,
            b.rotational_source.as_str(),
            b.writemostly
        ),
        ("leg1", true, "option", true),
        "leg1 with rot,writemostly"
    );
    assert_eq!(
        Path::new(&a.path),
        m.leg(0),
        "the path is without attributes"
    );
    assert_eq!(Path::new(&b.path), m.leg(1));
    assert_eq!(
        getfattr_ok(m.mnt(), "user.mirrorfs.legs"),
        legs_arg(m.legs())
    );
    fs::write(m.path("f"), b"x").unwrap();
    assert_eq!(getfattr_ok(&m.path("f"), "user.mirrorfs.readleg"), "fast");
    let copies: Value =
        serde_json::from_str(&getfattr_ok(&m.path("f"), "user.mirrorfs.copies")).unwrap();
    assert_eq!(
        copies,
        serde_json::json!({"fast": "in_sync", "leg1": "in_sync"})
    );
    let out = run_mirrorfs(&[OsString::from("status"), m.mnt().into()]);
    assert_exit(&out, 0, "status");
    let s = text(&out.stdout);
    assert!(s.contains("  fast ") && s.contains("(writemostly)"), "{s}");
    m.finish();
}

#[test]
fn bad_leg_attributes_refuse_the_mount() {
    require_fuse!();
    let dirs = TestDirs::new(2);
    let (l0, l1) = (path_str(&dirs.legs[0]), path_str(&dirs.legs[1]));
    for (legs, says) in [
        (format!("{l0}=fast:{l1}"), "unknown attribute 'fast'"),
        (format!("{l0}=rot,nonrot:{l1}"), "'rot' and 'nonrot'"),
        (format!("{l0}=name=a b:{l1}"), "invalid name"),
        (format!("{l0}=name=x:{l1}=name=x"), "'x' is used twice"),
        (format!("{l0}:{l1}=name=leg0"), "'leg0' is used twice"),
    ] {
        let out = run_mirrorfs([legs.as_str(), &path_str(&dirs.mnt)]);
        assert_exit(&out, 1, &legs);
        assert!(
            text(&out.stderr).contains(says),
            "{legs}: {}",
            text(&out.stderr)
        );
        assert!(!is_mounted(&dirs.mnt), "{legs} mounted anyway");
        for l in &dirs.legs {
            assert!(!l.join(".mirrorfs").exists(), "{legs} wrote a superblock");
        }
    }
}
