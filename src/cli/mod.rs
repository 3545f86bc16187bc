//! The `mirrorfs` command: parse, validate, daemonize, mount, serve.

mod args;
mod control;
mod daemon;
mod events;
mod format;
mod iostat;
mod logging;
mod man;
mod notify;
mod prometheus;
mod status;
mod unmount;
mod utab;
mod validate;
mod whereis;

pub use args::{command, Args};

use args::{Parsed, ScrubCmd, Sub};

/// Runs the command and returns the process exit status.
pub fn run(argv: Vec<std::ffi::OsString>) -> i32 {
    // Installed as umount(8)'s helper for the type (umount.fuse.mirrorfs, umount.mirrorfs).
    let called = argv
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if called.starts_with("umount.") {
        return unmount::helper(&argv[1..]);
    }
    // Subcommands come first; a leg literally called "status" is written "./status".
    let sub = match args::parse(argv) {
        Ok(Parsed::Sub(s)) => s,
        Ok(Parsed::Mount(args)) => return mount(&args),
        Err(code) => return code,
    };
    crate::sys::default_sigpipe();
    match sub {
        Sub::Status(a) => status::run(a),
        Sub::Iostat {
            mount,
            interval,
            count,
        } => iostat::run(
            &[mount, interval, count]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>(),
        ),
        Sub::Get { mount, key } => control::get_cmd(&mount, &key),
        Sub::Set { mount, key, value } => control::set_cmd(&mount, &key, &value),
        Sub::List { mount } => control::list_cmd(&mount),
        Sub::Scrub(ScrubCmd::Start {
            mount,
            repair,
            wait,
        }) => control::scrub_start(&mount, repair.as_deref(), wait),
        Sub::Scrub(ScrubCmd::Status { mount }) => control::scrub_status(&mount),
        Sub::Scrub(ScrubCmd::Cancel { mount }) => control::scrub_cancel(&mount),
        Sub::Leg(c) => control::leg(c),
        Sub::Where { json, files } => whereis::run(&files, json),
        Sub::NotifyTest { mount } => control::notify_test(&mount),
        Sub::Unmount {
            mount,
            lazy,
            force,
            wait,
        } => unmount::unmount(
            &mount,
            lazy,
            force,
            wait.map_or(unmount::DEFAULT_WAIT, |w| w),
        ),
        Sub::Completions { shell } => {
            clap_complete::generate(shell, &mut command(), "mirrorfs", &mut std::io::stdout());
            0
        }
    }
}

/// The mount form: validate, then mount and serve.
fn mount(args: &Args) -> i32 {
    if args.foreground {
        logging::to_stderr(args.debug);
    }
    match daemon::start(args) {
        Ok(()) => 0,
        Err(lines) => {
            for l in lines {
                eprintln!("mirrorfs: {l}");
            }
            1
        }
    }
}
