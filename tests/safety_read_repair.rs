//! Never lose data (issue 3): a read error is answered from another leg and repaired. An
//! injected read error is answered from another leg and repaired on the failing one, keeping the
//! copy's mtime; a leg whose repair fails too is dropped, and resynced at the next mount. Each
//! scenario ends with the legs compared byte for byte.

#[macro_use]
mod common;

use common::*;
use mirrorfs::stats::{LegState, MountState};
use std::fs;

legs_test!(
    injected_read_error_is_repaired,
    persistent_read_fault_with_failing_repair_drops_the_leg,
);

/// The size of the file read back by [`read_repair`].
const REPAIR_FILE: usize = 6 * MIB;

fn injected_read_error_is_repaired(n: usize) {
    read_repair(n, false);
}

/// Read-repair rewrites bytes of leg0's copy: that is no change of the file, so the copy must
/// keep its mtime (the legs stay identical, and what `stat` shows through the mount, taken from
/// leg0 here, does not change because of a read).
#[test]
fn read_repair_keeps_the_copy_mtime() {
    read_repair(2, true);
}

/// leg0 really holds bad bytes in `[4 KiB, 12 KiB)` of a 6 MiB file and is told to fail the
/// next read of that file once; reads go to leg0 first (`read_policy=first`). The file is read
/// whole through the mount with `O_DIRECT`, 64 KiB per request, so the one injected failure
/// hits the first request, `[0, 64 KiB)`, exactly the range with the bad bytes: the data comes
/// from another leg, is written back over leg0's bad bytes, and is counted. The legs then hold
/// the same bytes; with `check_times`, the same mtimes too (the whole comparison).
fn read_repair(n: usize, check_times: bool) {
    require_fuse!();
    require_tool!("getfattr");
    require_tool!("setfattr");
    let opts = ["read_policy=first", "fault_injection"];
    let mut m = TestMirror::new(n).option(opts[0]).option(opts[1]).mount();
    let data = pattern(REPAIR_FILE, 31);
    fs::write(m.path("big"), &data).unwrap();
    // Unmount and mount again below: the page cache of the mount starts empty.
    m.check_and_unmount();

    let leg0_file = m.leg(0).join("big");
    corrupt_keeping_times(&leg0_file, 4096, 8192);
    assert!(
        !legs_differences(m.legs()).is_empty(),
        "the corruption of leg0's copy is not visible"
    );
    let mnt = m.mnt().to_path_buf();
    let mtime = fs::metadata(m.leg(1).join("big"))
        .unwrap()
        .modified()
        .unwrap();
    let mut r = mount_ok(m.legs(), &mnt, &opts);
    setfattr_ok(
        &mnt.join("big"),
        FAULT,
        "leg=leg0 op=read errno=EIO times=1",
    );
    assert!(
        getfattr_ok(&mnt.join(".mirrorfs"), FAULT).contains("times: Some(1)"),
        "the rule is in force"
    );

    let got = read_direct(&mnt.join("big"), DIRECT_CHUNK);
    assert_bytes_eq(&got, &data, "O_DIRECT read of the file through the mount");
    assert_eq!(
        getfattr_ok(&mnt.join(".mirrorfs"), FAULT),
        "",
        "the one-shot rule was used up"
    );

    let st = stats(&mnt);
    let l0 = &st.legs[0];
    assert_eq!(
        (l0.read_errors, l0.read_repairs, l0.write_errors),
        (1, 1, 0),
        "leg0's read_errors, read_repairs, write_errors: {l0:?}"
    );
    assert_eq!(
        l0.state,
        LegState::InSync,
        "a repaired leg stays in the mirror"
    );
    assert_eq!((st.state, st.legs_online), (MountState::Online, n));
    for l in &st.legs[1..] {
        assert_eq!(
            (l.read_errors, l.read_repairs, l.state),
            (0, 0, LegState::InSync),
            "{l:?}"
        );
    }
    // An error was counted: status says so (exit 1), but every leg is online.
    let (code, report) = status(&mnt);
    assert_eq!(code, Some(1), "status after a read error:\n{report}");
    assert!(report.contains("state: ONLINE"), "{report}");

    // leg0's copy was repaired: it equals the others, byte for byte...
    assert_bytes_eq(
        &fs::read(&leg0_file).unwrap(),
        &data,
        "leg0's copy after read-repair",
    );
    // ...and serves the whole file (policy first: leg0 answers every read now).
    assert_bytes_eq(
        &fs::read(mnt.join("big")).unwrap(),
        &data,
        "buffered read after the repair",
    );
    assert_eq!(stats(&mnt).legs[0].read_errors, 1, "no further read errors");
    assert_no_mirrorfs_leak(&mnt);
    assert_content_on_legs(m.legs(), "big", &data);
    if check_times {
        // The repair is no change of the file: the copies keep the same times too.
        assert_legs_identical(m.legs());
    }
    r.unmount();
    assert_content_on_legs(m.legs(), "big", &data);
    if check_times {
        assert_legs_identical(m.legs());
        // A fresh mount (no cached attributes): the file's mtime is what it was.
        let _r = mount_ok(m.legs(), &mnt, &opts);
        assert_eq!(
            fs::metadata(mnt.join("big")).unwrap().modified().unwrap(),
            mtime,
            "the mtime through the mount changed because of a read"
        );
    }
}

