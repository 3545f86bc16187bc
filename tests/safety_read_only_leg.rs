//! Never lose data (issue 3): a leg that goes read-only in the middle of a fio verify workload
//! (ext4 on a loop device with `errors=remount-ro`, or an injected EROFS). fio sees no error,
//! the leg is dropped, comes back (after a remount, or online with `mirrorfs leg add`), is
//! resynced, and fio verifies on each leg; the legs end identical.
//!
//! fio runs in the test's temp dir with `--verify_state_save=0`, so no `*-verify.state` file
//! lands in the working directory.

#[macro_use]
mod common;

use common::*;
use mirrorfs::stats::{LegState, MountState};
use std::fs::{self, File};
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// fio's random-write job with a crc32c verify pass, on `file`; writes limited to 8 MiB/s so
/// that the write phase lasts about 4 s.
fn fio_job(file: &Path) -> Vec<String> {
    [
        "--name=safety",
        "--rw=randwrite",
        "--bs=4k",
        "--size=32m",
        "--ioengine=psync",
        "--verify=crc32c",
        "--do_verify=1",
        "--verify_fatal=1",
        "--rate=,8m",
        "--randrepeat=1",
        // No `local-*-verify.state` file in the working directory.
        "--verify_state_save=0",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("--filename={}", file.display())])
    .collect()
}

/// Runs fio in the folder of `log` (a temp dir: whatever fio leaves behind goes there).
fn spawn_fio(args: &[String], log: &Path) -> Child {
    Command::new("fio")
        .args(args)
        .current_dir(log.parent().expect("a log in a folder"))
        .stdin(Stdio::null())
        .stdout(File::create(log).unwrap())
        .stderr(Stdio::from(
            File::create(log.with_extension("err")).unwrap(),
        ))
        .spawn()
        .expect("spawn fio")
}

/// How much of fio's writes must have reached leg1 before it fails: an eighth of the 32 MiB
/// job. The rest, 28 MiB at fio's 8 MiB/s, keeps the workload going for at least 3.5 s after
/// the failure, however busy the machine (a rate limit only ever slows fio down).
const WRITTEN_BEFORE_THE_FAILURE: u64 = 4 * MIB as u64;

