//! Disks that a power cut empties (`cachedisk/`, the `mirrorfs-cachedisk` binary): an image file
//! served as `MNT/disk` with a volatile write cache, a loop device over it, and the power cut
//! that every disk watching one control file takes at the same instant.

use super::*;
use std::collections::BTreeMap;

/// The cache disk's binary, beside mirrorfs's (`make test-unit` builds it before the tests; a
/// bare `cargo test` does not). A test that cannot find it fails, saying how to build it.
pub fn cachedisk_bin() -> PathBuf {
    let dir = Path::new(mirrorfs_bin()).parent().unwrap().to_path_buf();
    let bin = dir.join("mirrorfs-cachedisk");
    assert!(
        bin.is_file(),
        "{} is missing: build it with `cargo build -p mirrorfs-cachedisk` (make test does)",
        bin.display()
    );
    bin
}

/// CLOCK_MONOTONIC in ns, the clock of the disks' `cut_at_ns`.
pub fn monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// An image file of `size` bytes (sparse: zeros).
pub fn make_image(path: &Path, size: u64) {
    fs::File::create(path).unwrap().set_len(size).unwrap();
}

/// Cuts the power of every disk watching `control`: creates the file, in one system call.
pub fn cut_power(control: &Path) {
    fs::File::create(control).unwrap_or_else(|e| panic!("create {}: {e}", control.display()));
}

/// What a disk's report says about its cut.
#[derive(Debug)]
pub struct CutReport {
    pub at_ns: u64,
    pub dropped: usize,
    pub kept: usize,
    pub kept_blocks: Vec<u64>,
    pub dropped_blocks: Vec<u64>,
    /// Every `name value` line (the request counters: `writes`, `fsyncs`...).
    pub fields: BTreeMap<String, String>,
}

impl CutReport {
    fn parse(text: &str) -> CutReport {
        let fields: BTreeMap<String, String> = text
            .lines()
            .map(|l| {
                let (k, v) = l.split_once(' ').unwrap_or((l, ""));
                (k.to_string(), v.to_string())
            })
            .collect();
        let num = |k: &str| -> u64 {
            fields
                .get(k)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("report without a number for {k}: {text}"))
        };
        let list = |k: &str| -> Vec<u64> {
            fields
                .get(k)
                .map(|v| v.split_whitespace().map(|x| x.parse().unwrap()).collect())
                .unwrap_or_default()
        };
        assert!(
            !fields.contains_key("error"),
            "the disk could not write its kept blocks: {text}"
        );
        CutReport {
            at_ns: num("cut_at_ns"),
            dropped: num("dropped") as usize,
            kept: num("kept") as usize,
            kept_blocks: list("kept_blocks"),
            dropped_blocks: list("dropped_blocks"),
            fields,
        }
    }

    /// A request counter (`writes`, `fsyncs`, `blocks_flushed`...).
    pub fn counter(&self, name: &str) -> u64 {
        self.fields
            .get(name)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no counter {name} in the report"))
    }
}

/// One `mirrorfs-cachedisk` process serving `image` as `mnt/disk`; unmounted (and the process
/// stopped) on drop. The power goes when `control` appears; the report is written to `report`
/// and the daemon's stderr to `log`.
pub struct CacheDisk {
    pub image: PathBuf,
    pub mnt: PathBuf,
    pub control: PathBuf,
    pub report: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
}

impl CacheDisk {
    /// Starts a disk on `image` (which exists) with `args` (`--seed N`, `--keep-fraction F`),
    /// mounted at `mnt` (made if missing). `control` must not exist (the disk refuses to start:
    /// it would cut at once) and `report` is removed first, so that a report read later is
    /// this run's.
    pub fn start(
        image: &Path,
        mnt: &Path,
        control: &Path,
        report: &Path,
        args: &[&str],
    ) -> CacheDisk {
        fs::create_dir_all(mnt).unwrap();
        let _ = fs::remove_file(report);
        let log = report.with_extension("log");
        let child = Command::new(cachedisk_bin())
            .args(args)
            .arg("--control")
            .arg(control)
            .arg("--report")
            .arg(report)
            .arg(image)
            .arg(mnt)
            .stdin(Stdio::null())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .expect("start mirrorfs-cachedisk");
        let mut d = CacheDisk {
            image: image.to_path_buf(),
            mnt: mnt.to_path_buf(),
            control: control.to_path_buf(),
            report: report.to_path_buf(),
            log,
            child: Some(child),
        };
        let mounted = wait_mounted(mnt, true, Duration::from_secs(10));
        if !mounted {
            let exited = d.child.as_mut().unwrap().try_wait().ok().flatten();
            panic!(
                "the cache disk did not mount {} (exited: {exited:?}): {}",
                mnt.display(),
                d.log_text()
            );
        }
        d
    }

    /// The served file: what a loop device is attached to.
    pub fn disk(&self) -> PathBuf {
        self.mnt.join("disk")
    }

    /// What the daemon printed so far.
    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for the report of the cut (written once the kept blocks are on the image).
    #[track_caller]
    pub fn wait_report(&self) -> CutReport {
        let ok = wait_for(Duration::from_secs(30), || self.report.exists());
        assert!(
            ok,
            "no cut report at {} after 30 s; the daemon said: {}",
            self.report.display(),
            self.log_text()
        );
        CutReport::parse(&fs::read_to_string(&self.report).unwrap())
    }

