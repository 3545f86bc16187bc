//! systemd's readiness protocol (`sd_notify`), for a `Type=notify` service
//! (`contrib/systemd/mirrorfs@.service`): one datagram of `KEY=VALUE` lines to the unix socket
//! named by `$NOTIFY_SOCKET` (a path, or an abstract name written with a leading `@`). Without
//! that variable nothing is sent. A plain datagram: no crate, no libsystemd.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Sends `state` (e.g. `"READY=1\nSTATUS=..."`) to the service manager, if there is one.
/// Returns whether it was sent; a failure is logged, never fatal.
pub fn notify(state: &str) -> bool {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else {
        return false;
    };
    let name = socket.as_bytes();
    let sent = (|| -> std::io::Result<()> {
        let addr = match name.strip_prefix(b"@") {
            Some(abstract_name) => SocketAddr::from_abstract_name(abstract_name)?,
            None => SocketAddr::from_pathname(&socket)?,
        };
        let sock = UnixDatagram::unbound()?;
        sock.send_to_addr(state.as_bytes(), &addr)?;
        Ok(())
    })();
    match sent {
        Ok(()) => true,
        Err(e) => {
            log::warn!(
                "cannot tell the service manager ({}) '{}': {e}",
                socket.to_string_lossy(),
                state.replace('\n', " ")
            );
            false
        }
    }
}
