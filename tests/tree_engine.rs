//! The tree engine (`mirrorfs::tree`) on temporary directories: comparison, scrub and repair,
//! full and incremental sync, throttle, cancel. No mount. Owner and device-node cases need
//! root: without it they fail loudly, or are skipped and logged with MIRRORFS_TEST_ALLOW_SKIP=1.

#[macro_use]
mod common;

use mirrorfs::tree::{
    compare_entry, scrub, sync_full, sync_paths, Control, DiffKind, Difference, EntryHook, Repair,
    RepairOutcome, TreeOptions,
};
use std::ffi::CString;
use std::fs;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tempfile::TempDir;

// ---------------------------------------------------------------------------------------------
// helpers

struct Legs {
    dirs: Vec<TempDir>,
    fds: Vec<OwnedFd>,
}

impl Legs {
    fn new(n: usize) -> Legs {
        let dirs: Vec<TempDir> = (0..n).map(|_| tempfile::tempdir().unwrap()).collect();
        let fds = dirs
            .iter()
            .map(|d| mirrorfs::sys::fd::open_root(d.path()).unwrap())
            .collect();
        Legs { dirs, fds }
    }
    fn fds(&self) -> Vec<BorrowedFd<'_>> {
        self.fds.iter().map(|f| f.as_fd()).collect()
    }
    fn fd(&self, i: usize) -> BorrowedFd<'_> {
        self.fds[i].as_fd()
    }
    fn root(&self, i: usize) -> &Path {
        self.dirs[i].path()
    }
    fn p(&self, i: usize, rel: &str) -> PathBuf {
        self.root(i).join(rel)
    }
}

/// Whether the cases that need root (owners, device nodes) can run; without root that is said
/// through `cannot_run`, which fails the test unless skipping is allowed.
fn is_root() -> bool {
    let root = mirrorfs::sys::geteuid() == 0;
    if !root {
        common::cannot_run("the owner and device-node cases need root");
    }
    root
}

fn opts() -> TreeOptions {
    TreeOptions {
        compare_dir_mtime: true,
        ..TreeOptions::default()
    }
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// Sets the mtime (and atime) of `p` itself, symlinks included.
fn set_mtime(p: &Path, sec: i64, nsec: i64) {
    let t = libc::timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    };
    let c = cpath(p);
    // SAFETY: valid C string and a 2-element timespec array.
    let r = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            [t, t].as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    assert_eq!(r, 0, "utimensat {}", p.display());
}

fn mknod(p: &Path, mode: u32, rdev: u64) {
    let c = cpath(p);
    // SAFETY: valid C string.
    let r = unsafe { libc::mknod(c.as_ptr(), mode, rdev) };
    assert_eq!(r, 0, "mknod {}", p.display());
}

fn setxattr(p: &Path, name: &str, value: &[u8]) {
    mirrorfs::sys::xattr::set_path(p, &CString::new(name).unwrap(), value).unwrap();
}

fn getxattr(p: &Path, name: &str) -> Option<Vec<u8>> {
    mirrorfs::sys::xattr::get_path(p, &CString::new(name).unwrap()).ok()
}

fn chown(p: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(p, Some(uid), Some(gid)).unwrap();
}

/// Deterministic bytes.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn write(p: &Path, data: &[u8]) {
    if let Some(d) = p.parent() {
        fs::create_dir_all(d).unwrap();
    }
    fs::write(p, data).unwrap();
}

/// A tree with one of everything.
fn populate(root: &Path) {
    fs::create_dir_all(root.join("a/b/c")).unwrap();
    write(&root.join("a/small"), b"hello world\n");
    write(&root.join("a/b/big"), &pattern(3 << 20, 1));
    write(&root.join("empty"), b"");
    symlink("../empty", root.join("a/link")).unwrap();
    symlink("/nonexistent/dangling", root.join("dangling")).unwrap();
    mknod(&root.join("fifo"), libc::S_IFIFO | 0o644, 0);
    write(&root.join("a/h1"), b"linked content");
    fs::hard_link(root.join("a/h1"), root.join("a/b/c/h2")).unwrap();
    fs::hard_link(root.join("a/h1"), root.join("zz_h3")).unwrap();
    setxattr(&root.join("a/small"), "user.color", b"blue");
    setxattr(&root.join("a/b"), "user.dir", b"yes");
    fs::set_permissions(root.join("a/small"), fs::Permissions::from_mode(0o640)).unwrap();
    // Sparse: 64 MiB with 64 KiB of data in the middle.
    let f = fs::File::create(root.join("sparse")).unwrap();
    f.set_len(64 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &pattern(64 << 10, 2), 32 << 20).unwrap();
    drop(f);
    if is_root() {
        chown(&root.join("a/small"), 1000, 1000);
        chown(&root.join("a/link"), 1001, 1002);
        mknod(
            &root.join("null"),
            libc::S_IFCHR | 0o666,
            libc::makedev(1, 3),
        );
    }
    // The folders that are not part of the mirror.
    write(&root.join(".mirrorfs/superblock"), b"leg-specific");
    fs::create_dir_all(root.join("lost+found")).unwrap();
    set_mtime(&root.join("a/small"), 1_600_000_000, 123_456_789);
    set_mtime(&root.join("a/link"), 1_500_000_000, 5);
    set_mtime(&root.join("a/b/c"), 1_400_000_000, 0);
}

fn cp_a(from: &Path, to: &Path) {
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", from.display()))
        .arg(to)
        .status()
        .unwrap();
    assert!(st.success());
}

