//! A leg: one backing directory, normally on its own disk, holding a full copy of the mirror,
//! and what we know of it: the device under it, its live load, its counters.

pub mod device;
pub mod spec;

use crate::errno::Result;
use crate::sys;
use device::{LegDevice, RotationalSource};
use parking_lot::Mutex;
use spec::LegSpec;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// Position of a leg in the leg list given at mount (its slot).
pub type LegIdx = usize;

/// Which leg a user means by `what`, among `legs` (each leg's name and directory, by slot):
/// its name (`name=LABEL`, else `legN`), `legN` for the leg in slot N whatever its name, or its
/// directory (as given, or any path to the same directory). The one rule behind `init_from=`,
/// `read_policy=leg:NAME`, `mirrorfs leg ...` and `mirrorfs scrub --repair=LEG`.
pub fn find(what: &std::ffi::OsStr, legs: &[(&str, &Path)]) -> Option<LegIdx> {
    if let Some(i) = legs
        .iter()
        .position(|(name, _)| std::ffi::OsStr::new(name) == what)
    {
        return Some(i);
    }
    let slot = what
        .to_str()
        .and_then(|w| w.strip_prefix("leg"))
        .and_then(|n| crate::value::count(n, 0, legs.len().checked_sub(1)? as u64).ok());
    if let Some(i) = slot {
        return Some(i as usize);
    }
    let canonical = std::fs::canonicalize(what).ok();
    legs.iter()
        .position(|(_, dir)| *dir == Path::new(what) || canonical.as_deref() == Some(dir))
}

/// Whether a leg takes part in reads and writes. The statistics, the events, Prometheus and
/// `mirrorfs status` show it in zpool's words: the `strum` name on each variant is its only
/// spelling, and serde goes through it too.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(into = "&'static str", try_from = "String")]
#[derive(strum::IntoStaticStr, strum::Display, strum::EnumString, strum::VariantArray)]
pub enum LegState {
    /// Holds the same data as every other in-sync leg; gets every write, may serve reads.
    #[strum(serialize = "ONLINE")]
    InSync,
    /// Dropped after an I/O error or a disagreement; gets nothing until it is resynced.
    #[strum(serialize = "FAULTED")]
    Failed,
    /// Not there at mount (`-o degraded`): never touched.
    #[strum(serialize = "MISSING")]
    Missing,
    /// There at mount but behind the others: never read, never written by the engine,
    /// until a resync brings it up to date.
    #[strum(serialize = "STALE")]
    Stale,
    /// Being brought up to date from an in-sync leg (the resync writes it; nothing else
    /// does, and nothing reads it).
    #[strum(serialize = "RESYNCING")]
    Resyncing,
    /// No longer a member (`mirrorfs leg remove`): kept only so that the stats show it.
    #[strum(serialize = "REMOVED")]
    Removed,
}

impl LegState {
    /// The word the stats and `mirrorfs status` use (zpool's vocabulary where it has one).
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// For serde's `try_from`, which reads an owned string: a borrowed one would fail on
/// documents that are not read straight from bytes.
impl TryFrom<String> for LegState {
    type Error = strum::ParseError;
    fn try_from(s: String) -> std::result::Result<LegState, strum::ParseError> {
        s.parse()
    }
}

/// A backing directory and what we know of it.
pub struct Leg {
    pub idx: LegIdx,
    /// The leg's name in stats and in `read_policy=leg:NAME` (`=name=LABEL`, else `legN`).
    pub name: String,
    /// The path given by the user (canonical).
    path: parking_lot::RwLock<PathBuf>,
    /// `O_PATH` descriptor of the leg's root directory.
    /// The leg root's `O_PATH` descriptor: none for a leg that was not there at mount (it gets
    /// one when it is resynced); a `mirrorfs leg replace` changes it.
    root: parking_lot::RwLock<Option<std::sync::Arc<OwnedFd>>>,
    /// Device of the leg root.
    pub dev: u64,
    /// The block device under the leg, if any.
    pub device: LegDevice,
    /// Effective rotational flag, and where it came from.
    pub rotational: bool,
    pub rotational_source: RotationalSource,
    /// md's write-mostly: read only when no other in-sync leg can serve.
    pub writemostly: bool,
    /// Write-mostly, and left alone by lookups, listings and attribute reads while another
    /// in-sync leg can answer them: its objects are found when a change needs them.
    pub quiet: bool,
    state: AtomicU8,
    /// Our own reads and writes on this leg that are picked or running and not finished.
    pub inflight: AtomicU32,
    /// Files whose open files the kernel reads from this leg by passthrough (`passthrough=ro`),
    /// counted by the `fs` layer's backing guard.
    pub passthrough_files: std::sync::Arc<AtomicU32>,
    /// Read errors since the mount (the budget of `MAX_READ_ERRORS`; not reset by
    /// `stats_reset`).
    pub read_faults: AtomicU64,
    pub counters: LegCounters,
    /// Operations given up on after `leg_timeout` that have not ended yet (they end when the
    /// leg answers; see `mirror/deadline.rs`).
    pub abandoned: std::sync::Arc<AtomicU32>,
    /// Free space as last measured, less what was written since.
    free: Mutex<FreeSpace>,
    /// Bytes that must stay free on the leg (`minfreespace`).
    pub reserve: AtomicU64,
    /// Writes to the leg's files, and whether they may leave its page cache.
    pub writes: LegWrites,
}

/// How data is written to a leg's files. A streamed write (see `fs/data.rs`) does not stay in
/// the leg's page cache: the mount's own page cache holds what the kernel caches of the file,
/// and a copy on every leg would only take memory from it. That needs `RWF_DONTCACHE` (Linux
/// 6.14, and a filesystem that has it: ext4, xfs, btrfs); a leg that refuses it once gets
/// plain buffered writes from then on. Cloned into operations that outlive a borrow of the leg.
#[derive(Clone)]
pub struct LegWrites {
    /// The leg's filesystem has taken, or may take, `RWF_DONTCACHE` writes.
    dontcache: std::sync::Arc<AtomicBool>,
    leg: std::sync::Arc<str>,
}

impl LegWrites {
    fn new(leg: &str) -> Self {
        LegWrites {
            dontcache: std::sync::Arc::new(AtomicBool::new(true)),
            leg: leg.into(),
        }
    }

