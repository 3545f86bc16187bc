//! What the machine says of the daemon and of the disks under the legs: the daemon's resident
//! memory, CPU time and threads, through the `sysinfo` crate; each leg's filesystem, device,
//! kind (SSD, HDD), model and whether it is removable, from mountinfo and sysfs (not from
//! sysinfo's disk list, which stats every mount point: see [`disk_of`]). Read when the
//! statistics document is made; what cannot change while mounted (the disk under a path) is
//! looked up once per path.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// The daemon process, now.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcessFacts {
    /// Resident and virtual memory, bytes.
    pub memory: u64,
    pub virtual_memory: u64,
    /// CPU time used since the process started, user and system, microseconds.
    pub cpu_us: u64,
    /// Threads, where the platform says.
    pub threads: Option<u64>,
}

/// The disk a path lives on.
#[derive(Clone, Debug, PartialEq)]
pub struct DiskFacts {
    /// The device or source of the filesystem (`/dev/sda1`, `tmpfs`).
    pub device: String,
    /// Where that filesystem is mounted, and its type.
    pub mount_point: PathBuf,
    pub file_system: String,
    /// `ssd`, `hdd` or `unknown`.
    pub kind: &'static str,
    pub removable: bool,
    /// The disk's model (sysfs `device/model`), when there is one.
    pub model: Option<String>,
}

/// The daemon's own figures; `None` if the platform will not say.
pub fn own_process() -> Option<ProcessFacts> {
    static SYSTEM: OnceLock<Mutex<Option<sysinfo::System>>> = OnceLock::new();
    let pid = sysinfo::get_current_pid().ok()?;
    let mut guard = SYSTEM
        .get_or_init(|| Mutex::new(sysinfo::System::new().ok()))
        .lock();
    let system = guard.as_mut()?;
    system.refresh_processes_specifics(
        sysinfo::ProcessesToUpdate::Some(&[pid]),
        true,
        sysinfo::ProcessRefreshKind::nothing()
            .with_memory()
            .with_cpu()
            .with_tasks(),
    );
    let p = system.process(pid)?;
    Some(ProcessFacts {
        memory: p.memory(),
        virtual_memory: p.virtual_memory(),
        cpu_us: p.accumulated_cpu_time().saturating_mul(1000),
        threads: p.tasks().map(|t| t.len() as u64),
    })
}

/// The disk's own sysfs directory for a device directory (a partition's is its parent).
fn whole_disk(sysfs: &Path) -> Option<&Path> {
    if sysfs.join("partition").exists() {
        sysfs.parent()
    } else {
        Some(sysfs)
    }
}

/// The model of the disk whose sysfs directory is `sysfs` (a partition's disk's), if sysfs
/// has one.
fn model(sysfs: &Path) -> Option<String> {
    let text = std::fs::read_to_string(whole_disk(sysfs)?.join("device/model")).ok()?;
    let m = text.trim();
    (!m.is_empty()).then(|| m.to_string())
}

/// Whether the disk says it is removable (sysfs `removable`).
fn removable(sysfs: &Path) -> bool {
    std::fs::read_to_string(whole_disk(sysfs).unwrap_or(sysfs).join("removable"))
        .is_ok_and(|s| s.trim() == "1")
}

/// The disk under `path`: the filesystem holding it (the mount of its device whose mount point
/// is its longest prefix, from mountinfo), and, from `sysfs` (the leg's block device) and its
/// `rotational` flag, the disk's model, kind and whether it is removable. Looked up once per
/// path.
///
/// Nothing here touches another mount: sysinfo's disk list would stat every mount point of
/// the machine, this daemon's own FUSE mount and other FUSE mounts included, which can block
/// (and did block an unmount: a stat in flight on the mount made umount fail with EBUSY).
pub fn disk_of(path: &Path, sysfs: Option<&Path>, rotational: Option<bool>) -> Option<DiskFacts> {
    static CACHE: OnceLock<Mutex<HashMap<PathBuf, Option<DiskFacts>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(hit) = cache.lock().get(path) {
        return hit.clone();
    }
    let found = (|| {
        use std::os::unix::fs::MetadataExt;
        let real = std::fs::canonicalize(path).ok()?;
        let dev = std::fs::metadata(&real).ok()?.dev();
        // The filesystem holding the path: same device, longest mount point above it.
        let entry = super::mountinfo::read()
            .into_iter()
            .filter(|m| {
                (m.major, m.minor) == (libc::major(dev), libc::minor(dev))
                    && real.starts_with(&m.mount_point)
            })
            .max_by_key(|m| m.mount_point.as_os_str().len())?;
        Some(DiskFacts {
            device: entry.source.to_string_lossy().into_owned(),
            mount_point: entry.mount_point.clone(),
            file_system: entry.fstype.clone(),
            kind: match (sysfs, rotational) {
                (Some(_), Some(true)) => "hdd",
                (Some(_), Some(false)) => "ssd",
                _ => "unknown",
            },
            removable: sysfs.is_some_and(removable),
            model: sysfs.and_then(model),
        })
    })();
    cache.lock().insert(path.to_path_buf(), found.clone());
    found
}

