//! Never lose data (issue 3): the leg commands and the resync they start. `mirrorfs leg
//! replace` while a file is open for writing; `resync_speed_max` changed live applies to the
//! resync that is running; a resync whose target fails halfway leaves the leg out and the data
//! whole, and `mirrorfs leg add` brings it back once it has room.

#[macro_use]
mod common;

use common::*;
use mirrorfs::stats::{JobState, LegState, MountState};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Replacing a leg
// ---------------------------------------------------------------------------------------------

/// `mirrorfs leg replace MOUNT leg1 NEWDIR` while a file is open for writing: refused for a
/// directory that is not empty or lies inside a leg or the mount; otherwise NEWDIR is filled by
/// a full resync and joins; the open file's later writes and new files reach it; leg0 and
/// NEWDIR end identical, the old leg1 directory is left alone, and a mount with the new leg
/// list needs no `degraded`.
#[test]
fn leg_replace_while_a_file_is_open() {
    require_fuse!();
    require_tool!("getfattr");
    let mut m = TestMirror::new(2).mount();
    let mnt = m.mnt().to_path_buf();
    populate(&mnt, 100);
    fs::create_dir(m.path("emptydir")).unwrap();
    let part1 = pattern(700_000, 110);
    let part2 = pattern(300_000, 111);
    let mut open = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(m.path("open"))
        .unwrap();
    open.write_all(&part1).unwrap();
    open.sync_data().unwrap();
    let old_id = superblock(m.leg(1))["leg_id"]
        .as_str()
        .expect("leg_id")
        .to_string();

    // Refusals: they change nothing.
    let busy = m.root().join("busy");
    fs::create_dir(&busy).unwrap();
    fs::write(busy.join("x"), b"someone's data").unwrap();
    let in_leg = m.leg(0).join("emptydir");
    let in_mount = mnt.join("emptydir");
    for bad in [&busy, &in_leg, &in_mount] {
        let out = mirrorfs_refused(&[&"leg", &"replace", &mnt, &"leg1", bad]);
        assert!(out.contains("leg replace"), "{out}");
    }
    assert_online_without_resync(&mnt, 2);
    assert_eq!(dir_names(&busy), ["x"]);

    let newdir = m.root().join("new-leg");
    fs::create_dir(&newdir).unwrap();
    mirrorfs_ok(&[&"leg", &"replace", &mnt, &"leg1", &newdir]);
    let st = wait_resynced(&mnt);
    assert_eq!(st.legs_online, 2, "{st:?}");
    assert_eq!(
        Path::new(&st.legs[1].path),
        fs::canonicalize(&newdir).unwrap(),
        "leg1's path after the replace"
    );
    let old_leg1 = snapshot_tree(m.leg(1));
    let legs = vec![m.leg(0).to_path_buf(), newdir.clone()];
    assert_legs_identical(&legs);

    // The open file's later writes, and a new file, reach the new leg.
    open.write_all(&part2).unwrap();
    open.sync_data().unwrap();
    fs::write(mnt.join("after"), b"written after the replace").unwrap();
    let mut whole = part1.clone();
    whole.extend_from_slice(&part2);
    assert_content_on_legs(&legs, "open", &whole);
    assert_content_on_legs(&legs, "after", b"written after the replace");
    drop(open);
    assert_no_mirrorfs_leak(&mnt);
    assert_legs_identical(&legs);
    m.unmount();
    assert_legs_identical(&legs);
    assert_snapshot_eq(
        &old_leg1,
        &snapshot_tree(m.leg(1)),
        "the old leg1 after the replace",
    );
    let sb = superblock(&newdir);
    assert_ne!(sb["leg_id"].as_str(), Some(old_id.as_str()), "{sb}");
    assert_eq!(sb["slot"], 1, "{sb}");

    // The new leg list mounts without `degraded`, every leg in sync.
    let _r = mount_ok(&legs, &mnt, &[]);
    let st = stats(&mnt);
    assert_eq!(
        (st.state, st.legs_online),
        (MountState::Online, 2),
        "{st:?}"
    );
    assert!(st.resync.is_none(), "{st:?}");
    assert_bytes_eq(&fs::read(mnt.join("open")).unwrap(), &whole, "open");
}

// ---------------------------------------------------------------------------------------------
// The resync throttle
// ---------------------------------------------------------------------------------------------

