//! Directory listings, from the metadata leg.

use super::handle::{DirEntry, OpenDir};
use super::inode::{Identity, ROOT_INO};
use super::{attr, Caller, Entry, InodeRef, MirrorFs};
use crate::errno::{Errno, Result};
use crate::mirror::Op;
use crate::sys;
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::ffi::{CString, OsStr};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

/// Listings kept for passes without an open handle at most, and their entries in all.
const LISTINGS_MAX: usize = 256;
const LISTINGS_MAX_ENTRIES: usize = 1 << 18;

/// Listings read for `readdir` without a handle: with `FUSE_NO_OPENDIR_SUPPORT` the kernel
/// sends no OPENDIR and RELEASEDIR (two round trips per directory a walk enters), and fills
/// its own cache of the listing (`FOPEN_CACHE_DIR`) from READDIRs with handle 0.
///
/// Each pass from offset 0 reads the directory anew under a new generation, and the offsets
/// handed out carry it (generation << 32 | position), so a pass goes on in the listing it
/// began while another pass of the same directory starts over. The oldest listings go first
/// beyond [`LISTINGS_MAX`] or [`LISTINGS_MAX_ENTRIES`]; a pass whose listing went reads the
/// directory again and goes on from its position, as a pass over a changed directory would.
#[derive(Default)]
pub(super) struct Listings(Mutex<ListingsInner>);

#[derive(Default)]
struct ListingsInner {
    next_gen: u32,
    by_gen: HashMap<u32, (u64, Arc<Vec<DirEntry>>)>,
    order: VecDeque<u32>,
    entries: usize,
}

impl ListingsInner {
    fn get(&self, gen: u32, ino: u64) -> Option<Arc<Vec<DirEntry>>> {
        self.by_gen
            .get(&gen)
            .filter(|(i, _)| *i == ino)
            .map(|(_, l)| l.clone())
    }

    fn insert(&mut self, ino: u64, list: Arc<Vec<DirEntry>>) -> u32 {
        self.next_gen = self.next_gen.wrapping_add(1).max(1);
        let gen = self.next_gen;
        self.entries += list.len();
        self.by_gen.insert(gen, (ino, list));
        self.order.push_back(gen);
        // The newest stays whatever its size: a pass over a huge directory must not read it
        // again for every READDIR.
        while self.order.len() > 1
            && (self.order.len() > LISTINGS_MAX || self.entries > LISTINGS_MAX_ENTRIES)
        {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some((_, l)) = self.by_gen.remove(&old) {
                self.entries -= l.len();
            }
        }
        gen
    }
}

/// Where a pass lists from: its listing, the first position to hand out, and how a position
/// becomes the kernel's offset.
struct Pass {
    list: Arc<Vec<DirEntry>>,
    start: usize,
    gen: Option<u32>,
}

