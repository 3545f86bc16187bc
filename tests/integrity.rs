//! Checksums (docs/integrity.md): a copy that rots silently on one leg is found by a read,
//! answered from the other leg and repaired; when every copy rotted the read fails with EIO,
//! nothing is rewritten and the file is listed as damaged; a lost checksum store is rebuilt;
//! a `kill -9` during writes is resolved as crash recovery, never reported as corruption.
//!
//! Rot is made as a bad sector would make it: the legs are ext4 images on loop devices, the
//! file's block is found with `filefrag -v` and rewritten through the device with
//! `oflag=direct`, so the file's mtime and ctime do not move.

#[macro_use]
mod common;

use common::*;
use std::fs::{self, File};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The mirror's daemon in the foreground, its log (stderr) in a file: the tests read what it
/// logged. Unmounts and waits for it on drop.
struct Foreground {
    child: Child,
    mnt: PathBuf,
    log: PathBuf,
}

impl Foreground {
    fn mount(legs: &[&Path], mnt: &Path, opts: &str, log: &Path) -> Foreground {
        let legs_arg = legs
            .iter()
            .map(|l| l.display().to_string())
            .collect::<Vec<_>>()
            .join(":");
        let mut cmd = Command::new(mirrorfs_bin());
        cmd.arg("-f").arg(&legs_arg).arg(mnt);
        if !opts.is_empty() {
            cmd.arg("-o").arg(opts);
        }
        let child = cmd
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(log).unwrap())
            .spawn()
            .expect("start mirrorfs -f");
        let fg = Foreground {
            child,
            mnt: mnt.to_path_buf(),
            log: log.to_path_buf(),
        };
        assert!(
            wait_mounted(mnt, true, Duration::from_secs(30)),
            "mirrorfs -f {legs_arg} {} did not mount: {}",
            mnt.display(),
            fg.log_text()
        );
        fg
    }

    fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn unmount(mut self) -> String {
        self.stop();
        self.log_text()
    }

    fn stop(&mut self) {
        if is_mounted(&self.mnt) {
            if let Err(e) = unmount_path(&self.mnt) {
                eprintln!("warning: {e}");
            }
        }
        wait_timeout(&mut self.child, Duration::from_secs(30), "mirrorfs -f");
    }
}

impl Drop for Foreground {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.stop();
        }
    }
}

fn drop_caches() {
    fs::write("/proc/sys/vm/drop_caches", "3").expect("drop caches (root)");
}

