//! An ext4 filesystem in an image file on a loop device, as a leg: it can really turn
//! read-only (`errors=remount-ro` and ext4's error injection), and its blocks can be changed
//! under the filesystem through the device (silent rot).

use super::*;
use std::fs::{self, File};
use std::path::PathBuf;
use std::time::Duration;

/// An ext4 filesystem in an image file, loop-mounted with `errors=remount-ro`: a leg that can
/// really turn read-only while files on it are open for writing. (A tmpfs cannot: `mount -o
/// remount,ro` fails with EBUSY as long as any file on it is open for writing, and mirrorfs
/// holds the leg's copy of fio's file open all along.) Unmounted on drop; the loop device goes
/// with it (`mount -o loop` sets autoclear).
pub struct Ext4Leg {
    _tmp: tempfile::TempDir,
    pub img: PathBuf,
    pub mnt: PathBuf,
    pub dev: String,
    mounted: bool,
}

impl Ext4Leg {
    pub fn new(size: u64) -> Ext4Leg {
        let tmp = tempfile::Builder::new()
            .prefix("mirrorfs-ext4-")
            .tempdir()
            .unwrap();
        let img = tmp.path().join("leg.img");
        File::create(&img).unwrap().set_len(size).unwrap();
        sh_ok(&format!("mkfs.ext4 -q -F {}", shq(&img)));
        let mnt = tmp.path().join("mnt");
        fs::create_dir(&mnt).unwrap();
        let mut leg = Ext4Leg {
            _tmp: tmp,
            img,
            mnt,
            dev: String::new(),
            mounted: false,
        };
        leg.mount();
        chmod(&leg.mnt, 0o755).unwrap();
        leg
    }

    pub fn mount(&mut self) {
        let out = run(
            "mount",
            &[&"-o", &"loop,errors=remount-ro", &self.img, &self.mnt],
            Duration::from_secs(60),
        );
        assert!(
            out.status.success(),
            "loop-mounting an ext4 image: {}",
            text(&out.stderr)
        );
        self.mounted = true;
        self.dev = mount_entry_at(&self.mnt)
            .expect("the ext4 leg is mounted")
            .source
            .to_string_lossy()
            .trim_start_matches("/dev/")
            .to_string();
    }

    /// Makes ext4 record an error: with `errors=remount-ro` it turns read-only at once, open
    /// files included (later writes fail with EROFS).
    pub fn go_read_only(&self) {
        let knob = format!("/sys/fs/ext4/{}/trigger_fs_error", self.dev);
        fs::write(&knob, "mirrorfs test: the leg goes read-only")
            .unwrap_or_else(|e| panic!("write {knob}: {e}"));
    }

    /// What an administrator does with a filesystem that went read-only after an error:
    /// unmount it, `e2fsck -fy`, mount it again at the same place (read-write).
    #[track_caller]
    pub fn repair_and_remount(&mut self) {
        if let Err(e) = unmount_path(&self.mnt) {
            panic!("{e}");
        }
        self.mounted = false;
        let out = run("e2fsck", &[&"-fy", &self.img], Duration::from_secs(120));
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "e2fsck -fy of the ext4 leg ({}): {}{}",
            out.status,
            text(&out.stdout),
            text(&out.stderr)
        );
        self.mount();
        let probe = self.mnt.join("probe");
        fs::write(&probe, b"rw").expect("the repaired ext4 leg takes writes");
        fs::remove_file(&probe).unwrap();
    }
}

impl Drop for Ext4Leg {
    fn drop(&mut self) {
        if self.mounted {
            if let Err(e) = unmount_path(&self.mnt) {
                eprintln!("warning: {e}");
            }
        }
    }
}
