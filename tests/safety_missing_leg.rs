//! Never lose data (issue 3): a leg missing at mount. The mount is refused without `degraded`
//! and served with it; when the leg returns it is mounted STALE, resynced in the background
//! (never read, no user write, until it joins), and the renames and deletes made meanwhile are
//! reproduced; the legs end identical.

#[macro_use]
mod common;

use common::*;
use mirrorfs::stats::{LegState, MountState};
use serde_json::Value;
use std::collections::BTreeSet;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The throttle that makes the resync of [`AWAY_BIG`] last about 4 s (it counts the bytes read
/// from the source and those written to the target).
const RESYNC_THROTTLE: &str = "resync_speed_max=1M";
/// A file written while a leg is away, to keep its throttled resync going for a while.
const AWAY_BIG: usize = 2 * MIB;

fn away_log(leg: &Path, leg_id: &str) -> PathBuf {
    leg.join(format!(".mirrorfs/away-{leg_id}.log"))
}

/// leg1 is moved away after a clean unmount: the mount is refused without `degraded`, served
/// from leg0 with it (DEGRADED, MISSING), the changes land on leg0 only and are listed in
/// leg0's away log for leg1. When leg1 comes back it is stale: mounted without `degraded`,
/// resynced in the background (RESYNCING; no read of it, no user write to it meanwhile),
/// then it joins (ONLINE, serving reads) with the renames and deletes reproduced, nothing
/// resurrected, and the legs identical.
#[test]
fn a_leg_missing_at_mount() {
    require_fuse!();
    require_tool!("getfattr");
    let mut m = TestMirror::new(2).mount();
    let keep = pattern(100_000, 41);
    fs::write(m.path("keep"), &keep).unwrap();
    fs::write(m.path("gone"), b"to be deleted while leg1 is away").unwrap();
    fs::create_dir(m.path("d")).unwrap();
    fs::write(m.path("d/old"), pattern(50_000, 42)).unwrap();
    fs::create_dir(m.path("sub")).unwrap();
    fs::write(m.path("untouched"), pattern(70_000, 43)).unwrap();
    m.check_and_unmount();

    let mnt = m.mnt().to_path_buf();
    let legs = m.legs().to_vec();
    let leg1_id = superblock(&legs[1])["leg_id"]
        .as_str()
        .expect("leg_id")
        .to_string();
    let away_dir = m.root().join("leg1.away");
    fs::rename(&legs[1], &away_dir).unwrap();
    let leg1_before = snapshot_tree(&away_dir);

    // Refused without degraded, saying what to do.
    let err = mount_refused(&legs, &mnt, &[]);
    assert!(
        err.lines().any(|l| l.contains("-o degraded")),
        "no line mentions -o degraded: {err}"
    );
    assert!(!legs[1].exists(), "the missing leg's path was created");

    // Served with degraded.
    let mut r = mount_ok(&legs, &mnt, &["degraded"]);
    let st = stats(&mnt);
    assert_eq!((st.state, st.legs_online), (MountState::Degraded, 1));
    assert_eq!(
        (st.legs[0].state, st.legs[1].state),
        (LegState::InSync, LegState::Missing)
    );
    let (code, report) = status(&mnt);
    assert_eq!(code, Some(1), "status with a missing leg:\n{report}");
    assert!(report.contains("state: DEGRADED"), "{report}");
    assert!(
        status_leg_line(&report, "leg1").contains("MISSING"),
        "{report}"
    );
    assert_eq!(
        getfattr_ok(&mnt.join(".mirrorfs"), "user.mirrorfs.state"),
        "DEGRADED"
    );
    assert_bytes_eq(&fs::read(mnt.join("keep")).unwrap(), &keep, "keep");

    // Changes while leg1 is away.
    let mut keep2 = keep.clone();
    keep2.extend_from_slice(b"appended while leg1 was away");
    OpenOptions::new()
        .append(true)
        .open(mnt.join("keep"))
        .unwrap()
        .write_all(b"appended while leg1 was away")
        .unwrap();
    let new = pattern(300_000, 44);
    fs::write(mnt.join("new"), &new).unwrap();
    // Enough to copy that the throttled resync below lasts a few seconds.
    let big = pattern(AWAY_BIG, 45);
    fs::write(mnt.join("big"), &big).unwrap();
    fs::rename(mnt.join("d/old"), mnt.join("d/renamed")).unwrap();
    fs::remove_file(mnt.join("gone")).unwrap();
    fs::create_dir(mnt.join("sub/newdir")).unwrap();

    // They land on leg0...
    let leg0 = [legs[0].clone()];
    assert_content_on_legs(&leg0, "keep", &keep2);
    assert_content_on_legs(&leg0, "new", &new);
    assert_content_on_legs(&leg0, "d/renamed", &pattern(50_000, 42));
    assert!(!legs[0].join("d/old").exists());
    assert!(!legs[0].join("gone").exists());
    assert!(legs[0].join("sub/newdir").is_dir());
    // ...and nowhere else.
    assert_snapshot_eq(&leg1_before, &snapshot_tree(&away_dir), "the missing leg");

    // leg0's away log for leg1 lists the changed paths: the written files, and the folders
    // whose entries changed (creation, rename, deletion, mkdir).
    let log = away_log(&legs[0], &leg1_id);
    let want: BTreeSet<String> = [".", "keep", "new", "d", "sub"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    // The away log is written out by the sweep, every second: 30 s is far beyond that.
    let listed = wait_for(Duration::from_secs(30), || {
        log_records(&log).is_superset(&want)
    });
    assert!(
        listed,
        "{} lists {:?}, want at least {want:?}",
        log.display(),
        log_records(&log)
    );
    assert!(
        !log_records(&log).contains("untouched"),
        "an unchanged file is in the away log: {:?}",
        log_records(&log)
    );
    r.unmount();
    assert!(log_records(&log).is_superset(&want), "after unmount");
    let sb0 = superblock(&legs[0]);
    assert_eq!(sb0["clean"], Value::Bool(true), "{sb0}");
    assert!(
        sb0["failed_legs"]
            .as_array()
            .unwrap()
            .contains(&Value::String(leg1_id.clone())),
        "leg0's superblock does not record leg1 as away: {sb0}"
    );

    // leg1 comes back: it is stale, and mounted without `degraded`. It is resynced in the
    // background from leg0's away log, throttled so that the copy of `big` alone takes about
    // 4 s (the checks below take well under 1 s): long enough to see it RESYNCING and to read
    // through the mount meanwhile. The policy prefers leg1 for every read, so that a read it
    // served would show.
    fs::rename(&away_dir, &legs[1]).unwrap();
    let opts = [RESYNC_THROTTLE, "read_policy=leg:leg1"];
    let mut r = mount_ok(&legs, &mnt, &opts);
    let st = stats(&mnt);
    assert_eq!(st.legs[0].state, LegState::InSync, "{st:?}");
    assert!(
        [LegState::Stale, LegState::Resyncing].contains(&st.legs[1].state),
        "the returning leg right after the mount: {:?}",
        st.legs[1]
    );
    assert_eq!((st.state, st.legs_online), (MountState::Degraded, 1));
    assert!(
        wait_for(Duration::from_secs(10), || stats(&mnt).legs[1].state
            == LegState::Resyncing),
        "leg1 is not RESYNCING 10 s after the mount: {:?}",
        stats(&mnt)
    );
    let (code, report) = status(&mnt);
    assert_eq!(code, Some(1), "status while resyncing:\n{report}");
    assert!(
        report.contains("resync in progress on leg1")
            && status_leg_line(&report, "leg1").contains("RESYNCING"),
        "{report}"
    );

    // Meanwhile the mount serves everything from leg0: the deleted file and the old name do
    // not come back, and leg1 serves no read and takes no user write.
    assert_eq!(
        dir_names(&mnt),
        ["big", "d", "keep", "new", "sub", "untouched"],
        "the mount's root"
    );
    assert_eq!(dir_names(mnt.join("d")), ["renamed"]);
    assert_eq!(dir_names(mnt.join("sub")), ["newdir"]);
    assert_bytes_eq(&fs::read(mnt.join("keep")).unwrap(), &keep2, "keep");
    assert_bytes_eq(&fs::read(mnt.join("new")).unwrap(), &new, "new");
    assert_bytes_eq(&read_direct(&mnt.join("big"), DIRECT_CHUNK), &big, "big");
    assert_bytes_eq(
        &fs::read(mnt.join("d/renamed")).unwrap(),
        &pattern(50_000, 42),
        "d/renamed",
    );
    assert_bytes_eq(
        &fs::read(mnt.join("untouched")).unwrap(),
        &pattern(70_000, 43),
        "untouched",
    );
    // A change while it resyncs reaches leg1 through the resync (catch-up or join), not as a
    // user write.
    let late = pattern(20_000, 46);
    fs::write(mnt.join("sub/newdir/late"), &late).unwrap();
    let st = stats(&mnt);
    assert_eq!(
        st.legs[1].state,
        LegState::Resyncing,
        "the resync ended before the reads were done (the throttle should make it last ~4 s): \
         the check below would prove nothing"
    );
    assert_eq!(
        (st.legs[1].read_ops, st.legs[1].write_ops),
        (0, 0),
        "the resyncing leg was used: {:?}",
        st.legs[1]
    );
    assert!(st.legs[0].read_ops > 0, "{:?}", st.legs[0]);

    // It joins: renames and deletes reproduced, nothing resurrected, the late write there.
    let st = wait_resynced(&mnt);
    assert!(
        st.resync.as_ref().unwrap().elapsed_s >= 2,
        "the throttled resync took {} s",
        st.resync.as_ref().unwrap().elapsed_s
    );
    for gone in ["d/old", "gone"] {
        assert!(
            fs::symlink_metadata(legs[1].join(gone)).is_err(),
            "{gone} is back on leg1 after its resync"
        );
    }
    assert_eq!(dir_names(legs[1].join("d")), ["renamed"]);
    assert_content_on_legs(&legs, "keep", &keep2);
    assert_content_on_legs(&legs, "new", &new);
    assert_content_on_legs(&legs, "big", &big);
    assert_content_on_legs(&legs, "d/renamed", &pattern(50_000, 42));
    assert_content_on_legs(&legs, "sub/newdir/late", &late);
    assert_legs_identical(&legs);
    // ...and serves reads now (the policy prefers it).
    let before = stats(&mnt).legs[1].read_ops;
    assert_bytes_eq(&read_direct(&mnt.join("big"), DIRECT_CHUNK), &big, "big");
    assert!(
        stats(&mnt).legs[1].read_ops > before,
        "leg1 serves no read after it joined: {:?}",
        stats(&mnt).legs[1]
    );
    r.unmount();
    assert_legs_identical(&legs);
    let sb0 = superblock(&legs[0]);
    assert!(
        !sb0["failed_legs"]
            .as_array()
            .unwrap()
            .contains(&Value::String(leg1_id.clone())),
        "leg0 still records leg1 as away after its resync: {sb0}"
    );
    assert!(!log.exists(), "{} is left after the join", log.display());
    // The next mount needs no resync.
    let _r = mount_ok(&legs, &mnt, &[]);
    assert_online_without_resync(&mnt, 2);
}
