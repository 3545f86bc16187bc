//! The disk with a volatile write cache (`mirrorfs-cachedisk`, issue 26): it loses data the
//! way a power cut does.
//!
//! - A write reaches the daemon when it is made (the file is served with direct I/O), stays in
//!   its cache and reaches the image only with an fsync of the file; a close is no flush;
//!   after the cut every request fails with EIO.
//! - The control test: ext4 on a loop device over the disk. Files fsynced (with their
//!   directories) before the cut are there afterwards, whole; an overwrite pushed to the
//!   disk without a flush (`sync_file_range`) and files created after the last fsync are
//!   lost; the image after the cut is the image of the last flush, block for block; and
//!   ext4 comes back consistent (`e2fsck -fn` finds nothing). A disk that never dropped
//!   anything fails it: the overwrite would be there. The same with keep-fraction 0.5 (what
//!   the power-cut test of mirrorfs will use): the image changed only at the kept blocks, the
//!   overwrite torn exactly there, the fsynced files whole, ext4 consistent.
//! - Two disks cut by one control file at the same instant, keep-fraction 0.5: different
//!   seeds keep different blocks, the same seed the same blocks, and the report names them.

mod common;

use common::*;
use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const BLOCK: u64 = 4096;

/// A private directory under /var/tmp (a real filesystem, where the images can be sparse).
fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("mirrorfs-cachedisk-")
        .tempdir_in("/var/tmp")
        .unwrap()
}

/// Block `b` of a file as it is on the host (for an image: what survived).
fn block_of(path: &Path, b: u64) -> Vec<u8> {
    let f = File::open(path).unwrap();
    let mut buf = vec![0u8; BLOCK as usize];
    f.read_exact_at(&mut buf, b * BLOCK).unwrap();
    buf
}

/// Block `b` of the image holds `want`.
#[track_caller]
fn assert_block(image: &Path, b: u64, want: &[u8], what: &str) {
    assert_bytes_eq(
        &block_of(image, b),
        want,
        &format!("image block {b}: {what}"),
    );
}

fn read_at(f: &File, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    f.read_exact_at(&mut buf, offset)?;
    Ok(buf)
}

fn open_rw(p: &Path) -> std::io::Result<File> {
    OpenOptions::new().read(true).write(true).open(p)
}

