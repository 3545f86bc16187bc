//! The FUSE layer: the session with the kernel and the two transports that carry its requests.
//!
//! - `session.rs`: mounting and INIT, through `fuser`;
//! - `abi.rs`: the kernel's structs, declared once;
//! - `request.rs`: every opcode decoded in one place; `reply.rs`: answers encoded;
//! - `dispatch.rs`: [`MirrorFuse`], each request one call of the core;
//! - `devfuse.rs`: the /dev/fuse transport; `uring.rs`: FUSE over io_uring.
//!
//! [`mount`] mounts and settles INIT, [`Mounted::serve`] serves until the unmount. Which
//! transport a mount uses (`transport=`) is decided here, and said in the log and the stats.

pub mod abi;
mod devfuse;
pub mod dispatch;
pub mod reply;
pub mod request;
mod session;
mod uring;

use crate::config::{KernelCache, Transport};
use crate::fs::kernel::Notify;
use crate::fs::MirrorFs;
use crate::stats::TransportStats;
pub use dispatch::{Access, MirrorFuse, Negotiated};
use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
pub use uring::Tuning as RingTuning;

/// Where the kernel's switch for FUSE over io_uring is.
pub const URING_SWITCH: &str = "/sys/module/fuse/parameters/enable_uring";

/// The fix to give when the switch is off.
pub const URING_FIX: &str = "turn it on with 'echo Y > /sys/module/fuse/parameters/enable_uring' \
     (every boot: contrib/tmpfiles.d/mirrorfs-fuse-uring.conf, or fuse.enable_uring=1 on the \
     kernel command line), or mount with transport=devfuse";

/// Whether the kernel offers FUSE over io_uring to new mounts: `Some(on)`, or `None` when the
/// kernel has no such switch (built without `CONFIG_FUSE_IO_URING`, or older than 6.14).
pub fn uring_switch() -> Option<bool> {
    std::fs::read_to_string(URING_SWITCH)
        .ok()
        .map(|s| matches!(s.trim(), "Y" | "y" | "1"))
}

/// Refuses `transport=uring` before anything is touched when the kernel cannot give it.
pub fn check_transport(t: Transport) -> Result<(), String> {
    match (t, uring_switch()) {
        (Transport::Uring, None) => Err(format!(
            "transport=uring: this kernel has no FUSE over io_uring ({URING_SWITCH} is missing: \
             it needs Linux 6.14+ with CONFIG_FUSE_IO_URING); mount with transport=devfuse"
        )),
        (Transport::Uring, Some(false)) => Err(format!(
            "transport=uring: FUSE over io_uring is off in this kernel ({URING_SWITCH} is N): \
             {URING_FIX}"
        )),
        _ => Ok(()),
    }
}

/// Answers one request, turning a panic of the core into EIO (logged) instead of a request
/// that is never answered.
pub(crate) fn answer_guarded(
    fuse: &MirrorFuse,
    h: &abi::InHeader,
    head: &[u8],
    payload: &[u8],
) -> reply::Answer {
    fuse.count_request();
    let op = match request::decode(h.opcode, head, payload) {
        Ok(op) => op,
        Err(request::Malformed) => {
            log::error!("a malformed request (opcode {}): answered EINVAL", h.opcode);
            return match request::is_unanswered(h.opcode) {
                true => reply::Answer::Nothing,
                false => reply::Answer::Error(libc::EINVAL),
            };
        }
    };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fuse.handle(h, op))) {
        Ok(a) => a,
        Err(_) => {
            log::error!(
                "the daemon panicked answering a request (opcode {}, node {}): answered EIO",
                h.opcode,
                h.nodeid
            );
            match request::is_unanswered(h.opcode) {
                true => reply::Answer::Nothing,
                false => reply::Answer::Error(libc::EIO),
            }
        }
    }
}

/// A mounted session whose INIT is answered, not yet served.
pub struct Mounted {
    /// The mount this process made (`None` for a successor, which took a session over).
    session: Option<fuser::Session<session::Handshake>>,
    /// The connection's descriptor.
    dev: Arc<OwnedFd>,
    /// /dev/fuse readers' descriptors a successor took over: its readers read them again.
    readers: Vec<OwnedFd>,
    neg: Negotiated,
    transport: Transport,
    mountpoint: PathBuf,
}

/// How a serving mount is unmounted from another thread (a signal).
pub struct Unmounter {
    /// The mount this process made (`None` for a session taken over: `umount` of the path).
    session: Option<fuser::SessionUnmounter>,
    mountpoint: PathBuf,
}

impl Unmounter {
    /// One plain unmount (`fuser`'s once, for the mount this process made).
    pub fn unmount(&mut self) -> std::io::Result<()> {
        match self.session.take() {
            Some(mut u) => u.unmount(),
            None => crate::sys::umount(&self.mountpoint, 0),
        }
    }

