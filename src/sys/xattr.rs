//! Extended attributes of a leg object held as `O_PATH`, through `/proc/self/fd/N` (the
//! f*xattr calls refuse `O_PATH` descriptors). Not for symlinks: the path would follow them.
//!
//! rustix does not read an empty buffer as a length query, as libc does: lengths are asked
//! with its `*_query` variants.

use super::fd::proc_path;
use super::rx;
use crate::errno::Result;
use std::ffi::CStr;
use std::os::fd::BorrowedFd;

/// The value of `name`; `size == 0` asks only for its length (returned as an empty Vec plus
/// the length).
pub fn get(fd: BorrowedFd<'_>, name: &CStr, size: usize) -> Result<(Vec<u8>, usize)> {
    let p = proc_path(fd);
    if size == 0 {
        return rx(rustix::fs::getxattr_query(&p, name)).map(|n| (Vec::new(), n));
    }
    let mut buf = vec![0u8; size];
    let n = rx(rustix::fs::getxattr(&p, name, &mut buf[..]))?;
    buf.truncate(n.min(size));
    Ok((buf, n))
}

/// The NUL-separated name list; `size == 0` asks only for its length.
pub fn list(fd: BorrowedFd<'_>, size: usize) -> Result<(Vec<u8>, usize)> {
    let p = proc_path(fd);
    if size == 0 {
        return rx(rustix::fs::listxattr_query(&p)).map(|n| (Vec::new(), n));
    }
    let mut buf = vec![0u8; size];
    let n = rx(rustix::fs::listxattr(&p, &mut buf[..]))?;
    buf.truncate(n.min(size));
    Ok((buf, n))
}

/// Sets `name` to `value`; `flags` are `XATTR_CREATE` / `XATTR_REPLACE` as the caller gave
/// them (unknown bits too: the kernel judges them).
pub fn set(fd: BorrowedFd<'_>, name: &CStr, value: &[u8], flags: i32) -> Result<()> {
    let p = proc_path(fd);
    let flags = rustix::fs::XattrFlags::from_bits_retain(flags as u32);
    rx(rustix::fs::setxattr(&p, name, value, flags))
}

pub fn remove(fd: BorrowedFd<'_>, name: &CStr) -> Result<()> {
    let p = proc_path(fd);
    rx(rustix::fs::removexattr(&p, name))
}

fn c_path(path: &std::path::Path) -> Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| crate::errno::Errno::EINVAL)
}

/// The whole value of `name` on the file at `path` (for the command-line tools).
pub fn get_path(path: &std::path::Path, name: &CStr) -> Result<Vec<u8>> {
    let p = c_path(path)?;
    loop {
        let len = rx(rustix::fs::getxattr_query(&p, name))?;
        let mut buf = vec![0u8; len + 1];
        match rx(rustix::fs::getxattr(&p, name, &mut buf[..])) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(buf);
            }
            // It grew in between (the stats do): ask again.
            Err(e) if e == crate::errno::Errno::ERANGE => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Sets `name` on the file at `path` (for the command-line tools).
pub fn set_path(path: &std::path::Path, name: &CStr, value: &[u8]) -> Result<()> {
    let p = c_path(path)?;
    let flags = rustix::fs::XattrFlags::empty();
    rx(rustix::fs::setxattr(&p, name, value, flags))
}

/// The names on the file at `path`, split (for the command-line tools).
pub fn list_path(path: &std::path::Path) -> Result<Vec<Vec<u8>>> {
    let p = c_path(path)?;
    let len = rx(rustix::fs::listxattr_query(&p))?;
    let mut buf = vec![0u8; len];
    // With an empty list the call still happens (its error counts); rustix reads it as 0.
    let n = rx(rustix::fs::listxattr(&p, &mut buf[..]))?;
    buf.truncate(n);
    Ok(buf
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(<[u8]>::to_vec)
        .collect())
}