/// How long no one must have asked [`give_back_free_memory_soon`] again before the memory is
/// given back. A mass removal (`rm -rf` of a tree whose inodes were dropped from the kernel's
/// caches) asks again and again for as long as it runs. Giving the memory back at each
/// (`malloc_trim`) took CPU from the removal: one `rm -rf` of /usr/include started 60
/// trimming threads and made 3,426 `madvise` calls; with the wait, 5 and 139, and the daemon
/// used about an eighth less CPU.
pub const TRIM_QUIET: std::time::Duration = std::time::Duration::from_millis(100);

/// Times the memory was given back by [`give_back_free_memory_soon`], for the tests.
static TRIMS: AtomicUsize = AtomicUsize::new(0);

/// How many times [`give_back_free_memory_soon`] has given memory back.
pub fn trims() -> usize {
    TRIMS.load(Ordering::Relaxed)
}

/// Has the allocator give free memory back ([`give_back_free_memory`]) on a thread of its
/// own, once no one has asked again for [`TRIM_QUIET`]. Called after much memory was freed
/// at once: the kernel forgot many inodes, or the read-ahead gave back its buffers.
pub fn give_back_free_memory_soon() {
    // One trimming thread at a time; a request that finds it running asks it to go again,
    // since what was freed meanwhile may have been freed after its trim began.
    static GIVING_BACK: AtomicBool = AtomicBool::new(false);
    static AGAIN: AtomicBool = AtomicBool::new(false);
    AGAIN.store(true, Ordering::Release);
    if !GIVING_BACK.swap(true, Ordering::AcqRel) {
        let spawned = std::thread::Builder::new()
            .name("mirrorfs-trim".into())
            .spawn(|| loop {
                while AGAIN.swap(false, Ordering::AcqRel) {
                    std::thread::sleep(TRIM_QUIET);
                }
                give_back_free_memory();
                TRIMS.fetch_add(1, Ordering::Relaxed);
                GIVING_BACK.store(false, Ordering::Release);
                // A request that came during the trim found this thread running and started
                // none: go again for it, unless one has started since.
                if !AGAIN.load(Ordering::Acquire) || GIVING_BACK.swap(true, Ordering::AcqRel) {
                    break;
                }
            });
        if spawned.is_err() {
            GIVING_BACK.store(false, Ordering::Release);
        }
    }
}

/// Asks the allocator to give free memory back to the system (glibc's `malloc_trim`). glibc
/// gives back on its own only what is free at the top of its heaps, so after many objects
/// are freed at once (the kernel forgetting a large tree) the daemon's resident memory would
/// stay at its peak. It walks every arena, so it is called off the request threads.
pub fn give_back_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointer and may be called at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemon_sees_itself() {
        let p = own_process().expect("own process");
        assert!(p.memory > 0 && p.virtual_memory >= p.memory, "{p:?}");
        // Burn a little CPU: the accumulated time follows.
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(300) {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        std::hint::black_box(x);
        let q = own_process().unwrap();
        assert!(q.cpu_us >= p.cpu_us + 100_000, "{p:?} then {q:?}");
    }

    #[test]
    fn the_filesystem_holding_a_path() {
        let d = disk_of(Path::new("/"), None, None).expect("the disk of /");
        assert_eq!(d.mount_point, PathBuf::from("/"));
        assert!(!d.file_system.is_empty(), "{d:?}");
        // /proc is its own filesystem, not the root's.
        let p = disk_of(Path::new("/proc/self"), None, None).expect("the filesystem of /proc");
        assert_eq!(
            (p.file_system.as_str(), p.mount_point.as_path()),
            ("proc", Path::new("/proc"))
        );
        assert_eq!(p.kind, "unknown");
    }
}