    /// Writes all of `data` at `offset` through `fd`, a buffered descriptor of a file on the
    /// leg; with `streamed`, so that its pages leave the page cache once written back, where
    /// the leg allows it. Either way the same write as far as durability goes: dirty until
    /// written back or fsynced.
    pub fn pwrite(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        data: &[u8],
        offset: u64,
        streamed: bool,
    ) -> Result<usize> {
        if streamed && self.dontcache.load(Ordering::Relaxed) {
            match sys::fd::pwrite_full_dontcache(fd, data, offset) {
                Err(crate::errno::Errno(libc::EOPNOTSUPP)) => {
                    if self.dontcache.swap(false, Ordering::Relaxed) {
                        log::info!(
                            "leg {}: its filesystem keeps written data in the page cache \
                             (no RWF_DONTCACHE): streamed writes are cached there too",
                            self.leg
                        );
                    }
                }
                r => return r,
            }
        }
        sys::fd::pwrite_full(fd, data, offset)
    }
}

/// A cached `statvfs` of the leg.
struct FreeSpace {
    measured: Option<std::time::Instant>,
    /// Bytes available to us (f_bavail), less the bytes written since the measurement.
    avail: u64,
}

/// Plain per-leg counters (the stats issue exposes them).
#[derive(Default)]
pub struct LegCounters {
    pub read_ops: AtomicU64,
    pub read_bytes: AtomicU64,
    pub write_ops: AtomicU64,
    pub write_bytes: AtomicU64,
    pub read_errors: AtomicU64,
    pub write_errors: AtomicU64,
    /// Copies found to differ from the others (scrub, read verification).
    pub checksum_errors: AtomicU64,
    /// Ranges rewritten on this leg after it failed to read them (read-repair).
    pub read_repairs: AtomicU64,
    /// Reads (or pieces of split reads) the policy sent to this leg.
    pub policy_picks: AtomicU64,
    /// Times a stream moved onto this leg from another.
    pub stream_switches: AtomicU64,
    /// Split reads this leg served a piece of.
    pub split_reads: AtomicU64,
    /// Whole reads of a stream spread over several legs that this leg served.
    pub spread_reads: AtomicU64,
    /// Operations not answered within `leg_timeout`.
    pub timeouts: AtomicU64,
}

impl LegCounters {
    /// Zeroes every counter (`user.mirrorfs.stats_reset`).
    pub fn reset(&self) {
        for c in [
            &self.read_ops,
            &self.read_bytes,
            &self.write_ops,
            &self.write_bytes,
            &self.read_errors,
            &self.write_errors,
            &self.checksum_errors,
            &self.read_repairs,
            &self.policy_picks,
            &self.stream_switches,
            &self.split_reads,
            &self.spread_reads,
            &self.timeouts,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

/// Counts one of our own I/Os on a leg from the moment it is decided until it is dropped.
pub struct InflightGuard<'a>(&'a AtomicU32);

impl<'a> InflightGuard<'a> {
    pub fn new(leg: &'a Leg) -> Self {
        leg.inflight.fetch_add(1, Ordering::AcqRel);
        InflightGuard(&leg.inflight)
    }

    /// Counts one more request in flight on `leg` with no guard: its owner gives it back
    /// with [`adopt`](Self::adopt) (a request that outlives the borrow of its leg: one
    /// submitted on a ring).
    pub fn count(leg: &Leg) {
        std::mem::forget(InflightGuard::new(leg));
    }

    /// The guard of a request counted with [`count`](Self::count): dropping it ends it.
    pub fn adopt(leg: &'a Leg) -> Self {
        InflightGuard(&leg.inflight)
    }
}

impl Drop for InflightGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Flushes the filesystem of a leg's root (`syncfs`).
pub fn flush_root(root: std::os::fd::BorrowedFd<'_>) -> Result<()> {
    // syncfs refuses O_PATH descriptors: open the root for reading.
    let d = sys::fd::reopen(root, libc::O_RDONLY | libc::O_DIRECTORY)?;
    sys::fd::syncfs(d.as_fd())
}

impl Leg {
    /// Whether a read of this leg may wait for something other than a local disk: a leg
    /// with no block device under it (a FUSE, network or memory filesystem), whose reads a
    /// ring must not try inline (see `sys::uring::RingRead::may_block`).
    pub fn reads_may_block(&self) -> bool {
        self.device.sysfs.is_none()
    }

    /// Opens the leg root at `path` (canonical) with the attributes of `spec`.
    pub fn open(idx: LegIdx, path: &Path, spec: &LegSpec) -> Result<Leg> {
        let root = sys::fd::open_root(path)?;
        let st = sys::fd::fstat(root.as_fd())?;
        Ok(Leg::new(
            idx,
            path,
            spec,
            Some(root),
            st.st_dev,
            LegState::InSync,
        ))
    }

    /// A leg that is not there, or that must not be touched (`state` Missing or Stale): it
    /// shows in the stats, and takes no part in anything.
    pub fn absent(idx: LegIdx, path: &Path, spec: &LegSpec, state: LegState) -> Leg {
        let dev = std::fs::metadata(path)
            .map(|m| std::os::unix::fs::MetadataExt::dev(&m))
            .unwrap_or(0);
        Leg::new(idx, path, spec, None, dev, state)
    }

    fn new(
        idx: LegIdx,
        path: &Path,
        spec: &LegSpec,
        root: Option<OwnedFd>,
        dev: u64,
        state: LegState,
    ) -> Leg {
        let device = if dev == 0 {
            LegDevice::none()
        } else {
            LegDevice::probe(dev)
        };
        let (rotational, rotational_source) = match (spec.rotational, device.rotational) {
            (Some(r), _) => (r, RotationalSource::Option),
            (None, Some(r)) => (r, RotationalSource::Sysfs),
            (None, None) => (false, RotationalSource::Unknown),
        };
        let root_cell = parking_lot::RwLock::new(root.map(std::sync::Arc::new));
        Leg {
            idx,
            name: spec.name_at(idx),
            path: parking_lot::RwLock::new(path.to_path_buf()),
            root: root_cell,
            dev,
            device,
            rotational,
            rotational_source,
            writemostly: spec.writemostly,
            quiet: spec.quiet,
            state: AtomicU8::new(state as u8),
            inflight: AtomicU32::new(0),
            passthrough_files: Default::default(),
            read_faults: AtomicU64::new(0),
            counters: LegCounters::default(),
            abandoned: Default::default(),
            free: Mutex::new(FreeSpace {
                measured: None,
                avail: 0,
            }),
            reserve: AtomicU64::new(0),
            writes: LegWrites::new(&spec.name_at(idx)),
        }
    }

    /// Opens a leg with no attributes (tests, tools).
    pub fn open_plain(idx: LegIdx, path: &Path) -> Result<Leg> {
        Leg::open(idx, path, &LegSpec::default())
    }

    /// The leg's directory (canonical); a `mirrorfs leg replace` changes it.
    pub fn path(&self) -> PathBuf {
        self.path.read().clone()
    }

    /// The leg root's descriptor; ENODEV for a leg that is not there.
    pub fn root(&self) -> Result<std::sync::Arc<OwnedFd>> {
        self.root.read().clone().ok_or(crate::errno::Errno::ENODEV)
    }

    /// Gives a leg that had none its root descriptor (when it is resynced), opened from the
    /// leg's path. Returns it.
    pub fn open_root(&self) -> Result<std::sync::Arc<OwnedFd>> {
        let mut root = self.root.write();
        if let Some(r) = root.as_ref() {
            return Ok(r.clone());
        }
        let fd = std::sync::Arc::new(sys::fd::open_root(&self.path())?);
        *root = Some(fd.clone());
        Ok(fd)
    }

    /// Closes the leg's root descriptor (a leg out of the mirror lets its filesystem go);
    /// [`open_root`](Self::open_root) opens it again from the path.
    pub(crate) fn close_root(&self) -> bool {
        self.root.write().take().is_some()
    }

    /// Flushes the leg's whole filesystem to stable storage (`syncfs`).
    pub fn flush(&self) -> Result<()> {
        flush_root(self.root()?.as_fd())
    }

    /// Points the leg at another directory (`mirrorfs leg replace`): its root is opened
    /// there. Only for a leg that takes part in nothing (failed, missing, stale).
    pub(crate) fn move_to(&self, path: &Path) -> Result<()> {
        let fd = std::sync::Arc::new(sys::fd::open_root(path)?);
        *self.root.write() = Some(fd);
        *self.path.write() = path.to_path_buf();
        *self.free.lock() = FreeSpace {
            measured: None,
            avail: 0,
        };
        Ok(())
    }

    /// Sets the leg's state (resync and leg management).
    pub(crate) fn set_state(&self, state: LegState) {
        self.state.store(state as u8, Ordering::Release);
    }

    pub fn state(&self) -> LegState {
        match self.state.load(Ordering::Acquire) {
            0 => LegState::InSync,
            1 => LegState::Failed,
            2 => LegState::Missing,
            3 => LegState::Stale,
            4 => LegState::Resyncing,
            _ => LegState::Removed,
        }
    }

    pub fn is_in_sync(&self) -> bool {
        self.state() == LegState::InSync
    }

    /// Read only when no other in-sync leg can serve: write-mostly or quiet.
    pub fn reads_last(&self) -> bool {
        self.writemostly || self.quiet
    }

    /// The filesystem's size and the bytes available now (measured).
    pub fn space(&self) -> Result<(u64, u64)> {
        let st = sys::fd::statvfs(self.root()?.as_fd())?;
        Ok(self.note_space(&st))
    }

    /// Keeps a measurement of the leg's filesystem (`statvfs`); returns its size and the
    /// bytes available.
    #[allow(clippy::unnecessary_cast)] // (statvfs's fields are not u64 everywhere)
    pub fn note_space(&self, st: &libc::statvfs) -> (u64, u64) {
        let frsize = st.f_frsize as u64;
        let (total, avail) = (st.f_blocks as u64 * frsize, st.f_bavail as u64 * frsize);
        let mut f = self.free.lock();
        *f = FreeSpace {
            measured: Some(std::time::Instant::now()),
            avail,
        };
        (total, avail)
    }

    /// Whether `need` more bytes fit on the leg without going below `reserve` free bytes.
    /// Measures at most every 100 ms, and again whenever the estimate comes close to the line,
    /// so that the answer is exact where it matters and cheap elsewhere. This answers from the
    /// estimate alone: None when it must measure (then
    /// [`take_space_measured`](Self::take_space_measured)). Counts `need` as written when it
    /// fits.
    pub fn take_space_estimated(&self, need: u64, reserve: u64) -> Option<bool> {
        const FRESH: std::time::Duration = std::time::Duration::from_millis(100);
        const MARGIN: u64 = 64 << 20;
        let mut f = self.free.lock();
        let fresh = f.measured.is_some_and(|t| t.elapsed() < FRESH);
        if fresh && f.avail >= reserve.saturating_add(need).saturating_add(MARGIN) {
            f.avail -= need;
            return Some(true);
        }
        None
    }

    /// [`take_space_estimated`](Self::take_space_estimated) once the leg was measured to have
    /// `avail` bytes free.
    pub fn take_space_measured(&self, avail: u64, need: u64, reserve: u64) -> bool {
        let fits = avail >= reserve.saturating_add(need);
        if fits {
            let mut f = self.free.lock();
            f.avail = f.avail.saturating_sub(need);
        }
        fits
    }

    /// Marks the leg failed; returns false if it already was.
    pub(crate) fn set_failed(&self) -> bool {
        self.state.swap(LegState::Failed as u8, Ordering::AcqRel) != LegState::Failed as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn a_leg_is_found_by_name_slot_or_directory() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b b"));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        let legs = [("ssd", a.as_path()), ("leg1", b.as_path())];
        let find = |w: &str| find(OsStr::new(w), &legs);
        assert_eq!(find("ssd"), Some(0));
        assert_eq!(find("leg0"), Some(0), "slot alias of a named leg");
        assert_eq!(find("leg1"), Some(1));
        assert_eq!(find(&a.display().to_string()), Some(0));
        assert_eq!(find(&format!("{}/../b b/.", a.display())), Some(1));
        for none in [
            "",
            "hdd",
            "leg2",
            "leg+1",
            "leg99999999999999999999",
            "/nonexistent",
        ] {
            assert_eq!(find(none), None, "{none}");
        }
        // A directory name in the current directory is not a leg unless it is one.
        assert_eq!(find("b b"), None);
    }
}
