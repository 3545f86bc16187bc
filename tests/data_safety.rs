//! Never lose data (issue 3), through real mounts, each scenario ending with the legs compared
//! byte for byte:
//!
//! 1. an injected read error answered from another leg and repaired on the failing one (keeping
//!    the copy's mtime); a leg whose repair fails too is dropped, and resynced at the next mount;
//! 2. a leg that fills up: the reserve keeps the legs identical and the caller gets ENOSPC; the
//!    small leg, dropped once its own filesystem is full, is added back (`mirrorfs leg add`)
//!    after its tmpfs grows;
//! 3. a leg missing at mount: refused without `degraded`, served with it; when it returns it is
//!    mounted STALE, resynced in the background (never read, no user write, until it joins),
//!    and the renames and deletes made meanwhile are reproduced;
//! 4. `kill -9` of the daemon during writes: the next mount makes the intent-logged paths (and
//!    only those) identical before serving; every fsync'd byte is on every leg;
//! 5. a leg that goes read-only in the middle of a fio verify workload (ext4 on a loop device
//!    with `errors=remount-ro`, or an injected EROFS): fio sees no error, the leg is dropped,
//!    comes back, is resynced, and fio verifies on each leg;
//! 6. the write-intent log on and off;
//! 7. scrub: a byte flipped in one leg's copy is found (listed, counted, `scrub status` exits 1)
//!    and repaired, by majority with three legs and from a named leg with two;
//! 8. adopting existing data at the first mount (`init_from=` when the legs differ);
//! 9. `mirrorfs leg replace` while a file is open for writing.
//!
//! Resyncs are awaited by polling the statistics (`resync.state == JobState::Finished`, every leg
//! ONLINE) with a timeout, never by fixed sleeps. fio runs in the test's temp dir with
//! `--verify_state_save=0`, so no `*-verify.state` file lands in the working directory.

#[macro_use]
mod common;

use common::*;
use mirrorfs::stats::{JobState, LegState, MountState, Stats};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::sleep;
use std::time::{Duration, Instant};

const KIB: usize = 1 << 10;
const MIB: usize = 1 << 20;
const FAULT: &str = "user.mirrorfs.fault";

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn run(prog: &str, args: &[&dyn AsRef<OsStr>], timeout: Duration) -> Output {
    let mut cmd = Command::new(prog);
    for a in args {
        cmd.arg(a.as_ref());
    }
    run_timeout(&mut cmd, timeout)
}

#[track_caller]
fn getfattr_ok(path: &Path, key: &str) -> String {
    let out = run(
        "getfattr",
        &[&"-n", &key, &"--only-values", &path],
        Duration::from_secs(30),
    );
    assert!(
        out.status.success(),
        "getfattr -n {key} {}: {}",
        path.display(),
        text(&out.stderr)
    );
    text(&out.stdout)
}

#[track_caller]
fn setfattr_ok(path: &Path, key: &str, value: &str) {
    let out = run(
        "setfattr",
        &[&"-n", &key, &"-v", &value, &path],
        Duration::from_secs(30),
    );
    assert!(
        out.status.success(),
        "setfattr -n {key} -v {value:?} {}: {}",
        path.display(),
        text(&out.stderr)
    );
}

/// The statistics document of the mount at `mnt`.
#[track_caller]
fn stats(mnt: &Path) -> Stats {
    let raw = getfattr_ok(&mnt.join(".mirrorfs"), "user.mirrorfs.stats");
    serde_json::from_str(&raw).unwrap_or_else(|e| panic!("stats do not parse: {e}\n{raw}"))
}

/// `mirrorfs status MOUNT`: exit code and report.
fn status(mnt: &Path) -> (Option<i32>, String) {
    let out = run_mirrorfs([OsStr::new("status"), mnt.as_os_str()]);
    (out.status.code(), text(&out.stdout) + &text(&out.stderr))
}

/// The line of `leg` in a status report.
#[track_caller]
fn status_leg_line(report: &str, leg: &str) -> String {
    report
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{leg} ")))
        .unwrap_or_else(|| panic!("no line for {leg} in the status report:\n{report}"))
        .to_string()
}

/// A leg's superblock as JSON.
#[track_caller]
fn superblock(leg: &Path) -> Value {
    let p = leg.join(".mirrorfs/superblock.json");
    let t = fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    serde_json::from_str(&t).unwrap_or_else(|e| panic!("{} does not parse: {e}", p.display()))
}

fn intent_log(leg: &Path) -> PathBuf {
    leg.join(".mirrorfs/intent.log")
}

fn away_log(leg: &Path, leg_id: &str) -> PathBuf {
    leg.join(format!(".mirrorfs/away-{leg_id}.log"))
}

/// The records of a log of NUL-terminated paths (an absent log has none).
#[track_caller]
fn log_records(p: &Path) -> BTreeSet<String> {
    match fs::read(p) {
        Ok(b) => b
            .split(|&c| c == 0)
            .filter(|r| !r.is_empty())
            .map(|r| String::from_utf8_lossy(r).into_owned())
            .collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => BTreeSet::new(),
        Err(e) => panic!("read {}: {e}", p.display()),
    }
}

/// The size of a file, 0 when it does not exist.
fn len_or_zero(p: &Path) -> u64 {
    fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

/// Polls `cond` every 100 ms for up to `timeout`; true once it holds.
fn wait_for(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() > timeout {
            return false;
        }
        sleep(Duration::from_millis(100));
    }
}

/// The throttle that makes the resync of [`AWAY_BIG`] last about 4 s (it counts the bytes read
/// from the source and those written to the target).
const RESYNC_THROTTLE: &str = "resync_speed_max=1M";
/// A file written while a leg is away, to keep its throttled resync going for a while.
const AWAY_BIG: usize = 2 * MIB;

/// How long a resync of the small trees of these tests may take (they take well under a
/// second unthrottled; the throttled ones a few seconds).
const RESYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// `mirrorfs ARGS...`: exit code and stdout + stderr.
fn mirrorfs(args: &[&dyn AsRef<OsStr>]) -> (Option<i32>, String) {
    let out = run_mirrorfs(args.iter().map(|a| a.as_ref()));
    (out.status.code(), text(&out.stdout) + &text(&out.stderr))
}

/// `mirrorfs ARGS...`, which must exit 0.
#[track_caller]
fn mirrorfs_ok(args: &[&dyn AsRef<OsStr>]) -> String {
    let (code, out) = mirrorfs(args);
    let shown: Vec<String> = args
        .iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect();
    assert_eq!(code, Some(0), "mirrorfs {shown:?}:\n{out}");
    out
}

/// `mirrorfs ARGS...`, which must be refused: exit status 1 and one line saying why; returns
/// the output.
#[track_caller]
fn mirrorfs_refused(args: &[&dyn AsRef<OsStr>]) -> String {
    let (code, out) = mirrorfs(args);
    let shown: Vec<String> = args
        .iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        code,
        Some(1),
        "mirrorfs {shown:?} should be refused:\n{out}"
    );
    assert!(
        out.lines().any(|l| l.starts_with("mirrorfs: ")),
        "mirrorfs {shown:?}: no line says why:\n{out}"
    );
    out
}

