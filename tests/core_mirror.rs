//! The filesystem core driven directly, without a kernel mount or root: every change reaches
//! every leg, and a leg that fails halfway through a change is dropped, recorded, and never
//! trusted again, while the caller's operation succeeds on the others.

use mirrorfs::config::MountConfig;
use mirrorfs::errno::Errno;
use mirrorfs::fs::inode::{CONTROL_INO, ROOT_INO};
use mirrorfs::fs::{Caller, Entry, FsConfig, MirrorFs, SetAttr, TimeSpec};
use mirrorfs::leg::spec::LegSpec;
use mirrorfs::leg::Leg;
use mirrorfs::meta::array::{ArrayPlan, PlannedLeg};
use mirrorfs::meta::superblock::LegSuperblock;
use mirrorfs::mirror::fault::FaultRule;
use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

/// Small, so that the tests run with most leg descriptors closed and reopened by handle.
const FD_BUDGET: usize = 16;

/// Leg descriptors open files may hold: 3 open files on 2 legs, 2 on 3 legs.
const OPEN_FD_BUDGET: usize = 6;

struct Legs {
    _dir: tempfile::TempDir,
    paths: Vec<PathBuf>,
    shown: Vec<String>,
}

fn legs(n: usize) -> Legs {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (0..n).map(|i| dir.path().join(format!("leg{i}"))).collect();
    for p in &paths {
        std::fs::create_dir(p).unwrap();
    }
    let shown = paths.iter().map(|p| p.display().to_string()).collect();
    Legs {
        _dir: dir,
        paths,
        shown,
    }
}

fn open_fs(l: &Legs) -> MirrorFs {
    open_fs_with(l, mirrorfs::policy::by_name_among("first", &[]).unwrap())
}

fn open_fs_with(l: &Legs, policy: Box<dyn mirrorfs::policy::ReadPolicy>) -> MirrorFs {
    open_fs_quiet(l, policy, &[])
}

/// As [`open_fs_with`], the legs `quiet` with the `quiet` attribute.
fn open_fs_quiet(
    l: &Legs,
    policy: Box<dyn mirrorfs::policy::ReadPolicy>,
    quiet: &[usize],
) -> MirrorFs {
    let none = vec![None; l.paths.len()];
    let plan = ArrayPlan::prepare(&l.shown, &l.paths, &none, false, false, None).unwrap();
    let sbs = plan.commit().unwrap();
    let legs = l
        .paths
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let spec = LegSpec {
                quiet: quiet.contains(&i),
                ..LegSpec::default()
            };
            Leg::open(i, p, &spec).unwrap()
        })
        .collect();
    MirrorFs::new(
        legs,
        sbs,
        policy,
        FsConfig {
            hide_lost_found: false,
            fd_budget: FD_BUDGET,
            open_fd_budget: OPEN_FD_BUDGET,
            mount: "/nonexistent/mount".into(),
            options: MountConfig {
                threads: 2,
                fault_injection: true,
                minfreespace: Some(0),
                ..MountConfig::default()
            },
        },
    )
    .unwrap()
}

/// This test process as the caller (`/proc/self` belongs to our uid and gid).
fn me() -> Caller {
    let m = std::fs::metadata("/proc/self").unwrap();
    Caller::new(m.uid(), m.gid(), std::process::id())
}

/// Makes `leg` fail `op` with `errno` (`times` times, or until cleared).
fn fail(fs: &MirrorFs, leg: usize, op: &str, errno: Errno, times: Option<u32>) {
    fs.mirror().inject_fault(FaultRule {
        leg,
        op: op.into(),
        errno,
        times,
        file: None,
    });
}

/// Creates `name` at the root holding `data`; returns its entry and open handle.
fn new_file(fs: &MirrorFs, name: &str, data: &[u8], c: &Caller) -> (Entry, u64) {
    let (e, fh) = fs
        .create(ROOT_INO, OsStr::new(name), 0o644, libc::O_RDWR, c)
        .unwrap();
    fs.write(fh, 0, data).unwrap();
    (e, fh)
}

