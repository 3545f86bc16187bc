//! The `mirrorfs status`, `iostat`, `get`, `set` and `list` subcommands (issue 5) on healthy and
//! degraded mounts: their reports, exit statuses (0, 1 degraded or refused, 2 not a mirrorfs
//! mount or bad usage) and one-line errors, and no key ever stored on a plain directory.

#[macro_use]
mod common;

use common::*;
use mirrorfs::stats::{LegState, MountState, Stats};
use serde_json::Value;
use std::ffi::OsString;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

legs_test!(status_of_a_healthy_mount);

fn status_of_a_healthy_mount(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).option("read_policy=first").mount();
    fs::write(m.path("f"), pattern(1 << 20, 1)).unwrap();
    let out = run_mirrorfs(&[OsString::from("status"), m.mnt().into()]);
    assert_exit(&out, 0, "status of a healthy mount");
    let s = text(&out.stdout);
    assert!(s.contains(&format!("mount: {}", path_str(m.mnt()))), "{s}");
    assert!(s.contains("state: ONLINE"), "{s}");
    assert!(s.contains("policy: first"), "{s}");
    assert!(s.contains("errors: No known data errors"), "{s}");
    for i in 0..n {
        let line = s
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("leg{i} ")))
            .unwrap_or_else(|| panic!("no line for leg{i}:\n{s}"));
        assert!(
            line.contains("ONLINE") && line.contains(&path_str(m.leg(i))),
            "{line}"
        );
        assert!(line.contains(" 1M "), "leg{i} wrote 1 MiB: {line}");
    }

    let out = run_mirrorfs(&[OsString::from("status"), "--json".into(), m.mnt().into()]);
    assert_exit(&out, 0, "status --json");
    let st: Stats = serde_json::from_slice(&out.stdout).expect("status --json parses");
    assert_eq!(Path::new(&st.mount), m.mnt());
    assert_eq!(st.legs.len(), n);
    assert_every_field(&serde_json::from_slice(&out.stdout).unwrap(), n);

    // Without a mount: every mirrorfs mount, ours among them (other tests' mounts may be
    // there too, in any state, so the exit status is not checked).
    let out = run_mirrorfs(["status"]);
    assert!(
        text(&out.stdout).contains(&format!("mount: {}", path_str(m.mnt()))),
        "status without arguments: {}",
        text(&out.stdout)
    );

    // Not a mirrorfs mount, a missing path, a bad flag: 2.
    let out = run_mirrorfs(&[OsString::from("status"), m.root().into()]);
    assert_exit(&out, 2, "status of a plain directory");
    assert!(text(&out.stderr).contains("not a mirrorfs mount"));
    let out = run_mirrorfs(&[OsString::from("status"), m.root().join("missing").into()]);
    assert_exit(&out, 2, "status of a missing path");
    let out = run_mirrorfs(&[
        OsString::from("status"),
        "--frobnicate".into(),
        m.mnt().into(),
    ]);
    assert_exit(&out, 2, "status --frobnicate");
    // The worst of several mounts.
    let out = run_mirrorfs(&[OsString::from("status"), m.mnt().into(), m.root().into()]);
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
    // checksum=off: an administrator's `remount,ro` is refused (EBUSY) while a file on the
    // filesystem is open for writing, and with checksums the daemon keeps the leg's checksum
    // store open (docs/integrity.md). The kernel's own errors=remount-ro is not refused:
    // tests/safety_read_only_leg.rs shows that case with checksums on.
    let mut m = TestMirror::new(2)
        .with_dirs(dirs)
        .option("read_policy=first")
        .option("checksum=off")
        .mount();
    fs::write(m.path("old"), b"before").unwrap();
    // The kernel sends RELEASE after close() has returned, so for a moment the daemon may
    // still hold "old" open for writing on leg1, and the remount is refused as busy. Retry
    // until the release has reached the daemon.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = run("mount", &[&"-o", &"remount,ro", &leg1], TOOL_TIMEOUT);
        if out.status.success() {
            break;
        }
        let err = text(&out.stderr);
        assert!(
            err.contains("busy") && Instant::now() < deadline,
            "remount ro: {err}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let data = pattern(300_000, 7);
    fs::write(m.path("big"), &data).expect("a creation that only leg1 refuses succeeds");

    let out = run_mirrorfs(&[OsString::from("status"), m.mnt().into()]);
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

    let out = run_mirrorfs(&[OsString::from("status"), "--json".into(), m.mnt().into()]);
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

    let out = run_mirrorfs(&[OsString::from("iostat"), m.mnt().into()]);
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
        // leg  read/s  write/s  rbytes/s  wbytes/s ...: every leg wrote since the mount; the
        // rate is a size as `status` writes them (`1.2M`).
        let cols: Vec<&str> = lines[0].split_whitespace().collect();
        let wrate = mirrorfs::value::size(cols[4])
            .unwrap_or_else(|e| panic!("wbytes/s of leg{i} is not a size ({e}): {}", lines[0]));
        assert!(
            wrate > 0 && cols[4].ends_with(['B', 'K', 'M', 'G']),
            "wbytes/s of leg{i} after a 4 MiB write: {}",
            lines[0]
        );
        assert!(lines[0].ends_with("ONLINE"), "{}", lines[0]);
    }

    let out = run_mirrorfs(&[
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
        let out = run_mirrorfs(&args);
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
            let out = run_mirrorfs(&a);
            assert_exit(&out, 2, &format!("iostat MOUNT {args:?}"));
            assert!(!text(&out.stderr).contains("panicked"), "{args:?}");
        }
    }
    let out = run_mirrorfs(&[OsString::from("iostat"), m.root().into()]);
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
        run_mirrorfs(&v)
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
        let got = got.trim_end_matches('\n');
        if *k == "notify_looks" {
            // A live count (the watcher looks twice a second): it may have moved on between the
            // list and the get, never back.
            let n = |s: &str| s.parse::<u64>().unwrap_or_else(|_| panic!("{k}={s:?}"));
            assert!(n(got) >= n(v), "get {k} {got} went back from list's {v}");
            continue;
        }
        assert_eq!(got, *v, "get {k} vs list");
    }
    m.finish();
}

