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

// ---------------------------------------------------------------------------------------------
// Keys through getfattr / setfattr
// ---------------------------------------------------------------------------------------------

/// `getfattr -n KEY --only-values PATH`: the value, or getfattr's stderr.
pub fn getfattr(path: &Path, key: &str) -> Result<Vec<u8>, String> {
    let out = run(
        "getfattr",
        &[&"-n", &key, &"--only-values", &path],
        TOOL_TIMEOUT,
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
        TOOL_TIMEOUT,
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

/// Asserts that `setfattr` fails with the message of `errno_text` (e.g. "Invalid argument").
#[track_caller]
pub fn setfattr_fails(path: &Path, key: &str, value: &str, errno_text: &str) {
    match setfattr(path, key, value) {
        Ok(()) => panic!(
            "setfattr -n {key} -v {value:?} {} succeeded, want '{errno_text}'",
            path.display()
        ),
        Err(e) => assert!(
            e.contains(errno_text),
            "setfattr -n {key} -v {value:?} {}: want '{errno_text}', got: {e}",
            path.display()
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// The statistics document
// ---------------------------------------------------------------------------------------------

/// Fields of the document's top level, as the issue lists them (and the ones added with them).
pub const MOUNT_FIELDS: &[&str] = &[
    "version",
    "mirrorfs_version",
    "mount",
    "pid",
    "state",
    "read_policy",
    "uptime_s",
    "uptime_us",
    "legs_total",
    "legs_online",
    "legs",
    "resync",
    "scrub",
    "last_scrub",
    "integrity",
    "daemon",
];

/// Fields of each leg.
pub const LEG_FIELDS: &[&str] = &[
    "name",
    "path",
    "state",
    "rotational",
    "rotational_source",
    "writemostly",
    "device",
    "read_ops",
    "read_bytes",
    "write_ops",
    "write_bytes",
    "read_errors",
    "write_errors",
    "checksum_errors",
    "inflight",
    "device_inflight",
    "latency_us",
    "read_bandwidth",
    "policy_picks",
    "stream_switches",
    "split_reads",
    "spread_reads",
    "size_bytes",
    "free_bytes",
    "reserve_bytes",
    "disk",
];

/// Per-leg counters that `stats_reset` zeroes.
pub const COUNTERS: &[&str] = &[
    "read_ops",
    "read_bytes",
    "write_ops",
    "write_bytes",
    "read_errors",
    "write_errors",
    "checksum_errors",
    "policy_picks",
    "stream_switches",
    "split_reads",
    "spread_reads",
];

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

/// Every field the issue lists is present in the raw document, with the right JSON type.
#[track_caller]
pub fn assert_every_field(v: &Value, n_legs: usize) {
    let top = v.as_object().expect("the document is a JSON object");
    for f in MOUNT_FIELDS {
        assert!(top.contains_key(*f), "stats lack the mount field '{f}'");
    }
    for f in [
        "version",
        "pid",
        "uptime_s",
        "uptime_us",
        "legs_total",
        "legs_online",
    ] {
        assert!(v[f].is_u64(), "stats field {f} is not an integer: {}", v[f]);
    }
    for f in ["mirrorfs_version", "mount", "state", "read_policy"] {
        assert!(
            v[f].is_string(),
            "stats field {f} is not a string: {}",
            v[f]
        );
    }
    for f in ["resync", "scrub", "last_scrub"] {
        assert!(
            v[f].is_null() || v[f].is_object(),
            "stats field {f} is neither null nor an object: {}",
            v[f]
        );
    }
    assert!(
        ["ONLINE", "DEGRADED", "FAULTED"].contains(&v["state"].as_str().unwrap()),
        "mount state {}",
        v["state"]
    );
    let legs = v["legs"].as_array().expect("legs is a list");
    assert_eq!(legs.len(), n_legs, "one entry per leg");
    for (i, l) in legs.iter().enumerate() {
        let o = l.as_object().expect("a leg is an object");
        for f in LEG_FIELDS {
            assert!(o.contains_key(*f), "leg {i} lacks the field '{f}': {l}");
        }
        for f in COUNTERS.iter().chain(&["inflight"]) {
            assert!(l[f].is_u64(), "leg {i}: {f} is not an integer: {}", l[f]);
        }
        for f in ["device_inflight", "read_bandwidth"] {
            assert!(
                l[f].is_null() || l[f].is_u64(),
                "leg {i}: {f} is neither null nor an integer: {}",
                l[f]
            );
        }
        for f in ["name", "path", "state", "rotational_source"] {
            assert!(l[f].is_string(), "leg {i}: {f} is not a string: {}", l[f]);
        }
        assert!(
            l["device"].is_null() || l["device"].is_string(),
            "leg {i}: device {}",
            l["device"]
        );
        for f in ["rotational", "writemostly"] {
            assert!(l[f].is_boolean(), "leg {i}: {f} is not a boolean: {}", l[f]);
        }
        assert!(
            ["sysfs", "option", "measured", "unknown"]
                .contains(&l["rotational_source"].as_str().unwrap()),
            "leg {i}: rotational_source {}",
            l["rotational_source"]
        );
        let lat = l["latency_us"]
            .as_object()
            .expect("latency_us is an object");
        for f in ["small_read", "large_read"] {
            assert!(
                lat.get(f).is_some_and(|x| x.is_null() || x.is_u64()),
                "leg {i}: latency_us.{f} missing or not an integer: {}",
                l["latency_us"]
            );
        }
    }
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

/// Asserts the exit status; a failure that prints no report says why in exactly one line.
#[track_caller]
pub fn assert_exit(out: &Output, code: i32, what: &str) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{what}: exit status\nstdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let err = text(&out.stderr);
    if code != 0 && out.stdout.is_empty() {
        assert_eq!(
            err.lines().count(),
            1,
            "{what}: want one line on stderr, got: {err:?}"
        );
        assert!(err.starts_with("mirrorfs: "), "{what}: stderr {err:?}");
    } else {
        assert_eq!(err, "", "{what}: stderr");
    }
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

/// `mirrorfs scrub start MOUNT REPAIR` (`--repair`, `--repair=LEG`), which must find exactly
/// one difference and repair it; `scrub status` then exits 0. Returns the scrub document.
#[track_caller]
pub fn scrub_repairs_one(mnt: &Path, repair: &str) -> Value {
    mirrorfs_ok(&[&"scrub", &"start", &mnt, &repair]);
    let doc = wait_scrubbed(mnt);
    assert_eq!(
        (doc["differences"].as_u64(), doc["repaired"].as_u64()),
        (Some(1), Some(1)),
        "{doc}"
    );
    mirrorfs_ok(&[&"scrub", &"status", &mnt]);
    doc
}

/// `mirrorfs scrub start MOUNT`, which must find no difference.
#[track_caller]
pub fn assert_scrub_clean(mnt: &Path) {
    mirrorfs_ok(&[&"scrub", &"start", &mnt]);
    let doc = wait_scrubbed(mnt);
    assert_eq!(
        doc["differences"], 0,
        "a scrub that should find nothing: {doc}"
    );
}

/// The mount is ONLINE with every leg, and no resync was needed.
#[track_caller]
pub fn assert_online_without_resync(mnt: &Path, legs: usize) {
    let st = stats(mnt);
    assert_eq!(
        (st.state, st.legs_online),
        (MountState::Online, legs),
        "{st:?}"
    );
    assert!(st.resync.is_none(), "{st:?}");
}
