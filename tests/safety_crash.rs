//! Never lose data (issue 3): a crash, and the write-intent log that makes it safe. `kill -9`
//! of the daemon during writes: the next mount makes the intent-logged paths (and only those)
//! identical before serving, and every fsync'd byte is on every leg. The write-intent log on and
//! off: with it on, a change is recorded on every leg before it reaches any, and the record is
//! cleared once the file is idle.

#[macro_use]
mod common;

use common::*;
use mirrorfs::meta::changes::{COVER_SLACK, IDLE};
use mirrorfs::stats::MountState;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
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

/// Whether the intent-log records `rec` stand for `path` on `legs`, as crash recovery reads
/// them: `path` itself, or a cover (`/c<T>/<dir>`) of its directory, or of a directory above it
/// with every directory in between at a ctime at or after `T` on some leg (or any directories
/// in between, for a subtree cover `/s<T>/<dir>`), when the copy's ctime is at or after `T` on
/// some leg or a copy is missing on some leg (see `mirrorfs::meta::changes`).
fn stands_for(rec: &BTreeSet<String>, legs: &[PathBuf], path: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    if rec.contains(path) {
        return true;
    }
    let recent = |p: &str, t: u64| {
        legs.iter()
            .any(|l| fs::symlink_metadata(l.join(p)).map_or(true, |m| m.ctime() >= t as i64))
    };
    rec.iter().any(|r| {
        let Some(c) = mirrorfs::meta::changes::parse_cover(r.as_bytes()) else {
            return false;
        };
        let (t, d) = (c.t, c.dir);
        let d = std::str::from_utf8(d).unwrap();
        let below = if d == "." {
            Some(path)
        } else {
            path.strip_prefix(d).and_then(|s| s.strip_prefix('/'))
        };
        let Some(below) = below else {
            return false;
        };
        // Each directory between the cover's and the path's own.
        let parts: Vec<&str> = below.split('/').collect();
        let mut dir = if d == "." {
            String::new()
        } else {
            format!("{d}/")
        };
        for part in &parts[..parts.len() - 1] {
            dir.push_str(part);
            if !c.subtree && !recent(&dir, t) {
                return false;
            }
            dir.push('/');
        }
        recent(path, t)
    })
}

/// The size of a file, 0 when it does not exist.
fn len_or_zero(p: &Path) -> u64 {
    fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

/// The daemon's pid, from `user.mirrorfs.pid`.
#[track_caller]
fn daemon_pid(mnt: &Path) -> i32 {
    getfattr_ok(&mnt.join(".mirrorfs"), "user.mirrorfs.pid")
        .trim()
        .parse()
        .expect("user.mirrorfs.pid is a number")
}

// ---------------------------------------------------------------------------------------------
// Reading the intent logs before the daemon can clear them
// ---------------------------------------------------------------------------------------------

/// The daemon `pid` stopped (SIGSTOP) while this guard lives, continued (SIGCONT) when it
/// drops. A stopped daemon runs no sweep, so it clears no intent entry: the intent logs on the
/// legs keep what they hold. Nothing may go through the mount meanwhile (it would wait for the
/// daemon).
struct Stopped(i32);

impl Stopped {
    #[track_caller]
    fn new(pid: i32) -> Stopped {
        assert_eq!(
            unsafe { libc::kill(pid, libc::SIGSTOP) },
            0,
            "kill -STOP {pid}"
        );
        let stopped = Stopped(pid);
        // Each thread stops at its next chance (one in a system call finishes it first): wait
        // until all of them have, so that no sweep is still under way.
        let start = Instant::now();
        while !all_threads_stopped(pid) {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the daemon {pid} did not stop within 30 s of SIGSTOP"
            );
            sleep(Duration::from_millis(1));
        }
        stopped
    }

    /// `kill -9` of the stopped daemon; returns what kill(2) returned.
    fn kill(self) -> i32 {
        let pid = self.0;
        // No SIGCONT after it: the pid is dead (and could be reused).
        std::mem::forget(self);
        unsafe { libc::kill(pid, libc::SIGKILL) }
    }
}

