//! The control interface through a real mount (issue 5): the `user.mirrorfs.*` keys read and
//! set with the real `getfattr`/`setfattr`, the statistics document, the control file
//! `MOUNT/.mirrorfs`, the per-file keys, leg attributes, and the `mirrorfs status`, `iostat`,
//! `get`, `set` and `list` subcommands.

#[macro_use]
mod common;

use common::*;
use mirrorfs::stats::{LegState, MountState, Stats};
use serde_json::Value;
use std::ffi::OsString;
use std::fs::{self, File};
use std::os::unix::fs::{symlink, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const STATS: &str = "user.mirrorfs.stats";

/// Fields of the document's top level, as the issue lists them (and the ones added with them).
const MOUNT_FIELDS: &[&str] = &[
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
];

/// Fields of each leg.
const LEG_FIELDS: &[&str] = &[
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
];

/// Per-leg counters that `stats_reset` zeroes.
const COUNTERS: &[&str] = &[
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

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn run(prog: &str, args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let mut cmd = Command::new(prog);
    for a in args {
        cmd.arg(a.as_ref());
    }
    run_timeout(&mut cmd, Duration::from_secs(60))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `getfattr -n KEY --only-values PATH`: the value, or getfattr's stderr.
fn getfattr(path: &Path, key: &str) -> Result<Vec<u8>, String> {
    let out = run("getfattr", &[&"-n", &key, &"--only-values", &path]);
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(text(&out.stderr))
    }
}

#[track_caller]
fn getfattr_ok(path: &Path, key: &str) -> String {
    let v =
        getfattr(path, key).unwrap_or_else(|e| panic!("getfattr -n {key} {}: {e}", path.display()));
    String::from_utf8(v).expect("UTF-8 value")
}

/// `setfattr -n KEY -v VALUE PATH`: Ok, or setfattr's stderr.
fn setfattr(path: &Path, key: &str, value: &str) -> Result<(), String> {
    let out = run("setfattr", &[&"-n", &key, &"-v", &value, &path]);
    if out.status.success() {
        Ok(())
    } else {
        Err(text(&out.stderr))
    }
}

/// Asserts that `setfattr` fails with the message of `errno_text` (e.g. "Invalid argument").
#[track_caller]
fn setfattr_fails(path: &Path, key: &str, value: &str, errno_text: &str) {
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

/// The raw stats document read with getfattr, and it parsed both ways.
#[track_caller]
fn stats_of(path: &Path) -> (String, Stats, Value) {
    let raw = getfattr_ok(path, STATS);
    let st: Stats = serde_json::from_str(&raw)
        .unwrap_or_else(|e| panic!("stats of {} do not parse: {e}\n{raw}", path.display()));
    let v: Value = serde_json::from_str(&raw).unwrap();
    (raw, st, v)
}

#[track_caller]
fn stats(m: &Mounted) -> Stats {
    stats_of(&m.path(".mirrorfs")).1
}

/// The raw JSON of one leg's counters.
#[track_caller]
fn leg_value(m: &Mounted, leg: usize) -> Value {
    let (_, _, v) = stats_of(&m.path(".mirrorfs"));
    v["legs"][leg].clone()
}

/// Every field the issue lists is present in the raw document, with the right JSON type.
#[track_caller]
fn assert_every_field(v: &Value, n_legs: usize) {
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
    for f in ["resync", "scrub"] {
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

/// A file with the same content and mtime on every leg, before the first mount: its first
/// read through the mount cannot come from the kernel's page cache.
fn seed(dirs: &TestDirs, rel: &str, data: &[u8]) {
    for l in &dirs.legs {
        let p = l.join(rel);
        fs::write(&p, data).unwrap();
        utimensat(&p, ts(1_600_000_000, 0), ts(1_600_000_000, 0), true).unwrap();
    }
}

/// Reads the whole file once, through the mount.
#[track_caller]
fn read_once(m: &Mounted, rel: &str, want: &[u8]) {
    let got = fs::read(m.path(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"));
    assert_bytes_eq(&got, want, rel);
}

/// `mirrorfs ARGS...`.
fn mirrorfs<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    run_mirrorfs(args)
}

/// Asserts the exit status; a failure that prints no report says why in exactly one line.
#[track_caller]
fn assert_exit(out: &Output, code: i32, what: &str) {
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

fn p(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

// ---------------------------------------------------------------------------------------------
// The statistics document and the mount-wide keys
// ---------------------------------------------------------------------------------------------

legs_test!(stats_document_has_every_field, per_file_keys);

fn stats_document_has_every_field(n: usize) {
    require_fuse!();
    require_tool!("getfattr");
    let m = TestMirror::new(n).option("read_policy=first").mount();
    let (raw_root, st_root, v_root) = stats_of(m.mnt());
    let (raw, st, v) = stats_of(&m.path(".mirrorfs"));
    for (what, r, v) in [("MOUNT", &raw_root, &v_root), (".mirrorfs", &raw, &v)] {
        assert!(
            r.starts_with("{\"version\":"),
            "the stats on {what} do not start with \"version\": {r}"
        );
        assert_every_field(v, n);
    }
    assert_eq!(st.version, 1);
    assert_eq!(st_root.pid, st.pid, "root and control file answer alike");
    assert_eq!(st.mirrorfs_version, env!("CARGO_PKG_VERSION"));
    assert_eq!(Path::new(&st.mount), m.mnt());
    assert!(
        m.daemon_pids().contains(&(st.pid as i32)),
        "stats pid {} is not the daemon's {:?}",
        st.pid,
        m.daemon_pids()
    );
    assert_eq!(st.state, MountState::Online);
    assert_eq!(st.read_policy, "first");
    assert_eq!((st.legs_total, st.legs_online), (n, n));
    assert!(st.uptime_us >= st_root.uptime_us, "uptime went back");
    assert!(st.uptime_s <= st.uptime_us / 1_000_000 + 1);
    assert_eq!(st.resync, None);
    assert_eq!(st.scrub, None);
    for (i, l) in st.legs.iter().enumerate() {
        assert_eq!(l.name, format!("leg{i}"));
        assert_eq!(Path::new(&l.path), m.leg(i));
        assert_eq!(l.state, LegState::InSync);
        assert!(!l.writemostly);
        assert_eq!(
            l.inflight, 0,
            "leg {i} has reads or writes in flight while idle"
        );
        assert_eq!(
            (l.read_ops, l.read_bytes, l.write_ops, l.write_bytes),
            (0, 0, 0, 0),
            "counters of a fresh mount"
        );
        assert_eq!(
            (l.read_errors, l.write_errors, l.checksum_errors),
            (0, 0, 0)
        );
    }

    // The other mount-wide keys, on the root and on the control file.
    for at in [m.mnt().to_path_buf(), m.path(".mirrorfs")] {
        assert_eq!(
            getfattr_ok(&at, "user.mirrorfs.version"),
            env!("CARGO_PKG_VERSION")
        );
        assert_eq!(
            getfattr_ok(&at, "user.mirrorfs.pid"),
            st.pid.to_string(),
            "pid of the running daemon (after the fork)"
        );
        assert_eq!(getfattr_ok(&at, "user.mirrorfs.mount"), p(m.mnt()));
        assert_eq!(getfattr_ok(&at, "user.mirrorfs.state"), "ONLINE");
        assert_eq!(getfattr_ok(&at, "user.mirrorfs.legs"), legs_arg(m.legs()));
        assert_eq!(getfattr_ok(&at, "user.mirrorfs.read_policy"), "first");
        // Every mount option has a key: the tunables show their values in force.
        assert!(getfattr_ok(&at, "user.mirrorfs.threads")
            .parse::<u32>()
            .is_ok());
        assert_eq!(getfattr_ok(&at, "user.mirrorfs.ro"), "false");
    }
    // The root lists none of them (so cp -a of the mount root copies none).
    let listed: Vec<String> = list_xattr(m.mnt()).unwrap();
    assert!(
        !listed.iter().any(|k| k.starts_with("user.mirrorfs.")),
        "the root lists control keys: {listed:?}"
    );
    m.finish();
}

#[test]
fn stats_fit_in_an_xattr_with_8_legs() {
    require_fuse!();
    require_tool!("getfattr");
    let m = TestMirror::new(8).mount();
    fs::write(m.path("f"), pattern(100_000, 8)).unwrap();
    read_once(&m, "f", &pattern(100_000, 8));
    let (raw, st, v) = stats_of(m.mnt());
    assert_every_field(&v, 8);
    assert_eq!(st.legs_total, 8);
    // The document grows with the leg paths (about 700 bytes a leg here); 64 KiB is the
    // kernel's limit for one xattr value. A quarter of it leaves room for long leg paths and
    // fields added later.
    assert!(
        raw.len() < 65536 / 4,
        "the stats of 8 legs take {} bytes, too close to the 64 KiB xattr limit",
        raw.len()
    );
    eprintln!("stats with 8 legs: {} bytes", raw.len());
    m.finish();
}

// ---------------------------------------------------------------------------------------------
// Counters follow the read policy
// ---------------------------------------------------------------------------------------------

legs_test!(read_counters_follow_the_policy);

fn read_counters_follow_the_policy(n: usize) {
    require_fuse!();
    require_tool!("getfattr");
    require_tool!("setfattr");
    // Files seeded on the legs before the mount: the mount's page cache is empty, so each byte
    // read once through it is read from a leg exactly once.
    let (a, b, c) = (pattern(300_001, 1), pattern(200_003, 2), pattern(70_000, 3));
    let dirs = TestDirs::new(n);
    seed(&dirs, "a", &a);
    seed(&dirs, "b", &b);
    seed(&dirs, "c", &c);
    let m = TestMirror::new(n)
        .with_dirs(dirs)
        .option("read_policy=first")
        .mount();

    let before = stats(&m);
    read_once(&m, "a", &a);
    let after = stats(&m);
    let l0 = &after.legs[0];
    assert_eq!(
        l0.read_bytes - before.legs[0].read_bytes,
        a.len() as u64,
        "read_bytes of the leg 'first' picks moved by the bytes read"
    );
    assert!(l0.read_ops >= 1);
    assert_eq!(
        l0.policy_picks, l0.read_ops,
        "every read of leg0 was a pick of the policy"
    );
    for (i, l) in after.legs.iter().enumerate().skip(1) {
        assert_eq!(
            (l.read_ops, l.read_bytes, l.policy_picks),
            (0, 0, 0),
            "leg {i} was read with read_policy=first"
        );
    }

    // Writes count once per leg.
    let w = pattern(123_457, 4);
    fs::write(m.path("w"), &w).unwrap();
    let st = stats(&m);
    for (i, l) in st.legs.iter().enumerate() {
        assert_eq!(
            l.write_bytes - before.legs[i].write_bytes,
            w.len() as u64,
            "write_bytes of leg {i}"
        );
        assert!(l.write_ops >= 1);
    }

    // stats_reset (on the control file) zeroes every counter.
    setfattr(&m.path(".mirrorfs"), "user.mirrorfs.stats_reset", "1").expect("stats_reset");
    for i in 0..n {
        let l = leg_value(&m, i);
        for f in COUNTERS {
            assert_eq!(l[f], 0, "leg {i}: {f} after stats_reset");
        }
    }

    // A live change: `devid:N` (one named leg) arrives with the policy work. When the binary
    // accepts it, the next read must go to that leg; when it does not, the refusal must change
    // nothing, and this half is skipped.
    let last = n - 1;
    let spec = format!("devid:{last}");
    let out = mirrorfs(&[
        OsString::from("set"),
        m.mnt().into(),
        "read_policy".into(),
        spec.as_str().into(),
    ]);
    if out.status.success() {
        assert_eq!(getfattr_ok(m.mnt(), "user.mirrorfs.read_policy"), spec);
        assert_eq!(stats(&m).read_policy, spec);
        read_once(&m, "b", &b);
        let st = stats(&m);
        assert_eq!(
            st.legs[last].read_bytes,
            b.len() as u64,
            "read_bytes of leg {last} after read_policy={spec}"
        );
        for (i, l) in st.legs.iter().enumerate().take(last) {
            assert_eq!((l.read_ops, l.read_bytes), (0, 0), "leg {i} under {spec}");
        }
        // And back with setfattr on the root: the next read goes to leg0 again.
        setfattr(m.mnt(), "user.mirrorfs.read_policy", "first").expect("set first");
        assert_eq!(stats(&m).read_policy, "first");
        let base = stats(&m);
        read_once(&m, "c", &c);
        let st = stats(&m);
        assert_eq!(
            st.legs[0].read_bytes - base.legs[0].read_bytes,
            c.len() as u64
        );
        assert_eq!(st.legs[last].read_bytes, base.legs[last].read_bytes);
    } else {
        eprintln!(
            "note: this binary does not accept read_policy={spec} yet ({}); the devid half of \
             {} is skipped",
            text(&out.stderr).trim(),
            test_name()
        );
        assert_exit(&out, 1, "mirrorfs set read_policy devid");
        assert_eq!(
            stats(&m).read_policy,
            "first",
            "a refused policy changed it"
        );
        // The policy in force still serves: c is read from leg0 only.
        read_once(&m, "c", &c);
        let st = stats(&m);
        assert_eq!(st.legs[0].read_bytes, c.len() as u64);
        for l in &st.legs[1..] {
            assert_eq!(l.read_bytes, 0);
        }
    }
    m.finish();
}

// ---------------------------------------------------------------------------------------------
// Setting keys: live changes, EINVAL, ENODATA, EROFS
// ---------------------------------------------------------------------------------------------

#[test]
fn keys_set_live_or_refuse_with_the_right_errno() {
    require_fuse!();
    require_tool!("getfattr");
    require_tool!("setfattr");
    let m = TestMirror::new(2).option("read_policy=first").mount();
    fs::create_dir(m.path("dir")).unwrap();
    fs::write(m.path("dir/f"), b"data").unwrap();
    let ctl = m.path(".mirrorfs");
    let root = m.mnt().to_path_buf();

    // A good value, on the root and on the control file: read back from both.
    for at in [&root, &ctl] {
        setfattr(at, "user.mirrorfs.read_policy", "first")
            .unwrap_or_else(|e| panic!("set read_policy on {}: {e}", at.display()));
        assert_eq!(getfattr_ok(&root, "user.mirrorfs.read_policy"), "first");
        assert_eq!(getfattr_ok(&ctl, "user.mirrorfs.read_policy"), "first");
        assert_eq!(stats(&m).read_policy, "first");
    }

    let threads = getfattr_ok(&ctl, "user.mirrorfs.threads");
    let legs_before: Vec<_> = m.legs().iter().map(|l| snapshot_tree(l)).collect();
    for at in [&root, &ctl] {
        // Bad values: EINVAL, and the policy in force stays.
        for bad in ["nope", "leg:nosuchleg", "first,extra", "devid:", "devid:x"] {
            setfattr_fails(at, "user.mirrorfs.read_policy", bad, "Invalid argument");
            assert_eq!(getfattr_ok(at, "user.mirrorfs.read_policy"), "first");
        }
        assert_errno(
            set_xattr(at, "user.mirrorfs.read_policy", b"", 0),
            libc::EINVAL,
            "empty read_policy",
        );
        assert_errno(
            set_xattr(at, "user.mirrorfs.read_policy", b"\xff\xfe", 0),
            libc::EINVAL,
            "read_policy that is not UTF-8",
        );
        // Unknown keys: ENODATA, for reading and setting.
        setfattr_fails(at, "user.mirrorfs.nokey", "1", "No such attribute");
        match getfattr(at, "user.mirrorfs.nokey") {
            Ok(v) => panic!("getfattr of an unknown key gave {v:?}"),
            Err(e) => assert!(e.contains("No such attribute"), "{e}"),
        }
        assert_errno(
            remove_xattr(at, "user.mirrorfs.nokey"),
            libc::ENODATA,
            "removexattr unknown key",
        );
        // Options that cannot change while mounted, and the informational keys: EROFS.
        setfattr_fails(at, "user.mirrorfs.threads", "2", "Read-only file system");
        for k in ["version", "pid", "mount", "state", "legs", "stats", "ro"] {
            assert_errno(
                set_xattr(at, &format!("user.mirrorfs.{k}"), b"1", 0),
                libc::EROFS,
                &format!("setxattr user.mirrorfs.{k}"),
            );
        }
        for k in ["read_policy", "threads", "stats"] {
            assert_errno(
                remove_xattr(at, &format!("user.mirrorfs.{k}")),
                libc::EROFS,
                &format!("removexattr user.mirrorfs.{k}"),
            );
        }
        // stats_reset is write-only.
        assert_errno(
            get_xattr(at, "user.mirrorfs.stats_reset"),
            libc::ENODATA,
            "getxattr stats_reset",
        );
    }
    assert_eq!(getfattr_ok(&ctl, "user.mirrorfs.threads"), threads);
    assert_eq!(stats(&m).read_policy, "first");
    for (i, l) in m.legs().iter().enumerate() {
        assert_snapshot_eq(
            &legs_before[i],
            &snapshot_tree(l),
            "a leg after refused sets",
        );
    }

    // Per-file keys are read-only.
    let f = m.path("dir/f");
    for k in ["relpath", "allpaths", "readleg", "copies"] {
        setfattr_fails(
            &f,
            &format!("user.mirrorfs.{k}"),
            "x",
            "Read-only file system",
        );
        assert_errno(
            remove_xattr(&f, &format!("user.mirrorfs.{k}")),
            libc::EROFS,
            &format!("removexattr user.mirrorfs.{k}"),
        );
    }
    // Mount-wide keys are not answered on ordinary files, and nothing of the namespace is
    // ever stored on a leg.
    assert_errno(get_xattr(&f, STATS), libc::ENODATA, "stats on a file");
    assert_errno(
        set_xattr(&f, "user.mirrorfs.mine", b"1", 0),
        libc::EPERM,
        "storing a user.mirrorfs.* key on a file",
    );
    assert_errno(
        set_xattr(m.path("dir"), "user.mirrorfs.read_policy", b"first", 0),
        libc::EPERM,
        "a mount key on a directory below the root",
    );
    for p in m.leg_paths("dir/f").iter().chain(&m.leg_paths("dir")) {
        let names = list_xattr(p).unwrap();
        assert!(
            !names.iter().any(|k| k.starts_with("user.mirrorfs.")),
            "{} carries {names:?}",
            p.display()
        );
    }
    m.finish();
}

/// `devid:N` names a leg by its index: an index past the last leg is a bad value like any
/// other (EINVAL, no change), not a policy that silently falls back to the first leg.
#[test]
fn an_out_of_range_devid_is_refused() {
    require_fuse!();
    require_tool!("getfattr");
    require_tool!("setfattr");
    let m = TestMirror::new(2).option("read_policy=first").mount();
    for bad in ["devid:2", "devid:99"] {
        setfattr_fails(
            m.mnt(),
            "user.mirrorfs.read_policy",
            bad,
            "Invalid argument",
        );
        assert_eq!(getfattr_ok(m.mnt(), "user.mirrorfs.read_policy"), "first");
    }
    m.finish();
}

// ---------------------------------------------------------------------------------------------
// Copies out of the mount
// ---------------------------------------------------------------------------------------------

/// Every xattr name found under `dir` by `getfattr -d -m - -R`.
fn xattr_names_below(dir: &Path) -> Vec<String> {
    let out = run("getfattr", &[&"-d", &"-m", &"-", &"-R", &dir]);
    assert!(
        out.status.success(),
        "getfattr -R {}: {}",
        dir.display(),
        text(&out.stderr)
    );
    text(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with("# file:"))
        .map(|l| l.split('=').next().unwrap().to_string())
        .collect()
}

#[test]
fn copies_out_of_the_mount_carry_no_control_key() {
    require_fuse!();
    require_tool!("getfattr");
    require_tool!("rsync");
    let m = TestMirror::new(2).mount();
    fs::create_dir_all(m.path("tree/sub")).unwrap();
    fs::write(m.path("tree/f"), b"f").unwrap();
    fs::write(m.path("tree/sub/g"), pattern(10_000, 5)).unwrap();
    symlink("f", m.path("tree/link")).unwrap();
    set_xattr(m.path("tree/f"), "user.color", b"blue", 0).unwrap();
    set_xattr(m.path("tree/sub"), "user.dirnote", b"d", 0).unwrap();
    set_xattr(m.path("tree/sub/g"), "user.tag", b"g", 0).unwrap();
    set_xattr(m.mnt(), "user.rootnote", b"r", 0).unwrap();
    // The per-file keys answer, but are not listed.
    assert_eq!(
        get_xattr(m.path("tree/f"), "user.mirrorfs.relpath").unwrap(),
        b"/tree/f"
    );
    assert_eq!(
        list_xattr(m.path("tree/f")).unwrap(),
        vec!["user.color"],
        "listxattr of a file"
    );

    let out_dir = m.root().join("out");
    fs::create_dir(&out_dir).unwrap();
    let copies = [
        ("cp -a of a dir", out_dir.join("cp"), "cp", "tree"),
        ("cp -a of the root", out_dir.join("cproot"), "cp", "."),
        ("rsync -aX of a dir", out_dir.join("rsync"), "rsync", "tree"),
        (
            "rsync -aX of the root",
            out_dir.join("rsyncroot"),
            "rsync",
            ".",
        ),
    ];
    for (what, dest, tool, src) in &copies {
        let src = m.path(src);
        let out = if *tool == "cp" {
            run("cp", &[&"-a", &src, dest])
        } else {
            let s = format!("{}/", p(&src));
            run("rsync", &[&"-aX", &s, dest])
        };
        assert!(out.status.success(), "{what}: {}", text(&out.stderr));
        let names = xattr_names_below(dest);
        assert!(
            !names.iter().any(|k| k.contains("mirrorfs")),
            "{what} copied control keys: {names:?}"
        );
        for want in ["user.color", "user.dirnote", "user.tag"] {
            assert!(
                names.iter().any(|k| k == want),
                "{what} lost {want}: {names:?}"
            );
        }
    }
    for root_copy in ["cproot", "rsyncroot"] {
        let d = out_dir.join(root_copy);
        assert!(
            !d.join(".mirrorfs").exists(),
            "{root_copy}: the control file was copied"
        );
        assert_eq!(dir_names(&d), vec!["tree"], "{root_copy}");
        assert_eq!(get_xattr(&d, "user.rootnote").unwrap(), b"r");
    }
    m.finish();
}

// ---------------------------------------------------------------------------------------------
// The control file
// ---------------------------------------------------------------------------------------------

legs_test!(control_file_is_empty_hidden_and_unchangeable);

fn control_file_is_empty_hidden_and_unchangeable(n: usize) {
    require_fuse!();
    require_tool!("getfattr");
    let m = TestMirror::new(n).mount();
    let ctl = m.path(".mirrorfs");
    fs::write(m.path("f"), b"f").unwrap();
    fs::create_dir(m.path("d")).unwrap();
    let meta_before: Vec<_> = m
        .legs()
        .iter()
        .map(|l| snapshot_tree(&l.join(".mirrorfs")))
        .collect();
    assert!(
        meta_before[0].len() > 1,
        "the legs have a .mirrorfs/ folder"
    );

    // stat: an empty regular file.
    let st = stat(&ctl).expect("stat .mirrorfs");
    assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFREG);
    assert_eq!(st.st_size, 0);
    assert_eq!(st.st_nlink, 1);
    assert_eq!(lstat_ok(&ctl).st_ino, st.st_ino);
    let out = run("stat", &[&"-c", &"%F", &ctl]);
    assert_eq!(text(&out.stdout).trim(), "regular empty file");
    // Absent from readdir (ls -a), present for lookups.
    let out = run("ls", &[&"-a", &m.mnt()]);
    let names: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
    assert_eq!(names, vec![".", "..", "d", "f"], "ls -a of the root");
    assert_eq!(fs::read(&ctl).unwrap(), b"", "the control file reads empty");
    // Only at the root.
    assert_errno(lstat(m.path("d/.mirrorfs")), libc::ENOENT, "d/.mirrorfs");

    // getfattr -d lists the keys, and every listed key is readable.
    let out = run("getfattr", &[&"-d", &ctl]);
    assert!(out.status.success(), "getfattr -d: {}", text(&out.stderr));
    let dumped = text(&out.stdout);
    for k in [
        "stats",
        "version",
        "pid",
        "mount",
        "state",
        "legs",
        "read_policy",
        "threads",
    ] {
        assert!(
            dumped.contains(&format!("\nuser.mirrorfs.{k}=")),
            "getfattr -d .mirrorfs lacks {k}:\n{dumped}"
        );
    }
    let listed = list_xattr(&ctl).unwrap();
    assert!(listed.len() >= 8, "{listed:?}");
    for k in &listed {
        assert!(k.starts_with("user.mirrorfs."), "{k} listed on .mirrorfs");
        get_xattr(&ctl, k).unwrap_or_else(|e| panic!("listed key {k} is unreadable: {e}"));
    }
    assert!(!listed.iter().any(|k| k.ends_with(".stats_reset")));
    // Per-file keys belong to files, not to the control file.
    assert_errno(
        get_xattr(&ctl, "user.mirrorfs.relpath"),
        libc::ENODATA,
        "relpath of .mirrorfs",
    );

    // It cannot be written, truncated, replaced, or changed.
    assert_errno(
        fs::OpenOptions::new().write(true).open(&ctl),
        libc::EACCES,
        "open .mirrorfs for writing",
    );
    assert_errno(
        fs::OpenOptions::new().read(true).write(true).open(&ctl),
        libc::EACCES,
        "open .mirrorfs O_RDWR",
    );
    assert_errno(
        fs::OpenOptions::new().append(true).open(&ctl),
        libc::EACCES,
        "open .mirrorfs O_APPEND",
    );
    assert_errno(
        fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_TRUNC)
            .open(&ctl),
        libc::EPERM,
        "open .mirrorfs O_RDONLY|O_TRUNC",
    );
    assert_errno(fs::write(&ctl, b"x"), libc::EACCES, "write .mirrorfs");
    assert_errno(truncate(&ctl, 0), libc::EPERM, "truncate .mirrorfs");
    assert_errno(
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&ctl),
        libc::EEXIST,
        "O_CREAT|O_EXCL .mirrorfs",
    );
    assert_errno(chmod(&ctl, 0o600), libc::EPERM, "chmod .mirrorfs");
    assert_errno(chown(&ctl, NOBODY, NOGROUP), libc::EPERM, "chown .mirrorfs");
    assert_errno(
        utimensat(&ctl, ts(1, 0), ts(1, 0), false),
        libc::EPERM,
        "utimensat .mirrorfs",
    );
    assert_errno(
        set_xattr(&ctl, "user.note", b"1", 0),
        libc::EPERM,
        "setxattr user.note on .mirrorfs",
    );
    assert_errno(
        remove_xattr(&ctl, "user.note"),
        libc::ENODATA,
        "removexattr user.note on .mirrorfs",
    );
    assert_errno(fs::create_dir(&ctl), libc::EEXIST, "mkdir .mirrorfs");
    assert_errno(mkfifo(&ctl, 0o644), libc::EEXIST, "mkfifo .mirrorfs");
    assert_errno(symlink("f", &ctl), libc::EEXIST, "symlink .mirrorfs");
    assert_errno(
        fs::hard_link(m.path("f"), &ctl),
        libc::EEXIST,
        "link f as .mirrorfs",
    );
    assert_errno(fs::remove_dir(&ctl), libc::ENOTDIR, "rmdir .mirrorfs");
    assert_errno(
        fs::read_dir(&ctl).map(drop),
        libc::ENOTDIR,
        "opendir .mirrorfs",
    );
    assert_errno(
        File::create(m.path(".mirrorfs/x")),
        libc::ENOTDIR,
        "create .mirrorfs/x",
    );
    assert_errno(
        fs::rename(m.path("f"), &ctl),
        libc::EPERM,
        "rename f over .mirrorfs",
    );
    assert_errno(
        renameat2(m.path("f"), &ctl, libc::RENAME_NOREPLACE),
        libc::EEXIST,
        "RENAME_NOREPLACE f to .mirrorfs",
    );
    assert_errno(
        renameat2(m.path("f"), &ctl, libc::RENAME_EXCHANGE),
        libc::EPERM,
        "RENAME_EXCHANGE f with .mirrorfs",
    );
    assert_errno(
        fs::rename(m.path("d"), &ctl),
        libc::ENOTDIR,
        "rename a dir over .mirrorfs",
    );

    let st2 = stat(&ctl).unwrap();
    assert_eq!((st2.st_mode, st2.st_size), (st.st_mode, st.st_size));
    assert_eq!(fs::read(m.path("f")).unwrap(), b"f");
    for (i, l) in m.legs().iter().enumerate() {
        assert_snapshot_eq(
            &meta_before[i],
            &snapshot_tree(&l.join(".mirrorfs")),
            &format!("{}/.mirrorfs", l.display()),
        );
    }
    m.finish();
}

/// Removing, renaming or linking the control file: refused with EPERM, as every other change
/// to it, and the legs' metadata folders stay.
#[test]
fn control_file_cannot_be_removed_renamed_or_linked() {
    require_fuse!();
    let m = TestMirror::new(2).mount();
    let ctl = m.path(".mirrorfs");
    fs::write(m.path("f"), b"f").unwrap();
    let meta_before: Vec<_> = m
        .legs()
        .iter()
        .map(|l| snapshot_tree(&l.join(".mirrorfs")))
        .collect();
    let mut wrong = Vec::new();
    let mut check = |r: std::io::Result<()>, what: &str| match r {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {}
        Err(e) => wrong.push(format!("{what}: {e}, want EPERM")),
        Ok(()) => wrong.push(format!("{what}: succeeded, want EPERM")),
    };
    check(fs::remove_file(&ctl), "unlink .mirrorfs");
    check(fs::rename(&ctl, m.path("stolen")), "rename .mirrorfs away");
    check(
        renameat2(&ctl, m.path("f"), libc::RENAME_EXCHANGE),
        "RENAME_EXCHANGE .mirrorfs with f",
    );
    check(
        fs::hard_link(&ctl, m.path("hl")),
        "link .mirrorfs to another name",
    );
    assert!(
        lstat(m.path("stolen")).is_err() && lstat(m.path("hl")).is_err(),
        "the control file got a second name"
    );
    assert!(stat(&ctl).is_ok(), "the control file is gone");
    for (i, l) in m.legs().iter().enumerate() {
        assert_snapshot_eq(
            &meta_before[i],
            &snapshot_tree(&l.join(".mirrorfs")),
            &format!("{}/.mirrorfs", l.display()),
        );
    }
    assert!(wrong.is_empty(), "wrong errnos:\n  {}", wrong.join("\n  "));
    m.finish();
}

// ---------------------------------------------------------------------------------------------
// Per-file keys
// ---------------------------------------------------------------------------------------------

fn per_file_keys(n: usize) {
    require_fuse!();
    require_tool!("getfattr");
    let m = TestMirror::new(n).option("read_policy=first").mount();
    fs::create_dir(m.path("dir")).unwrap();
    let data = pattern(50_000, 9);
    fs::write(m.path("dir/f"), &data).unwrap();

    assert_eq!(
        getfattr_ok(&m.path("dir/f"), "user.mirrorfs.relpath"),
        "/dir/f"
    );
    assert_eq!(getfattr_ok(&m.path("dir"), "user.mirrorfs.relpath"), "/dir");
    assert_eq!(getfattr_ok(m.mnt(), "user.mirrorfs.relpath"), "/");

    let all = getfattr(&m.path("dir/f"), "user.mirrorfs.allpaths").unwrap();
    let paths: Vec<PathBuf> = all
        .split(|b| *b == 0)
        .map(|s| PathBuf::from(String::from_utf8(s.to_vec()).unwrap()))
        .collect();
    assert_eq!(paths.len(), n, "one backing path per leg: {paths:?}");
    for (i, bp) in paths.iter().enumerate() {
        let want = fs::canonicalize(m.leg(i)).unwrap().join("dir/f");
        assert_eq!(bp, &want, "backing path on leg {i}");
        assert_bytes_eq(&fs::read(bp).unwrap(), &data, &bp.display().to_string());
        assert_eq!(
            fs::metadata(bp).unwrap().ino(),
            lstat_ok(m.leg(i).join("dir/f")).st_ino
        );
    }

    assert_eq!(
        getfattr_ok(&m.path("dir/f"), "user.mirrorfs.readleg"),
        "leg0"
    );

    let copies: Value =
        serde_json::from_str(&getfattr_ok(&m.path("dir/f"), "user.mirrorfs.copies")).unwrap();
    let obj = copies.as_object().expect("copies is an object");
    assert_eq!(obj.len(), n, "{copies}");
    for i in 0..n {
        assert_eq!(copies[format!("leg{i}")], "in_sync", "{copies}");
    }

    // The keys follow a rename.
    fs::rename(m.path("dir/f"), m.path("dir/g")).unwrap();
    assert_eq!(
        getfattr_ok(&m.path("dir/g"), "user.mirrorfs.relpath"),
        "/dir/g"
    );
    // They are not listed.
    let out = run("getfattr", &[&"-d", &"-m", &"-", &m.path("dir/g")]);
    assert!(
        !text(&out.stdout).contains("mirrorfs"),
        "getfattr -d lists control keys on a file: {}",
        text(&out.stdout)
    );
    m.finish();
}

// ---------------------------------------------------------------------------------------------
// Leg attributes
// ---------------------------------------------------------------------------------------------

#[test]
fn leg_attributes_show_in_stats() {
    require_fuse!();
    require_tool!("getfattr");
    let dirs = TestDirs::new(2);
    let legs = format!(
        "{}=name=fast,nonrot:{}=rot,writemostly",
        p(&dirs.legs[0]),
        p(&dirs.legs[1])
    );
    let mnt = dirs.mnt.clone();
    let m = mount_with_args(
        dirs,
        vec![
            legs.into(),
            mnt.into(),
            "-o".into(),
            "read_policy=first".into(),
        ],
    );
    let st = stats(&m);
    let (a, b) = (&st.legs[0], &st.legs[1]);
    assert_eq!(
        (
            a.name.as_str(),
            a.rotational,
            a.rotational_source.as_str(),
            a.writemostly
        ),
        ("fast", false, "option", false),
        "leg0 with name=fast,nonrot"
    );
    assert_eq!(
        (
            b.name.as_str(),
            b.rotational,
            b.rotational_source.as_str(),
            b.writemostly
        ),
        ("leg1", true, "option", true),
        "leg1 with rot,writemostly"
    );
    assert_eq!(
        Path::new(&a.path),
        m.leg(0),
        "the path is without attributes"
    );
    assert_eq!(Path::new(&b.path), m.leg(1));
    assert_eq!(
        getfattr_ok(m.mnt(), "user.mirrorfs.legs"),
        legs_arg(m.legs())
    );
    fs::write(m.path("f"), b"x").unwrap();
    assert_eq!(getfattr_ok(&m.path("f"), "user.mirrorfs.readleg"), "fast");
    let copies: Value =
        serde_json::from_str(&getfattr_ok(&m.path("f"), "user.mirrorfs.copies")).unwrap();
    assert_eq!(
        copies,
        serde_json::json!({"fast": "in_sync", "leg1": "in_sync"})
    );
    let out = mirrorfs(&[OsString::from("status"), m.mnt().into()]);
    assert_exit(&out, 0, "status");
    let s = text(&out.stdout);
    assert!(s.contains("  fast ") && s.contains("(writemostly)"), "{s}");
    m.finish();
}

#[test]
fn bad_leg_attributes_refuse_the_mount() {
    require_fuse!();
    let dirs = TestDirs::new(2);
    let (l0, l1) = (p(&dirs.legs[0]), p(&dirs.legs[1]));
    for (legs, says) in [
        (format!("{l0}=fast:{l1}"), "unknown attribute 'fast'"),
        (format!("{l0}=rot,nonrot:{l1}"), "'rot' and 'nonrot'"),
        (format!("{l0}=name=a b:{l1}"), "invalid name"),
        (format!("{l0}=name=x:{l1}=name=x"), "'x' is used twice"),
        (format!("{l0}:{l1}=name=leg0"), "'leg0' is used twice"),
    ] {
        let out = mirrorfs(&[legs.as_str(), &p(&dirs.mnt)]);
        assert_exit(&out, 1, &legs);
        assert!(
            text(&out.stderr).contains(says),
            "{legs}: {}",
            text(&out.stderr)
        );
        assert!(!is_mounted(&dirs.mnt), "{legs} mounted anyway");
        for l in &dirs.legs {
            assert!(!l.join(".mirrorfs").exists(), "{legs} wrote a superblock");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// mirrorfs status, iostat, get, set, list
// ---------------------------------------------------------------------------------------------

legs_test!(status_of_a_healthy_mount);

fn status_of_a_healthy_mount(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).option("read_policy=first").mount();
    fs::write(m.path("f"), pattern(1 << 20, 1)).unwrap();
    let out = mirrorfs(&[OsString::from("status"), m.mnt().into()]);
    assert_exit(&out, 0, "status of a healthy mount");
    let s = text(&out.stdout);
    assert!(s.contains(&format!("mount: {}", p(m.mnt()))), "{s}");
    assert!(s.contains("state: ONLINE"), "{s}");
    assert!(s.contains("policy: first"), "{s}");
    assert!(s.contains("errors: No known data errors"), "{s}");
    for i in 0..n {
        let line = s
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("leg{i} ")))
            .unwrap_or_else(|| panic!("no line for leg{i}:\n{s}"));
        assert!(
            line.contains("ONLINE") && line.contains(&p(m.leg(i))),
            "{line}"
        );
        assert!(line.contains("1.0M"), "leg{i} wrote 1 MiB: {line}");
    }

    let out = mirrorfs(&[OsString::from("status"), "--json".into(), m.mnt().into()]);
    assert_exit(&out, 0, "status --json");
    let st: Stats = serde_json::from_slice(&out.stdout).expect("status --json parses");
    assert_eq!(Path::new(&st.mount), m.mnt());
    assert_eq!(st.legs.len(), n);
    assert_every_field(&serde_json::from_slice(&out.stdout).unwrap(), n);

    // Without a mount: every mirrorfs mount, ours among them (other tests' mounts may be
    // there too, in any state, so the exit status is not checked).
    let out = mirrorfs(&["status"]);
    assert!(
        text(&out.stdout).contains(&format!("mount: {}", p(m.mnt()))),
        "status without arguments: {}",
        text(&out.stdout)
    );

    // Not a mirrorfs mount, a missing path, a bad flag: 2.
    let out = mirrorfs(&[OsString::from("status"), m.root().into()]);
    assert_exit(&out, 2, "status of a plain directory");
    assert!(text(&out.stderr).contains("not a mirrorfs mount"));
    let out = mirrorfs(&[OsString::from("status"), m.root().join("missing").into()]);
    assert_exit(&out, 2, "status of a missing path");
    let out = mirrorfs(&[
        OsString::from("status"),
        "--frobnicate".into(),
        m.mnt().into(),
    ]);
    assert_exit(&out, 2, "status --frobnicate");
    // The worst of several mounts.
    let out = mirrorfs(&[OsString::from("status"), m.mnt().into(), m.root().into()]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "status of a mount and a plain dir"
    );
    assert!(text(&out.stdout).contains("state: ONLINE"));
    m.finish();
}

/// A mount with a dropped leg, degraded for real: leg1 is a tmpfs of its own, remounted
/// read-only once mirrorfs runs; the next file creation fails with EROFS on leg1 only, so leg1
/// is dropped and the creation succeeds on leg0. (A read-only *bind* mount of a leg does not
/// work: mirrorfs holds descriptors opened on the leg's original mount, and those stay
/// writable. A full tmpfs does not either: the free-space reserve refuses the write with
/// ENOSPC on every leg before any is written, and drops none.)
#[test]
fn status_of_a_degraded_mount() {
    require_fuse!();
    require_tool!("getfattr");
    let mut dirs = TestDirs::new(2);
    dirs.mount_tmpfs_leg(1, "16m");
    let leg1 = dirs.legs[1].clone();
    let mut m = TestMirror::new(2)
        .with_dirs(dirs)
        .option("read_policy=first")
        .mount();
    fs::write(m.path("old"), b"before").unwrap();
    let out = run("mount", &[&"-o", &"remount,ro", &leg1]);
    assert!(out.status.success(), "remount ro: {}", text(&out.stderr));
    let data = pattern(300_000, 7);
    fs::write(m.path("big"), &data).expect("a creation that only leg1 refuses succeeds");

    let out = mirrorfs(&[OsString::from("status"), m.mnt().into()]);
    assert_exit(&out, 1, "status of a degraded mount");
    let s = text(&out.stdout);
    eprintln!("{s}");
    assert!(s.contains("state: DEGRADED"), "{s}");
    assert!(s.contains("1 of 2 legs online"), "{s}");
    let line = s
        .lines()
        .find(|l| l.trim_start().starts_with("leg1 "))
        .unwrap_or_else(|| panic!("no line for leg1:\n{s}"));
    assert!(line.contains("FAULTED"), "{line}");

    let out = mirrorfs(&[OsString::from("status"), "--json".into(), m.mnt().into()]);
    assert_exit(&out, 1, "status --json of a degraded mount");
    let st: Stats = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((st.state, st.legs_online), (MountState::Degraded, 1));
    assert_eq!(st.legs[0].state, LegState::InSync);
    assert_eq!(st.legs[1].state, LegState::Failed);
    assert_eq!(getfattr_ok(m.mnt(), "user.mirrorfs.state"), "DEGRADED");
    let copies: Value =
        serde_json::from_str(&getfattr_ok(&m.path("big"), "user.mirrorfs.copies")).unwrap();
    assert_eq!(
        copies,
        serde_json::json!({"leg0": "in_sync", "leg1": "stale"})
    );
    // The data is served from leg0.
    read_once(&m, "big", &data);
    assert_eq!(fs::read(m.path("old")).unwrap(), b"before");
    m.unmount();
    assert_bytes_eq(&fs::read(m.leg(0).join("big")).unwrap(), &data, "leg0/big");
    assert!(
        !m.leg(1).join("big").exists(),
        "leg1 was written after it was dropped"
    );
}

#[test]
fn iostat_reports() {
    require_fuse!();
    let m = TestMirror::new(3).mount();
    fs::write(m.path("f"), pattern(4 << 20, 2)).unwrap();
    let leg_lines = |s: &str, i: usize| {
        s.lines()
            .filter(|l| l.starts_with(&format!("leg{i} ")))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };

    let out = mirrorfs(&[OsString::from("iostat"), m.mnt().into()]);
    assert_exit(&out, 0, "iostat MOUNT");
    let s = text(&out.stdout);
    assert_eq!(
        s.lines().filter(|l| l.starts_with("leg ")).count(),
        1,
        "{s}"
    );
    for i in 0..3 {
        let lines = leg_lines(&s, i);
        assert_eq!(lines.len(), 1, "one line for leg{i}:\n{s}");
        // leg  read/s  write/s  rMB/s  wMB/s ...: every leg wrote since the mount.
        let cols: Vec<&str> = lines[0].split_whitespace().collect();
        let wmb: f64 = cols[4].parse().unwrap();
        assert!(
            wmb > 0.0,
            "wMB/s of leg{i} after a 4 MiB write: {}",
            lines[0]
        );
        assert!(lines[0].ends_with("ONLINE"), "{}", lines[0]);
    }

    let out = mirrorfs(&[
        OsString::from("iostat"),
        m.mnt().into(),
        "0.2".into(),
        "2".into(),
    ]);
    assert_exit(&out, 0, "iostat MOUNT 0.2 2");
    let s = text(&out.stdout);
    assert_eq!(
        s.lines().filter(|l| l.starts_with("leg ")).count(),
        2,
        "{s}"
    );
    for i in 0..3 {
        assert_eq!(leg_lines(&s, i).len(), 2, "two reports for leg{i}:\n{s}");
    }

    for bad in [
        vec!["0"],
        vec!["-1"],
        vec!["1", "0"],
        vec!["1", "1.5"],
        vec!["1", "2", "3"],
    ] {
        let mut args: Vec<OsString> = vec!["iostat".into(), m.mnt().into()];
        args.extend(bad.iter().map(OsString::from));
        let out = mirrorfs(&args);
        assert_exit(&out, 2, &format!("iostat MOUNT {bad:?}"));
    }
    // Every hostile value as the interval or the count: one usage line, never a panic.
    for v in mirrorfs::value::HOSTILE
        .iter()
        .filter(|v| !v.contains('\0'))
    {
        let mut cases = vec![vec![*v]];
        if mirrorfs::value::count(v, 1, u64::MAX).is_err() {
            // (A count that is a count, 4294967297, would take that many reports.)
            cases.push(vec!["0.1", *v]);
        }
        for args in cases {
            let mut a: Vec<OsString> = vec!["iostat".into(), m.mnt().into()];
            a.extend(args.iter().map(OsString::from));
            let out = mirrorfs(&a);
            assert_exit(&out, 2, &format!("iostat MOUNT {args:?}"));
            assert!(!text(&out.stderr).contains("panicked"), "{args:?}");
        }
    }
    let out = mirrorfs(&[OsString::from("iostat"), m.root().into()]);
    assert_exit(&out, 2, "iostat of a plain directory");
    m.finish();
}

#[test]
fn get_set_list() {
    require_fuse!();
    let m = TestMirror::new(2).option("read_policy=first").mount();
    let mnt: OsString = m.mnt().into();
    let cmd = |args: &[&str]| {
        let mut v: Vec<OsString> = vec![args[0].into(), mnt.clone()];
        v.extend(args[1..].iter().map(OsString::from));
        mirrorfs(&v)
    };

    let out = cmd(&["get", "read_policy"]);
    assert_exit(&out, 0, "get read_policy");
    assert_eq!(text(&out.stdout), "first\n");
    let out = cmd(&["get", "user.mirrorfs.state"]);
    assert_exit(&out, 0, "get with the full name");
    assert_eq!(text(&out.stdout), "ONLINE\n");

    let out = cmd(&["set", "read_policy", "first"]);
    assert_exit(&out, 0, "set read_policy first");
    assert_eq!(text(&out.stdout), "");

    let out = cmd(&["set", "read_policy", "nope"]);
    assert_exit(&out, 1, "set read_policy nope");
    assert!(
        text(&out.stderr).contains("invalid value"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(text(&cmd(&["get", "read_policy"]).stdout), "first\n");

    let out = cmd(&["set", "threads", "2"]);
    assert_exit(&out, 1, "set threads 2");
    assert!(text(&out.stderr).contains("cannot be changed"));
    let out = cmd(&["get", "nokey"]);
    assert_exit(&out, 1, "get nokey");
    assert!(text(&out.stderr).contains("no key 'nokey'"));
    let out = cmd(&["set", "nokey", "1"]);
    assert_exit(&out, 1, "set nokey");
    let out = cmd(&["set", "stats_reset", "1"]);
    assert_exit(&out, 0, "set stats_reset");
    for bad in [&["get"][..], &["set", "read_policy"], &["list", "extra"]] {
        let out = cmd(bad);
        assert_exit(&out, 2, &format!("{bad:?}"));
    }

    let out = cmd(&["list"]);
    assert_exit(&out, 0, "list");
    let s = text(&out.stdout);
    let pairs: Vec<(&str, &str)> = s
        .lines()
        .map(|l| {
            l.split_once('=')
                .unwrap_or_else(|| panic!("list line without '=': {l:?}"))
        })
        .collect();
    for want in ["read_policy=first", "state=ONLINE", "ro=false"] {
        assert!(s.lines().any(|l| l == want), "list lacks {want}:\n{s}");
    }
    for k in ["version", "pid", "mount", "legs", "threads"] {
        assert!(pairs.iter().any(|(x, _)| *x == k), "list lacks {k}:\n{s}");
    }
    assert!(
        !pairs.iter().any(|(k, _)| *k == "stats"),
        "list prints the stats:\n{s}"
    );
    for (k, v) in &pairs {
        if *k == "stats" {
            continue;
        }
        let got = text(&cmd(&["get", k]).stdout);
        assert_eq!(got.trim_end_matches('\n'), *v, "get {k} vs list");
    }
    m.finish();
}

/// `get`/`set` on a path that is no mirrorfs mount: exit 2, and nothing written there.
#[test]
fn get_set_refuse_a_plain_directory() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = mirrorfs(&[
        OsString::from("set"),
        d.into(),
        "read_policy".into(),
        "first".into(),
    ]);
    let stored = list_xattr(d).unwrap();
    assert!(
        stored.is_empty(),
        "mirrorfs set stored {stored:?} on a plain directory (exit {:?})",
        out.status.code()
    );
    assert_exit(&out, 2, "set on a plain directory");
    let out = mirrorfs(&[OsString::from("get"), d.into(), "read_policy".into()]);
    assert_exit(&out, 2, "get on a plain directory");
    assert!(text(&out.stderr).contains("not a mirrorfs mount"));
    let out = mirrorfs(&[OsString::from("list"), d.into()]);
    assert_exit(&out, 2, "list on a plain directory");
}
