//! The keeper: the process that holds a mount's FUSE session, so that the mount outlives the
//! process serving it (`-o keeper=on`; `docs/architecture.md`, "A mount that outlives its
//! daemon").
//!
//! The keeper starts the server (this program again, in the foreground, with [`ENV_LINK`]
//! naming its end of a socket pair). The server mounts, and hands the keeper a copy of every
//! descriptor of the FUSE connection and the memory file of its session log
//! (`fs/takeover.rs`). A FUSE connection lives as long as some process holds a descriptor of
//! it, so when the server dies the mount stays, and every request waits. The keeper then
//! starts a successor ([`ENV_SUCCESSOR`]), hands it the descriptors and the log; the
//! successor opens the legs (recovering as after a crash), takes the node ids and handles
//! over, asks the kernel to send again what the dead server had read and not answered
//! (`FUSE_NOTIFY_RESEND`), and serves. Programs see a pause, not an error.
//!
//! A server that dies `keeper_retries` times within `keeper_window` (5 within 60 s) is not
//! started again: the keeper aborts the connection (every waiting request fails instead of hanging), detaches
//! the mount, and ends. Over io_uring the keeper does the same at the first death: the kernel
//! (6.18) sends again only the requests read through /dev/fuse, and a request a ring entry of
//! the dead server held would wait for ever.
//!
//! Messages on the socket (`SOCK_SEQPACKET`): a word, then JSON, descriptors along with some.

use crate::fuse::Negotiated;
use crate::sys::session::{recv_with_fds, send_with_fds, set_inheritable, socket_pair};
use serde::{Deserialize, Serialize};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::time::Instant;
use wait_timeout::ChildExt;

/// The server's end of the socket to its keeper (a descriptor number).
pub const ENV_LINK: &str = "MIRRORFS_KEEPER_FD";
/// Set for a successor: it takes the session over instead of mounting.
pub const ENV_SUCCESSOR: &str = "MIRRORFS_SUCCESSOR";
/// Set when a server asks a program whether it can take its session over: the program prints
/// [`probe_answer`] and ends.
pub const ENV_PROBE: &str = "MIRRORFS_TAKEOVER_PROBE";

/// What a program that can take this build's session over prints when probed: the format of
/// the keeper's messages and of the session log (`fs/takeover.rs`), bumped when either
/// changes.
pub fn probe_answer() -> String {
    format!("mirrorfs-takeover {}", crate::fs::takeover::FORMAT)
}

/// Whether `program` can take this build's session over: it is probed ([`ENV_PROBE`]) and
/// must answer [`probe_answer`] within 5 s. Why not, if it cannot.
pub fn probe(program: &std::path::Path) -> Result<(), String> {
    use std::io::Read;
    let mut child = std::process::Command::new(program)
        .env(ENV_PROBE, "1")
        .env_remove(ENV_LINK)
        .env_remove(ENV_SUCCESSOR)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run it: {e}"))?;
    let status = match child.wait_timeout(std::time::Duration::from_secs(5)) {
        Ok(Some(st)) => st,
        _ => {
            let _ = child.kill();
            let _ = child.wait();
            return Err("it did not answer the takeover probe within 5 s".into());
        }
    };
    let mut out = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    let want = probe_answer();
    match (status.success(), out.trim()) {
        (true, got) if got == want => Ok(()),
        (_, got) => Err(format!(
            "it cannot take this session over (asked for '{want}', it said '{}'): an older \
             build, or another session format",
            got.lines().next().unwrap_or("")
        )),
    }
}

/// Set when the keeper logs to the system log: so does the server.
pub const ENV_SYSLOG: &str = "MIRRORFS_KEEPER_SYSLOG";

/// How long after a server's exit the keeper waits for the rest of its messages (its socket
/// closes when the last process holding it ends).
const LAST_WORDS: std::time::Duration = std::time::Duration::from_secs(2);

/// A restart the server asked its keeper for: the program to start instead, if another.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Restart {
    pub program: Option<PathBuf>,
}

/// What a successor is told when it takes over (with the descriptors).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Takeover {
    pub negotiated: Negotiated,
    /// How many times the session was taken over, this one counted, and why the last time.
    pub restarts: u64,
    pub cause: String,
}

fn send(sock: BorrowedFd<'_>, word: &str, body: &str, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    send_with_fds(sock, format!("{word} {body}").as_bytes(), fds)
}

