//! Mounting through fstab and the stock mount helper: `mount -T FILE MNT` runs
//! `/sbin/mount.fuse3`, which runs `mirrorfs LEG0:LEG1 MNT -o OPTS` through /bin/sh with PATH
//! cleared, so the binary is installed as /usr/local/sbin/mirrorfs first.

#[macro_use]
mod common;

use common::*;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const INSTALLED: &str = "/usr/local/sbin/mirrorfs";

/// Copy the freshly built binary to /usr/local/sbin (atomically: a running daemon keeps its
/// old file).
fn install_binary() {
    let tmp = format!("{INSTALLED}.test-{}", std::process::id());
    fs::create_dir_all("/usr/local/sbin").unwrap();
    fs::copy(mirrorfs_bin(), &tmp).expect("copy mirrorfs to /usr/local/sbin");
    chmod(&tmp, 0o755).unwrap();
    fs::rename(&tmp, INSTALLED).expect("install /usr/local/sbin/mirrorfs");
}

/// Lazily unmounts whatever is left on drop.
struct UnmountOnDrop<'a>(&'a Path);

impl Drop for UnmountOnDrop<'_> {
    fn drop(&mut self) {
        if is_mounted(self.0) {
            let _ = umount2(self.0, libc::MNT_DETACH);
        }
    }
}

fn helper_available() -> bool {
    if Path::new("/sbin/mount.fuse3").exists() || Path::new("/sbin/mount.fuse").exists() {
        return true;
    }
    cannot_run("needs /sbin/mount.fuse3 (apt-get install fuse3)");
    false
}

#[test]
fn fstab_line_mounts_through_mount_helper() {
    require_fuse!();
    if !helper_available() {
        return;
    }
    install_binary();
    let d = TestDirs::new(2);
    let _guard = UnmountOnDrop(&d.mnt);
    let fstab = d.root().join("fstab");
    fs::write(
        &fstab,
        format!(
            "# test fstab\n{} {} fuse.mirrorfs allow_other,nofail 0 0\n",
            d.legs_arg(),
            d.mnt.display()
        ),
    )
    .unwrap();

    let out = run_timeout(
        Command::new("mount").arg("-T").arg(&fstab).arg(&d.mnt),
        Duration::from_secs(30),
    );
    assert!(
        out.status.success(),
        "mount -T {} {}: {}\nstderr: {}\nstdout: {}",
        fstab.display(),
        d.mnt.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    let entry = mount_entry_at(&d.mnt).expect("the fstab mount is not in /proc/self/mountinfo");
    assert!(
        entry.fstype.starts_with("fuse"),
        "fstype of the fstab mount: {:?}",
        entry.fstype
    );
    assert!(
        entry.super_options.contains("allow_other"),
        "allow_other from fstab is not in effect: {:?}",
        entry.super_options
    );
    let pids = daemon_pids(&d.mnt);
    assert!(
        !pids.is_empty(),
        "no running mirrorfs process for {}",
        d.mnt.display()
    );

    fs::write(
        d.mnt.join("via-fstab"),
        b"written through the fstab mount\n",
    )
    .unwrap();
    assert_content_on_legs(&d.legs, "via-fstab", b"written through the fstab mount\n");
    assert_no_mirrorfs_leak(&d.mnt);

    let out = run_timeout(Command::new("umount").arg(&d.mnt), Duration::from_secs(30));
    assert!(
        out.status.success(),
        "umount {}: {}",
        d.mnt.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !is_mounted(&d.mnt),
        "{} still in /proc/self/mountinfo after umount",
        d.mnt.display()
    );
    assert!(
        wait_pids_gone(&pids, Duration::from_secs(10)),
        "mirrorfs daemon {pids:?} still running 10 s after umount"
    );
    assert!(
        daemon_pids(&d.mnt).is_empty(),
        "a mirrorfs process for {} is still running",
        d.mnt.display()
    );
    assert_legs_identical(&d.legs);
}
