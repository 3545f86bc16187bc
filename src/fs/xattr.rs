//! Extended attributes: stored on every leg, read from the metadata leg.
//!
//! `user.mirrorfs.*` is mirrorfs's own namespace (control and statistics keys, see
//! [`super::control`]): such names are never stored on the legs.

use super::inode::CONTROL_INO;
use super::{Caller, MirrorFs, XattrReply};
use crate::errno::{Errno, Result};
use crate::mirror::Op;
use crate::sys;
use std::ffi::{CString, OsStr};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;

/// Bytes a size query of a control key adds to the value's length (see [`MirrorFs::getxattr`]).
const CONTROL_SLACK: usize = 4096;

/// The SELinux label's name (see `config::SelinuxXattr`).
const SELINUX_XATTR: &str = "security.selinux";

/// Prefix of mirrorfs's own attribute names.
pub const CONTROL_PREFIX: &[u8] = b"user.mirrorfs.";

fn xattr_name(name: &OsStr) -> Result<CString> {
    if name.is_empty() || name.len() > 255 {
        return Err(Errno::ERANGE);
    }
    CString::new(name.as_bytes()).map_err(|_| Errno::EINVAL)
}

/// The key of a `user.mirrorfs.<key>` name.
fn control_key(name: &OsStr) -> Option<&str> {
    std::str::from_utf8(name.as_bytes().strip_prefix(CONTROL_PREFIX)?).ok()
}

fn sized(value: Vec<u8>, len: usize, size: u32) -> Result<XattrReply> {
    if size == 0 {
        Ok(XattrReply::Size(len as u32))
    } else if len > size as usize {
        Err(Errno::ERANGE)
    } else {
        Ok(XattrReply::Data(value))
    }
}

impl MirrorFs {
    pub fn setxattr(
        &self,
        ino: u64,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        caller: &Caller,
    ) -> Result<()> {
        let _barrier = self.mirror.barrier();
        let cname = xattr_name(name)?;
        if let Some(key) = control_key(name) {
            return self.control_set(ino, key, value, caller);
        }
        if ino == CONTROL_INO {
            return Err(Errno::EPERM);
        }
        let inode = self.inodes.get(ino)?;
        if inode.is_symlink() {
            // Linux allows no user.* attributes on symlinks; others would need the *xattrat
            // calls on an O_PATH descriptor.
            return Err(Errno::EPERM);
        }
        let legs = self.legs_for(&inode);
        self.mirror.check_space(&legs, value.len() as u64)?;
        self.will_change(&inode);
        self.mirror
            .fan_out(&legs, Op::Setxattr, |leg| {
                let fd = inode.fd(leg)?;
                self.checked(caller, || sys::xattr::set(fd.as_fd(), &cname, value, flags))
            })
            .map(drop)
    }

    pub fn getxattr(
        &self,
        ino: u64,
        name: &OsStr,
        size: u32,
        caller: &Caller,
    ) -> Result<XattrReply> {
        let cname = xattr_name(name)?;
        if let Some(key) = control_key(name) {
            let v = self.control_get(ino, key, caller)?;
            // A value that changes between the caller's size query and its read (the
            // statistics: counters, memory, uptime) may grow by a few bytes meanwhile, and the
            // read would fail with ERANGE. The size query answers with room to spare; the read
            // returns the value's true length.
            let len = v.len();
            return match size {
                0 => Ok(XattrReply::Size((len + CONTROL_SLACK) as u32)),
                _ => sized(v, len, size),
            };
        }
        let got = if ino == CONTROL_INO {
            Err(Errno::ENODATA)
        } else {
            let inode = self.inodes.get(ino)?;
            if inode.is_symlink() {
                Err(Errno::ENODATA)
            } else {
                self.on_metadata_leg("getxattr", |leg| {
                    let fd = inode.fd(leg)?;
                    self.checked(caller, || {
                        sys::xattr::get(fd.as_fd(), &cname, size as usize)
                    })
                })
            }
        };
        match got {
            // `selinux_xattr=`: see `config::SelinuxXattr`.
            Err(Errno::ENODATA) if self.selinux_enotsup && name == SELINUX_XATTR => {
                Err(Errno::ENOTSUP)
            }
            Err(e) => Err(e),
            Ok((v, len)) => sized(v, len, size),
        }
    }

    pub fn listxattr(&self, ino: u64, size: u32, caller: &Caller) -> Result<XattrReply> {
        if ino == CONTROL_INO {
            let v = self.control_list();
            let len = v.len();
            return sized(v, len, size);
        }
        let inode = self.inodes.get(ino)?;
        if inode.is_symlink() {
            return sized(Vec::new(), 0, size);
        }
        // The whole list, without mirrorfs's own names (a file's identity, see
        // `integrity::ID_XATTR`): they are never shown through the mount.
        let (v, _) = self.on_metadata_leg("listxattr", |leg| {
            let fd = inode.fd(leg)?;
            self.checked(caller, || {
                let (_, need) = sys::xattr::list(fd.as_fd(), 0)?;
                sys::xattr::list(fd.as_fd(), need)
            })
        })?;
        let v: Vec<u8> = v
            .split_inclusive(|&b| b == 0)
            .filter(|n| !n.starts_with(CONTROL_PREFIX))
            .flatten()
            .copied()
            .collect();
        let len = v.len();
        sized(v, len, size)
    }

    pub fn removexattr(&self, ino: u64, name: &OsStr, caller: &Caller) -> Result<()> {
        let _barrier = self.mirror.barrier();
        let cname = xattr_name(name)?;
        if let Some(key) = control_key(name) {
            return self.control_remove(ino, key, caller);
        }
        if ino == CONTROL_INO {
            return Err(Errno::ENODATA);
        }
        let inode = self.inodes.get(ino)?;
        if inode.is_symlink() {
            return Err(Errno::ENODATA);
        }
        self.will_change(&inode);
        let legs = self.legs_for(&inode);
        self.mirror
            .fan_out(&legs, Op::Removexattr, |leg| {
                let fd = inode.fd(leg)?;
                self.checked(caller, || sys::xattr::remove(fd.as_fd(), &cname))
            })
            .map(drop)
    }
}