#[test]
fn a_write_reaches_the_daemon_at_once_and_only_fsync_writes_the_image() {
    require_fuse!();
    let tmp = scratch();
    let image = tmp.path().join("img");
    let control = tmp.path().join("cut");
    let report = tmp.path().join("disk.report");
    let mnt = tmp.path().join("mnt");
    make_image(&image, 64 * BLOCK);
    let zeros = vec![0u8; BLOCK as usize];
    let data: Vec<Vec<u8>> = (0..8).map(|i| pattern(BLOCK as usize, 100 + i)).collect();

    let mut d = CacheDisk::start(&image, &mnt, &control, &report, &[]);
    assert_eq!(fs::metadata(d.disk()).unwrap().len(), 64 * BLOCK);
    let f = open_rw(&d.disk()).unwrap();
    f.write_all_at(&data[0], 0).unwrap();
    assert_bytes_eq(
        &read_at(&f, 0, 4096).unwrap(),
        &data[0],
        "read back from the cache",
    );
    assert_block(&image, 0, &zeros, "the image before any fsync");
    f.sync_all().unwrap();
    assert_block(&image, 0, &data[0], "fsync writes the image");

    // A close (FLUSH) is not a flush of the disk's cache; a new open reads the cache.
    f.write_all_at(&data[1], BLOCK).unwrap();
    drop(f);
    assert_block(&image, 1, &zeros, "close wrote the image");
    let f = open_rw(&d.disk()).unwrap();
    assert_bytes_eq(&read_at(&f, BLOCK, 4096).unwrap(), &data[1], "a new open");
    // fdatasync flushes as fsync does, and a write across two blocks, not aligned, keeps the
    // bytes around it.
    f.write_all_at(&data[2], 2 * BLOCK).unwrap();
    f.write_all_at(b"0123456789", 3 * BLOCK - 5).unwrap();
    f.sync_data().unwrap();
    assert_block(&image, 1, &data[1], "after fdatasync");
    let mut want2 = data[2].clone();
    want2[4091..].copy_from_slice(b"01234");
    assert_block(&image, 2, &want2, "after fdatasync");
    let mut want3 = zeros.clone();
    want3[..5].copy_from_slice(b"56789");
    assert_block(&image, 3, &want3, "after fdatasync");

    // Written, never flushed, the file still open: lost with the power.
    f.write_all_at(&data[4], 4 * BLOCK).unwrap();
    cut_power(&control);
    let r = d.wait_report();
    assert_eq!((r.dropped, r.kept), (1, 0), "{r:?}");
    assert_eq!(r.dropped_blocks, [4]);
    assert_block(&image, 4, &zeros, "unflushed, then cut");
    assert_block(&image, 0, &data[0], "flushed, then cut");
    // The power is off: every request on the disk fails with EIO, the file stays visible.
    assert_errno(read_at(&f, 0, 4096), libc::EIO, "read after the cut");
    assert_errno(
        f.write_all_at(&data[5], 0),
        libc::EIO,
        "write after the cut",
    );
    assert_errno(f.sync_all(), libc::EIO, "fsync after the cut");
    assert_errno(open_rw(&d.disk()), libc::EIO, "open after the cut");
    assert_eq!(fs::metadata(d.disk()).unwrap().len(), 64 * BLOCK);
    drop(f);
    d.stop();
    assert_block(&image, 0, &data[0], "after the unmount");

    // The power comes back (a new process on the same image) with keep-fraction 1: a write
    // made with the file still open and no fsync survives the cut, so it was at the daemon
    // before the cut, not waiting in the kernel.
    fs::remove_file(&control).unwrap();
    let d = CacheDisk::start(&image, &mnt, &control, &report, &["--keep-fraction", "1"]);
    let f = open_rw(&d.disk()).unwrap();
    assert_bytes_eq(
        &read_at(&f, 0, 4096).unwrap(),
        &data[0],
        "block 0 after the power came back",
    );
    assert_bytes_eq(
        &read_at(&f, 4 * BLOCK, 4096).unwrap(),
        &zeros,
        "block 4 after the power came back",
    );
    f.write_all_at(&data[6], 6 * BLOCK).unwrap();
    cut_power(&control);
    let r = d.wait_report();
    assert_eq!((r.dropped, r.kept, r.kept_blocks.clone()), (0, 1, vec![6]));
    assert_eq!(r.counter("fsyncs"), 0);
    assert_block(&image, 6, &data[6], "unflushed, kept by the cut");
}

/// The physical block numbers of a file on a filesystem of 4 KiB blocks (FIBMAP, root):
/// the disk's block numbers, since the filesystem starts at the disk's first byte.
fn physical_blocks(path: &Path) -> Vec<u64> {
    // FIBMAP is _IO(0x00, 1); the libc crate does not name it.
    const FIBMAP: libc::c_ulong = 1;
    let f = File::open(path).unwrap();
    let n = f.metadata().unwrap().len().div_ceil(BLOCK);
    (0..n)
        .map(|i| {
            let mut b: libc::c_int = i as libc::c_int;
            let r = unsafe { libc::ioctl(f.as_raw_fd(), FIBMAP, &mut b) };
            assert_eq!(
                r,
                0,
                "FIBMAP {}: {}",
                path.display(),
                std::io::Error::last_os_error()
            );
            assert!(b != 0, "{} block {i} is not allocated", path.display());
            b as u64
        })
        .collect()
}

/// Writes the file's dirty pages to the disk and waits for them, without a flush of the disk's
/// cache and without a journal commit (what an fsync would add).
fn write_out_without_flush(f: &File) {
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    let r = unsafe { libc::sync_file_range(f.as_raw_fd(), 0, 0, flags) };
    assert_eq!(r, 0, "sync_file_range: {}", std::io::Error::last_os_error());
}

fn fsync_dir(p: &Path) {
    File::open(p).unwrap().sync_all().unwrap();
}

/// crc32c of every block of the image: what is on the medium.
fn image_blocks(image: &Path) -> Vec<u32> {
    let f = File::open(image).unwrap();
    let n = f.metadata().unwrap().len() / BLOCK;
    let mut buf = vec![0u8; MIB];
    let mut out = Vec::with_capacity(n as usize);
    for chunk in 0..n * BLOCK / MIB as u64 {
        f.read_exact_at(&mut buf, chunk * MIB as u64).unwrap();
        out.extend(buf.chunks(BLOCK as usize).map(crc32c::crc32c));
    }
    out
}