    /// Unmounts as soon as the mount is free: while it is busy (EBUSY: a program has a file,
    /// or its directory, in it), tries again every 100 ms, with a warning after 2 s, so that
    /// a signal is never lost. A plain unmount fails even when something is inside the mount
    /// for an instant: under load (two busy loops beside `tests/daemon_lifecycle.rs`), a
    /// signal right after a write met EBUSY once in every few dozen runs, and the daemon
    /// served on. Not a lazy unmount (`MNT_DETACH`): the kernel then ended the connection as
    /// aborted once the last program let go, and the daemon ended as after a crash.
    pub fn unmount_when_free(&mut self) -> std::io::Result<()> {
        let start = std::time::Instant::now();
        let mut warned = false;
        loop {
            match self.unmount() {
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
                r => return r,
            }
            if !warned && start.elapsed() >= std::time::Duration::from_secs(2) {
                warned = true;
                log::warn!(
                    "'{}' is in use: unmounting as soon as it is not",
                    self.mountpoint.display()
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}

/// Mounts on `mountpoint` and answers INIT; `transport` says whether to ask for io_uring.
pub fn mount(
    cache: KernelCache,
    config: &fuser::Config,
    mountpoint: &Path,
    transport: Transport,
) -> std::io::Result<Mounted> {
    let out = Arc::new(Mutex::new(Negotiated::default()));
    let hs = session::Handshake {
        cache,
        want_uring: transport != Transport::Devfuse,
        out: out.clone(),
    };
    let session = fuser::Session::new(hs, mountpoint, config)?;
    let neg = out.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let dev = Arc::new(session.as_fd().try_clone_to_owned()?);
    Ok(Mounted {
        session: Some(session),
        dev,
        readers: Vec::new(),
        neg,
        transport,
        mountpoint: mountpoint.to_path_buf(),
    })
}

/// A session another process mounted, taken over (`docs/architecture.md`, "A mount that
/// outlives its daemon"): `dev` is its connection's descriptor and `readers` the /dev/fuse
/// readers' descriptors the predecessor used (the keeper held them), `neg` what its INIT
/// settled.
pub fn take_over(
    dev: OwnedFd,
    readers: Vec<OwnedFd>,
    neg: Negotiated,
    transport: Transport,
    mountpoint: &Path,
) -> Mounted {
    Mounted {
        session: None,
        dev: Arc::new(dev),
        readers,
        neg,
        transport,
        mountpoint: mountpoint.to_path_buf(),
    }
}

/// `FUSE_NOTIFY_RESEND`: the notification code.
const NOTIFY_RESEND: i32 = 7;
/// `FUSE_NOTIFY_INVAL_INODE` and `FUSE_NOTIFY_INVAL_ENTRY`.
const NOTIFY_INVAL_INODE: i32 = 2;
const NOTIFY_INVAL_ENTRY: i32 = 3;

/// Writes the notification `code` with `body` on the connection `dev`.
fn notify_kernel(dev: &OwnedFd, code: i32, body: &[&[u8]]) -> std::io::Result<()> {
    use std::io::Write;
    let len: usize = 16 + body.iter().map(|b| b.len()).sum::<usize>();
    let header = abi::OutHeader {
        len: len as u32,
        error: code,
        unique: 0,
    };
    let mut parts: Vec<std::io::IoSlice<'_>> = vec![std::io::IoSlice::new(
        zerocopy::IntoBytes::as_bytes(&header),
    )];
    parts.extend(body.iter().map(|b| std::io::IoSlice::new(b)));
    let mut f = File::from(dev.try_clone()?);
    let n = f.write_vectored(&parts)?;
    match n == len {
        true => Ok(()),
        false => Err(std::io::Error::other("a notification was cut short")),
    }
}

/// What a serving thread ended with.
pub(crate) type Ended = (String, std::thread::Result<std::io::Result<()>>);

impl Mounted {
    /// What tells the kernel of changes behind its back (over /dev/fuse on both transports).
    pub fn notifier(&self) -> KernelNotifier {
        KernelNotifier(self.dev.clone())
    }

    pub fn unmount_callable(&mut self) -> Unmounter {
        Unmounter {
            session: self.session.as_mut().map(|s| s.unmount_callable()),
            mountpoint: self.mountpoint.clone(),
        }
    }

    pub fn unmount(&mut self) {
        let _ = self.unmount_callable().unmount();
    }

    /// What INIT settled.
    pub fn negotiated(&self) -> &Negotiated {
        &self.neg
    }

    /// Asks the kernel to send again every request a predecessor read and did not answer
    /// (`FUSE_NOTIFY_RESEND`, Linux 6.9+): they come back marked as resent.
    pub fn resend(&self) -> std::io::Result<()> {
        notify_kernel(&self.dev, NOTIFY_RESEND, &[])
    }

    /// Whether the kernel took io_uring; with `transport=uring`, an error if it did not.
    pub fn check_uring(&self) -> Result<(), String> {
        match (self.transport, self.neg.uring) {
            (Transport::Uring, false) => Err(format!(
                "transport=uring: the kernel did not offer FUSE over io_uring at INIT: {URING_FIX}"
            )),
            _ => Ok(()),
        }
    }

    /// Serves requests until the unmount, then lets the core go of the legs. `threads`
    /// /dev/fuse readers; over io_uring also one queue per possible CPU.
    pub fn serve(
        mut self,
        fs: Arc<MirrorFs>,
        cache: KernelCache,
        access: Access,
        threads: usize,
        ring: uring::Tuning,
        serving_now: impl FnOnce(&[BorrowedFd<'_>]),
    ) -> Result<(), String> {
        let dev = self.dev.clone();
        // Readers' descriptors a predecessor used (a successor reads them again), and a copy
        // of every reader's descriptor for whoever keeps the session (`serving_now`).
        let mut taken: std::collections::VecDeque<OwnedFd> =
            std::mem::take(&mut self.readers).into();
        let mut reader_fds: Vec<OwnedFd> = Vec::new();
        let fuse = Arc::new(MirrorFuse::new(
            fs.clone(),
            cache,
            self.neg.clone(),
            access,
            dev.clone(),
        ));
        let (tx, rx) = crossbeam_channel::unbounded::<Ended>();
        let spawn = |name: String, f: Box<dyn FnOnce() -> std::io::Result<()> + Send>| {
            let tx = tx.clone();
            let n = name.clone();
            std::thread::Builder::new()
                .name(name)
                .spawn(move || {
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
                    let _ = tx.send((n, r));
                })
                .map(|_| ())
                .map_err(|e| format!("cannot start a FUSE thread: {e}"))
        };
        let mut serving = 0usize;
        let mut readers = 0usize;
        let mut more_readers = |upto: usize| -> Result<(), String> {
            while readers < upto || !taken.is_empty() {
                let file = match taken.pop_front() {
                    Some(fd) => File::from(fd),
                    None => devfuse_file(&dev, readers)
                        .map_err(|e| format!("cannot clone the FUSE descriptor: {e}"))?,
                };
                reader_fds.push(
                    file.as_fd()
                        .try_clone_to_owned()
                        .map_err(|e| format!("cannot duplicate the FUSE descriptor: {e}"))?,
                );
                let fuse = fuse.clone();
                spawn(
                    format!("fuse-{readers}"),
                    Box::new(move || devfuse::serve_one(&fuse, file)),
                )?;
                readers += 1;
                serving += 1;
            }
            Ok(())
        };
        // Over io_uring, /dev/fuse carries only forgets, interrupts and what comes before the
        // rings are ready: one reader, which also lets the kernel batch forgets (eight readers
        // woke one each, for every file an rm -rf removed).
        let wanted = threads.max(1);
        more_readers(if self.neg.uring { 1 } else { wanted })?;
        let mut stats = TransportStats {
            kind: "devfuse".into(),
            why: String::new(),
            queues: 0,
            queue_depth: 0,
            devfuse_threads: wanted,
            requests: 0,
            ring_reads: 0,
            ring_reads_redone: 0,
        };
        let mut ring_threads = 0;
        match (self.transport, self.neg.uring) {
            (Transport::Devfuse, _) => stats.why = "transport=devfuse".into(),
            (_, false) => {
                stats.why = format!(
                    "transport=auto: the kernel does not offer FUSE over io_uring ({URING_SWITCH} \
                     is {})",
                    match uring_switch() {
                        Some(true) => "Y, but INIT did not offer it",
                        Some(false) => "N",
                        None => "missing",
                    }
                );
                log::warn!(
                    "transport: /dev/fuse, since FUSE over io_uring is off in this kernel; for \
                     io_uring, {URING_FIX}"
                );
            }
            (t, true) => {
                let file = File::from(
                    dev.try_clone()
                        .map_err(|e| format!("cannot duplicate the FUSE descriptor: {e}"))?,
                );
                match uring::start(fuse.clone(), Arc::new(file), &tx, ring) {
                    Ok((queues, threads)) => {
                        stats.kind = "uring".into();
                        stats.why = format!("transport={}: the kernel offers it", t.name());
                        stats.queues = queues;
                        stats.queue_depth = uring::DEPTH;
                        stats.devfuse_threads = 1;
                        fuse.set_rings();
                        ring_threads = threads;
                    }
                    Err(e) if t == Transport::Uring => {
                        self.unmount();
                        return Err(format!("transport=uring: cannot set up the rings: {e}"));
                    }
                    Err(e) => {
                        stats.why = format!("transport=auto: the rings could not be set up: {e}");
                        log::error!("transport: /dev/fuse, since the io_uring rings could not be set up: {e}");
                        more_readers(wanted)?;
                    }
                }
            }
        }
        serving += ring_threads;
        log::info!(
            "transport: {} ({}; {} queue(s), {} /dev/fuse thread(s))",
            stats.kind,
            stats.why,
            stats.queues,
            stats.devfuse_threads
        );
        fs.set_transport(stats);
        let devices: Vec<BorrowedFd<'_>> = std::iter::once(dev.as_fd())
            .chain(reader_fds.iter().map(|f| f.as_fd()))
            .collect();
        serving_now(&devices);
        drop(devices);
        drop(tx);
        for _ in 0..serving {
            let Ok((name, r)) = rx.recv() else { break };
            let why = match r {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => format!("{name} ended with an error: {e}"),
                Err(p) => format!("{name} panicked: {}", panic_text(&p)),
            };
            // A thread that stopped holds its request for ever, and the other threads may be
            // in the middle of theirs: end as a crash would. Abort the connection (every
            // waiting request fails with ENOTCONN), detach the mount, and return without
            // waiting for the others or letting the core mark the legs clean: the process
            // exits, its descriptors close (which ends the connection if the abort could
            // not), and the next mount recovers as after a crash.
            log::error!(
                "FUSE transport: {why}; ending the mount (the next mount recovers as after a \
                 crash)"
            );
            abort_connection(&self.mountpoint);
            if let Err(e) = crate::sys::umount(&self.mountpoint, libc::MNT_DETACH) {
                log::error!("cannot detach {}: {e}", self.mountpoint.display());
            }
            return Err(format!("the session ended: {why}"));
        }
        fuse.destroy();
        Ok(())
    }
}

/// A panic's message, when it has one.
fn panic_text(p: &Box<dyn std::any::Any + Send>) -> &str {
    match p.downcast_ref::<&str>() {
        Some(s) => s,
        None => p.downcast_ref::<String>().map_or("(no message)", |s| s),
    }
}

/// The descriptor reader `i` uses: the session's own for the first, a clone (a queue of its
/// own in the kernel) for the others.
fn devfuse_file(dev: &Arc<OwnedFd>, i: usize) -> std::io::Result<File> {
    match i {
        0 => Ok(File::from(dev.try_clone()?)),
        _ => crate::sys::fusedev::clone_device(dev.as_fd()),
    }
}

/// Aborts the FUSE connection mounted on `mountpoint` (`/sys/fs/fuse/connections/N/abort`),
/// mounting the fusectl filesystem there first if nobody has (as systemd does at boot).
pub fn abort_connection(mountpoint: &Path) {
    const CONNECTIONS: &str = "/sys/fs/fuse/connections";
    if !crate::sys::mountinfo::read()
        .iter()
        .any(|e| e.mount_point == Path::new(CONNECTIONS))
    {
        if let Err(e) = crate::sys::mount_fusectl(CONNECTIONS) {
            log::warn!("cannot mount fusectl on {CONNECTIONS}: {e}");
            return;
        }
    }
    let Some(e) = crate::sys::mountinfo::read()
        .into_iter()
        .rev()
        .find(|e| e.mount_point == mountpoint)
    else {
        log::error!("cannot find the mount to abort its FUSE connection");
        return;
    };
    let dev = (e.major << 20) | e.minor;
    let path = format!("/sys/fs/fuse/connections/{dev}/abort");
    if let Err(err) = std::fs::write(&path, "1") {
        log::error!("cannot abort the FUSE connection ({path}): {err}");
    }
}

/// [`Notify`] through notifications written to /dev/fuse (on both transports).
pub struct KernelNotifier(Arc<OwnedFd>);

impl Notify for KernelNotifier {
    fn inval_inode(&self, ino: u64, data: bool) {
        // Offset -1: the attributes only; 0 with length 0: every cached page as well.
        let offset: i64 = if data { 0 } else { -1 };
        let mut body = [0u8; 24];
        body[..8].copy_from_slice(&ino.to_ne_bytes());
        body[8..16].copy_from_slice(&offset.to_ne_bytes());
        if let Err(e) = notify_kernel(&self.0, NOTIFY_INVAL_INODE, &[&body]) {
            log::debug!("kernel notice: node {ino}: {e}");
        }
    }

    fn inval_entry(&self, parent: u64, name: &OsStr) {
        let name = name.as_encoded_bytes();
        let mut head = [0u8; 16];
        head[..8].copy_from_slice(&parent.to_ne_bytes());
        head[8..12].copy_from_slice(&(name.len() as u32).to_ne_bytes());
        if let Err(e) = notify_kernel(&self.0, NOTIFY_INVAL_ENTRY, &[&head, name, &[0]]) {
            log::debug!("kernel notice: name {name:?} in node {parent}: {e}");
        }
    }
}
