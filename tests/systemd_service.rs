//! What `contrib/systemd/` relies on: the daemon's READY=1 on `$NOTIFY_SOCKET` once the mount
//! answers (a path socket and an abstract one, as systemd uses), STOPPING=1 when `mirrorfs
//! unmount` (the unit's ExecStop) ends it; `mirrorfs scrub start --wait` (the scrub unit's command) ending
//! with the scrub, failing on a difference left unrepaired; the scrub's thread in the idle I/O
//! class.

#[macro_use]
mod common;

use common::*;
use std::fs;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Receives one datagram within `timeout`, as text.
fn recv(sock: &UnixDatagram, timeout: Duration) -> Option<String> {
    sock.set_read_timeout(Some(timeout)).unwrap();
    let mut buf = [0u8; 4096];
    match sock.recv(&mut buf) {
        Ok(n) => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
        Err(_) => None,
    }
}

/// Runs `mirrorfs -f LEGS MNT` (mirrorfs@.service's ExecStart) with `NOTIFY_SOCKET=socket`,
/// waits for READY=1, checks the mount answers at that moment, then unmounts it with `mirrorfs
/// unmount` (the unit's ExecStop) and sees STOPPING=1 and the daemon exit 0.
fn ready_then_stop(socket_name: &str, sock: &UnixDatagram) {
    let d = TestDirs::new(2);
    let started = Instant::now();
    let mut child = Command::new(mirrorfs_bin())
        .arg("-f")
        .arg(d.legs_arg())
        .arg(&d.mnt)
        .args(["-o", "allow_other"])
        .env("NOTIFY_SOCKET", socket_name)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let msg = recv(sock, Duration::from_secs(30));
    let mounted = is_mounted(&d.mnt);
    let answers = fs::write(d.mnt.join("f"), b"ready");
    let Some(msg) = msg else {
        let _ = unmount_path(&d.mnt);
        let _ = child.kill();
        panic!("no message on {socket_name} within 30 s");
    };
    assert!(
        msg.lines().any(|l| l == "READY=1"),
        "first message on {socket_name}: {msg:?}"
    );
    assert!(
        msg.lines()
            .any(|l| l.starts_with("STATUS=mounted 2 legs on ")),
        "{msg:?}"
    );
    assert!(mounted, "READY=1 came before the mount");
    answers.unwrap_or_else(|e| panic!("the mount did not answer at READY=1: {e}"));
    assert_content_on_legs(&d.legs, "f", b"ready");
    eprintln!("READY=1 after {:?}", started.elapsed());

    let out = run_mirrorfs(["unmount".as_ref(), d.mnt.as_os_str()]);
    assert_exit(&out, 0, "mirrorfs unmount (ExecStop)");
    let status = wait_timeout(
        &mut child,
        Duration::from_secs(10),
        "mirrorfs -f after umount",
    );
    assert!(status.success(), "mirrorfs -f exited with {status}");
    let msg = recv(sock, Duration::from_secs(5)).unwrap_or_default();
    assert!(
        msg.lines().any(|l| l == "STOPPING=1"),
        "after umount, on {socket_name}: {msg:?}"
    );
}

#[test]
fn ready_on_a_path_socket_and_stop_by_umount() {
    require_fuse!();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    ready_then_stop(&path_str(&path), &sock);
}

#[test]
fn ready_on_an_abstract_socket() {
    require_fuse!();
    let name = format!("mirrorfs-test-notify-{}", std::process::id());
    let sock = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(&name).unwrap()).unwrap();
    ready_then_stop(&format!("@{name}"), &sock);
}

/// Without `NOTIFY_SOCKET` nothing is sent and nothing changes (every other test mounts that
/// way); with one that nobody listens on, the mount still works (a warning in the log).
#[test]
fn a_dead_notify_socket_does_not_stop_the_mount() {
    require_fuse!();
    let d = TestDirs::new(2);
    let out = run_timeout(
        Command::new(mirrorfs_bin())
            .arg(d.legs_arg())
            .arg(&d.mnt)
            .env("NOTIFY_SOCKET", d.root().join("nobody-listens.sock")),
        Duration::from_secs(30),
    );
    assert_exit(&out, 0, "mount with a dead NOTIFY_SOCKET");
    let m = by_hand(d);
    fs::write(m.path("f"), b"x").unwrap();
    m.finish();
}

