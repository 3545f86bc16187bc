//! `-o keeper=on` (issue 25): a keeper process holds the FUSE session, so that the mount
//! outlives the process serving it. A server killed with SIGKILL during a load is followed by a
//! successor that takes the session over: no program sees an error, the data is right, the
//! legs stay identical and the stats count the restarts. A server that keeps dying is given up
//! (the connection aborted: programs get an error, not a hang), with its events, and the next
//! mount is clean.
//!
//! Over /dev/fuse (`transport=devfuse`): over io_uring the kernel cannot send again what a
//! dead server's ring entries held, and the keeper gives the mount up at the first death
//! (`the_keeper_gives_an_io_uring_mount_up_at_once`).

#[macro_use]
mod common;

use common::control::getfattr_ok;
use common::*;
use std::fs;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SWITCH: &str = "/sys/module/fuse/parameters/enable_uring";

fn server_pid(mnt: &Path) -> i32 {
    getfattr_ok(&mnt.join(".mirrorfs"), "user.mirrorfs.pid")
        .trim()
        .parse()
        .unwrap()
}

/// What a program of the load saw: its errors and its slowest operation.
#[derive(Default)]
struct Seen {
    errors: Vec<String>,
    slowest: Duration,
    ops: u64,
    /// Operations that took 5 ms or more: when they started, and how long they took.
    slow: Vec<(Instant, Duration)>,
}

impl Seen {
    fn op<T>(&mut self, what: &str, f: impl FnOnce() -> std::io::Result<T>) -> Option<T> {
        let t = Instant::now();
        let r = f();
        let took = t.elapsed();
        self.slowest = self.slowest.max(took);
        if took >= Duration::from_millis(5) {
            self.slow.push((t, took));
        }
        self.ops += 1;
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.errors.push(format!("{what}: {e}"));
                None
            }
        }
    }
}

/// An appender that fsyncs each record, then reads the whole file back and checks it.
fn appender(path: PathBuf, stop: Arc<AtomicBool>, seen: Arc<Mutex<Seen>>) {
    let mut f = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap();
    let mut want = Vec::new();
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let rec = format!("record {i} of the appender\n");
        let mut s = seen.lock().unwrap();
        if s.op("append", || {
            f.write_all(rec.as_bytes()).and_then(|()| f.sync_data())
        })
        .is_some()
        {
            want.extend_from_slice(rec.as_bytes());
        }
        drop(s);
        i += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    let got = fs::read(&path).unwrap();
    if got != want {
        seen.lock().unwrap().errors.push(format!(
            "the appended file differs ({} bytes, want {})",
            got.len(),
            want.len()
        ));
    }
}

/// A reader of a big file, checking every block against what was written.
fn reader(path: PathBuf, data: Arc<Vec<u8>>, stop: Arc<AtomicBool>, seen: Arc<Mutex<Seen>>) {
    let f = fs::File::open(&path).unwrap();
    let mut buf = vec![0u8; 256 * 1024];
    let mut off = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let n = buf.len().min(data.len() - off);
        let mut s = seen.lock().unwrap();
        if s.op("read", || f.read_exact_at(&mut buf[..n], off as u64))
            .is_some()
            && buf[..n] != data[off..off + n]
        {
            s.errors.push(format!("read at {off}: wrong bytes"));
        }
        drop(s);
        off = (off + n) % data.len();
    }
}

/// tar -x of a tree, again and again, each into a directory of its own.
fn untar(archive: PathBuf, dir: PathBuf, stop: Arc<AtomicBool>, seen: Arc<Mutex<Seen>>) {
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let d = dir.join(format!("t{i}"));
        fs::create_dir_all(&d).unwrap();
        let t = Instant::now();
        let out = std::process::Command::new("tar")
            .arg("-C")
            .arg(&d)
            .arg("-xf")
            .arg(&archive)
            .output()
            .unwrap();
        let mut s = seen.lock().unwrap();
        s.ops += 1;
        if !out.status.success() {
            s.errors
                .push(format!("tar -x: {}", String::from_utf8_lossy(&out.stderr)));
        }
        let _ = t;
        i += 1;
    }
}