/// Waits until the resync of the mount has finished and every leg is ONLINE (several stale
/// legs are resynced one after the other); panics if a resync fails or is cancelled, or after
/// [`RESYNC_TIMEOUT`]. Returns the statistics then.
#[track_caller]
fn wait_resynced(mnt: &Path) -> Stats {
    let start = Instant::now();
    loop {
        let st = stats(mnt);
        if let Some(r) = &st.resync {
            assert!(
                r.state == JobState::Running || r.state == JobState::Finished,
                "the resync ended as {:?}: {st:?}",
                r.state
            );
            if r.state == JobState::Finished
                && st
                    .legs
                    .iter()
                    .all(|l| l.state == LegState::InSync || l.state == LegState::Removed)
            {
                assert_eq!(st.state, MountState::Online, "{st:?}");
                let (_, report) = status(mnt);
                assert!(
                    report.contains("resync finished") && report.contains("state: ONLINE"),
                    "status after the resync:\n{report}"
                );
                eprintln!(
                    "resync finished in {:?} ({} s by the stats)",
                    start.elapsed(),
                    r.elapsed_s
                );
                return st;
            }
        }
        assert!(
            start.elapsed() < RESYNC_TIMEOUT,
            "no resync finished within {RESYNC_TIMEOUT:?}: {st:?}\n{}",
            status(mnt).1
        );
        sleep(Duration::from_millis(100));
    }
}

/// The scrub document (`user.mirrorfs.scrub`) once the scrub is no longer running.
#[track_caller]
fn wait_scrubbed(mnt: &Path) -> Value {
    let start = Instant::now();
    loop {
        let raw = getfattr_ok(&mnt.join(".mirrorfs"), "user.mirrorfs.scrub");
        let doc: Value = serde_json::from_str(&raw)
            .unwrap_or_else(|e| panic!("user.mirrorfs.scrub does not parse: {e}\n{raw}"));
        if doc["state"] != "running" {
            assert_eq!(doc["state"], "finished", "{doc}");
            return doc;
        }
        assert!(
            start.elapsed() < RESYNC_TIMEOUT,
            "the scrub is still running after {RESYNC_TIMEOUT:?}: {doc}"
        );
        sleep(Duration::from_millis(100));
    }
}

/// The paths a scrub document lists as differing.
fn differing(doc: &Value) -> Vec<String> {
    doc["differing"]
        .as_array()
        .unwrap_or_else(|| panic!("no 'differing' list: {doc}"))
        .iter()
        .map(|d| d.as_str().unwrap_or_default().to_string())
        .collect()
}

/// Flips the bytes `[offset, offset + len)` of a leg's copy directly, keeping its times: the
/// copy silently holds bad data, as a bad sector would.
#[track_caller]
fn corrupt_keeping_times(p: &Path, offset: u64, len: usize) {
    let md = fs::metadata(p).unwrap_or_else(|e| panic!("stat {}: {e}", p.display()));
    let f = OpenOptions::new().read(true).write(true).open(p).unwrap();
    let mut buf = vec![0u8; len];
    f.read_exact_at(&mut buf, offset).unwrap();
    for b in &mut buf {
        *b = !*b;
    }
    f.write_all_at(&buf, offset).unwrap();
    f.sync_all().unwrap();
    drop(f);
    utimensat(
        p,
        ts(md.atime(), md.atime_nsec()),
        ts(md.mtime(), md.mtime_nsec()),
        true,
    )
    .unwrap();
}

/// Reads a whole file through `O_DIRECT` in `chunk`-byte `pread`s, one after the other. Each
/// `pread` of at most 128 KiB is exactly one FUSE read request, sent only once the previous one
/// is answered: the order in which the legs see reads is the order of the `pread`s. (A buffered
/// read lets readahead send several requests at once, answered in any order.)
#[track_caller]
fn read_direct(p: &Path, chunk: usize) -> Vec<u8> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(p)
        .unwrap_or_else(|e| panic!("open O_DIRECT {}: {e}", p.display()));
    let mut buf = AlignedBuf::new(chunk, 4096);
    let mut out = Vec::new();
    loop {
        let n = f
            .read_at(buf.as_mut_slice(), out.len() as u64)
            .unwrap_or_else(|e| panic!("O_DIRECT pread of {} at {}: {e}", p.display(), out.len()));
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf.as_slice()[..n]);
    }
}

/// A mount made by hand over existing legs (a remount, with other options); unmounted on drop.
/// Declare it after the [`Mounted`] that owns the dirs, so that it drops first.
struct Remounted {
    mnt: PathBuf,
    pids: Vec<i32>,
    mounted: bool,
}

/// Mounts `legs` on `mnt` with `opts`; `Err` with mirrorfs's output when it refuses.
fn try_mount(legs: &[PathBuf], mnt: &Path, opts: &[&str]) -> Result<Remounted, Output> {
    let mut args: Vec<OsString> = vec![legs_arg(legs).into(), mnt.into()];
    if !opts.is_empty() {
        args.push("-o".into());
        args.push(opts.join(",").into());
    }
    let out = run_mirrorfs(&args);
    if !out.status.success() {
        if is_mounted(mnt) {
            let _ = unmount_path(mnt);
            panic!(
                "mirrorfs {args:?} failed ({}) but left {} mounted",
                out.status,
                mnt.display()
            );
        }
        return Err(out);
    }
    assert!(
        is_mounted(mnt),
        "mirrorfs {args:?} exited 0 but {} is not mounted",
        mnt.display()
    );
    Ok(Remounted {
        mnt: mnt.to_path_buf(),
        pids: daemon_pids(mnt),
        mounted: true,
    })
}

/// As [`try_mount`], panicking with mirrorfs's stderr when the mount is refused.
#[track_caller]
fn mount_ok(legs: &[PathBuf], mnt: &Path, opts: &[&str]) -> Remounted {
    try_mount(legs, mnt, opts).unwrap_or_else(|out| {
        panic!(
            "mounting {} with {opts:?} was refused ({}): {}",
            legs_arg(legs),
            out.status,
            text(&out.stderr)
        )
    })
}

/// Asserts that mounting `legs` with `opts` is refused with exit status 1, nothing mounted;
/// returns mirrorfs's stderr.
#[track_caller]
fn mount_refused(legs: &[PathBuf], mnt: &Path, opts: &[&str]) -> String {
    match try_mount(legs, mnt, opts) {
        Ok(mut r) => {
            r.unmount();
            panic!("mounting {} with {opts:?} succeeded", legs_arg(legs));
        }
        Err(out) => {
            assert_eq!(
                out.status.code(),
                Some(1),
                "exit status of a refused mount; stderr: {}",
                text(&out.stderr)
            );
            assert!(!is_mounted(mnt), "a refused mount left {}", mnt.display());
            text(&out.stderr)
        }
    }
}

