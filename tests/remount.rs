//! Unmount and mount again: the data is still there, the legs (now carrying `.mirrorfs`) are
//! accepted as the same mirror, and the mirror keeps working.

#[macro_use]
mod common;

use common::*;
use std::fs;
use std::os::unix::fs::symlink;

legs_test!(remount_keeps_everything);

fn remount_keeps_everything(n: usize) {
    require_fuse!();
    let mut m = TestMirror::new(n).mount();
    fs::create_dir_all(m.path("d/e")).unwrap();
    fs::write(m.path("d/f"), pattern(200_000, 1)).unwrap();
    fs::hard_link(m.path("d/f"), m.path("d/e/f2")).unwrap();
    symlink("d/f", m.path("s")).unwrap();
    set_xattr(m.path("d/f"), "user.k", b"v", 0).unwrap();
    chmod(m.path("d/e"), 0o2750).unwrap();
    chown(m.path("d/f"), 1000, 100).unwrap();
    let before: Vec<_> = ["d", "d/e", "d/f", "d/e/f2", "s"]
        .iter()
        .map(|r| {
            let st = lstat_ok(m.path(r));
            (
                r.to_string(),
                st.st_mode,
                st.st_uid,
                st.st_gid,
                st.st_size,
                st.st_nlink,
            )
        })
        .collect();
    m.check_and_unmount();

    // Mount the same legs again.
    for round in 0..2 {
        let args = vec![legs_arg(m.legs()).into(), m.mnt().as_os_str().to_owned()];
        let out = run_mirrorfs(&args);
        assert!(
            out.status.success(),
            "remount #{round} of the same legs failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let pids = daemon_pids(m.mnt());
        let mnt = m.mnt().to_path_buf();
        let legs = m.legs().to_vec();
        let r = std::panic::catch_unwind(|| {
            for (rel, mode, uid, gid, size, nlink) in &before {
                let st = lstat_ok(mnt.join(rel));
                assert_eq!(
                    (st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_nlink),
                    (*mode, *uid, *gid, *size, *nlink),
                    "attributes of {rel} after remount #{round}"
                );
            }
            assert_bytes_eq(
                &fs::read(mnt.join("d/e/f2")).unwrap(),
                &pattern(200_000, 1),
                "d/e/f2 after remount",
            );
            assert_eq!(
                lstat_ok(mnt.join("d/f")).st_ino,
                lstat_ok(mnt.join("d/e/f2")).st_ino,
                "hard link is one inode after remount"
            );
            assert_eq!(get_xattr(mnt.join("d/f"), "user.k").unwrap(), b"v");
            assert_eq!(fs::read_link(mnt.join("s")).unwrap().as_os_str(), "d/f");
            assert_no_mirrorfs_leak(&mnt);
            // Keeps working.
            fs::write(mnt.join(format!("new{round}")), b"after remount").unwrap();
            assert_content_on_legs(&legs, &format!("new{round}"), b"after remount");
            assert_legs_identical(&legs);
        });
        let _ = unmount_path(m.mnt());
        assert!(
            wait_pids_gone(&pids, std::time::Duration::from_secs(10)),
            "daemon still running after umount"
        );
        if let Err(e) = r {
            std::panic::resume_unwind(e);
        }
        assert_legs_identical(m.legs());
    }
}
