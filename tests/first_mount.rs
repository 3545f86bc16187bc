//! The first mount of legs that already hold the same tree: their metadata is compared before
//! the mount answers (the tree engine: names, types, sizes, modes, owners, times, xattrs, hard
//! links), their contents right after, in the background, by a report-only scrub. A copy
//! whose bytes differ while everything else agrees is found and reported, never guessed at.

#[macro_use]
mod common;

use common::*;
use mirrorfs::stats::{JobState, Stats};
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Waits for the first-mount scrub to end; returns the stats then.
#[track_caller]
fn scrub_done(mnt: &Path) -> Stats {
    let start = Instant::now();
    loop {
        let st = stats(mnt);
        let scrub = st.scrub.as_ref().expect("a first-mount scrub");
        if !scrub.state.is_running() {
            assert_eq!(scrub.state, JobState::Finished, "{st:?}");
            return st;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{st:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Legs that are `cp -a` copies of leg 0's tree.
fn copies(n: usize) -> TestDirs {
    let d = TestDirs::new(n);
    let l0 = d.legs[0].clone();
    fs::create_dir_all(l0.join("dir/sub")).unwrap();
    fs::write(l0.join("dir/file"), pattern(300_000, 7)).unwrap();
    fs::write(l0.join("top"), b"top").unwrap();
    for other in &d.legs[1..] {
        let out = run_timeout(
            Command::new("cp")
                .arg("-a")
                .arg(format!("{}/.", l0.display()))
                .arg(other),
            Duration::from_secs(30),
        );
        assert!(out.status.success());
    }
    d
}

#[test]
fn identical_copies_are_adopted_and_their_contents_checked() {
    require_fuse!();
    let m = TestMirror::new(2).with_dirs(copies(2)).mount();
    let st = scrub_done(m.mnt());
    let scrub = st.scrub.unwrap();
    assert_eq!(scrub.differences, 0);
    assert!(
        scrub.done_bytes >= 300_003,
        "every byte was compared: {scrub:?}"
    );
    let status = run_mirrorfs([std::ffi::OsStr::new("status"), m.mnt().as_os_str()]);
    assert_eq!(status.status.code(), Some(0));
    m.finish();
}

#[test]
fn a_copy_differing_only_in_its_bytes_is_reported() {
    require_fuse!();
    let d = copies(2);
    // Same size, same times, other bytes: only reading tells.
    let f = d.legs[1].join("dir/file");
    let t = fs::metadata(&f).unwrap().modified().unwrap();
    let mut bytes = fs::read(&f).unwrap();
    bytes[150_000] ^= 0xff;
    fs::write(&f, &bytes).unwrap();
    fs::File::options()
        .write(true)
        .open(&f)
        .unwrap()
        .set_modified(t)
        .unwrap();
    let m = TestMirror::new(2).with_dirs(d).mount();
    let st = scrub_done(m.mnt());
    assert_eq!(st.scrub.as_ref().unwrap().differences, 1, "{st:?}");
    // Counted on both legs: nothing tells which copy is right.
    assert!(st.legs.iter().all(|l| l.checksum_errors == 1), "{st:?}");
    let status = run_mirrorfs([std::ffi::OsStr::new("status"), m.mnt().as_os_str()]);
    assert_eq!(
        status.status.code(),
        Some(1),
        "status reports the difference"
    );
    let list = run_mirrorfs([
        std::ffi::OsStr::new("scrub"),
        std::ffi::OsStr::new("status"),
        m.mnt().as_os_str(),
    ]);
    let out = String::from_utf8_lossy(&list.stdout);
    assert!(out.contains("/dir/file (Content)"), "{out}");
    // Nothing was repaired: the legs still differ there, and only there.
    let diffs = legs_differences(m.legs());
    assert_eq!(diffs.len(), 1, "{diffs:?}");
    assert!(diffs[0].contains("dir/file"), "{diffs:?}");
}
