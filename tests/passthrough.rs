//! `-o passthrough=ro` (issue 12): read-only opens passed through to one leg's file in the
//! kernel, so their reads never reach the daemon. Shown on real mounts: what the option needs,
//! reads that bypass the daemon (counted in the stats), the one leg file per inode, the leg
//! chosen (a non-rotational one first, then spread), a writer arriving while passed-through
//! readers are open (refused with ETXTBSY, so a shared writable mapping can never reach one
//! leg alone), a writer first (readers then go through the daemon), and the passed-through
//! leg failing while files are open on it.

#[macro_use]
mod common;

use common::*;
use mirrorfs::stats::LegState;
use std::fs;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;

const PT: [&str; 2] = ["passthrough=ro", "checksum=off"];

/// Reads the whole file at `p` through one open.
fn read_all(p: &Path) -> Vec<u8> {
    fs::read(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

/// Reads the whole file through the open `f`, from offset 0.
fn pread_all(f: &fs::File) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 128 * 1024];
    loop {
        let n = f.read_at(&mut buf, out.len() as u64).expect("pread");
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// Opens `p` with `o` once the kernel's RELEASE of the passed-through opens just closed has
/// reached the daemon (it is sent after close() returns): ETXTBSY until then.
fn open_once_released(o: &fs::OpenOptions, p: &Path) -> fs::File {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match o.open(p) {
            Ok(f) => return f,
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "still ETXTBSY after 10 s"
                );
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("open {}: {e}", p.display()),
        }
    }
}

/// The daemon's reads on each leg so far.
fn read_ops(mnt: &Path) -> Vec<u64> {
    stats(mnt).legs.iter().map(|l| l.read_ops).collect()
}

/// Writes `data` to `rel` through the mount, and waits until the daemon has the write's
/// RELEASE (the kernel sends it after close() returns): until then the file is open for
/// writing, and a read-only open of it would rightly go through the page cache instead.
fn write_released(m: &Mounted, rel: &str, data: &[u8]) {
    fs::write(m.path(rel), data).unwrap();
    assert!(
        wait_for(std::time::Duration::from_secs(10), || daemon_open_fds_on(
            m, rel
        )
        .iter()
        .all(|&n| n == 0)),
        "the daemon still holds {rel} open: {:?}",
        daemon_open_fds_on(m, rel)
    );
}

/// Drops every cached page (the legs' too: passed-through reads use the leg's page cache).
fn drop_all_caches() {
    fs::write("/proc/sys/vm/drop_caches", "3").expect("drop_caches (needs root)");
}

#[test]
fn passthrough_needs_checksum_off() {
    require_fuse!();
    let dirs = TestDirs::new(2);
    let out = dirs.mount_with("passthrough=ro");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("passthrough=ro needs checksum=off"), "{err}");
    for l in &dirs.legs {
        assert!(
            !l.join(".mirrorfs").exists(),
            "a refused mount touched {}",
            l.display()
        );
    }
    let out = dirs.mount_with("passthrough=rw,checksum=off");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out.stderr).contains("off or ro"), "{out:?}");
}

/// Reads of a read-only open never reach the daemon, buffered or `O_DIRECT`; without the
/// option the same reads do.
#[test]
fn passed_through_reads_bypass_the_daemon() {
    require_fuse!();
    require_tool!("getfattr");
    let data = pattern(4 * MIB, 3);
    for (opts, through_daemon) in [(&PT[..], false), (&["checksum=off"][..], true)] {
        let m = TestMirror::new(2).options(opts).mount();
        write_released(&m, "f", &data);
        drop_all_caches();
        let before = read_ops(m.mnt());
        assert_bytes_eq(&read_all(&m.path("f")), &data, "buffered read");
        assert_bytes_eq(
            &read_direct(&m.path("f"), DIRECT_CHUNK),
            &data,
            "O_DIRECT read",
        );
        let after = read_ops(m.mnt());
        let daemon_reads: u64 = after.iter().sum::<u64>() - before.iter().sum::<u64>();
        if through_daemon {
            assert!(daemon_reads > 0, "{opts:?}: {before:?} -> {after:?}");
        } else {
            assert_eq!(daemon_reads, 0, "{opts:?}: {before:?} -> {after:?}");
        }
        m.finish();
    }
}

/// The leg a file is passed through to: a non-rotational one before a rotational one, and
/// among equal legs the one the fewest passed-through files read; one leg file per inode
/// however many opens.
#[test]
fn the_passed_through_leg_is_chosen_and_shared() {
    require_fuse!();
    let dirs = TestDirs::new(2);
    let legs = format!(
        "{}=rot:{}=nonrot",
        path_str(&dirs.legs[0]),
        path_str(&dirs.legs[1])
    );
    let mnt = dirs.mnt.clone();
    let m = mount_with_args(
        dirs,
        vec![legs.into(), mnt.into(), "-o".into(), PT.join(",").into()],
    );
    write_released(&m, "f", b"on the fast leg");
    let opens: Vec<fs::File> = (0..5)
        .map(|_| fs::File::open(m.path("f")).unwrap())
        .collect();
    assert_eq!(read_all(&m.path("f")), b"on the fast leg");
    assert_eq!(
        daemon_open_fds_on(&m, "f"),
        vec![0, 1],
        "six opens of f: one leg file, on the non-rotational leg1"
    );
    drop(opens);
    m.finish();

    // Equal legs: a second file goes to the other leg.
    let m = TestMirror::new(2).options(&PT).mount();
    write_released(&m, "a", b"a");
    write_released(&m, "b", b"b");
    let fa = fs::File::open(m.path("a")).unwrap();
    let fb = fs::File::open(m.path("b")).unwrap();
    let (ha, hb) = (daemon_open_fds_on(&m, "a"), daemon_open_fds_on(&m, "b"));
    assert_eq!(ha.iter().sum::<usize>(), 1, "{ha:?}");
    assert_eq!(hb.iter().sum::<usize>(), 1, "{hb:?}");
    assert_ne!(ha, hb, "both files on one leg");
    drop((fa, fb));
    m.finish();
}

