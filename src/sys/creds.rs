//! Acting as the caller on one thread, so that new nodes get the caller's owner and group on
//! every leg (setgid directories, group membership and the leg's own permission checks included).
//!
//! Uses the raw per-thread syscalls: glibc's `setgroups` changes every thread of the process,
//! and the fan-out runs other requests on other threads at the same time. Order matters: the
//! groups and the fsgid are set while the thread still has CAP_SETGID (fsuid 0); switching the
//! fsuid away from 0 drops the file capabilities, and switching it back to 0 restores them, so
//! the guard restores the fsuid first.

use crate::errno::{Errno, Result};

/// The identity of the process that made a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    /// Supplementary groups, read from `/proc/PID/status` when needed.
    pub groups: Vec<u32>,
}

impl Caller {
    /// The caller with its supplementary groups looked up (empty if the process is gone).
    pub fn with_groups(uid: u32, gid: u32, pid: u32) -> Caller {
        let groups = if uid == 0 {
            Vec::new()
        } else {
            read_groups(pid)
        };
        Caller {
            uid,
            gid,
            pid,
            groups,
        }
    }

    /// Root, as used for internal work.
    pub fn root() -> Caller {
        Caller {
            uid: 0,
            gid: 0,
            pid: 0,
            groups: Vec::new(),
        }
    }
}

fn read_groups(pid: u32) -> Vec<u32> {
    if pid == 0 {
        return Vec::new();
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
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
        set_thread_groups(&caller.groups)?;
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
