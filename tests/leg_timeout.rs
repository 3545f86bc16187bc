//! A leg that hangs (issue 13: `leg_timeout=`): leg1 sits on the disk model, which stops
//! answering while its hang file exists (a dead NFS server, a disk that stopped answering).
//! fio, reading and writing through the mount, sees no error and no I/O slower than the
//! timeout plus a second; the leg is dropped (DEGRADED); once the leg answers again its
//! abandoned operations end, and `mirrorfs leg add` resyncs it.

#[macro_use]
mod common;

use common::*;
use mirrorfs::stats::{LegState, MountState};
use std::ffi::OsStr;
use std::fs::{self, File};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const TIMEOUT_S: f64 = 2.0;

#[test]
fn a_hanging_leg_is_dropped_within_the_timeout_and_resynced_once_it_answers() {
    require_fuse!();
    require_tool!("fio");
    let model = ModelLeg::new(&[]);
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("local");
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&local).unwrap();
    fs::create_dir(&mnt).unwrap();
    let legs: Vec<PathBuf> = vec![local.clone(), model.leg("")];
    let mut m = mount_ok(&legs, &mnt, &[&format!("leg_timeout={TIMEOUT_S}")]);
    assert_eq!(
        getfattr_ok(&mnt.join(".mirrorfs"), "user.mirrorfs.leg_timeout"),
        "2"
    );
    let out = tmp.path().join("fio.json");
    let mut job = fio_randrw_job(&mnt.join("fio.dat"), &out, 10, &[]);
    // Well into the run: fio's file is laid out and both legs serve.
    assert!(wait_for(Duration::from_secs(60), || stats(&mnt).legs[1]
        .write_bytes
        >= 36 << 20
        || job.try_wait().unwrap().is_some()));
    assert!(job.try_wait().unwrap().is_none(), "fio ended early");
    File::create(&model.hang_file).unwrap();
    let hung_at = Instant::now();
    let st = wait_timeout(&mut job, Duration::from_secs(120), "fio");
    let err = fs::read_to_string(out.with_extension("err")).unwrap_or_default();
    assert!(st.success(), "fio failed ({st}): {err}");
    let (read_s, write_s, errors) = fio_worst(&out);
    eprintln!("slowest read {read_s:.3} s, slowest write {write_s:.3} s, fio errors {errors}");
    assert_eq!(errors, 0, "fio saw an error: {err}");
    assert!(
        read_s < TIMEOUT_S + 1.0 && write_s < TIMEOUT_S + 1.0,
        "an I/O waited longer than the timeout plus a second: read {read_s} s, write {write_s} s"
    );
    assert!(
        hung_at.elapsed() > Duration::from_secs(3),
        "fio ran on after the hang"
    );

    let s = stats(&mnt);
    assert_eq!(s.state, MountState::Degraded, "{s:?}");
    assert_eq!(s.legs[1].state, LegState::Failed);
    assert!(s.legs[1].timeouts >= 1, "{:?}", s.legs[1]);
    // The mount answers while the leg still hangs.
    let t = Instant::now();
    fs::write(mnt.join("after"), b"written while leg1 hangs").unwrap();
    assert_eq!(
        fs::read(mnt.join("after")).unwrap(),
        b"written while leg1 hangs"
    );
    assert!(fs::read_dir(&mnt).unwrap().count() >= 2);
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());

    // Its abandoned write may still land: no resync until it has.
    assert!(s.legs[1].abandoned >= 1, "{:?}", s.legs[1]);
    let refused = run_mirrorfs([
        OsStr::new("leg"),
        OsStr::new("add"),
        mnt.as_os_str(),
        OsStr::new("leg1"),
    ]);
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("leg_timeout"), "{why}");

    // The leg answers again: what was abandoned on it ends, and it is resynced.
    fs::remove_file(&model.hang_file).unwrap();
    assert!(
        wait_for(Duration::from_secs(30), || stats(&mnt).legs[1].abandoned
            == 0),
        "abandoned operations still running: {:?}",
        stats(&mnt).legs[1]
    );
    mirrorfs_ok(&[&"leg", &"add", &mnt, &"leg1"]);
    let s = wait_resynced(&mnt);
    assert_eq!((s.state, s.legs_online), (MountState::Online, 2), "{s:?}");
    assert_eq!(
        fs::read(local.join("fio.dat")).unwrap(),
        fs::read(model.src.join("fio.dat")).unwrap(),
        "the legs' copies of fio's file differ after the resync"
    );
    m.unmount();
    assert_legs_identical(&[local, model.src.clone()]);
}