/// The filesystem block size of `file`'s filesystem and the physical block (in those units)
/// holding byte `offset` of `file`, from `filefrag -v` (the file must be on disk: synced).
fn physical_block(file: &Path, offset: u64) -> (u64, u64) {
    let out = sh_ok(&format!("filefrag -v {}", shq(file)));
    // "File size of F is 1048576 (256 blocks of 4096 bytes)"
    let bs: u64 = out
        .lines()
        .find_map(|l| {
            l.split(" blocks of ")
                .nth(1)?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no block size in filefrag's output:\n{out}"));
    let logical = offset / bs;
    for line in out.lines() {
        // "   0:        0..     255:      34816..     35071:    256: ..."
        let cols: Vec<&str> = line.split(':').map(str::trim).collect();
        if cols.len() < 4 || cols[0].parse::<u64>().is_err() {
            continue;
        }
        let range = |c: &str| -> Option<(u64, u64)> {
            let (a, b) = c.split_once("..")?;
            Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
        };
        let (Some((l0, l1)), Some((p0, _))) = (range(cols[1]), range(cols[2])) else {
            continue;
        };
        if (l0..=l1).contains(&logical) {
            return (bs, p0 + (logical - l0));
        }
    }
    panic!(
        "no extent of {} holds block {logical}:\n{out}",
        file.display()
    );
}

/// Flips one byte of `file` (on `leg`) at `offset` underneath the filesystem: the block is read
/// from the loop device and written back changed with `dd oflag=direct`. The file's times do
/// not move; the leg's page cache is dropped so the next read sees the device.
fn rot(leg: &Ext4Leg, file: &Path, offset: u64) {
    sh_ok("sync");
    let before = fs::metadata(file).unwrap();
    let original = fs::read(file).unwrap();
    let (bs, block) = physical_block(file, offset);
    let dev = format!("/dev/{}", leg.dev);
    let tmp = leg.img.with_extension("block");
    sh_ok(&format!(
        "dd if={dev} of={} bs={bs} skip={block} count=1 iflag=direct status=none",
        shq(&tmp)
    ));
    let mut data = fs::read(&tmp).unwrap();
    assert_eq!(
        data[..],
        original[(offset - offset % bs) as usize..][..bs as usize],
        "the device block is not the file's block"
    );
    data[(offset % bs) as usize] ^= 0x5a;
    fs::write(&tmp, &data).unwrap();
    sh_ok(&format!(
        "dd if={} of={dev} bs={bs} seek={block} count=1 oflag=direct conv=notrunc status=none",
        shq(&tmp)
    ));
    drop_caches();
    let after = fs::metadata(file).unwrap();
    assert_eq!(
        (
            before.mtime(),
            before.mtime_nsec(),
            before.ctime(),
            before.ctime_nsec()
        ),
        (
            after.mtime(),
            after.mtime_nsec(),
            after.ctime(),
            after.ctime_nsec()
        ),
        "rot moved the file's times"
    );
    let now = fs::read(file).unwrap();
    let changed: Vec<usize> = (0..now.len()).filter(|&i| now[i] != original[i]).collect();
    assert_eq!(
        changed,
        vec![offset as usize],
        "the leg's copy changed exactly there"
    );
}

/// Waits until the checksums in memory are committed (the sweep, within seconds).
fn wait_committed(mnt: &Path) {
    let ok = wait_for(Duration::from_secs(30), || {
        stats(mnt).integrity.is_some_and(|i| i.files_pending == 0)
    });
    assert!(ok, "checksums still pending: {:?}", stats(mnt).integrity);
}

const SIZE: usize = 1 << 20;
const ROT_AT: u64 = 300_000;

/// A mirror of two ext4 loop-device legs, mounted in the foreground with `opts`: the legs,
/// the temp dir (mount point `mnt`, the daemon's `log`), and the daemon.
fn ext4_mirror(opts: &str) -> ([Ext4Leg; 2], tempfile::TempDir, PathBuf, Foreground) {
    let legs = [Ext4Leg::new(64 << 20), Ext4Leg::new(64 << 20)];
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let leg_paths: Vec<&Path> = legs.iter().map(|l| l.mnt.as_path()).collect();
    let fg = Foreground::mount(&leg_paths, &mnt, opts, &tmp.path().join("log"));
    (legs, tmp, mnt, fg)
}

/// Two ext4 legs, a 1 MiB file written through the mount, then one byte rotted on leg
/// `rotted`, which is the leg that serves reads (`read_policy=leg:legN`).
fn rot_on_the_serving_leg(rotted: usize) {
    require_fuse!();
    require_tool!("filefrag");
    require_tool!("getfattr");
    let (legs, _tmp, mnt, fg) = ext4_mirror(&format!("read_policy=leg:leg{rotted}"));
    let data = pattern(SIZE, 11);
    fs::write(mnt.join("f"), &data).unwrap();
    File::open(mnt.join("f")).unwrap().sync_all().unwrap();
    wait_committed(&mnt);
    let copy = legs[rotted].mnt.join("f");
    rot(&legs[rotted], &copy, ROT_AT);

    let got = fs::read(mnt.join("f")).expect("the read is answered from the good copy");
    assert_bytes_eq(&got, &data, "read through the mount after rot");
    let st = stats(&mnt);
    for (i, l) in st.legs.iter().enumerate() {
        let want = if i == rotted { (1, 1) } else { (0, 0) };
        assert_eq!(
            (l.checksum_errors, l.read_repairs),
            want,
            "leg {i}'s checksum_errors and read_repairs: {l:?}"
        );
    }
    assert_eq!(st.integrity.as_ref().unwrap().damaged, vec![]);
    drop_caches();
    assert_bytes_eq(
        &fs::read(&copy).unwrap(),
        &data,
        "the rotted copy, repaired",
    );
    let block = ROT_AT / 4096 * 4096;
    let line = format!(
        "leg {rotted} ('{}'): checksum error in '/f' at bytes {block}..{}: repaired from leg {}",
        legs[rotted].mnt.display(),
        block + 4096,
        1 - rotted
    );
    let log = fg.unmount();
    assert!(log.contains(&line), "the log lacks {line:?}:\n{log}");
    assert_legs_identical(&[legs[0].mnt.clone(), legs[1].mnt.clone()]);
}

#[test]
fn silent_rot_on_the_first_leg_is_repaired() {
    rot_on_the_serving_leg(0);
}

#[test]
fn silent_rot_on_the_second_leg_is_repaired() {
    rot_on_the_serving_leg(1);
}

/// The same block rotted on both legs: EIO for reads of it (other ranges still read), nothing
/// rewritten, the file listed as damaged in the stats and by `mirrorfs status` (exit 1) until
/// the range is rewritten; `mirrorfs status --clear` empties the list.
#[test]
fn rot_on_every_copy_is_an_error_not_a_guess() {
    require_fuse!();
    require_tool!("filefrag");
    require_tool!("getfattr");
    let (legs, _tmp, mnt, fg) = ext4_mirror("");
    let data = pattern(SIZE, 12);
    fs::write(mnt.join("f"), &data).unwrap();
    File::open(mnt.join("f")).unwrap().sync_all().unwrap();
    wait_committed(&mnt);
    for l in &legs {
        rot(l, &l.mnt.join("f"), ROT_AT);
    }
    let rotted: Vec<Vec<u8>> = legs
        .iter()
        .map(|l| fs::read(l.mnt.join("f")).unwrap())
        .collect();

    let f = File::open(mnt.join("f")).unwrap();
    let mut buf = vec![0u8; 4096];
    let block = ROT_AT / 4096 * 4096;
    use std::os::unix::fs::FileExt;
    let e = f.read_at(&mut buf, block).expect_err("no copy verifies");
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    f.read_exact_at(&mut buf, 0)
        .expect("other blocks still read");
    assert_bytes_eq(&buf, &data[..4096], "block 0");
    drop(f);
    drop_caches();
    for (l, before) in legs.iter().zip(&rotted) {
        assert_bytes_eq(
            &fs::read(l.mnt.join("f")).unwrap(),
            before,
            "nothing rewritten",
        );
    }
    let st = stats(&mnt);
    let damaged = &st.integrity.as_ref().unwrap().damaged;
    assert_eq!(damaged.len(), 1, "{damaged:?}");
    assert_eq!(damaged[0].path, "/f");
    assert!(
        damaged[0]
            .ranges
            .iter()
            .any(|[o, l]| *o <= block && block < o + l),
        "{damaged:?}"
    );
    let (code, report) = status(&mnt);
    assert_eq!(code, Some(1), "{report}");
    assert!(report.contains("Permanent errors"), "{report}");
    assert!(report.contains("\t/f  (bytes "), "{report}");

    // Rewriting the block makes the file whole again.
    let fw = fs::OpenOptions::new()
        .write(true)
        .open(mnt.join("f"))
        .unwrap();
    fw.write_all_at(&data[block as usize..block as usize + 4096], block)
        .unwrap();
    fw.sync_all().unwrap();
    drop(fw);
    assert!(stats(&mnt).integrity.unwrap().damaged.is_empty());
    drop_caches();
    assert_bytes_eq(&fs::read(mnt.join("f")).unwrap(), &data, "rewritten");

    // A listed file, and the counters, are cleared by `mirrorfs status --clear`.
    let f = File::open(mnt.join("f")).unwrap();
    rot(&legs[0], &legs[0].mnt.join("f"), 10);
    rot(&legs[1], &legs[1].mnt.join("f"), 10);
    assert!(f.read_at(&mut buf, 0).is_err());
    drop(f);
    assert_eq!(stats(&mnt).integrity.unwrap().damaged.len(), 1);
    let out = run_mirrorfs([
        std::ffi::OsString::from("status"),
        "--clear".into(),
        mnt.clone().into(),
    ]);
    assert_exit(&out, 0, "status --clear");
    let st = stats(&mnt);
    assert!(st.integrity.unwrap().damaged.is_empty());
    assert!(st.legs.iter().all(|l| l.checksum_errors == 0));
    let log = fg.unmount();
    assert!(
        log.contains(&format!(
            "checksum error in '/f' at bytes {block}..{}: no leg holds the data as written",
            block + 4096
        )),
        "{log}"
    );
}

/// Rot on a leg that no read touches is found by a scrub (a plain one: the checksums say
/// which copy is right), repaired from the copy that verifies, times kept, one line naming
/// path, leg, byte range and action; the next scrub finds nothing.
#[test]
fn a_scrub_repairs_rot_that_reads_never_see() {
    require_fuse!();
    require_tool!("getfattr");
    require_tool!("filefrag");
    let (legs, _tmp, mnt, fg) = ext4_mirror("read_policy=leg:leg0");
    let leg_dirs = [legs[0].mnt.clone(), legs[1].mnt.clone()];
    let data = pattern(3 * SIZE + 5, 14);
    fs::write(mnt.join("f"), &data).unwrap();
    fs::write(mnt.join("g"), pattern(10_000, 15)).unwrap();
    wait_committed(&mnt);
    let copy = legs[1].mnt.join("f");
    let before = fs::metadata(&copy).unwrap();
    rot(&legs[1], &copy, 2 * SIZE as u64 + 10);
    assert_bytes_eq(&fs::read(mnt.join("f")).unwrap(), &data, "read from leg0");
    assert_eq!(
        stats(&mnt).legs[1].checksum_errors,
        0,
        "no read touched leg1"
    );

    mirrorfs_ok(&[&"scrub", &"start", &mnt]);
    let doc = wait_scrubbed(&mnt);
    let listed = differing(&doc);
    let at = 2 * SIZE as u64;
    let line = format!(
        "/f on leg 1 ('{}'): checksum error at bytes {at}..{}: repaired from leg 0",
        legs[1].mnt.display(),
        at + 4096
    );
    assert_eq!(listed, vec![line], "{doc}");
    assert_eq!(
        (doc["differences"].as_u64(), doc["repaired"].as_u64()),
        (Some(1), Some(1)),
        "{doc}"
    );
    let st = stats(&mnt);
    assert_eq!(
        st.legs
            .iter()
            .map(|l| l.checksum_errors)
            .collect::<Vec<_>>(),
        vec![0, 1]
    );
    let after = fs::metadata(&copy).unwrap();
    assert_eq!(
        (before.mtime(), before.mtime_nsec()),
        (after.mtime(), after.mtime_nsec()),
        "the repair kept the copy's mtime"
    );
    assert_content_on_legs(&leg_dirs, "f", &data);
    assert_legs_identical(&leg_dirs);
    assert_scrub_clean(&mnt);
    fg.unmount();
}

/// A deleted store is rebuilt from the other leg's at the next mount, with the same records.
#[test]
fn a_deleted_store_is_rebuilt() {
    require_fuse!();
    require_tool!("getfattr");
    let mut m = TestMirror::new(2).mount();
    let data = pattern(3 * SIZE + 100, 13);
    fs::write(m.path("f"), &data).unwrap();
    fs::write(m.path("g"), b"small").unwrap();
    let legs = m.legs().to_vec();
    let mnt = m.mnt().to_path_buf();
    m.unmount();
    let store = |l: &Path| l.join(".mirrorfs/checksums.redb");
    assert!(store(&legs[1]).exists());
    fs::remove_file(store(&legs[1])).unwrap();
    let mut r = mount_ok(&legs, &mnt, &[]);
    assert!(store(&legs[1]).exists(), "the store was not rebuilt");
    let st = stats(&mnt);
    assert_eq!(st.integrity.as_ref().unwrap().files_covered, 2, "{st:?}");
    assert_bytes_eq(&fs::read(mnt.join("f")).unwrap(), &data, "f");
    // The next scrub finds nothing.
    assert_scrub_clean(&mnt);
    r.unmount();
    // Both stores hold the same records now.
    let id = u64::from_le_bytes(
        get_xattr(legs[0].join("f"), "user.mirrorfs.id").unwrap()[..8]
            .try_into()
            .unwrap(),
    );
    // The daemon lets go of the stores a moment after umount returns (issue 14's "unmount that
    // releases the disks"): wait for that.
    let open = |l: &Path| {
        let mut tries = 0;
        loop {
            match mirrorfs::integrity::store::Store::open(l) {
                Err(e) if e.kind() == std::io::ErrorKind::ResourceBusy && tries < 100 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(100));
                }
                r => break r.unwrap(),
            }
        }
    };
    let a = open(&legs[0]);
    let b = open(&legs[1]);
    assert_eq!(a.counts().unwrap(), b.counts().unwrap());
    assert!(b.has_file(id).unwrap());
    for n in 0..4 {
        assert_eq!(
            a.chunk(id, n).unwrap(),
            b.chunk(id, n).unwrap(),
            "record {n}"
        );
    }
    let want = mirrorfs::integrity::sum::sums_of(&data);
    let got: Vec<u32> = (0..4).flat_map(|n| b.chunk(id, n).unwrap()).collect();
    assert_eq!(
        &got[..want.len()],
        &want[..],
        "the rebuilt store's checksums"
    );
}

