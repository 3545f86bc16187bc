//! One entry of one leg: an `O_PATH | O_NOFOLLOW` descriptor on it plus what the engine compares
//! (type, mode, owner, size, mtime, rdev, symlink target, xattrs).

use super::TreeOptions;
use crate::errno::{Errno, Result};
use crate::sys;
use crate::sys::fd::Stat;
use serde::Serialize;
use std::collections::BTreeMap;
use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path};

/// File type of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Fifo,
    Socket,
    CharDev,
    BlockDev,
}

impl Kind {
    pub fn from_mode(mode: u32) -> Kind {
        match mode & libc::S_IFMT {
            libc::S_IFREG => Kind::File,
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFLNK => Kind::Symlink,
            libc::S_IFIFO => Kind::Fifo,
            libc::S_IFSOCK => Kind::Socket,
            libc::S_IFCHR => Kind::CharDev,
            _ => Kind::BlockDev,
        }
    }

    pub fn ifmt(self) -> u32 {
        match self {
            Kind::File => libc::S_IFREG,
            Kind::Dir => libc::S_IFDIR,
            Kind::Symlink => libc::S_IFLNK,
            Kind::Fifo => libc::S_IFIFO,
            Kind::Socket => libc::S_IFSOCK,
            Kind::CharDev => libc::S_IFCHR,
            Kind::BlockDev => libc::S_IFBLK,
        }
    }
}

/// (st_dev, st_ino): an inode's identity on its leg.
pub type InodeId = (u64, u64);

/// The compared metadata of an entry (from one `fstat`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    pub kind: Kind,
    /// Permission bits, `mode & 0o7777`.
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub mtime: (i64, i64),
    pub atime: (i64, i64),
    pub nlink: u64,
    pub rdev: u64,
    pub blocks: u64,
    pub id: InodeId,
}

impl Meta {
    pub fn from_stat(st: &Stat) -> Meta {
        Meta {
            kind: Kind::from_mode(st.st_mode),
            perm: st.st_mode & 0o7777,
            uid: st.st_uid,
            gid: st.st_gid,
            size: st.st_size as u64,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            atime: (st.st_atime, st.st_atime_nsec),
            nlink: st.st_nlink,
            rdev: st.st_rdev,
            blocks: st.st_blocks as u64,
            id: (st.st_dev, st.st_ino),
        }
    }

    /// A non-directory with other names (a hard-link group member).
    pub fn is_linked(&self) -> bool {
        self.kind != Kind::Dir && self.nlink > 1
    }
}

pub type Xattrs = BTreeMap<Vec<u8>, Vec<u8>>;

/// Where an entry sits: the leg root itself, or a name in a directory.
#[derive(Clone, Copy)]
pub enum Place<'a> {
    Root,
    Child { dir: BorrowedFd<'a>, name: &'a CStr },
}

/// An open entry.
pub struct Node {
    pub fd: OwnedFd,
    pub meta: Meta,
}

impl Node {
    pub fn restat(&mut self) -> Result<()> {
        self.meta = Meta::from_stat(&sys::fd::fstat(self.fd.as_fd())?);
        Ok(())
    }
}

/// An entry with everything that is compared besides content.
pub struct Entry {
    pub node: Node,
    pub link_target: Option<Vec<u8>>,
    pub xattrs: Xattrs,
}

/// Opens `dir/name` without following it; `None` when it does not exist.
pub fn open_at(dir: BorrowedFd<'_>, name: &CStr) -> Result<Option<Node>> {
    match sys::fd::open_path_at(dir, name) {
        Ok(fd) => {
            let meta = Meta::from_stat(&sys::fd::fstat(fd.as_fd())?);
            Ok(Some(Node { fd, meta }))
        }
        Err(e) if e == Errno::ENOENT => Ok(None),
        Err(e) => Err(e),
    }
}

/// A leg root as a node.
pub fn open_root_node(root: BorrowedFd<'_>) -> Result<Node> {
    let fd = root.try_clone_to_owned().map_err(Errno::from)?;
    let meta = Meta::from_stat(&sys::fd::fstat(fd.as_fd())?);
    Ok(Node { fd, meta })
}

/// The normal components of a relative path, or EINVAL for `..`, `/` or `.` in it.
pub fn components(rel: &Path) -> Result<Vec<&OsStr>> {
    rel.components()
        .map(|c| match c {
            Component::Normal(n) => Ok(n),
            _ => Err(Errno::EINVAL),
        })
        .collect()
}