fn scrub_diffs(fds: &[BorrowedFd<'_>], o: &TreeOptions) -> Vec<Difference> {
    let r = scrub(fds, o, Repair::None, &Control::default()).unwrap();
    assert!(!r.cancelled);
    assert_eq!(r.differences as usize, r.listed.len());
    r.listed
}

#[track_caller]
fn assert_identical(fds: &[BorrowedFd<'_>]) {
    let d = scrub_diffs(fds, &opts());
    assert!(d.is_empty(), "differences: {d:#?}");
}

fn kinds_of(d: &[Difference], path: &str) -> Vec<DiffKind> {
    d.iter()
        .find(|d| d.path == Path::new(path))
        .map(|d| d.kinds.clone())
        .unwrap_or_default()
}

fn entry(legs: &Legs, path: &str) -> Option<Difference> {
    compare_entry(&legs.fds(), Path::new(path), &opts(), &Control::default()).unwrap()
}

/// Allocated bytes of a file.
fn allocated(p: &Path) -> u64 {
    fs::metadata(p).unwrap().blocks() * 512
}

// ---------------------------------------------------------------------------------------------
// comparison

#[test]
fn identical_trees_have_no_differences() {
    let legs = Legs::new(3);
    populate(legs.root(0));
    cp_a(legs.root(0), legs.root(1));
    cp_a(legs.root(0), legs.root(2));
    // `cp -a` copies .mirrorfs too; make it differ: it must not matter.
    write(&legs.p(1, ".mirrorfs/superblock"), b"other leg");
    fs::remove_dir(legs.p(2, "lost+found")).unwrap();
    // That moved the roots' mtimes, which count like any directory's (with
    // compare_dir_mtime): a root is an entry like any other.
    let r = scrub(&legs.fds(), &opts(), Repair::None, &Control::default()).unwrap();
    assert_eq!(
        kinds_of(&r.listed, ""),
        vec![DiffKind::Mtime],
        "{:#?}",
        r.listed
    );
    let m = fs::metadata(legs.root(0)).unwrap();
    for i in 1..3 {
        set_mtime(legs.root(i), m.mtime(), m.mtime_nsec());
    }
    let r = scrub(&legs.fds(), &opts(), Repair::None, &Control::default()).unwrap();
    assert_eq!(r.differences, 0, "{:#?}", r.listed);
    assert!(r.entries >= 14, "{r:?}");
    assert!(r.errors.is_empty());
}

#[test]
fn each_kind_of_difference_is_detected() {
    let legs = Legs::new(2);
    populate(legs.root(0));
    cp_a(legs.root(0), legs.root(1));
    let l = &legs;
    // Missing.
    fs::remove_file(l.p(1, "empty")).unwrap();
    // Type.
    fs::remove_file(l.p(1, "dangling")).unwrap();
    fs::create_dir(l.p(1, "dangling")).unwrap();
    // Size (+ mtime follows).
    fs::OpenOptions::new()
        .append(true)
        .open(l.p(1, "a/h1"))
        .unwrap();
    let f = fs::OpenOptions::new()
        .write(true)
        .open(l.p(1, "a/b/big"))
        .unwrap();
    f.set_len(1 << 20).unwrap();
    drop(f);
    // Mode.
    fs::set_permissions(l.p(1, "a/small"), fs::Permissions::from_mode(0o600)).unwrap();
    // Mtime only.
    set_mtime(&l.p(1, "a/b/c"), 1_400_000_000, 1);
    // Symlink target, same mtime.
    fs::remove_file(l.p(1, "a/link")).unwrap();
    symlink("../elsewhere", l.p(1, "a/link")).unwrap();
    if is_root() {
        chown(&l.p(1, "a/link"), 1001, 1002);
    }
    set_mtime(&l.p(1, "a/link"), 1_500_000_000, 5);
    // Xattr.
    setxattr(&l.p(1, "a/b"), "user.dir", b"no");
    // Hard links: zz_h3 becomes its own file with the same content.
    fs::remove_file(l.p(1, "zz_h3")).unwrap();
    fs::copy(l.p(1, "a/h1"), l.p(1, "zz_h3")).unwrap();
    let m = fs::metadata(l.p(0, "zz_h3")).unwrap();
    set_mtime(&l.p(1, "zz_h3"), m.mtime(), m.mtime_nsec());
    if is_root() {
        chown(&l.p(1, "fifo"), 7, 8);
        fs::remove_file(l.p(1, "null")).unwrap();
        mknod(&l.p(1, "null"), libc::S_IFCHR | 0o666, libc::makedev(1, 5));
        set_mtime(
            &l.p(1, "null"),
            fs::symlink_metadata(l.p(0, "null")).unwrap().mtime(),
            0,
        );
        let m = fs::symlink_metadata(l.p(0, "null")).unwrap();
        set_mtime(&l.p(1, "null"), m.mtime(), m.mtime_nsec());
    }

    let d = scrub_diffs(&l.fds(), &opts());
    assert_eq!(kinds_of(&d, "empty"), vec![DiffKind::Missing]);
    assert_eq!(kinds_of(&d, "dangling"), vec![DiffKind::Type]);
    assert!(kinds_of(&d, "a/b/big").contains(&DiffKind::Size));
    assert_eq!(kinds_of(&d, "a/small"), vec![DiffKind::Mode]);
    assert_eq!(kinds_of(&d, "a/b/c"), vec![DiffKind::Mtime]);
    assert_eq!(kinds_of(&d, "a/link"), vec![DiffKind::SymlinkTarget]);
    let xd = d.iter().find(|d| d.path == Path::new("a/b")).unwrap();
    assert!(xd.kinds.contains(&DiffKind::Xattrs), "{xd:?}");
    assert_eq!(xd.xattrs, vec!["user.dir".to_string()]);
    assert_eq!(kinds_of(&d, "zz_h3"), vec![DiffKind::HardLinks]);
    let hd = d.iter().find(|d| d.path == Path::new("zz_h3")).unwrap();
    // Walk order is by components: a/b/c/h2 comes before a/h1.
    assert_eq!(
        hd.legs[0].link_leader.as_deref(),
        Some(Path::new("a/b/c/h2"))
    );
    assert_eq!(hd.legs[1].link_leader, None);
    // The other names of the group are alike on both legs.
    assert!(kinds_of(&d, "a/h1").is_empty());
    assert!(kinds_of(&d, "a/b/c/h2").is_empty());
    if is_root() {
        assert_eq!(kinds_of(&d, "fifo"), vec![DiffKind::Owner]);
        assert_eq!(kinds_of(&d, "null"), vec![DiffKind::Rdev]);
    }
    // Nothing else, apart from directories whose mtime moved because entries changed in them
    // (a/b/c, whose mtime alone was changed, is checked above).
    let expected = if is_root() { 9 } else { 7 };
    let unexpected: Vec<_> = d
        .iter()
        .filter(|x| {
            !(x.kinds == vec![DiffKind::Mtime]
                && fs::metadata(l.p(0, x.path.to_str().unwrap()))
                    .map(|m| m.is_dir())
                    .unwrap_or(false))
        })
        .collect();
    assert_eq!(unexpected.len(), expected, "{unexpected:#?}");

    // The same through compare_entry (no walk: link counts stand for the link structure).
    assert_eq!(entry(l, "empty").unwrap().kinds, vec![DiffKind::Missing]);
    assert_eq!(entry(l, "zz_h3").unwrap().kinds, vec![DiffKind::HardLinks]);
    assert!(entry(l, "sparse").is_none());
    assert!(entry(l, "a/b/big").unwrap().has(DiffKind::Size));
}

#[test]
fn content_ranges_are_exact() {
    let legs = Legs::new(2);
    let data = pattern(10 << 20, 3);
    write(&legs.p(0, "f"), &data);
    write(&legs.p(1, "f"), &data);
    // One flipped byte at an odd place, and a 3-byte run across a chunk boundary.
    let mut other = data.clone();
    other[7_654_321] ^= 0x40;
    for b in &mut other[(1 << 20) - 1..(1 << 20) + 2] {
        *b = !*b;
    }
    fs::write(legs.p(1, "f"), &other).unwrap();
    let m = fs::metadata(legs.p(0, "f")).unwrap();
    set_mtime(&legs.p(1, "f"), m.mtime(), m.mtime_nsec());
    let d = entry(&legs, "f").unwrap();
    assert_eq!(d.kinds, vec![DiffKind::Content]);
    assert_eq!(
        d.ranges,
        vec![((1 << 20) - 1, (1 << 20) + 2), (7_654_321, 7_654_322)]
    );
    assert!(!d.ranges_truncated);
    // The scrub finds the same.
    let sd = scrub_diffs(&legs.fds(), &opts());
    let f = sd.iter().find(|x| x.path == Path::new("f")).unwrap();
    assert_eq!(f.ranges, d.ranges);
}

// ---------------------------------------------------------------------------------------------
// scrub repair

#[test]
fn majority_repair_with_three_legs_fixes_the_odd_one() {
    let legs = Legs::new(3);
    populate(legs.root(0));
    cp_a(legs.root(0), legs.root(1));
    cp_a(legs.root(0), legs.root(2));
    // Leg 1: a flipped byte; leg 2: a missing file and an extra one; leg 0: wrong mode.
    let p = legs.p(1, "a/b/big");
    let mut d = fs::read(&p).unwrap();
    d[2_000_000] ^= 1;
    let m = fs::metadata(&p).unwrap();
    fs::write(&p, &d).unwrap();
    set_mtime(&p, m.mtime(), m.mtime_nsec());
    fs::remove_file(legs.p(2, "a/small")).unwrap();
    write(&legs.p(2, "a/extra"), b"junk");
    fs::set_permissions(legs.p(0, "empty"), fs::Permissions::from_mode(0o600)).unwrap();
    // A three-way tie: every leg has its own version.
    for i in 0..3 {
        write(&legs.p(i, "tie"), format!("version {i}").as_bytes());
    }

    let r = scrub(&legs.fds(), &opts(), Repair::Majority, &Control::default()).unwrap();
    let by = |p: &str| r.listed.iter().find(|d| d.path == Path::new(p)).unwrap();
    assert_eq!(
        by("a/b/big").repair,
        RepairOutcome::Repaired {
            from: 0,
            legs: vec![1]
        }
    );
    assert_eq!(by("a/b/big").ranges, vec![(2_000_000, 2_000_001)]);
    assert_eq!(
        by("a/small").repair,
        RepairOutcome::Repaired {
            from: 0,
            legs: vec![2]
        }
    );
    assert_eq!(
        by("empty").repair,
        RepairOutcome::Repaired {
            from: 1,
            legs: vec![0]
        }
    );
    assert_eq!(by("tie").repair, RepairOutcome::Tie);
    assert_eq!(r.unrepaired, 1);
    assert!(!legs.p(2, "a/extra").exists());
    assert_eq!(
        fs::read(legs.p(1, "a/b/big")).unwrap(),
        fs::read(legs.p(0, "a/b/big")).unwrap()
    );
    assert_eq!(
        getxattr(&legs.p(2, "a/small"), "user.color").unwrap(),
        b"blue"
    );

    // Only the tie remains.
    let d = scrub_diffs(&legs.fds(), &opts());
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0].path, Path::new("tie"));
}

