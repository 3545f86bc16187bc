//! What the kernel knows of the block device under a leg: whether it rotates, and how many
//! requests it has in flight.
//!
//! The leg's `st_dev` leads to `/sys/dev/block/MAJ:MIN`. A partition is resolved to its disk;
//! a device-mapper or md device to its `slaves` (rotational if any slave rotates); a loop
//! device keeps its own flag (the kernel derives it from the backing file's device; it may
//! also have been set by hand), and only without one is the backing file's device asked. A
//! filesystem without a block device of its own (btrfs, overlay) is looked up in
//! `/proc/self/mountinfo` by its device number. Where none of this leads anywhere (tmpfs,
//! FUSE), the answer is "unknown".

use parking_lot::Mutex;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where a leg's rotational flag comes from. Its name (`as_str`, for the stats) is the
/// variant's, in lower case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum RotationalSource {
    /// `queue/rotational` of the device under the leg.
    Sysfs,
    /// The user's `=rot` or `=nonrot`.
    Option,
    /// Nothing found; the leg is treated as non-rotational until measured otherwise.
    Unknown,
}

impl RotationalSource {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

const SYS_DEV_BLOCK: &str = "/sys/dev/block";

fn major(dev: u64) -> u64 {
    ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff)
}

fn minor(dev: u64) -> u64 {
    ((dev >> 12) & 0xffff_ff00) | (dev & 0xff)
}

fn sysfs_dir(dev: u64) -> Option<PathBuf> {
    let p = PathBuf::from(format!("{SYS_DEV_BLOCK}/{}:{}", major(dev), minor(dev)));
    std::fs::canonicalize(p).ok()
}

/// For an anonymous device (btrfs, overlay): the block device its mount came from.
fn device_from_mountinfo(dev: u64) -> Option<u64> {
    use std::os::unix::fs::FileTypeExt;
    let m = crate::sys::mountinfo::read()
        .into_iter()
        .find(|m| (u64::from(m.major), u64::from(m.minor)) == (major(dev), minor(dev)))?;
    let meta = std::fs::metadata(&m.source).ok()?;
    meta.file_type().is_block_device().then(|| meta.rdev())
}