/// `kill -9` of the stopped daemon of `m`, and its dead mount unmounted; the legs must differ
/// then (what the next mount's recovery has to mend).
#[track_caller]
fn kill_and_unmount(stopped: Stopped, m: &Mounted) {
    let pid = stopped.0;
    assert_eq!(stopped.kill(), 0, "kill -9 {pid}");
    assert!(
        wait_pids_gone(m.daemon_pids(), Duration::from_secs(10)),
        "the daemon survived kill -9"
    );
    // The dead mount is named for what it is, and the metrics say it is down.
    let out = run_mirrorfs([OsStr::new("status"), m.mnt().as_os_str()]);
    assert_exit(&out, 2, "status of a dead mount");
    let err = text(&out.stderr);
    assert!(
        err.contains("daemon of this mount is gone") && err.contains("umount -l"),
        "{err}"
    );
    let (_, prom) = mirrorfs(&[&"status", &"--format=prometheus", &m.mnt()]);
    let down = format!("mirrorfs_up{{mount=\"{}\"}} 0", m.mnt().display());
    assert!(prom.lines().any(|l| l == down), "{down} not in:\n{prom}");
    umount2(m.mnt(), 0).expect("umount of the dead mount");
    assert!(!legs_differences(m.legs()).is_empty());
}

impl Drop for Stopped {
    fn drop(&mut self) {
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// True once every thread of `pid` is stopped (state `T` in /proc).
fn all_threads_stopped(pid: i32) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|t| {
        fs::read_to_string(t.path().join("stat")).is_ok_and(|st| {
            st.rfind(')')
                .and_then(|i| st[i + 1..].trim_start().chars().next())
                == Some('T')
        })
    })
}