fn read_all(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn every_change_reaches_every_leg() {
    let l = legs(3);
    let fs = open_fs(&l);
    let c = me();
    let d = fs.mkdir(ROOT_INO, OsStr::new("dir"), 0o755, &c).unwrap();
    let (f, fh) = fs
        .create(d.attr.ino.0, OsStr::new("f"), 0o644, libc::O_RDWR, &c)
        .unwrap();
    assert_eq!(fs.write(fh, 0, b"hello mirror").unwrap(), 12);
    assert_eq!(fs.read(fh, 6, 100, 1).unwrap().as_slice(), b"mirror");
    fs.release(fh).unwrap();
    fs.link(f.attr.ino.0, ROOT_INO, OsStr::new("hard"), &c)
        .unwrap();
    fs.symlink(ROOT_INO, OsStr::new("sym"), OsStr::new("dir/f"), &c)
        .unwrap();
    fs.rename(
        ROOT_INO,
        OsStr::new("dir"),
        ROOT_INO,
        OsStr::new("dir2"),
        0,
        &c,
    )
    .unwrap();
    let t = TimeSpec::At {
        sec: 1_234_567,
        nsec: 89,
    };
    fs.setattr(
        f.attr.ino.0,
        &SetAttr {
            mode: Some(0o600),
            mtime: Some(t),
            ..SetAttr::default()
        },
        &c,
    )
    .unwrap();
    for p in &l.paths {
        assert_eq!(read_all(&p.join("dir2/f")), b"hello mirror");
        let m = std::fs::metadata(p.join("hard")).unwrap();
        assert_eq!(m.nlink(), 2);
        assert_eq!(m.mode() & 0o7777, 0o600);
        assert_eq!((m.mtime(), m.mtime_nsec()), (1_234_567, 89));
        assert_eq!(
            std::fs::read_link(p.join("sym")).unwrap(),
            Path::new("dir/f")
        );
    }
    // One inode for both names, under our own number.
    let h = fs.lookup(ROOT_INO, OsStr::new("hard"), &c).unwrap();
    assert_eq!(h.attr.ino, f.attr.ino);
    assert_eq!(h.attr.nlink, 2);
}

/// A fault of mirrorfs itself (state it should hold is missing) on one leg's part of a change
/// is logged and keeps the leg: its disk did nothing wrong. Met on every leg, the caller gets
/// it (as EIO over FUSE), and still no leg is dropped.
#[test]
fn an_internal_fault_drops_no_leg() {
    let l = legs(2);
    let fs = open_fs(&l);
    let c = me();
    let (_, fh) = new_file(&fs, "f", b"first", &c);
    fail(&fs, 1, "write", Errno::INTERNAL, Some(1));
    assert_eq!(fs.write(fh, 0, b"again").unwrap(), 5);
    assert_eq!(fs.mirror().in_sync_legs(), vec![0, 1]);
    let errors = |leg: usize| {
        fs.mirror()
            .leg(leg)
            .counters
            .write_errors
            .load(Ordering::Relaxed)
    };
    assert_eq!((errors(0), errors(1)), (0, 0), "no write error counted");
    assert_eq!(read_all(&l.paths[0].join("f")), b"again");
    // Leg 1 missed the write: a scrub finds it (what the log line says).
    assert_eq!(read_all(&l.paths[1].join("f")), b"first");
    fail(&fs, 0, "mkdir", Errno::INTERNAL, Some(1));
    fail(&fs, 1, "mkdir", Errno::INTERNAL, Some(1));
    let e = fs.mkdir(ROOT_INO, OsStr::new("d"), 0o755, &c).unwrap_err();
    assert_eq!(e, Errno::INTERNAL);
    assert_eq!(e.for_caller(), libc::EIO);
    assert_eq!(fs.mirror().in_sync_legs(), vec![0, 1]);
    fs.release(fh).unwrap();
}

#[test]
fn caller_errors_change_nothing_and_drop_no_leg() {
    let l = legs(2);
    let fs = open_fs(&l);
    let c = me();
    fs.mkdir(ROOT_INO, OsStr::new("d"), 0o755, &c).unwrap();
    assert_eq!(
        fs.mkdir(ROOT_INO, OsStr::new("d"), 0o755, &c).unwrap_err(),
        Errno::EEXIST
    );
    assert_eq!(
        fs.unlink(ROOT_INO, OsStr::new("missing"), &c).unwrap_err(),
        Errno::ENOENT
    );
    let long = "x".repeat(256);
    assert_eq!(
        fs.mkdir(ROOT_INO, OsStr::new(&long), 0o755, &c)
            .unwrap_err(),
        Errno::ENAMETOOLONG
    );
    assert_eq!(fs.mirror().in_sync_legs(), vec![0, 1]);
    // At the root, `.mirrorfs` is the control file: found by a lookup (an empty regular
    // file), never listed, and neither creatable, removable nor replaceable; the legs'
    // metadata folders stay as they are.
    let ctl = fs.lookup(ROOT_INO, OsStr::new(".mirrorfs"), &c).unwrap();
    assert_eq!(ctl.attr.ino.0, CONTROL_INO);
    assert_eq!(ctl.attr.kind, fuser::FileType::RegularFile);
    assert_eq!(ctl.attr.size, 0);
    let name = OsStr::new(".mirrorfs");
    assert_eq!(
        fs.mkdir(ROOT_INO, name, 0o755, &c).unwrap_err(),
        Errno::EPERM
    );
    assert_eq!(fs.unlink(ROOT_INO, name, &c).unwrap_err(), Errno::EPERM);
    assert_eq!(
        fs.rename(ROOT_INO, OsStr::new("d"), ROOT_INO, name, 0, &c)
            .unwrap_err(),
        Errno::EPERM
    );
    assert_eq!(
        fs.rename(ROOT_INO, name, ROOT_INO, OsStr::new("stolen"), 0, &c)
            .unwrap_err(),
        Errno::EPERM
    );
    for p in &l.paths {
        assert!(
            p.join(".mirrorfs/superblock.json").is_file(),
            "{}",
            p.display()
        );
    }
    let fh = fs.opendir(ROOT_INO, &me()).unwrap();
    let mut names = Vec::new();
    fs.readdir(ROOT_INO, fh, 0, |_, _, _, n| {
        names.push(n.to_os_string());
        false
    })
    .unwrap();
    assert_eq!(names, vec![".", "..", "d"]);
}

#[test]
fn a_leg_failing_a_write_halfway_is_dropped_and_recorded() {
    let l = legs(2);
    let fs = open_fs(&l);
    let c = me();
    let (_, fh) = new_file(&fs, "f", b"before", &c);
    fail(&fs, 1, "write", Errno::EIO, Some(1));
    // The caller sees success: leg 0 has the data.
    assert_eq!(fs.write(fh, 0, b"AFTER!").unwrap(), 6);
    assert_eq!(fs.mirror().in_sync_legs(), vec![0]);
    // Later changes go to the survivor only; the dropped leg is left as it was.
    fs.write(fh, 6, b"+more").unwrap();
    fs.release(fh).unwrap();
    assert_eq!(read_all(&l.paths[0].join("f")), b"AFTER!+more");
    assert_eq!(read_all(&l.paths[1].join("f")), b"before");
    // The survivor's superblock names the dropped leg, so the next mount refuses to trust it.
    let sb0 = LegSuperblock::read(&l.paths[0]).unwrap().unwrap();
    let sb1 = LegSuperblock::read(&l.paths[1]).unwrap().unwrap();
    assert_eq!(sb0.failed_legs, vec![sb1.leg_id]);
    let none = vec![None; l.paths.len()];
    let p = ArrayPlan::prepare(&l.shown, &l.paths, &none, false, false, None).unwrap();
    assert!(
        matches!(&p.states[1], PlannedLeg::Stale(w) if w.contains("was dropped")),
        "{:?}",
        p.states
    );
}

#[test]
fn a_leg_failing_a_truncate_is_dropped_and_left_alone() {
    let l = legs(2);
    let fs = open_fs(&l);
    let c = me();
    let (e, fh) = new_file(&fs, "f", b"0123456789", &c);
    fs.release(fh).unwrap();
    let before = std::fs::metadata(l.paths[1].join("f")).unwrap();
    fail(&fs, 1, "setattr", Errno::EIO, Some(1));
    let a = fs
        .setattr(
            e.attr.ino.0,
            &SetAttr {
                size: Some(4),
                ..SetAttr::default()
            },
            &me(),
        )
        .unwrap();
    assert_eq!(a.size, 4);
    assert_eq!(fs.mirror().in_sync_legs(), vec![0]);
    assert_eq!(read_all(&l.paths[0].join("f")), b"0123");
    // Nothing that follows the failed step (aligning mtimes) reaches the dropped leg.
    let after = std::fs::metadata(l.paths[1].join("f")).unwrap();
    assert_eq!(read_all(&l.paths[1].join("f")), b"0123456789");
    assert_eq!(
        (after.mtime(), after.mtime_nsec()),
        (before.mtime(), before.mtime_nsec())
    );
}

#[test]
fn a_namespace_change_failing_on_one_leg_succeeds_on_the_others() {
    let l = legs(3);
    let fs = open_fs(&l);
    let c = me();
    fail(&fs, 2, "mkdir", Errno::EROFS, None);
    fs.mkdir(ROOT_INO, OsStr::new("d"), 0o755, &c).unwrap();
    assert_eq!(fs.mirror().in_sync_legs(), vec![0, 1]);
    assert!(l.paths[0].join("d").is_dir());
    assert!(l.paths[1].join("d").is_dir());
    assert!(!l.paths[2].join("d").exists());
}

#[test]
fn a_read_error_is_answered_from_another_leg_and_repaired() {
    let l = legs(2);
    let fs = open_fs(&l);
    let c = me();
    let (_, fh) = new_file(&fs, "f", b"good data", &c);
    // Leg 0's copy goes bad under the mirror, and its next read fails.
    std::fs::write(l.paths[0].join("f"), b"bad! data").unwrap();
    fail(&fs, 0, "read", Errno::EIO, Some(1));
    assert_eq!(fs.read(fh, 0, 64, 1).unwrap().as_slice(), b"good data");
    // Answered from leg 1, and the range rewritten on leg 0, which stays in the mirror.
    assert_eq!(fs.mirror().in_sync_legs(), vec![0, 1]);
    assert_eq!(std::fs::read(l.paths[0].join("f")).unwrap(), b"good data");
    let c0 = &fs.mirror().leg(0).counters;
    assert_eq!(c0.read_errors.load(Ordering::Relaxed), 1);
    assert_eq!(c0.read_repairs.load(Ordering::Relaxed), 1);
    fs.release(fh).unwrap();
}

#[test]
fn a_leg_whose_repair_fails_or_that_keeps_failing_is_dropped() {
    let l = legs(2);
    let fs = open_fs(&l);
    let c = me();
    let (_, fh) = new_file(&fs, "f", b"good data", &c);
    fail(&fs, 0, "read", Errno::EIO, Some(1));
    fail(&fs, 0, "repair", Errno::EIO, Some(1));
    assert_eq!(fs.read(fh, 0, 64, 1).unwrap().as_slice(), b"good data");
    assert_eq!(fs.mirror().in_sync_legs(), vec![1]);
    fs.release(fh).unwrap();

    let l = legs(2);
    let fs = open_fs(&l);
    let (_, fh) = new_file(&fs, "f", b"good data", &c);
    fail(&fs, 0, "read", Errno::EIO, None);
    for _ in 0..mirrorfs::mirror::MAX_READ_ERRORS {
        assert_eq!(fs.read(fh, 0, 64, 1).unwrap().as_slice(), b"good data");
        assert_eq!(fs.mirror().in_sync_legs(), vec![0, 1]);
    }
    assert_eq!(fs.read(fh, 0, 64, 1).unwrap().as_slice(), b"good data");
    assert_eq!(
        fs.mirror().in_sync_legs(),
        vec![1],
        "dropped past the error budget"
    );
    fs.release(fh).unwrap();
}

#[test]
fn the_free_space_reserve_refuses_a_write_before_any_leg_is_written() {
    let l = legs(2);
    let fs = open_fs(&l);
    let c = me();
    let (_, fh) = new_file(&fs, "f", b"start", &c);
    // Leg 1 may take 1 MiB more before it reaches its reserve.
    let (_, avail) = fs.mirror().leg(1).space().unwrap();
    fs.mirror()
        .leg(1)
        .reserve
        .store(avail - (1 << 20), Ordering::Relaxed);
    let big = vec![7u8; 2 << 20];
    assert_eq!(fs.write(fh, 5, &big).unwrap_err(), Errno::ENOSPC);
    // Past the reserve already: not even a new name.
    fs.mirror()
        .leg(1)
        .reserve
        .store(avail + (1 << 30), Ordering::Relaxed);
    assert_eq!(
        fs.create(ROOT_INO, OsStr::new("g"), 0o644, libc::O_RDWR, &c)
            .map(drop)
            .unwrap_err(),
        Errno::ENOSPC
    );
    // Nothing reached either leg, both stay in the mirror, and small writes still fit.
    for p in &l.paths {
        assert_eq!(std::fs::read(p.join("f")).unwrap(), b"start");
        assert!(!p.join("g").exists());
    }
    assert_eq!(fs.mirror().in_sync_legs(), vec![0, 1]);
    fs.mirror().leg(1).reserve.store(0, Ordering::Relaxed);
    assert_eq!(fs.write(fh, 5, b"more").unwrap(), 4);
    fs.release(fh).unwrap();
    for p in &l.paths {
        assert_eq!(std::fs::read(p.join("f")).unwrap(), b"startmore");
    }
}

#[test]
fn the_last_leg_is_never_dropped() {
    let l = legs(2);
    let fs = open_fs(&l);
    let c = me();
    let (_, fh) = fs
        .create(ROOT_INO, OsStr::new("f"), 0o644, libc::O_RDWR, &c)
        .unwrap();
    for leg in 0..2 {
        fail(&fs, leg, "write", Errno::EIO, None);
    }
    // Every leg fails alike: the caller gets the error, and the mirror keeps its legs.
    assert_eq!(fs.write(fh, 0, b"x").unwrap_err(), Errno::EIO);
    assert_eq!(fs.mirror().in_sync_legs(), vec![0, 1]);
    fs.release(fh).unwrap();
}

#[test]
fn inodes_are_released_when_the_kernel_forgets_them() {
    let l = legs(2);
    let fs = open_fs(&l);
    let c = me();
    let e = fs.mkdir(ROOT_INO, OsStr::new("d"), 0o755, &c).unwrap();
    let again = fs.lookup(ROOT_INO, OsStr::new("d"), &c).unwrap();
    assert_eq!(again.attr.ino, e.attr.ino);
    assert_eq!(fs.live_inodes(), 2);
    fs.forget(e.attr.ino.0, 2);
    assert_eq!(fs.live_inodes(), 1);
    assert_eq!(fs.open_handles(), 0);
}

#[test]
fn many_more_objects_than_the_descriptor_budget() {
    let l = legs(2);
    let fs = open_fs(&l);
    let c = me();
    let d = fs.mkdir(ROOT_INO, OsStr::new("d"), 0o755, &c).unwrap();
    let dir = d.attr.ino.0;
    let mut inos = Vec::new();
    for i in 0..200 {
        let name = format!("f{i}");
        let (e, fh) = fs
            .create(dir, OsStr::new(&name), 0o644, libc::O_RDWR, &c)
            .unwrap();
        fs.write(fh, 0, name.as_bytes()).unwrap();
        fs.release(fh).unwrap();
        inos.push(e.attr.ino.0);
    }
    assert!(
        fs.cached_fds() <= FD_BUDGET,
        "{} descriptors cached, budget {FD_BUDGET}",
        fs.cached_fds()
    );
    // Every object is still reachable: its descriptors are reopened by handle.
    for (i, &ino) in inos.iter().enumerate() {
        let a = fs.getattr(ino).unwrap();
        assert_eq!(a.size, format!("f{i}").len() as u64);
        let fh = fs.open(ino, libc::O_RDWR, &me()).unwrap();
        fs.write(fh, a.size, b"!").unwrap();
        fs.release(fh).unwrap();
        fs.rename(
            dir,
            OsStr::new(&format!("f{i}")),
            dir,
            OsStr::new(&format!("g{i}")),
            0,
            &me(),
        )
        .unwrap();
    }
    assert!(fs.cached_fds() <= FD_BUDGET);
    assert_eq!(fs.mirror().in_sync_legs(), vec![0, 1]);
    for p in &l.paths {
        for i in 0..200 {
            assert_eq!(
                read_all(&p.join(format!("d/g{i}"))),
                format!("f{i}!").as_bytes()
            );
        }
    }
}

#[test]
fn an_open_beyond_the_descriptor_budget_touches_no_leg() {
    let l = legs(2);
    let fs = open_fs(&l);
    let c = me();
    let (e, fh) = fs
        .create(ROOT_INO, OsStr::new("f"), 0o644, libc::O_RDWR, &c)
        .unwrap();
    fs.write(fh, 0, b"keep me").unwrap();
    fs.release(fh).unwrap();
    let ino = e.attr.ino.0;
    let held: Vec<u64> = (0..OPEN_FD_BUDGET / 2)
        .map(|_| fs.open(ino, libc::O_RDONLY, &me()).unwrap())
        .collect();
    // No room: refused before any leg opens (and so before any leg truncates).
    assert_eq!(
        fs.open(ino, libc::O_RDWR | libc::O_TRUNC, &me())
            .unwrap_err(),
        Errno::ENFILE
    );
    assert_eq!(
        fs.create(ROOT_INO, OsStr::new("g"), 0o644, libc::O_RDWR, &c)
            .unwrap_err(),
        Errno::ENFILE
    );
    for p in &l.paths {
        assert_eq!(read_all(&p.join("f")), b"keep me");
        assert!(!p.join("g").exists());
    }
    assert_eq!(fs.mirror().in_sync_legs(), vec![0, 1]);
    for fh in held {
        fs.release(fh).unwrap();
    }
    // Room again once files close.
    let fh = fs.open(ino, libc::O_RDWR, &me()).unwrap();
    fs.release(fh).unwrap();
}

/// Everything a caller could change, as the stats and keys show it (times left out).
fn control_state(fs: &MirrorFs) -> String {
    let mut v = serde_json::to_value(fs.stats()).unwrap();
    v["uptime_s"] = 0.into();
    v["uptime_us"] = 0.into();
    // What the machine measures, not what a key changes: the daemon's memory and CPU time,
    // the legs' free space.
    v["daemon"] = serde_json::Value::Null;
    for l in v["legs"].as_array_mut().unwrap() {
        l["free_bytes"] = serde_json::Value::Null;
    }
    let mut out = v.to_string();
    for k in [
        "read_policy",
        "minfreespace",
        "resync_speed_max",
        "readahead",
        "leg_timeout",
        "fault",
        "scrub",
    ] {
        let name = format!("user.mirrorfs.{k}");
        let got = fs.getxattr(ROOT_INO, OsStr::new(&name), 1 << 16, &Caller::root());
        out.push_str(&format!("\n{k}={got:?}"));
    }
    out
}

/// Every key that can be written, given hostile values (the value parsers' list, and broken
/// commands): refused, never a panic, and a refused value changes nothing. Only sizes that
/// are sizes are taken (and `stats_reset` and `notify_test` take anything: writing them is the
/// command).
#[test]
fn hostile_values_for_every_writable_key() {
    use mirrorfs::config::table::{Access, KEYS, OPTIONS};
    let l = legs(2);
    let fs = open_fs(&l);
    let root = Caller::root();
    let commands: &[&str] = &[
        "fail",
        "fail ",
        "fail leg9",
        "fail leg99999999999999999999999",
        "fail leg0 leg1",
        "add",
        "add leg1 full extra",
        "remove",
        "replace leg1",
        "replace leg1 /nonexistent/dir",
        "replace leg1 /",
        "replace leg1 /proc",
        "replace leg9 /tmp",
        "start repair=",
        "start repair=nope",
        "start repair=majority",
        "start start",
        "leg=leg1 op=read errno=-5",
        "leg=leg1 op=read errno=0",
        "leg=leg1 op=read errno=99999999999",
        "leg=leg1 times=0",
        "leg=leg1 times=-1",
        "leg=+1",
        "leg=18446744073709551616",
        "leg=leg7",
        "op=read",
        "fail\0leg1\0extra",
        "replace\0leg1",
    ];
    let writable: Vec<&str> = OPTIONS
        .iter()
        .filter(|o| o.live.is_some())
        .map(|o| o.name)
        .chain(
            KEYS.iter()
                .filter(|k| k.access != Access::Read)
                .map(|k| k.name),
        )
        .collect();
    assert!(writable.contains(&"leg") && writable.contains(&"fault"));
    for key in writable {
        let name = format!("user.mirrorfs.{key}");
        for v in mirrorfs::value::HOSTILE.iter().chain(commands) {
            let before = control_state(&fs);
            let r = fs.setxattr(ROOT_INO, OsStr::new(&name), v.as_bytes(), 0, &root);
            let may_take = matches!(key, "stats_reset" | "notify_test")
                || (matches!(key, "minfreespace" | "resync_speed_max" | "readahead")
                    && mirrorfs::value::size(v).is_ok())
                || (key == "leg_timeout" && mirrorfs::value::seconds(v).is_ok());
            match r {
                Ok(()) => assert!(may_take, "{key}={v:?} was taken"),
                Err(e) => {
                    assert_eq!(
                        control_state(&fs),
                        before,
                        "{key}={v:?} ({e:?}) changed things"
                    )
                }
            }
        }
    }
    assert_eq!(fs.mirror().in_sync_legs(), vec![0, 1]);
}

/// A policy that splits every read into three 4 KiB pieces on legs 0, 1, 0.
struct Alternate;

impl mirrorfs::policy::ReadPolicy for Alternate {
    fn name(&self) -> String {
        "alternate".into()
    }
    fn pick(
        &self,
        _: &[mirrorfs::policy::LegView],
        req: &mirrorfs::policy::ReadRequest,
    ) -> mirrorfs::policy::ReadPlan {
        use mirrorfs::policy::{ReadPiece, ReadPlan};
        let piece = |i: u64, leg| ReadPiece {
            leg,
            offset: req.offset + i * 4096,
            len: 4096,
        };
        ReadPlan::Split(vec![piece(0, 0), piece(1, 1), piece(2, 0)])
    }
}

/// A split read whose pieces alternate between legs reads each piece exactly once, and puts
/// them back in order.
#[test]
fn a_split_read_runs_exactly_its_pieces() {
    let l = legs(2);
    let fs = open_fs_with(&l, Box::new(Alternate));
    let data: Vec<u8> = (0..12288u32).map(|i| (i % 251) as u8).collect();
    let (_, fh) = new_file(&fs, "f", &data, &me());
    let before: Vec<u64> = fs
        .mirror()
        .legs()
        .iter()
        .map(|leg| leg.counters.read_ops.load(Ordering::Relaxed))
        .collect();
    assert_eq!(fs.read(fh, 0, 12288, 1).unwrap().as_slice(), &data[..]);
    let reads: Vec<u64> = fs
        .mirror()
        .legs()
        .iter()
        .zip(&before)
        .map(|(leg, b)| leg.counters.read_ops.load(Ordering::Relaxed) - b)
        .collect();
    assert_eq!(reads, vec![2, 1], "pieces read per leg");
}

/// A mirror of two legs, leg 1 quiet, holding `d/f` ("old") and the name `d/g`, made through
/// the core; then the kernel forgets everything, so the next lookups make fresh inodes.
fn quiet_pair(l: &Legs, c: &Caller) -> MirrorFs {
    let fs = open_fs_quiet(
        l,
        mirrorfs::policy::by_name_among("first", &[]).unwrap(),
        &[1],
    );
    let d = fs.mkdir(ROOT_INO, OsStr::new("d"), 0o755, c).unwrap();
    let (f, fh) = fs
        .create(d.attr.ino.0, OsStr::new("f"), 0o644, libc::O_RDWR, c)
        .unwrap();
    fs.write(fh, 0, b"old").unwrap();
    fs.release(fh).unwrap();
    fs.link(f.attr.ino.0, d.attr.ino.0, OsStr::new("g"), c)
        .unwrap();
    fs.forget(f.attr.ino.0, 2);
    fs.forget(d.attr.ino.0, 1);
    assert_eq!(fs.live_inodes(), 1);
    fs
}

/// Looks up `d` and `d/f` (fresh inodes after [`quiet_pair`]).
fn look_up_d_f(fs: &MirrorFs, c: &Caller) -> (Entry, Entry) {
    let d = fs.lookup(ROOT_INO, OsStr::new("d"), c).unwrap();
    let f = fs.lookup(d.attr.ino.0, OsStr::new("f"), c).unwrap();
    (d, f)
}

#[test]
fn lookups_and_reads_leave_a_quiet_leg_alone_and_changes_find_it() {
    let l = legs(2);
    let c = me();
    let fs = quiet_pair(&l, &c);
    // Every lookup, attribute or read on leg 1 would fail and drop it: none happens.
    for op in ["lookup", "getattr", "readdir", "read", "open"] {
        fail(&fs, 1, op, Errno::EIO, None);
    }
    let (d, f) = look_up_d_f(&fs, &c);
    fs.getattr(f.attr.ino.0).unwrap();
    let fh = fs.open(f.attr.ino.0, libc::O_RDONLY, &c).unwrap();
    assert_eq!(fs.read(fh, 0, 10, 1).unwrap().as_slice(), b"old");
    fs.release(fh).unwrap();
    assert_eq!(fs.mirror().in_sync_legs(), vec![0, 1]);
    fs.mirror().clear_faults();

    // A change finds the file on leg 1 by its path, after its directory moved.
    fs.rename(ROOT_INO, OsStr::new("d"), ROOT_INO, OsStr::new("e"), 0, &c)
        .unwrap();
    let fh = fs.open(f.attr.ino.0, libc::O_WRONLY, &c).unwrap();
    fs.write(fh, 0, b"new").unwrap();
    fs.release(fh).unwrap();
    fs.mkdir(d.attr.ino.0, OsStr::new("sub"), 0o755, &c)
        .unwrap();
    for p in &l.paths {
        assert_eq!(read_all(&p.join("e/f")), b"new");
        assert!(p.join("e/sub").is_dir());
    }
    assert_eq!(fs.mirror().in_sync_legs(), vec![0, 1]);
}

#[test]
fn a_quiet_leg_that_lacks_what_a_change_needs_is_dropped() {
    let l = legs(2);
    let c = me();
    let fs = quiet_pair(&l, &c);
    let (_, f) = look_up_d_f(&fs, &c);
    // Behind the mirror's back, leg 1 loses the file: lookups never notice (they leave the
    // leg alone), the first change does, and the leg is let go of rather than left behind.
    std::fs::remove_file(l.paths[1].join("d/f")).unwrap();
    let fh = fs.open(f.attr.ino.0, libc::O_WRONLY, &c).unwrap();
    fs.write(fh, 0, b"new").unwrap();
    fs.release(fh).unwrap();
    assert_eq!(fs.mirror().in_sync_legs(), vec![0]);
    assert_eq!(read_all(&l.paths[0].join("d/f")), b"new");
}

#[test]
fn when_the_other_leg_fails_the_quiet_leg_serves_what_the_kernel_holds() {
    let l = legs(2);
    let c = me();
    let fs = quiet_pair(&l, &c);
    let (d, f) = look_up_d_f(&fs, &c);
    fail(&fs, 0, "mkdir", Errno::EIO, None);
    fs.mkdir(ROOT_INO, OsStr::new("x"), 0o755, &c).unwrap();
    assert_eq!(fs.mirror().in_sync_legs(), vec![1]);
    // The sweep lets go of leg 0's descriptors: what the kernel holds is found on leg 1 first.
    fs.recovery().release_dropped_legs();
    assert_eq!(fs.getattr(f.attr.ino.0).unwrap().size, 3);
    let fh = fs.open(f.attr.ino.0, libc::O_RDWR, &c).unwrap();
    fs.write(fh, 0, b"leg1 alone").unwrap();
    assert_eq!(fs.read(fh, 0, 100, 1).unwrap().as_slice(), b"leg1 alone");
    fs.release(fh).unwrap();
    assert_eq!(read_all(&l.paths[1].join("d/f")), b"leg1 alone");
    let g = fs.lookup(d.attr.ino.0, OsStr::new("g"), &c).unwrap();
    assert_eq!(g.attr.ino, f.attr.ino, "a hard link keeps its number");
}

/// Runs a pending read's leg reads the way a ring would (here with `pread`): what each gave.
fn run_leg_reads(p: &mut mirrorfs::fs::PendingRead) -> Vec<Result<usize, Errno>> {
    use std::os::unix::fs::FileExt;
    p.reads
        .iter_mut()
        .map(|r| {
            let (fd, buf, offset) = r.target();
            let f = std::fs::File::from(fd.try_clone_to_owned().unwrap());
            let mut done = 0;
            while done < buf.len() {
                match f.read_at(&mut buf[done..], offset + done as u64) {
                    Ok(0) => break,
                    Ok(n) => done += n,
                    Err(e) => return Err(Errno::from(e)),
                }
            }
            Ok(done)
        })
        .collect()
}

fn inflight(fs: &MirrorFs) -> Vec<u32> {
    fs.mirror()
        .legs()
        .iter()
        .map(|l| l.inflight.load(Ordering::Relaxed))
        .collect()
}

/// The two halves of a read (for a transport that runs the legs' reads on its ring) give what
/// the blocking read gives, checked against the checksums, and hold the legs busy between.
#[test]
fn a_read_in_two_halves_gives_what_the_blocking_read_gives() {
    use mirrorfs::fs::ReadStart;
    let l = legs(2);
    let fs = open_fs_with(&l, Box::new(Alternate));
    let data: Vec<u8> = (0..40000u32).map(|i| (i % 253) as u8).collect();
    let (_, fh) = new_file(&fs, "f", &data, &me());
    for (offset, size) in [(0u64, 40000u32), (100, 5000), (8192, 4096), (39000, 4096)] {
        let ReadStart::Legs(mut p) = fs.read_start(fh, offset, size, 1) else {
            panic!("a read of {size} at {offset} was not routed to its legs");
        };
        assert_eq!(
            inflight(&fs).iter().sum::<u32>() as usize,
            p.reads.len(),
            "each leg read is in flight until it ends"
        );
        let got = run_leg_reads(&mut p);
        let r = fs.read_end(p, &got).expect("a clean read is answered");
        let end = (offset as usize + size as usize).min(data.len());
        assert_eq!(r.unwrap().as_slice(), &data[offset as usize..end]);
        assert_eq!(inflight(&fs), vec![0, 0]);
        assert_eq!(
            fs.read(fh, offset, size, 1).unwrap().as_slice(),
            &data[offset as usize..end]
        );
    }
    assert_eq!(fs.stats().transport, None);
    fs.release(fh).unwrap();
}

/// A read given memory to fill (the io_uring reader lends its ring entry's payload) reads its
/// legs straight into it: the pieces land where the answer's bytes go, and the answer says the
/// data is in place, with nothing to copy. A read widened to whole blocks for its checksums
/// gets buffers of its own; either way the bytes are the blocking read's.
#[test]
fn a_read_into_lent_memory_lands_in_place() {
    use mirrorfs::fs::ReadStart;
    use mirrorfs::sys::aligned::{AlignedBuf, Lent};
    let l = legs(2);
    let fs = open_fs_with(&l, Box::new(Alternate));
    let data: Vec<u8> = (0..40000u32).map(|i| (i % 251) as u8).collect();
    let (_, fh) = new_file(&fs, "f", &data, &me());
    let mut mem = AlignedBuf::new(64 << 10);
    let base = mem.as_mut_slice().as_mut_ptr();
    // (offset, size, whether it lands in place): three 4 KiB pieces on alternating legs, the
    // last read short at the end of the file, and one widened for its checksums.
    for (offset, size, in_place) in [
        (8192u64, 12288u32, true),
        (36864, 12288, true),
        (100, 5000, false),
    ] {
        // SAFETY: `mem` outlives the read and is not touched while the window lives.
        let lent = unsafe { Lent::new(std::ptr::NonNull::new(base).unwrap(), 64 << 10) };
        let ReadStart::Legs(mut p) = fs.read_start_into(fh, offset, size, 1, Some(lent)) else {
            panic!("a read of {size} at {offset} was not routed to its legs");
        };
        assert!(
            !in_place || p.reads.len() > 1,
            "a read of {size} at {offset}: not split"
        );
        let got = run_leg_reads(&mut p);
        let r = fs
            .read_end(p, &got)
            .expect("a clean read is answered")
            .unwrap();
        let end = (offset as usize + size as usize).min(data.len());
        let want = &data[offset as usize..end];
        assert_eq!(r.as_slice(), want, "read of {size} at {offset}");
        match in_place {
            true => {
                assert_eq!(r.in_place(), Some((base as usize, want.len())));
                drop(r);
                assert_eq!(&mem.as_slice()[..want.len()], want);
            }
            false => assert_eq!(r.in_place(), None),
        }
        assert_eq!(inflight(&fs), vec![0, 0]);
    }
    // Lent memory too small for the read: buffers of its own.
    // SAFETY: as above.
    let small = unsafe { Lent::new(std::ptr::NonNull::new(base).unwrap(), 4096) };
    let ReadStart::Legs(mut p) = fs.read_start_into(fh, 0, 12288, 1, Some(small)) else {
        panic!("not routed");
    };
    let got = run_leg_reads(&mut p);
    let r = fs.read_end(p, &got).unwrap().unwrap();
    assert_eq!(r.in_place(), None);
    assert_eq!(r.as_slice(), &data[..12288]);
    fs.release(fh).unwrap();
}

/// A leg read that failed, or a copy that does not match its checksums, is never answered by
/// the second half: it goes back to the blocking read, which asks the other leg and repairs.
#[test]
fn a_read_half_that_failed_goes_back_to_the_blocking_read() {
    use mirrorfs::fs::ReadStart;
    let l = legs(2);
    let fs = open_fs(&l);
    let data = vec![0x5au8; 8192];
    let (_, fh) = new_file(&fs, "f", &data, &me());
    // An I/O error on the leg.
    let ReadStart::Legs(p) = fs.read_start(fh, 0, 8192, 1) else {
        panic!("not routed");
    };
    let n = p.reads.len();
    assert!(fs.read_end(p, &vec![Err(Errno::EIO); n]).is_none());
    assert_eq!(inflight(&fs), vec![0, 0]);
    // Rot on the leg read first: the second half sees the checksums fail.
    corrupt(&l.paths[0].join("f"), 100);
    let ReadStart::Legs(mut p) = fs.read_start(fh, 0, 8192, 1) else {
        panic!("not routed");
    };
    assert_eq!(p.reads[0].leg, 0);
    let got = run_leg_reads(&mut p);
    assert!(fs.read_end(p, &got).is_none(), "rot was answered");
    // The blocking read answers from the good copy and repairs the bad one.
    assert_eq!(fs.read(fh, 0, 8192, 1).unwrap().as_slice(), &data[..]);
    assert_eq!(std::fs::read(l.paths[0].join("f")).unwrap(), data);
    fs.release(fh).unwrap();
}

/// Flips a byte of a leg's copy, keeping its times (rot).
fn corrupt(p: &Path, at: u64) {
    use std::os::unix::fs::FileExt;
    let md = std::fs::metadata(p).unwrap();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(p)
        .unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[!b[0]], at).unwrap();
    drop(f);
    let t = |s: i64, ns: i64| libc::timespec {
        tv_sec: s,
        tv_nsec: ns,
    };
    let times = [
        t(md.atime(), md.atime_nsec()),
        t(md.mtime(), md.mtime_nsec()),
    ];
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid path and two timespecs.
    assert_eq!(
        unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) },
        0
    );
}