/// The FSYNCs the daemon's trace shows at or after `since_ns` (CLOCK_MONOTONIC).
fn fsyncs_since(log: &str, since_ns: u64) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains(" fsync "))
        .filter(|l| {
            l.split_whitespace()
                .nth(1)
                .and_then(|t| t.parse::<u64>().ok())
                .is_some_and(|t| t >= since_ns)
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn ext4_on_a_cut_disk_keeps_the_fsynced_files_and_loses_the_rest() {
    power_cut_under_ext4("0");
}

/// What part 2 puts under mirrorfs: a disk that wrote a random half of its cache before the
/// power went. ext4 must come back as consistent, with every fsynced file whole, and the
/// overwrite torn exactly at the blocks the disk kept.
#[test]
fn ext4_on_a_disk_that_kept_half_its_cache_keeps_the_fsynced_files() {
    power_cut_under_ext4("0.5");
}

/// ext4 on a cache disk with this keep fraction: fsynced files, then unflushed ones, the cut,
/// and the filesystem after the power comes back.
fn power_cut_under_ext4(keep: &str) {
    require_fuse!();
    require_tool!("losetup");
    require_tool!("mkfs.ext4");
    require_tool!("e2fsck");
    let started = Instant::now();
    let tmp = scratch();
    let image = tmp.path().join("img");
    let control = tmp.path().join("cut");
    make_image(&image, 256 * MIB as u64);

    // 1. The disk, a loop device over it, ext4. 4 KiB blocks, as the cache's (256 MiB would
    // get 1 KiB blocks by default); the inode tables and the journal zeroed by mkfs, so that
    // no lazy-init thread writes in the background; commit=600 so that no timer commits the
    // journal (and flushes the disk) behind the test's back: the only flushes are the
    // test's fsyncs.
    let mut disk = CacheDisk::start(
        &image,
        &tmp.path().join("mnt"),
        &control,
        &tmp.path().join("first.report"),
        &["--seed", "1", "--keep-fraction", keep, "--trace"],
    );
    let mut lo = LoopDev::attach(&disk.disk());
    mkfs_ext4(&lo.dev);
    let ext = tmp.path().join("ext");
    let mut fs4 = MountGuard::mount(&lo.dev, &ext, "commit=600");

    // 2. Files written and fsynced, with their directories: what a power cut must not take.
    fs::create_dir_all(ext.join("s")).unwrap();
    fs::create_dir_all(ext.join("deep/x")).unwrap();
    let synced: Vec<(&str, Vec<u8>)> = vec![
        ("s/empty", vec![]),
        ("s/small", pattern(100, 1)),
        ("s/odd", pattern(5000, 2)),
        ("s/big", pattern(MIB + 123, 3)),
        ("deep/x/y", pattern(64 * KIB, 4)),
    ];
    let old = pattern(256 * KIB, 10);
    let new = pattern(256 * KIB, 11);
    let t_synced = monotonic_ns();
    for (rel, data) in synced.iter().chain([("o", old.clone())].iter()) {
        let f = File::create(ext.join(rel)).unwrap();
        f.write_all_at(data, 0).unwrap();
        f.sync_all().unwrap();
    }
    for dir in ["s", "deep/x", "deep", ""] {
        fsync_dir(&ext.join(dir));
    }
    // The image now: nothing written after this may reach it.
    let t_last_flush = monotonic_ns();
    let flushed = image_blocks(&image);
    let log = disk.log_text();
    eprintln!(
        "6 files and 4 directories fsynced: {} FSYNCs reached the disk",
        fsyncs_since(&log, t_synced).len()
    );

    // 3. Written after the last flush: an overwrite of `o` in place and new files, their data
    // pushed to the disk (sync_file_range) without a flush; one more left in the page cache.
    let o = OpenOptions::new().write(true).open(ext.join("o")).unwrap();
    o.write_all_at(&new, 0).unwrap();
    write_out_without_flush(&o);
    fs::create_dir(ext.join("u")).unwrap();
    let o_blocks = physical_blocks(&ext.join("o"));
    let mut unsynced_blocks: BTreeSet<u64> = o_blocks.iter().copied().collect();
    for i in 0..4 {
        let p = ext.join(format!("u/n{i}"));
        let f = File::create(&p).unwrap();
        f.write_all_at(&pattern(64 * KIB, 20 + i), 0).unwrap();
        write_out_without_flush(&f);
        unsynced_blocks.extend(physical_blocks(&p));
    }
    fs::write(ext.join("late"), pattern(8 * KIB, 30)).unwrap();
    assert_eq!(fs::read(ext.join("o")).unwrap(), new, "before the cut");

    cut_power(&control);
    let r = disk.wait_report();
    eprintln!(
        "cut: dropped {} blocks, kept {}; {} writes and {} FSYNCs served before it",
        r.dropped,
        r.kept,
        r.counter("writes"),
        r.counter("fsyncs")
    );
    if keep == "0" {
        assert_eq!(r.kept, 0, "keep-fraction 0 keeps nothing");
    } else {
        assert!(r.kept > 0 && r.dropped > 0, "keep-fraction {keep}: {r:?}");
    }
    let kept: BTreeSet<u64> = r.kept_blocks.iter().copied().collect();
    let cached: BTreeSet<u64> = r
        .dropped_blocks
        .iter()
        .chain(&r.kept_blocks)
        .copied()
        .collect();
    let missing: Vec<u64> = unsynced_blocks.difference(&cached).copied().collect();
    assert!(
        missing.is_empty(),
        "blocks of the overwrite and of the new files that were not in the cache at the cut \
         (so they were flushed, or never reached the disk): {missing:?}"
    );

    // Tear down as after a power cut: ext4 and the loop device see I/O errors.
    drop(o);
    if let Err(e) = fs4.unmount() {
        eprintln!("the ext4 mount after the cut: {e}");
    }
    lo.detach();
    disk.stop();
    let log = disk.log_text();
    let late = fsyncs_since(&log, t_last_flush);
    assert!(
        late.iter().all(|l| l.contains("Input/output error")),
        "the disk was flushed after the test's last fsync, so the test's premise (nothing \
         after it reaches the image) does not hold: {late:#?}"
    );

    // 4. The image is the image of the last flush but for the blocks the cut kept.
    let after = image_blocks(&image);
    let changed: Vec<u64> = (0..after.len() as u64)
        .filter(|&b| after[b as usize] != flushed[b as usize] && !kept.contains(&b))
        .collect();
    assert!(
        changed.is_empty(),
        "{} blocks of the image that the cut did not keep changed after the last flush, \
         first {:?}",
        changed.len(),
        &changed[..changed.len().min(20)]
    );

    // 5. The power comes back: the same image, a new process, a new loop device; mounting
    // replays ext4's journal.
    fs::remove_file(&control).unwrap();
    let _disk = CacheDisk::start(
        &image,
        &tmp.path().join("mnt2"),
        &control,
        &tmp.path().join("second.report"),
        &[],
    );
    let mut lo = LoopDev::attach(&_disk.disk());
    let mut fs4 = MountGuard::mount(&lo.dev, &ext, "commit=600");
    for (rel, data) in &synced {
        let got = fs::read(ext.join(rel)).unwrap_or_else(|e| panic!("fsynced {rel}: {e}"));
        assert_bytes_eq(&got, data, &format!("fsynced {rel}"));
    }
    // Each 4 KiB of the overwrite is new where the disk kept that block, else old: with
    // keep-fraction 0, the old contents whole.
    let want: Vec<u8> = o_blocks
        .iter()
        .enumerate()
        .flat_map(|(i, b)| {
            let from = if kept.contains(b) { &new } else { &old };
            from[i * BLOCK as usize..(i + 1) * BLOCK as usize].to_vec()
        })
        .collect();
    let got = fs::read(ext.join("o")).unwrap();
    eprintln!(
        "o: {} of its {} blocks kept new by the cut",
        o_blocks.iter().filter(|b| kept.contains(b)).count(),
        o_blocks.len()
    );
    assert_bytes_eq(&got, &want, "o, overwritten and never flushed");
    for gone in ["u", "late"] {
        assert!(
            fs::symlink_metadata(ext.join(gone)).is_err(),
            "{gone}, made after the last flush, survived the cut"
        );
    }
    let names: BTreeSet<String> = fs::read_dir(&ext)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        ["deep", "lost+found", "o", "s"].map(String::from).into(),
        "the root after the cut"
    );
    fs4.unmount().unwrap();
    let fsck = run("e2fsck", &[&"-fn", &lo.dev], Duration::from_secs(120));
    assert_eq!(
        fsck.status.code(),
        Some(0),
        "e2fsck -fn after the cut and the journal's replay: {}{}",
        text(&fsck.stdout),
        text(&fsck.stderr)
    );
    lo.detach();
    eprintln!(
        "the control test (keep-fraction {keep}) took {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// Block i of the test's writes: 4 KiB of pattern i + 1000.
fn block_data(i: u64) -> Vec<u8> {
    pattern(BLOCK as usize, 1000 + i)
}

/// The blocks of `image` that hold what was written to them; every other block must still be
/// zeros (never flushed).
fn survivors(image: &Path, blocks: u64) -> Vec<u64> {
    let all = fs::read(image).unwrap();
    (0..blocks)
        .filter(|&b| {
            let got = &all[(b * BLOCK) as usize..((b + 1) * BLOCK) as usize];
            if got == block_data(b).as_slice() {
                return true;
            }
            assert!(
                got.iter().all(|&x| x == 0),
                "block {b} is neither old nor new"
            );
            false
        })
        .collect()
}

#[test]
fn two_disks_cut_at_once_keep_the_blocks_their_seeds_choose() {
    require_fuse!();
    const BLOCKS: u64 = 1024;
    let tmp = scratch();
    let control = tmp.path().join("cut");
    let data: Vec<u8> = (0..BLOCKS).flat_map(block_data).collect();

    // One round: two disks with these seeds on fresh images, the same writes to both (no
    // flush), one cut for both. Their reports, checked against their images.
    let round = |name: &str, seeds: [u64; 2]| -> [CutReport; 2] {
        let _ = fs::remove_file(&control);
        let disks: Vec<(CacheDisk, PathBuf)> = seeds
            .iter()
            .enumerate()
            .map(|(i, seed)| {
                let image = tmp.path().join(format!("{name}-{i}.img"));
                make_image(&image, BLOCKS * BLOCK);
                let seed = seed.to_string();
                let d = CacheDisk::start(
                    &image,
                    &tmp.path().join(format!("{name}-{i}.mnt")),
                    &control,
                    &tmp.path().join(format!("{name}-{i}.report")),
                    &["--seed", &seed, "--keep-fraction", "0.5"],
                );
                let f = open_rw(&d.disk()).unwrap();
                f.write_all_at(&data, 0).unwrap();
                (d, image)
            })
            .collect();
        let before = monotonic_ns();
        cut_power(&control);
        let reports = disks
            .iter()
            .map(|(d, _)| d.wait_report())
            .collect::<Vec<_>>();
        let [a, b] = <[CutReport; 2]>::try_from(reports).unwrap();
        eprintln!(
            "{name}: cut {:.3} ms and {:.3} ms after the control file, {:.3} ms apart; kept {} and {}",
            (a.at_ns - before) as f64 / 1e6,
            (b.at_ns - before) as f64 / 1e6,
            a.at_ns.abs_diff(b.at_ns) as f64 / 1e6,
            a.kept,
            b.kept
        );
        for (r, (_, image)) in [&a, &b].iter().zip(&disks) {
            assert!(
                r.at_ns >= before,
                "a disk was cut before the control file appeared"
            );
            assert_eq!(
                r.kept + r.dropped,
                BLOCKS as usize,
                "every block was unflushed"
            );
            assert_eq!(
                survivors(image, BLOCKS),
                r.kept_blocks,
                "the image's new blocks are the reported kept blocks"
            );
            assert!(
                (400..=624).contains(&r.kept),
                "keep-fraction 0.5 kept {} of {BLOCKS}",
                r.kept
            );
        }
        // Both disks' power went within the same short moment (one event woke both; the
        // bound is wide for a machine busy compiling).
        assert!(
            a.at_ns.abs_diff(b.at_ns) < 1_000_000_000,
            "the two cuts were {} ms apart",
            a.at_ns.abs_diff(b.at_ns) / 1_000_000
        );
        [a, b]
    };

    let [one, two] = round("different", [1, 2]);
    assert_ne!(
        one.kept_blocks, two.kept_blocks,
        "seeds 1 and 2 kept the same blocks"
    );
    let both = one
        .kept_blocks
        .iter()
        .filter(|b| two.kept_blocks.contains(b))
        .count();
    eprintln!("seeds 1 and 2: {both} blocks kept by both");
    let [again_a, again_b] = round("same", [1, 1]);
    assert_eq!(
        again_a.kept_blocks, one.kept_blocks,
        "seed 1 kept other blocks the second time"
    );
    assert_eq!(
        again_b.kept_blocks, one.kept_blocks,
        "seed 1 on the other disk kept others"
    );
}
