//! The `mirrorfs` command: parse, validate, daemonize, mount, serve.

mod args;
mod control;
mod daemon;
mod format;
mod iostat;
mod logging;
mod notify;
mod prometheus;
mod status;
mod validate;

pub use args::Args;

/// Runs the command and returns the process exit status.
pub fn run(argv: Vec<std::ffi::OsString>) -> i32 {
    // Subcommands come first; a leg literally called "status" is written "./status".
    if let Some(cmd) = argv.get(1).and_then(|a| a.to_str()) {
        let rest = || -> Vec<String> {
            argv[2..]
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect()
        };
        if matches!(
            cmd,
            "status" | "iostat" | "get" | "set" | "list" | "scrub" | "leg"
        ) {
            crate::sys::default_sigpipe();
        }
        match cmd {
            "status" => return status::run(&rest()),
            "iostat" => return iostat::run(&rest()),
            "get" | "set" | "list" => return control::run(cmd, &rest()),
            "scrub" => return control::scrub(&argv[2..]),
            "leg" => return control::leg(&argv[2..]),
            _ => {}
        }
    }
    let args = match args::parse(argv) {
        Ok(a) => a,
        Err(code) => return code,
    };
    if args.foreground {
        logging::to_stderr(args.debug);
    }
    match daemon::start(&args) {
        Ok(()) => 0,
        Err(lines) => {
            for l in lines {
                eprintln!("mirrorfs: {l}");
            }
            1
        }
    }
}