/// `resync_speed_max` changed live applies to the resync that is running (docs/operations.md:
/// "`mirrorfs set MOUNT resync_speed_max 50M` limits its bandwidth while it runs"): a resync
/// started at 100 KiB/s over 8 MiB (over a minute) finishes within seconds once the limit is
/// lifted.
#[test]
fn resync_speed_max_applies_to_a_running_resync() {
    require_fuse!();
    require_tool!("getfattr");
    let m = TestMirror::new(2).mount();
    let mnt = m.mnt().to_path_buf();
    mirrorfs_ok(&[&"leg", &"fail", &mnt, &"leg1"]);
    assert_eq!(stats(&mnt).legs[1].state, LegState::Failed);
    let big = pattern(8 * MIB, 120);
    fs::write(mnt.join("big"), &big).unwrap();
    mirrorfs_ok(&[&"set", &mnt, &"resync_speed_max", &"100K"]);
    mirrorfs_ok(&[&"leg", &"add", &mnt, &"leg1"]);
    // Polled, not a fixed sleep: the limit is lifted once the resync runs.
    assert!(
        wait_for(RESYNC_TIMEOUT, || stats(&mnt).legs[1].state
            == LegState::Resyncing),
        "the resync did not start: {:?}",
        stats(&mnt)
    );
    let st = stats(&mnt);
    assert_eq!(
        st.legs[1].state,
        LegState::Resyncing,
        "the throttled resync should still run: {st:?}"
    );
    mirrorfs_ok(&[&"set", &mnt, &"resync_speed_max", &"0"]);
    let lifted = Instant::now();
    // Had the running resync kept the old limit, what it has left would take over a minute on
    // any machine: it copies 100 KiB a second (a throttle only ever slows down) besides the one
    // 1 MiB chunk it may write before its first wait, and it is lifted seconds after it started,
    // so at least 6 MiB are left. Unthrottled, the rest takes well under a second. 30 s tells
    // the two apart with a wide margin both ways.
    let finished = wait_for(Duration::from_secs(30), || {
        stats(&mnt)
            .resync
            .is_some_and(|r| r.state == JobState::Finished)
    });
    assert!(
        finished,
        "the resync still runs {:?} after the limit was lifted: the running resync kept the old \
         limit: {:?}",
        lifted.elapsed(),
        stats(&mnt).resync
    );
    let st = wait_resynced(&mnt);
    eprintln!(
        "the resync ended {:?} after the limit was lifted ({} s in all)",
        lifted.elapsed(),
        st.resync.as_ref().unwrap().elapsed_s
    );
    assert_content_on_legs(m.legs(), "big", &big);
    m.finish();
}

// ---------------------------------------------------------------------------------------------
// A resync that fails halfway
// ---------------------------------------------------------------------------------------------

/// A tmpfs mounted for one test, unmounted when dropped (after the mirror that uses it).
struct SmallTmpfs {
    dir: tempfile::TempDir,
}

impl SmallTmpfs {
    fn new(size: &str) -> SmallTmpfs {
        let dir = tempfile::tempdir().unwrap();
        let out = run(
            "mount",
            &[
                &"-t",
                &"tmpfs",
                &"-o",
                &format!("size={size}"),
                &"tmpfs",
                &dir.path(),
            ],
            Duration::from_secs(30),
        );
        assert!(out.status.success(), "mount tmpfs: {}", text(&out.stderr));
        SmallTmpfs { dir }
    }

    fn grow(&self, size: &str) {
        let out = run(
            "mount",
            &[&"-o", &format!("remount,size={size}"), &self.dir.path()],
            Duration::from_secs(30),
        );
        assert!(out.status.success(), "grow tmpfs: {}", text(&out.stderr));
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        let _ = run(
            "umount",
            &[&"-l", &self.dir.path()],
            Duration::from_secs(30),
        );
    }
}

