//! Mounting and serving, in the foreground or as a daemon.
//!
//! Without `-f` the process forks before any thread exists. The child mounts, writes the
//! superblocks of a new mirror, and tells the parent through a pipe; the parent exits 0 only
//! then (or prints the child's error and exits 1), so `mirrorfs ...; ls MOUNT` always works.
//! SIGINT, SIGTERM and SIGHUP unmount cleanly; so does `umount MOUNT`. Once the paths are
//! resolved, the daemon's working directory is `/`. Under systemd (`$NOTIFY_SOCKET`), the
//! daemon sends READY=1 once the mount answers, and STOPPING=1 when it goes.

use super::validate::{validate_with, Validated};
use super::Args;
use crate::config::MountConfig;
use crate::fs::{FsConfig, MirrorFs};
use crate::leg::{Leg, LegState};
use crate::meta::array::{ArrayPlan, PlannedLeg};
use crate::sys;
use std::io::{Read, Write};
use std::sync::Arc;

/// Everything checked, nothing touched yet.
struct Prepared {
    config: MountConfig,
    policy: Box<dyn crate::policy::ReadPolicy>,
    checked: Validated,
    plan: ArrayPlan,
}

fn prepare(args: &Args) -> Result<Prepared, Vec<String>> {
    let mut config = MountConfig::parse(&args.options)?;
    config.fsname.get_or_insert_with(|| args.legs.clone());
    // Before any leg is looked at: a transport the kernel cannot give.
    crate::fuse::check_transport(config.transport).map_err(|e| vec![e])?;
    let successor = super::keeper::Link::is_successor();
    let checked = match validate_with(&args.legs, &args.mountpoint, config.degraded, successor) {
        Ok(c) => c,
        Err(e) => {
            // A leg that is not there: say whether the others could serve without it.
            let others_can_serve = !config.degraded
                && validate_with(&args.legs, &args.mountpoint, true, successor).is_ok_and(|c| {
                    ArrayPlan::prepare(
                        &c.shown,
                        &c.legs,
                        &c.missing,
                        c.some_leg_is_fs_root,
                        true,
                        None,
                    )
                    .is_ok_and(|p| !p.is_new)
                });
            return Err(vec![if others_can_serve {
                format!("{e}; mount with -o degraded to serve from the other legs")
            } else {
                e
            }]);
        }
    };
    // Legs named in options (`init_from=`, `read_policy=leg:NAME`), by the one rule.
    let names: Vec<String> = (checked.specs.iter().enumerate())
        .map(|(i, s)| s.name_at(i))
        .collect();
    let named: Vec<(&str, &std::path::Path)> = names
        .iter()
        .zip(&checked.legs)
        .map(|(n, p)| (n.as_str(), p.as_path()))
        .collect();
    let find = |what: &str| crate::leg::find(std::ffi::OsStr::new(what), &named);
    let init_from = match &config.init_from {
        None => None,
        Some(want) => Some(find(want).ok_or_else(|| {
            vec![format!(
                "invalid value for 'init_from': '{want}' (not one of the legs)"
            )]
        })?),
    };
    let policy =
        crate::policy::by_name(&config.read_policy, names.len(), &find).ok_or_else(|| {
            vec![format!(
                "invalid value for 'read_policy': '{}' (no such leg; legs: {})",
                config.read_policy,
                names.join(", ")
            )]
        })?;
    let plan = ArrayPlan::prepare(
        &checked.shown,
        &checked.legs,
        &checked.missing,
        checked.some_leg_is_fs_root,
        config.degraded,
        init_from,
    )
    .map_err(|e| vec![e])?;
    Ok(Prepared {
        config,
        policy,
        checked,
        plan,
    })
}

