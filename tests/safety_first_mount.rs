//! Never lose data (issue 3): adopting existing data at the first mount. A populated leg and an
//! empty one: the data is served at once and the empty leg filled by a background resync; legs
//! that hold different data need `init_from=`, and a refused mount writes nothing.

#[macro_use]
mod common;

use common::*;
use mirrorfs::stats::{LegState, MountState};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The first mount of a populated leg0 and an empty leg1: the data is adopted (served at once
/// from leg0), leg1 is filled by a background resync, and the legs end identical, hard link,
/// symlink, xattr, mode and times included. The next mount needs no resync.
#[test]
fn the_first_mount_adopts_existing_data() {
    require_fuse!();
    require_tool!("getfattr");
    let dirs = TestDirs::new(2);
    populate(&dirs.legs[0], 80);
    let before = snapshot_tree(&dirs.legs[0]);
    let mut m = TestMirror::new(2).with_dirs(dirs).mount();
    let mnt = m.mnt().to_path_buf();
    let st = stats(&mnt);
    assert_eq!(st.legs[0].state, LegState::InSync, "{st:?}");
    assert!(
        [LegState::Stale, LegState::Resyncing, LegState::InSync].contains(&st.legs[1].state),
        "{:?}",
        st.legs[1]
    );
    let st = wait_resynced(&mnt);
    assert_eq!(st.legs_online, 2, "{st:?}");
    assert_legs_identical(m.legs());
    assert_content_on_legs(m.legs(), "a/b/hard", &pattern(1_500_000, 81));
    assert_eq!(
        fs::metadata(m.leg(1).join("a/b/hard")).unwrap().ino(),
        fs::metadata(m.leg(1).join("a/f1")).unwrap().ino(),
        "the hard link is one on leg1 too"
    );
    assert_eq!(
        get_xattr(m.leg(1).join("top"), "user.origin").unwrap(),
        b"adopted"
    );
    // Through the mount.
    assert_bytes_eq(
        &fs::read(mnt.join("top")).unwrap(),
        &pattern(300_000, 80),
        "top",
    );
    assert_eq!(fs::read_link(mnt.join("link")).unwrap(), Path::new("a/f1"));
    assert_eq!(fs::metadata(mnt.join("a/f1")).unwrap().nlink(), 2);
    // leg0's data itself is unchanged (but for the .mirrorfs folder the mount adds).
    let strip = |t: BTreeMap<PathBuf, String>| -> BTreeMap<PathBuf, String> {
        t.into_iter()
            .filter(|(p, _)| p != Path::new(".") && !p.starts_with(".mirrorfs"))
            .collect()
    };
    assert_snapshot_eq(
        &strip(before),
        &strip(snapshot_tree(m.leg(0))),
        "the adopted leg",
    );
    m.check_and_unmount();
    let _r = mount_ok(m.legs(), m.mnt(), &[]);
    let st = stats(m.mnt());
    assert_eq!(
        (st.state, st.legs_online),
        (MountState::Online, 2),
        "{st:?}"
    );
    assert!(st.resync.is_none(), "{st:?}");
}

/// Two legs holding different data at the first mount: refused (naming `init_from`), nothing
/// written on either; with `-o init_from=leg1` the mount goes ahead and leg0's content is
/// replaced by leg1's.
#[test]
fn differing_legs_at_the_first_mount_need_init_from() {
    require_fuse!();
    require_tool!("getfattr");
    let dirs = TestDirs::new(2);
    let legs = dirs.legs.clone();
    let mnt = dirs.mnt.clone();
    fs::write(legs[0].join("mine"), b"leg0's own file").unwrap();
    fs::create_dir(legs[0].join("a")).unwrap();
    fs::write(legs[0].join("a/f1"), b"leg0's version").unwrap();
    populate(&legs[1], 90);
    let before: Vec<_> = legs.iter().map(|l| snapshot_tree(l)).collect();

    let err = mount_refused(&legs, &mnt, &[]);
    assert!(err.contains("init_from"), "{err}");
    for (leg, b) in legs.iter().zip(&before) {
        assert_snapshot_eq(b, &snapshot_tree(leg), "a leg after a refused first mount");
    }

    let mut r = mount_ok(&legs, &mnt, &["init_from=leg1"]);
    let st = wait_resynced(&mnt);
    assert_eq!(st.legs_online, 2, "{st:?}");
    assert!(
        !legs[0].join("mine").exists(),
        "leg0's own file survived init_from=leg1"
    );
    assert_content_on_legs(&legs, "a/f1", &pattern(1_500_000, 91));
    assert_content_on_legs(&legs, "top", &pattern(300_000, 90));
    assert_legs_identical(&legs);
    assert!(!mnt.join("mine").exists());
    assert_bytes_eq(
        &fs::read(mnt.join("a/f1")).unwrap(),
        &pattern(1_500_000, 91),
        "a/f1 through the mount",
    );
    r.unmount();
    assert_legs_identical(&legs);
    drop(dirs);
}