/// The server's side of the socket.
pub struct Link {
    sock: OwnedFd,
}

impl Link {
    /// The link this process was started with, if a keeper started it.
    pub fn from_env() -> Option<Link> {
        let n: i32 = std::env::var(ENV_LINK).ok()?.parse().ok()?;
        crate::sys::session::inherited(n).map(|sock| Link { sock })
    }

    /// Whether this process is a successor (it takes a session over).
    pub fn is_successor() -> bool {
        std::env::var_os(ENV_SUCCESSOR).is_some() && std::env::var_os(ENV_LINK).is_some()
    }

    /// The session this server mounted: what INIT settled, the memory file of its log, and
    /// every descriptor of the connection (the session's and the readers').
    pub fn session(
        &self,
        neg: &Negotiated,
        log: BorrowedFd<'_>,
        devices: &[BorrowedFd<'_>],
    ) -> io::Result<()> {
        let mut fds = vec![log];
        fds.extend_from_slice(devices);
        let body = serde_json::to_string(neg).map_err(io::Error::other)?;
        send(self.sock.as_fd(), "session", &body, &fds)
    }

    /// A new log (a successor's, started from a snapshot): the keeper keeps it instead.
    pub fn log(&self, log: BorrowedFd<'_>) -> io::Result<()> {
        send(self.sock.as_fd(), "log", "", &[log])
    }

    /// The mount answers.
    pub fn ready(&self) -> io::Result<()> {
        send(self.sock.as_fd(), "ready", "", &[])
    }

    /// The first start failed before the mount answered: why.
    pub fn error(&self, why: &str) -> io::Result<()> {
        send(self.sock.as_fd(), "error", why, &[])
    }

    /// The server hands its session to a successor (started from `r.program`, if given) and
    /// ends.
    pub fn restart(&self, r: &Restart) -> io::Result<()> {
        let body = serde_json::to_string(r).map_err(io::Error::other)?;
        send(self.sock.as_fd(), "restart", &body, &[])
    }

    /// A second handle on the socket (for the restart hook).
    pub fn try_clone(&self) -> io::Result<Link> {
        Ok(Link {
            sock: self.sock.try_clone()?,
        })
    }

    /// The mount was unmounted: the server ends, and so does the keeper.
    pub fn unmounted(&self) -> io::Result<()> {
        send(self.sock.as_fd(), "unmounted", "", &[])
    }

    /// A successor's first step: the session to take over, its log, the connection's
    /// descriptor and the readers'.
    pub fn takeover(&self) -> io::Result<(Takeover, std::fs::File, OwnedFd, Vec<OwnedFd>)> {
        let mut buf = vec![0u8; 64 * 1024];
        let (n, fds) = recv_with_fds(self.sock.as_fd(), &mut buf)?;
        let text = std::str::from_utf8(&buf[..n]).map_err(io::Error::other)?;
        let body = text
            .strip_prefix("takeover ")
            .ok_or_else(|| io::Error::other(format!("the keeper said {text:?}, not takeover")))?;
        let t: Takeover = serde_json::from_str(body).map_err(io::Error::other)?;
        let mut fds = fds.into_iter();
        let (Some(log), Some(dev)) = (fds.next(), fds.next()) else {
            return Err(io::Error::other("the keeper sent no session descriptors"));
        };
        Ok((t, std::fs::File::from(log), dev, fds.collect()))
    }
}

/// What the keeper holds of the session.
struct Held {
    negotiated: Negotiated,
    log: OwnedFd,
    devices: Vec<OwnedFd>,
}

/// What the keeper waits for.
enum Event {
    Message(String, Vec<OwnedFd>),
    /// The server's socket closed.
    Closed,
    Exited(std::process::ExitStatus),
    /// The server is gone: it exited and its socket closed (or [`LAST_WORDS`] passed).
    Died(std::process::ExitStatus),
    Signal(i32),
}

/// How the keeper starts a server.
pub struct Start {
    /// The program and its arguments (the server's: in the foreground).
    pub program: PathBuf,
    pub args: Vec<std::ffi::OsString>,
    /// The directory it starts in (where relative paths were given).
    pub dir: PathBuf,
    pub syslog: bool,
}

/// Starts a server (a successor when `successor`), with its end of a new socket pair.
fn spawn(start: &Start, successor: bool) -> io::Result<(std::process::Child, OwnedFd)> {
    let (ours, theirs) = socket_pair()?;
    set_inheritable(theirs.as_fd(), true)?;
    let mut cmd = std::process::Command::new(&start.program);
    cmd.args(&start.args)
        .env(ENV_LINK, theirs.as_raw_fd().to_string())
        .env_remove(ENV_SUCCESSOR)
        .env_remove("NOTIFY_SOCKET");
    if successor {
        cmd.env(ENV_SUCCESSOR, "1");
    }
    if start.syslog {
        cmd.env(ENV_SYSLOG, "1");
    }
    if start.dir.is_dir() {
        cmd.current_dir(&start.dir);
    } else {
        cmd.current_dir("/");
    }
    let child = cmd.spawn()?;
    drop(theirs);
    Ok((child, ours))
}

/// Reads the server's messages into `tx` until its socket closes.
fn listen(sock: OwnedFd, tx: crossbeam_channel::Sender<(u64, Event)>, generation: u64) {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match recv_with_fds(sock.as_fd(), &mut buf) {
                Ok((0, _)) | Err(_) => {
                    let _ = tx.send((generation, Event::Closed));
                    return;
                }
                Ok((n, fds)) => {
                    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                    let _ = tx.send((generation, Event::Message(text, fds)));
                }
            }
        }
    });
}

