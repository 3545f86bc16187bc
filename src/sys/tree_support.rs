//! Syscalls the tree engine (`crate::tree`) needs beyond [`super::fd`] and [`super::xattr`]:
//! extended attributes and times of an entry named by (directory descriptor, single name),
//! never following a symlink in the last component.
//!
//! The xattr calls go through `/proc/self/fd/DIR/NAME` with the `l*xattr` variants: the kernel
//! resolves the magic link to the very directory the descriptor holds, then looks `NAME` up in
//! it without following a final symlink. This is what makes the xattrs of a symlink itself
//! readable and writable (the `O_PATH` route of [`super::xattr`] would follow it). The lengths
//! are asked with rustix's `*_query` variants: it reads no empty buffer as a length query.

use super::rx;
use crate::errno::{Errno, Result};
use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;

/// `/proc/self/fd/DIR/NAME`; `name` must be one path component.
fn entry_path(dir: BorrowedFd<'_>, name: &CStr) -> Result<CString> {
    let n = name.to_bytes();
    if n.is_empty() || n.contains(&b'/') || n == b"." || n == b".." {
        return Err(Errno::EINVAL);
    }
    let mut p = format!("/proc/self/fd/{}/", dir.as_raw_fd()).into_bytes();
    p.extend_from_slice(n);
    CString::new(p).map_err(|_| Errno::EINVAL)
}

/// The names of the extended attributes of `dir/name` (a symlink is not followed).
pub fn lxattr_list_at(dir: BorrowedFd<'_>, name: &CStr) -> Result<Vec<Vec<u8>>> {
    let p = entry_path(dir, name)?;
    loop {
        let len = rx(rustix::fs::llistxattr_query(&p))?;
        if len == 0 {
            return Ok(Vec::new());
        }
        let mut buf = vec![0u8; len];
        match rx(rustix::fs::llistxattr(&p, &mut buf[..])) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(buf
                    .split(|&b| b == 0)
                    .filter(|s| !s.is_empty())
                    .map(<[u8]>::to_vec)
                    .collect());
            }
            Err(e) if e == Errno::ERANGE => continue,
            Err(e) => return Err(e),
        }
    }
}

/// The value of the attribute `attr` of `dir/name` (a symlink is not followed).
pub fn lxattr_get_at(dir: BorrowedFd<'_>, name: &CStr, attr: &CStr) -> Result<Vec<u8>> {
    let p = entry_path(dir, name)?;
    loop {
        let len = rx(rustix::fs::lgetxattr_query(&p, attr))?;
        if len == 0 {
            return Ok(Vec::new());
        }
        let mut buf = vec![0u8; len];
        match rx(rustix::fs::lgetxattr(&p, attr, &mut buf[..])) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(buf);
            }
            Err(e) if e == Errno::ERANGE => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Sets the attribute `attr` of `dir/name` to `value` (a symlink is not followed).
pub fn lxattr_set_at(dir: BorrowedFd<'_>, name: &CStr, attr: &CStr, value: &[u8]) -> Result<()> {
    let p = entry_path(dir, name)?;
    let flags = rustix::fs::XattrFlags::empty();
    rx(rustix::fs::lsetxattr(&p, attr, value, flags))
}

/// Removes the attribute `attr` of `dir/name` (a symlink is not followed).
pub fn lxattr_remove_at(dir: BorrowedFd<'_>, name: &CStr, attr: &CStr) -> Result<()> {
    let p = entry_path(dir, name)?;
    rx(rustix::fs::lremovexattr(&p, attr))
}

/// `utimensat(dir, name, [atime, mtime], AT_SYMLINK_NOFOLLOW)`: the times of the entry itself.
pub fn set_times_at(
    dir: BorrowedFd<'_>,
    name: &CStr,
    atime: libc::timespec,
    mtime: libc::timespec,
) -> Result<()> {
    let times = super::fd::timestamps(atime, mtime);
    let flags = rustix::fs::AtFlags::SYMLINK_NOFOLLOW;
    rx(rustix::fs::utimensat(dir, name, &times, flags))
}

/// A C string of one path component.
pub fn cname(name: &std::ffi::OsStr) -> Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| Errno::EINVAL)
}
