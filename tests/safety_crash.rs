//! Never lose data (issue 3): a crash, and the write-intent log that makes it safe. `kill -9`
//! of the daemon during writes: the next mount makes the intent-logged paths (and only those)
//! identical before serving, and every fsync'd byte is on every leg. The write-intent log on and
//! off: with it on, a change is recorded on every leg before it reaches any, and the record is
//! cleared once the file is idle.

#[macro_use]
mod common;

use common::*;
use mirrorfs::stats::MountState;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::sleep;
use std::time::{Duration, Instant};

fn intent_log(leg: &Path) -> PathBuf {
    leg.join(".mirrorfs/intent.log")
}

/// The size of a file, 0 when it does not exist.
fn len_or_zero(p: &Path) -> u64 {
    fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// kill -9 of the daemon during writes
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
// The write-intent log, on and off
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
