//! Extended attributes of a leg object held as `O_PATH`, through `/proc/self/fd/N` (the
//! f*xattr calls refuse `O_PATH` descriptors). Not for symlinks: the path would follow them.

use super::check_size;
use super::fd::proc_path;
use crate::errno::Result;
use std::ffi::CStr;
use std::os::fd::BorrowedFd;

/// The value of `name`; `size == 0` asks only for its length (returned as an empty Vec plus
/// the length).
pub fn get(fd: BorrowedFd<'_>, name: &CStr, size: usize) -> Result<(Vec<u8>, usize)> {
    let p = proc_path(fd);
    let mut buf = vec![0u8; size];
    // SAFETY: buf is valid for size bytes (a null pointer with size 0 is allowed).
    let n = check_size(unsafe {
        libc::getxattr(p.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), size)
    })?;
    buf.truncate(n.min(size));
    Ok((buf, n))
}

/// The NUL-separated name list; `size == 0` asks only for its length.
pub fn list(fd: BorrowedFd<'_>, size: usize) -> Result<(Vec<u8>, usize)> {
    let p = proc_path(fd);
    let mut buf = vec![0u8; size];
    // SAFETY: buf is valid for size bytes.
    let n = check_size(unsafe { libc::listxattr(p.as_ptr(), buf.as_mut_ptr().cast(), size) })?;
    buf.truncate(n.min(size));
    Ok((buf, n))
}

pub fn set(fd: BorrowedFd<'_>, name: &CStr, value: &[u8], flags: i32) -> Result<()> {
    let p = proc_path(fd);
    // SAFETY: value is valid for value.len() bytes.
    let r = unsafe {
        libc::setxattr(
            p.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    };
    super::check(r).map(drop)
}

pub fn remove(fd: BorrowedFd<'_>, name: &CStr) -> Result<()> {
    let p = proc_path(fd);
    // SAFETY: valid C strings.
    super::check(unsafe { libc::removexattr(p.as_ptr(), name.as_ptr()) }).map(drop)
}
