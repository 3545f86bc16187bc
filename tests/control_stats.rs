//! The statistics document through a real mount (issue 5), read with the real `getfattr`: every
//! field on the mount root and on the control file, with the right JSON type; the other
//! mount-wide keys; the document of 8 legs fitting in one xattr; the read and write counters
//! following the read policy, `stats_reset`, and a live change of the policy.

#[macro_use]
mod common;

use common::*;
use mirrorfs::stats::{LegState, MountState};
use serde_json::Value;
use std::ffi::OsString;
use std::fs;
use std::path::Path;

legs_test!(stats_document_has_every_field);

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
        assert_eq!(getfattr_ok(&at, "user.mirrorfs.mount"), path_str(m.mnt()));
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

/// A file with the same content and mtime on every leg, before the first mount: its first
/// read through the mount cannot come from the kernel's page cache.
fn seed(dirs: &TestDirs, rel: &str, data: &[u8]) {
    for l in &dirs.legs {
        let p = l.join(rel);
        fs::write(&p, data).unwrap();
        utimensat(&p, ts(1_600_000_000, 0), ts(1_600_000_000, 0), true).unwrap();
    }
}

/// The raw JSON of one leg's counters.
#[track_caller]
fn leg_value(m: &Mounted, leg: usize) -> Value {
    let (_, _, v) = stats_of(&m.path(".mirrorfs"));
    v["legs"][leg].clone()
}

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

    let before = stats(m.mnt());
    read_once(&m, "a", &a);
    let after = stats(m.mnt());
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
    let st = stats(m.mnt());
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

    // A live change: `devid:N` sends every read to that leg.
    let last = n - 1;
    let spec = format!("devid:{last}");
    let out = run_mirrorfs(&[
        OsString::from("set"),
        m.mnt().into(),
        "read_policy".into(),
        spec.as_str().into(),
    ]);
    assert_exit(&out, 0, "mirrorfs set read_policy devid");
    assert_eq!(getfattr_ok(m.mnt(), "user.mirrorfs.read_policy"), spec);
    assert_eq!(stats(m.mnt()).read_policy, spec);
    read_once(&m, "b", &b);
    let st = stats(m.mnt());
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
    assert_eq!(stats(m.mnt()).read_policy, "first");
    let base = stats(m.mnt());
    read_once(&m, "c", &c);
    let st = stats(m.mnt());
    assert_eq!(
        st.legs[0].read_bytes - base.legs[0].read_bytes,
        c.len() as u64
    );
    assert_eq!(st.legs[last].read_bytes, base.legs[last].read_bytes);

    m.finish();
}