/// Opens the directory `rel` under `root` one component at a time, never following a symlink.
/// `None` when a component is missing or is not a directory.
pub fn open_dir_rel(root: BorrowedFd<'_>, rel: &Path) -> Result<Option<Node>> {
    let mut cur = open_root_node(root)?;
    for c in components(rel)? {
        let name = sys::tree_support::cname(c)?;
        match open_at(cur.fd.as_fd(), &name) {
            Ok(Some(n)) if n.meta.kind == Kind::Dir => cur = n,
            Ok(_) => return Ok(None),
            Err(e) if e == Errno::ENOTDIR => return Ok(None),
            Err(e) => return Err(e),
        }
    }
    Ok(Some(cur))
}

/// Opens the entry `rel` under `root` (not followed if it is a symlink; its parents must be
/// real directories). `None` when it does not exist.
pub fn open_rel(root: BorrowedFd<'_>, rel: &Path) -> Result<Option<Node>> {
    let (Some(name), Some(parent)) = (rel.file_name(), rel.parent()) else {
        return open_root_node(root).map(Some);
    };
    let Some(dir) = open_dir_rel(root, parent)? else {
        return Ok(None);
    };
    open_at(dir.fd.as_fd(), &sys::tree_support::cname(name)?)
}

fn ignored(name: &[u8], opts: &TreeOptions) -> bool {
    opts.ignore_xattrs.iter().any(|i| i.as_slice() == name)
}

/// The xattrs of an entry (minus the ignored names); empty where the filesystem has none.
pub fn read_xattrs(place: Place<'_>, node: &Node, opts: &TreeOptions) -> Result<Xattrs> {
    let names = match place {
        Place::Root => match sys::xattr::list(node.fd.as_fd(), 0) {
            Ok((_, 0)) => Ok(Vec::new()),
            Ok((_, len)) => sys::xattr::list(node.fd.as_fd(), len + 256).map(|(b, _)| {
                b.split(|&c| c == 0)
                    .filter(|s| !s.is_empty())
                    .map(<[u8]>::to_vec)
                    .collect()
            }),
            Err(e) => Err(e),
        },
        Place::Child { dir, name } => sys::tree_support::lxattr_list_at(dir, name),
    };
    let names = match names {
        Ok(n) => n,
        Err(e) if e == Errno::ENOTSUP || e == Errno(libc::EOPNOTSUPP) => return Ok(Xattrs::new()),
        Err(e) => return Err(e),
    };
    let mut out = Xattrs::new();
    for n in names {
        if ignored(&n, opts) {
            continue;
        }
        let cn = CString::new(n.clone()).map_err(|_| Errno::EINVAL)?;
        let v = match place {
            Place::Root => get_root_xattr(node.fd.as_fd(), &cn),
            Place::Child { dir, name } => sys::tree_support::lxattr_get_at(dir, name, &cn),
        };
        match v {
            Ok(v) => {
                out.insert(n, v);
            }
            // Removed between the list and the get.
            Err(e) if e == Errno::ENODATA => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

fn get_root_xattr(fd: BorrowedFd<'_>, name: &CStr) -> Result<Vec<u8>> {
    loop {
        let (_, len) = sys::xattr::get(fd, name, 0)?;
        match sys::xattr::get(fd, name, len) {
            Ok((v, n)) if n <= len => return Ok(v),
            Ok(_) => continue,
            Err(e) if e == Errno::ERANGE => continue,
            Err(e) => return Err(e),
        }
    }
}

pub fn set_xattr(place: Place<'_>, node: &Node, name: &[u8], value: &[u8]) -> Result<()> {
    let cn = CString::new(name.to_vec()).map_err(|_| Errno::EINVAL)?;
    match place {
        Place::Root => sys::xattr::set(node.fd.as_fd(), &cn, value, 0),
        Place::Child { dir, name } => sys::tree_support::lxattr_set_at(dir, name, &cn, value),
    }
}

pub fn remove_xattr(place: Place<'_>, node: &Node, name: &[u8]) -> Result<()> {
    let cn = CString::new(name.to_vec()).map_err(|_| Errno::EINVAL)?;
    match place {
        Place::Root => sys::xattr::remove(node.fd.as_fd(), &cn),
        Place::Child { dir, name } => sys::tree_support::lxattr_remove_at(dir, name, &cn),
    }
}

/// Reads everything compared about an entry besides content.
pub fn load(place: Place<'_>, node: Node, opts: &TreeOptions) -> Result<Entry> {
    let link_target = if node.meta.kind == Kind::Symlink {
        Some(sys::fd::read_link(node.fd.as_fd())?)
    } else {
        None
    };
    let xattrs = read_xattrs(place, &node, opts)?;
    Ok(Entry {
        node,
        link_target,
        xattrs,
    })
}