/// Runs fio through the mount and calls `fail_leg1` once fio is well into its write phase
/// ([`WRITTEN_BEFORE_THE_FAILURE`] on leg1, polled rather than a fixed sleep): fio must finish
/// without an error and verify what it wrote; leg1 is dropped (FAULTED, write errors counted,
/// DEGRADED in the stats and in `mirrorfs status`). Leaves the mirror mounted.
fn fio_survives_a_failing_leg(m: &mut Mounted, fail_leg1: impl FnOnce()) {
    let mnt = m.mnt().to_path_buf();
    let log = m.root().join("fio.out");
    let mut fio = spawn_fio(&fio_job(&mnt.join("fio.dat")), &log);
    let writing = wait_for(Duration::from_secs(120), || {
        stats(&mnt).legs[1].write_bytes >= WRITTEN_BEFORE_THE_FAILURE
            || fio.try_wait().unwrap().is_some()
    });
    assert!(
        writing,
        "fio's writes did not reach leg1 within 120 s: {:?}",
        stats(&mnt).legs[1]
    );
    let before = stats(&mnt);
    assert!(
        fio.try_wait().unwrap().is_none(),
        "fio finished before the leg failed: {}",
        fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(
        before.legs[1].write_bytes > 0,
        "no write reached leg1 before it failed: {:?}",
        before.legs[1]
    );
    fail_leg1();
    let st = wait_timeout(&mut fio, Duration::from_secs(300), "fio");
    let out = fs::read_to_string(&log).unwrap_or_default()
        + &fs::read_to_string(log.with_extension("err")).unwrap_or_default();
    eprintln!("{out}");
    assert!(st.success(), "fio failed ({st}):\n{out}");
    assert!(out.contains("err= 0"), "fio reported an error:\n{out}");
    let after = stats(&mnt);
    assert!(
        after.legs[0].write_bytes > before.legs[0].write_bytes + 4 * MIB as u64,
        "the workload did not go on after the leg failed: {:?} -> {:?}",
        before.legs[0],
        after.legs[0]
    );
    assert_eq!((after.state, after.legs_online), (MountState::Degraded, 1));
    assert_eq!(after.legs[0].state, LegState::InSync);
    assert_eq!(after.legs[1].state, LegState::Failed);
    assert!(after.legs[1].write_errors >= 1, "{:?}", after.legs[1]);
    let (code, report) = status(&mnt);
    assert_eq!(code, Some(1), "status:\n{report}");
    assert!(report.contains("state: DEGRADED"), "{report}");
    assert!(
        status_leg_line(&report, "leg1").contains("FAULTED"),
        "{report}"
    );
    assert_no_mirrorfs_leak(&mnt);
}

/// `fio --verify_only` of the job on `leg`'s copy of fio.dat, directly (logs in `logs`).
#[track_caller]
fn fio_verifies_on(leg: &Path, logs: &Path, what: &str) {
    let mut job = fio_job(&leg.join("fio.dat"));
    job.push("--verify_only".into());
    let vlog = logs.join(format!("fio-verify-{what}.out"));
    let mut v = spawn_fio(&job, &vlog);
    let st = wait_timeout(&mut v, Duration::from_secs(300), "fio --verify_only");
    let out = fs::read_to_string(&vlog).unwrap_or_default()
        + &fs::read_to_string(vlog.with_extension("err")).unwrap_or_default();
    assert!(
        st.success(),
        "fio --verify_only on {what} failed ({st}):\n{out}"
    );
    assert!(
        out.contains("err= 0"),
        "fio --verify_only on {what}:\n{out}"
    );
}

/// leg1 is a real ext4 that turns read-only (`errors=remount-ro` after an ext4 error) in the
/// middle of the workload. Then it comes back: the mirror is unmounted (it keeps its
/// descriptors on a dropped leg, so the leg's filesystem cannot be unmounted under it), the
/// ext4 is checked (`e2fsck -fy`) and mounted again at the same place, and the mirror is
/// mounted again: leg1 is stale, resynced from leg0's away log in the background, and joins.
/// The legs are identical and fio verifies on each leg's copy.
#[test]
fn a_leg_goes_read_only_during_fio_verify() {
    require_fuse!();
    require_tool!("fio");
    require_tool!("getfattr");
    require_tool!("mkfs.ext4");
    require_tool!("e2fsck");
    let mut ext4 = Ext4Leg::new(256 * MIB as u64);
    let mut dirs = TestDirs::new(2);
    dirs.legs[1] = ext4.mnt.clone();
    let mut m = TestMirror::new(2).with_dirs(dirs).mount();
    fio_survives_a_failing_leg(&mut m, || ext4.go_read_only());
    // Writes on leg1 fail for real now.
    assert_errno(
        File::create(ext4.mnt.join("probe")),
        libc::EROFS,
        "creating a file on the read-only ext4 leg",
    );
    m.unmount();
    let logs = m.root().to_path_buf();
    fio_verifies_on(m.leg(0), &logs, "leg0 while leg1 is out");

    ext4.repair_and_remount();
    let mut r = mount_ok(m.legs(), m.mnt(), &[]);
    let st = stats(m.mnt());
    assert!(
        [LegState::Stale, LegState::Resyncing, LegState::InSync].contains(&st.legs[1].state),
        "{:?}",
        st.legs[1]
    );
    let st = wait_resynced(m.mnt());
    assert_eq!(st.legs_online, 2, "{st:?}");
    assert_legs_identical(m.legs());
    r.unmount();
    assert_legs_identical(m.legs());
    fio_verifies_on(m.leg(0), &logs, "leg0");
    fio_verifies_on(m.leg(1), &logs, "leg1");
    drop(m);
    drop(ext4);
}

/// docs/operations.md, "A disk died (or a leg was dropped)", step 2: a leg dropped because its
/// filesystem went read-only is fixed and brought back with `mirrorfs leg add` *without
/// unmounting the mirror*. For an ext4 that went read-only after an error, fixing it means
/// unmounting it, `e2fsck`, and mounting it again; then `leg add` must resync the leg at its
/// path (the filesystem mounted there now), and fio verifies on each leg.
#[test]
fn a_read_only_ext4_leg_is_repaired_and_added_back_online() {
    require_fuse!();
    require_tool!("fio");
    require_tool!("getfattr");
    require_tool!("mkfs.ext4");
    require_tool!("e2fsck");
    let mut ext4 = Ext4Leg::new(256 * MIB as u64);
    let mut dirs = TestDirs::new(2);
    dirs.legs[1] = ext4.mnt.clone();
    let mut m = TestMirror::new(2).with_dirs(dirs).mount();
    let mnt = m.mnt().to_path_buf();
    fio_survives_a_failing_leg(&mut m, || ext4.go_read_only());
    ext4.repair_and_remount();
    mirrorfs_ok(&[&"leg", &"add", &mnt, &"leg1"]);
    let st = wait_resynced(&mnt);
    assert_eq!(st.legs_online, 2, "{st:?}");
    assert_legs_identical(m.legs());
    m.unmount();
    assert_legs_identical(m.legs());
    let logs = m.root().to_path_buf();
    fio_verifies_on(m.leg(0), &logs, "leg0");
    fio_verifies_on(m.leg(1), &logs, "leg1");
    drop(m);
    drop(ext4);
}

/// The same with an injected EROFS on every write of leg1 (no loop device needed); the leg
/// comes back online: the fault is cleared and `mirrorfs leg add` resyncs it while the mirror
/// serves. The legs are identical and fio verifies on each leg's copy.
#[test]
fn injected_erofs_during_fio_verify() {
    require_fuse!();
    require_tool!("fio");
    require_tool!("getfattr");
    require_tool!("setfattr");
    let mut m = TestMirror::new(2).option("fault_injection").mount();
    let mnt = m.mnt().to_path_buf();
    fio_survives_a_failing_leg(&mut m, || {
        setfattr_ok(&mnt, FAULT, "leg=leg1 op=write errno=EROFS")
    });
    setfattr_ok(&mnt, FAULT, "clear");
    assert_eq!(getfattr_ok(&mnt.join(".mirrorfs"), FAULT), "");
    mirrorfs_ok(&[&"leg", &"add", &mnt, &"leg1"]);
    let st = wait_resynced(&mnt);
    assert_eq!(st.legs_online, 2, "{st:?}");
    assert_legs_identical(m.legs());
    // The fio file through the mount is what fio wrote (read back from the joined mirror).
    let logs = m.root().to_path_buf();
    fio_verifies_on(&mnt, &logs, "the mount");
    m.unmount();
    assert_legs_identical(m.legs());
    fio_verifies_on(m.leg(0), &logs, "leg0");
    fio_verifies_on(m.leg(1), &logs, "leg1");
}

/// Streamed writes (1 MiB each, which go to the legs with `RWF_DONTCACHE`) while leg1's ext4
/// goes read-only halfway, for real: every write succeeds, leg1 is dropped with a write error
/// counted, and leg0 holds the whole file, as after any write a leg fails.
#[test]
fn a_leg_goes_read_only_during_streamed_writes() {
    require_fuse!();
    require_tool!("getfattr");
    require_tool!("mkfs.ext4");
    let ext4 = Ext4Leg::new(256 * MIB as u64);
    let mut dirs = TestDirs::new(2);
    dirs.legs[1] = ext4.mnt.clone();
    let mut m = TestMirror::new(2).with_dirs(dirs).mount();
    let data = pattern(16 * MIB, 11);
    let mut f = File::create(m.path("big")).unwrap();
    for (i, chunk) in data.chunks(MIB).enumerate() {
        if i == 8 {
            f.sync_all().unwrap();
            assert!(stats(m.mnt()).legs[1].write_bytes >= 8 * MIB as u64);
            ext4.go_read_only();
        }
        f.write_all(chunk)
            .unwrap_or_else(|e| panic!("write {i} while leg1 fails: {e}"));
    }
    f.sync_all().expect("fsync after leg1 failed");
    drop(f);
    let st = stats(m.mnt());
    assert_eq!((st.state, st.legs_online), (MountState::Degraded, 1));
    assert_eq!(st.legs[0].state, LegState::InSync);
    assert_eq!(st.legs[1].state, LegState::Failed);
    assert!(st.legs[1].write_errors >= 1, "{:?}", st.legs[1]);
    assert_bytes_eq(
        &fs::read(m.path("big")).unwrap(),
        &data,
        "big through the mount",
    );
    m.unmount();
    assert_bytes_eq(
        &read_direct(&m.leg(0).join("big"), MIB),
        &data,
        "big on leg0",
    );
    drop(m);
    drop(ext4);
}