#[test]
fn named_source_repair_with_two_legs() {
    let legs = Legs::new(2);
    populate(legs.root(0));
    cp_a(legs.root(0), legs.root(1));
    let p = legs.p(1, "a/b/big");
    let mut d = fs::read(&p).unwrap();
    d[123] ^= 0xff;
    fs::write(&p, &d).unwrap();
    fs::remove_dir_all(legs.p(1, "a/b/c")).unwrap();
    fs::remove_file(legs.p(1, "a/link")).unwrap();
    write(&legs.p(1, "a/link"), b"now a file");

    // Majority cannot decide with two legs.
    let r = scrub(&legs.fds(), &opts(), Repair::Majority, &Control::default()).unwrap();
    assert!(r.differences >= 3);
    assert_eq!(r.repaired, 0);
    assert!(r.listed.iter().all(|d| d.repair == RepairOutcome::Tie));

    let r = scrub(
        &legs.fds(),
        &opts(),
        Repair::FromLeg(0),
        &Control::default(),
    )
    .unwrap();
    assert!(r.repaired >= 3, "{r:#?}");
    assert_eq!(r.unrepaired, 0);
    assert_identical(&legs.fds());
    // The recreated hard link is a link.
    let h1 = fs::metadata(legs.p(1, "a/h1")).unwrap();
    let h2 = fs::metadata(legs.p(1, "a/b/c/h2")).unwrap();
    assert_eq!(h1.ino(), h2.ino());
    assert_eq!(h1.nlink(), 3);
}

