//! The only module with `unsafe`: thin wrappers over the syscalls mirrorfs makes on its legs.
//!
//! Rules kept here so that callers cannot forget them:
//! - every open adds `O_CLOEXEC`, and every name lookup adds `O_NOFOLLOW` (or
//!   `AT_SYMLINK_NOFOLLOW`): a symlink inside a leg is never followed on the user's behalf;
//! - names are single path components (the FUSE kernel never sends a `/`), resolved relative to
//!   a directory descriptor, so no operation re-resolves a long absolute path;
//! - a descriptor opened with `O_PATH` is re-opened for I/O through `/proc/self/fd/N` only for
//!   regular files and directories (see [`fd::reopen`]).

pub mod aligned;
pub mod creds;
pub mod dir;
pub mod fd;
pub mod fusedev;
pub mod host;
pub mod mountinfo;
pub mod replace;
pub mod session;
pub mod syslog;
pub mod tree_support;
pub mod uring;
pub mod xattr;

use crate::errno::{Errno, Result};

/// Turns a libc return value into a result: -1 means "see errno".
fn check(ret: libc::c_int) -> Result<libc::c_int> {
    if ret == -1 {
        Err(Errno::last())
    } else {
        Ok(ret)
    }
}

/// A rustix result as ours: the same errno.
fn rx<T>(r: rustix::io::Result<T>) -> Result<T> {
    r.map_err(|e| Errno(e.raw_os_error()))
}

/// Sets the process umask to 0: modes arrive from the kernel already masked with the caller's
/// umask, and must reach every leg unchanged.
pub fn clear_umask() {
    rustix::process::umask(rustix::fs::Mode::empty());
}

/// Raises the limit on open files as far as the system allows: every inode the kernel holds
/// pins one `O_PATH` descriptor per leg, and the kernel may hold hundreds of thousands (a `tar`
/// of a source tree). Root may raise the hard limit up to `fs.nr_open`; others get their hard
/// limit. Returns the soft limit in force.
pub fn raise_nofile_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource};
    // rustix says "unlimited" with None; the limit in numbers is RLIM_INFINITY.
    let max = getrlimit(Resource::Nofile)
        .maximum
        .unwrap_or(libc::RLIM_INFINITY);
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(max);
    let wanted = nr_open.max(max);
    if setrlimit(Resource::Nofile, nofile_rlimit(wanted)).is_ok() {
        return wanted;
    }
    let _ = setrlimit(Resource::Nofile, nofile_rlimit(max));
    max
}

/// A soft and hard limit both at `n` (`RLIM_INFINITY`: unlimited), as rustix takes it.
fn nofile_rlimit(n: u64) -> rustix::process::Rlimit {
    let n = (n != libc::RLIM_INFINITY).then_some(n);
    rustix::process::Rlimit {
        current: n,
        maximum: n,
    }
}

/// The current time as a `timespec`, for resolving `UTIME_NOW` once for every leg.
pub fn now_timespec() -> libc::timespec {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Realtime);
    libc::timespec {
        tv_sec: ts.tv_sec as libc::time_t,
        tv_nsec: ts.tv_nsec as libc::c_long,
    }
}

/// Unix time `unix_s` in the local time zone, to the minute: `2026-12-01 20:10`.
pub fn local_minute(unix_s: u64) -> String {
    let t = libc::time_t::try_from(unix_s).unwrap_or(libc::time_t::MAX);
    // SAFETY: an all-zero tm is a valid value for localtime_r to overwrite.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call; localtime_r is thread-safe.
    if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
        return format!("@{unix_s}");
    }
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}",
        i64::from(tm.tm_year) + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min
    )
}

/// 16 random bytes from the kernel, as lowercase hex (array and leg identities).
pub fn random_hex_id() -> String {
    let mut buf = [0u8; 16];
    if !fill_random(&mut buf) {
        // getrandom cannot fail for 16 bytes after boot; fall back to time and pid.
        let t = now_timespec();
        let mix = (t.tv_sec as u128) << 64 | (t.tv_nsec as u128) << 32 | std::process::id() as u128;
        buf = mix.to_le_bytes();
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// A random, non-zero 64-bit number from the kernel (file identities).
pub fn random_u64() -> u64 {
    let mut buf = [0u8; 8];
    let v = if fill_random(&mut buf) {
        u64::from_le_bytes(buf)
    } else {
        let t = now_timespec();
        (t.tv_sec as u64) << 32 ^ (t.tv_nsec as u64) ^ (std::process::id() as u64) << 48
    };
    v.max(1)
}

/// Fills `buf` from the kernel's random source (`getrandom`, no flags); false unless one call
/// filled all of it.
fn fill_random(buf: &mut [u8]) -> bool {
    let len = buf.len();
    rustix::rand::getrandom(buf, rustix::rand::GetRandomFlags::empty()) == Ok(len)
}

/// `fork()`, for daemonizing.
///
/// # Safety
/// The process must have no thread but the calling one: the child gets only that thread, and
/// a lock another thread held at the fork (the allocator's, the logger's) would stay locked in
/// the child forever.
pub unsafe fn fork() -> Result<libc::pid_t> {
    // SAFETY: the caller guarantees that no other thread exists (see above).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        Err(Errno::last())
    } else {
        Ok(pid)
    }
}

/// `setsid()`: detach the daemon from the terminal's session.
pub fn setsid() {
    let _ = rustix::process::setsid();
}

/// Points stdin, stdout and stderr at /dev/null (the daemon after a successful mount).
///
/// Opened without `O_CLOEXEC`: if 0, 1 or 2 was closed, /dev/null gets that number and stays
/// as it is, and a program this process executes must inherit it.
pub fn redirect_stdio_to_null() {
    use rustix::fs::{Mode, OFlags};
    let Ok(null) = rustix::fs::open(c"/dev/null", OFlags::RDWR, Mode::empty()) else {
        return;
    };
    let _ = rustix::stdio::dup2_stdin(&null);
    let _ = rustix::stdio::dup2_stdout(&null);
    let _ = rustix::stdio::dup2_stderr(&null);
    if std::os::fd::AsRawFd::as_raw_fd(&null) <= 2 {
        // It is one of stdin, stdout, stderr now: leave it open.
        let _ = std::os::fd::IntoRawFd::into_raw_fd(null);
    }
}

/// The signals that end the daemon: SIGINT, SIGTERM, SIGHUP.
fn termination_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGHUP);
        set
    }
}