/// The server's arguments, as the keeper starts it: in the foreground, the legs and the mount
/// point as absolute paths (the keeper's working directory is `/`).
fn server_args(args: &Args, p: &Prepared, cwd: &std::path::Path) -> Vec<std::ffi::OsString> {
    let legs: Vec<String> = args
        .legs
        .split(':')
        .map(|leg| match std::path::Path::new(leg).is_absolute() {
            true => leg.to_string(),
            false => cwd.join(leg).to_string_lossy().into_owned(),
        })
        .collect();
    let mut out: Vec<std::ffi::OsString> = vec![
        legs.join(":").into(),
        p.checked.mountpoint.clone().into(),
        "-f".into(),
    ];
    if args.debug {
        out.push("-d".into());
    }
    for o in &args.options {
        out.push("-o".into());
        out.push(o.into());
    }
    out
}

/// Runs the mount form: sends the log where it goes (stderr with `-f`, the system log for a
/// server a background keeper started), validates, then mounts and serves (forking first
/// unless `-f`). With `keeper=on`, this process (or its forked child) keeps the session and a
/// server it starts serves (`keeper.rs`); a server started that way serves with its link to
/// the keeper.
pub fn start(args: &Args) -> Result<(), Vec<String>> {
    // A server a keeper started in the background logs where the keeper does.
    if std::env::var_os(super::keeper::ENV_SYSLOG).is_some() {
        super::logging::to_syslog(args.debug);
    } else if args.foreground {
        super::logging::to_stderr(args.debug);
    }
    let p = prepare(args)?;
    let link = super::keeper::Link::from_env();
    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    // Every path is resolved: let go of the caller's directory, which the daemon would
    // otherwise keep busy (no unmounting the disk the mount was started from).
    std::env::set_current_dir("/")
        .map_err(|e| vec![format!("cannot change directory to '/': {e}")])?;
    if link.is_some() {
        return serve(p, None, link).map_err(|e| vec![e]);
    }
    let keeper = p
        .config
        .keeper
        .then(|| -> Result<super::keeper::Start, Vec<String>> {
            Ok(super::keeper::Start {
                program: std::env::current_exe().map_err(|e| {
                    vec![format!("cannot find this program to start the server: {e}")]
                })?,
                args: server_args(args, &p, &cwd),
                dir: cwd.clone(),
                syslog: !args.foreground,
            })
        });
    let keeper = keeper.transpose()?;
    if args.foreground {
        return match keeper {
            Some(k) => {
                let mnt = p.checked.mountpoint.clone();
                match super::keeper::run(k, &p.config, mnt, None) {
                    0 => Ok(()),
                    _ => Err(vec!["the mount ended with an error (see the log)".into()]),
                }
            }
            None => serve(p, None, None).map_err(|e| vec![e]),
        };
    }
    let (mut reader, writer) = std::io::pipe().map_err(|e| vec![format!("pipe: {e}")])?;
    // SAFETY: no thread has been started yet: parsing, validation and planning run on this
    // one, and the mount's threads (FUSE workers, leg workers, the sweeper, the signal
    // thread) all start in `serve`, after the fork.
    #[allow(unsafe_code)]
    let forked = unsafe { sys::fork() };
    match forked.map_err(|e| vec![format!("fork: {e}")])? {
        0 => {
            drop(reader);
            sys::setsid();
            super::logging::to_syslog(args.debug);
            if let Some(k) = keeper {
                let mnt = p.checked.mountpoint.clone();
                std::process::exit(super::keeper::run(k, &p.config, mnt, Some(writer)));
            }
            let code = match serve(p, Some(writer), None) {
                Ok(()) => 0,
                Err(e) => {
                    log::error!("{e}");
                    1
                }
            };
            std::process::exit(code);
        }
        _child => {
            drop(writer);
            let mut msg = String::new();
            let _ = reader.read_to_string(&mut msg);
            match msg.strip_prefix("OK") {
                Some(_) => Ok(()),
                None if msg.is_empty() => {
                    Err(vec!["the daemon exited before the mount was ready".into()])
                }
                None => Err(msg.lines().map(str::to_string).collect()),
            }
        }
    }
}

/// Leg descriptors open files may hold: what the open-file limit leaves after the cached
/// descriptors (half of it) and a reserve for everything transient (lookups in flight, listings,
/// superblock writes, the FUSE channels).
fn open_fd_budget(nofile: usize, threads: usize, legs: usize) -> usize {
    let reserve = 64 + 4 * threads * legs;
    nofile
        .saturating_sub(nofile / 2)
        .saturating_sub(reserve)
        .max(legs * 4)
}