/// A writer arriving while the file is open by passthrough is refused (ETXTBSY), truncating
/// opens too, until the readers close; a writer first makes later readers go through the
/// daemon, so its shared writable mapping reaches every leg. The legs stay identical.
#[test]
fn writers_and_passed_through_readers() {
    require_fuse!();
    require_tool!("getfattr");
    let mut m = TestMirror::new(2).options(&PT).mount();
    let data = pattern(256 * 1024, 9);
    write_released(&m, "f", &data);
    let reader = fs::File::open(m.path("f")).unwrap();
    for (what, o) in [
        (
            "O_RDWR",
            fs::OpenOptions::new().read(true).write(true).clone(),
        ),
        (
            "O_WRONLY|O_TRUNC",
            fs::OpenOptions::new().write(true).truncate(true).clone(),
        ),
        ("O_APPEND", fs::OpenOptions::new().append(true).clone()),
    ] {
        let e = o.open(m.path("f")).expect_err(what);
        assert_eq!(e.raw_os_error(), Some(libc::ETXTBSY), "{what}: {e}");
    }
    assert_bytes_eq(&read_all(&m.path("f")), &data, "nothing changed");
    drop(reader);

    // The readers have closed: a writer opens, and readers now go through the daemon.
    let mut w = open_once_released(fs::OpenOptions::new().read(true).write(true), &m.path("f"));
    let r = fs::File::open(m.path("f")).unwrap();
    w.write_all(b"written first").unwrap();
    let mut map = SharedMap::new(&w, 4096);
    map.bytes()[100..108].copy_from_slice(b"MAPPED!!");
    map.sync();
    drop(map);
    drop(w);
    let mut want = data.clone();
    want[..13].copy_from_slice(b"written first");
    want[100..108].copy_from_slice(b"MAPPED!!");
    assert_bytes_eq(&pread_all(&r), &want, "a reader opened after the writer");
    drop(r);
    assert_content_on_legs(m.legs(), "f", &want);
    m.check_and_unmount();
}

/// The leg files are passed through to fails while a file is open on it: that open keeps
/// reading it (the kernel holds it; its data is what it was, since nothing may write the
/// file meanwhile); a new open of the file while it is still open is passed through with
/// direct I/O, so its reads come to the daemon and are served from the other leg; once all
/// are closed, opens pass through to the other leg.
#[test]
fn a_passed_through_leg_that_fails() {
    require_fuse!();
    require_tool!("getfattr");
    require_tool!("setfattr");
    let mut opts = PT.to_vec();
    opts.push("fault_injection");
    let m = TestMirror::new(2).options(&opts).mount();
    let data = pattern(MIB, 21);
    write_released(&m, "f", &data);
    let old = fs::File::open(m.path("f")).unwrap();
    assert_eq!(
        daemon_open_fds_on(&m, "f"),
        vec![1, 0],
        "f is passed through to leg0"
    );
    // A write error drops leg0.
    fs::write(m.path("g"), b"x").unwrap();
    setfattr_ok(&m.path("g"), FAULT, "leg=leg0 op=write errno=EIO");
    fs::write(m.path("g"), b"y").unwrap();
    assert_eq!(stats(m.mnt()).legs[0].state, LegState::Failed);
    assert_bytes_eq(&pread_all(&old), &data, "the open passed through to leg0");
    drop_all_caches();
    let before = read_ops(m.mnt());
    let new = fs::File::open(m.path("f")).unwrap();
    assert_bytes_eq(
        &pread_all(&new),
        &data,
        "a new open while the old one is open",
    );
    let after = read_ops(m.mnt());
    assert!(
        after[1] > before[1],
        "served by the daemon from leg1: {before:?} -> {after:?}"
    );
    drop((old, new));
    // Once both are released, nothing holds leg0's copy open.
    assert!(
        wait_for(std::time::Duration::from_secs(10), || daemon_open_fds_on(
            &m, "f"
        ) == vec![0, 0]),
        "still held: {:?}",
        daemon_open_fds_on(&m, "f")
    );
    let again = fs::File::open(m.path("f")).unwrap();
    assert_eq!(
        daemon_open_fds_on(&m, "f"),
        vec![0, 1],
        "now passed through to leg1"
    );
    drop_all_caches();
    let before = read_ops(m.mnt());
    assert_bytes_eq(&pread_all(&again), &data, "passed through to leg1");
    assert_eq!(read_ops(m.mnt()), before, "reads passed through to leg1");
    drop(again);
    // (leg0 stays out of the mirror: the legs differ until it is added back.)
    let mut m = m;
    m.unmount();
}