/// Injected faults and leg deadlines are the blocking read's to handle: a read then never
/// runs in two halves.
#[test]
fn with_faults_or_deadlines_reads_stay_blocking() {
    use mirrorfs::fs::ReadStart;
    let l = legs(2);
    let fs = open_fs(&l);
    let (_, fh) = new_file(&fs, "f", b"some data", &me());
    assert!(matches!(fs.read_start(fh, 0, 9, 1), ReadStart::Legs(_)));
    fail(&fs, 0, "read", Errno::EIO, Some(1));
    assert!(matches!(fs.read_start(fh, 0, 9, 1), ReadStart::Blocking));
    // The blocking read spends the fault and answers from the other leg.
    assert_eq!(fs.read(fh, 0, 9, 1).unwrap().as_slice(), b"some data");
    assert!(matches!(fs.read_start(fh, 0, 9, 1), ReadStart::Legs(_)));
    fs.mirror()
        .set_leg_timeout(std::time::Duration::from_secs(5));
    assert!(matches!(fs.read_start(fh, 0, 9, 1), ReadStart::Blocking));
    fs.release(fh).unwrap();
}

/// A successor takes the session over from the log a serving process kept (issue 25): the
/// node ids the kernel holds name the same objects (hard links and a file renamed while open
/// included), with the kernel's lookup counts, and the open handles read and write as before.
#[test]
fn a_successor_takes_over_node_ids_and_handles_from_the_session_log() {
    use mirrorfs::fs::takeover::{Journal, State};
    let l = legs(2);
    let c = me();
    let log = mirrorfs::sys::session::memfd("core-test-session").unwrap();
    let before = open_fs(&l);
    before.keep_session_log(std::sync::Arc::new(
        Journal::new(log.try_clone().unwrap(), &[]).unwrap(),
    ));
    let d = before.mkdir(ROOT_INO, OsStr::new("d"), 0o755, &c).unwrap();
    let (a, fh_a) = new_file(&before, "a", b"first file", &c);
    before
        .link(a.attr.ino.0, d.attr.ino.0, OsStr::new("a-too"), &c)
        .unwrap();
    let (b, fh_b) = new_file(&before, "b", b"renamed while open", &c);
    before
        .rename(
            ROOT_INO,
            OsStr::new("b"),
            d.attr.ino.0,
            OsStr::new("b2"),
            0,
            &c,
        )
        .unwrap();
    // Looked up twice more: the kernel holds three lookups of it.
    before.lookup(ROOT_INO, OsStr::new("d"), &c).unwrap();
    before.lookup(ROOT_INO, OsStr::new("d"), &c).unwrap();
    // A file the kernel forgot, and a handle it released: neither comes back.
    let (gone, fh_gone) = new_file(&before, "gone", b"x", &c);
    before.release(fh_gone).unwrap();
    before.forget(gone.attr.ino.0, 1);
    // The serving process dies: what the successor has is the log.
    let bytes = Journal::read_all(&mut log.try_clone().unwrap()).unwrap();
    std::mem::forget(before);
    let state = State::replay(&bytes);
    let after = open_fs(&l);
    let took = after.take_over(&state);
    assert!(
        took.lost_nodes.is_empty() && took.lost_handles.is_empty(),
        "{took:?}"
    );
    assert_eq!((took.nodes, took.handles), (3, 2), "{took:?}");
    assert_eq!(
        after.getattr(a.attr.ino.0).unwrap().nlink,
        2,
        "the hard-linked file"
    );
    assert_eq!(
        after.getattr(d.attr.ino.0).unwrap().kind,
        fuser::FileType::Directory
    );
    assert_eq!(after.getattr(gone.attr.ino.0).unwrap_err(), Errno::ESTALE);
    // The handles read what was written, and write to every leg.
    assert_eq!(
        after.read(fh_a, 0, 100, 1).unwrap().as_slice(),
        b"first file"
    );
    assert_eq!(
        after.read(fh_b, 0, 100, 1).unwrap().as_slice(),
        b"renamed while open"
    );
    after.write(fh_b, 0, b"RENAMED").unwrap();
    after.release(fh_b).unwrap();
    for leg in &l.paths {
        assert_eq!(read_all(&leg.join("d/b2")), b"RENAMED while open");
    }
    assert_eq!(after.read(fh_b, 0, 1, 1).err(), Some(Errno::EBADF));
    // A name looked up in the successor finds the same number.
    let again = after.lookup(d.attr.ino.0, OsStr::new("a-too"), &c).unwrap();
    assert_eq!(again.attr.ino, a.attr.ino);
    // The lookup counts carried over: three forgets of the directory let it go, not two.
    after.forget(d.attr.ino.0, 2);
    assert!(after.getattr(d.attr.ino.0).is_ok());
    after.forget(d.attr.ino.0, 1);
    assert_eq!(after.getattr(d.attr.ino.0).unwrap_err(), Errno::ESTALE);
    // New numbers and handles are above every one handed out before.
    let (e, fh) = new_file(&after, "new", b"n", &c);
    assert!(
        e.attr.ino.0 > gone.attr.ino.0 && fh > fh_gone,
        "{} {fh}",
        e.attr.ino.0
    );
    after.release(fh_a).unwrap();
    after.release(fh).unwrap();
    let _ = b;
}

/// A write that covers only part of a block reads the rest of it for the block's new checksum,
/// except past the end of a file whose every change the checksums saw (a new file): those
/// bytes are zeros. With every leg read failing, a write past the end of a new file still
/// succeeds, and one inside it does not (it must read); the file then reads back whole and
/// verified.
#[test]
fn a_partial_write_past_the_end_of_a_new_file_reads_nothing() {
    let l = legs(2);
    let fs = open_fs(&l);
    let (_, fh) = new_file(&fs, "g", &[7u8; 100], &me());
    fail(&fs, 0, "read", Errno::EIO, None);
    fail(&fs, 1, "read", Errno::EIO, None);
    assert_eq!(fs.write(fh, 5000, &[9u8; 100]).unwrap(), 100);
    assert_eq!(fs.write(fh, 50, &[1u8; 10]), Err(Errno::EIO));
    fs.mirror().clear_faults();
    let mut want = vec![0u8; 5100];
    want[..100].fill(7);
    want[5000..].fill(9);
    assert_eq!(fs.read(fh, 0, 8192, 1).unwrap().as_slice(), &want[..]);
    for p in &l.paths {
        assert_eq!(read_all(&p.join("g")), want);
    }
    fs.release(fh).unwrap();
}
