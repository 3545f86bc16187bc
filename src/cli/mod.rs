//! The `mirrorfs` command: parse, validate, daemonize, mount, serve.

mod args;
mod daemon;
mod logging;
mod validate;

pub use args::Args;

/// Runs the command and returns the process exit status.
pub fn run(argv: Vec<std::ffi::OsString>) -> i32 {
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
