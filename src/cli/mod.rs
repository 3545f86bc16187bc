//! The `mirrorfs` command: parse, validate, daemonize, mount, serve.

mod args;
mod daemon;
mod validate;

pub use args::Args;

/// Runs the command and returns the process exit status.
pub fn run(argv: Vec<std::ffi::OsString>) -> i32 {
    let args = match args::parse(argv) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let level = if args.debug { "debug" } else { "warn" };
    let _ = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level))
        .format_target(false)
        .try_init();
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
