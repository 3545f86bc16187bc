//! File identity: the random number, in an xattr of every leg's copy, its checksums are kept by.

use std::ffi::CStr;

/// The xattr holding a file's identity on each leg (8 bytes, little-endian). The whole
/// `user.mirrorfs.` namespace is mirrorfs's own: never shown through the mount.
pub const ID_XATTR: &CStr = c"user.mirrorfs.id";

/// Encodes an identity for [`ID_XATTR`].
pub fn id_bytes(id: u64) -> [u8; 8] {
    id.to_le_bytes()
}

/// Decodes an [`ID_XATTR`] value (None if it is not 8 bytes).
pub fn id_from(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

/// The identity of the file open as `fd` (None: it has none, or it is not readable).
pub fn id_of(fd: std::os::fd::BorrowedFd<'_>) -> Option<u64> {
    let (v, _) = crate::sys::xattr::get(fd, ID_XATTR, 8).ok()?;
    id_from(&v)
}

/// The identity of the regular file `name` in the directory `dir`, without opening it.
pub fn id_at(dir: std::os::fd::BorrowedFd<'_>, name: &CStr) -> Option<u64> {
    id_from(&crate::sys::xattr::get_at(dir, name, ID_XATTR, 8).ok()?)
}