// ---------------------------------------------------------------------------------------------
// full sync

#[test]
fn full_sync_onto_an_empty_target() {
    let legs = Legs::new(2);
    populate(legs.root(0));
    fs::remove_dir_all(legs.p(0, ".mirrorfs")).unwrap();
    write(&legs.p(1, ".mirrorfs/superblock"), b"target's own");
    let ctl = Control::default();
    let r = sync_full(legs.fd(0), legs.fd(1), &opts(), &ctl).unwrap();
    assert!(!r.cancelled && r.errors.is_empty(), "{r:?}");
    assert_identical(&legs.fds());
    // The skipped names are left alone on both sides.
    assert_eq!(
        fs::read(legs.p(1, ".mirrorfs/superblock")).unwrap(),
        b"target's own"
    );
    assert!(!legs.p(1, "lost+found").exists());
    // Metadata.
    let (s, t) = (
        fs::symlink_metadata(legs.p(0, "a/small")).unwrap(),
        fs::symlink_metadata(legs.p(1, "a/small")).unwrap(),
    );
    assert_eq!(s.mode(), t.mode());
    assert_eq!((s.mtime(), s.mtime_nsec()), (t.mtime(), t.mtime_nsec()));
    assert_eq!((s.uid(), s.gid()), (t.uid(), t.gid()));
    assert_eq!(
        getxattr(&legs.p(1, "a/small"), "user.color").unwrap(),
        b"blue"
    );
    assert_eq!(getxattr(&legs.p(1, "a/b"), "user.dir").unwrap(), b"yes");
    let (s, t) = (
        fs::symlink_metadata(legs.p(0, "a/link")).unwrap(),
        fs::symlink_metadata(legs.p(1, "a/link")).unwrap(),
    );
    assert_eq!((s.uid(), s.gid(), s.mtime()), (t.uid(), t.gid(), t.mtime()));
    // Hard links are links.
    let ino = |p: &str| fs::metadata(legs.p(1, p)).unwrap().ino();
    assert_eq!(ino("a/h1"), ino("a/b/c/h2"));
    assert_eq!(ino("a/h1"), ino("zz_h3"));
    assert_eq!(r.linked, 2);
    // Sparse stays sparse.
    assert!(
        allocated(&legs.p(1, "sparse")) < 1 << 20,
        "{}",
        allocated(&legs.p(1, "sparse"))
    );
    assert_eq!(
        fs::read(legs.p(0, "sparse")).unwrap(),
        fs::read(legs.p(1, "sparse")).unwrap()
    );
    // Progress.
    let s = ctl.progress.snapshot();
    assert_eq!(s.entries_done, s.entries_total, "{s:?}");
    assert_eq!(s.bytes_done, s.bytes_total, "{s:?}");
    assert_eq!(s.percent, Some(100.0));
}

#[test]
fn full_sync_onto_a_target_with_extra_renamed_changed_and_retyped_entries() {
    let legs = Legs::new(2);
    populate(legs.root(0));
    cp_a(legs.root(0), legs.root(1));
    let l = &legs;
    // Extra entries, a whole extra subtree.
    write(&l.p(1, "extra/deep/er/file"), b"x");
    write(&l.p(1, "a/b/extra"), b"x");
    // "Renamed": the target has the old name, the source the new one.
    fs::rename(l.p(0, "a/small"), l.p(0, "a/renamed")).unwrap();
    // Changed content in the middle of a big file (same size): only that block is written.
    let p = l.p(1, "a/b/big");
    let mut d = fs::read(&p).unwrap();
    d[1_500_000] ^= 0x55;
    fs::write(&p, &d).unwrap();
    // Type changes both ways, and a file where the source has a symlink.
    fs::remove_file(l.p(1, "empty")).unwrap();
    write(&l.p(1, "empty/inside"), b"dir now");
    fs::remove_dir_all(l.p(1, "a/b/c")).unwrap();
    write(&l.p(1, "a/b/c"), b"file now");
    fs::remove_file(l.p(1, "a/link")).unwrap();
    write(&l.p(1, "a/link"), b"was a link");
    // Metadata drift.
    fs::set_permissions(l.p(1, "a/h1"), fs::Permissions::from_mode(0o777)).unwrap();
    setxattr(&l.p(1, "a/h1"), "user.extra", b"1");
    // A hard link that should not be: the target's fifo is a link of a regular file...
    fs::remove_file(l.p(1, "fifo")).unwrap();
    fs::hard_link(l.p(1, "a/b/big"), l.p(1, "zzz_wrong_link")).unwrap();
    write(&l.p(0, "zzz_wrong_link"), b"own file");

    let r = sync_full(l.fd(0), l.fd(1), &opts(), &Control::default()).unwrap();
    assert!(r.errors.is_empty(), "{r:?}");
    assert_identical(&l.fds());
    assert!(!l.p(1, "extra").exists() && !l.p(1, "a/small").exists());
    // Mostly identical: reads, few writes (the flipped block, the new/retyped small files).
    assert!(r.bytes_written < 64 << 10, "{r:?}");
    assert!(r.bytes_read > 3 << 20, "{r:?}");
    // The wrong link was broken, not written through: big is intact.
    assert_eq!(
        fs::read(l.p(1, "a/b/big")).unwrap(),
        fs::read(l.p(0, "a/b/big")).unwrap()
    );
    assert_ne!(
        fs::metadata(l.p(1, "a/b/big")).unwrap().ino(),
        fs::metadata(l.p(1, "zzz_wrong_link")).unwrap().ino()
    );
    // Second run: nothing to do.
    let r = sync_full(l.fd(0), l.fd(1), &opts(), &Control::default()).unwrap();
    assert_eq!(
        (r.bytes_written, r.created, r.removed, r.updated),
        (0, 0, 0, 0),
        "{r:?}"
    );
}