/// fio random writes with --verify, until stopped (run in rounds of 2 s).
fn fio(dir: PathBuf, stop: Arc<AtomicBool>, seen: Arc<Mutex<Seen>>) {
    while !stop.load(Ordering::Relaxed) {
        let out = std::process::Command::new("fio")
            .args([
                "--name=keeper",
                "--rw=randwrite",
                "--bs=4k",
                "--size=8m",
                "--ioengine=psync",
                "--verify=crc32c",
                "--verify_state_save=0",
                "--do_verify=1",
                "--fsync=16",
                "--time_based",
                "--runtime=2",
                "--output-format=terse",
            ])
            .arg(format!("--directory={}", dir.display()))
            .output()
            .unwrap();
        let mut s = seen.lock().unwrap();
        s.ops += 1;
        if !out.status.success() {
            s.errors.push(format!(
                "fio: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
}

/// Kills the serving process `rounds` times during a mixed load; what the programs saw.
/// The load, with `step` (a kill, a restart) done `rounds` times, `pause` apart; what each
/// program saw, and for each round the longest an operation under way at the step waited.
fn rounds_under_load(
    m: &Mounted,
    rounds: usize,
    pause: Duration,
    step: &dyn Fn(usize),
) -> (Vec<(String, Seen)>, Vec<Duration>) {
    let mnt = m.mnt().to_path_buf();
    let data: Arc<Vec<u8>> = Arc::new(pattern(16 * MIB, 25));
    fs::write(mnt.join("big"), &*data).unwrap();
    let archive = m.root().join("tree.tar");
    let st = std::process::Command::new("tar")
        .args(["-C", "/usr/include", "-cf"])
        .arg(&archive)
        .arg("linux")
        .status()
        .unwrap();
    assert!(st.success());
    fs::create_dir(mnt.join("tar")).unwrap();
    fs::create_dir(mnt.join("fio")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let names = ["appender", "reader", "tar", "fio"];
    let seens: Vec<Arc<Mutex<Seen>>> = names.iter().map(|_| Default::default()).collect();
    let mut threads = Vec::new();
    {
        let (p, s, st) = (mnt.join("log"), seens[0].clone(), stop.clone());
        threads.push(std::thread::spawn(move || appender(p, st, s)));
        let (p, d, s, st) = (
            mnt.join("big"),
            data.clone(),
            seens[1].clone(),
            stop.clone(),
        );
        threads.push(std::thread::spawn(move || reader(p, d, st, s)));
        let (a, p, s, st) = (
            archive.clone(),
            mnt.join("tar"),
            seens[2].clone(),
            stop.clone(),
        );
        threads.push(std::thread::spawn(move || untar(a, p, st, s)));
        let (p, s, st) = (mnt.join("fio"), seens[3].clone(), stop.clone());
        threads.push(std::thread::spawn(move || fio(p, st, s)));
    }
    let mut at = Vec::new();
    for round in 0..rounds {
        std::thread::sleep(pause);
        let t0 = Instant::now();
        step(round);
        at.push((t0, Instant::now()));
    }
    std::thread::sleep(pause);
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let seen: Vec<(String, Seen)> = names
        .iter()
        .zip(seens)
        .map(|(n, s)| {
            let s = Arc::try_unwrap(s).ok().unwrap().into_inner().unwrap();
            (n.to_string(), s)
        })
        .collect();
    let stalls = at
        .iter()
        .map(|&(t0, t1)| {
            // The operations under way at some time between the step and the new server's
            // first answer.
            (seen.iter().flat_map(|(_, s)| &s.slow))
                .filter(|(start, took)| *start <= t1 && t0 <= *start + *took)
                .map(|(_, took)| *took)
                .max()
                .unwrap_or_default()
        })
        .collect();
    (seen, stalls)
}

/// A SIGKILL of the serving process; its successor serves within 10 s.
fn kill_server(mnt: &Path, round: usize) {
    let pid = server_pid(mnt);
    // SAFETY: kill takes no pointers.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0, "kill {pid}");
    assert!(
        wait_for(Duration::from_secs(10), || server_pid(mnt) != pid),
        "round {round}: no successor within 10 s"
    );
    let k = stats(mnt).keeper.expect("the stats have the keeper");
    assert_eq!(k.restarts, round as u64 + 1, "round {round}: {k:?}");
}

/// Each program's operations, slowest operation and errors, and the stalls' longest and
/// median; the errors, if any.
fn report(seen: &[(String, Seen)], stalls: &[Duration]) -> Vec<String> {
    let mut failed = Vec::new();
    for (name, s) in seen {
        eprintln!(
            "{name}: {} operations, slowest {:?}, {} errors",
            s.ops,
            s.slowest,
            s.errors.len()
        );
        assert!(s.ops > 0, "{name} did nothing");
        failed.extend(s.errors.iter().map(|e| format!("{name}: {e}")));
    }
    let mut sorted = stalls.to_vec();
    sorted.sort();
    eprintln!(
        "stalls at the {} steps: longest {:?}, median {:?} (each: {stalls:?})",
        stalls.len(),
        sorted.last().copied().unwrap_or_default(),
        sorted.get(sorted.len() / 2).copied().unwrap_or_default()
    );
    failed
}

/// A scrub finds the legs identical, and so does a comparison after the unmount.
fn legs_identical_after_scrub(m: &mut Mounted) {
    let out = run_mirrorfs(["scrub", "start", m.mnt().to_str().unwrap(), "--wait"]);
    assert!(out.status.success(), "scrub: {out:?}");
    let s = stats(m.mnt());
    assert_eq!(
        s.scrub.as_ref().map(|x| x.differences),
        Some(0),
        "{:?}",
        s.scrub
    );
    m.unmount();
    compare_legs_identical(m.legs());
}

#[test]
fn a_killed_server_is_followed_and_no_program_sees_an_error() {
    require_fuse!();
    require_tool!("fio");
    require_tool!("tar");
    let mut m = TestMirror::new(2)
        .options(&["keeper=on", "transport=devfuse", "keeper_retries=50"])
        .mount();
    let keeper = stats(m.mnt()).keeper.expect("the stats have the keeper");
    assert_eq!(keeper.restarts, 0);
    let rounds = 10;
    let mnt = m.mnt().to_path_buf();
    let (seen, stalls) = rounds_under_load(&m, rounds, Duration::from_millis(1500), &|r| {
        kill_server(&mnt, r)
    });
    let failed = report(&seen, &stalls);
    assert!(failed.is_empty(), "programs saw errors: {failed:#?}");
    let k = stats(m.mnt()).keeper.unwrap();
    assert_eq!(k.restarts, rounds as u64, "{k:?}");
    assert_eq!(k.keeper_pid, keeper.keeper_pid);
    assert!(k.last_cause.contains("SIGKILL"), "{k:?}");
    legs_identical_after_scrub(&mut m);
}

/// `mirrorfs restart --binary` of another build during the same load: no program sees an
/// error, and the stats show the new server's pid and build; a restart with no program keeps
/// the one running. A program the daemon will not run (writable by others), a restart without
/// a keeper and one by another user are refused.
#[test]
fn a_restart_to_another_build_is_seen_by_no_program() {
    require_fuse!();
    require_tool!("fio");
    require_tool!("tar");
    let mut m = TestMirror::new(2)
        .options(&["keeper=on", "transport=devfuse"])
        .mount();
    let mnt = m.mnt().to_path_buf();
    // Another build: the same program with one byte more (its CRC-32C differs).
    let other = m.root().join("mirrorfs-other");
    let mut bytes = fs::read(mirrorfs_bin()).unwrap();
    bytes.push(0);
    fs::write(&other, &bytes).unwrap();
    sh_ok(&format!("chmod 755 {}", shq(&other)));
    let first = stats(&mnt);
    let builds = [other.clone(), PathBuf::from(mirrorfs_bin())];
    let rounds = 4;
    let (seen, stalls) = rounds_under_load(&m, rounds, Duration::from_millis(1500), &|r| {
        let before = stats(&mnt);
        let program = &builds[r % 2];
        let out = run_mirrorfs([
            "restart",
            mnt.to_str().unwrap(),
            "--binary",
            program.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "round {r}: {out:?}");
        let after = stats(&mnt);
        assert_ne!(after.pid, before.pid, "round {r}");
        assert_eq!(Path::new(&after.exe), program.as_path(), "round {r}");
        assert_ne!(
            after.build, before.build,
            "round {r}: the build did not change"
        );
        let printed = String::from_utf8_lossy(&out.stdout);
        assert!(printed.contains(&after.build), "{printed}");
    });
    let failed = report(&seen, &stalls);
    assert!(failed.is_empty(), "programs saw errors: {failed:#?}");
    let k = stats(&mnt).keeper.unwrap();
    assert_eq!(k.restarts, rounds as u64, "{k:?}");
    assert!(k.last_cause.contains("restart asked for"), "{k:?}");
    assert_eq!(stats(&mnt).build, first.build);
    // `status` and the Prometheus exposition say the same.
    let out = run_mirrorfs(["status", mnt.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = format!(
        " keeper: pid {}, {rounds} restart(s); last: restart asked for",
        k.keeper_pid
    );
    assert!(text.contains(&line), "{text}");
    let out = run_mirrorfs(["status", "--format=prometheus", mnt.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    let sample = format!(
        "mirrorfs_keeper_restarts_total{{mount=\"{}\"}} {rounds}",
        mnt.display()
    );
    assert!(text.contains(&sample), "{text}");
    assert!(
        text.contains(&format!("build=\"{}\"", first.build)),
        "{text}"
    );
    // The same program again.
    let pid = server_pid(&mnt);
    let out = run_mirrorfs(["restart", mnt.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    assert_ne!(server_pid(&mnt), pid);
    // Refused: a program others may change (nothing restarts).
    sh_ok(&format!("chmod 777 {}", shq(&other)));
    let pid = server_pid(&mnt);
    let out = run_mirrorfs([
        "restart",
        mnt.to_str().unwrap(),
        "--binary",
        other.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("writable by others"), "{err}");
    // Refused through the key itself: a relative path, and one that is not there.
    let ctl = mnt.join(".mirrorfs");
    common::control::setfattr_fails(
        &ctl,
        "user.mirrorfs.restart",
        "mirrorfs",
        "Invalid argument",
    );
    common::control::setfattr_fails(
        &ctl,
        "user.mirrorfs.restart",
        "/nonexistent/mirrorfs",
        "Invalid argument",
    );
    // Refused: a program that cannot take the session over (it does not answer the probe).
    let out = run_mirrorfs(["restart", mnt.to_str().unwrap(), "--binary", "/bin/true"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot take this session over"), "{err}");
    // Refused: another user (who may reach the mount).
    sh_ok(&format!("chmod 755 {}", shq(m.root())));
    let restarts = stats(&mnt).keeper.unwrap().restarts;
    let out = sh_as(
        NOBODY,
        NOGROUP,
        0o022,
        &format!(
            "setfattr -n user.mirrorfs.restart -v x {}",
            shq(mnt.join(".mirrorfs"))
        ),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    // The kernel refuses (the control file is 0644, and user.* attributes need write
    // permission); the daemon would too (`may_control`).
    assert!(
        !out.status.success() && err.contains("Permission denied"),
        "another user: {out:?}"
    );
    // A restart the server took would have begun by the time a scrub has run through it.
    let out = run_mirrorfs(["scrub", "start", mnt.to_str().unwrap(), "--wait"]);
    assert!(out.status.success(), "scrub: {out:?}");
    assert_eq!(server_pid(&mnt), pid);
    assert_eq!(stats(&mnt).keeper.unwrap().restarts, restarts);
    legs_identical_after_scrub(&mut m);
    // Without a keeper there is nothing to restart with.
    let m2 = TestMirror::new(2).option("transport=devfuse").mount();
    let out = run_mirrorfs(["restart", m2.mnt().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("keeper=on"), "{err}");
}

/// The legs hold the same tree, byte for byte (what the mount showed).
fn compare_legs_identical(legs: &[PathBuf]) {
    let out = std::process::Command::new("diff")
        .args(["-r", "--no-dereference", "-x", ".mirrorfs"])
        .arg(&legs[0])
        .arg(&legs[1])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the legs differ: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A successor that cannot start (a leg gone) is started again until `keeper_retries`, then
/// the keeper gives the mount up: a waiting program gets an error, not a hang; the events
/// fire; and the next mount is clean.
#[test]
fn a_successor_that_cannot_start_is_given_up_and_programs_get_an_error() {
    require_fuse!();
    let dirs = TestDirs::new(2);
    let events = dirs.root().join("events");
    let prog = dirs.root().join("notify.sh");
    fs::write(
        &prog,
        format!("#!/bin/sh\necho \"$MIRRORFS_EVENT\" >> {}\n", shq(&events)),
    )
    .unwrap();
    sh_ok(&format!("chmod +x {}", shq(&prog)));
    let legs = dirs.legs.clone();
    let mnt = dirs.mnt.clone();
    let opts = format!(
        "keeper=on,transport=devfuse,keeper_retries=3,notify_program={},notify_interval=0",
        prog.display()
    );
    let out = dirs.mount_with(&opts);
    assert!(out.status.success(), "{out:?}");
    fs::write(mnt.join("f"), b"before").unwrap();
    // The second leg goes away: every successor fails its start.
    let moved = dirs.root().join("leg1-away");
    fs::rename(&legs[1], &moved).unwrap();
    let pid = server_pid(&mnt);
    let started = Instant::now();
    // SAFETY: kill takes no pointers.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    // A program waits on the mount meanwhile: it must get an error, not hang.
    let (tx, rx) = std::sync::mpsc::channel();
    let m2 = mnt.clone();
    std::thread::spawn(move || {
        let r = fs::read(m2.join("f"));
        let _ = tx.send(r);
    });
    let r = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("a program waited more than 30 s: the keeper did not give up");
    eprintln!(
        "the program's read ended after {:?}: {r:?}",
        started.elapsed()
    );
    if let Err(e) = &r {
        assert!(
            DEAD_DAEMON_ERRNOS.contains(&errno_of(e)),
            "the program got {e}"
        );
    }
    assert!(
        wait_mounted(&mnt, false, Duration::from_secs(10)),
        "the mount was not detached"
    );
    assert!(wait_for(Duration::from_secs(10), || {
        fs::read_to_string(&events).is_ok_and(|t| t.contains("daemon_gave_up"))
    }));
    let fired = fs::read_to_string(&events).unwrap();
    assert!(fired.contains("daemon_crashed"), "{fired}");
    // The leg is back: the next mount is clean, and what was written is there.
    fs::rename(&moved, &legs[1]).unwrap();
    let out = dirs.mount_with("transport=devfuse");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(fs::read(mnt.join("f")).unwrap(), b"before");
    assert_eq!(stats(&mnt).state.as_str(), "ONLINE");
    unmount_path(&mnt).unwrap();
}

/// Over io_uring the keeper cannot take a session over (what the dead server's ring entries
/// held would wait for ever): it gives the mount up at the first death, and programs get an
/// error instead of waiting. With the kernel's switch off the mount is over /dev/fuse, and a
/// restart works.
#[test]
fn the_keeper_gives_an_io_uring_mount_up_at_once() {
    require_fuse!();
    let on = fs::read_to_string(SWITCH).unwrap().trim() == "Y";
    let mut m = TestMirror::new(2).option("keeper=on").mount();
    let kind = stats(m.mnt()).transport.unwrap().kind;
    assert_eq!(kind == "uring", on, "{kind}");
    fs::write(m.path("f"), b"data").unwrap();
    let pid = server_pid(m.mnt());
    // SAFETY: kill takes no pointers.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    if on {
        assert!(
            wait_mounted(m.mnt(), false, Duration::from_secs(10)),
            "the io_uring mount was not given up"
        );
        return;
    }
    assert!(wait_for(Duration::from_secs(10), || server_pid(m.mnt()) != pid));
    assert_eq!(fs::read(m.path("f")).unwrap(), b"data");
    assert_eq!(stats(m.mnt()).keeper.unwrap().restarts, 1);
    m.unmount();
}

/// A name operation the server did and died before answering comes back to the successor
/// (`FUSE_NOTIFY_RESEND`): each is answered as the program's call should be, not with the
/// EEXIST or ENOENT that doing it again gives. (`transport=die-unanswered` kills the server
/// after it did the next name operation, before the answer.)
#[test]
fn a_name_operation_done_by_a_server_that_died_unanswered_succeeds() {
    require_fuse!();
    let mut m = TestMirror::new(2)
        .options(&[
            "keeper=on",
            "transport=devfuse",
            "keeper_retries=50",
            "fault_injection",
        ])
        .mount();
    let mnt = m.mnt().to_path_buf();
    fs::write(mnt.join("f"), b"file").unwrap();
    fs::write(mnt.join("g"), b"gone").unwrap();
    fs::create_dir(mnt.join("empty")).unwrap();
    fs::write(mnt.join("from"), b"moved").unwrap();
    let p = |n: &str| mnt.join(n);
    type Step<'a> = (&'a str, Box<dyn Fn() -> std::io::Result<()> + 'a>);
    let steps: Vec<Step> = vec![
        ("mkdir", Box::new(|| fs::create_dir(p("d")))),
        (
            "symlink",
            Box::new(|| std::os::unix::fs::symlink("f", p("s"))),
        ),
        ("link", Box::new(|| fs::hard_link(p("f"), p("f2")))),
        (
            "create O_EXCL",
            Box::new(|| {
                fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(p("c"))?
                    .write_all(b"created")
            }),
        ),
        ("unlink", Box::new(|| fs::remove_file(p("g")))),
        ("rmdir", Box::new(|| fs::remove_dir(p("empty")))),
        ("rename", Box::new(|| fs::rename(p("from"), p("to")))),
    ];
    let ctl = mnt.join(".mirrorfs");
    for (what, step) in &steps {
        let pid = server_pid(&mnt);
        common::control::setfattr_ok(&ctl, "user.mirrorfs.fault", "transport=die-unanswered");
        let r = step();
        assert!(r.is_ok(), "{what} after the server died unanswered: {r:?}");
        assert!(
            wait_for(Duration::from_secs(10), || server_pid(&mnt) != pid),
            "{what}: the server did not die (the fault was not taken)"
        );
    }
    assert!(p("d").is_dir());
    assert_eq!(fs::read_link(p("s")).unwrap(), Path::new("f"));
    assert_eq!(fs::read(p("f2")).unwrap(), b"file");
    assert_eq!(fs::read(p("c")).unwrap(), b"created");
    assert!(!p("g").exists() && !p("empty").exists() && !p("from").exists());
    assert_eq!(fs::read(p("to")).unwrap(), b"moved");
    let k = stats(&mnt).keeper.unwrap();
    assert_eq!(k.restarts, steps.len() as u64, "{k:?}");
    m.unmount();
    compare_legs_identical(m.legs());
}
