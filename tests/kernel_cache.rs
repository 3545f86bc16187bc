//! What the kernel caches (`-o cache=`, issue 12) and how it is kept exact. Under the default
//! `cache=full` the kernel keeps attributes, names (present and absent), data and listings;
//! whatever mirrorfs changes behind its back reaches it as a notice: a scrub repair of data
//! the kernel holds, a name a scrub repair creates, the attributes after the metadata leg
//! changes. `cache=shared` sees what other programs write on the legs within about a second,
//! and `cache=off` at once.

#[macro_use]
mod common;

use common::*;
use mirrorfs::stats::LegState;
use std::fs;
use std::io::{Read, Seek};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// Writes `data` over the file `p` on a leg, in place, keeping its size and times.
fn overwrite_keeping_times(p: &Path, data: &[u8]) {
    let before = fs::metadata(p).unwrap();
    fs::write(p, data).unwrap();
    let f = fs::File::options().write(true).open(p).unwrap();
    f.set_times(
        fs::FileTimes::new()
            .set_modified(before.modified().unwrap())
            .set_accessed(before.accessed().unwrap()),
    )
    .unwrap();
}

/// Waits up to `limit` for `check` to hold; the time it took.
fn within(limit: Duration, mut check: impl FnMut() -> bool) -> Option<Duration> {
    let t = Instant::now();
    loop {
        if check() {
            return Some(t.elapsed());
        }
        if t.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The kernel holds the data read from leg0 (read_policy=first, no checksums to say which copy
/// is right); `scrub --repair=leg1` overwrites that copy; the next read through the mount, with
/// no cache dropped, returns the repaired bytes: the scrub told the kernel.
#[test]
fn a_scrub_repair_reaches_the_data_the_kernel_holds() {
    require_fuse!();
    require_tool!("getfattr");
    let m = TestMirror::new(2)
        .option("checksum=off,read_policy=first")
        .mount();
    let mnt = m.mnt().to_path_buf();
    let good = pattern(256 * 1024, 5);
    let bad = pattern(256 * 1024, 6);
    fs::write(m.path("f"), &good).unwrap();
    overwrite_keeping_times(&m.leg(0).join("f"), &bad);
    drop_cached_pages(&m.path("f"));
    assert!(
        fs::read(m.path("f")).unwrap() == bad,
        "reads should come from leg0"
    );
    // Kept: under cache=full the next open keeps what the kernel read.
    overwrite_keeping_times(&m.leg(0).join("f"), &pattern(256 * 1024, 7));
    assert!(
        fs::read(m.path("f")).unwrap() == bad,
        "cache=full: a second open should be answered from the kernel's cache"
    );
    overwrite_keeping_times(&m.leg(0).join("f"), &bad);

    scrub_repairs_one(&mnt, "--repair=leg1");
    assert_content_on_legs(m.legs(), "f", &good);
    let seen = within(Duration::from_secs(5), || {
        fs::read(m.path("f")).unwrap() == good
    });
    assert!(
        seen.is_some(),
        "after the repair the mount still shows the overwritten copy"
    );
    m.finish();
}

/// A name the kernel knows to be absent, created on leg0 by a scrub repair from leg1, is found
/// through the mount at once.
#[test]
fn a_name_a_scrub_repair_creates_is_seen() {
    require_fuse!();
    require_tool!("getfattr");
    let m = TestMirror::new(2).option("checksum=off").mount();
    let mnt = m.mnt().to_path_buf();
    fs::create_dir(m.path("d")).unwrap();
    for _ in 0..2 {
        assert!(fs::symlink_metadata(m.path("d/new")).is_err());
    }
    fs::write(m.leg(1).join("d/new"), b"made behind the mount").unwrap();
    // Only leg1 holds it; the metadata leg (leg0) does not: still absent.
    assert!(fs::symlink_metadata(m.path("d/new")).is_err());

    mirrorfs_ok(&[&"scrub", &"start", &mnt, &"--repair=leg1"]);
    let doc = wait_scrubbed(&mnt);
    assert_eq!(doc["repaired"].as_u64(), Some(1), "{doc}");
    assert!(m.leg(0).join("d/new").exists());
    let seen = within(Duration::from_secs(5), || m.path("d/new").exists());
    assert!(
        seen.is_some(),
        "the repaired name stays hidden by the kernel's cache"
    );
    assert_eq!(fs::read(m.path("d/new")).unwrap(), b"made behind the mount");
    m.finish();
}

/// When leg0, the metadata leg, is dropped, the attributes the mount shows become leg1's at
/// once: its copy's ctime, not the cached one of leg0's copy.
#[test]
fn attributes_follow_a_new_metadata_leg() {
    require_fuse!();
    require_tool!("getfattr");
    require_tool!("setfattr");
    let mut m = TestMirror::new(2).option("fault_injection").mount();
    let mnt = m.mnt().to_path_buf();
    fs::write(m.path("f"), b"data").unwrap();
    let shown = fs::symlink_metadata(m.path("f")).unwrap();
    let leg0 = fs::symlink_metadata(m.leg(0).join("f")).unwrap();
    assert_eq!(
        (shown.ctime(), shown.ctime_nsec()),
        (leg0.ctime(), leg0.ctime_nsec())
    );
    // Give leg1's copy a ctime of its own.
    std::thread::sleep(Duration::from_millis(20));
    let mode: fs::Permissions = std::os::unix::fs::PermissionsExt::from_mode(0o644);
    fs::set_permissions(m.leg(1).join("f"), mode).unwrap();
    let leg1 = fs::symlink_metadata(m.leg(1).join("f")).unwrap();
    assert_ne!(
        (leg1.ctime(), leg1.ctime_nsec()),
        (leg0.ctime(), leg0.ctime_nsec())
    );
    // Still leg0's: cached.
    let again = fs::symlink_metadata(m.path("f")).unwrap();
    assert_eq!(
        (again.ctime(), again.ctime_nsec()),
        (leg0.ctime(), leg0.ctime_nsec())
    );

    setfattr_ok(&mnt.join(".mirrorfs"), FAULT, "leg=leg0 op=write errno=EIO");
    let _ = fs::write(m.path("g"), b"drops leg0");
    assert_eq!(stats(&mnt).legs[0].state, LegState::Failed);
    let seen = within(Duration::from_secs(5), || {
        let now = fs::symlink_metadata(m.path("f")).unwrap();
        (now.ctime(), now.ctime_nsec()) == (leg1.ctime(), leg1.ctime_nsec())
    });
    assert!(seen.is_some(), "the mount still shows leg0's attributes");
    setfattr_ok(&mnt.join(".mirrorfs"), FAULT, "clear");
    m.unmount();
}

/// What other programs write on the legs: `cache=shared` shows it within about a second (data
/// after the attribute timeout, a new name at once as absent names are not kept); `cache=off`
/// at once; `cache=full` keeps a name it knows to be absent (what the docs warn of).
#[test]
fn shared_and_off_see_changes_made_on_the_legs() {
    require_fuse!();
    for (mode, limit) in [("shared", Duration::from_secs(3)), ("off", Duration::ZERO)] {
        let m = TestMirror::new(2)
            .option(&format!("cache={mode},checksum=off"))
            .mount();
        fs::write(m.path("f"), b"one").unwrap();
        assert_eq!(fs::read(m.path("f")).unwrap(), b"one");
        assert!(!m.path("new").exists());
        for l in m.legs() {
            fs::write(l.join("f"), b"two!").unwrap();
            fs::write(l.join("new"), b"x").unwrap();
        }
        let seen = within(limit, || fs::read(m.path("f")).unwrap() == b"two!");
        assert!(
            seen.is_some(),
            "cache={mode}: a change on the legs is not seen in {limit:?}"
        );
        assert!(
            m.path("new").exists(),
            "cache={mode}: a name made on the legs is not seen"
        );
        // Put the legs back as the mirror left them (the times differ by leg now).
        fs::write(m.path("f"), b"one").unwrap();
        fs::remove_file(m.path("new")).unwrap();
        m.finish();
    }
    let m = TestMirror::new(2).mount();
    assert!(!m.path("new").exists());
    for l in m.legs() {
        fs::write(l.join("new"), b"x").unwrap();
    }
    assert!(
        !m.path("new").exists(),
        "cache=full keeps the name it knows to be absent"
    );
    for l in m.legs() {
        fs::remove_file(l.join("new")).unwrap();
    }
    m.finish();
}

/// A read-only open costs the daemon no leg descriptor until it reads through the daemon:
/// files read again from the kernel's cache are served without one, and the first read that
/// reaches the daemon opens the leg it reads (and only that one).
#[test]
fn a_read_only_open_opens_a_leg_only_when_it_reads() {
    require_fuse!();
    let m = TestMirror::new(2).option("read_policy=first").mount();
    let data = pattern(300_000, 5);
    fs::write(m.path("f"), &data).unwrap();
    assert_eq!(fs::read(m.path("f")).unwrap(), data, "cached now");
    // The kernel sends RELEASE after close() returns: wait until the daemon let go of the
    // descriptors of that write and read (its `O_PATH` ones are not counted).
    assert!(
        wait_for(Duration::from_secs(10), || daemon_open_fds_on(&m, "f")
            == vec![0, 0]),
        "the daemon still holds f open: {:?}",
        daemon_open_fds_on(&m, "f")
    );
    let mut held = Vec::new();
    for _ in 0..20 {
        let mut f = fs::File::open(m.path("f")).unwrap();
        let mut got = Vec::new();
        f.read_to_end(&mut got).unwrap();
        assert_eq!(got, data);
        held.push(f);
    }
    assert_eq!(
        daemon_open_fds_on(&m, "f"),
        vec![0, 0],
        "20 read-only opens answered from the cache took leg descriptors"
    );
    drop_cached_pages(&m.path("f"));
    let mut got = Vec::new();
    held[0].seek(std::io::SeekFrom::Start(0)).unwrap();
    held[0].read_to_end(&mut got).unwrap();
    assert_eq!(got, data);
    assert_eq!(
        daemon_open_fds_on(&m, "f"),
        vec![1, 0],
        "a read through the daemon opens the leg it reads"
    );
    drop(held);
    m.finish();
}

/// Under `cache=full` directories are listed without OPENDIR (the kernel's zero-message
/// opendir): the daemon keeps each pass's listing under a generation carried in the offsets.
/// A listing of 3,000 names takes many READDIRs, and another process creating and removing
/// names meanwhile restarts other passes; every pass must still see each of the 3,000 exactly
/// once. A pass that went on in a newer listing by position would skip or repeat names.
#[test]
fn listings_stay_whole_while_the_directory_changes() {
    require_fuse!();
    let m = TestMirror::new(2).mount();
    let dir = m.path("big");
    fs::create_dir(&dir).unwrap();
    let stable: std::collections::BTreeSet<String> = (0..3000)
        .map(|i| format!("stable-name-long-enough-to-fill-pages-{i:05}"))
        .collect();
    for n in &stable {
        fs::write(dir.join(n), b"").unwrap();
    }
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let churn = s.spawn(|| {
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let p = dir.join(format!("churn-{}", i % 50));
                let _ = fs::write(&p, b"x");
                if i.is_multiple_of(3) {
                    let _ = fs::remove_file(&p);
                }
                i += 1;
            }
            i
        });
        let passes = || -> Result<(), String> {
            for pass in 0..30 {
                let mut seen = std::collections::BTreeMap::<String, u32>::new();
                for e in fs::read_dir(&dir).map_err(|e| e.to_string())? {
                    let name = e.map_err(|e| e.to_string())?.file_name();
                    *seen.entry(name.to_string_lossy().into_owned()).or_default() += 1;
                }
                let twice: Vec<_> = seen.iter().filter(|(_, &c)| c > 1).collect();
                if !twice.is_empty() {
                    return Err(format!("pass {pass}: names listed twice: {twice:?}"));
                }
                let missing: Vec<_> = stable.iter().filter(|n| !seen.contains_key(*n)).collect();
                if !missing.is_empty() {
                    return Err(format!("pass {pass}: {} names missed", missing.len()));
                }
            }
            Ok(())
        };
        let result = passes();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let changes = churn.join().unwrap();
        result.unwrap();
        assert!(changes > 30, "the directory changed {changes} times only");
    });
    let names = |p: &Path| -> std::collections::BTreeSet<_> {
        fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect()
    };
    assert_eq!(names(&dir), names(&m.leg(0).join("big")));
    assert_eq!(names(&dir), names(&m.leg(1).join("big")));
    m.finish();
}