/// Blocks the termination signals in the calling thread (and so in every thread it starts
/// afterwards), so that one thread can wait for them with [`wait_for_termination_signal`].
pub fn block_termination_signals() {
    let set = termination_signals();
    // SAFETY: set is a valid, initialised sigset_t.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

/// The parent process's id.
pub fn parent_pid() -> u32 {
    // None is a parent outside our pid namespace, which getppid reports as 0.
    rustix::process::Pid::as_raw(rustix::process::getppid()) as u32
}

/// Ends the process at once (`_exit`): no destructor, no exit handler, no unmount.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit takes no pointers and does not return.
    unsafe { libc::_exit(code) }
}

/// Sends signal `sig` to process `pid` (errors ignored: it may have ended). Only a process:
/// an id below 1 (a process group to `kill`) or a number that is no named signal sends nothing.
pub fn signal(pid: libc::pid_t, sig: i32) {
    if pid < 1 {
        return;
    }
    let (Some(pid), Some(sig)) = (
        rustix::process::Pid::from_raw(pid),
        rustix::process::Signal::from_named_raw(sig),
    ) else {
        return;
    };
    let _ = rustix::process::kill_process(pid, sig);
}

/// Whether a process with id `pid` exists (signal 0: EPERM means it exists and is another
/// user's). Ids above `pid_t`'s range exist never.
pub fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // 0 is no process: kill(0, 0) asks after our own process group, which exists.
    let Some(pid) = rustix::process::Pid::from_raw(pid) else {
        return true;
    };
    match rustix::process::test_kill_process(pid) {
        Ok(()) | Err(rustix::io::Errno::PERM) => true,
        Err(_) => false,
    }
}

/// Waits until a termination signal arrives; returns its number.
pub fn wait_for_termination_signal() -> i32 {
    let set = termination_signals();
    let mut sig: libc::c_int = 0;
    // SAFETY: set is a valid sigset_t and sig a valid out pointer.
    unsafe { libc::sigwait(&set, &mut sig) };
    sig
}

/// Puts the calling thread in the idle I/O scheduling class (`ioprio_set`, as `ionice -c 3`):
/// its reads and writes go to a disk only when nothing else wants it (with the BFQ scheduler;
/// others ignore the class). What `btrfs scrub` does by default.
pub fn io_priority_idle() -> std::io::Result<()> {
    const IOPRIO_WHO_PROCESS: libc::c_long = 1;
    const IOPRIO_CLASS_IDLE: libc::c_long = 3;
    const IOPRIO_CLASS_SHIFT: u32 = 13;
    // SAFETY: integer arguments only; `who` 0 is the calling thread.
    let r = unsafe {
        libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            0 as libc::c_long,
            IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `umount2(path, flags)` (EINVAL for a path with a NUL byte).
pub fn umount(path: &std::path::Path, flags: i32) -> std::io::Result<()> {
    let flags = rustix::mount::UnmountFlags::from_bits_retain(flags as u32);
    rustix::mount::unmount(path, flags).map_err(std::io::Error::from)
}

/// Mounts the FUSE control filesystem (fusectl) on `dir` (root only).
pub fn mount_fusectl(dir: &str) -> std::io::Result<()> {
    let d = std::ffi::CString::new(dir).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    let none = rustix::mount::MountFlags::empty();
    rustix::mount::mount(c"fusectl", d.as_c_str(), c"fusectl", none, None)
        .map_err(std::io::Error::from)
}

/// The effective uid of this process.
pub fn geteuid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// The effective gid of this process.
pub fn getegid() -> u32 {
    rustix::process::getegid().as_raw()
}

/// Lets a write to a closed pipe end the process quietly, as command-line tools do
/// (`mirrorfs list M | head`); Rust ignores SIGPIPE by default.
pub fn default_sigpipe() {
    // SAFETY: installs the default disposition; no handler code runs.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_ids_and_randomness() {
        assert!(process_alive(std::process::id()));
        assert!(process_alive(0), "kill(0, 0): our own process group");
        assert!(!process_alive(u32::MAX));
        assert_eq!(parent_pid(), std::os::unix::process::parent_id());
        let (a, b) = (random_hex_id(), random_hex_id());
        assert!(a.len() == 32 && a != b && random_u64() != 0);
    }

    #[test]
    fn the_open_file_limit_only_goes_up() {
        use rustix::process::{getrlimit, Resource};
        let soft = || {
            getrlimit(Resource::Nofile)
                .current
                .unwrap_or(libc::RLIM_INFINITY)
        };
        let before = soft();
        let now = raise_nofile_limit();
        assert!(now >= before && soft() == now, "{before} -> {now}");
    }
}
