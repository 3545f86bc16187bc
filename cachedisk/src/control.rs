//! The control file: the power is cut when the file `--control PATH` appears.
//!
//! Each disk watches PATH's directory with inotify. The kernel queues the event to every
//! watcher inside the one system call that creates the file, so one `touch PATH` (or a
//! rename into PATH) reaches all the disks sharing the path at the same instant, without
//! their pids, and nothing polls. What is left between two disks is the time their watching
//! threads take to wake; that thread waits at a real-time priority (where allowed) so that a
//! busy machine does not delay it.

use std::ffi::{CString, OsString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub struct Control {
    inotify: OwnedFd,
    path: PathBuf,
    name: OsString,
}

impl Control {
    /// Starts watching for `path`. Refused when it exists already: a control file left from
    /// the last cut would cut the power again at once.
    pub fn new(path: &Path) -> Result<Control, String> {
        let shown = path.display();
        let name = path
            .file_name()
            .ok_or_else(|| format!("--control '{shown}' names no file"))?
            .to_os_string();
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        if path.symlink_metadata().is_ok() {
            return Err(format!(
                "--control '{shown}' exists already: remove it first (it would cut the power at once)"
            ));
        }
        let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(format!("inotify: {}", std::io::Error::last_os_error()));
        }
        let inotify = unsafe { OwnedFd::from_raw_fd(fd) };
        let c = CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| format!("--control '{shown}': a NUL in the path"))?;
        let mask = libc::IN_CREATE | libc::IN_MOVED_TO | libc::IN_ONLYDIR;
        if unsafe { libc::inotify_add_watch(fd, c.as_ptr(), mask) } < 0 {
            return Err(format!(
                "--control '{shown}': its directory '{}': {}",
                dir.display(),
                std::io::Error::last_os_error()
            ));
        }
        Ok(Control {
            inotify,
            path: path.to_path_buf(),
            name,
        })
    }

    /// Blocks until the control file appears. Err when the directory goes away (the file can
    /// no longer appear there).
    pub fn wait(&self) -> Result<(), String> {
        // Made between new() and now, before any event was read.
        if self.path.symlink_metadata().is_ok() {
            return Ok(());
        }
        // Room for many events; u64s for the alignment inotify_event needs.
        let mut buf = vec![0u64; 1024];
        let header = std::mem::size_of::<libc::inotify_event>();
        loop {
            let bytes = buf.len() * 8;
            let n = unsafe {
                libc::read(
                    self.inotify.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    bytes as libc::size_t,
                )
            };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(format!("inotify: {e}"));
            }
            let data = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n as usize) };
            let mut at = 0;
            while at + header <= data.len() {
                let ev: libc::inotify_event =
                    unsafe { std::ptr::read_unaligned(data[at..].as_ptr().cast()) };
                let name_end = (at + header + ev.len as usize).min(data.len());
                // The name is NUL-padded.
                let raw = &data[at + header..name_end];
                let name = &raw[..raw.iter().position(|&b| b == 0).unwrap_or(raw.len())];
                if name == self.name.as_bytes() {
                    return Ok(());
                }
                if ev.mask & libc::IN_IGNORED != 0 {
                    return Err(format!(
                        "the directory of --control '{}' went away: no cut can come",
                        self.path.display()
                    ));
                }
                at = name_end;
            }
        }
    }
}

/// Runs the calling thread at a real-time priority (SCHED_FIFO), so that it wakes at once
/// when its event comes even on a machine busy compiling; false where that is not allowed
/// (not root, or a container without the right). [`normal_priority`] puts it back.
pub fn realtime_priority() -> bool {
    let p = libc::sched_param { sched_priority: 50 };
    // Linux: pid 0 is the calling thread, not the whole process.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) == 0 }
}

/// Back to the normal scheduler: the cut's own work (writing the kept blocks) is ordinary I/O
/// and must not hog a core at a real-time priority.
pub fn normal_priority() {
    let p = libc::sched_param { sched_priority: 0 };
    unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &p) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn the_file_appearing_ends_the_wait() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cut");
        let c = Control::new(&path).unwrap();
        // Other names in the directory do not count.
        std::fs::write(dir.path().join("other"), b"").unwrap();
        std::fs::write(dir.path().join("cut.tmp"), b"").unwrap();
        let t = Instant::now();
        let p = path.clone();
        let maker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            std::fs::rename(p.with_extension("tmp"), &p).unwrap();
        });
        c.wait().unwrap();
        assert!(t.elapsed() >= Duration::from_millis(90), "woke too early");
        maker.join().unwrap();
    }

    #[test]
    fn a_file_made_before_the_wait_counts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cut");
        let c = Control::new(&path).unwrap();
        std::fs::write(&path, b"").unwrap();
        c.wait().unwrap();
    }

    #[test]
    fn an_existing_file_or_a_missing_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cut");
        std::fs::write(&path, b"").unwrap();
        let e = Control::new(&path).err().unwrap();
        assert!(e.contains("exists already"), "{e}");
        let e = Control::new(&dir.path().join("no/cut")).err().unwrap();
        assert!(e.contains("No such file"), "{e}");
    }

    #[test]
    fn the_directory_going_away_ends_the_wait_with_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let c = Control::new(&sub.join("cut")).unwrap();
        std::fs::remove_dir(&sub).unwrap();
        let e = c.wait().err().unwrap();
        assert!(e.contains("went away"), "{e}");
    }
}
