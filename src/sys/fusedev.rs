//! The FUSE device's ioctls and the thread placement the transports need: a clone of the
//! session's descriptor per /dev/fuse reader, passthrough's backing files, pinning a thread to
//! a CPU and setting its scheduling policy, and an eventfd to wake a ring's thread.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

/// `FUSE_DEV_IOC_CLONE`: `_IOR(229, 0, uint32_t)`.
const FUSE_DEV_IOC_CLONE: libc::c_ulong = 0x8004_e500;
/// `FUSE_DEV_IOC_BACKING_OPEN`: `_IOW(229, 1, struct fuse_backing_map)` (16 bytes).
const FUSE_DEV_IOC_BACKING_OPEN: libc::c_ulong = 0x4010_e501;
/// `FUSE_DEV_IOC_BACKING_CLOSE`: `_IOW(229, 2, uint32_t)`.
const FUSE_DEV_IOC_BACKING_CLOSE: libc::c_ulong = 0x4004_e502;

/// `struct fuse_backing_map`.
#[repr(C)]
struct BackingMap {
    fd: i32,
    flags: u32,
    padding: u64,
}

/// A new descriptor of the same FUSE connection, with a queue of its own in the kernel: each
/// /dev/fuse reader thread reads its own clone (libfuse's `clone_fd`).
pub fn clone_device(dev: BorrowedFd<'_>) -> io::Result<File> {
    let new = File::options().read(true).write(true).open("/dev/fuse")?;
    let src: u32 = dev.as_raw_fd() as u32;
    // SAFETY: the ioctl reads one u32 from a valid pointer.
    if unsafe { libc::ioctl(new.as_raw_fd(), FUSE_DEV_IOC_CLONE, &src as *const u32) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(new)
}

/// A file registered with the kernel as a passthrough backing file; closed when dropped.
#[derive(Debug)]
pub struct BackingId {
    dev: Arc<OwnedFd>,
    id: u32,
}

impl BackingId {
    /// Registers `file` on the FUSE connection `dev` (root only; the kernel checks).
    pub fn open(dev: &Arc<OwnedFd>, file: BorrowedFd<'_>) -> io::Result<BackingId> {
        let map = BackingMap {
            fd: file.as_raw_fd(),
            flags: 0,
            padding: 0,
        };
        // SAFETY: the ioctl reads one fuse_backing_map from a valid pointer.
        let id = unsafe {
            libc::ioctl(
                dev.as_raw_fd(),
                FUSE_DEV_IOC_BACKING_OPEN,
                &map as *const BackingMap,
            )
        };
        if id < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(BackingId {
            dev: dev.clone(),
            id: id as u32,
        })
    }

    /// The id an OPEN's reply names.
    pub fn id(&self) -> u32 {
        self.id
    }
}

impl Drop for BackingId {
    fn drop(&mut self) {
        // SAFETY: the ioctl reads one u32 from a valid pointer.
        unsafe {
            libc::ioctl(
                self.dev.as_raw_fd(),
                FUSE_DEV_IOC_BACKING_CLOSE,
                &self.id as *const u32,
            )
        };
    }
}

/// The CPUs the kernel may ever run (`/sys/devices/system/cpu/possible`, e.g. `0-3`): the
/// kernel makes one io_uring queue per possible CPU.
pub fn possible_cpus() -> io::Result<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let mut top = 0usize;
    for part in text.trim().split(',') {
        let last = part.rsplit('-').next().unwrap_or(part);
        let n: usize = last
            .trim()
            .parse()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, text.clone()))?;
        top = top.max(n + 1);
    }
    Ok(top)
}

/// Pins the calling thread to `cpu`.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET bounds-checks against its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Sets the calling thread's scheduling policy: `SCHED_IDLE` when `idle`, else `SCHED_OTHER`
/// (its nice value is kept).
pub fn set_idle_policy(idle: bool) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    let policy = match idle {
        true => libc::SCHED_IDLE,
        false => libc::SCHED_OTHER,
    };
    // SAFETY: `param` is a valid sched_param for the call; pid 0 is the calling thread.
    if unsafe { libc::sched_setscheduler(0, policy, &param) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_goes_to_sched_idle_and_back() {
        std::thread::spawn(|| {
            // SAFETY: sched_getscheduler takes a pid (0: this thread) and reads nothing else.
            let policy = || unsafe { libc::sched_getscheduler(0) };
            assert_eq!(policy(), libc::SCHED_OTHER);
            set_idle_policy(true).unwrap();
            assert_eq!(policy(), libc::SCHED_IDLE);
            set_idle_policy(true).unwrap();
            assert_eq!(policy(), libc::SCHED_IDLE, "twice is the same");
            set_idle_policy(false).unwrap();
            assert_eq!(policy(), libc::SCHED_OTHER);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn the_machine_has_at_least_one_possible_cpu() {
        let n = possible_cpus().unwrap();
        assert!(n >= 1);
        assert!(n >= std::thread::available_parallelism().map_or(1, |p| p.get()));
    }

    #[test]
    fn a_thread_pins_to_cpu_zero_and_refuses_an_absurd_cpu() {
        std::thread::spawn(|| {
            pin_to_cpu(0).unwrap();
            assert!(pin_to_cpu(1 << 20).is_err());
        })
        .join()
        .unwrap();
    }
}
