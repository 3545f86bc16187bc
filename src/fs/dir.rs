//! Directory listings, from the metadata leg.

use super::handle::{DirEntry, OpenDir};
use super::inode::{Identity, ROOT_INO};
use super::{attr, Caller, Entry, MirrorFs};
use crate::errno::{Errno, Result};
use crate::sys;
use std::ffi::{CString, OsStr};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

/// One entry handed to the kernel by `readdirplus`.
pub struct PlusEntry<'a> {
    pub name: &'a OsStr,
    pub offset: u64,
    /// Full attributes; for "." and ".." only `ino` and `kind` are meaningful, and no lookup
    /// was counted (the kernel does not make dentries for them).
    pub entry: Entry,
    pub counted: bool,
}

impl MirrorFs {
    /// Opens a directory for listing. When the core checks access, the caller must be able to
    /// open it for reading on the metadata leg (the listing itself is read as the daemon).
    pub fn opendir(&self, ino: u64, caller: &Caller) -> Result<u64> {
        let inode = self.inodes.get(ino)?;
        if !inode.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        if !self.config.options.default_permissions {
            self.on_metadata_leg("opendir", |leg| {
                let fd = inode.fd(leg)?;
                // Through /proc: reading needs read permission, not search permission as
                // `openat(fd, ".")` would.
                let flags = libc::O_RDONLY | libc::O_DIRECTORY;
                self.checked(caller, || sys::fd::reopen(fd.as_fd(), flags))
                    .map(drop)
            })?;
        }
        Ok(self.handles.insert_dir(OpenDir {
            inode,
            entries: parking_lot::Mutex::new(None),
        }))
    }

    pub fn releasedir(&self, fh: u64) {
        self.handles.remove(fh);
    }

    /// The listing of an open directory: read from the metadata leg at offset 0 (a new
    /// `readdir` pass or a `rewinddir`), from memory afterwards.
    fn listing(&self, d: &OpenDir, offset: u64) -> Result<Arc<Vec<DirEntry>>> {
        let mut cached = d.entries.lock();
        if offset == 0 || cached.is_none() {
            let inode = &d.inode;
            let list = self.on_metadata_leg("readdir", |leg| {
                let dir_fd = inode.fd(leg)?;
                let dir_fd = dir_fd.as_fd();
                let st = sys::fd::fstat(dir_fd)?;
                let raw = sys::dir::read_dir(dir_fd)?;
                let mut out = Vec::with_capacity(raw.len() + 2);
                out.push(DirEntry {
                    ino: inode.ino,
                    kind: libc::S_IFDIR,
                    name: ".".into(),
                });
                out.push(DirEntry {
                    ino: ROOT_INO,
                    kind: libc::S_IFDIR,
                    name: "..".into(),
                });
                for e in raw {
                    if self.is_reserved(inode.ino, &e.name) {
                        continue;
                    }
                    let ino = self.inodes.number_for(Identity {
                        leg,
                        dev: st.st_dev,
                        ino: e.ino,
                    });
                    out.push(DirEntry {
                        ino,
                        kind: attr::kind_of_dtype(e.d_type),
                        name: e.name,
                    });
                }
                Ok(out)
            })?;
            *cached = Some(Arc::new(list));
        }
        Ok(cached.clone().expect("listing was just read"))
    }

    /// Lists from `offset`; `add(ino, next_offset, kind, name)` returns true once the kernel's
    /// buffer is full.
    pub fn readdir(
        &self,
        fh: u64,
        offset: u64,
        mut add: impl FnMut(u64, u64, u32, &OsStr) -> bool,
    ) -> Result<()> {
        let d = self.handles.dir(fh)?;
        let list = self.listing(&d, offset)?;
        for (i, e) in list.iter().enumerate().skip(offset as usize) {
            if add(e.ino, i as u64 + 1, e.kind, &e.name) {
                break;
            }
        }
        Ok(())
    }

    /// Lists with attributes; each entry but "." and ".." counts as one kernel lookup, and the
    /// one that did not fit is given back.
    pub fn readdirplus(
        &self,
        fh: u64,
        offset: u64,
        mut add: impl FnMut(&PlusEntry<'_>) -> bool,
    ) -> Result<()> {
        let d = self.handles.dir(fh)?;
        let list = self.listing(&d, offset)?;
        let _dir = d.inode.dir_lock.read();
        for (i, e) in list.iter().enumerate().skip(offset as usize) {
            let dots = e.name == "." || e.name == "..";
            let entry = if dots {
                let mut a = self.stat_inode(&d.inode)?;
                a.ino = fuser::INodeNo(e.ino);
                Entry { attr: a }
            } else {
                let cname = CString::new(e.name.as_bytes()).map_err(|_| Errno::EINVAL)?;
                // As the daemon: the listing was allowed; looking an entry up as the caller
                // happens when the caller uses it (names are not cached when the core checks
                // access, see `config`).
                match self.lookup_locked(&d.inode, &cname, &Caller::root()) {
                    Ok(entry) => entry,
                    // Gone since the listing was read: skip it.
                    Err(Errno::ENOENT) => continue,
                    Err(err) => return Err(err),
                }
            };
            let pe = PlusEntry {
                name: &e.name,
                offset: i as u64 + 1,
                entry,
                counted: !dots,
            };
            if add(&pe) {
                if pe.counted {
                    self.inodes.forget(pe.entry.attr.ino.0, 1);
                }
                break;
            }
        }
        Ok(())
    }

    pub fn fsyncdir(&self, ino: u64, datasync: bool) -> Result<()> {
        let _barrier = self.mirror.barrier();
        let inode = self.inodes.get(ino)?;
        let legs = self.legs_for(&inode);
        self.mirror
            .fan_out(&legs, "fsyncdir", |leg| {
                let d = sys::fd::open_dir_for_read(inode.fd(leg)?.as_fd())?;
                sys::fd::fsync(std::os::fd::AsFd::as_fd(&d), datasync)
            })
            .map(drop)
    }
}
