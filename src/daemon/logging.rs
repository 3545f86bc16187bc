//! Where log lines go: stderr in the foreground, the system log once daemonized.

use crate::sys::syslog;
use log::{Level, LevelFilter, Log, Metadata, Record};

struct SyslogLogger {
    level: LevelFilter,
}

impl Log for SyslogLogger {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.level() <= self.level && (m.level() <= fuser_level(self.level) || !is_fuser(m))
    }

    fn log(&self, r: &Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let priority = match r.level() {
            Level::Error => libc::LOG_ERR,
            Level::Warn => libc::LOG_WARNING,
            Level::Info => libc::LOG_INFO,
            Level::Debug | Level::Trace => libc::LOG_DEBUG,
        };
        syslog::send(priority, &r.args().to_string());
    }

    fn flush(&self) {}
}

/// fuser warns about things that are normal for us (it tries to unmount again after `umount`
/// already did it): its messages are shown from errors up, unless debugging.
fn fuser_level(level: LevelFilter) -> LevelFilter {
    if level >= LevelFilter::Debug {
        level
    } else {
        LevelFilter::Error
    }
}

fn is_fuser(m: &Metadata<'_>) -> bool {
    m.target().starts_with("fuser")
}

/// The level asked for: `-d` means debug, otherwise `RUST_LOG` or warnings.
fn level(debug: bool) -> LevelFilter {
    if debug {
        return LevelFilter::Debug;
    }
    std::env::var("RUST_LOG")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(LevelFilter::Warn)
}

/// Logs to stderr (before daemonizing, and in the foreground).
pub fn to_stderr(debug: bool) {
    let level = level(debug);
    let _ = env_logger::Builder::new()
        .filter_level(level)
        .filter_module("fuser", fuser_level(level))
        .format_target(false)
        .try_init();
}

/// Logs to the system log from now on (the daemon, once its stderr is gone). Only the first
/// logger set counts, so this is called instead of [`to_stderr`] in the daemon.
pub fn to_syslog(debug: bool) {
    syslog::open();
    let level = level(debug);
    if log::set_boxed_logger(Box::new(SyslogLogger { level })).is_ok() {
        log::set_max_level(level);
    }
}
