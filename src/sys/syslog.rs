//! The daemon's log once it runs in the background: the system log (journald reads it).

use std::ffi::CString;

/// Opens the system log under the name "mirrorfs".
pub fn open() {
    // SAFETY: the identifier is a 'static C string, as openlog requires.
    unsafe { libc::openlog(c"mirrorfs".as_ptr(), libc::LOG_PID, libc::LOG_DAEMON) };
}

/// Sends one message at `priority` (`LOG_ERR`, `LOG_WARNING`...).
pub fn send(priority: libc::c_int, msg: &str) {
    let Ok(c) = CString::new(msg.replace('\0', " ")) else {
        return;
    };
    // SAFETY: the format is a constant "%s" and c a valid C string.
    unsafe { libc::syslog(priority, c"%s".as_ptr(), c.as_ptr()) };
}
