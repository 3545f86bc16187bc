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

/// Same as [`check`] for calls returning `ssize_t`.
fn check_size(ret: libc::ssize_t) -> Result<usize> {
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(ret as usize)
    }
}

/// Sets the process umask to 0: modes arrive from the kernel already masked with the caller's
/// umask, and must reach every leg unchanged.
pub fn clear_umask() {
    // SAFETY: umask has no memory effects.
    unsafe { libc::umask(0) };
}

/// Raises the limit on open files as far as the system allows: every inode the kernel holds
/// pins one `O_PATH` descriptor per leg, and the kernel may hold hundreds of thousands (a `tar`
/// of a source tree). Root may raise the hard limit up to `fs.nr_open`; others get their hard
/// limit. Returns the soft limit in force.
pub fn raise_nofile_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: lim is a valid, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 0;
    }
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(lim.rlim_max);
    let wanted = libc::rlimit {
        rlim_cur: nr_open.max(lim.rlim_max),
        rlim_max: nr_open.max(lim.rlim_max),
    };
    // SAFETY: wanted is a valid rlimit.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &wanted) } == 0 {
        return wanted.rlim_cur;
    }
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: lim is a valid rlimit.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    lim.rlim_cur
}

/// The current time as a `timespec`, for resolving `UTIME_NOW` once for every leg.
pub fn now_timespec() -> libc::timespec {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts
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
    // SAFETY: buf is valid for 16 bytes.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n != buf.len() as isize {
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
    // SAFETY: buf is valid for 8 bytes.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    let v = if n == buf.len() as isize {
        u64::from_le_bytes(buf)
    } else {
        let t = now_timespec();
        (t.tv_sec as u64) << 32 ^ (t.tv_nsec as u64) ^ (std::process::id() as u64) << 48
    };
    v.max(1)
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
    // SAFETY: no memory effects.
    unsafe { libc::setsid() };
}

/// Points stdin, stdout and stderr at /dev/null (the daemon after a successful mount).
pub fn redirect_stdio_to_null() {
    // SAFETY: the path is a valid C string; dup2 onto 0..2 has no memory effects.
    unsafe {
        let fd = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if fd >= 0 {
            libc::dup2(fd, 0);
            libc::dup2(fd, 1);
            libc::dup2(fd, 2);
            if fd > 2 {
                libc::close(fd);
            }
        }
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
    // SAFETY: getppid takes no arguments.
    unsafe { libc::getppid() as u32 }
}

/// Ends the process at once (`_exit`): no destructor, no exit handler, no unmount.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit takes no pointers and does not return.
    unsafe { libc::_exit(code) }
}

/// Sends signal `sig` to process `pid` (errors ignored: it may have ended).
pub fn signal(pid: libc::pid_t, sig: i32) {
    // SAFETY: kill takes no pointers.
    unsafe { libc::kill(pid, sig) };
}

/// Whether a process with id `pid` exists (signal 0: EPERM means it exists and is another
/// user's). Ids above `pid_t`'s range exist never.
pub fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill takes no pointers; signal 0 only checks.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || crate::errno::Errno::last() == crate::errno::Errno::EPERM
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

/// `umount2(path, flags)`.
pub fn umount(path: &std::ffi::CStr, flags: i32) -> std::io::Result<()> {
    // SAFETY: path is a valid C string; no memory is written.
    if unsafe { libc::umount2(path.as_ptr(), flags) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Mounts the FUSE control filesystem (fusectl) on `dir` (root only).
pub fn mount_fusectl(dir: &str) -> std::io::Result<()> {
    let d = std::ffi::CString::new(dir).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    // SAFETY: every pointer is a valid C string or null; no memory is written.
    let r = unsafe {
        libc::mount(
            c"fusectl".as_ptr(),
            d.as_ptr(),
            c"fusectl".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The effective uid of this process.
pub fn geteuid() -> u32 {
    // SAFETY: no memory effects.
    unsafe { libc::geteuid() }
}

/// The effective gid of this process.
pub fn getegid() -> u32 {
    // SAFETY: no memory effects.
    unsafe { libc::getegid() }
}

/// Lets a write to a closed pipe end the process quietly, as command-line tools do
/// (`mirrorfs list M | head`); Rust ignores SIGPIPE by default.
pub fn default_sigpipe() {
    // SAFETY: installs the default disposition; no handler code runs.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}