/// The target of a resync fails halfway (a replacement disk too small: ENOSPC): the resync
/// ends as failed, the leg stays out (FAULTED), the mirror keeps serving every byte from the
/// other leg, whose copy the engine never wrote; once the target has room, `leg add` resyncs it
/// and the legs end identical.
#[test]
fn a_resync_that_fails_halfway_leaves_the_leg_out_and_the_data_whole() {
    require_fuse!();
    require_tool!("getfattr");
    let small = SmallTmpfs::new("4m");
    let mut m = TestMirror::new(2).mount();
    let mnt = m.mnt().to_path_buf();
    let data: Vec<Vec<u8>> = (0..8).map(|i| pattern(2 << 20, 200 + i)).collect();
    for (i, d) in data.iter().enumerate() {
        fs::write(mnt.join(format!("f{i}")), d).unwrap();
    }
    // The data only: the superblock and the change logs beside it move on, as they should.
    let data_of = |leg: &Path| {
        let mut t = snapshot_tree(leg);
        t.retain(|k, _| !k.starts_with(".mirrorfs"));
        t
    };
    let leg0_before = data_of(m.leg(0));
    let target = small.dir.path().join("leg");
    fs::create_dir(&target).unwrap();
    mirrorfs_ok(&[&"leg", &"replace", &mnt, &"leg1", &target]);
    // The resync fails (16 MiB do not fit in 4 MiB).
    assert!(
        wait_for(RESYNC_TIMEOUT, || stats(&mnt)
            .resync
            .is_some_and(|r| matches!(r.state, JobState::Failed(_)))),
        "the resync did not fail: {:?}",
        stats(&mnt)
    );
    let st = stats(&mnt);
    assert_eq!(st.state, MountState::Degraded, "{st:?}");
    assert_eq!(st.legs[1].state, LegState::Failed, "{st:?}");
    let (code, report) = status(&mnt);
    assert_eq!(code, Some(1), "{report}");
    assert!(report.contains("resync failed"), "{report}");
    // Every byte is still served, from leg0, whose copy the resync never wrote.
    for (i, d) in data.iter().enumerate() {
        assert_bytes_eq(
            &fs::read(mnt.join(format!("f{i}"))).unwrap(),
            d,
            "through the mount",
        );
    }
    assert_snapshot_eq(
        &leg0_before,
        &data_of(m.leg(0)),
        "leg0 after the failed resync",
    );
    // Writes go on, to leg0 only.
    fs::write(mnt.join("during"), b"written while leg1 is out").unwrap();
    // Room on the target: added back, resynced, identical.
    small.grow("64m");
    mirrorfs_ok(&[&"leg", &"add", &mnt, &"leg1"]);
    let st = wait_resynced(&mnt);
    assert_eq!(st.legs_online, 2, "{st:?}");
    let legs = vec![m.leg(0).to_path_buf(), target.clone()];
    assert_legs_identical(&legs);
    assert_content_on_legs(&legs, "during", b"written while leg1 is out");
    m.unmount();
    assert_legs_identical(&legs);
}

// ---------------------------------------------------------------------------------------------
// A job that cannot start
// ---------------------------------------------------------------------------------------------

/// A resync or a scrub whose thread cannot start (the daemon at its pids limit): the command
/// fails with one line, the job says `failed`, the leg stays out (FAULTED) and nothing was
/// written; the daemon does not panic, and once the limit allows, `leg add` works.
#[test]
fn a_job_that_cannot_start_its_thread_fails_cleanly() {
    require_fuse!();
    require_tool!("getfattr");
    let m = TestMirror::new(2).option("threads=1").mount();
    let mnt = m.mnt().to_path_buf();
    fs::write(m.path("f"), b"data").unwrap();
    let pid = m.daemon_pids()[0];
    let group =
        Path::new("/sys/fs/cgroup/pids").join(format!("mirrorfs-jobs-{}", std::process::id()));
    fs::create_dir(&group).expect("a pids cgroup (cgroup v1 pids controller)");
    fs::write(group.join("cgroup.procs"), pid.to_string()).unwrap();
    let current = fs::read_to_string(group.join("pids.current")).unwrap();
    fs::write(group.join("pids.max"), current.trim()).unwrap();

    mirrorfs_ok(&[&"leg", &"fail", &mnt, &"leg1"]);
    fs::write(m.path("g"), b"while away").unwrap();
    let leg1_before = snapshot_tree(m.leg(1));
    let out = mirrorfs_refused(&[&"leg", &"add", &mnt, &"leg1"]);
    assert!(out.contains("leg add"), "{out}");
    let st = stats(&mnt);
    let resync = st.resync.as_ref().expect("the job is shown");
    assert!(
        matches!(&resync.state, JobState::Failed(why) if why.contains("cannot start its thread")),
        "{st:?}"
    );
    assert_eq!(st.legs[1].state, LegState::Failed, "{st:?}");
    assert_eq!(st.state, MountState::Degraded);
    assert_snapshot_eq(&leg1_before, &snapshot_tree(m.leg(1)), "leg1 untouched");
    let out = mirrorfs_refused(&[&"scrub", &"start", &mnt]);
    assert!(out.contains("scrub start"), "{out}");

    // Room again: the same command works.
    fs::write(group.join("pids.max"), "max").unwrap();
    mirrorfs_ok(&[&"leg", &"add", &mnt, &"leg1"]);
    let st = wait_resynced(&mnt);
    assert_eq!(st.legs_online, 2);
    // Back to the root cgroup, so that the group can go.
    fs::write("/sys/fs/cgroup/pids/cgroup.procs", pid.to_string()).unwrap();
    let _ = fs::remove_dir(&group);
    m.finish();
}
