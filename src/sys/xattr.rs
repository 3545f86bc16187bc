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

fn c_path(path: &std::path::Path) -> Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| crate::errno::Errno::EINVAL)
}

/// The whole value of `name` on the file at `path` (for the command-line tools).
pub fn get_path(path: &std::path::Path, name: &CStr) -> Result<Vec<u8>> {
    let p = c_path(path)?;
    loop {
        // SAFETY: a null buffer with size 0 asks for the length.
        let len = check_size(unsafe {
            libc::getxattr(p.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0)
        })?;
        let mut buf = vec![0u8; len + 1];
        // SAFETY: buf is valid for buf.len() bytes.
        match check_size(unsafe {
            libc::getxattr(
                p.as_ptr(),
                name.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        }) {
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
    // SAFETY: value is valid for value.len() bytes.
    let r = unsafe {
        libc::setxattr(
            p.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    super::check(r).map(drop)
}

/// The names on the file at `path`, split (for the command-line tools).
pub fn list_path(path: &std::path::Path) -> Result<Vec<Vec<u8>>> {
    let p = c_path(path)?;
    // SAFETY: a null buffer with size 0 asks for the length.
    let len = check_size(unsafe { libc::listxattr(p.as_ptr(), std::ptr::null_mut(), 0) })?;
    let mut buf = vec![0u8; len];
    // SAFETY: buf is valid for len bytes.
    let n = check_size(unsafe { libc::listxattr(p.as_ptr(), buf.as_mut_ptr().cast(), len) })?;
    buf.truncate(n);
    Ok(buf
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(<[u8]>::to_vec)
        .collect())
}