/// fio's random writes, with its crc32c verify headers, through the mount, and a second writer
/// of odd sizes and offsets; the daemon is killed (-9) with the second writer's writes in
/// flight and checksums not yet committed; the mirror mounted again: crash recovery, zero
/// checksum errors, every block fio completed verifies (fio --verify_only with the state it
/// saved), both files read in full without error, the legs are identical. Ten rounds.
#[test]
fn kill_9_during_fio_random_writes() {
    require_fuse!();
    require_tool!("fio");
    require_tool!("getfattr");
    let dirs = TestDirs::new(2);
    let (legs, mnt) = (dirs.legs.clone(), dirs.mnt.clone());
    let work = dirs.root().join("fio");
    fs::create_dir(&work).unwrap();
    // fio replays the offsets it wrote from its saved state only with a known seed (with
    // randrepeat=0 its --verify_only fails on a plain directory too, fio 3.33): a seed per
    // round, so that each round writes other data.
    let job = |verify_only: bool, round: usize| -> Vec<String> {
        let mut a: Vec<String> = [
            "--name=crash",
            "--rw=randwrite",
            "--bs=4k",
            // Never a whole pass over the file: fio's --verify_only replay is unreliable across
            // the wrap of its random map (seen once, at exactly one full pass).
            "--size=64m",
            "--number_ios=3000",
            "--ioengine=psync",
            "--verify=crc32c",
            "--verify_state_save=1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.push(format!("--randseed={}", 1000 + round));
        a.push(format!("--filename={}", mnt.join("fio.dat").display()));
        if verify_only {
            a.extend(["--verify_only".into(), "--verify_state_load=1".into()]);
        } else {
            a.push("--do_verify=0".into());
        }
        a
    };
    for round in 0..10 {
        let mut r = mount_ok(&legs, &mnt, &[]);
        // fio lays its file out first (--create_only): the kill below must come during the
        // random writes whose state fio saves, not during the layout (seen under load: the
        // other writer alone had reached the mark before fio's file existed).
        let layout = Command::new("fio")
            .args(job(false, round))
            .arg("--create_only=1")
            .current_dir(&work)
            .output()
            .unwrap();
        assert!(
            layout.status.success(),
            "round {round}: fio layout: {}",
            text(&layout.stderr)
        );
        let before = stats(&mnt).legs[1].write_bytes;
        let mut fio = Command::new("fio")
            .args(job(false, round))
            .current_dir(&work)
            .stdin(Stdio::null())
            .stdout(File::create(work.join(format!("write{round}.out"))).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // A second writer, unverified, whose writes (any size, any alignment) are in flight
        // when the daemon dies: its file must come back readable and identical on the legs.
        let noise = std::thread::spawn({
            let path = mnt.join("noise.dat");
            move || {
                let f = fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&path)
                    .unwrap();
                let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ round as u64;
                loop {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let off = x % (8 << 20);
                    let len = 1 + (x >> 40) as usize % 20_000;
                    use std::os::unix::fs::FileExt;
                    if f.write_all_at(&pattern(len, x), off).is_err() {
                        return;
                    }
                }
            }
        });
        let writing = wait_for(Duration::from_secs(60), || {
            stats(&mnt).legs[1].write_bytes >= before + (4 << 20)
        });
        assert!(writing, "round {round}: the writes do not reach the legs");
        // fio stops first (SIGTERM: it saves which writes completed), then the daemon dies
        // at once, with the other writer's writes in flight and checksums not committed.
        // SAFETY: plain syscalls on processes this test started.
        unsafe { libc::kill(fio.id() as i32, libc::SIGTERM) };
        wait_timeout(&mut fio, Duration::from_secs(60), "fio after SIGTERM");
        for pid in r.pids() {
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
        assert!(wait_pids_gone(r.pids(), Duration::from_secs(10)));
        noise.join().unwrap();
        r.unmount();

        let mut r = mount_ok(&legs, &mnt, &[]);
        let clean = |st: &mirrorfs::stats::Stats| {
            st.legs
                .iter()
                .all(|l| l.checksum_errors == 0 && l.read_errors == 0)
                && st.integrity.as_ref().is_some_and(|i| i.damaged.is_empty())
        };
        let st = stats(&mnt);
        assert!(clean(&st), "round {round}, after crash recovery: {st:?}");
        drop_caches();
        let data = fs::read(mnt.join("fio.dat"))
            .unwrap_or_else(|e| panic!("round {round}: reading fio's file back: {e}"));
        assert_eq!(data.len(), 64 << 20);
        fs::read(mnt.join("noise.dat"))
            .unwrap_or_else(|e| panic!("round {round}: reading the other file back: {e}"));
        let out = Command::new("fio")
            .args(job(true, round))
            .current_dir(&work)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "round {round}: fio --verify_only failed:\n{}{}\nthe write phase:\n{}",
            text(&out.stdout),
            text(&out.stderr),
            fs::read_to_string(work.join(format!("write{round}.out"))).unwrap_or_default()
        );
        let st = stats(&mnt);
        assert!(
            clean(&st),
            "round {round}, after reading everything: {st:?}"
        );
        r.unmount();
        assert_legs_identical(&legs);
    }
}

/// After a crash, a file in the write-intent log whose metadata-leg copy does not match the
/// committed checksums while the other leg's does: the checksums decide, the other leg's copy
/// wins (not leg order), and it is crash recovery, not corruption.
#[test]
fn after_a_crash_the_copy_matching_the_checksums_wins() {
    require_fuse!();
    require_tool!("getfattr");
    let dirs = TestDirs::new(2);
    let (legs, mnt) = (dirs.legs.clone(), dirs.mnt.clone());
    let leg_paths: Vec<&Path> = legs.iter().map(PathBuf::as_path).collect();
    let mut fg = Foreground::mount(&leg_paths, &mnt, "", &dirs.root().join("log1"));
    let good = pattern(200_000, 21);
    fs::write(mnt.join("w"), &good).unwrap();
    wait_committed(&mnt);
    let clean = wait_for(Duration::from_secs(30), || {
        legs.iter()
            .all(|l| log_records(&l.join(".mirrorfs/intent.log")).is_empty())
    });
    assert!(clean, "the intent log was not cleared");
    fg.child.kill().unwrap();
    fg.stop();
    // As if a write had reached leg0 only when the daemon died: leg0's copy changed, the file
    // in both intent logs, its new checksums never committed.
    let mut torn = good.clone();
    torn[100_000..100_010].copy_from_slice(b"0123456789");
    fs::write(legs[0].join("w"), &torn).unwrap();
    for l in &legs {
        let mut log = fs::OpenOptions::new()
            .append(true)
            .open(l.join(".mirrorfs/intent.log"))
            .unwrap();
        std::io::Write::write_all(&mut log, b"w\0").unwrap();
    }
    let fg = Foreground::mount(&leg_paths, &mnt, "", &dirs.root().join("log2"));
    assert_bytes_eq(
        &fs::read(mnt.join("w")).unwrap(),
        &good,
        "w after the crash",
    );
    for l in &legs {
        assert_bytes_eq(&fs::read(l.join("w")).unwrap(), &good, "each leg's copy");
    }
    let st = stats(&mnt);
    assert!(st.legs.iter().all(|l| l.checksum_errors == 0), "{st:?}");
    assert_eq!(st.integrity.as_ref().unwrap().crash_resolved, 1, "{st:?}");
    let log = fg.unmount();
    assert!(
        log.contains("after the crash: /w: leg 1's copy matches the committed checksums"),
        "{log}"
    );
}

/// A mount with checksum=off sets the stores aside: the files it changes read back without a
/// false checksum error at the next mount with checksums.
#[test]
fn a_checksum_off_mount_leaves_no_stale_checksums() {
    require_fuse!();
    require_tool!("getfattr");
    let mut m = TestMirror::new(2).mount();
    let legs = m.legs().to_vec();
    let mnt = m.mnt().to_path_buf();
    fs::write(m.path("f"), pattern(100_000, 31)).unwrap();
    m.unmount();
    let mut r = mount_ok(&legs, &mnt, &["checksum=off"]);
    let changed = pattern(100_000, 32);
    fs::write(mnt.join("f"), &changed).unwrap();
    r.unmount();
    for l in &legs {
        assert!(!l.join(".mirrorfs/checksums.redb").exists());
        assert!(l.join(".mirrorfs/checksums.redb.off").exists());
    }
    let mut r = mount_ok(&legs, &mnt, &[]);
    drop_caches();
    assert_bytes_eq(
        &fs::read(mnt.join("f")).unwrap(),
        &changed,
        "f after checksum=off",
    );
    let st = stats(&mnt);
    assert!(st.legs.iter().all(|l| l.checksum_errors == 0), "{st:?}");
    r.unmount();
}

/// A copy edited on its leg (size and mtime move) is not rot: reads are answered from the
/// copy that verifies, the edited copy is reported as diverged and left alone; a scrub lists
/// it without repairing; `--repair=leg1` adopts the edit, and its checksums follow.
#[test]
fn a_copy_edited_on_its_leg_is_diverged_not_rot() {
    require_fuse!();
    require_tool!("getfattr");
    let m = TestMirror::new(2).option("read_policy=leg:leg1").mount();
    let mnt = m.mnt().to_path_buf();
    let data = pattern(50_000, 41);
    fs::write(m.path("f"), &data).unwrap();
    wait_committed(&mnt);
    std::thread::sleep(Duration::from_millis(20));
    let edited = pattern(60_000, 42);
    fs::write(m.leg(1).join("f"), &edited).unwrap();
    drop_caches();
    assert_bytes_eq(
        &fs::read(m.path("f")).unwrap(),
        &data,
        "the copy that verifies",
    );
    assert_bytes_eq(
        &fs::read(m.leg(1).join("f")).unwrap(),
        &edited,
        "the edit, kept",
    );
    let st = stats(&mnt);
    let ig = st.integrity.as_ref().unwrap();
    assert_eq!(ig.diverged.len(), 1, "{ig:?}");
    assert_eq!(
        (ig.diverged[0].path.as_str(), ig.diverged[0].legs.clone()),
        ("/f", vec!["leg1".to_string()])
    );
    assert!(st.legs.iter().all(|l| l.checksum_errors == 0), "{st:?}");
    let (code, report) = status(&mnt);
    assert_eq!(code, Some(1), "{report}");
    assert!(
        report.contains("Changed behind the mirror's back"),
        "{report}"
    );

    mirrorfs_ok(&[&"scrub", &"start", &mnt]);
    let doc = wait_scrubbed(&mnt);
    assert!(
        differing(&doc)
            .iter()
            .any(|l| l.contains("(diverged), not repaired")),
        "{doc}"
    );
    assert_bytes_eq(
        &fs::read(m.leg(1).join("f")).unwrap(),
        &edited,
        "not repaired",
    );

    mirrorfs_ok(&[&"scrub", &"start", &mnt, &"--repair=leg1"]);
    wait_scrubbed(&mnt);
    assert_content_on_legs(m.legs(), "f", &edited);
    // The scrub counted the copy it replaced (leg0's) as differing; from now on the adopted
    // version verifies on both legs.
    let before: Vec<u64> = stats(&mnt).legs.iter().map(|l| l.checksum_errors).collect();
    for policy in ["leg:leg0", "leg:leg1"] {
        setfattr_ok(&mnt.join(".mirrorfs"), "user.mirrorfs.read_policy", policy);
        drop_caches();
        assert_bytes_eq(&fs::read(m.path("f")).unwrap(), &edited, "adopted");
    }
    let after: Vec<u64> = stats(&mnt).legs.iter().map(|l| l.checksum_errors).collect();
    assert_eq!(before, after, "the adopted version verifies");
    assert_scrub_clean(&mnt);
    m.finish();
}

/// Files from before checksums (here: written by a mount with checksum=off) get them in the
/// background at the next mount, with progress in the stats; a file whose copies differ is
/// left without (nothing says which copy is right). Afterwards rot on the covered ones is
/// found and repaired like on new files; the walk does not run again at the next mount.
#[test]
fn older_files_get_checksums_in_the_background() {
    require_fuse!();
    require_tool!("getfattr");
    require_tool!("filefrag");
    let ext4 = [Ext4Leg::new(64 << 20), Ext4Leg::new(64 << 20)];
    let legs = vec![ext4[0].mnt.clone(), ext4[1].mnt.clone()];
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let mut m = mount_ok(&legs, &mnt, &["checksum=off"]);
    fs::create_dir(mnt.join("d")).unwrap();
    let files: Vec<(String, Vec<u8>)> = (0..20)
        .map(|i| (format!("d/f{i}"), pattern(1000 + 37_000 * i, 50 + i as u64)))
        .collect();
    for (name, data) in &files {
        fs::write(mnt.join(name), data).unwrap();
    }
    fs::write(mnt.join("odd"), b"same size, other bytes: one").unwrap();
    m.unmount();
    // Copies that differ before there are checksums: nothing says which is right.
    corrupt_keeping_times(&legs[1].join("odd"), 5, 1);

    let mut r = mount_ok(&legs, &mnt, &["read_policy=leg:leg1"]);
    let done = wait_for(Duration::from_secs(60), || {
        stats(&mnt)
            .integrity
            .and_then(|i| i.backfill)
            .is_some_and(|b| b.state == mirrorfs::stats::JobState::Finished)
    });
    let st = stats(&mnt);
    assert!(done, "the walk did not finish: {:?}", st.integrity);
    let ig = st.integrity.unwrap();
    let b = ig.backfill.unwrap();
    assert_eq!(
        (b.done_entries, b.differences, b.errors),
        (21, 1, 0),
        "{b:?}"
    );
    assert_eq!(b.total_entries, 21, "counted first: {b:?}");
    let covered: u64 = files.iter().map(|(_, d)| d.len() as u64).sum();
    let odd = b"same size, other bytes: one".len() as u64;
    assert_eq!(
        (b.done_bytes, b.total_bytes),
        (covered + odd, covered + odd),
        "{b:?}"
    );
    wait_committed(&mnt);
    let ig = stats(&mnt).integrity.unwrap();
    assert_eq!(
        (ig.files_covered, ig.bytes_covered, ig.bytes_pending),
        (20, covered, 0)
    );
    // Rot on leg1 (which serves reads) of a file covered by the walk: found and repaired.
    let (name, data) = &files[7];
    rot(&ext4[1], &legs[1].join(name), 1234);
    assert_bytes_eq(&fs::read(mnt.join(name)).unwrap(), data, name);
    assert_eq!(stats(&mnt).legs[1].checksum_errors, 1);
    assert_content_on_legs(&legs, name, data);
    r.unmount();
    // The walk is done for these stores: not again (the daemon decides before the mount is
    // ready, so no wait is needed to see that it did not start one).
    let mut r = mount_ok(&legs, &mnt, &[]);
    assert!(stats(&mnt).integrity.unwrap().backfill.is_none());
    r.unmount();
}

/// A leg whose checksum store cannot be written (an injected fault at the commit) is dropped
/// like a leg whose intent log cannot be written: the data stays served from the other leg, and
/// the checksums with it. When it comes back (`leg add`), it gets the other leg's store with
/// its data, and its copies verify.
#[test]
fn a_leg_whose_store_cannot_be_written_is_dropped_and_comes_back_whole() {
    require_fuse!();
    require_tool!("getfattr");
    require_tool!("setfattr");
    let m = TestMirror::new(2).option("fault_injection").mount();
    let mnt = m.mnt().to_path_buf();
    let fault = "user.mirrorfs.fault";
    setfattr_ok(&mnt, fault, "leg=leg1 op=checksums errno=EIO");
    let data = pattern(2 * SIZE + 3, 61);
    fs::write(m.path("f"), &data).unwrap();
    let dropped = wait_for(Duration::from_secs(30), || {
        stats(&mnt).legs[1].state == mirrorfs::stats::LegState::Failed
    });
    let st = stats(&mnt);
    assert!(dropped, "leg1 was not dropped: {st:?}");
    assert!(st.legs[1].write_errors >= 1, "{st:?}");
    assert_eq!(st.legs[0].state, mirrorfs::stats::LegState::InSync);
    wait_committed(&mnt);
    drop_caches();
    assert_bytes_eq(&fs::read(m.path("f")).unwrap(), &data, "served by leg0");
    setfattr_ok(&mnt, fault, "clear");

    mirrorfs_ok(&[&"leg", &"add", &mnt, &"leg1"]);
    let st = wait_resynced(&mnt);
    assert_eq!(st.legs_online, 2, "{st:?}");
    setfattr_ok(
        &mnt.join(".mirrorfs"),
        "user.mirrorfs.read_policy",
        "leg:leg1",
    );
    drop_caches();
    assert_bytes_eq(&fs::read(m.path("f")).unwrap(), &data, "served by leg1");
    let st = stats(&mnt);
    assert!(st.legs.iter().all(|l| l.checksum_errors == 0), "{st:?}");
    assert_scrub_clean(&mnt);
    let mut m = m;
    m.check_and_unmount();
    let leg_dirs = m.legs().to_vec();
    // leg1 got leg0's store: the same records and generation (its own stamps aside).
    use mirrorfs::integrity::store::Store;
    let (s0, s1) = (
        Store::open(&leg_dirs[0]).unwrap(),
        Store::open(&leg_dirs[1]).unwrap(),
    );
    assert_eq!(s0.generation().unwrap(), s1.generation().unwrap());
    assert_eq!(s0.counts().unwrap(), s1.counts().unwrap());
    let ids = s0.file_ids().unwrap();
    assert_eq!(ids, s1.file_ids().unwrap());
    for id in ids {
        assert_eq!(s0.chunks_of(id).unwrap(), s1.chunks_of(id).unwrap());
    }
}

/// A copy found bad by a read whose rewrite fails (an injected fault on the repair) costs the
/// leg its place: it is dropped, the read still gets the good bytes, and the other leg serves.
#[test]
fn a_repair_that_cannot_be_written_drops_the_leg() {
    require_fuse!();
    require_tool!("getfattr");
    require_tool!("setfattr");
    require_tool!("filefrag");
    let (legs, _tmp, mnt, fg) = ext4_mirror("fault_injection,read_policy=leg:leg1");
    let data = pattern(SIZE, 71);
    fs::write(mnt.join("f"), &data).unwrap();
    wait_committed(&mnt);
    rot(&legs[1], &legs[1].mnt.join("f"), 70_000);
    setfattr_ok(&mnt, "user.mirrorfs.fault", "leg=leg1 op=repair errno=EIO");
    assert_bytes_eq(&fs::read(mnt.join("f")).unwrap(), &data, "answered by leg0");
    let st = stats(&mnt);
    assert_eq!(
        st.legs[1].state,
        mirrorfs::stats::LegState::Failed,
        "{st:?}"
    );
    assert_eq!(
        st.legs[0].state,
        mirrorfs::stats::LegState::InSync,
        "{st:?}"
    );
    assert!(st.legs[1].write_errors >= 1, "{st:?}");
    assert!(st.integrity.unwrap().damaged.is_empty());
    drop_caches();
    assert_bytes_eq(
        &fs::read(mnt.join("f")).unwrap(),
        &data,
        "served by leg0 now",
    );
    fg.unmount();
}

/// Rot and a change on the leg are told apart by the copy's ctime against its stamp (the
/// ctime the mirror last left it with), not by size or mtime. The mirror's own metadata changes
/// (chmod, rename, a new hard link) move the copies' ctimes too: after them, and after a
/// remount, rot is still rot, and repaired. An edit on a leg that keeps the copy's size and
/// mtime (`touch -r`) still moves its ctime: diverged, reported, never reverted.
#[test]
fn ctime_tells_an_edit_that_keeps_size_and_mtime_from_rot() {
    require_fuse!();
    require_tool!("filefrag");
    require_tool!("getfattr");
    require_tool!("touch");
    let (legs, tmp, mnt, fg) = ext4_mirror("read_policy=leg:leg0");
    let data = pattern(SIZE, 51);
    fs::write(mnt.join("f"), &data).unwrap();
    File::open(mnt.join("f")).unwrap().sync_all().unwrap();
    sh_ok(&format!("chmod 600 {}", shq(mnt.join("f"))));
    fs::rename(mnt.join("f"), mnt.join("g")).unwrap();
    fs::hard_link(mnt.join("g"), mnt.join("h")).unwrap();
    // The chmod settles at the sweep (every second) after the intent entry is idle.
    std::thread::sleep(mirrorfs::meta::changes::IDLE + Duration::from_secs(2));
    wait_committed(&mnt);
    let log1 = fg.unmount();
    // Each leg's store has the stamp of its own copy (so the classification below is by
    // ctime, not by the size-and-mtime fallback).
    for l in &legs {
        let s = mirrorfs::integrity::store::Store::open(&l.mnt).unwrap();
        assert_eq!(s.stamp_count().unwrap(), 1, "{}", l.mnt.display());
        let md = fs::metadata(l.mnt.join("g")).unwrap();
        let id =
            mirrorfs::integrity::id_from(&get_xattr(l.mnt.join("g"), "user.mirrorfs.id").unwrap());
        let stamp = s.stamp(id.unwrap()).unwrap().unwrap();
        assert_eq!(
            stamp.0,
            md.ctime(),
            "the stamp is this copy's ctime after the link"
        );
    }
    let leg_paths: Vec<&Path> = legs.iter().map(|l| l.mnt.as_path()).collect();
    let fg = Foreground::mount(
        &leg_paths,
        &mnt,
        "read_policy=leg:leg0",
        &tmp.path().join("log2"),
    );

    // Rot on leg0, which serves reads: repaired, not called an edit.
    let copy0 = legs[0].mnt.join("g");
    rot(&legs[0], &copy0, ROT_AT);
    assert_bytes_eq(&fs::read(mnt.join("g")).unwrap(), &data, "after rot");
    let st = stats(&mnt);
    assert_eq!(
        (st.legs[0].checksum_errors, st.legs[0].read_repairs),
        (1, 1),
        "rot after chmod, rename, link and a remount is rot: {st:?}\n{log1}"
    );
    assert!(st.integrity.as_ref().unwrap().diverged.is_empty(), "{st:?}");
    drop_caches();
    assert_bytes_eq(&fs::read(&copy0).unwrap(), &data, "leg0 repaired");

    // An edit on leg1 that keeps its size, and its mtime through `touch -r`.
    let copy1 = legs[1].mnt.join("g");
    std::thread::sleep(Duration::from_millis(20));
    {
        use std::os::unix::fs::FileExt;
        let f = fs::OpenOptions::new().write(true).open(&copy1).unwrap();
        f.write_all_at(&[0xee; 4096], 8192).unwrap();
        f.sync_all().unwrap();
    }
    sh_ok(&format!("touch -r {} {}", shq(&copy0), shq(&copy1)));
    let (m0, m1) = (fs::metadata(&copy0).unwrap(), fs::metadata(&copy1).unwrap());
    assert_eq!(
        (m0.len(), m0.mtime(), m0.mtime_nsec()),
        (m1.len(), m1.mtime(), m1.mtime_nsec()),
        "the edit keeps size and mtime"
    );
    let mut edited = data.clone();
    edited[8192..12288].fill(0xee);
    setfattr_ok(
        &mnt.join(".mirrorfs"),
        "user.mirrorfs.read_policy",
        "leg:leg1",
    );
    drop_caches();
    assert_bytes_eq(
        &fs::read(mnt.join("h")).unwrap(),
        &data,
        "answered from the copy that verifies",
    );
    let st = stats(&mnt);
    let ig = st.integrity.as_ref().unwrap();
    assert_eq!(ig.diverged.len(), 1, "{ig:?}");
    assert_eq!(ig.diverged[0].legs, vec!["leg1".to_string()], "{ig:?}");
    assert_eq!(
        st.legs[1].checksum_errors, 0,
        "an edit is no checksum error: {st:?}"
    );
    drop_caches();
    assert_bytes_eq(&fs::read(&copy1).unwrap(), &edited, "the edit, kept");
    let log2 = fg.unmount();
    assert!(
        log2.contains("its ctime moved") && log2.contains("(diverged); not repaired"),
        "{log2}"
    );
}

/// A regular file made by `mknod` (not `create`) is covered from its birth, like a created one:
/// the same identity on both copies, and its data verified on reads.
#[test]
fn a_file_made_by_mknod_has_checksums_from_the_start() {
    require_fuse!();
    require_tool!("getfattr");
    let m = TestMirror::new(2).mount();
    let mnt = m.mnt().to_path_buf();
    let p = std::ffi::CString::new(m.path("node").as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid path; mknod of a regular file.
    let r = unsafe { libc::mknod(p.as_ptr(), libc::S_IFREG | 0o644, 0) };
    assert_eq!(r, 0, "mknod: {}", std::io::Error::last_os_error());
    let ids: Vec<Vec<u8>> = m
        .leg_paths("node")
        .iter()
        .map(|c| get_xattr(c, "user.mirrorfs.id").expect("an identity on each copy"))
        .collect();
    assert_eq!(ids[0].len(), 8);
    assert_eq!(ids[0], ids[1]);
    let data = pattern(100_000, 81);
    fs::write(m.path("node"), &data).unwrap();
    wait_committed(&mnt);
    let ig = stats(&mnt).integrity.unwrap();
    assert_eq!((ig.files_covered, ig.bytes_covered), (1, 100_000), "{ig:?}");
    drop_caches();
    let before = stats(&mnt).integrity.unwrap().verified_blocks;
    assert_bytes_eq(&fs::read(m.path("node")).unwrap(), &data, "read back");
    let after = stats(&mnt).integrity.unwrap().verified_blocks;
    assert!(after >= before + 25, "verified {before} -> {after}");
    m.finish();
}

/// The daemon's `rchar` (bytes it read through syscalls, /proc/PID/io).
fn rchar(pid: i32) -> u64 {
    let io = fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// A scrub reads each copy of a covered file once: the checksum pass verifies every block,
/// and the comparison of contents, which that pass has made needless, is not read again. A
/// scrub of files without checksums (checksum=off) still compares contents.
#[test]
fn a_scrub_reads_each_covered_copy_once() {
    require_fuse!();
    require_tool!("getfattr");
    const BIG: usize = 32 << 20;
    for (opts, reads) in [("", 2), ("checksum=off", 2)] {
        let m = TestMirror::new(2)
            .options(&[opts][..usize::from(!opts.is_empty())])
            .mount();
        let mnt = m.mnt().to_path_buf();
        fs::write(m.path("big"), pattern(BIG, 91)).unwrap();
        wait_committed_or_off(&mnt);
        let pid = m.daemon_pids()[0];
        let before = rchar(pid);
        mirrorfs_ok(&[&"scrub", &"start", &mnt]);
        let doc = wait_scrubbed(&mnt);
        assert_eq!(doc["differences"].as_u64(), Some(0), "{doc}");
        let read = rchar(pid) - before;
        // Each copy once (plus the stats and small files): not twice.
        assert!(
            read >= reads * BIG as u64 && read < (reads + 1) * BIG as u64,
            "{opts:?}: the scrub read {read} bytes for 2 copies of {BIG}"
        );
        m.finish();
    }
}

/// [`wait_committed`], or nothing to wait for without checksums.
fn wait_committed_or_off(mnt: &Path) {
    if stats(mnt).integrity.is_some() {
        wait_committed(mnt);
    }
}

/// A file's checksums go with its last name (an unlink, or a rename over it), and stay while
/// another name keeps the file: the remove path finds the file's identity by its name on the
/// metadata leg.
#[test]
fn checksums_go_with_a_files_last_name_and_stay_while_another_keeps_it() {
    require_fuse!();
    require_tool!("getfattr");
    let m = TestMirror::new(2).mount();
    let mnt = m.mnt().to_path_buf();
    // The stored counts once nothing is pending. A commit under way has taken its files out
    // of the pending ones before it stores them, so the counts are waited for, not read once.
    let settles_at = |want: (u64, u64), why: &str| {
        let ok = wait_for(Duration::from_secs(30), || {
            let ig = stats(&mnt).integrity.unwrap();
            ig.files_pending == 0 && (ig.files_covered, ig.bytes_covered) == want
        });
        assert!(ok, "{why}: want {want:?}: {:?}", stats(&mnt).integrity);
    };
    fs::write(m.path("a"), pattern(100_000, 1)).unwrap();
    fs::write(m.path("b"), pattern(50_000, 2)).unwrap();
    fs::hard_link(m.path("b"), m.path("b2")).unwrap();
    settles_at((2, 150_000), "a and b");
    fs::remove_file(m.path("b2")).unwrap();
    drop_caches();
    assert_bytes_eq(&fs::read(m.path("b")).unwrap(), &pattern(50_000, 2), "b");
    // Had b2's removal taken b's checksums, this would settle at (0, 0).
    fs::remove_file(m.path("a")).unwrap();
    settles_at((1, 50_000), "a's last name went, b keeps its file");
    fs::write(m.path("c"), pattern(10_000, 3)).unwrap();
    settles_at((2, 60_000), "b and c");
    fs::rename(m.path("c"), m.path("b")).unwrap();
    settles_at((1, 10_000), "the rename replaced b's file");
    fs::remove_file(m.path("b")).unwrap();
    settles_at((0, 0), "the last file went");
}