impl Remounted {
    #[track_caller]
    fn unmount(&mut self) {
        if !self.mounted {
            return;
        }
        self.mounted = false;
        if let Err(e) = unmount_path(&self.mnt) {
            panic!("{e}");
        }
        assert!(
            wait_pids_gone(&self.pids, Duration::from_secs(10)),
            "mirrorfs daemon {:?} still running 10 s after umount",
            self.pids
        );
    }
}

impl Drop for Remounted {
    fn drop(&mut self) {
        if self.mounted {
            self.mounted = false;
            if let Err(e) = unmount_path(&self.mnt) {
                eprintln!("warning: {e}");
            }
            wait_pids_gone(&self.pids, Duration::from_secs(10));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 1. An injected read error is answered from another leg and repaired on the failing one
// ---------------------------------------------------------------------------------------------

legs_test!(
    injected_read_error_is_repaired,
    persistent_read_fault_with_failing_repair_drops_the_leg,
);

/// The size of the file read back in test 1.
const REPAIR_FILE: usize = 6 * MIB;
/// The `O_DIRECT` read size of test 1 (one FUSE request per read).
const DIRECT_CHUNK: usize = 64 * KIB;

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
    setfattr_ok(&mnt.join("big"), FAULT, "leg=0 op=read errno=EIO times=1");
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
    setfattr_ok(&mnt.join("f"), FAULT, "leg=0 op=read errno=EIO");
    setfattr_ok(&mnt.join("f"), FAULT, "leg=0 op=repair errno=EIO");

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

// ---------------------------------------------------------------------------------------------
// 2. A leg fills up
// ---------------------------------------------------------------------------------------------

/// Files written while filling the legs: name, content seed, bytes the caller was told are
/// written.
struct Filled {
    files: Vec<(String, u64, usize)>,
}

const FILL_FILE: usize = 4 * MIB;
const FILL_CHUNK: usize = 256 * KIB;

impl Filled {
    fn total(&self) -> usize {
        self.files.iter().map(|f| f.2).sum()
    }

    /// Writes files `{prefix}{i}` of 4 MiB, 256 KiB per `write(2)`, until an open or a write
    /// fails; returns that error. A write may be cut short (the kernel sends it to mirrorfs in
    /// pieces, and only the last pieces may not fit): the rest is written again, as `write_all`
    /// does, so the error is the one the last piece got.
    fn fill(&mut self, mnt: &Path, prefix: &str, seed: u64) -> io::Error {
        for i in 0..1000u64 {
            let name = format!("{prefix}{i}");
            let mut f = match File::create(mnt.join(&name)) {
                Ok(f) => f,
                Err(e) => return e,
            };
            let content = pattern(FILL_FILE, seed + i);
            self.files.push((name, seed + i, 0));
            for chunk in content.chunks(FILL_CHUNK) {
                let mut rest = chunk;
                while !rest.is_empty() {
                    match f.write(rest) {
                        Ok(0) => panic!("write returned 0"),
                        Ok(k) => {
                            self.files.last_mut().unwrap().2 += k;
                            rest = &rest[k..];
                        }
                        Err(e) => return e,
                    }
                }
            }
        }
        panic!("wrote 1000 files of 4 MiB without an error");
    }

    /// Every byte the caller was told is written is in `rel` on `leg` (exactly that many bytes
    /// when `exact`).
    #[track_caller]
    fn assert_on_leg(&self, leg: &Path, exact: bool) {
        for (name, seed, len) in &self.files {
            let got = fs::read(leg.join(name))
                .unwrap_or_else(|e| panic!("read {}: {e}", leg.join(name).display()));
            let want = pattern(FILL_FILE, *seed);
            if exact {
                assert_eq!(got.len(), *len, "size of {name} on {}", leg.display());
            } else {
                assert!(got.len() >= *len, "{name} on {} lost data", leg.display());
            }
            assert_bytes_eq(
                &got[..*len],
                &want[..*len],
                &format!("{name} on {}", leg.display()),
            );
        }
    }
}

fn avail(p: &Path) -> u64 {
    let s = statvfs(p).unwrap();
    s.f_bavail * s.f_frsize
}

/// Two legs on tmpfs of 64 MiB and 32 MiB with an 8 MiB reserve: writes fail with ENOSPC once
/// the small leg would cross its reserve, before any leg is written, so both legs stay in the
/// mirror and identical (a file cut short by ENOSPC too).
///
/// With the reserve set to 0 live, data writes still fail with ENOSPC before any leg is written
/// once a write no longer fits on the small leg (the check is "free space minus this write
/// stays above the reserve", and the reserve is 0): the small leg fills to the last few pages,
/// both legs stay in and identical.
///
/// The small leg's filesystem itself says ENOSPC only for what the check lets through: long
/// symlinks (a page each on tmpfs, checked as needing 0 bytes). Then the small leg fails an
/// operation the big one completed: it is the odd one out and is dropped (DEGRADED), the
/// caller sees no error, and the big leg keeps every byte the caller was told is written and
/// takes writes until it is full itself (the last leg is never dropped: the caller gets
/// ENOSPC).
///
/// Then space is freed and the small leg grows: `mirrorfs leg add` resyncs it online, and the
/// legs are identical again.
#[test]
fn a_leg_fills_up() {
    require_fuse!();
    require_tool!("getfattr");
    require_tool!("setfattr");
    let mut dirs = TestDirs::new(2);
    dirs.mount_tmpfs_leg(0, "64m");
    dirs.mount_tmpfs_leg(1, "32m");
    let mut m = TestMirror::new(2)
        .with_dirs(dirs)
        .option("minfreespace=8M")
        .mount();
    let mnt = m.mnt().to_path_buf();
    assert_eq!(
        getfattr_ok(&mnt.join(".mirrorfs"), "user.mirrorfs.minfreespace"),
        (8 * MIB).to_string()
    );

    // --- Phase 1: the reserve.
    let mut phase1 = Filled { files: Vec::new() };
    let err = phase1.fill(&mnt, "fill", 1000);
    assert_eq!(
        errno_of(&err),
        libc::ENOSPC,
        "filling the mirror: {err} after {} bytes",
        phase1.total()
    );
    let total = phase1.total();
    assert!(
        (16 * MIB..=24 * MIB).contains(&total),
        "{total} bytes written before ENOSPC: the 32 MiB leg with an 8 MiB reserve should \
         take 16-24 MiB"
    );
    assert!(
        avail(m.leg(1)) >= 8 * MIB as u64,
        "the small leg crossed its reserve: {} bytes free",
        avail(m.leg(1))
    );
    // Writing on fails with ENOSPC at once: the kernel sends a write in pieces, and a piece
    // smaller than the one refused may still fit, but not a whole 256 KiB write.
    let before = phase1.total();
    let err = phase1.fill(&mnt, "again", 1500);
    assert_eq!(
        errno_of(&err),
        libc::ENOSPC,
        "writing on past the reserve: {err}"
    );
    assert!(
        phase1.total() - before < FILL_CHUNK,
        "{} more bytes written past the reserve",
        phase1.total() - before
    );
    let st = stats(&mnt);
    assert_eq!((st.state, st.legs_online), (MountState::Online, 2));
    for l in &st.legs {
        assert_eq!((l.state, l.write_errors), (LegState::InSync, 0), "{l:?}");
    }
    let (code, report) = status(&mnt);
    assert_eq!(
        code,
        Some(0),
        "status after ENOSPC by the reserve:\n{report}"
    );
    // The file cut short by ENOSPC is identical on both legs, with exactly the bytes written.
    for leg in m.legs() {
        phase1.assert_on_leg(leg, true);
    }
    assert_no_mirrorfs_leak(&mnt);
    assert_legs_identical(m.legs());

    // --- Phase 2: no reserve; data fills the small leg up to the last write that fits.
    setfattr_ok(&mnt.join(".mirrorfs"), "user.mirrorfs.minfreespace", "0");
    assert_eq!(
        getfattr_ok(&mnt.join(".mirrorfs"), "user.mirrorfs.minfreespace"),
        "0"
    );
    let small_free = avail(m.leg(1)) as usize;
    let err = phase1.fill(&mnt, "more", 2000);
    assert_eq!(
        errno_of(&err),
        libc::ENOSPC,
        "filling without a reserve: {err}"
    );
    assert!(
        avail(m.leg(1)) < MIB as u64,
        "ENOSPC with {} bytes free on the small leg (it had {small_free})",
        avail(m.leg(1))
    );
    let st = stats(&mnt);
    assert_eq!(
        (st.state, st.legs_online),
        (MountState::Online, 2),
        "{st:?}"
    );
    for leg in m.legs() {
        phase1.assert_on_leg(leg, true);
    }
    assert_legs_identical(m.legs());

    // --- Phase 3: the small leg's filesystem runs out of space under an operation.
    let target = "x/".repeat(1500);
    let mut links = 0;
    for i in 0..200 {
        std::os::unix::fs::symlink(&target, mnt.join(format!("link{i}")))
            .unwrap_or_else(|e| panic!("symlink link{i} through the mount: {e}"));
        links += 1;
    }
    let st = stats(&mnt);
    assert_eq!(
        (st.legs[0].state, st.legs[1].state),
        (LegState::InSync, LegState::Failed),
        "the small leg ran out of space: it is dropped, the big one serves: {st:?}"
    );
    assert_eq!((st.state, st.legs_online), (MountState::Degraded, 1));
    let (code, report) = status(&mnt);
    assert_eq!(
        code,
        Some(1),
        "status with the small leg dropped:\n{report}"
    );
    assert!(
        status_leg_line(&report, "leg1").contains("FAULTED"),
        "{report}"
    );
    let on_small = (0..links)
        .filter(|i| m.leg(1).join(format!("link{i}")).exists())
        .count();
    assert!(on_small < links, "every symlink fitted on the small leg");
    for i in 0..links {
        let rel = format!("link{i}");
        for root in [m.leg(0), mnt.as_path()] {
            assert_eq!(
                fs::read_link(root.join(&rel)).unwrap().as_os_str(),
                target.as_str(),
                "{rel} under {}",
                root.display()
            );
        }
    }
    // The big leg takes data on until it is full itself.
    let mut late = Filled { files: Vec::new() };
    let err = late.fill(&mnt, "late", 3000);
    assert_eq!(errno_of(&err), libc::ENOSPC, "filling the big leg: {err}");
    assert!(
        late.total() > 16 * MIB,
        "only {} bytes written after the small leg was dropped",
        late.total()
    );
    // No data lost on the surviving leg: every byte acknowledged, there and through the mount.
    phase1.assert_on_leg(m.leg(0), true);
    late.assert_on_leg(m.leg(0), true);
    phase1.assert_on_leg(&mnt, true);
    late.assert_on_leg(&mnt, true);
    // What the small leg held before it filled is intact.
    phase1.assert_on_leg(m.leg(1), true);

    // --- Phase 4: the small leg comes back. Space is freed through the mount (half of the late
    // files: deletes the small leg must reproduce) and the small leg's tmpfs grows; then
    // `mirrorfs leg add` resyncs it online from the big leg's away log.
    let mut kept = Filled { files: Vec::new() };
    let mut deleted = Vec::new();
    for (i, f) in late.files.iter().enumerate() {
        if i % 2 == 1 {
            fs::remove_file(mnt.join(&f.0)).unwrap();
            deleted.push(f.0.clone());
        } else {
            kept.files.push(f.clone());
        }
    }
    let out = run(
        "mount",
        &[&"-o", &"remount,size=128m", &m.leg(1)],
        Duration::from_secs(30),
    );
    assert!(
        out.status.success(),
        "growing the small leg's tmpfs: {}",
        text(&out.stderr)
    );
    assert!(avail(m.leg(1)) > 64 * MIB as u64, "the tmpfs did not grow");
    mirrorfs_ok(&[&"leg", &"add", &mnt, &"leg1"]);
    let st = wait_resynced(&mnt);
    assert_eq!(st.legs_online, 2, "{st:?}");
    for name in &deleted {
        assert!(
            !m.leg(1).join(name).exists(),
            "{name}, deleted while the small leg was out, is on it"
        );
    }
    for leg in m.legs() {
        phase1.assert_on_leg(leg, true);
        kept.assert_on_leg(leg, true);
    }
    assert_legs_identical(m.legs());
    m.unmount();
    assert_legs_identical(m.legs());
    // Every member is in sync: the next mount needs no resync.
    let _r = mount_ok(m.legs(), m.mnt(), &[]);
    let st = stats(m.mnt());
    assert_eq!(
        (st.state, st.legs_online),
        (MountState::Online, 2),
        "{st:?}"
    );
    assert!(st.resync.is_none(), "a resync at the next mount: {st:?}");
}

// ---------------------------------------------------------------------------------------------
// 3. A leg is missing at mount
// ---------------------------------------------------------------------------------------------

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
    let listed = wait_for(Duration::from_secs(6), || {
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
    let st = stats(&mnt);
    assert_eq!(
        (st.state, st.legs_online),
        (MountState::Online, 2),
        "{st:?}"
    );
    assert!(st.resync.is_none(), "{st:?}");
}

// ---------------------------------------------------------------------------------------------
// 4. kill -9 of the daemon during writes
// ---------------------------------------------------------------------------------------------

const HOT_FILES: usize = 4;
const HOT_CHUNK: usize = 64 * KIB;

fn hot_chunk(file: usize, i: usize) -> Vec<u8> {
    pattern(HOT_CHUNK, (1000 * file + i) as u64)
}

/// What `hot{file}` holds once `len` bytes of it are written.
fn hot_content(file: usize, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + HOT_CHUNK);
    let mut i = 0;
    while v.len() < len {
        v.extend(hot_chunk(file, i));
        i += 1;
    }
    v.truncate(len);
    v
}

/// Appends a chunk to each hot file in turn, `fdatasync`ing each, and records in `synced` the
/// length of each file known to be on stable storage. Stops at the first error (the daemon is
/// killed) and returns it, or at `stop`.
fn hot_writer(
    mnt: PathBuf,
    synced: Arc<Mutex<BTreeMap<String, usize>>>,
    stop: Arc<AtomicBool>,
) -> Option<io::Error> {
    let mut files = Vec::new();
    for k in 0..HOT_FILES {
        match File::create(mnt.join(format!("hot{k}"))) {
            Ok(f) => files.push(f),
            Err(e) => return Some(e),
        }
    }
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        for (k, f) in files.iter_mut().enumerate() {
            if let Err(e) = f.write_all(&hot_chunk(k, i)).and_then(|()| f.sync_data()) {
                return Some(e);
            }
            synced
                .lock()
                .unwrap()
                .insert(format!("hot{k}"), (i + 1) * HOT_CHUNK);
        }
        i += 1;
    }
    None
}

/// Files written then left idle for more than 5 s, a file written once 0.3 s before the kill,
/// and four files appended to and fsync'd in a loop up to the `kill -9` of the daemon. On the
/// legs afterwards: every superblock says not clean; every leg's intent log names the hot files
/// and the recent one, not the idle ones; every fsync'd byte is on every leg; every file that
/// is in no intent log is identical on every leg. A fresh mount needs no `degraded` and makes
/// the logged paths, and only those, identical on every leg before it serves (a byte flipped
/// on leg1 in a logged file is repaired from leg0, one in an unlogged file is left for the
/// scrub, which then repairs it from leg0).
#[test]
fn kill_9_during_writes() {
    require_fuse!();
    require_tool!("getfattr");
    let m = TestMirror::new(2).mount();
    let mnt = m.mnt().to_path_buf();
    let legs = m.legs().to_vec();
    assert_eq!(
        getfattr_ok(&mnt.join(".mirrorfs"), "user.mirrorfs.write_intent"),
        "on",
        "write_intent is on by default"
    );
    for leg in &legs {
        assert_eq!(superblock(leg)["clean"], Value::Bool(false), "mounted");
    }

    // Cold files: logged while written, cleared once idle (~2-3 s), then left idle > 5 s.
    let cold: Vec<String> = (0..3).map(|i| format!("cold{i}")).collect();
    for (i, c) in cold.iter().enumerate() {
        fs::write(mnt.join(c), pattern(300_000, 100 + i as u64)).unwrap();
    }
    let cold_written = Instant::now();
    for leg in &legs {
        let rec = log_records(&intent_log(leg));
        assert!(
            cold.iter().all(|c| rec.contains(c)),
            "{} right after the writes: {rec:?}",
            intent_log(leg).display()
        );
    }
    let cleared = wait_for(Duration::from_secs(10), || {
        legs.iter().all(|l| {
            cold.iter()
                .all(|c| !log_records(&intent_log(l)).contains(c))
        })
    });
    assert!(
        cleared,
        "the intent entries of idle files are not cleared after 10 s: {:?}",
        legs.iter()
            .map(|l| log_records(&intent_log(l)))
            .collect::<Vec<_>>()
    );
    eprintln!(
        "intent entries cleared {:?} after the last write",
        cold_written.elapsed()
    );
    while cold_written.elapsed() < Duration::from_millis(5500) {
        sleep(Duration::from_millis(100));
    }

    // Hot files: written and fsync'd in a loop until the kill.
    let synced: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (mnt, synced, stop) = (mnt.clone(), synced.clone(), stop.clone());
        std::thread::spawn(move || hot_writer(mnt, synced, stop))
    };
    let going = wait_for(Duration::from_secs(30), || {
        let s = synced.lock().unwrap();
        s.len() == HOT_FILES && s.values().all(|&l| l >= 4 * HOT_CHUNK)
    });
    if !going {
        stop.store(true, Ordering::Relaxed);
        panic!(
            "the writer did not get going: {:?} (finished: {})",
            synced.lock().unwrap(),
            writer.is_finished()
        );
    }
    let warm = pattern(200_000, 200);
    fs::write(mnt.join("warm"), &warm).unwrap();
    sleep(Duration::from_millis(300));

    let pid: i32 = getfattr_ok(&mnt.join(".mirrorfs"), "user.mirrorfs.pid")
        .trim()
        .parse()
        .expect("user.mirrorfs.pid is a number");
    assert!(
        m.daemon_pids().contains(&pid),
        "user.mirrorfs.pid {pid} is not among the daemon's pids {:?}",
        m.daemon_pids()
    );
    assert!(!writer.is_finished(), "the writer stopped before the kill");
    assert_eq!(
        unsafe { libc::kill(pid, libc::SIGKILL) },
        0,
        "kill -9 {pid}"
    );
    assert!(
        wait_pids_gone(m.daemon_pids(), Duration::from_secs(10)),
        "the daemon survived kill -9"
    );
    // The writer sees its next write or fsync fail (the connection is gone) and stops.
    assert!(
        wait_for(Duration::from_secs(10), || writer.is_finished()),
        "the writer is still blocked 10 s after the kill"
    );
    let writer_error = writer.join().expect("writer thread");
    let e = writer_error.expect("the writer ended without an error");
    eprintln!("the writer's error after the kill: {e}");
    assert!(
        [libc::ENOTCONN, libc::ECONNABORTED].contains(&errno_of(&e)),
        "the writer's error after the kill: {e}"
    );
    let synced = synced.lock().unwrap().clone();
    eprintln!("fsync'd before the kill: {synced:?}");

    // The dead mount: a plain umount works once nothing is open on it.
    assert!(is_mounted(&mnt), "the dead mount is gone by itself");
    assert!(
        fs::metadata(mnt.join("warm")).is_err(),
        "the dead mount still answers"
    );
    if let Err(e) = umount2(&mnt, 0) {
        panic!("umount of the dead mount: {e}");
    }
    assert!(!is_mounted(&mnt));

    // The legs, directly.
    let mut union: BTreeSet<String> = BTreeSet::new();
    for leg in &legs {
        let sb = superblock(leg);
        assert_eq!(
            sb["clean"],
            Value::Bool(false),
            "{}: the superblock says clean after kill -9: {sb}",
            leg.display()
        );
        let rec = log_records(&intent_log(leg));
        eprintln!("{}: {rec:?}", intent_log(leg).display());
        for k in 0..HOT_FILES {
            assert!(
                rec.contains(&format!("hot{k}")),
                "{} lacks hot{k}, written up to the kill: {rec:?}",
                intent_log(leg).display()
            );
        }
        assert!(
            rec.contains("warm"),
            "{} lacks warm, written 0.3 s before the kill: {rec:?}",
            intent_log(leg).display()
        );
        for c in &cold {
            assert!(
                !rec.contains(c),
                "{} names {c}, idle for > 5 s: {rec:?}",
                intent_log(leg).display()
            );
        }
        union.extend(rec);
        // Every fsync'd byte is on every leg.
        for (name, &len) in &synced {
            let k: usize = name[3..].parse().unwrap();
            let got = fs::read(leg.join(name)).unwrap();
            assert!(
                got.len() >= len,
                "{name} on {}: {} bytes, {len} were fsync'd",
                leg.display(),
                got.len()
            );
            assert_bytes_eq(
                &got[..len],
                &hot_content(k, len),
                &format!("fsync'd bytes of {name} on {}", leg.display()),
            );
        }
        assert_bytes_eq(
            &fs::read(leg.join("warm")).unwrap(),
            &warm,
            &format!("warm on {}", leg.display()),
        );
    }
    // The intent log's promise: whatever it does not name is identical on every leg.
    let unlisted: Vec<String> = legs_differences(&legs)
        .into_iter()
        .filter(|d| !union.iter().any(|p| d.starts_with(&format!("{p}: "))))
        .collect();
    assert!(
        unlisted.is_empty(),
        "paths in no intent log differ between the legs: {unlisted:?}"
    );
    for (i, c) in cold.iter().enumerate() {
        assert_content_on_legs(&legs, c, &pattern(300_000, 100 + i as u64));
    }

    // Before mounting again, make two files differ behind the mirror's back, keeping their
    // times: a byte of hot0 (intent-logged) and a byte of cold0 (in no intent log) on leg1.
    // Crash recovery must make hot0 identical from leg0 and leave cold0 alone: it checks the
    // logged paths only.
    assert!(
        union.contains("hot0") && !union.contains("cold0"),
        "{union:?}"
    );
    let hot0_len = synced["hot0"];
    corrupt_keeping_times(&legs[1].join("hot0"), hot0_len as u64 / 2, 1);
    corrupt_keeping_times(&legs[1].join("cold0"), 1000, 1);
    let diffs = legs_differences(&legs);
    for f in ["hot0", "cold0"] {
        assert!(
            diffs
                .iter()
                .any(|d| d.starts_with(&format!("{f}: ")) && d.contains("content differs")),
            "{f} does not differ: {diffs:?}"
        );
    }

    // A fresh mount: a crash needs no `degraded`; the logged paths are identical before it
    // serves.
    let mut r = mount_ok(&legs, &mnt, &[]);
    let st = stats(&mnt);
    assert_eq!(
        (st.state, st.legs_online),
        (MountState::Online, 2),
        "{st:?}"
    );
    assert!(st.resync.is_none(), "crash recovery is no resync: {st:?}");
    let diffs = legs_differences(&legs);
    assert!(
        diffs.len() == 1 && diffs[0].starts_with("cold0: ") && diffs[0].contains("content"),
        "after crash recovery only cold0 (in no intent log) should still differ: {diffs:?}"
    );
    assert_bytes_eq(
        &fs::read(legs[1].join("cold0")).unwrap()[1000..1001],
        &[!pattern(300_000, 100)[1000]],
        "cold0 on leg1, in no intent log: not touched by the recovery",
    );
    // Every fsync'd byte is on every leg, and served.
    for leg in &legs {
        for (name, &len) in &synced {
            let k: usize = name[3..].parse().unwrap();
            let got = fs::read(leg.join(name)).unwrap();
            assert!(got.len() >= len, "{name} on {}", leg.display());
            assert_bytes_eq(
                &got[..len],
                &hot_content(k, len),
                &format!(
                    "fsync'd bytes of {name} on {} after recovery",
                    leg.display()
                ),
            );
        }
    }
    for (name, &len) in &synced {
        let k: usize = name[3..].parse().unwrap();
        let got = fs::read(mnt.join(name)).unwrap();
        assert!(got.len() >= len, "{name} through the mount");
        assert_bytes_eq(&got[..len], &hot_content(k, len), name);
    }
    assert_bytes_eq(&fs::read(mnt.join("warm")).unwrap(), &warm, "warm");

    // The unlogged difference is a scrub's job: found, and repaired from leg0.
    mirrorfs_ok(&[&"scrub", &"start", &mnt]);
    let doc = wait_scrubbed(&mnt);
    assert_eq!(differing(&doc).len(), 1, "{doc}");
    assert!(differing(&doc)[0].starts_with("/cold0 "), "{doc}");
    mirrorfs_ok(&[&"scrub", &"start", &mnt, &"--repair=leg0"]);
    let doc = wait_scrubbed(&mnt);
    assert_eq!(
        (doc["differences"].as_u64(), doc["repaired"].as_u64()),
        (Some(1), Some(1)),
        "{doc}"
    );
    mirrorfs_ok(&[&"scrub", &"status", &mnt]);
    assert_content_on_legs(&legs, "cold0", &pattern(300_000, 100));
    assert_legs_identical(&legs);
    r.unmount();
    assert_legs_identical(&legs);
    for leg in &legs {
        assert_eq!(superblock(leg)["clean"], Value::Bool(true), "clean unmount");
        assert_eq!(
            len_or_zero(&intent_log(leg)),
            0,
            "intent log after a clean unmount"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 5. A leg goes read-only in the middle of a fio verify workload
// ---------------------------------------------------------------------------------------------

/// An ext4 filesystem in an image file, loop-mounted with `errors=remount-ro`: a leg that can
/// really turn read-only while files on it are open for writing. (A tmpfs cannot: `mount -o
/// remount,ro` fails with EBUSY as long as any file on it is open for writing, and mirrorfs
/// holds the leg's copy of fio's file open all along.) Unmounted on drop; the loop device goes
/// with it (`mount -o loop` sets autoclear).
struct Ext4Leg {
    _tmp: tempfile::TempDir,
    img: PathBuf,
    mnt: PathBuf,
    dev: String,
    mounted: bool,
}

impl Ext4Leg {
    fn new(size: u64) -> Ext4Leg {
        let tmp = tempfile::Builder::new()
            .prefix("mirrorfs-ext4-")
            .tempdir()
            .unwrap();
        let img = tmp.path().join("leg.img");
        File::create(&img).unwrap().set_len(size).unwrap();
        sh_ok(&format!("mkfs.ext4 -q -F {}", shq(&img)));
        let mnt = tmp.path().join("mnt");
        fs::create_dir(&mnt).unwrap();
        let mut leg = Ext4Leg {
            _tmp: tmp,
            img,
            mnt,
            dev: String::new(),
            mounted: false,
        };
        leg.mount();
        chmod(&leg.mnt, 0o755).unwrap();
        leg
    }

    fn mount(&mut self) {
        let out = run(
            "mount",
            &[&"-o", &"loop,errors=remount-ro", &self.img, &self.mnt],
            Duration::from_secs(60),
        );
        assert!(
            out.status.success(),
            "loop-mounting an ext4 image: {}",
            text(&out.stderr)
        );
        self.mounted = true;
        self.dev = mount_entry_at(&self.mnt)
            .expect("the ext4 leg is mounted")
            .source
            .trim_start_matches("/dev/")
            .to_string();
    }

    /// Makes ext4 record an error: with `errors=remount-ro` it turns read-only at once, open
    /// files included (later writes fail with EROFS).
    fn go_read_only(&self) {
        let knob = format!("/sys/fs/ext4/{}/trigger_fs_error", self.dev);
        fs::write(&knob, "mirrorfs test: the leg goes read-only")
            .unwrap_or_else(|e| panic!("write {knob}: {e}"));
    }

    /// What an administrator does with a filesystem that went read-only after an error:
    /// unmount it, `e2fsck -fy`, mount it again at the same place (read-write).
    #[track_caller]
    fn repair_and_remount(&mut self) {
        if let Err(e) = unmount_path(&self.mnt) {
            panic!("{e}");
        }
        self.mounted = false;
        let out = run("e2fsck", &[&"-fy", &self.img], Duration::from_secs(120));
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "e2fsck -fy of the ext4 leg ({}): {}{}",
            out.status,
            text(&out.stdout),
            text(&out.stderr)
        );
        self.mount();
        let probe = self.mnt.join("probe");
        fs::write(&probe, b"rw").expect("the repaired ext4 leg takes writes");
        fs::remove_file(&probe).unwrap();
    }
}

impl Drop for Ext4Leg {
    fn drop(&mut self) {
        if self.mounted {
            if let Err(e) = unmount_path(&self.mnt) {
                eprintln!("warning: {e}");
            }
        }
    }
}

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

/// Runs fio through the mount and calls `fail_leg1` once about 1.5 s in (the write phase
/// lasts ~4 s): fio must finish without an error and verify what it wrote; leg1 is dropped
/// (FAULTED, write errors counted, DEGRADED in the stats and in `mirrorfs status`). Leaves the
/// mirror mounted.
fn fio_survives_a_failing_leg(m: &mut Mounted, fail_leg1: impl FnOnce()) {
    let mnt = m.mnt().to_path_buf();
    let log = m.root().join("fio.out");
    let mut fio = spawn_fio(&fio_job(&mnt.join("fio.dat")), &log);
    sleep(Duration::from_millis(1500));
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
        setfattr_ok(&mnt, FAULT, "leg=1 op=write errno=EROFS")
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

// ---------------------------------------------------------------------------------------------
// 6. The write-intent log, on and off
// ---------------------------------------------------------------------------------------------

/// With `write_intent=off` no intent log grows, whatever is written; with it on, the first
/// change to a file records it on every leg before the data goes anywhere, and the entry is
/// cleared once the file is idle.
#[test]
fn write_intent_log_on_and_off() {
    require_fuse!();
    require_tool!("getfattr");
    let mut m = TestMirror::new(2).option("write_intent=off").mount();
    let mnt = m.mnt().to_path_buf();
    let legs = m.legs().to_vec();
    assert_eq!(
        getfattr_ok(&mnt.join(".mirrorfs"), "user.mirrorfs.write_intent"),
        "off"
    );
    let mut f = File::create(mnt.join("f")).unwrap();
    f.write_all(&pattern(MIB, 61)).unwrap();
    fs::write(mnt.join("g"), b"g").unwrap();
    fs::create_dir(mnt.join("d")).unwrap();
    fs::rename(mnt.join("g"), mnt.join("d/g")).unwrap();
    for leg in &legs {
        assert_eq!(
            len_or_zero(&intent_log(leg)),
            0,
            "{} with write_intent=off, a file open for writing",
            intent_log(leg).display()
        );
    }
    f.sync_all().unwrap();
    drop(f);
    m.check_and_unmount();
    for leg in &legs {
        assert_eq!(len_or_zero(&intent_log(leg)), 0, "after unmount");
    }

    let mut r = mount_ok(&legs, &mnt, &["write_intent=on"]);
    assert_eq!(
        getfattr_ok(&mnt.join(".mirrorfs"), "user.mirrorfs.write_intent"),
        "on"
    );
    let mut f = OpenOptions::new().append(true).open(mnt.join("f")).unwrap();
    f.write_all(&pattern(MIB, 62)).unwrap();
    fs::write(mnt.join("h"), b"h").unwrap();
    for leg in &legs {
        let rec = log_records(&intent_log(leg));
        for want in ["f", "h", "."] {
            assert!(
                rec.contains(want),
                "{} lacks {want:?} right after the writes: {rec:?}",
                intent_log(leg).display()
            );
        }
        assert!(!rec.contains("d/g"), "an unchanged file is logged: {rec:?}");
    }
    drop(f);
    let cleared = wait_for(Duration::from_secs(10), || {
        legs.iter().all(|l| log_records(&intent_log(l)).is_empty())
    });
    assert!(
        cleared,
        "the intent entries are not cleared 10 s after the last write"
    );
    assert_no_mirrorfs_leak(&mnt);
    assert_legs_identical(&legs);
    r.unmount();
    assert_legs_identical(&legs);
    for leg in &legs {
        assert_eq!(len_or_zero(&intent_log(leg)), 0, "after a clean unmount");
    }
}

// ---------------------------------------------------------------------------------------------
// 7. Scrub
// ---------------------------------------------------------------------------------------------

/// The file the scrub tests corrupt, and where.
const SCRUB_FILE: usize = 2 * MIB;
const FLIP_AT: u64 = 1_000_000;

/// A mirror of `n` legs with `f` (2 MiB) and a few other entries, all identical, and a first
/// scrub that finds nothing (`scrub status` exits 0).
fn scrub_mirror(n: usize) -> (Mounted, Vec<u8>) {
    let m = TestMirror::new(n).mount();
    let mnt = m.mnt().to_path_buf();
    let data = pattern(SCRUB_FILE, 71);
    fs::write(m.path("f"), &data).unwrap();
    fs::create_dir(m.path("d")).unwrap();
    fs::write(m.path("d/g"), pattern(10_000, 72)).unwrap();
    std::os::unix::fs::symlink("d/g", m.path("link")).unwrap();
    assert_legs_identical(m.legs());
    assert_eq!(
        getfattr_ok(&mnt.join(".mirrorfs"), "user.mirrorfs.scrub"),
        "none"
    );
    mirrorfs_ok(&[&"scrub", &"start", &mnt]);
    let doc = wait_scrubbed(&mnt);
    assert_eq!(doc["differences"], 0, "a scrub of identical legs: {doc}");
    assert!(differing(&doc).is_empty(), "{doc}");
    mirrorfs_ok(&[&"scrub", &"status", &mnt]);
    (m, data)
}

/// The scrub document lists `/f` as differing in content, once, unrepaired; `mirrorfs scrub
/// status` says so and exits 1.
#[track_caller]
fn assert_scrub_found_f(mnt: &Path) {
    let doc = wait_scrubbed(mnt);
    let listed = differing(&doc);
    assert!(
        listed.len() == 1 && listed[0].starts_with("/f (") && listed[0].contains("Content"),
        "the scrub should list /f as differing in content: {doc}"
    );
    assert_eq!(
        (doc["differences"].as_u64(), doc["repaired"].as_u64()),
        (Some(1), Some(0)),
        "{doc}"
    );
    let (code, out) = mirrorfs(&[&"scrub", &"status", &mnt]);
    assert_eq!(code, Some(1), "scrub status with a difference left:\n{out}");
    assert!(out.contains("differs: /f ("), "{out}");
}

/// Three legs: a byte flipped directly in leg2's copy (times kept) is found by a scrub, counted
/// as a checksum error of leg2 only (the other two agree), and repaired by majority.
#[test]
fn scrub_finds_a_flipped_byte_and_repairs_it_by_majority() {
    require_fuse!();
    require_tool!("getfattr");
    let (m, data) = scrub_mirror(3);
    let mnt = m.mnt().to_path_buf();
    corrupt_keeping_times(&m.leg(2).join("f"), FLIP_AT, 1);
    assert!(!legs_differences(m.legs()).is_empty());

    mirrorfs_ok(&[&"scrub", &"start", &mnt]);
    assert_scrub_found_f(&mnt);
    let st = stats(&mnt);
    let ck: Vec<u64> = st.legs.iter().map(|l| l.checksum_errors).collect();
    assert!(
        ck[0] == 0 && ck[1] == 0 && ck[2] >= 1,
        "checksum_errors by leg: {ck:?}"
    );
    let (code, report) = status(&mnt);
    assert_eq!(code, Some(1), "status with checksum errors:\n{report}");
    // Only a report: leg2 still holds the bad byte.
    assert_ne!(fs::read(m.leg(2).join("f")).unwrap(), data);

    mirrorfs_ok(&[&"scrub", &"start", &mnt, &"--repair"]);
    let doc = wait_scrubbed(&mnt);
    assert_eq!(
        (doc["differences"].as_u64(), doc["repaired"].as_u64()),
        (Some(1), Some(1)),
        "{doc}"
    );
    mirrorfs_ok(&[&"scrub", &"status", &mnt]);
    assert_content_on_legs(m.legs(), "f", &data);
    assert_legs_identical(m.legs());
    // A further scrub finds nothing.
    mirrorfs_ok(&[&"scrub", &"start", &mnt]);
    assert_eq!(wait_scrubbed(&mnt)["differences"], 0);
    m.finish();
}

/// Two legs: nothing tells which copy is right, so a majority repair is refused (exit 1 and a
/// line); a scrub counts a checksum error on both legs; `--repair=leg0` repairs from leg0.
#[test]
fn scrub_with_two_legs_repairs_from_the_named_leg() {
    require_fuse!();
    require_tool!("getfattr");
    let (m, data) = scrub_mirror(2);
    let mnt = m.mnt().to_path_buf();
    corrupt_keeping_times(&m.leg(1).join("f"), FLIP_AT, 1);

    let out = mirrorfs_refused(&[&"scrub", &"start", &mnt, &"--repair"]);
    assert!(out.contains("scrub start"), "{out}");
    // The refused start left the previous (clean) scrub's report alone.
    assert_eq!(wait_scrubbed(&mnt)["differences"], 0);

    mirrorfs_ok(&[&"scrub", &"start", &mnt]);
    assert_scrub_found_f(&mnt);
    let st = stats(&mnt);
    for l in &st.legs {
        assert!(
            l.checksum_errors >= 1,
            "with two legs both count the difference: {l:?}"
        );
    }
    assert_ne!(fs::read(m.leg(1).join("f")).unwrap(), data);

    mirrorfs_ok(&[&"scrub", &"start", &mnt, &"--repair=leg0"]);
    let doc = wait_scrubbed(&mnt);
    assert_eq!(
        (doc["differences"].as_u64(), doc["repaired"].as_u64()),
        (Some(1), Some(1)),
        "{doc}"
    );
    mirrorfs_ok(&[&"scrub", &"status", &mnt]);
    assert_content_on_legs(m.legs(), "f", &data);
    assert_legs_identical(m.legs());
    m.finish();
}

// ---------------------------------------------------------------------------------------------
// 8. Adopting existing data at the first mount
// ---------------------------------------------------------------------------------------------

/// A small tree with folders, a symlink, a hard link, an xattr, an odd mode and set times.
fn populate(root: &Path, seed: u64) {
    fs::create_dir_all(root.join("a/b")).unwrap();
    fs::create_dir(root.join("empty")).unwrap();
    fs::write(root.join("top"), pattern(300_000, seed)).unwrap();
    fs::write(root.join("a/f1"), pattern(1_500_000, seed + 1)).unwrap();
    fs::write(root.join("a/b/f2"), pattern(4096, seed + 2)).unwrap();
    chmod(root.join("a/b/f2"), 0o600).unwrap();
    fs::hard_link(root.join("a/f1"), root.join("a/b/hard")).unwrap();
    std::os::unix::fs::symlink("a/f1", root.join("link")).unwrap();
    set_xattr(root.join("top"), "user.origin", b"adopted", 0).unwrap();
    utimensat(
        root.join("top"),
        ts(1_500_000_000, 0),
        ts(1_500_000_000, 123),
        true,
    )
    .unwrap();
}

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

// ---------------------------------------------------------------------------------------------
// 9. Replacing a leg
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
    let st = stats(&mnt);
    assert_eq!(
        (st.state, st.legs_online),
        (MountState::Online, 2),
        "{st:?}"
    );
    assert!(st.resync.is_none(), "{st:?}");
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
// 10. The resync throttle
// ---------------------------------------------------------------------------------------------

/// `resync_speed_max` changed live applies to the resync that is running (docs/operations.md:
/// "`mirrorfs set MOUNT resync_speed_max 50M` limits its bandwidth while it runs"): a resync
/// started at 1 MiB/s over 8 MiB (~16 s) finishes within a few seconds once the limit is lifted.
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
    mirrorfs_ok(&[&"set", &mnt, &"resync_speed_max", &"1M"]);
    mirrorfs_ok(&[&"leg", &"add", &mnt, &"leg1"]);
    sleep(Duration::from_millis(1500));
    let st = stats(&mnt);
    assert_eq!(
        st.legs[1].state,
        LegState::Resyncing,
        "the throttled resync should still run: {st:?}"
    );
    mirrorfs_ok(&[&"set", &mnt, &"resync_speed_max", &"0"]);
    let lifted = Instant::now();
    let st = wait_resynced(&mnt);
    assert!(
        lifted.elapsed() < Duration::from_secs(4),
        "the resync took {:?} more after the limit was lifted (it ran {} s in all): the running \
         resync kept the old limit",
        lifted.elapsed(),
        st.resync.as_ref().unwrap().elapsed_s
    );
    assert_content_on_legs(m.legs(), "big", &big);
    m.finish();
}

// ---------------------------------------------------------------------------------------------
// 11. A resync that fails halfway
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