/// leg0 fails every read of the file and the repair as well: the read is answered from another
/// leg, and leg0, which cannot be repaired, is dropped (DEGRADED, status exit 1). Later writes
/// go to the others only. The drop is recorded: the next mount (no `degraded` needed) resyncs
/// leg0 in the background, and the legs end identical.
fn persistent_read_fault_with_failing_repair_drops_the_leg(n: usize) {
    require_fuse!();
    require_tool!("getfattr");
    require_tool!("setfattr");
    let mut m = TestMirror::new(n)
        .option("read_policy=first")
        .option("fault_injection")
        .mount();
    let mnt = m.mnt().to_path_buf();
    let data = pattern(MIB, 32);
    fs::write(m.path("f"), &data).unwrap();
    setfattr_ok(&mnt.join("f"), FAULT, "leg=leg0 op=read errno=EIO");
    setfattr_ok(&mnt.join("f"), FAULT, "leg=leg0 op=repair errno=EIO");

    let got = read_direct(&mnt.join("f"), DIRECT_CHUNK);
    assert_bytes_eq(&got, &data, "read with leg0 failing");

    let st = stats(&mnt);
    let l0 = &st.legs[0];
    assert_eq!(
        l0.state,
        LegState::Failed,
        "leg0 could not be repaired: {l0:?}"
    );
    assert!(l0.read_errors >= 1, "{l0:?}");
    assert_eq!(l0.read_repairs, 0, "{l0:?}");
    assert!(
        l0.write_errors >= 1,
        "the failed repair is a write error: {l0:?}"
    );
    assert_eq!((st.state, st.legs_online), (MountState::Degraded, n - 1));
    for l in &st.legs[1..] {
        assert_eq!(l.state, LegState::InSync, "{l:?}");
    }
    let (code, report) = status(&mnt);
    assert_eq!(code, Some(1), "status of a degraded mount:\n{report}");
    assert!(report.contains("state: DEGRADED"), "{report}");
    assert!(
        status_leg_line(&report, "leg0").contains("FAULTED"),
        "{report}"
    );
    assert_eq!(
        getfattr_ok(&mnt.join(".mirrorfs"), "user.mirrorfs.state"),
        "DEGRADED"
    );

    // Still served, and writes go on without leg0.
    assert_bytes_eq(
        &fs::read(mnt.join("f")).unwrap(),
        &data,
        "read after the drop",
    );
    fs::write(mnt.join("after"), b"written after leg0 was dropped").unwrap();
    assert_content_on_legs(&m.legs()[1..], "after", b"written after leg0 was dropped");
    assert!(
        !m.leg(0).join("after").exists(),
        "leg0 was written after it was dropped"
    );
    m.unmount();
    assert_legs_identical(&m.legs()[1..]);
    // Nothing was lost on leg0 either: its copy of f is intact (it was never bad).
    assert_bytes_eq(
        &fs::read(m.leg(0).join("f")).unwrap(),
        &data,
        "leg0/f after the drop",
    );
    // The drop is recorded: mounted again (no `degraded` needed), leg0 is stale, is resynced
    // in the background ("after" copied onto it), joins, and the legs end identical.
    let mut r = mount_ok(m.legs(), m.mnt(), &[]);
    let st = wait_resynced(m.mnt());
    assert_eq!(st.legs_online, n, "{st:?}");
    assert_content_on_legs(m.legs(), "after", b"written after leg0 was dropped");
    assert_content_on_legs(m.legs(), "f", &data);
    assert_legs_identical(m.legs());
    r.unmount();
    assert_legs_identical(m.legs());
}
