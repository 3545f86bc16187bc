//! Mounting and serving, in the foreground or as a daemon.
//!
//! Without `-f` the process forks before any thread exists. The child mounts, writes the
//! superblocks of a new mirror, and tells the parent through a pipe; the parent exits 0 only
//! then (or prints the child's error and exits 1), so `mirrorfs ...; ls MOUNT` always works.
//! SIGINT, SIGTERM and SIGHUP unmount cleanly; so does `umount MOUNT`. Once the paths are
//! resolved, the daemon's working directory is `/`. Under systemd (`$NOTIFY_SOCKET`), the
//! daemon sends READY=1 once the mount answers, and STOPPING=1 when it goes.

use super::validate::{validate, Validated};
use super::Args;
use crate::config::MountConfig;
use crate::fs::{FsConfig, MirrorFs};
use crate::fuse::KernelNotifier;
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
    let checked = match validate(&args.legs, &args.mountpoint, config.degraded) {
        Ok(c) => c,
        Err(e) => {
            // A leg that is not there: say whether the others could serve without it.
            let others_can_serve = !config.degraded
                && validate(&args.legs, &args.mountpoint, true).is_ok_and(|c| {
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

/// Runs the command: validates, then mounts and serves (forking first unless `-f`).
pub fn start(args: &Args) -> Result<(), Vec<String>> {
    let p = prepare(args)?;
    // Every path is resolved: let go of the caller's directory, which the daemon would
    // otherwise keep busy (no unmounting the disk the mount was started from).
    std::env::set_current_dir("/")
        .map_err(|e| vec![format!("cannot change directory to '/': {e}")])?;
    if args.foreground {
        return serve(p, None).map_err(|e| vec![e]);
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
            let code = match serve(p, Some(writer)) {
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
fn serve(p: Prepared, mut ready: Option<std::io::PipeWriter>) -> Result<(), String> {
    let fail = |ready: &mut Option<std::io::PipeWriter>, e: String| {
        if let Some(w) = ready.as_mut() {
            let _ = w.write_all(e.as_bytes());
        }
        e
    };
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
    let mut session = crate::fuse::mount(cache, &fuse_config, &mountpoint, p.config.transport)
        .map_err(|e| {
            fail(
                &mut ready,
                format!("cannot mount on '{}': {e}", mountpoint.display()),
            )
        })?;
    if let Err(e) = session.check_uring() {
        session.unmount();
        return Err(fail(&mut ready, e));
    }
    if let Err(e) = fs.start_kernel_notices(Box::new(KernelNotifier(session.notifier()))) {
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
            if let Err(e) = unmounter.unmount() {
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
    let serving_now = || {
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
        p.config.ring_poll,
        serving_now,
    );
    super::notify::notify("STOPPING=1");
    super::utab::unregister(&mountpoint);
    // A transport that could not be set up: the background parent learns why.
    ran.map_err(|e| fail(&mut ready, e))
}
