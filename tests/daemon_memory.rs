//! The daemon's memory follows what the kernel holds, not every entry it has ever seen
//! (issue 12: "a tree of a million entries must not grow the daemon without bound"). The
//! kernel keeps an inode of a FUSE mount (and the daemon keeps its side of it) until memory
//! is short or caches are dropped; once it lets go, the daemon must give the memory back.

mod common;

use common::control::stats_of;
use common::*;
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

/// Entries in the tree: more than the inode numbers the daemon remembers (65,536), so that
/// what it keeps by design is a small part of what the walk made it hold.
const DIRS: usize = 100;
const PER_DIR: usize = 1000;

fn rss_kib(pid: i32) -> u64 {
    let s = fs::read_to_string(format!("/proc/{pid}/status")).expect("the daemon's status");
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

fn live_inodes(mnt: &Path) -> u64 {
    stats_of(&mnt.join(".mirrorfs")).2["daemon"]["live_inodes"]
        .as_u64()
        .expect("daemon.live_inodes")
}

/// `DIRS` directories of `PER_DIR` empty files under `root`.
fn populate(root: &Path) {
    sh_ok(&format!(
        "cd {} && for d in $(seq {DIRS}); do mkdir d$d && (cd d$d && seq -f f%.0f {PER_DIR} | xargs touch); done",
        shq(root)
    ));
}

#[test]
fn memory_is_given_back_once_the_kernel_forgets_a_large_tree() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, mnt) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("mnt"),
    );
    for d in [&a, &b, &mnt] {
        fs::create_dir(d).unwrap();
    }
    let legs = vec![a.clone(), b.clone()];
    // The tree is made on both legs alike while unmounted (a walk holds the same inodes as
    // creating it through the mount would, in a fraction of the time).
    let mut m = mount_ok(&legs, &mnt, &[]);
    fs::create_dir(mnt.join("t")).unwrap();
    m.unmount();
    populate(&a.join("t"));
    populate(&b.join("t"));

    let m = mount_ok(&legs, &mnt, &[]);
    let pid = m.pids()[0];
    let base = rss_kib(pid);
    let n = sh_ok(&format!(
        "find {} -printf '%p %s\\n' | wc -l",
        shq(mnt.join("t"))
    ));
    assert!(n.trim().parse::<usize>().unwrap() > DIRS * PER_DIR);
    let peak = rss_kib(pid);
    let held = live_inodes(&mnt);
    eprintln!("RSS {base} KiB mounted, {peak} KiB holding {held} inodes");
    assert!(held as usize > DIRS * PER_DIR, "the kernel holds the tree");
    assert!(
        peak > base + 32 * 1024,
        "holding the tree grew the daemon (the measure sees something): {base} -> {peak} KiB"
    );

    sh_ok("sync");
    fs::write("/proc/sys/vm/drop_caches", "3").expect("drop caches (root)");
    let start = Instant::now();
    while live_inodes(&mnt) > 100 && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(live_inodes(&mnt) <= 100, "the kernel forgot the tree");
    // The memory goes back on a thread of its own: wait for it.
    let target = base + (peak - base) / 2;
    let start = Instant::now();
    let mut now = rss_kib(pid);
    while now > target && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(200));
        now = rss_kib(pid);
    }
    eprintln!("RSS {now} KiB once the kernel forgot the tree (want at most {target})");
    assert!(
        now <= target,
        "the daemon kept its peak memory after the kernel forgot every inode: \
         {base} KiB mounted, {peak} KiB at the peak, {now} KiB after"
    );
}