/// Mounts and serves until unmounted. `ready` (background mode) learns "OK" or the error.
fn serve(
    p: Prepared,
    mut ready: Option<std::io::PipeWriter>,
    link: Option<super::keeper::Link>,
) -> Result<(), String> {
    let fail = |ready: &mut Option<std::io::PipeWriter>, e: String| {
        if let Some(w) = ready.as_mut() {
            let _ = w.write_all(e.as_bytes());
        }
        if let Some(l) = link.as_ref() {
            let _ = l.error(&e);
        }
        e
    };
    let successor = link.is_some() && super::keeper::Link::is_successor();
    sys::clear_umask();
    let nofile = sys::raise_nofile_limit();
    // Before any thread starts, so that every thread inherits the mask and only the signal
    // thread below receives them.
    sys::block_termination_signals();
    let mut legs = Vec::new();
    for (i, path) in p.checked.legs.iter().enumerate() {
        let spec = &p.checked.specs[i];
        let leg = match &p.plan.states[i] {
            PlannedLeg::InSync => Leg::open(i, path, spec)
                .map_err(|e| fail(&mut ready, format!("leg '{}': {e}", p.checked.shown[i])))?,
            PlannedLeg::Missing(why) => {
                log::error!("DEGRADED: {why}; serving from the other legs");
                Leg::absent(i, path, spec, LegState::Missing)
            }
            PlannedLeg::Stale(why) => {
                log::error!("DEGRADED: {why}; it will be resynced from the other legs");
                Leg::absent(i, path, spec, LegState::Stale)
            }
        };
        legs.push(leg);
    }

    let fs_config = FsConfig {
        hide_lost_found: p.checked.some_leg_is_fs_root,
        fd_budget: (nofile / 2) as usize,
        open_fd_budget: open_fd_budget(nofile as usize, p.config.threads, legs.len()),
        mount: p.checked.mountpoint.clone(),
        options: p.config.clone(),
    };
    let n_legs = legs.len();
    let superblocks = p.plan.mounted_superblocks();
    let fs = MirrorFs::new(legs, superblocks, p.policy, fs_config).map_err(|e| {
        let why = match e {
            crate::errno::Errno::EAGAIN => format!(
                "cannot start {} I/O threads ({} per leg, threads={}): {e}",
                n_legs * p.config.threads,
                p.config.threads,
                p.config.threads
            ),
            _ => format!("cannot open the legs: {e}"),
        };
        fail(&mut ready, why)
    })?;
    let fs = Arc::new(fs);
    fs.mirror().set_unlisted_members(p.plan.unlisted_members);
    if p.plan.unlisted_members > 0 {
        log::error!(
            "DEGRADED: {} member(s) of the mirror were not given at mount",
            p.plan.unlisted_members
        );
    }
    if p.plan.crashed {
        // The checksum stores first: crash recovery resolves the files being written with them.
        fs.mirror().open_checksums(p.config.read_only);
        // Before serving: the files being written at the crash are made identical.
        match fs.recovery().recover_after_crash() {
            Ok(n) => log::warn!(
                "the mirror was not cleanly unmounted: {n} path(s) of the write-intent log \
                 checked and made identical on every leg"
            ),
            Err(e) => {
                return Err(fail(
                    &mut ready,
                    format!("crash recovery from the write-intent log failed: {e}"),
                ))
            }
        }
    }
    let cache = p.config.kernel_cache();
    let fuse_config = p.config.fuser_config();
    let mountpoint = p.checked.mountpoint.clone();
    // The session log a successor would replay, when a keeper holds the session.
    let mut session_log: Option<std::fs::File> = None;
    let mut session = match (&link, successor) {
        (Some(l), true) => {
            let (session, log) = take_session_over(&fs, l, p.config.transport, &mountpoint)
                .map_err(|e| fail(&mut ready, e))?;
            session_log = Some(log);
            session
        }
        _ => crate::fuse::mount(cache, &fuse_config, &mountpoint, p.config.transport).map_err(
            |e| {
                fail(
                    &mut ready,
                    format!("cannot mount on '{}': {e}", mountpoint.display()),
                )
            },
        )?,
    };
    if link.is_some() && !successor {
        fs.set_keeper(sys::parent_pid(), 0, "");
        // Every node id and handle the kernel is given is recorded from the first request on.
        let log =
            new_session_log(&fs, session.negotiated(), None).map_err(|e| fail(&mut ready, e))?;
        session_log = Some(log);
    }
    if let Some(l) = link.as_ref() {
        let to_keeper = l
            .try_clone()
            .map_err(|e| fail(&mut ready, format!("cannot keep the keeper's socket: {e}")))?;
        let weak = Arc::downgrade(&fs);
        fs.set_restart_hook(Box::new(move |value| {
            let fs = weak.upgrade().ok_or((
                crate::errno::Errno(libc::ESHUTDOWN),
                "unmounting".to_string(),
            ))?;
            hand_over(&fs, &to_keeper, value)
        }));
    }
    if let Err(e) = session.check_uring() {
        session.unmount();
        return Err(fail(&mut ready, e));
    }
    if let Err(e) = fs.start_kernel_notices(Box::new(session.notifier())) {
        session.unmount();
        return Err(fail(
            &mut ready,
            format!("cannot start the kernel notice thread: {e}"),
        ));
    }
    if let Err(e) = p.plan.commit() {
        session.unmount();
        return Err(fail(&mut ready, e));
    }
    // Once every leg has its `.mirrorfs/`, and before any request is served.
    fs.mirror().open_checksums(p.config.read_only);
    if let Err(e) = fs.recovery().start_sweeper() {
        return Err(fail(
            &mut ready,
            format!("cannot start the sweeper thread: {e}"),
        ));
    }
    // So that umount(8) runs umount.fuse.mirrorfs, which waits for the legs (utab.rs).
    super::utab::register(
        p.config.fsname.as_deref().unwrap_or("mirrorfs"),
        &mountpoint,
    );
    // Alerts: the watcher and the dispatcher of events (off the I/O path).
    if let Err(e) = super::events::start(fs.clone(), &mountpoint, &p.config) {
        return Err(fail(
            &mut ready,
            format!("cannot start the event threads: {e}"),
        ));
    }
    let mut unmounter = session.unmount_callable();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let sig = sys::wait_for_termination_signal();
            log::info!("signal {sig}: unmounting");
            super::notify::notify("STOPPING=1");
            if let Err(e) = unmounter.unmount_when_free() {
                log::error!("unmount failed: {e}");
            }
        })
        .map_err(|e| fail(&mut ready, format!("cannot start the signal thread: {e}")))?;
    // Stale legs come back in the background, one at a time (the first now; the others
    // with `mirrorfs leg add` or at the next mount).
    for (i, st) in p.plan.states.iter().enumerate() {
        if matches!(st, PlannedLeg::Stale(_)) {
            match fs.recovery().start_resync(i, false) {
                Ok(()) => break,
                Err(e) => log::error!("cannot start the resync of leg {i}: {e}"),
            }
        }
    }
    if p.plan.check_contents {
        // A new mirror over legs that held the same tree: their metadata agreed; their
        // contents are compared now, in the background (report only: nothing says which copy
        // would be right).
        log::warn!(
            "first mount over legs that already hold data: names, types, sizes, modes, owners, \
             times, xattrs and hard links agree; a scrub now compares their contents"
        );
        if let Err(e) = fs
            .recovery()
            .start_scrub(crate::recovery::ScrubRepair::Nothing)
        {
            log::error!("cannot start the first-mount scrub: {e}");
        }
    }
    // Files without checksums (older than them, or written with them off) get them in the
    // background.
    if let Err(e) = fs.recovery().start_backfill() {
        log::error!("cannot start giving older files checksums: {e}");
    }
    let access = crate::fuse::Access {
        owner: sys::geteuid(),
        allow_other: p.config.allow_other,
    };
    let legs = fs.mirror().legs().len();
    // Once the transport is set up (the stats say which one serves), the mount is ready: the
    // background parent returns, and a Type=notify service (contrib/systemd/mirrorfs@.service)
    // starts its dependents.
    let negotiated = session.negotiated().clone();
    if successor {
        // What the dead server had read and not answered comes back, marked as resent.
        if let Err(e) = session.resend() {
            log::error!("cannot ask the kernel to send again what the last server had: {e}");
        }
    }
    let serving_now = |devices: &[std::os::fd::BorrowedFd<'_>]| {
        if let (Some(l), Some(log)) = (link.as_ref(), session_log.as_ref()) {
            // The keeper holds the session from now on: every descriptor of the connection
            // (so that no request a reader holds is ended when this process dies) and the log.
            use std::os::fd::AsFd;
            if let Err(e) = l
                .session(&negotiated, log.as_fd(), devices)
                .and_then(|()| l.ready())
            {
                log::error!("cannot give the session to the keeper: {e}");
            }
        }
        if let Some(mut w) = ready.take() {
            let _ = w.write_all(b"OK");
            drop(w);
            sys::redirect_stdio_to_null();
        }
        log::info!(
            "mounted {legs} legs on '{}' (open-file limit {nofile})",
            mountpoint.display()
        );
        super::notify::notify(&format!(
            "READY=1\nSTATUS=mounted {legs} legs on {}",
            mountpoint.display()
        ));
    };
    let ran = session.serve(
        fs.clone(),
        cache,
        access,
        p.config.threads,
        crate::fuse::RingTuning {
            poll: p.config.ring_poll,
            idle_wait: p.config.ring_idle,
        },
        serving_now,
    );
    super::notify::notify("STOPPING=1");
    super::utab::unregister(&mountpoint);
    if let (Some(l), Ok(())) = (link.as_ref(), &ran) {
        let _ = l.unmounted();
    }
    // A transport that could not be set up: the background parent learns why.
    ran.map_err(|e| fail(&mut ready, e))
}