/// A guard for a mount made by hand on `d` (unmounts on drop).
fn by_hand(d: TestDirs) -> ByHand {
    assert!(is_mounted(&d.mnt));
    ByHand {
        pids: daemon_pids(&d.mnt),
        d,
    }
}

struct ByHand {
    d: TestDirs,
    pids: Vec<i32>,
}

impl ByHand {
    fn path(&self, rel: &str) -> std::path::PathBuf {
        self.d.mnt.join(rel)
    }
    fn finish(self) {
        assert_legs_identical(&self.d.legs);
        unmount_path(&self.d.mnt).unwrap();
        assert!(wait_pids_gone(&self.pids, Duration::from_secs(10)));
    }
}

impl Drop for ByHand {
    fn drop(&mut self) {
        let _ = unmount_path(&self.d.mnt);
    }
}

/// The thread named `name` of process `pid`.
fn thread_named(pid: i32, name: &str) -> Option<i32> {
    fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
        .find(|t| fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end() == name))
        .and_then(|t| t.file_name().to_str()?.parse().ok())
}

/// `mirrorfs scrub start MNT --wait` (mirrorfs-scrub@.service's command) returns when the scrub
/// is over: 0 and the final line when clean, 1 when a copy differs and nothing repaired it.
/// While it runs, the daemon's scrub thread is in the idle I/O class (`ionice -p`).
#[test]
fn scrub_wait_ends_with_the_scrub_in_the_idle_class() {
    require_fuse!();
    require_tool!("ionice");
    // checksum=off: the copy made to differ below must be one no checksum decides, so that a
    // plain scrub reports it and leaves it (with checksums any scrub repairs it:
    // tests/integrity.rs).
    let m = TestMirror::new(2)
        .options(&["resync_speed_max=1M", "checksum=off"])
        .mount();
    fs::write(m.path("big"), pattern(3 * MIB, 5)).unwrap();
    fs::write(m.path("small"), b"small").unwrap();
    let pid = m.daemon_pids()[0];
    let mut child = Command::new(mirrorfs_bin())
        .args(["scrub", "start"])
        .arg(m.mnt())
        .arg("--wait")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut tid = None;
    assert!(
        wait_for(Duration::from_secs(10), || {
            tid = thread_named(pid, "scrub");
            tid.is_some()
        }),
        "no thread named 'scrub' in the daemon {pid}"
    );
    let out = run("ionice", &[&"-p", &tid.unwrap().to_string()], TOOL_TIMEOUT);
    assert_eq!(
        text(&out.stdout).trim(),
        "idle",
        "ionice -p of the scrub thread"
    );
    let status = wait_timeout(&mut child, Duration::from_secs(60), "scrub --wait");
    let out = child.wait_with_output().unwrap();
    let printed = text(&out.stdout);
    assert!(status.success(), "scrub --wait: {status}\n{printed}");
    assert!(
        printed
            .trim_end()
            .ends_with("0 differences, 0 repaired, 0 errors")
            && printed.contains("scrub finished after"),
        "{printed}"
    );
    // No running scrub afterwards: --wait returned when it was over.
    let doc = wait_scrubbed(m.mnt());
    assert_eq!(doc["state"], "finished");

    // A copy that differs, found and not repaired: exit 1.
    mirrorfs_ok(&[&"set", &m.mnt(), &"resync_speed_max", &"0"]);
    corrupt_keeping_times(&m.leg(1).join("small"), 0, 2);
    let out = run_mirrorfs([
        "scrub".as_ref(),
        "start".as_ref(),
        m.mnt().as_os_str(),
        "--wait".as_ref(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("1 differences, 0 repaired"),
        "{}",
        text(&out.stdout)
    );
    // --repair=leg0 fixes it, and --wait says so with 0.
    let out = run_mirrorfs([
        "scrub".as_ref(),
        "start".as_ref(),
        m.mnt().as_os_str(),
        "--repair=leg0".as_ref(),
        "--wait".as_ref(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    m.finish();
}
