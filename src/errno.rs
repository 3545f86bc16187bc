//! The one error type of the filesystem core: the errno the caller should see.
//!
//! Every layer below the FUSE adapter returns `Result<_, Errno>`. The value is the errno a leg
//! returned (never flattened to EIO), or the one the core chose for a condition of its own.

use std::fmt;
use std::io;

/// An errno value, as the kernel would return it to the caller.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

/// Shorthand for results of the core.
pub type Result<T> = std::result::Result<T, Errno>;

impl Errno {
    pub const EPERM: Errno = Errno(libc::EPERM);
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    pub const EIO: Errno = Errno(libc::EIO);
    pub const EBADF: Errno = Errno(libc::EBADF);
    pub const EACCES: Errno = Errno(libc::EACCES);
    pub const EEXIST: Errno = Errno(libc::EEXIST);
    pub const EXDEV: Errno = Errno(libc::EXDEV);
    pub const ENOTDIR: Errno = Errno(libc::ENOTDIR);
    pub const EISDIR: Errno = Errno(libc::EISDIR);
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    pub const ERANGE: Errno = Errno(libc::ERANGE);
    pub const ENOSPC: Errno = Errno(libc::ENOSPC);
    pub const EROFS: Errno = Errno(libc::EROFS);
    pub const ENAMETOOLONG: Errno = Errno(libc::ENAMETOOLONG);
    pub const ENOSYS: Errno = Errno(libc::ENOSYS);
    pub const ENOTEMPTY: Errno = Errno(libc::ENOTEMPTY);
    pub const ENODATA: Errno = Errno(libc::ENODATA);
    pub const ENOTSUP: Errno = Errno(libc::ENOTSUP);
    pub const ENODEV: Errno = Errno(libc::ENODEV);
    pub const ENXIO: Errno = Errno(libc::ENXIO);
    pub const ESTALE: Errno = Errno(libc::ESTALE);
    pub const ENOTCONN: Errno = Errno(libc::ENOTCONN);
    pub const ETIMEDOUT: Errno = Errno(libc::ETIMEDOUT);
    pub const EDQUOT: Errno = Errno(libc::EDQUOT);
    pub const EOVERFLOW: Errno = Errno(libc::EOVERFLOW);
    pub const ENFILE: Errno = Errno(libc::ENFILE);
    pub const EAGAIN: Errno = Errno(libc::EAGAIN);
    pub const EBUSY: Errno = Errno(libc::EBUSY);
    pub const ECANCELED: Errno = Errno(libc::ECANCELED);
    pub const ETXTBSY: Errno = Errno(libc::ETXTBSY);
    /// Inside mirrorfs: a leg's copy does not match its checksums (never sent to a caller,
    /// who gets EIO when no leg has a good copy).
    pub const EBADMSG: Errno = Errno(libc::EBADMSG);
    pub const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
    /// Inside mirrorfs: a fault of its own (state it should hold is missing), not of a leg. No
    /// leg ever answers it, so a fan-out never takes it for a failing disk (`mirror/outcome.rs`
    /// keeps the leg); the caller gets EIO ([`for_caller`](Errno::for_caller)).
    pub const INTERNAL: Errno = Errno(INTERNAL_CODE);

    /// The errno of the last failed libc call on this thread.
    pub fn last() -> Errno {
        Errno(
            io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        )
    }

    /// The raw value.
    pub fn code(self) -> i32 {
        self.0
    }

    /// The errno a caller is answered: the value, but EIO for the errors that live only
    /// inside mirrorfs ([`INTERNAL`](Errno::INTERNAL), [`EBADMSG`](Errno::EBADMSG)).
    pub fn for_caller(self) -> i32 {
        match self {
            Errno::INTERNAL | Errno::EBADMSG => libc::EIO,
            Errno(e) => e,
        }
    }
}

/// Beyond every errno (the kernel's stop at 4095).
const INTERNAL_CODE: i32 = 1 << 16;

impl From<io::Error> for Errno {
    fn from(e: io::Error) -> Errno {
        Errno(e.raw_os_error().unwrap_or(libc::EIO))
    }
}

impl From<Errno> for io::Error {
    fn from(e: Errno) -> io::Error {
        io::Error::from_raw_os_error(e.0)
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Errno::INTERNAL {
            return f.write_str("internal error of mirrorfs");
        }
        write!(f, "{} ({})", io::Error::from_raw_os_error(self.0), self.0)
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A command refused: the errno its caller gets, and why, in words. The control keys keep the
/// reason for the caller to read back (`user.mirrorfs.last_error`), since a setxattr carries
/// only the errno.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub errno: Errno,
    pub why: String,
}

impl Refusal {
    pub fn new(errno: Errno, why: impl Into<String>) -> Refusal {
        Refusal {
            errno,
            why: why.into(),
        }
    }
}

impl From<Errno> for Refusal {
    fn from(errno: Errno) -> Refusal {
        Refusal {
            errno,
            why: match errno {
                Errno::INTERNAL => format!("{errno:?}"),
                _ => io::Error::from_raw_os_error(errno.0).to_string(),
            },
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.why)
    }
}

/// `Err(Refusal::new(errno, why))`.
pub fn refuse<T>(errno: Errno, why: impl Into<String>) -> std::result::Result<T, Refusal> {
    Err(Refusal::new(errno, why))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_faults_reach_the_caller_as_eio_and_say_what_they_are() {
        assert_eq!(Errno::INTERNAL.for_caller(), libc::EIO);
        assert_eq!(Errno::EBADMSG.for_caller(), libc::EIO);
        assert_eq!(Errno::ENOENT.for_caller(), libc::ENOENT);
        assert_eq!(Errno::EIO.for_caller(), libc::EIO);
        assert!(
            Errno::INTERNAL.code() > 4095,
            "no errno may be mistaken for it"
        );
        assert_eq!(format!("{}", Errno::INTERNAL), "internal error of mirrorfs");
        assert_eq!(
            Refusal::from(Errno::INTERNAL).why,
            "internal error of mirrorfs"
        );
    }
}