/// Runs the keeper until the mount ends; its exit status. `ready` (background mode) learns
/// "OK" once the mount answers, or the first server's error.
pub fn run(
    mut start: Start,
    config: &crate::config::MountConfig,
    mountpoint: PathBuf,
    mut ready: Option<std::io::PipeWriter>,
) -> i32 {
    use std::io::Write;
    let (tx, rx) = crossbeam_channel::unbounded::<(u64, Event)>();
    // Termination signals go to the server, which unmounts (they were blocked before any
    // thread started, so only this thread takes them).
    crate::sys::block_termination_signals();
    {
        let tx = tx.clone();
        std::thread::spawn(move || loop {
            let sig = crate::sys::wait_for_termination_signal();
            let _ = tx.send((0, Event::Signal(sig)));
        });
    }
    let mut dispatcher = super::events::Dispatcher::new(&mountpoint, config);
    let mut held: Option<Held> = None;
    let mut deaths: Vec<Instant> = Vec::new();
    let mut restarts = 0u64;
    let mut generation = 1u64;
    let mut unmounted = false;
    let mut was_ready = false;
    let mut first_error: Option<String> = None;
    let server = match spawn(&start, false) {
        Ok((child, sock)) => {
            listen(sock, tx.clone(), generation);
            child
        }
        Err(e) => {
            let why = format!("cannot start the server: {e}");
            if let Some(w) = ready.as_mut() {
                let _ = w.write_all(why.as_bytes());
            }
            log::error!("{why}");
            return 1;
        }
    };
    let wait = |child: std::process::Child, tx: crossbeam_channel::Sender<(u64, Event)>, g| {
        std::thread::spawn(move || {
            let mut child = child;
            if let Ok(st) = child.wait() {
                let _ = tx.send((g, Event::Exited(st)));
            }
        });
    };
    let mut pid = server.id();
    wait(server, tx.clone(), generation);
    // A successor that has not served yet: since when (`keeper_start_timeout`), and how many
    // in a row never served.
    let mut starting: Option<Instant> = None;
    let mut never_served = 0usize;
    let mut served = false;
    // The server's end: its exit status, and whether its socket closed. A death is handled
    // once both are in (every message it sent, a restart's among them, is read first), or
    // [`LAST_WORDS`] after the exit.
    let mut exited: Option<(std::process::ExitStatus, Instant)> = None;
    let mut closed = false;
    // A restart asked for (`user.mirrorfs.restart`): the program to start, if another.
    let mut planned: Option<Restart> = None;
    // The program before a restart to another one, until the new one serves.
    let mut fallback: Option<PathBuf> = None;
    loop {
        let limit = config.keeper_start_timeout;
        let deadline = match (exited, starting) {
            (Some((_, t)), _) => Some(t + LAST_WORDS),
            (None, Some(t0)) if !limit.is_zero() => Some(t0 + limit),
            _ => None,
        };
        let got = match deadline {
            Some(d) => rx.recv_deadline(d),
            None => rx
                .recv()
                .map_err(|_| crossbeam_channel::RecvTimeoutError::Disconnected),
        };
        let mut died = None;
        match got {
            Ok(_) | Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {}
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => match exited.take() {
                Some((status, _)) => died = Some(status),
                None => {
                    log::error!(
                        "keeper: the successor (pid {pid}) did not serve within {} s \
                         (keeper_start_timeout): killed",
                        limit.as_secs_f64()
                    );
                    crate::sys::signal(pid as i32, libc::SIGKILL);
                    starting = None;
                    continue;
                }
            },
        }
        let (g, ev) = match (got, died) {
            (Ok(x), _) => x,
            (Err(_), Some(status)) => (generation, Event::Died(status)),
            (Err(_), None) => return 1,
        };
        let ev = match ev {
            Event::Exited(status) if g == generation => {
                if !closed && was_ready {
                    exited = Some((status, Instant::now()));
                    continue;
                }
                Event::Died(status)
            }
            Event::Closed if g == generation => {
                closed = true;
                match exited.take() {
                    Some((status, _)) => Event::Died(status),
                    None => continue,
                }
            }
            ev => ev,
        };
        match ev {
            Event::Signal(sig) => {
                log::info!("keeper: signal {sig}: passed to the server (pid {pid})");
                crate::sys::signal(pid as i32, sig);
            }
            _ if g != generation => {}
            Event::Message(text, fds) => {
                let (word, body) = text.split_once(' ').unwrap_or((&text, ""));
                match word {
                    "session" => match serde_json::from_str::<Negotiated>(body) {
                        Ok(negotiated) if fds.len() >= 2 => {
                            let mut fds = fds.into_iter();
                            let log = fds.next().expect("two or more");
                            held = Some(Held {
                                negotiated,
                                log,
                                devices: fds.collect(),
                            });
                        }
                        _ => log::error!("keeper: a session message that does not parse"),
                    },
                    "log" => match (held.as_mut(), fds.into_iter().next()) {
                        (Some(h), Some(log)) => h.log = log,
                        _ => log::error!("keeper: a log message without a session or a log"),
                    },
                    "ready" => {
                        was_ready = true;
                        starting = None;
                        never_served = 0;
                        served = true;
                        if let Some(mut w) = ready.take() {
                            let _ = w.write_all(b"OK");
                            crate::sys::redirect_stdio_to_null();
                        }
                        super::notify::notify(&format!(
                            "READY=1\nMAINPID={}\nSTATUS=serving {} (server pid {pid}, {restarts} \
                             restart(s))",
                            std::process::id(),
                            mountpoint.display()
                        ));
                    }
                    "error" => first_error = Some(body.to_string()),
                    "restart" => match serde_json::from_str::<Restart>(body) {
                        Ok(r) => {
                            log::warn!(
                                "keeper: the server (pid {pid}) hands the session over for a \
                                 restart ({})",
                                r.program
                                    .as_ref()
                                    .map_or("same program".into(), |p| p.display().to_string())
                            );
                            planned = Some(r);
                        }
                        Err(e) => log::error!("keeper: a restart message that does not parse: {e}"),
                    },
                    "unmounted" => unmounted = true,
                    _ => log::error!("keeper: an unknown message {word:?}"),
                }
            }
            Event::Closed | Event::Exited(_) => {}
            Event::Died(status) => {
                if !was_ready {
                    // The first server failed: nothing to take over; the mount (if it was
                    // made) goes, and the one who asked for it learns why.
                    let why = first_error.take().unwrap_or_else(|| {
                        format!("the server ended before the mount was ready ({status})")
                    });
                    if held.is_some() {
                        crate::fuse::abort_connection(&mountpoint);
                        let _ = crate::sys::umount(&mountpoint, libc::MNT_DETACH);
                    }
                    match ready.as_mut() {
                        Some(w) => {
                            let _ = w.write_all(why.as_bytes());
                        }
                        None => log::error!("{why}"),
                    }
                    return 1;
                }
                if unmounted || held.is_none() {
                    super::notify::notify("STOPPING=1");
                    return match unmounted && status.success() {
                        true => 0,
                        false => 1,
                    };
                }
                let h = held.as_ref().expect("held");
                if !served {
                    never_served += 1;
                    // A program restarted to that never served: the one before comes back.
                    if let Some(old) = fallback.take() {
                        log::error!(
                            "keeper: {} did not serve: back to {}",
                            start.program.display(),
                            old.display()
                        );
                        start.program = old;
                    }
                }
                let asked = planned.take().filter(|_| served);
                let cause = match (&asked, served) {
                    (Some(r), _) => format!(
                        "restart asked for ({}; the server pid {pid} handed the session over: \
                         {status})",
                        r.program
                            .as_ref()
                            .map_or("same program".into(), |p| p.display().to_string())
                    ),
                    (None, true) => format!("the server (pid {pid}) died: {status}"),
                    (None, false) => {
                        format!("the successor (pid {pid}) ended before it served: {status}")
                    }
                };
                if let Some(r) = &asked {
                    log::warn!("keeper: {cause}");
                    if let Some(p) = &r.program {
                        fallback = Some(std::mem::replace(&mut start.program, p.clone()));
                    }
                } else {
                    log::error!("keeper: {cause}");
                    dispatcher.dispatch(&crash_event("daemon_crashed", &cause, restarts));
                    let now = Instant::now();
                    deaths.retain(|t| now.duration_since(*t) < config.keeper_window);
                    deaths.push(now);
                }
                let give_up = if h.negotiated.uring {
                    Some(
                        "over io_uring, the requests a dead server's ring entries held cannot \
                         be sent again (Linux 6.18 resends only what was read from /dev/fuse)"
                            .to_string(),
                    )
                } else if never_served >= config.keeper_retries {
                    Some(format!(
                        "{never_served} successors in a row ended before they served \
                         (keeper_retries)"
                    ))
                } else if deaths.len() >= config.keeper_retries {
                    Some(format!(
                        "it died {} times within {} s (keeper_retries, keeper_window)",
                        deaths.len(),
                        config.keeper_window.as_secs_f64()
                    ))
                } else {
                    None
                };
                if let Some(why) = give_up {
                    return give_up_now(&mountpoint, &why, &mut dispatcher, restarts);
                }
                restarts += 1;
                generation += 1;
                let t = Takeover {
                    negotiated: h.negotiated.clone(),
                    restarts,
                    cause: cause.clone(),
                };
                match start_successor(&start, h, &t, &tx, generation) {
                    Ok(child) => {
                        pid = child.id();
                        served = false;
                        closed = false;
                        starting = Some(Instant::now());
                        log::warn!(
                            "keeper: successor started (pid {pid}, restart {restarts}): it takes \
                             the session over"
                        );
                        wait(child, tx.clone(), generation);
                    }
                    Err(e) => {
                        let why = format!("cannot start a successor: {e}");
                        return give_up_now(&mountpoint, &why, &mut dispatcher, restarts);
                    }
                }
            }
        }
    }
}

