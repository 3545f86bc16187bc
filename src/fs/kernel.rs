//! Telling the kernel what mirrorfs changed behind its back, so that what it caches stays
//! exact (see `cache=` in `docs/architecture.md`).
//!
//! The mirror engine and the recovery jobs speak of paths ([`KernelView`]); the kernel of node
//! ids. Notices go through a channel to one thread, which finds the live inodes and calls the
//! FUSE side's [`Notify`]. No request thread waits on it: the kernel may need page locks that
//! a request in flight holds.

use super::inode::Identity;
use super::MirrorFs;
use crate::mirror::KernelView;
use crate::sys;
use crossbeam_channel::{Receiver, Sender};
use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

/// The kernel side: drops what the kernel caches (the FUSE adapter implements it with
/// `fuser`'s notifier). Errors (the object is not cached, the mount is gone) are ignored.
pub trait Notify: Send + 'static {
    /// Drops the attributes of node `ino`, and its cached data when `data`.
    fn inval_inode(&self, ino: u64, data: bool);
    /// Drops the name `name` in directory `parent` (present or known absent).
    fn inval_entry(&self, parent: u64, name: &OsStr);
}

enum Notice {
    Path(PathBuf),
    AllAttributes,
}

/// The mirror's end: queues notices.
struct Queue(Sender<Notice>);

impl KernelView for Queue {
    fn path_changed(&self, rel: &Path) {
        let _ = self.0.send(Notice::Path(rel.to_path_buf()));
    }
    fn metadata_leg_changed(&self) {
        let _ = self.0.send(Notice::AllAttributes);
    }
}

impl MirrorFs {
    /// From now on, changes mirrorfs makes behind the kernel's back reach `notify`, from a
    /// thread of its own.
    pub fn start_kernel_notices(self: &Arc<Self>, notify: Box<dyn Notify>) -> std::io::Result<()> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let fs = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("kernel-notices".into())
            .spawn(move || serve(fs, rx, notify))?;
        self.mirror.set_kernel_view(Box::new(Queue(tx)));
        Ok(())
    }

    /// The live node of the object at `rel`, found through its identity on any in-sync leg.
    fn live_node_at(&self, rel: &[u8]) -> Option<u64> {
        self.mirror.in_sync_legs().into_iter().find_map(|leg| {
            let root = self.mirror.leg(leg).root().ok()?;
            let fd = sys::fd::open_beneath(root.as_fd(), rel).ok()?;
            let st = sys::fd::fstat(fd.as_fd()).ok()?;
            self.inodes.live_number(&Identity {
                leg,
                dev: st.st_dev,
                ino: st.st_ino,
            })
        })
    }
}

fn serve(fs: Weak<MirrorFs>, rx: Receiver<Notice>, notify: Box<dyn Notify>) {
    for notice in rx {
        let Some(fs) = fs.upgrade() else { return };
        match notice {
            Notice::AllAttributes => {
                for inode in fs.inodes.live_inodes() {
                    notify.inval_inode(inode.ino, false);
                }
            }
            Notice::Path(rel) => {
                let bytes = rel.as_os_str().as_bytes();
                if let Some(ino) = fs.live_node_at(bytes) {
                    notify.inval_inode(ino, true);
                }
                // The name too: the object there may be a new one, or gone, or newly there.
                let parent = rel.parent().unwrap_or(Path::new(""));
                if let (Some(name), Some(dir)) = (
                    rel.file_name(),
                    fs.live_node_at(parent.as_os_str().as_bytes()),
                ) {
                    notify.inval_entry(dir, name);
                    notify.inval_inode(dir, true);
                }
            }
        }
    }
}