/// Sizes: `get` and `list` print them for people (`1.5G`), in the syntax `set` takes back, so
/// what was printed can be given again and means the same; `--bytes` prints exact counts, as
/// the keys (getfattr) hold them.
#[test]
fn sizes_are_printed_for_people_and_taken_back() {
    require_fuse!();
    let m = TestMirror::new(2).option("minfreespace=1.5 GiB").mount();
    let mnt: OsString = m.mnt().into();
    let cmd = |args: &[&str]| {
        let mut v: Vec<OsString> = vec![args[0].into()];
        let (flags, rest): (Vec<&str>, Vec<&str>) =
            args[1..].iter().partition(|a| a.starts_with("--"));
        v.extend(flags.iter().map(OsString::from));
        v.push(mnt.clone());
        v.extend(rest.iter().map(OsString::from));
        let out = run_mirrorfs(&v);
        assert_exit(&out, 0, &format!("{args:?}"));
        text(&out.stdout).trim_end_matches('\n').to_string()
    };
    let raw = |key: &str| {
        let v = get_xattr(m.mnt().join(".mirrorfs"), &format!("user.mirrorfs.{key}")).unwrap();
        String::from_utf8(v).unwrap()
    };
    // The mount option, in the IEC spelling with a space: 1.5 GiB exactly.
    assert_eq!(cmd(&["get", "minfreespace"]), "1.5G");
    assert_eq!(cmd(&["get", "--bytes", "minfreespace"]), "1610612736");
    assert_eq!(raw("minfreespace"), "1610612736");
    assert_eq!(cmd(&["get", "resync_speed_max"]), "0B");

    // Every spelling the parser takes, through `set`, and what `get` then prints.
    for (given, shown, bytes) in [
        ("50M", "50M", 52_428_800u64),
        ("512KiB", "512K", 524_288),
        ("2048", "2K", 2048),
        ("1000", "1000B", 1000),
        ("0.25g", "256M", 268_435_456),
        ("1.18G", "1.18G", 1_267_015_352),
        ("12345678", "11.8M", 12_345_678),
    ] {
        cmd(&["set", "resync_speed_max", given]);
        assert_eq!(cmd(&["get", "resync_speed_max"]), shown, "set {given}");
        assert_eq!(
            cmd(&["get", "--bytes", "resync_speed_max"]),
            bytes.to_string(),
            "set {given}"
        );
        assert_eq!(raw("resync_speed_max"), bytes.to_string());
        // What `get` printed, given back, prints the same.
        cmd(&["set", "resync_speed_max", shown]);
        assert_eq!(
            cmd(&["get", "resync_speed_max"]),
            shown,
            "set {shown} again"
        );
    }

    // `list` prints sizes the same way, and exact counts with --bytes.
    let list = cmd(&["list"]);
    assert!(list.lines().any(|l| l == "minfreespace=1.5G"), "{list}");
    assert!(
        list.lines().any(|l| l == "resync_speed_max=11.8M"),
        "{list}"
    );
    let list = cmd(&["list", "--bytes"]);
    assert!(
        list.lines().any(|l| l == "minfreespace=1610612736"),
        "{list}"
    );

    // A size `get` never prints is refused, and nothing changes.
    for bad in ["1.5", "1GB", "-1G", "1.5.2G"] {
        let out = run_mirrorfs(&[
            OsString::from("set"),
            mnt.clone(),
            "minfreespace".into(),
            bad.into(),
        ]);
        assert_exit(&out, 1, &format!("set minfreespace {bad}"));
        assert!(text(&out.stderr).contains("invalid value"), "{bad}");
    }
    assert_eq!(cmd(&["get", "minfreespace"]), "1.5G");

    // The status text writes sizes the same way; the JSON document keeps byte counts.
    fs::write(m.path("f"), pattern(3 << 20, 1)).unwrap();
    let out = run_mirrorfs(&[OsString::from("status"), mnt.clone()]);
    let s = text(&out.stdout);
    assert!(
        s.lines()
            .any(|l| l.trim_start().starts_with("leg0 ") && l.contains(" 3M ")),
        "status does not show 3M written on leg0:\n{s}"
    );
    let out = run_mirrorfs(&[OsString::from("status"), "--json".into(), mnt.clone()]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["legs"][0]["reserve_bytes"], 1_610_612_736u64);
    m.finish();
}

/// `get`/`set` on a path that is no mirrorfs mount: exit 2, and nothing written there.
#[test]
fn get_set_refuse_a_plain_directory() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = run_mirrorfs(&[
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
    let out = run_mirrorfs(&[OsString::from("get"), d.into(), "read_policy".into()]);
    assert_exit(&out, 2, "get on a plain directory");
    assert!(text(&out.stderr).contains("not a mirrorfs mount"));
    let out = run_mirrorfs(&[OsString::from("list"), d.into()]);
    assert_exit(&out, 2, "list on a plain directory");
}