/// Runs `change` (changes through the mount), then stops the daemon, so that the intent logs
/// can be read while they must still name what `change` changed. The daemon clears an entry
/// only once it has been idle for [`IDLE`]: if the daemon stopped less than IDLE after `change`
/// began (and after `also_since`, when other changes that must still be logged began, asked
/// once the daemon is stopped), no such entry can have been cleared, however slow the machine
/// was. This replaces trusting that the check comes "right after" the writes. When the stop
/// came later than that (a busy machine), the daemon is continued and `change` made again.
#[track_caller]
fn change_then_stop(
    pid: i32,
    mut change: impl FnMut(),
    also_since: impl Fn() -> Option<Instant>,
) -> Stopped {
    for attempt in 1..=10 {
        let began = Instant::now();
        change();
        let stopped = Stopped::new(pid);
        let since = also_since().map_or(began, |t| t.min(began));
        let took = since.elapsed();
        if took < IDLE {
            return stopped;
        }
        eprintln!(
            "attempt {attempt}: the daemon stopped {took:?} after the changes began, later than \
             the intent log's idle time ({IDLE:?}); once more"
        );
    }
    panic!("the daemon never stopped within {IDLE:?} of the changes, in 10 attempts");
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
/// length of each file known to be on stable storage, and in `last_write` when the last
/// completed write of each file began. Stops at the first error (the daemon is killed) and
/// returns it, or at `stop`.
fn hot_writer(
    mnt: PathBuf,
    synced: Arc<Mutex<BTreeMap<String, usize>>>,
    last_write: Arc<Mutex<BTreeMap<String, Instant>>>,
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
            let began = Instant::now();
            if let Err(e) = f.write_all(&hot_chunk(k, i)).and_then(|()| f.sync_data()) {
                return Some(e);
            }
            synced
                .lock()
                .unwrap()
                .insert(format!("hot{k}"), (i + 1) * HOT_CHUNK);
            last_write.lock().unwrap().insert(format!("hot{k}"), began);
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
///
/// The intent logs are read, and the daemon killed, with the daemon stopped (SIGSTOP) within
/// the log's idle time of the changes they must name (see [`change_then_stop`]): a busy machine
/// cannot let an entry be cleared before it is looked at.
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
    let pid = daemon_pid(&mnt);
    assert!(
        m.daemon_pids().contains(&pid),
        "user.mirrorfs.pid {pid} is not among the daemon's pids {:?}",
        m.daemon_pids()
    );

    // Cold files: logged while written, cleared once idle (~2-3 s), then left idle > 5 s. In a
    // directory of their own: the hot files' directory keeps a cover until the kill, which
    // stands for whatever changes in it after its time (as cold0 on leg1 below would).
    fs::create_dir(mnt.join("colddir")).unwrap();
    let cold: Vec<String> = (0..3).map(|i| format!("colddir/cold{i}")).collect();
    let stopped = change_then_stop(
        pid,
        || {
            for (i, c) in cold.iter().enumerate() {
                fs::write(mnt.join(c), pattern(300_000, 100 + i as u64)).unwrap();
            }
        },
        || None,
    );
    for leg in &legs {
        let rec = log_records(&intent_log(leg));
        assert!(
            cold.iter().all(|c| stands_for(&rec, &legs, c)),
            "{} right after the writes: {rec:?}",
            intent_log(leg).display()
        );
    }
    drop(stopped);
    // (Counted from here, after the stop: the idle time below is only the longer for it.)
    let cold_written = Instant::now();
    // Cleared by a sweep (every second) once idle for IDLE (2 s): 30 s is far beyond that.
    let cleared = wait_for(Duration::from_secs(30), || {
        legs.iter().all(|l| {
            cold.iter()
                .all(|c| !stands_for(&log_records(&intent_log(l)), &legs, c))
        })
    });
    assert!(
        cleared,
        "the intent entries of idle files are not cleared after 30 s: {:?}",
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
    let last_write: Arc<Mutex<BTreeMap<String, Instant>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (mnt, synced, last_write, stop) = (
            mnt.clone(),
            synced.clone(),
            last_write.clone(),
            stop.clone(),
        );
        std::thread::spawn(move || hot_writer(mnt, synced, last_write, stop))
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
    // warm: written once, 0.3 s before the kill (the sleep is part of the scenario: a file no
    // longer written but not idle long enough to be cleared). The daemon is stopped before the
    // kill within the idle time of warm's write and of each hot file's last write, so all of
    // them are still logged when it dies.
    let warm = pattern(200_000, 200);
    let stopped = change_then_stop(
        pid,
        || {
            fs::write(mnt.join("warm"), &warm).unwrap();
            sleep(Duration::from_millis(300));
        },
        || last_write.lock().unwrap().values().min().copied(),
    );
    assert!(!writer.is_finished(), "the writer stopped before the kill");
    assert_eq!(stopped.kill(), 0, "kill -9 {pid}");
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
        DEAD_DAEMON_ERRNOS.contains(&errno_of(&e)),
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
                stands_for(&rec, &legs, &format!("hot{k}")),
                "{} lacks hot{k}, written up to the kill: {rec:?}",
                intent_log(leg).display()
            );
        }
        assert!(
            stands_for(&rec, &legs, "warm"),
            "{} lacks warm, written 0.3 s before the kill: {rec:?}",
            intent_log(leg).display()
        );
        for c in &cold {
            assert!(
                !stands_for(&rec, &legs, c),
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
        .filter(|d| {
            let path = d.split(": ").next().unwrap_or_default();
            !stands_for(&union, &legs, path)
        })
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
        stands_for(&union, &legs, "hot0") && !stands_for(&union, &legs, "colddir/cold0"),
        "{union:?}"
    );
    let hot0_len = synced["hot0"];
    corrupt_keeping_times(&legs[1].join("hot0"), hot0_len as u64 / 2, 1);
    corrupt_keeping_times(&legs[1].join("colddir/cold0"), 1000, 1);
    let diffs = legs_differences(&legs);
    // hot0 may differ in size already (the kill came between the legs' parts of a write),
    // and then the size is what the comparison reports.
    for (f, how) in [("hot0", ""), ("colddir/cold0", "content differs")] {
        assert!(
            diffs
                .iter()
                .any(|d| d.starts_with(&format!("{f}: ")) && d.contains(how)),
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
        diffs.len() == 1 && diffs[0].starts_with("colddir/cold0: ") && diffs[0].contains("content"),
        "after crash recovery only cold0 (in no intent log) should still differ: {diffs:?}"
    );
    assert_bytes_eq(
        &fs::read(legs[1].join("colddir/cold0")).unwrap()[1000..1001],
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

    // The unlogged difference is a scrub's job: found. cold0 has checksums, which say leg1's
    // copy is not as written; it was written through leg1's filesystem (its ctime moved), so it
    // is reported as changed behind the mirror's back, not reverted by a plain scrub...
    mirrorfs_ok(&[&"scrub", &"start", &mnt]);
    let doc = wait_scrubbed(&mnt);
    let line = &differing(&doc)[0];
    assert!(
        line.starts_with("/colddir/cold0 on leg 1 ") && line.ends_with("(diverged), not repaired"),
        "{doc}"
    );
    assert_eq!(doc["repaired"].as_u64(), Some(0), "{doc}");
    // ...but by the scrub that names the leg to trust.
    mirrorfs_ok(&[&"scrub", &"start", &mnt, &"--repair=leg0"]);
    let doc = wait_scrubbed(&mnt);
    assert_eq!(doc["repaired"].as_u64(), Some(1), "{doc}");
    assert_content_on_legs(&legs, "colddir/cold0", &pattern(300_000, 100));
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
    let pid = daemon_pid(&mnt);
    let mut f = OpenOptions::new().append(true).open(mnt.join("f")).unwrap();
    // d and d/g must be older than the root cover written below (its time is 2 s before it
    // is written): a cover also stands for recent entries in recent subdirectories.
    std::thread::sleep(COVER_SLACK + Duration::from_millis(1500));
    // The logs are read with the daemon stopped within the log's idle time of the writes (see
    // [`change_then_stop`]); on a machine too busy for that the writes are made again (one more
    // MiB on f, h rewritten: nothing below depends on how much).
    let stopped = change_then_stop(
        pid,
        || {
            f.write_all(&pattern(MIB, 62)).unwrap();
            fs::write(mnt.join("h"), b"h").unwrap();
        },
        || None,
    );
    for leg in &legs {
        let rec = log_records(&intent_log(leg));
        for want in ["f", "h", "."] {
            assert!(
                stands_for(&rec, &legs, want),
                "{} lacks {want:?} right after the writes: {rec:?}",
                intent_log(leg).display()
            );
        }
        assert!(
            !stands_for(&rec, &legs, "d/g"),
            "an unchanged file is logged: {rec:?}"
        );
    }
    drop(stopped);
    drop(f);
    // Cleared by a sweep (every second) once idle for IDLE (2 s): 30 s is far beyond that.
    let cleared = wait_for(Duration::from_secs(30), || {
        legs.iter().all(|l| log_records(&intent_log(l)).is_empty())
    });
    assert!(
        cleared,
        "the intent entries are not cleared 30 s after the last write"
    );
    assert_no_mirrorfs_leak(&mnt);
    assert_legs_identical(&legs);
    r.unmount();
    assert_legs_identical(&legs);
    for leg in &legs {
        assert_eq!(len_or_zero(&intent_log(leg)), 0, "after a clean unmount");
    }
}

/// A file whose own name ends in " (deleted)" (what the kernel appends to a name that is gone)
/// is an ordinary file: its writes are in the write-intent log under that name.
#[test]
fn a_file_named_deleted_is_logged_like_any_other() {
    require_fuse!();
    let mut m = TestMirror::new(2).mount();
    let mnt = m.mnt().to_path_buf();
    let legs = m.legs().to_vec();
    fs::create_dir(mnt.join("d")).unwrap();
    fs::write(mnt.join("d/notes (deleted)"), b"before").unwrap();
    m.check_and_unmount();
    // A mount of its own, so that no cover from the creates stands for the file.
    let mut r = mount_ok(&legs, &mnt, &[]);
    let pid = daemon_pid(&mnt);
    let mut f = OpenOptions::new()
        .append(true)
        .open(mnt.join("d/notes (deleted)"))
        .unwrap();
    let stopped = change_then_stop(pid, || f.write_all(b" and after").unwrap(), || None);
    for leg in &legs {
        let rec = log_records(&intent_log(leg));
        assert!(
            rec.contains("d/notes (deleted)"),
            "{} lacks the file: {rec:?}",
            intent_log(leg).display()
        );
    }
    drop(stopped);
    drop(f);
    r.unmount();
    for leg in &legs {
        assert_eq!(
            fs::read(leg.join("d/notes (deleted)")).unwrap(),
            b"before and after"
        );
    }
}

/// A burst of creates in one directory, and in new directories below it, is logged by one
/// record, the directory's cover, not one per file; after `kill -9`, what the cover stands for
/// is made identical before the mount serves: a file whose copy on leg1 lost bytes, one leg1
/// lost entirely, one leg1 holds truncated, a file renamed into the directory, and files in
/// the new directories that leg1 lost or holds damaged.
#[test]
fn kill_9_after_a_burst_of_creates_recovers_what_the_cover_stands_for() {
    require_fuse!();
    require_tool!("getfattr");
    let m = TestMirror::new(2).mount();
    let mnt = m.mnt().to_path_buf();
    let legs = m.legs().to_vec();
    fs::create_dir(mnt.join("d")).unwrap();
    fs::create_dir(mnt.join("e")).unwrap();
    fs::write(mnt.join("e/moved"), pattern(50_000, 99)).unwrap();
    let pid = daemon_pid(&mnt);
    const N: usize = 60;
    let content = |i: usize| pattern(20_000 + i * 100, 500 + i as u64);
    let nested = |i: usize| {
        if i.is_multiple_of(2) {
            format!("d/sub/g{i}")
        } else {
            format!("d/sub/deeper/g{i}")
        }
    };
    let stopped = change_then_stop(
        pid,
        || {
            for i in 0..N {
                fs::write(mnt.join(format!("d/f{i}")), content(i)).unwrap();
            }
            fs::rename(mnt.join("e/moved"), mnt.join("d/moved")).unwrap();
            fs::create_dir_all(mnt.join("d/sub/deeper")).unwrap();
            for i in 0..N {
                fs::write(mnt.join(nested(i)), content(i)).unwrap();
            }
        },
        || None,
    );
    for leg in &legs {
        let rec = log_records(&intent_log(leg));
        assert!(
            rec.len() <= 4,
            "{} holds {} records for {} new files in one directory and below: {rec:?}",
            intent_log(leg).display(),
            rec.len(),
            2 * N
        );
        for i in 0..N {
            assert!(stands_for(&rec, &legs, &format!("d/f{i}")), "{rec:?}");
            assert!(stands_for(&rec, &legs, &nested(i)), "{rec:?}");
        }
        assert!(stands_for(&rec, &legs, "d/moved"), "{rec:?}");
    }
    // What a power cut could leave on leg1: lost bytes, a lost file, a short file, and a
    // moved file's lost bytes (the daemon is stopped: nothing goes through the mount).
    corrupt_keeping_times(&legs[1].join("d/f7"), 5_000, 3);
    fs::remove_file(legs[1].join("d/f33")).unwrap();
    let short = fs::File::options()
        .write(true)
        .open(legs[1].join("d/f40"))
        .unwrap();
    short.set_len(100).unwrap();
    drop(short);
    corrupt_keeping_times(&legs[1].join("d/moved"), 10, 1);
    corrupt_keeping_times(&legs[1].join(nested(9)), 1_000, 2);
    fs::remove_file(legs[1].join(nested(12))).unwrap();
    kill_and_unmount(stopped, &m);

    let mut r = mount_ok(&legs, &mnt, &[]);
    assert_legs_identical(&legs);
    for i in 0..N {
        assert_content_on_legs(&legs, &format!("d/f{i}"), &content(i));
        assert_bytes_eq(
            &fs::read(mnt.join(format!("d/f{i}"))).unwrap(),
            &content(i),
            &format!("d/f{i} through the mount"),
        );
        assert_content_on_legs(&legs, &nested(i), &content(i));
    }
    assert_content_on_legs(&legs, "d/moved", &pattern(50_000, 99));
    r.unmount();
    assert_legs_identical(&legs);
}

/// Files removed from many old directories of one tree (`find t -type f -delete`) are logged
/// by a few records: the first directories' covers, then one subtree cover of the tree, not
/// one record per directory. After `kill -9`, an unlink that reached leg0 but not leg1, in a
/// directory whose parent the removals left unchanged, is found through the subtree cover and
/// redone before the mount serves.
#[test]
fn kill_9_while_emptying_old_directories_recovers_through_a_subtree_cover() {
    require_fuse!();
    require_tool!("getfattr");
    let m = TestMirror::new(2).mount();
    let mnt = m.mnt().to_path_buf();
    let legs = m.legs().to_vec();
    let dir = |d: usize, e: usize| format!("t/d{d}/e{e}");
    for d in 0..8 {
        for e in 0..3 {
            fs::create_dir_all(mnt.join(dir(d, e))).unwrap();
            for f in 0..4 {
                fs::write(mnt.join(format!("{}/f{f}", dir(d, e))), b"old").unwrap();
            }
        }
    }
    // Old by the time of the covers below (their time is 2 s before they are written), and
    // nothing dirty any more.
    std::thread::sleep(COVER_SLACK + Duration::from_millis(1500));
    assert!(
        wait_for(Duration::from_secs(30), || legs
            .iter()
            .all(|l| log_records(&intent_log(l)).is_empty())),
        "the intent logs are not emptied"
    );
    let pid = daemon_pid(&mnt);
    let stopped = change_then_stop(
        pid,
        || {
            for d in 0..8 {
                for e in 0..3 {
                    for f in 0..4 {
                        fs::remove_file(mnt.join(format!("{}/f{f}", dir(d, e)))).unwrap();
                    }
                }
            }
        },
        || None,
    );
    for leg in &legs {
        let rec = log_records(&intent_log(leg));
        assert!(
            rec.len() <= 5,
            "{} holds {} records for removals in 24 directories: {rec:?}",
            intent_log(leg).display(),
            rec.len()
        );
        assert!(
            rec.iter().any(|r| r.starts_with("/s") && r.ends_with("/t")),
            "no subtree cover of t: {rec:?}"
        );
    }
    // The tenth directory emptied (d3/e0) is covered by the subtree cover only, and d3 is
    // unchanged. Leg1 keeps one of its files, as if that unlink had not reached it.
    let kept = format!("{}/f1", dir(3, 0));
    fs::write(legs[1].join(&kept), b"old").unwrap();
    kill_and_unmount(stopped, &m);

    let mut r = mount_ok(&legs, &mnt, &[]);
    assert_legs_identical(&legs);
    assert!(!mnt.join(&kept).exists());
    r.unmount();
    assert_legs_identical(&legs);
}

/// Objects that stay dirty after they, or a directory above them, were renamed: a file kept
/// open and written after its directory's rename, a file kept open and written after its own
/// move to another directory, and files created over and over in a renamed directory that
/// already had a cover. Each later change is logged under the object's new path (or a cover of
/// it), long after the covers the renames wrote have gone idle; after `kill -9`, a write that
/// reached leg0 but not leg1 at each new path is redone before the mount serves.
#[test]
fn kill_9_after_renames_recovers_what_stayed_dirty_at_the_new_paths() {
    use std::os::unix::fs::FileExt;
    require_fuse!();
    require_tool!("getfattr");
    let mut m = TestMirror::new(2).mount();
    let mnt = m.mnt().to_path_buf();
    let legs = m.legs().to_vec();
    for d in ["d", "x", "y", "c"] {
        fs::create_dir(mnt.join(d)).unwrap();
    }
    fs::write(mnt.join("d/f"), pattern(40_000, 1)).unwrap();
    fs::write(mnt.join("x/g"), pattern(40_000, 2)).unwrap();
    // Clean: nothing is dirty, nothing covered.
    m.unmount();
    m.mount_again(&[]);
    let open = |p: &str| OpenOptions::new().write(true).open(mnt.join(p)).unwrap();
    let (f, g) = (open("d/f"), open("x/g"));
    f.write_all_at(b"first", 0).unwrap();
    g.write_all_at(b"first", 0).unwrap();
    fs::write(mnt.join("c/n0"), b"new").unwrap();
    fs::rename(mnt.join("d"), mnt.join("e")).unwrap();
    fs::rename(mnt.join("x/g"), mnt.join("y/g")).unwrap();
    fs::rename(mnt.join("c"), mnt.join("c2")).unwrap();
    // Changes go on for longer than the renames' covers stay: they are cleared meanwhile
    // unless something they stand for is still changing.
    let mut n = 1;
    let until = Instant::now() + IDLE * 2 + Duration::from_millis(1500);
    while Instant::now() < until {
        f.write_all_at(b"again", 100).unwrap();
        g.write_all_at(b"again", 100).unwrap();
        fs::write(mnt.join(format!("c2/n{n}")), b"new").unwrap();
        n += 1;
        sleep(Duration::from_millis(250));
    }
    drop((f, g));
    let pid = daemon_pid(&mnt);
    let stopped = change_then_stop(
        pid,
        || {
            open("e/f").write_all_at(b"last", 200).unwrap();
            open("y/g").write_all_at(b"last", 200).unwrap();
            fs::write(mnt.join(format!("c2/n{n}")), b"new").unwrap();
        },
        || None,
    );
    for leg in &legs {
        let rec = log_records(&intent_log(leg));
        for p in ["e/f", "y/g", &format!("c2/n{}", n - 1), &format!("c2/n{n}")] {
            assert!(
                stands_for(&rec, &legs, p),
                "nothing stands for {p}: {rec:?}"
            );
        }
    }
    // What a power cut during the last writes could leave on leg1.
    corrupt_keeping_times(&legs[1].join("e/f"), 200, 4);
    corrupt_keeping_times(&legs[1].join("y/g"), 200, 4);
    fs::remove_file(legs[1].join(format!("c2/n{n}"))).unwrap();
    kill_and_unmount(stopped, &m);

    let mut r = mount_ok(&legs, &mnt, &[]);
    assert_legs_identical(&legs);
    r.unmount();
    assert_legs_identical(&legs);
}

/// A hard-linked file dirtied through one name, that name removed while the other stands,
/// then written again through a descriptor still open (`a`); and another, clean when its name
/// went, then written through such a descriptor (`p`). The records of the removed names would
/// stand for nothing after a crash: the intent log names both by identity, and after `kill -9`
/// the next mount makes their copies identical under the names that stand, in another
/// directory (whose cover stands for nothing of theirs).
#[test]
fn kill_9_after_writes_through_a_removed_hard_link_recovers_the_names_that_stand() {
    use std::os::unix::fs::FileExt;
    require_fuse!();
    require_tool!("getfattr");
    let mut m = TestMirror::new(2).mount();
    let mnt = m.mnt().to_path_buf();
    let legs = m.legs().to_vec();
    for d in ["d1", "d2"] {
        fs::create_dir(mnt.join(d)).unwrap();
    }
    for (name, other, seed) in [("d1/a", "d2/b", 3), ("d1/p", "d2/q", 4)] {
        fs::write(mnt.join(name), pattern(40_000, seed)).unwrap();
        fs::hard_link(mnt.join(name), mnt.join(other)).unwrap();
    }
    // Clean: nothing is dirty, nothing covered.
    m.unmount();
    m.mount_again(&[]);
    let open = |p: &str| OpenOptions::new().write(true).open(mnt.join(p)).unwrap();
    let (a, p) = (open("d1/a"), open("d1/p"));
    let pid = daemon_pid(&mnt);
    let stopped = change_then_stop(
        pid,
        || {
            // Again after a retry: the removed names come back first.
            for (name, other) in [("d1/a", "d2/b"), ("d1/p", "d2/q")] {
                if !mnt.join(name).exists() {
                    fs::hard_link(mnt.join(other), mnt.join(name)).unwrap();
                }
            }
            a.write_all_at(b"first", 0).unwrap();
            fs::remove_file(mnt.join("d1/a")).unwrap();
            a.write_all_at(b"again", 100).unwrap();
            fs::remove_file(mnt.join("d1/p")).unwrap();
            p.write_all_at(b"after", 200).unwrap();
        },
        || None,
    );
    for leg in &legs {
        let rec = log_records(&intent_log(leg));
        let ids = rec
            .iter()
            .filter(|r| mirrorfs::meta::changes::parse_identity(r.as_bytes()).is_some())
            .count();
        assert_eq!(ids, 2, "not both by identity on {}: {rec:?}", leg.display());
        assert!(!stands_for(&rec, &legs, "d2/b"), "{rec:?}");
    }
    // What a power cut during the writes could leave on leg1.
    corrupt_keeping_times(&legs[1].join("d2/b"), 100, 5);
    corrupt_keeping_times(&legs[1].join("d2/q"), 200, 5);
    // The files open on the mount close once the daemon is dead (a close waits for a stopped
    // one), before the dead mount is unmounted.
    assert_eq!(stopped.kill(), 0, "kill -9 {pid}");
    assert!(
        wait_pids_gone(m.daemon_pids(), Duration::from_secs(10)),
        "the daemon survived kill -9"
    );
    drop((a, p));
    umount2(m.mnt(), 0).expect("umount of the dead mount");

    let mut r = mount_ok(&legs, &mnt, &[]);
    assert_legs_identical(&legs);
    let b = fs::read(mnt.join("d2/b")).unwrap();
    assert_eq!((&b[0..5], &b[100..105]), (&b"first"[..], &b"again"[..]));
    assert_eq!(&fs::read(mnt.join("d2/q")).unwrap()[200..205], b"after");
    r.unmount();
    assert_legs_identical(&legs);
}

/// A leg whose intent log cannot take a record (here a cover: `intent.log` replaced by a
/// directory behind the mount) is dropped before the change reaches any leg; the create
/// succeeds on the other leg and is served from it, and `leg add` brings the leg back
/// identical.
#[test]
fn a_leg_whose_intent_log_cannot_be_written_is_dropped_and_comes_back_whole() {
    require_fuse!();
    require_tool!("getfattr");
    let m = TestMirror::new(2).mount();
    let mnt = m.mnt().to_path_buf();
    let legs = m.legs().to_vec();
    fs::create_dir(mnt.join("d")).unwrap();
    // Once the sweep has emptied the logs, nothing is dirty: the next create records afresh.
    assert!(
        wait_for(Duration::from_secs(30), || legs
            .iter()
            .all(|l| log_records(&intent_log(l)).is_empty())),
        "the intent logs are not emptied"
    );
    let log1 = intent_log(&legs[1]);
    fs::remove_file(&log1).ok();
    fs::create_dir(&log1).unwrap();
    let data = pattern(100_000, 77);
    fs::write(mnt.join("d/new"), &data).unwrap();
    let st = stats(&mnt);
    assert_eq!(
        st.legs[1].state,
        mirrorfs::stats::LegState::Failed,
        "{st:?}"
    );
    assert!(st.legs[1].write_errors >= 1, "{st:?}");
    assert_eq!(st.legs[0].state, mirrorfs::stats::LegState::InSync);
    assert!(
        !legs[1].join("d/new").exists(),
        "the change reached the leg whose record failed"
    );
    assert_bytes_eq(&fs::read(mnt.join("d/new")).unwrap(), &data, "served");
    assert!(stands_for(
        &log_records(&intent_log(&legs[0])),
        &legs[..1],
        "d/new"
    ));

    fs::remove_dir(&log1).unwrap();
    mirrorfs_ok(&[&"leg", &"add", &mnt, &"leg1"]);
    wait_resynced(&mnt);
    assert_content_on_legs(&legs, "d/new", &data);
    m.finish();
}
