//! The daemon's runtime: what runs in a mount's own processes, not in a client subcommand.
//!
//! `cli` parses the mount form into [`Args`] and calls [`start`]; everything after that is
//! here: the legs and the mount point checked (`validate.rs`), the mount prepared, daemonized
//! and served (`serve.rs`), the keeper that holds the session across restarts (`keeper.rs`),
//! where the log goes (`logging.rs`), systemd's readiness (`notify.rs`), the mount's line in
//! libmount's utab (`utab.rs`), and the alerts' watcher and dispatcher (`events.rs`).

mod events;
mod keeper;
mod logging;
mod notify;
mod serve;
mod utab;
mod validate;

pub(crate) use keeper::{probe_answer, ENV_PROBE};
pub(crate) use serve::start;

/// The mount form, parsed.
#[derive(Debug)]
pub(crate) struct Args {
    pub foreground: bool,
    pub debug: bool,
    pub options: Vec<String>,
    pub legs: String,
    pub mountpoint: std::path::PathBuf,
}