/// A session log in a new memory file, for the keeper to hold: what INIT settled, and
/// `start` (a successor's snapshot of what it took over), then whatever the core records.
fn new_session_log(
    fs: &Arc<MirrorFs>,
    neg: &crate::fuse::Negotiated,
    start: Option<crate::fs::takeover::State>,
) -> Result<std::fs::File, String> {
    use crate::fs::takeover::{Journal, State};
    let file = sys::session::memfd("mirrorfs-session")
        .map_err(|e| format!("cannot make the session log: {e}"))?;
    let session = serde_json::to_vec(neg).map_err(|e| format!("the session record: {e}"))?;
    let start = State {
        session,
        ..start.unwrap_or_default()
    };
    let journal = Journal::new(
        file.try_clone()
            .map_err(|e| format!("cannot duplicate the session log: {e}"))?,
        &start.snapshot(),
    )
    .map_err(|e| format!("cannot write the session log: {e}"))?;
    fs.keep_session_log(Arc::new(journal));
    Ok(file)
}

/// `user.mirrorfs.restart` (`mirrorfs restart`): checks the program to start, tells the keeper,
/// and, once this answer is out, hands the session over: the gate closes, the requests under
/// way are answered, and the process ends without unmounting. The successor takes the session
/// over as after a crash (the legs are recovered from the write-intent log), but no request
/// was cut off halfway: what this server had read and not started is sent again.
fn hand_over(
    fs: &Arc<MirrorFs>,
    keeper: &super::keeper::Link,
    value: &[u8],
) -> Result<(), (crate::errno::Errno, String)> {
    use crate::errno::Errno;
    use std::os::unix::fs::MetadataExt;
    let uring = fs.stats().transport.is_some_and(|t| t.kind == "uring");
    if uring {
        return Err((
            Errno::ENOTSUP,
            "over io_uring a session cannot be handed over (Linux 6.18 sends again only what was \
             read from /dev/fuse): mount with -o transport=devfuse to restart in place"
                .into(),
        ));
    }
    let text = std::str::from_utf8(value)
        .map_err(|_| (Errno::EINVAL, "the program's path is not text".to_string()))?
        .trim();
    let program = match text {
        "" => None,
        t => {
            let p = std::path::PathBuf::from(t);
            if !p.is_absolute() {
                return Err((
                    Errno::EINVAL,
                    format!("'{t}': the program must be an absolute path"),
                ));
            }
            let m = std::fs::metadata(&p).map_err(|e| (Errno::EINVAL, format!("'{t}': {e}")))?;
            if !m.is_file() || m.mode() & 0o111 == 0 {
                return Err((Errno::EINVAL, format!("'{t}' is not an executable file")));
            }
            let me = sys::geteuid();
            if (m.uid() != me && m.uid() != 0) || m.mode() & 0o022 != 0 {
                return Err((
                    Errno::EPERM,
                    format!(
                        "'{t}' is owned by uid {} or writable by others: the server runs as uid \
                         {me}, and runs only a program that it or root owns and no one else \
                         may change",
                        m.uid()
                    ),
                ));
            }
            super::keeper::probe(&p).map_err(|why| (Errno::EINVAL, format!("'{t}': {why}")))?;
            Some(p)
        }
    };
    if fs.gate().is_closed() {
        return Err((Errno::EBUSY, "a restart is already under way".into()));
    }
    keeper
        .restart(&super::keeper::Restart { program })
        .map_err(|e| (Errno::EIO, format!("cannot reach the keeper: {e}")))?;
    let fs = fs.clone();
    std::thread::Builder::new()
        .name("hand-over".into())
        .spawn(move || {
            match fs.gate().drain(std::time::Duration::from_secs(10)) {
                true => {
                    // Every write answered is on every in-sync leg: the legs are flushed and
                    // marked clean as at an unmount, so the successor has nothing to recover.
                    fs.unmount();
                    log::warn!("restart: every request under way answered; handing over");
                }
                // A request still under way may have reached some legs only: the legs stay
                // marked in use, and the successor recovers them as after a crash.
                false => log::error!(
                    "restart: requests still under way after 10 s; handing over anyway (the \
                     successor recovers as after a crash)"
                ),
            }
            // Nothing is unmounted: the successor takes the session over.
            sys::exit_now(0)
        })
        .map_err(|e| (Errno::EAGAIN, format!("cannot start the hand-over: {e}")))?;
    Ok(())
}