    /// Unmounts the disk and waits for the process to end (killed after 10 s). Whatever uses
    /// the file (a loop device) must be gone first, or the unmount is only lazy.
    pub fn stop(&mut self) {
        if is_mounted(&self.mnt) {
            if let Err(e) = unmount_path(&self.mnt) {
                eprintln!("warning: {e}");
            }
        }
        if let Some(mut c) = self.child.take() {
            if !end_child(&mut c, Duration::from_secs(10)) {
                eprintln!(
                    "warning: the cache disk at {} had to be killed",
                    self.mnt.display()
                );
            }
        }
    }
}

impl Drop for CacheDisk {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Makes ext4 on `dev` as the power-cut tests want it: 4 KiB blocks (a block of the file
/// system is a block of the cache disk) and the inode tables and journal zeroed now, not by
/// a background thread after the first mount.
#[track_caller]
pub fn mkfs_ext4(dev: &str) {
    let out = run(
        "mkfs.ext4",
        &[
            &"-q",
            &"-F",
            &"-b",
            &"4096",
            &"-E",
            &"lazy_itable_init=0,lazy_journal_init=0",
            &dev,
        ],
        Duration::from_secs(120),
    );
    assert!(
        out.status.success(),
        "mkfs.ext4 {dev}: {}",
        text(&out.stderr)
    );
}

/// A loop device over a file (buffered, as `losetup -f --show FILE` makes it); detached on
/// drop.
pub struct LoopDev {
    pub dev: String,
    attached: bool,
    /// `limit_dirty` was called: the limit is undone at the detach.
    limited: bool,
}

impl LoopDev {
    #[track_caller]
    pub fn attach(file: &Path) -> LoopDev {
        let out = run("losetup", &[&"-f", &"--show", &file], TOOL_TIMEOUT);
        assert!(
            out.status.success(),
            "losetup -f --show {}: {}",
            file.display(),
            text(&out.stderr)
        );
        LoopDev {
            dev: text(&out.stdout).trim().to_string(),
            attached: true,
            limited: false,
        }
    }

    /// The device's writeback settings in /sys/class/bdi. They belong to the loop device, not
    /// to what is attached to it, and outlive the detach: every later user of `loopN` would
    /// inherit them.
    fn bdi_dir(&self) -> PathBuf {
        let link = format!("/sys/block/{}/bdi", self.name());
        let bdi = fs::read_link(&link).unwrap_or_else(|e| panic!("{link}: {e}"));
        Path::new("/sys/class/bdi").join(bdi.file_name().unwrap())
    }

    /// Lets the device hold at most `bytes` of dirty pages (its own writeback limit, no global
    /// setting), until the detach puts the kernel's defaults back.
    pub fn limit_dirty(&mut self, bytes: u64) {
        let dir = self.bdi_dir();
        self.limited = true;
        for (k, v) in [
            ("strict_limit", "1".to_string()),
            ("max_bytes", bytes.to_string()),
        ] {
            fs::write(dir.join(k), v).unwrap_or_else(|e| panic!("{}/{k}: {e}", dir.display()));
        }
    }

    /// `loopN`, for /sys/block.
    pub fn name(&self) -> &str {
        self.dev.trim_start_matches("/dev/")
    }

    /// Detaches the device and waits (up to 20 s) until the kernel has let go of its file:
    /// `losetup -d` only asks for it, and the release can wait for I/O still failing on a disk
    /// whose power was cut; the disk's unmount after it would be busy.
    pub fn detach(&mut self) {
        if self.limited {
            // The kernel's defaults: no strict limit, the whole of the dirty memory.
            self.limited = false;
            let dir = self.bdi_dir();
            for (k, v) in [("strict_limit", "0"), ("max_ratio", "100")] {
                if let Err(e) = fs::write(dir.join(k), v) {
                    eprintln!("warning: {}/{k}: {e}", dir.display());
                }
            }
        }
        if self.attached {
            self.attached = false;
            let out = run("losetup", &[&"-d", &self.dev], TOOL_TIMEOUT);
            if !out.status.success() {
                eprintln!("warning: losetup -d {}: {}", self.dev, text(&out.stderr));
            }
            let backing = format!("/sys/block/{}/loop/backing_file", self.name());
            if !wait_for(Duration::from_secs(20), || !Path::new(&backing).exists()) {
                eprintln!(
                    "warning: {} still holds its file 20 s after losetup -d",
                    self.dev
                );
            }
        }
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        self.detach();
    }
}

/// A filesystem mounted for a test; unmounted on drop (lazily when it is busy or its device
/// is dead).
pub struct MountGuard {
    pub path: PathBuf,
    mounted: bool,
}

impl MountGuard {
    /// `mount -o OPTS DEV PATH` (PATH made if missing).
    #[track_caller]
    pub fn mount(dev: &str, path: &Path, opts: &str) -> MountGuard {
        fs::create_dir_all(path).unwrap();
        let out = run("mount", &[&"-o", &opts, &dev, &path], TOOL_TIMEOUT);
        assert!(
            out.status.success(),
            "mount -o {opts} {dev} {}: {}",
            path.display(),
            text(&out.stderr)
        );
        MountGuard {
            path: path.to_path_buf(),
            mounted: true,
        }
    }

    pub fn unmount(&mut self) -> Result<(), String> {
        if !self.mounted {
            return Ok(());
        }
        self.mounted = false;
        unmount_path(&self.path)
    }
}

impl Drop for MountGuard {
    fn drop(&mut self) {
        if let Err(e) = self.unmount() {
            eprintln!("warning: {e}");
        }
    }
}
