//! Reading a leg directory's entries.

use crate::errno::{Errno, Result};
use std::ffi::{CStr, OsString};
use std::os::fd::{BorrowedFd, IntoRawFd};
use std::os::unix::ffi::OsStringExt;

/// One entry as the leg's filesystem reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LegDirEntry {
    pub name: OsString,
    pub ino: u64,
    /// `DT_*` value.
    pub d_type: u8,
}

/// All entries of the directory `fd` holds (an `O_PATH` descriptor is fine), `.` and `..`
/// excluded.
pub fn read_dir(fd: BorrowedFd<'_>) -> Result<Vec<LegDirEntry>> {
    let rfd = super::fd::open_dir_for_read(fd)?;
    let raw = rfd.into_raw_fd();
    // SAFETY: raw is an open directory descriptor; fdopendir takes ownership of it.
    let dirp = unsafe { libc::fdopendir(raw) };
    if dirp.is_null() {
        let e = Errno::last();
        // SAFETY: fdopendir failed, so raw is still ours to close.
        unsafe { libc::close(raw) };
        return Err(e);
    }
    let mut out = Vec::new();
    let result = loop {
        // SAFETY: errno is thread-local; resetting it tells end-of-stream from error.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: dirp is a valid DIR* until closedir below.
        let ent = unsafe { libc::readdir64(dirp) };
        if ent.is_null() {
            let e = Errno::last();
            break if e.0 == 0 { Ok(()) } else { Err(e) };
        }
        // SAFETY: readdir64 returned a valid dirent64 whose d_name is NUL-terminated.
        let (name, ino, d_type) = unsafe {
            let ent = &*ent;
            (
                CStr::from_ptr(ent.d_name.as_ptr()).to_bytes().to_vec(),
                ent.d_ino,
                ent.d_type,
            )
        };
        if name == b"." || name == b".." {
            continue;
        }
        out.push(LegDirEntry {
            name: OsString::from_vec(name),
            ino,
            d_type,
        });
    };
    // SAFETY: dirp is valid and closed exactly once (this also closes raw).
    unsafe { libc::closedir(dirp) };
    result.map(|()| out)
}