#[test]
fn hard_links_on_the_target_are_regrouped() {
    let legs = Legs::new(2);
    let l = &legs;
    // Source: {a, c} one inode, b its own.
    write(&l.p(0, "a"), b"group one");
    fs::hard_link(l.p(0, "a"), l.p(0, "c")).unwrap();
    write(&l.p(0, "b"), b"single");
    // Target: {a, b} one inode, c its own.
    write(&l.p(1, "a"), b"group one");
    fs::hard_link(l.p(1, "a"), l.p(1, "b")).unwrap();
    write(&l.p(1, "c"), b"group one");
    sync_full(l.fd(0), l.fd(1), &opts(), &Control::default()).unwrap();
    assert_identical(&l.fds());
    let ino = |p: &str| fs::metadata(l.p(1, p)).unwrap().ino();
    assert_eq!(ino("a"), ino("c"));
    assert_ne!(ino("a"), ino("b"));
    assert_eq!(fs::read(l.p(1, "b")).unwrap(), b"single");
    assert_eq!(fs::read(l.p(1, "a")).unwrap(), b"group one");
}

#[test]
fn symlinks_on_the_target_are_never_followed() {
    let legs = Legs::new(2);
    let outside = tempfile::tempdir().unwrap();
    let canary = outside.path().join("canary");
    fs::write(&canary, b"do not touch").unwrap();
    let canary_dir = outside.path().join("dir");
    fs::create_dir(&canary_dir).unwrap();
    fs::write(canary_dir.join("keep"), b"keep").unwrap();
    let before = fs::metadata(&canary).unwrap();
    let l = &legs;
    // Source: regular files and directories where the target has symlinks pointing outside.
    write(&l.p(0, "f"), b"source content, longer than the canary");
    write(&l.p(0, "d/keep"), b"source keep");
    write(&l.p(0, "d/new"), b"new");
    write(&l.p(0, "sub/f"), b"deep");
    setxattr(&l.p(0, "f"), "user.x", b"y");
    symlink(&canary, l.p(1, "f")).unwrap();
    symlink(&canary_dir, l.p(1, "d")).unwrap();
    fs::create_dir(l.p(1, "sub")).unwrap();
    symlink(&canary, l.p(1, "sub/f")).unwrap();
    // An extra symlink to a directory outside: removing it must not remove what it points to.
    symlink(&canary_dir, l.p(1, "extra")).unwrap();

    sync_full(l.fd(0), l.fd(1), &opts(), &Control::default()).unwrap();
    assert_identical(&l.fds());
    assert_eq!(fs::read(&canary).unwrap(), b"do not touch");
    let after = fs::metadata(&canary).unwrap();
    assert_eq!(
        (
            before.mode(),
            before.mtime(),
            before.mtime_nsec(),
            before.uid()
        ),
        (after.mode(), after.mtime(), after.mtime_nsec(), after.uid())
    );
    assert!(getxattr(&canary, "user.x").is_none());
    assert_eq!(fs::read(canary_dir.join("keep")).unwrap(), b"keep");
    assert!(!canary_dir.join("new").exists());

    // The same with the incremental sync, and with a scrub repair.
    symlink(&canary, l.p(1, "g")).unwrap();
    write(&l.p(0, "g"), b"g content");
    sync_paths(
        l.fd(0),
        l.fd(1),
        &[PathBuf::from("g")],
        &opts(),
        &Control::default(),
    )
    .unwrap();
    fs::remove_file(l.p(1, "f")).unwrap();
    symlink(&canary, l.p(1, "f")).unwrap();
    scrub(&l.fds(), &opts(), Repair::FromLeg(0), &Control::default()).unwrap();
    assert_identical(&l.fds());
    assert_eq!(fs::read(&canary).unwrap(), b"do not touch");
}

