//! Alerts (issue 14, item 3) on real mounts: a leg fails (an injected write fault) and the
//! notify program and the events directory's script each run exactly once, with the right
//! `MIRRORFS_*` variables; `mirrorfs notify-test` reaches them and says what ran; the mail goes
//! through sendmail (a stand-in named by `MIRRORFS_SENDMAIL`); the same event on the same leg is
//! held back within `notify_interval` and counted in the next run; events reach the log.

#[macro_use]
mod common;

use common::*;
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A script that appends its `MIRRORFS_*` variables, then a `--` line, to `log`.
fn recorder(path: &Path, log: &Path) {
    fs::write(
        path,
        format!(
            "#!/bin/sh\nenv | grep '^MIRRORFS_' | sort >> '{}'\necho -- >> '{}'\n",
            log.display(),
            log.display()
        ),
    )
    .unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

/// The records a recorder wrote: one map of variables per run.
fn records(log: &Path) -> Vec<BTreeMap<String, String>> {
    let text = fs::read_to_string(log).unwrap_or_default();
    text.split("--\n")
        .filter(|r| !r.trim().is_empty())
        .map(|r| {
            r.lines()
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

/// The looks of the daemon's event watcher over, each with every event it found dispatched
/// (`user.mirrorfs.notify_looks`).
fn looks(mnt: &Path) -> u64 {
    let v = getfattr_ok(&mnt.join(".mirrorfs"), "user.mirrorfs.notify_looks");
    v.parse().unwrap_or_else(|_| panic!("notify_looks: {v:?}"))
}

/// Waits until the event watcher of the mount `mnt` has looked three more times, and run the
/// programs of whatever it found: what has happened on the mount by now has reached them.
#[track_caller]
fn three_looks(mnt: &Path) {
    let from = looks(mnt);
    assert!(
        wait_for(Duration::from_secs(10), || looks(mnt) >= from + 3),
        "the event watcher looked {} time(s) in 10 s",
        looks(mnt) - from
    );
}

/// Waits until `log` holds `n` records (10 s), then for three more looks of the watcher to see
/// that no other comes; returns them.
#[track_caller]
fn settle(mnt: &Path, log: &Path, n: usize) -> Vec<BTreeMap<String, String>> {
    assert!(
        wait_for(Duration::from_secs(10), || records(log).len() >= n),
        "{} holds {} record(s), want {n}: {:?}",
        log.display(),
        records(log).len(),
        records(log)
    );
    three_looks(mnt);
    let r = records(log);
    assert_eq!(r.len(), n, "{}: {r:#?}", log.display());
    r
}

struct Setup {
    _dir: tempfile::TempDir,
    prog_log: PathBuf,
    dir_log: PathBuf,
    events_dir: PathBuf,
    program: PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let events_dir = dir.path().join("events.d");
    fs::create_dir(&events_dir).unwrap();
    let prog_log = dir.path().join("program.log");
    let dir_log = dir.path().join("events-dir.log");
    let program = dir.path().join("notify");
    recorder(&program, &prog_log);
    recorder(&events_dir.join("10-record"), &dir_log);
    // Not run: not executable, hidden, a backup.
    fs::write(events_dir.join("README"), "not a program\n").unwrap();
    recorder(&events_dir.join(".hidden"), &dir_log);
    recorder(&events_dir.join("20-old~"), &dir_log);
    Setup {
        _dir: dir,
        prog_log,
        dir_log,
        events_dir,
        program,
    }
}

#[test]
fn a_failed_leg_runs_each_program_once_and_notify_test_reaches_them() {
    require_fuse!();
    let s = setup();
    let m = TestMirror::new(2)
        .option("fault_injection")
        .option(&format!("notify_program={}", s.program.display()))
        .option(&format!("events_dir={}", s.events_dir.display()))
        .mount();
    fs::write(m.path("before"), b"both legs").unwrap();
    // A healthy mount: no event.
    three_looks(m.mnt());
    // notify_looks is read-only: no value is taken from root, nor from another user.
    let ctl = m.mnt().join(".mirrorfs");
    sh_ok(&format!("chmod 755 {}", shq(m.root())));
    for v in mirrorfs::value::HOSTILE
        .iter()
        .filter(|v| !v.contains('\0'))
    {
        assert!(
            setfattr(&ctl, "user.mirrorfs.notify_looks", v).is_err(),
            "notify_looks={v:?} taken"
        );
    }
    let out = sh_as(
        NOBODY,
        NOGROUP,
        0o022,
        &format!("setfattr -n user.mirrorfs.notify_looks -v 0 {}", shq(&ctl)),
    );
    assert!(!out.status.success(), "another user wrote notify_looks");
    assert!(looks(m.mnt()) >= 3, "notify_looks after the writes");
    assert!(
        records(&s.prog_log).is_empty(),
        "{:?}",
        records(&s.prog_log)
    );

    setfattr_ok(
        &m.mnt().join(".mirrorfs"),
        FAULT,
        "leg=leg1 op=write errno=EIO",
    );
    fs::write(m.path("f"), b"leg1 fails this write").unwrap();
    setfattr_ok(&m.mnt().join(".mirrorfs"), FAULT, "clear");
    let (_, st, _) = stats_of(&m.mnt().join(".mirrorfs"));
    assert_eq!(st.legs[1].state, mirrorfs::stats::LegState::Failed);

    for log in [&s.prog_log, &s.dir_log] {
        let r = settle(m.mnt(), log, 1);
        let v = &r[0];
        let want = [
            ("MIRRORFS_EVENT", "leg_failed".to_string()),
            ("MIRRORFS_SEVERITY", "error".into()),
            ("MIRRORFS_MOUNT", path_str(m.mnt())),
            ("MIRRORFS_MOUNT_STATE", "DEGRADED".into()),
            ("MIRRORFS_LEGS_ONLINE", "1".into()),
            ("MIRRORFS_LEGS_TOTAL", "2".into()),
            ("MIRRORFS_LEG", "leg1".into()),
            ("MIRRORFS_LEG_PATH", path_str(m.leg(1))),
            ("MIRRORFS_LEG_STATE", "FAULTED".into()),
            ("MIRRORFS_WRITE_ERRORS", "1".into()),
            ("MIRRORFS_READ_ERRORS", "0".into()),
            ("MIRRORFS_SUPPRESSED", "0".into()),
            ("MIRRORFS_PID", st.pid.to_string()),
        ];
        for (k, want) in want {
            assert_eq!(v.get(k), Some(&want), "{k} in {v:#?}");
        }
        assert!(v["MIRRORFS_SUMMARY"].contains("leg1"), "{v:#?}");
    }

    // notify-test: both programs run once more, and the command says so.
    let out = run_mirrorfs(["notify-test".as_ref(), m.mnt().as_os_str()]);
    assert_exit(&out, 0, "notify-test");
    let said = text(&out.stdout);
    assert!(
        said.contains(&format!("{}: exit 0", s.program.display()))
            && said.contains(&format!(
                "{}: exit 0",
                s.events_dir.join("10-record").display()
            )),
        "{said}"
    );
    for log in [&s.prog_log, &s.dir_log] {
        let r = settle(m.mnt(), log, 2);
        assert_eq!(r[1]["MIRRORFS_EVENT"], "test", "{r:#?}");
        assert_eq!(r[1]["MIRRORFS_MOUNT"], path_str(m.mnt()));
    }
    let last = getfattr_ok(&m.mnt().join(".mirrorfs"), "user.mirrorfs.notify_last");
    let doc: serde_json::Value = serde_json::from_str(&last).unwrap();
    assert_eq!(doc["event"], "test", "{doc}");
    drop(m);
}

/// notify-test with nothing to run says so (exit 1); a failing program makes it exit 1 with the
/// program's status.
#[test]
fn notify_test_says_when_nothing_works() {
    require_fuse!();
    let dir = tempfile::tempdir().unwrap();
    let m = TestMirror::new(2)
        .option(&format!("events_dir={}", dir.path().join("none").display()))
        .mount();
    let out = run_mirrorfs(["notify-test".as_ref(), m.mnt().as_os_str()]);
    assert_exit(&out, 1, "notify-test with nothing set up");
    assert!(
        text(&out.stderr).contains("nothing to run"),
        "{}",
        text(&out.stderr)
    );
    m.finish();

    let failing = dir.path().join("fails");
    fs::write(&failing, "#!/bin/sh\necho broken >&2\nexit 3\n").unwrap();
    fs::set_permissions(&failing, fs::Permissions::from_mode(0o755)).unwrap();
    let m = TestMirror::new(2)
        .option(&format!("notify_program={}", failing.display()))
        .option(&format!("events_dir={}", dir.path().join("none").display()))
        .mount();
    let out = run_mirrorfs(["notify-test".as_ref(), m.mnt().as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).contains("exit 3: broken"),
        "{}",
        text(&out.stdout)
    );
    m.finish();
}

/// mail_to= through sendmail, the rate limit (notify_interval), and the log: run in the
/// foreground so that the daemon's log is its stderr.
#[test]
fn mail_rate_limit_and_log() {
    require_fuse!();
    let s = setup();
    let d = TestDirs::new(2);
    let mail_dir = s._dir.path().join("mail");
    fs::create_dir(&mail_dir).unwrap();
    let sendmail = s._dir.path().join("sendmail");
    fs::write(
        &sendmail,
        format!(
            "#!/bin/sh\n[ \"$1 $2\" = '-t -i' ] || exit 9\ncat > '{}'/mail.$(date +%s%N)\n",
            mail_dir.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&sendmail, fs::Permissions::from_mode(0o755)).unwrap();
    let log_path = s._dir.path().join("daemon.log");
    let mut child = Command::new(mirrorfs_bin())
        .arg("-f")
        .arg(d.legs_arg())
        .arg(&d.mnt)
        .arg("-o")
        .arg(format!(
            "fault_injection,read_policy=first,notify_interval=3,mail_to=admin@example.org,events_dir={}",
            s.events_dir.display()
        ))
        .env("MIRRORFS_SENDMAIL", &sendmail)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    assert!(
        wait_for(Duration::from_secs(10), || is_mounted(&d.mnt)),
        "mirrorfs -f did not mount"
    );
    let mnt = d.mnt.clone();
    let result = std::panic::catch_unwind(|| {
        let data = pattern(64 * KIB, 9);
        fs::write(mnt.join("f"), &data).unwrap();
        let fault_and_read = || {
            setfattr_ok(&mnt.join("f"), FAULT, "leg=leg0 op=read errno=EIO times=1");
            let got = read_direct(&mnt.join("f"), DIRECT_CHUNK);
            assert_bytes_eq(&got, &data, "read through the fault");
        };
        fault_and_read();
        let r = settle(&mnt, &s.dir_log, 1);
        // The run came before this: notify_interval (3 s) from here is surely over.
        let first_run = std::time::Instant::now();
        assert_eq!(r[0]["MIRRORFS_EVENT"], "read_repaired", "{r:#?}");
        assert_eq!(r[0]["MIRRORFS_LEG"], "leg0");
        assert_eq!(r[0]["MIRRORFS_COUNT"], "1");
        assert_eq!(r[0]["MIRRORFS_SEVERITY"], "warning");
        // Again within 3 s: held back.
        fault_and_read();
        settle(&mnt, &s.dir_log, 1);
        // After the interval: runs, and counts the one held back.
        std::thread::sleep(
            (first_run + Duration::from_secs(3))
                .saturating_duration_since(std::time::Instant::now()),
        );
        fault_and_read();
        let r = settle(&mnt, &s.dir_log, 2);
        assert_eq!(r[1]["MIRRORFS_EVENT"], "read_repaired");
        assert_eq!(r[1]["MIRRORFS_SUPPRESSED"], "1", "{r:#?}");
        // Two mails, like the runs.
        let mut mails: Vec<PathBuf> = fs::read_dir(&mail_dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        mails.sort();
        assert_eq!(mails.len(), 2, "{mails:?}");
        let mail = fs::read_to_string(&mails[1]).unwrap();
        assert!(
            mail.starts_with("To: admin@example.org\nSubject: mirrorfs on "),
            "{mail}"
        );
        assert!(
            mail.contains("read_repaired") && mail.contains("MIRRORFS_SUPPRESSED=1"),
            "{mail}"
        );
    });
    let _ = unmount_path(&d.mnt);
    let status = wait_timeout(&mut child, Duration::from_secs(10), "mirrorfs -f");
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    assert!(status.success());
    // The log has every event, the held-back one too.
    let log = fs::read_to_string(&log_path).unwrap();
    let events = log
        .lines()
        .filter(|l| l.contains("event read_repaired: ") && !l.contains("held back"))
        .count();
    assert_eq!(events, 3, "{log}");
    assert!(log.contains("held back"), "{log}");
}
