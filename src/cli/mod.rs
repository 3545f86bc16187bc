//! The `mirrorfs` command: its arguments, the client subcommands, and the mount form, which
//! the daemon's runtime (`crate::daemon`) validates, mounts and serves.

mod args;
mod control;
mod format;
mod iostat;
mod man;
mod progress;
mod prometheus;
mod status;
mod unmount;
mod whereis;

pub use args::command;

use crate::daemon::{self, Args};
use args::{Parsed, ScrubCmd, Sub};

/// Runs the command and returns the process exit status.
pub fn run(argv: Vec<std::ffi::OsString>) -> i32 {
    // A server asking whether this program can take its session over (`mirrorfs restart
    // --binary`): the takeover format it speaks, and nothing else.
    if std::env::var_os(daemon::ENV_PROBE).is_some() {
        println!("{}", daemon::probe_answer());
        return 0;
    }
    // Installed as umount(8)'s helper for the type (umount.fuse.mirrorfs, umount.mirrorfs).
    let called = argv
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if called.starts_with("umount.") {
        return unmount::helper(&argv[1..]);
    }
    // Installed as mount(8)'s helper for the type `mirrorfs` (mount.mirrorfs).
    if called.starts_with("mount.") {
        return match mount_helper_args(&argv[1..]) {
            Ok(None) => 0,
            Ok(Some(args)) => match args::parse(args) {
                Ok(Parsed::Mount(a)) => mount(&a),
                Ok(Parsed::Sub(_)) => {
                    eprintln!("mirrorfs: {called}: a subcommand is not a mount");
                    1
                }
                Err(code) => code,
            },
            Err(e) => {
                eprintln!("mirrorfs: {called}: {e}");
                1
            }
        };
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
        Sub::Get { mount, key, bytes } => control::get_cmd(&mount, &key, bytes),
        Sub::Set { mount, key, value } => control::set_cmd(&mount, &key, &value),
        Sub::List { mount, bytes } => control::list_cmd(&mount, bytes),
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
        Sub::Restart { mount, binary } => control::restart(&mount, binary.as_deref()),
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

/// The arguments mount(8) gives a helper (`mount.mirrorfs SPEC DIR [-sfnv] [-N NS] [-o OPTS]
/// [-t TYPE]`) as the mount form takes them: `-o` kept, `-t` and the flags (`-f` is mount's
/// "fake", not our foreground; `-n`, `-s`, `-v`) dropped.
fn mount_helper_args(
    args: &[std::ffi::OsString],
) -> Result<Option<Vec<std::ffi::OsString>>, String> {
    let mut out = vec![std::ffi::OsString::from("mirrorfs")];
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("-o") => {
                out.push(a.clone());
                out.push(it.next().ok_or("-o needs a value")?.clone());
            }
            Some("-t") => {
                it.next();
            }
            Some("-N") => return Err("-N (another mount namespace) is not supported".into()),
            // -f: mount(8)'s "fake": everything but the mount itself, so nothing to do.
            Some(f) if f.starts_with('-') && f.len() > 1 && f.contains('f') => return Ok(None),
            Some(f) if f.starts_with('-') && f.len() > 1 => {}
            _ => out.push(a.clone()),
        }
    }
    Ok(Some(out))
}

/// The mount form: validate, then mount and serve.
fn mount(args: &Args) -> i32 {
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

#[cfg(test)]
mod tests {
    use super::mount_helper_args;
    use std::ffi::OsString;

    fn args(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn mount_helper_arguments() {
        // What mount(8) passes: the flags dropped (-n, -s, -v), -o kept, -t dropped.
        assert_eq!(
            mount_helper_args(&args(&[
                "/a:/b",
                "/m",
                "-n",
                "-sv",
                "-o",
                "rw,nofail",
                "-t",
                "mirrorfs"
            ]))
            .unwrap(),
            Some(args(&["mirrorfs", "/a:/b", "/m", "-o", "rw,nofail"]))
        );
        // -f is mount's "fake": nothing to do (not our foreground).
        assert_eq!(
            mount_helper_args(&args(&["/a:/b", "/m", "-f"])).unwrap(),
            None
        );
        assert!(mount_helper_args(&args(&["/a:/b", "/m", "-N", "1"])).is_err());
        assert!(mount_helper_args(&args(&["/a:/b", "/m", "-o"])).is_err());
    }
}