/// A successor's mount: the session the keeper hands over (no mount, no INIT), its node ids
/// and handles taken over from the dead server's log, and a log of its own.
fn take_session_over(
    fs: &Arc<MirrorFs>,
    link: &super::keeper::Link,
    transport: crate::config::Transport,
    mountpoint: &std::path::Path,
) -> Result<(crate::fuse::Mounted, std::fs::File), String> {
    use crate::fs::takeover::{Journal, State};
    let (t, mut old_log, dev, readers) = link
        .takeover()
        .map_err(|e| format!("cannot take the session over: {e}"))?;
    let bytes =
        Journal::read_all(&mut old_log).map_err(|e| format!("cannot read the session log: {e}"))?;
    let state = State::replay(&bytes);
    let took = fs.take_over(&state);
    log::warn!(
        "took the session over (restart {}; {}): {} node id(s) and {} handle(s)",
        t.restarts,
        t.cause,
        took.nodes,
        took.handles
    );
    if !took.lost_nodes.is_empty() || !took.lost_handles.is_empty() {
        log::error!(
            "node ids found on no leg (ESTALE from now on): {:?}; handles lost: {:?}",
            took.lost_nodes,
            took.lost_handles
        );
    }
    let snapshot = fs.takeover_state(Vec::new());
    let log = new_session_log(fs, &t.negotiated, Some(snapshot))?;
    {
        use std::os::fd::AsFd;
        link.log(log.as_fd())
            .map_err(|e| format!("cannot give the keeper the session log: {e}"))?;
    }
    fs.set_keeper(sys::parent_pid(), t.restarts, &t.cause);
    let mounted = crate::fuse::take_over(dev, readers, t.negotiated, transport, mountpoint);
    Ok((mounted, log))
}
