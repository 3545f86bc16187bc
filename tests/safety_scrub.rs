//! Never lose data (issue 3): the scrub of files without checksums (from before them, or
//! `checksum=off`; with checksums the scrub knows which copy is right: tests/integrity.rs). A
//! byte flipped in one leg's copy is found (listed, counted, `scrub status` exits 1) and
//! repaired, by majority with three legs and from a named leg with two.

#[macro_use]
mod common;

use common::*;
use std::fs;
use std::path::Path;

/// The file the scrub tests corrupt, and where.
const SCRUB_FILE: usize = 2 * MIB;
const FLIP_AT: u64 = 1_000_000;

/// A mirror of `n` legs with `f` (2 MiB) and a few other entries, all identical, and a first
/// scrub that finds nothing (`scrub status` exits 0).
fn scrub_mirror(n: usize) -> (Mounted, Vec<u8>) {
    let m = TestMirror::new(n).option("checksum=off").mount();
    let mnt = m.mnt().to_path_buf();
    let data = pattern(SCRUB_FILE, 71);
    fs::write(m.path("f"), &data).unwrap();
    fs::create_dir(m.path("d")).unwrap();
    fs::write(m.path("d/g"), pattern(10_000, 72)).unwrap();
    std::os::unix::fs::symlink("d/g", m.path("link")).unwrap();
    assert_legs_identical(m.legs());
    assert_eq!(
        getfattr_ok(&mnt.join(".mirrorfs"), "user.mirrorfs.scrub"),
        "none"
    );
    mirrorfs_ok(&[&"scrub", &"start", &mnt]);
    let doc = wait_scrubbed(&mnt);
    assert_eq!(doc["differences"], 0, "a scrub of identical legs: {doc}");
    assert!(differing(&doc).is_empty(), "{doc}");
    mirrorfs_ok(&[&"scrub", &"status", &mnt]);
    (m, data)
}

/// The scrub document lists `/f` as differing in content, once, unrepaired; `mirrorfs scrub
/// status` says so and exits 1.
#[track_caller]
fn assert_scrub_found_f(mnt: &Path) {
    let doc = wait_scrubbed(mnt);
    let listed = differing(&doc);
    assert!(
        listed.len() == 1 && listed[0].starts_with("/f (") && listed[0].contains("Content"),
        "the scrub should list /f as differing in content: {doc}"
    );
    assert_eq!(
        (doc["differences"].as_u64(), doc["repaired"].as_u64()),
        (Some(1), Some(0)),
        "{doc}"
    );
    let (code, out) = mirrorfs(&[&"scrub", &"status", &mnt]);
    assert_eq!(code, Some(1), "scrub status with a difference left:\n{out}");
    assert!(out.contains("differs: /f ("), "{out}");
}

/// Three legs: a byte flipped directly in leg2's copy (times kept) is found by a scrub, counted
/// as a checksum error of leg2 only (the other two agree), and repaired by majority.
#[test]
fn scrub_finds_a_flipped_byte_and_repairs_it_by_majority() {
    require_fuse!();
    require_tool!("getfattr");
    let (m, data) = scrub_mirror(3);
    let mnt = m.mnt().to_path_buf();
    corrupt_keeping_times(&m.leg(2).join("f"), FLIP_AT, 1);
    assert!(!legs_differences(m.legs()).is_empty());

    mirrorfs_ok(&[&"scrub", &"start", &mnt]);
    assert_scrub_found_f(&mnt);
    let st = stats(&mnt);
    let ck: Vec<u64> = st.legs.iter().map(|l| l.checksum_errors).collect();
    assert!(
        ck[0] == 0 && ck[1] == 0 && ck[2] >= 1,
        "checksum_errors by leg: {ck:?}"
    );
    let (code, report) = status(&mnt);
    assert_eq!(code, Some(1), "status with checksum errors:\n{report}");
    // Only a report: leg2 still holds the bad byte.
    assert_ne!(fs::read(m.leg(2).join("f")).unwrap(), data);

    scrub_repairs_one(&mnt, "--repair");
    assert_content_on_legs(m.legs(), "f", &data);
    assert_legs_identical(m.legs());
    // A further scrub finds nothing.
    assert_scrub_clean(&mnt);
    m.finish();
}

/// Two legs: nothing tells which copy is right, so a majority repair is refused (exit 1 and a
/// line); a scrub counts a checksum error on both legs; `--repair=leg0` repairs from leg0.
#[test]
fn scrub_with_two_legs_repairs_from_the_named_leg() {
    require_fuse!();
    require_tool!("getfattr");
    let (m, data) = scrub_mirror(2);
    let mnt = m.mnt().to_path_buf();
    corrupt_keeping_times(&m.leg(1).join("f"), FLIP_AT, 1);

    let out = mirrorfs_refused(&[&"scrub", &"start", &mnt, &"--repair"]);
    assert!(out.contains("scrub start"), "{out}");
    // The refused start left the previous (clean) scrub's report alone.
    assert_eq!(wait_scrubbed(&mnt)["differences"], 0);

    mirrorfs_ok(&[&"scrub", &"start", &mnt]);
    assert_scrub_found_f(&mnt);
    let st = stats(&mnt);
    for l in &st.legs {
        assert!(
            l.checksum_errors >= 1,
            "with two legs both count the difference: {l:?}"
        );
    }
    assert_ne!(fs::read(m.leg(1).join("f")).unwrap(), data);

    scrub_repairs_one(&mnt, "--repair=leg0");
    assert_content_on_legs(m.legs(), "f", &data);
    assert_legs_identical(m.legs());
    m.finish();
}
