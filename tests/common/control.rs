//! The control interface of a mount, as the tests use it: the `user.mirrorfs.*` keys read and
//! set with the real `getfattr`/`setfattr`, the statistics document and the fields it must have,
//! `mirrorfs status` and the other subcommands, and waiting for a resync or a scrub to end.
//!
//! Resyncs and scrubs are awaited by polling the statistics with a timeout, never by fixed
//! sleeps.

use super::*;
use mirrorfs::stats::{JobState, LegState, MountState, Stats};
use serde_json::Value;

/// The key of the statistics document.
pub const STATS: &str = "user.mirrorfs.stats";
/// The key of the fault-injection rules (mounts with `fault_injection`).
pub const FAULT: &str = "user.mirrorfs.fault";

/// How long `getfattr`/`setfattr` may take.
const XATTR_TOOL_TIMEOUT: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------
// Keys through getfattr / setfattr
// ---------------------------------------------------------------------------------------------

/// `getfattr -n KEY --only-values PATH`: the value, or getfattr's stderr.
pub fn getfattr(path: &Path, key: &str) -> Result<Vec<u8>, String> {
    let out = run(
        "getfattr",
        &[&"-n", &key, &"--only-values", &path],
        XATTR_TOOL_TIMEOUT,
    );
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(text(&out.stderr))
    }
}

#[track_caller]
pub fn getfattr_ok(path: &Path, key: &str) -> String {
    let v =
        getfattr(path, key).unwrap_or_else(|e| panic!("getfattr -n {key} {}: {e}", path.display()));
    String::from_utf8(v).expect("UTF-8 value")
}

/// `setfattr -n KEY -v VALUE PATH`: Ok, or setfattr's stderr.
pub fn setfattr(path: &Path, key: &str, value: &str) -> Result<(), String> {
    let out = run(
        "setfattr",
        &[&"-n", &key, &"-v", &value, &path],
        XATTR_TOOL_TIMEOUT,
    );
    if out.status.success() {
        Ok(())
    } else {
        Err(text(&out.stderr))
    }
}

#[track_caller]
pub fn setfattr_ok(path: &Path, key: &str, value: &str) {
    if let Err(e) = setfattr(path, key, value) {
        panic!("setfattr -n {key} -v {value:?} {}: {e}", path.display());
    }
}

// ---------------------------------------------------------------------------------------------
// The statistics document
// ---------------------------------------------------------------------------------------------

/// The raw stats document read with getfattr, and it parsed both ways.
#[track_caller]
pub fn stats_of(path: &Path) -> (String, Stats, Value) {
    let raw = getfattr_ok(path, STATS);
    let st: Stats = serde_json::from_str(&raw)
        .unwrap_or_else(|e| panic!("stats of {} do not parse: {e}\n{raw}", path.display()));
    let v: Value = serde_json::from_str(&raw).unwrap();
    (raw, st, v)
}

/// The statistics document of the mount at `mnt` (read on its control file).
#[track_caller]
pub fn stats(mnt: &Path) -> Stats {
    stats_of(&mnt.join(".mirrorfs")).1
}

// ---------------------------------------------------------------------------------------------
// The mirrorfs subcommands
// ---------------------------------------------------------------------------------------------

/// `mirrorfs ARGS...`: exit code and stdout + stderr.
pub fn mirrorfs(args: &[&dyn AsRef<OsStr>]) -> (Option<i32>, String) {
    let out = run_mirrorfs(args.iter().map(|a| a.as_ref()));
    (out.status.code(), text(&out.stdout) + &text(&out.stderr))
}

/// `mirrorfs ARGS...`, which must exit 0.
#[track_caller]
pub fn mirrorfs_ok(args: &[&dyn AsRef<OsStr>]) -> String {
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
pub fn mirrorfs_refused(args: &[&dyn AsRef<OsStr>]) -> String {
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

/// `mirrorfs status MOUNT`: exit code and report.
pub fn status(mnt: &Path) -> (Option<i32>, String) {
    let out = run_mirrorfs([OsStr::new("status"), mnt.as_os_str()]);
    (out.status.code(), text(&out.stdout) + &text(&out.stderr))
}

/// The line of `leg` in a status report.
#[track_caller]
pub fn status_leg_line(report: &str, leg: &str) -> String {
    report
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{leg} ")))
        .unwrap_or_else(|| panic!("no line for {leg} in the status report:\n{report}"))
        .to_string()
}

// ---------------------------------------------------------------------------------------------
// Waiting for a resync or a scrub
// ---------------------------------------------------------------------------------------------

/// How long a resync (or a scrub) of the small trees of these tests may take (they take well
/// under a second unthrottled; the throttled ones a few seconds).
pub const RESYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// Waits until the resync of the mount has finished and every leg is ONLINE (several stale
/// legs are resynced one after the other); panics if a resync fails or is cancelled, or after
/// [`RESYNC_TIMEOUT`]. Returns the statistics then.
#[track_caller]
pub fn wait_resynced(mnt: &Path) -> Stats {
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
pub fn wait_scrubbed(mnt: &Path) -> Value {
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
pub fn differing(doc: &Value) -> Vec<String> {
    doc["differing"]
        .as_array()
        .unwrap_or_else(|| panic!("no 'differing' list: {doc}"))
        .iter()
        .map(|d| d.as_str().unwrap_or_default().to_string())
        .collect()
}
