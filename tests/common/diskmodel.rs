//! Legs on the disk model (`diskmodel/`, the `mirrorfs-diskmodel` binary): a directory served
//! through FUSE as if it sat on one disk, a remote link, a hanging or a failing device.

use super::*;

/// The disk model's binary, beside mirrorfs's (`make test-unit` builds it before the tests; a
/// bare `cargo test` does not). A test that cannot find it fails, saying how to build it.
pub fn diskmodel_bin() -> PathBuf {
    let dir = Path::new(mirrorfs_bin()).parent().unwrap().to_path_buf();
    let bin = dir.join("mirrorfs-diskmodel");
    assert!(
        bin.is_file(),
        "{} is missing: build it with `cargo build -p mirrorfs-diskmodel` (make test does)",
        bin.display()
    );
    bin
}

/// One directory served by the disk model; unmounted (and the model stopped) on drop.
pub struct ModelLeg {
    _tmp: tempfile::TempDir,
    pub src: PathBuf,
    pub mnt: PathBuf,
    /// While this file exists, every request to the model waits.
    pub hang_file: PathBuf,
    /// While this file exists, every request fails with EIO.
    pub fail_file: PathBuf,
    child: Option<Child>,
}

impl ModelLeg {
    /// A model with these arguments (`--disk hdd`, `--latency-us N`).
    pub fn new(args: &[&str]) -> ModelLeg {
        let tmp = tempfile::Builder::new()
            .prefix("mirrorfs-model-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let src = tmp.path().join("src");
        let mnt = tmp.path().join("mnt");
        fs::create_dir(&src).unwrap();
        fs::create_dir(&mnt).unwrap();
        let hang_file = tmp.path().join("hang");
        let fail_file = tmp.path().join("fail");
        let child = Command::new(diskmodel_bin())
            .args(args)
            .arg("--hang-file")
            .arg(&hang_file)
            .arg("--fail-file")
            .arg(&fail_file)
            .arg(&src)
            .arg(&mnt)
            .stdin(Stdio::null())
            .spawn()
            .expect("start mirrorfs-diskmodel");
        assert!(
            wait_mounted(&mnt, true, Duration::from_secs(10)),
            "the disk model did not mount {}",
            mnt.display()
        );
        ModelLeg {
            _tmp: tmp,
            src,
            mnt,
            hang_file,
            fail_file,
            child: Some(child),
        }
    }

    /// The leg as mirrorfs's leg list names it, with attributes (`rot`).
    pub fn leg(&self, attrs: &str) -> PathBuf {
        if attrs.is_empty() {
            self.mnt.clone()
        } else {
            PathBuf::from(format!("{}={attrs}", self.mnt.display()))
        }
    }
}

impl Drop for ModelLeg {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.hang_file);
        let _ = fs::remove_file(&self.fail_file);
        if let Err(e) = unmount_path(&self.mnt) {
            eprintln!("warning: {e}");
            let _ = umount2(&self.mnt, libc::MNT_DETACH);
        }
        if let Some(mut c) = self.child.take() {
            end_child(&mut c, Duration::from_secs(5));
        }
    }
}
