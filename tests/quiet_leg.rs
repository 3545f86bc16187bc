//! A quiet leg (`PATH=quiet`, issue 13): lookups, listings, attribute reads and data reads
//! leave it alone while another in-sync leg can answer, so its disk sees only writes. Both
//! legs are ext4 on loop devices, and the quiet one's reads are counted by its block device
//! (`/sys/block/loopN/stat`).

mod common;

use common::ext4::Ext4Leg;
use common::*;
use std::fs;
use std::path::{Path, PathBuf};

const DIRS: usize = 100;
const FILES: usize = 99;

/// (read I/Os, write I/Os) of block device `dev` since boot.
fn io_counts(dev: &str) -> (u64, u64) {
    let s = fs::read_to_string(format!("/sys/block/{dev}/stat"))
        .unwrap_or_else(|e| panic!("/sys/block/{dev}/stat: {e}"));
    let f: Vec<u64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();
    (f[0], f[4])
}

fn drop_caches() {
    sh_ok("sync");
    fs::write("/proc/sys/vm/drop_caches", "3").expect("drop caches (root)");
}

/// What users do to a tree without changing it: list it, walk it, stat every entry, read every
/// file.
fn browse(mnt: &Path) {
    let m = shq(mnt);
    sh_ok(&format!("ls -lR {m} > /dev/null"));
    sh_ok(&format!("find {m} -printf '%p %s %m\\n' > /dev/null"));
    sh_ok(&format!("find {m} -exec stat {{}} + > /dev/null"));
    let out = sh_ok(&format!("find {m} -type f -exec cat {{}} + | wc -c"));
    assert!(
        out.trim().parse::<u64>().unwrap() > 0,
        "the files were read"
    );
}

/// 100 directories of 99 files, with contents.
fn make_tree(mnt: &Path) {
    for d in 0..DIRS {
        let dir = mnt.join(format!("d{d:03}"));
        fs::create_dir(&dir).unwrap();
        for f in 0..FILES {
            fs::write(
                dir.join(format!("f{f:02}")),
                format!("file {d}/{f}\n").repeat(f + 1),
            )
            .unwrap();
        }
    }
}

/// The legs' trees (paths, types, modes, sizes and contents), without mirrorfs's own
/// directory and ext4's lost+found, are the same.
fn assert_legs_identical(a: &Path, b: &Path) {
    let list = |p: &Path| {
        sh_ok(&format!(
            "cd {} && find . -path ./.mirrorfs -prune -o -path ./lost+found -prune -o \
             -printf '%p %y %m %s\\n' | sort && \
             find . -path ./.mirrorfs -prune -o -path ./lost+found -prune -o -type f -print0 \
             | sort -z | xargs -0 md5sum",
            shq(p)
        ))
    };
    let (la, lb) = (list(a), list(b));
    assert!(la.len() > 100_000, "the listing holds the tree");
    assert!(la == lb, "the legs differ");
}

#[test]
fn a_quiet_leg_sees_only_writes() {
    require_fuse!();
    let a = Ext4Leg::new(1 << 30);
    let b = Ext4Leg::new(1 << 30);
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let plain: Vec<PathBuf> = vec![a.mnt.clone(), b.mnt.clone()];
    let quiet: Vec<PathBuf> = vec![
        a.mnt.clone(),
        PathBuf::from(format!("{}=quiet", b.mnt.display())),
    ];

    let mut m = mount_ok(&plain, &mnt, &[]);
    make_tree(&mnt);
    m.unmount();

    // Without the attribute, a cold walk reads both legs (the measure sees what it should).
    let mut m = mount_ok(&plain, &mnt, &[]);
    drop_caches();
    let before = io_counts(&b.dev);
    browse(&mnt);
    let plain_reads = io_counts(&b.dev).0 - before.0;
    assert!(plain_reads > 0, "a cold walk of a plain mount reads leg 1");
    m.unmount();

    let mut m = mount_ok(&quiet, &mnt, &[]);
    let status = sh_ok(&format!("{} status {}", shq(mirrorfs_bin()), shq(&mnt)));
    assert!(
        status.contains("(quiet)"),
        "status names the quiet leg: {status}"
    );
    for pass in ["cold", "warm"] {
        if pass == "cold" {
            drop_caches();
        }
        let (a0, b0) = (io_counts(&a.dev), io_counts(&b.dev));
        browse(&mnt);
        let (a1, b1) = (io_counts(&a.dev), io_counts(&b.dev));
        eprintln!(
            "{pass}: reads on leg 0: {}, on the quiet leg: {} (plain mount, cold: {plain_reads})",
            a1.0 - a0.0,
            b1.0 - b0.0
        );
        if pass == "cold" {
            assert!(a1.0 > a0.0, "the cold walk read leg 0");
        }
        assert_eq!(
            b1.0 - b0.0,
            0,
            "{pass} walk: reads on the quiet leg's device"
        );
    }

    // Writes reach it: a new file, a change to a file only looked up so far, a rename and a
    // removal of entries the quiet leg has not been asked about.
    let (_, w0) = io_counts(&b.dev);
    fs::write(mnt.join("d000/new"), b"new file\n").unwrap();
    fs::write(mnt.join("d001/f05"), b"rewritten\n").unwrap();
    fs::rename(mnt.join("d002"), mnt.join("d002-moved")).unwrap();
    fs::write(mnt.join("d002-moved/f01"), b"written after the move\n").unwrap();
    fs::remove_file(mnt.join("d003/f00")).unwrap();
    sh_ok(&format!("sync -f {}", shq(&mnt)));
    sh_ok("sync");
    let (_, w1) = io_counts(&b.dev);
    assert!(w1 > w0, "the writes reached the quiet leg's device");
    assert_eq!(fs::read(b.mnt.join("d001/f05")).unwrap(), b"rewritten\n");
    assert_eq!(
        fs::read(b.mnt.join("d002-moved/f01")).unwrap(),
        b"written after the move\n"
    );
    assert!(!b.mnt.join("d003/f00").exists());
    m.unmount();
    assert_legs_identical(&a.mnt, &b.mnt);
}
