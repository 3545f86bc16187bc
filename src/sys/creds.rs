//! Acting as the caller on one thread, so that new nodes get the caller's owner and group on
//! every leg (setgid directories, group membership and the leg's own permission checks included),
//! and, with `no_default_permissions`, so that the leg's kernel decides every access exactly as
//! it would for the caller (mode bits, ACLs, sticky directories, ownership rules).
//!
//! Uses the raw per-thread syscalls: glibc's `setgroups` changes every thread of the process,
//! and the fan-out runs other requests on other threads at the same time. Order matters: the
//! groups and the fsgid are set while the thread still has CAP_SETGID (fsuid 0); switching the
//! fsuid away from 0 drops the file capabilities, and switching it back to 0 restores them, so
//! the guard restores the fsuid first.

use crate::errno::{Errno, Result};
use std::sync::OnceLock;

/// `CAP_FSETID`'s bit in a capability set: keeps setuid/setgid through writes and truncates.
pub const CAP_FSETID: u32 = 4;
/// `CAP_SYS_ADMIN`'s bit in a capability set.
pub const CAP_SYS_ADMIN: u32 = 21;

/// The identity of the process that made a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    /// The requesting thread's id (0 for requests the kernel makes itself).
    pub pid: u32,
    /// Supplementary groups, read from `/proc/PID/status` the first time they are needed.
    groups: OnceLock<Vec<u32>>,
}

impl Caller {
    /// The caller of a request; its supplementary groups are looked up when first needed
    /// (empty if the process is gone by then).
    pub fn new(uid: u32, gid: u32, pid: u32) -> Caller {
        Caller {
            uid,
            gid,
            pid,
            groups: OnceLock::new(),
        }
    }

    /// A caller with known supplementary groups.
    pub fn with_groups(uid: u32, gid: u32, pid: u32, groups: Vec<u32>) -> Caller {
        Caller {
            uid,
            gid,
            pid,
            groups: OnceLock::from(groups),
        }
    }

    /// Root, as used for internal work.
    pub fn root() -> Caller {
        Caller::with_groups(0, 0, 0, Vec::new())
    }

    /// The supplementary groups.
    pub fn groups(&self) -> &[u32] {
        self.groups.get_or_init(|| {
            if self.uid == 0 {
                Vec::new()
            } else {
                read_groups(self.pid)
            }
        })
    }

    /// Whether the requesting process holds capability `cap` (a `CAP_*` bit above) in its
    /// effective set (read from `/proc/PID/status`; false when it cannot be read).
    pub fn has_cap(&self, cap: u32) -> bool {
        proc_status_field(self.pid, "CapEff:")
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .is_some_and(|caps| caps & (1 << cap) != 0)
    }

    /// Whether `gid` is the caller's group or one of its supplementary groups.
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups().contains(&gid)
    }
}

/// One field of `/proc/PID/status`, without its name.
fn proc_status_field(pid: u32, field: &str) -> Option<String> {
    if pid == 0 {
        return None;
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .map(str::to_string)
}

fn read_groups(pid: u32) -> Vec<u32> {
    proc_status_field(pid, "Groups:")
        .map(|g| {
            g.split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn set_fsuid(uid: u32) -> u32 {
    // SAFETY: setfsuid has no memory effects; it returns the previous fsuid.
    unsafe { libc::syscall(libc::SYS_setfsuid, uid) as u32 }
}

fn set_fsgid(gid: u32) -> u32 {
    // SAFETY: setfsgid has no memory effects; it returns the previous fsgid.
    unsafe { libc::syscall(libc::SYS_setfsgid, gid) as u32 }
}

fn set_thread_groups(groups: &[u32]) -> Result<()> {
    // SAFETY: the pointer and length describe a valid gid_t array.
    let r = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) };
    if r < 0 {
        Err(Errno::last())
    } else {
        Ok(())
    }
}

/// While alive, file operations of this thread run with the caller's fsuid, fsgid and groups.
/// Dropping it restores root. Does nothing when the daemon is not root or the caller is root.
pub struct CallerCredsGuard {
    active: bool,
}

impl CallerCredsGuard {
    /// Assume `caller`'s identity on this thread.
    pub fn assume(caller: &Caller) -> Result<CallerCredsGuard> {
        if caller.uid == 0 && caller.gid == 0 || super::geteuid() != 0 {
            return Ok(CallerCredsGuard { active: false });
        }
        set_thread_groups(caller.groups())?;
        set_fsgid(caller.gid);
        set_fsuid(caller.uid);
        // setfsuid cannot report failure; ask for the current value to check it.
        if set_fsuid(u32::MAX) != caller.uid || set_fsgid(u32::MAX) != caller.gid {
            let g = CallerCredsGuard { active: true };
            drop(g);
            return Err(Errno::EPERM);
        }
        Ok(CallerCredsGuard { active: true })
    }
}

impl Drop for CallerCredsGuard {
    fn drop(&mut self) {
        if self.active {
            set_fsuid(0);
            set_fsgid(0);
            let _ = set_thread_groups(&[]);
        }
    }
}