impl Pass {
    /// The offset that continues after position `i`.
    fn next_offset(&self, i: usize) -> u64 {
        let next = i as u64 + 1;
        match self.gen {
            Some(g) => u64::from(g) << 32 | next,
            None => next,
        }
    }
}

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
            *cached = Some(Arc::new(self.read_listing(&d.inode)?));
        }
        Ok(cached.clone().expect("listing was just read"))
    }

    /// Where a pass over directory `ino` with handle `fh` goes on from `offset`; handle 0 is
    /// the kernel's zero-message opendir ([`Listings`]).
    fn pass(&self, ino: u64, fh: u64, offset: u64) -> Result<(InodeRef, Pass)> {
        if fh != 0 {
            let d = self.handles.dir(fh)?;
            let list = self.listing(&d, offset)?;
            let pass = Pass {
                list,
                start: offset as usize,
                gen: None,
            };
            return Ok((d.inode.clone(), pass));
        }
        let inode = self.inodes.get(ino)?;
        if !inode.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        let (gen, start) = (
            (offset >> 32) as u32,
            (offset & u64::from(u32::MAX)) as usize,
        );
        let kept = (offset != 0)
            .then(|| self.listings.0.lock().get(gen, ino))
            .flatten();
        let (list, gen) = match kept {
            Some(list) => (list, gen),
            None => {
                let list = Arc::new(self.read_listing(&inode)?);
                let gen = self.listings.0.lock().insert(ino, list.clone());
                (list, gen)
            }
        };
        let pass = Pass {
            list,
            start,
            gen: Some(gen),
        };
        Ok((inode, pass))
    }

    /// A directory's entries as the metadata leg lists them, "." and ".." first, reserved
    /// names left out.
    fn read_listing(&self, inode: &InodeRef) -> Result<Vec<DirEntry>> {
        self.on_metadata_leg("readdir", |leg| {
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
        })
    }

    /// Lists directory `ino` from `offset`, through handle `fh` (0: none, see [`Listings`]);
    /// `add(ino, next_offset, kind, name)` returns true once the kernel's buffer is full.
    pub fn readdir(
        &self,
        ino: u64,
        fh: u64,
        offset: u64,
        mut add: impl FnMut(u64, u64, u32, &OsStr) -> bool,
    ) -> Result<()> {
        let (_, pass) = self.pass(ino, fh, offset)?;
        for (i, e) in pass.list.iter().enumerate().skip(pass.start) {
            if add(e.ino, pass.next_offset(i), e.kind, &e.name) {
                break;
            }
        }
        Ok(())
    }

    /// Lists with attributes; each entry but "." and ".." counts as one kernel lookup, and the
    /// one that did not fit is given back.
    pub fn readdirplus(
        &self,
        ino: u64,
        fh: u64,
        offset: u64,
        mut add: impl FnMut(&PlusEntry<'_>) -> bool,
    ) -> Result<()> {
        let (dir, pass) = self.pass(ino, fh, offset)?;
        let _dir = dir.dir_lock.read();
        for (i, e) in pass.list.iter().enumerate().skip(pass.start) {
            let dots = e.name == "." || e.name == "..";
            let entry = if dots {
                let mut a = self.stat_inode(&dir)?;
                a.ino = fuser::INodeNo(e.ino);
                Entry { attr: a }
            } else {
                let cname = CString::new(e.name.as_bytes()).map_err(|_| Errno::EINVAL)?;
                // As the daemon: the listing was allowed; looking an entry up as the caller
                // happens when the caller uses it (names are not cached when the core checks
                // access, see `config`).
                // An object the kernel knows already is found by one stat.
                let found = match self.lookup_live(&dir, &cname) {
                    Some(entry) => Ok(entry),
                    None => self.lookup_locked(&dir, &cname, &Caller::root()),
                };
                match found {
                    Ok(entry) => entry,
                    // Gone since the listing was read: skip it.
                    Err(Errno::ENOENT) => continue,
                    Err(err) => return Err(err),
                }
            };
            let pe = PlusEntry {
                name: &e.name,
                offset: pass.next_offset(i),
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
            .fan_out(&legs, Op::Fsyncdir, |leg| {
                let d = sys::fd::open_dir_for_read(inode.fd(leg)?.as_fd())?;
                sys::fd::fsync(std::os::fd::AsFd::as_fd(&d), datasync)
            })
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(n: usize) -> Arc<Vec<DirEntry>> {
        Arc::new(
            (0..n)
                .map(|i| DirEntry {
                    ino: i as u64,
                    kind: libc::S_IFREG,
                    name: format!("{i}").into(),
                })
                .collect(),
        )
    }

    #[test]
    fn listings_are_kept_by_generation_and_the_newest_always() {
        let mut l = ListingsInner::default();
        let a = l.insert(7, listing(3));
        let b = l.insert(7, listing(4));
        assert_ne!(a, b);
        assert_eq!(
            l.get(a, 7).unwrap().len(),
            3,
            "an older pass keeps its listing"
        );
        assert_eq!(l.get(b, 7).unwrap().len(), 4);
        assert!(l.get(a, 8).is_none(), "another directory's generation");
        let huge = l.insert(9, listing(LISTINGS_MAX_ENTRIES + 1));
        assert!(l.get(huge, 9).is_some(), "the newest stays, however big");
        assert!(
            l.get(a, 7).is_none() && l.get(b, 7).is_none(),
            "older ones make room"
        );
        for _ in 0..LISTINGS_MAX + 10 {
            l.insert(1, listing(1));
        }
        assert_eq!(l.order.len(), LISTINGS_MAX);
        assert_eq!(l.by_gen.len(), LISTINGS_MAX);
        assert_eq!(l.entries, LISTINGS_MAX);
    }
}