#[test]
fn sparse_files_stay_sparse_and_target_data_in_holes_is_punched() {
    let legs = Legs::new(2);
    let l = &legs;
    let f = fs::File::create(l.p(0, "s")).unwrap();
    f.set_len(256 << 20).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, b"island", 100 << 20).unwrap();
    drop(f);
    // Target: fully written garbage of the same size (in place update must punch).
    let g = fs::File::create(l.p(1, "s")).unwrap();
    for i in 0..16u64 {
        std::os::unix::fs::FileExt::write_all_at(&g, &pattern(1 << 20, i), i * (16 << 20)).unwrap();
    }
    g.set_len(256 << 20).unwrap();
    drop(g);
    let r = sync_full(l.fd(0), l.fd(1), &opts(), &Control::default()).unwrap();
    assert!(
        allocated(&l.p(1, "s")) <= 1 << 20,
        "{}",
        allocated(&l.p(1, "s"))
    );
    assert!(r.bytes_written < 1 << 20, "{r:?}");
    assert_identical(&l.fds());
    // And onto a fresh target.
    let fresh = Legs::new(1);
    sync_full(l.fd(0), fresh.fd(0), &opts(), &Control::default()).unwrap();
    assert!(allocated(&fresh.p(0, "s")) <= 64 << 10);
    assert_identical(&[l.fd(0), fresh.fd(0)]);
}

// ---------------------------------------------------------------------------------------------
// incremental sync

#[test]
fn incremental_sync_reproduces_renames_deletes_links_and_never_resurrects() {
    let legs = Legs::new(2);
    let l = &legs;
    populate(l.root(0));
    sync_full(l.fd(0), l.fd(1), &opts(), &Control::default()).unwrap();
    assert_identical(&l.fds());

    // While the target is away, on the source (recording the paths, as the daemon does).
    let mut changed: Vec<&str> = Vec::new();
    fs::rename(l.p(0, "a/small"), l.p(0, "a/b/moved")).unwrap();
    changed.extend(["a/small", "a/b/moved"]);
    fs::remove_file(l.p(0, "empty")).unwrap();
    changed.push("empty");
    fs::rename(l.p(0, "a/b/c"), l.p(0, "renamed_dir")).unwrap(); // holds h2
    changed.extend(["a/b/c", "renamed_dir"]);
    write(&l.p(0, "newdir/x/y"), b"new");
    changed.push("newdir");
    // Writes through one name of a link group: the others see it too.
    fs::write(l.p(0, "zz_h3"), b"changed through zz_h3").unwrap();
    changed.push("zz_h3");
    // A new link of an existing file, and a link removed.
    fs::hard_link(l.p(0, "a/b/big"), l.p(0, "big_link")).unwrap();
    changed.push("big_link");
    fs::remove_file(l.p(0, "a/h1")).unwrap();
    changed.push("a/h1");
    // Replaced by a new file of the same name (inode changes).
    fs::remove_file(l.p(0, "dangling")).unwrap();
    write(&l.p(0, "dangling"), b"now a file");
    changed.push("dangling");
    // Deleted and recreated as a directory, then deleted again: must stay deleted.
    fs::remove_file(l.p(0, "fifo")).unwrap();
    fs::create_dir(l.p(0, "fifo")).unwrap();
    fs::remove_dir(l.p(0, "fifo")).unwrap();
    changed.push("fifo");
    // Unchanged on the source, but a stale extra entry on the target inside a listed dir.
    write(&l.p(1, "a/stale"), b"target only");
    changed.push("a");

    let paths: Vec<PathBuf> = changed.iter().rev().map(PathBuf::from).collect();
    let ctl = Control::default();
    let r = sync_paths(l.fd(0), l.fd(1), &paths, &opts(), &ctl).unwrap();
    assert!(r.errors.is_empty(), "{r:?}");
    assert_identical(&l.fds());
    for gone in ["a/small", "empty", "a/b/c", "a/h1", "fifo", "a/stale"] {
        assert!(
            fs::symlink_metadata(l.p(1, gone)).is_err(),
            "{gone} resurrected"
        );
    }
    let ino = |p: &str| fs::metadata(l.p(1, p)).unwrap().ino();
    assert_eq!(ino("zz_h3"), ino("renamed_dir/h2"));
    assert_eq!(ino("a/b/big"), ino("big_link"));
    assert_eq!(
        fs::read(l.p(1, "renamed_dir/h2")).unwrap(),
        b"changed through zz_h3"
    );
    let s = ctl.progress.snapshot();
    assert_eq!(s.entries_done, s.entries_total);
}

// ---------------------------------------------------------------------------------------------
// throttle, cancel, hooks

fn big_source(l: &Legs, files: usize, size: usize) {
    for i in 0..files {
        write(
            &l.p(0, &format!("d{}/f{i}", i % 7)),
            &pattern(size, i as u64),
        );
    }
}

#[test]
fn throttle_keeps_the_rate() {
    let legs = Legs::new(2);
    big_source(&legs, 6, 1 << 20);
    let ctl = Control::new(Some(4 << 20));
    let start = Instant::now();
    sync_full(legs.fd(0), legs.fd(1), &opts(), &ctl).unwrap();
    let secs = start.elapsed().as_secs_f64();
    // 6 MiB at 4 MiB/s: 1.5 s (minus the 0.1 s burst allowance). The lower bound holds on any
    // machine: a busy one only makes the sleeps longer. The upper bound is ten times the
    // designed time: the throttle works its debt out from the clock, so sleeps that overran are
    // paid back by shorter ones and a busy machine adds little; a throttle far slower than its
    // rate does not pass.
    assert!((1.1..15.0).contains(&secs), "{secs}");
    assert_identical(&legs.fds());
    let snap = ctl.progress.snapshot();
    assert!(snap.bytes_per_sec < 6.0 * 1048576.0, "{snap:?}");
}