/// Starts a successor and hands it the session.
fn start_successor(
    start: &Start,
    h: &Held,
    t: &Takeover,
    tx: &crossbeam_channel::Sender<(u64, Event)>,
    generation: u64,
) -> io::Result<std::process::Child> {
    let (child, sock) = spawn(start, true)?;
    let mut fds = vec![h.log.as_fd()];
    fds.extend(h.devices.iter().map(|d| d.as_fd()));
    let body = serde_json::to_string(t).map_err(io::Error::other)?;
    send(sock.as_fd(), "takeover", &body, &fds)?;
    listen(sock, tx.clone(), generation);
    Ok(child)
}

fn crash_event(name: &'static str, why: &str, restarts: u64) -> super::events::Event {
    super::events::Event {
        name,
        severity: super::events::Severity::Error,
        summary: why.to_string(),
        leg: None,
        vars: vec![("RESTARTS", restarts.to_string())],
    }
}

/// Ends the mount as a crash does: aborts the connection (every waiting request fails
/// instead of hanging), detaches the mount point, says why; the keeper's exit status.
fn give_up_now(
    mountpoint: &std::path::Path,
    why: &str,
    dispatcher: &mut super::events::Dispatcher,
    restarts: u64,
) -> i32 {
    let msg = format!(
        "keeper: giving up the mount on '{}': {why}; the next mount recovers as after a crash",
        mountpoint.display()
    );
    log::error!("{msg}");
    dispatcher.dispatch(&crash_event("daemon_gave_up", why, restarts));
    crate::fuse::abort_connection(mountpoint);
    if let Err(e) = crate::sys::umount(mountpoint, libc::MNT_DETACH) {
        log::error!("keeper: cannot detach {}: {e}", mountpoint.display());
    }
    super::notify::notify("STOPPING=1");
    1
}