fn read_trimmed(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

/// The rotational flag of the device whose sysfs directory is `dir`, following partitions,
/// slaves and loop backing files. `depth` stops loops of loops.
fn rotational_of(dir: &Path, depth: u32) -> Option<bool> {
    if depth > 8 {
        return None;
    }
    // A partition's sysfs directory sits inside its disk's.
    let disk = if dir.join("partition").exists() {
        dir.parent()?.to_path_buf()
    } else {
        dir.to_path_buf()
    };
    let slaves: Vec<PathBuf> = std::fs::read_dir(disk.join("slaves"))
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    if !slaves.is_empty() {
        let flags: Vec<bool> = slaves
            .iter()
            .filter_map(|s| std::fs::canonicalize(s).ok())
            .filter_map(|s| rotational_of(&s, depth + 1))
            .collect();
        if !flags.is_empty() {
            return Some(flags.iter().any(|&r| r));
        }
    }
    // A loop device's own flag first: the kernel sets it from the device under the backing
    // file, and an administrator may have set it by hand (a test rig emulating a disk); only
    // when it cannot be read is the backing file's device asked.
    match read_trimmed(&disk.join("queue/rotational")).as_deref() {
        Some("0") => return Some(false),
        Some("1") => return Some(true),
        _ => {}
    }
    let backing = read_trimmed(&disk.join("loop/backing_file"))?;
    let m = std::fs::metadata(backing).ok()?;
    rotational_for_dev(m.dev(), depth + 1)
}

fn rotational_for_dev(dev: u64, depth: u32) -> Option<bool> {
    match sysfs_dir(dev) {
        Some(dir) => rotational_of(&dir, depth),
        None => rotational_of(&sysfs_dir(device_from_mountinfo(dev)?)?, depth),
    }
}

/// The block device under a leg, as far as it can be found.
pub struct LegDevice {
    /// The device's sysfs directory, if there is one.
    pub sysfs: Option<PathBuf>,
    /// `queue/rotational`, following partitions, slaves and loop backing files.
    pub rotational: Option<bool>,
    inflight: Option<InflightSampler>,
}

/// Reads `inflight` at most once per [`InflightSampler::PERIOD`]; older samples are stale.
struct InflightSampler {
    file: std::fs::File,
    last: Mutex<Option<(Instant, u32)>>,
}

impl InflightSampler {
    const PERIOD: Duration = Duration::from_millis(10);
    const STALE: Duration = Duration::from_millis(100);

    fn sample(&self) -> Option<u32> {
        let mut last = self.last.lock();
        let now = Instant::now();
        if let Some((at, n)) = *last {
            if now.duration_since(at) < Self::PERIOD {
                return Some(n);
            }
        }
        let mut buf = [0u8; 64];
        let n = self.file.read_at(&mut buf, 0).ok()?;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        let total: u32 = text
            .split_whitespace()
            .filter_map(|v| v.parse::<u32>().ok())
            .sum();
        *last = Some((now, total));
        Some(total)
    }

    fn last_fresh(&self) -> Option<u32> {
        let last = self.last.lock();
        last.and_then(|(at, n)| (at.elapsed() < Self::STALE).then_some(n))
    }
}

impl LegDevice {
    /// No device (a leg that is not there).
    pub fn none() -> LegDevice {
        LegDevice {
            sysfs: None,
            rotational: None,
            inflight: None,
        }
    }

    /// Looks up the device of a leg whose root is on `dev`.
    pub fn probe(dev: u64) -> LegDevice {
        let sysfs = sysfs_dir(dev).or_else(|| sysfs_dir(device_from_mountinfo(dev)?));
        let rotational = sysfs.as_deref().and_then(|d| rotational_of(d, 0));
        let inflight = sysfs
            .as_ref()
            .and_then(|d| std::fs::File::open(d.join("inflight")).ok())
            .map(|file| InflightSampler {
                file,
                last: Mutex::new(None),
            });
        LegDevice {
            sysfs,
            rotational,
            inflight,
        }
    }

    /// The device's sysfs name (`sda1`, `loop3`), if there is a device.
    pub fn name(&self) -> Option<String> {
        Some(
            self.sysfs
                .as_ref()?
                .file_name()?
                .to_string_lossy()
                .into_owned(),
        )
    }

    /// The device's in-flight requests (reads + writes), sampled now if the last sample is
    /// older than 10 ms; `None` without a device.
    pub fn inflight(&self) -> Option<u32> {
        self.inflight.as_ref()?.sample()
    }

    /// The last sample if it is fresh (for the stats, which must not cause I/O).
    pub fn inflight_recent(&self) -> Option<u32> {
        self.inflight.as_ref()?.last_fresh()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stats show these names.
    #[test]
    fn rotational_sources_keep_their_names() {
        assert_eq!(RotationalSource::Sysfs.as_str(), "sysfs");
        assert_eq!(RotationalSource::Option.as_str(), "option");
        assert_eq!(RotationalSource::Unknown.as_str(), "unknown");
    }

    #[test]
    fn device_numbers_split_like_the_kernel() {
        // makedev(259, 3) and makedev(8, 17) as glibc builds them.
        let dev = libc::makedev(259, 3);
        assert_eq!((major(dev), minor(dev)), (259, 3));
        let dev = libc::makedev(8, 17);
        assert_eq!((major(dev), minor(dev)), (8, 17));
        let dev = libc::makedev(7, 300);
        assert_eq!((major(dev), minor(dev)), (7, 300));
    }

    fn write(p: &Path, text: &str) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn partitions_and_slaves_lead_to_the_disks_flag() {
        let d = tempfile::tempdir().unwrap();
        let ssd = d.path().join("nvme0n1");
        let hdd = d.path().join("sda");
        write(&ssd.join("queue/rotational"), "0\n");
        write(&hdd.join("queue/rotational"), "1\n");
        write(&hdd.join("sda1/partition"), "1\n");
        assert_eq!(rotational_of(&ssd, 0), Some(false));
        assert_eq!(rotational_of(&hdd.join("sda1"), 0), Some(true));
        // A dm device over both: it rotates if any slave does, whatever its own queue says.
        let dm = d.path().join("dm-0");
        write(&dm.join("queue/rotational"), "0\n");
        std::fs::create_dir_all(dm.join("slaves")).unwrap();
        std::os::unix::fs::symlink(&ssd, dm.join("slaves/nvme0n1")).unwrap();
        assert_eq!(rotational_of(&dm, 0), Some(false));
        std::os::unix::fs::symlink(hdd.join("sda1"), dm.join("slaves/sda1")).unwrap();
        assert_eq!(rotational_of(&dm, 0), Some(true));
        // Nothing readable: unknown.
        assert_eq!(rotational_of(&d.path().join("nothing"), 0), None);
    }
}