#[test]
fn cancel_stops_a_run_early() {
    let legs = Legs::new(2);
    big_source(&legs, 20, 1 << 20);
    // 20 MiB at 2 MiB/s: 10 s if the cancel were not seen. It comes once the run has copied
    // its first bytes (polled, not after a fixed sleep), so that it lands in the middle.
    let ctl = Control::new(Some(2 << 20));
    let c2 = ctl.clone();
    let t = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(60);
        while c2.progress.snapshot().bytes_done == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        c2.cancel();
    });
    let r = sync_full(legs.fd(0), legs.fd(1), &opts(), &ctl).unwrap();
    t.join().unwrap();
    assert!(r.cancelled);
    // Stopped early, by count: at 2 MiB/s the run copies about 2 MiB a second, so it gets to
    // half the tree only if the cancel is not seen for ~5 s after the first bytes (it is
    // checked at least every 20 ms), far beyond any scheduling delay.
    let total = 20 << 20;
    assert!(
        r.bytes_written < total / 2,
        "{} of {total} bytes copied before the cancel was seen",
        r.bytes_written
    );
    assert_eq!(
        ctl.progress.snapshot().phase,
        mirrorfs::tree::Phase::Cancelled
    );
    assert!(!scrub_diffs(&legs.fds(), &opts()).is_empty());

    // A cancelled scrub too.
    let ctl = Control::new(Some(1 << 20));
    ctl.cancel();
    let r = scrub(&legs.fds(), &opts(), Repair::None, &ctl).unwrap();
    assert!(r.cancelled);
}

#[derive(Default)]
struct Recorder {
    locked: Mutex<Vec<PathBuf>>,
    synced: AtomicU64,
    depth: AtomicU64,
    nested: AtomicBool,
}

