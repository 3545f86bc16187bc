//! sysinfo in the statistics (issue 14, item 12): the daemon's own memory, CPU time and threads,
//! and the disk under each leg (its filesystem, device, kind, model where sysfs has one, size
//! and free space), in the document and in `mirrorfs status`; a leg on its own tmpfs is told
//! apart from one on the root filesystem.

#[macro_use]
mod common;

use common::*;
use std::fs;

#[test]
fn daemon_and_disks_in_stats_and_status() {
    require_fuse!();
    let mut dirs = TestDirs::new(2);
    dirs.mount_tmpfs_leg(1, "64m");
    let m = TestMirror::new(2).with_dirs(dirs).mount();
    fs::write(m.path("f"), pattern(MIB, 3)).unwrap();
    let (_, st, v) = stats_of(&m.mnt().join(".mirrorfs"));

    let d = st.daemon.clone().expect("daemon figures");
    assert!(d.memory_bytes > 1 << 20, "{d:?}");
    assert!(d.virtual_memory_bytes >= d.memory_bytes, "{d:?}");
    // Its threads: at least the FUSE workers (threads=8) and the legs' I/O workers.
    assert!(d.threads.is_some_and(|t| t >= 8 + 2 * 8), "{d:?}");
    // The process is the daemon: its resident set is what /proc says of that pid.
    let proc_status = fs::read_to_string(format!("/proc/{}/status", st.pid)).unwrap();
    let rss_kib: u64 = proc_status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap();
    let ratio = d.memory_bytes as f64 / (rss_kib * 1024) as f64;
    assert!((0.5..2.0).contains(&ratio), "{d:?} vs VmRSS {rss_kib} KiB");
    assert!(v["daemon"]["cpu_us"].is_u64());

    // leg0 lives on the filesystem of the temp dir; leg1 on its own 64 MiB tmpfs.
    let fs_of_tmp = mount_entries()
        .into_iter()
        .filter(|e| m.leg(0).starts_with(&e.mount_point))
        .max_by_key(|e| e.mount_point.as_os_str().len())
        .unwrap();
    let d0 = st.legs[0].disk.clone().expect("leg0's disk");
    assert_eq!(d0.filesystem, fs_of_tmp.fstype, "{d0:?}");
    assert_eq!(d0.mount_point, path_str(&fs_of_tmp.mount_point), "{d0:?}");
    let d1 = st.legs[1].disk.clone().expect("leg1's disk");
    assert_eq!(
        (
            d1.filesystem.as_str(),
            d1.mount_point.as_str(),
            d1.kind.as_str()
        ),
        ("tmpfs", path_str(m.leg(1)).as_str(), "unknown"),
        "{d1:?}"
    );
    assert_eq!(st.legs[1].size_bytes, Some(64 << 20));
    let free = st.legs[1].free_bytes.unwrap();
    assert!(
        free <= (63 << 20) && free > (32 << 20),
        "free {free} after 1 MiB written"
    );
    for l in &st.legs {
        let disk = l.disk.as_ref().unwrap();
        assert!(
            ["ssd", "hdd", "unknown"].contains(&disk.kind.as_str()),
            "{disk:?}"
        );
        if let Some(model) = &disk.model {
            assert!(!model.is_empty() && !model.contains('\n'));
        }
    }

    let (code, report) = status(m.mnt());
    assert_eq!(code, Some(0), "{report}");
    let daemon_line = report
        .lines()
        .find(|l| l.trim_start().starts_with("daemon:"))
        .unwrap_or_else(|| panic!("no daemon line:\n{report}"));
    assert!(
        daemon_line.contains("resident") && daemon_line.contains("CPU"),
        "{daemon_line}"
    );
    let disks = report
        .split("disks:")
        .nth(1)
        .unwrap_or_else(|| panic!("{report}"));
    let leg1 = disks
        .lines()
        .find(|l| l.trim_start().starts_with("leg1 "))
        .unwrap_or_else(|| panic!("{report}"));
    assert!(
        leg1.contains("free of 64M") && leg1.contains("tmpfs on tmpfs"),
        "{leg1}"
    );
    m.finish();
}
