//! What a mount that outlives its serving process needs of the system: a memory file that a
//! successor inherits, a socket pair carrying descriptors between the keeper and the server
//! (`SCM_RIGHTS`), and descriptors a spawned program inherits.

use rustix::io::Errno;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// A new memory file (`memfd_create`, close-on-exec): what lives in it lives as long as some
/// process holds a descriptor of it.
pub fn memfd(name: &str) -> io::Result<std::fs::File> {
    let fd = rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC)?;
    Ok(std::fs::File::from(fd))
}

/// A connected pair of `SOCK_SEQPACKET` sockets (messages keep their boundaries), close-on-exec.
pub fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let (family, kind) = (AddressFamily::UNIX, SocketType::SEQPACKET);
    rustix::net::socketpair(family, kind, SocketFlags::CLOEXEC, None).map_err(io::Error::from)
}

/// Most descriptors one message carries.
pub const MAX_FDS: usize = 64;

/// Room for one `SCM_RIGHTS` message of [`MAX_FDS`] descriptors (and for aligning it).
const CONTROL_SPACE: usize = rustix::cmsg_space!(ScmRights(MAX_FDS));

/// Sends one message of `bytes` on `sock`, with `fds` (at most [`MAX_FDS`]) passed along.
/// `MSG_NOSIGNAL`: a closed other end is `EPIPE`, not a SIGPIPE.
pub fn send_with_fds(sock: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut space = [MaybeUninit::uninit(); CONTROL_SPACE];
    let mut control = SendAncillaryBuffer::new(&mut space);
    // Without descriptors, no control message at all.
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let iov = [IoSlice::new(bytes)];
    loop {
        match rustix::net::sendmsg(sock, &iov, &mut control, SendFlags::NOSIGNAL) {
            Ok(_) => return Ok(()),
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Receives one message into `buf`: its length (0 when the other end is closed) and the
/// descriptors that came with it (close-on-exec: `MSG_CMSG_CLOEXEC`).
pub fn recv_with_fds(sock: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut space = [MaybeUninit::uninit(); CONTROL_SPACE];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = loop {
        match rustix::net::recvmsg(sock, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC) {
            Ok(msg) => break msg,
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    };
    // The descriptors are ours from here: those not kept are closed when dropped.
    let mut fds = Vec::new();
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = m {
            fds.extend(rights);
        }
    }
    if msg.flags.contains(ReturnFlags::CTRUNC) {
        return Err(io::Error::other(
            "descriptors were cut off (too many in one message)",
        ));
    }
    Ok((msg.bytes, fds))
}

/// Lets (`true`) or stops (`false`) a program this process executes inherit `fd`.
pub fn set_inheritable(fd: BorrowedFd<'_>, inherit: bool) -> io::Result<()> {
    use rustix::io::FdFlags;
    let mut flags = rustix::io::fcntl_getfd(fd)?;
    flags.set(FdFlags::CLOEXEC, !inherit);
    rustix::io::fcntl_setfd(fd, flags)?;
    Ok(())
}

/// Takes the descriptor number `fd` (inherited from the program that executed this one) as
/// this process's own; `None` if it is not open.
pub fn inherited(fd: RawFd) -> Option<OwnedFd> {
    // SAFETY: fcntl F_GETFD only asks whether the number is open. (Not rustix's fcntl_getfd:
    // it takes a borrowed descriptor, which a number not yet known to be open is not.)
    if fd < 3 || unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return None;
    }
    // SAFETY: an open descriptor this process was given to own; nothing else in it uses the
    // number (it was inherited, and is taken once, at start).
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let _ = set_inheritable(std::os::fd::AsFd::as_fd(&owned), false);
    Some(owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};
    use std::os::fd::AsFd;

    #[test]
    fn descriptors_go_across_a_socket_pair_with_the_message() {
        let (a, b) = socket_pair().unwrap();
        let mut m = memfd("mirrorfs-test").unwrap();
        m.write_all(b"carried").unwrap();
        send_with_fds(a.as_fd(), b"here", &[m.as_fd()]).unwrap();
        drop(m);
        let mut buf = [0u8; 16];
        let (n, fds) = recv_with_fds(b.as_fd(), &mut buf).unwrap();
        assert_eq!(&buf[..n], b"here");
        assert_eq!(fds.len(), 1);
        let mut got = std::fs::File::from(fds.into_iter().next().unwrap());
        got.rewind().unwrap();
        let mut s = String::new();
        got.read_to_string(&mut s).unwrap();
        assert_eq!(s, "carried");
        // Without descriptors, and the other end closed.
        send_with_fds(a.as_fd(), b"bare", &[]).unwrap();
        let (n, fds) = recv_with_fds(b.as_fd(), &mut buf).unwrap();
        assert_eq!((&buf[..n], fds.len()), (&b"bare"[..], 0));
        drop(a);
        assert_eq!(recv_with_fds(b.as_fd(), &mut buf).unwrap().0, 0);
    }

    #[test]
    fn descriptors_made_or_received_here_are_close_on_exec() {
        let cloexec = |fd: BorrowedFd<'_>| {
            let flags = rustix::io::fcntl_getfd(fd).unwrap();
            flags.contains(rustix::io::FdFlags::CLOEXEC)
        };
        let (a, b) = socket_pair().unwrap();
        let m = memfd("mirrorfs-test").unwrap();
        assert!(cloexec(a.as_fd()) && cloexec(b.as_fd()) && cloexec(m.as_fd()));
        set_inheritable(m.as_fd(), true).unwrap();
        assert!(!cloexec(m.as_fd()));
        send_with_fds(a.as_fd(), b"x", &[m.as_fd()]).unwrap();
        let (_, fds) = recv_with_fds(b.as_fd(), &mut [0u8; 4]).unwrap();
        assert!(cloexec(fds[0].as_fd()));
        set_inheritable(m.as_fd(), false).unwrap();
        assert!(cloexec(m.as_fd()));
        let too_many = vec![m.as_fd(); MAX_FDS + 1];
        let e = send_with_fds(a.as_fd(), b"x", &too_many).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }
}