impl EntryHook for Recorder {
    fn with_entry(&self, path: &Path, work: &mut dyn FnMut()) {
        if self.depth.fetch_add(1, Ordering::SeqCst) > 0 {
            self.nested.store(true, Ordering::SeqCst);
        }
        self.locked.lock().unwrap().push(path.to_path_buf());
        work();
        self.depth.fetch_sub(1, Ordering::SeqCst);
    }
    fn synced(&self, _: &Path) {
        self.synced.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn the_hook_brackets_every_entry_without_nesting() {
    let legs = Legs::new(2);
    populate(legs.root(0));
    let rec = Arc::new(Recorder::default());
    let ctl = Control::default().with_hook(rec.clone());
    sync_full(legs.fd(0), legs.fd(1), &opts(), &ctl).unwrap();
    let locked = rec.locked.lock().unwrap().clone();
    assert!(locked.contains(&PathBuf::from("a/b/c/h2")));
    assert!(!locked.iter().any(|p| p.starts_with(".mirrorfs")));
    assert!(!rec.nested.load(Ordering::SeqCst));
    let entries = ctl.progress.snapshot().entries_done;
    assert_eq!(rec.synced.load(Ordering::SeqCst), entries);
    // Incremental with link groups (leader synced first, as its own entry).
    fs::write(legs.p(0, "zz_h3"), b"new").unwrap();
    let ctl = Control::default().with_hook(rec.clone());
    sync_paths(
        legs.fd(0),
        legs.fd(1),
        &[PathBuf::from("zz_h3")],
        &opts(),
        &ctl,
    )
    .unwrap();
    assert!(!rec.nested.load(Ordering::SeqCst));
    assert_identical(&legs.fds());
}

// ---------------------------------------------------------------------------------------------
// random trees

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const NAMES: [&str; 6] = ["a", "b", "c", "d-e", "d", "f.txt"];

fn random_path(rng: &mut Rng, root: &Path) -> PathBuf {
    let depth = 1 + rng.below(3);
    let mut p = PathBuf::new();
    for _ in 0..depth {
        p.push(NAMES[rng.below(NAMES.len() as u64) as usize]);
    }
    let _ = root;
    p
}

/// One random change at a random path; returns the paths it touched.
fn mutate(rng: &mut Rng, root: &Path) -> Vec<PathBuf> {
    let rel = random_path(rng, root);
    let p = root.join(&rel);
    // Parents created on the way are changes too (the daemon records each mkdir).
    let mut touched = Vec::new();
    let mut anc = PathBuf::new();
    for c in rel.parent().unwrap().components() {
        anc.push(c);
        match fs::symlink_metadata(root.join(&anc)) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return touched,
            Err(_) => {
                fs::create_dir(root.join(&anc)).unwrap();
                touched.push(anc.clone());
            }
        }
    }
    touched.push(rel.clone());
    let _ = fs::remove_file(&p);
    let _ = fs::remove_dir_all(&p);
    match rng.below(8) {
        0 => {}
        1 => {
            let _ = fs::create_dir(&p);
        }
        2 => {
            let _ = symlink(format!("../{}", rng.below(100)), &p);
        }
        3 => {
            // A hard link to another file somewhere.
            let other = root.join(random_path(rng, root));
            if fs::symlink_metadata(&other)
                .map(|m| m.is_file())
                .unwrap_or(false)
            {
                let _ = fs::hard_link(&other, &p);
                touched.push(other.strip_prefix(root).unwrap().to_path_buf());
            }
        }
        4 => {
            let len = rng.below(300_000) as usize;
            let _ = fs::write(&p, pattern(len, rng.next()));
            let _ = fs::set_permissions(
                &p,
                fs::Permissions::from_mode(0o600 + rng.below(0o100) as u32),
            );
        }
        5 => {
            let f = fs::File::create(&p).unwrap();
            f.set_len(rng.below(10 << 20)).unwrap();
            let _ = std::os::unix::fs::FileExt::write_all_at(&f, b"x", rng.below(10 << 20));
        }
        6 => {
            let _ = fs::write(&p, b"xattr");
            setxattr(&p, "user.r", &pattern(rng.below(40) as usize, rng.next()));
        }
        _ => {
            let _ = fs::write(&p, b"timed");
            set_mtime(
                &p,
                1_000_000_000 + rng.below(1_000_000) as i64,
                rng.below(1_000_000_000) as i64,
            );
        }
    }
    touched
}

#[test]
fn random_trees_converge_with_full_and_incremental_sync() {
    // TREE_SEEDS=200 for a longer run.
    let seeds: u64 = std::env::var("TREE_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    for seed in 1..=seeds {
        let mut rng = Rng(seed.wrapping_mul(0x2545_F491_4F6C_DD1D));
        let legs = Legs::new(2);
        for _ in 0..40 {
            mutate(&mut rng, legs.root(0));
        }
        for _ in 0..40 {
            mutate(&mut rng, legs.root(1));
        }
        assert!(!scrub_diffs(&legs.fds(), &opts()).is_empty(), "seed {seed}");
        let r = sync_full(legs.fd(0), legs.fd(1), &opts(), &Control::default()).unwrap();
        assert!(r.errors.is_empty(), "seed {seed}: {r:?}");
        let d = scrub_diffs(&legs.fds(), &opts());
        assert!(d.is_empty(), "seed {seed} full: {d:#?}");

        // Now the source changes while the target is away; only the touched paths are synced.
        let mut touched = Vec::new();
        for _ in 0..30 {
            touched.extend(mutate(&mut rng, legs.root(0)));
        }
        // The record holds every path touched (plus its parents' implicit changes).
        assert!(!scrub_diffs(&legs.fds(), &opts()).is_empty(), "seed {seed}");
        let r = sync_paths(
            legs.fd(0),
            legs.fd(1),
            &touched,
            &opts(),
            &Control::default(),
        )
        .unwrap();
        assert!(r.errors.is_empty(), "seed {seed}: {r:?}");
        let d = scrub_diffs(&legs.fds(), &opts());
        assert!(d.is_empty(), "seed {seed} incremental: {touched:?} {d:#?}");
    }
}

// ---------------------------------------------------------------------------------------------
// speed (run with: cargo test --release --test tree_engine -- --ignored --nocapture)

#[test]
#[ignore = "a benchmark, not a test: it times sync and scrub of 500 MiB and prints them (cargo test --release --test tree_engine speed -- --ignored --nocapture)"]
fn speed_of_a_full_sync() {
    let legs = Legs::new(2);
    let files = 2000;
    let size = 500 * 1024 * 1024 / files;
    for i in 0..files {
        write(
            &legs.p(0, &format!("d{:02}/f{i}", i % 40)),
            &pattern(size, i as u64),
        );
    }
    let start = Instant::now();
    let r = sync_full(
        legs.fd(0),
        legs.fd(1),
        &TreeOptions::default(),
        &Control::default(),
    )
    .unwrap();
    let t1 = start.elapsed().as_secs_f64();
    println!(
        "full sync onto empty: {files} files, 500 MiB: {t1:.2} s ({:.0} MiB/s) {r:?}",
        500.0 / t1
    );
    let start = Instant::now();
    let r = sync_full(
        legs.fd(0),
        legs.fd(1),
        &TreeOptions::default(),
        &Control::default(),
    )
    .unwrap();
    let t2 = start.elapsed().as_secs_f64();
    println!(
        "full sync, identical: {t2:.2} s ({:.0} MiB/s) written {}",
        500.0 / t2,
        r.bytes_written
    );
    let start = Instant::now();
    let s = scrub(
        &legs.fds(),
        &TreeOptions::default(),
        Repair::None,
        &Control::default(),
    )
    .unwrap();
    let t3 = start.elapsed().as_secs_f64();
    println!(
        "scrub, 2 legs: {t3:.2} s ({:.0} MiB/s) differences {}",
        500.0 / t3,
        s.differences
    );
}

/// The leg roots are entries like any other directory: a sync gives the target's root the
/// source's mode and mtime (after everything under it, `.mirrorfs/` included, is written), an
/// incremental sync does so when a listed path sits at the root, and a scrub finds and repairs
/// a root whose mtime differs (with `compare_dir_mtime`).
#[test]
fn leg_roots_are_synced_and_compared_like_any_directory() {
    let l = Legs::new(2);
    populate(l.root(0));
    fs::set_permissions(l.root(0), fs::Permissions::from_mode(0o750)).unwrap();
    set_mtime(l.root(0), 1_500_000_000, 123_456_789);
    // The target's own `.mirrorfs/` (written before the resync) moves its root's mtime.
    write(&l.p(1, ".mirrorfs/superblock"), b"target's own");
    sync_full(l.fd(0), l.fd(1), &opts(), &Control::default()).unwrap();
    let (a, b) = (
        fs::metadata(l.root(0)).unwrap(),
        fs::metadata(l.root(1)).unwrap(),
    );
    assert_eq!(
        (b.mode(), b.mtime(), b.mtime_nsec()),
        (a.mode(), a.mtime(), a.mtime_nsec())
    );
    assert_identical(&l.fds());

    // A change at the root, synced by its path: the root's mtime follows.
    write(&l.p(0, "new-at-root"), b"x");
    set_mtime(l.root(0), 1_600_000_000, 7);
    sync_paths(
        l.fd(0),
        l.fd(1),
        &[PathBuf::from("new-at-root")],
        &opts(),
        &Control::default(),
    )
    .unwrap();
    assert_eq!(fs::metadata(l.root(1)).unwrap().mtime(), 1_600_000_000);
    assert_identical(&l.fds());

    // Found and repaired by a scrub.
    set_mtime(l.root(1), 1_700_000_000, 0);
    let d = scrub_diffs(&l.fds(), &opts());
    assert_eq!(kinds_of(&d, ""), vec![DiffKind::Mtime]);
    scrub(&l.fds(), &opts(), Repair::FromLeg(0), &Control::default()).unwrap();
    assert_identical(&l.fds());
    assert_eq!(fs::metadata(l.root(1)).unwrap().mtime(), 1_600_000_000);
}
