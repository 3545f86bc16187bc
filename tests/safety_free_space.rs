//! Never lose data (issue 3): a leg that fills up. The free-space reserve keeps the legs
//! identical and the caller gets ENOSPC; without a reserve data still fails before any leg is
//! written; the small leg, dropped once its own filesystem is full, is added back (`mirrorfs leg
//! add`) after its tmpfs grows, and the legs end identical.

#[macro_use]
mod common;

use common::*;
use mirrorfs::stats::{LegState, MountState};
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;
use std::time::Duration;

/// Files written while filling the legs: name, content seed, bytes the caller was told are
/// written.
struct Filled {
    files: Vec<(String, u64, usize)>,
}

const FILL_FILE: usize = 4 * MIB;
const FILL_CHUNK: usize = 256 * KIB;

impl Filled {
    fn total(&self) -> usize {
        self.files.iter().map(|f| f.2).sum()
    }

    /// Writes files `{prefix}{i}` of 4 MiB, 256 KiB per `write(2)`, until an open or a write
    /// fails; returns that error. A write may be cut short (the kernel sends it to mirrorfs in
    /// pieces, and only the last pieces may not fit): the rest is written again, as `write_all`
    /// does, so the error is the one the last piece got.
    fn fill(&mut self, mnt: &Path, prefix: &str, seed: u64) -> io::Error {
        for i in 0..1000u64 {
            let name = format!("{prefix}{i}");
            let mut f = match File::create(mnt.join(&name)) {
                Ok(f) => f,
                Err(e) => return e,
            };
            let content = pattern(FILL_FILE, seed + i);
            self.files.push((name, seed + i, 0));
            for chunk in content.chunks(FILL_CHUNK) {
                let mut rest = chunk;
                while !rest.is_empty() {
                    match f.write(rest) {
                        Ok(0) => panic!("write returned 0"),
                        Ok(k) => {
                            self.files.last_mut().unwrap().2 += k;
                            rest = &rest[k..];
                        }
                        Err(e) => return e,
                    }
                }
            }
        }
        panic!("wrote 1000 files of 4 MiB without an error");
    }

    /// Every byte the caller was told is written is in `rel` on `leg` (exactly that many bytes
    /// when `exact`).
    #[track_caller]
    fn assert_on_leg(&self, leg: &Path, exact: bool) {
        for (name, seed, len) in &self.files {
            let got = fs::read(leg.join(name))
                .unwrap_or_else(|e| panic!("read {}: {e}", leg.join(name).display()));
            let want = pattern(FILL_FILE, *seed);
            if exact {
                assert_eq!(got.len(), *len, "size of {name} on {}", leg.display());
            } else {
                assert!(got.len() >= *len, "{name} on {} lost data", leg.display());
            }
            assert_bytes_eq(
                &got[..*len],
                &want[..*len],
                &format!("{name} on {}", leg.display()),
            );
        }
    }
}

fn avail(p: &Path) -> u64 {
    let s = statvfs(p).unwrap();
    s.f_bavail * s.f_frsize
}

/// Two legs on tmpfs of 64 MiB and 32 MiB with an 8 MiB reserve: writes fail with ENOSPC once
/// the small leg would cross its reserve, before any leg is written, so both legs stay in the
/// mirror and identical (a file cut short by ENOSPC too).
///
/// With the reserve set to 0 live, data writes still fail with ENOSPC before any leg is written
/// once a write no longer fits on the small leg (the check is "free space minus this write
/// stays above the reserve", and the reserve is 0): the small leg fills to the last few pages,
/// both legs stay in and identical.
///
/// The small leg's filesystem itself says ENOSPC only for what the check lets through: long
/// symlinks (a page each on tmpfs, checked as needing 0 bytes). Then the small leg fails an
/// operation the big one completed: it is the odd one out and is dropped (DEGRADED), the
/// caller sees no error, and the big leg keeps every byte the caller was told is written and
/// takes writes until it is full itself (the last leg is never dropped: the caller gets
/// ENOSPC).
///
/// Then space is freed and the small leg grows: `mirrorfs leg add` resyncs it online, and the
/// legs are identical again.
#[test]
fn a_leg_fills_up() {
    require_fuse!();
    require_tool!("getfattr");
    require_tool!("setfattr");
    let mut dirs = TestDirs::new(2);
    dirs.mount_tmpfs_leg(0, "64m");
    dirs.mount_tmpfs_leg(1, "32m");
    let mut m = TestMirror::new(2)
        .with_dirs(dirs)
        .option("minfreespace=8M")
        .mount();
    let mnt = m.mnt().to_path_buf();
    assert_eq!(
        getfattr_ok(&mnt.join(".mirrorfs"), "user.mirrorfs.minfreespace"),
        (8 * MIB).to_string()
    );

    // --- Phase 1: the reserve.
    let mut phase1 = Filled { files: Vec::new() };
    let err = phase1.fill(&mnt, "fill", 1000);
    assert_eq!(
        errno_of(&err),
        libc::ENOSPC,
        "filling the mirror: {err} after {} bytes",
        phase1.total()
    );
    let total = phase1.total();
    assert!(
        (16 * MIB..=24 * MIB).contains(&total),
        "{total} bytes written before ENOSPC: the 32 MiB leg with an 8 MiB reserve should \
         take 16-24 MiB"
    );
    assert!(
        avail(m.leg(1)) >= 8 * MIB as u64,
        "the small leg crossed its reserve: {} bytes free",
        avail(m.leg(1))
    );
    // Writing on fails with ENOSPC at once: the kernel sends a write in pieces, and a piece
    // smaller than the one refused may still fit, but not a whole 256 KiB write.
    let before = phase1.total();
    let err = phase1.fill(&mnt, "again", 1500);
    assert_eq!(
        errno_of(&err),
        libc::ENOSPC,
        "writing on past the reserve: {err}"
    );
    assert!(
        phase1.total() - before < FILL_CHUNK,
        "{} more bytes written past the reserve",
        phase1.total() - before
    );
    let st = stats(&mnt);
    assert_eq!((st.state, st.legs_online), (MountState::Online, 2));
    for l in &st.legs {
        assert_eq!((l.state, l.write_errors), (LegState::InSync, 0), "{l:?}");
    }
    let (code, report) = status(&mnt);
    assert_eq!(
        code,
        Some(0),
        "status after ENOSPC by the reserve:\n{report}"
    );
    // The file cut short by ENOSPC is identical on both legs, with exactly the bytes written.
    for leg in m.legs() {
        phase1.assert_on_leg(leg, true);
    }
    assert_no_mirrorfs_leak(&mnt);
    assert_legs_identical(m.legs());

    // --- Phase 2: no reserve; data fills the small leg up to the last write that fits.
    setfattr_ok(&mnt.join(".mirrorfs"), "user.mirrorfs.minfreespace", "0");
    assert_eq!(
        getfattr_ok(&mnt.join(".mirrorfs"), "user.mirrorfs.minfreespace"),
        "0"
    );
    let small_free = avail(m.leg(1)) as usize;
    let err = phase1.fill(&mnt, "more", 2000);
    assert_eq!(
        errno_of(&err),
        libc::ENOSPC,
        "filling without a reserve: {err}"
    );
    assert!(
        avail(m.leg(1)) < MIB as u64,
        "ENOSPC with {} bytes free on the small leg (it had {small_free})",
        avail(m.leg(1))
    );
    let st = stats(&mnt);
    assert_eq!(
        (st.state, st.legs_online),
        (MountState::Online, 2),
        "{st:?}"
    );
    for leg in m.legs() {
        phase1.assert_on_leg(leg, true);
    }
    assert_legs_identical(m.legs());

    // --- Phase 3: the small leg's filesystem runs out of space under an operation.
    let target = "x/".repeat(1500);
    let mut links = 0;
    for i in 0..200 {
        std::os::unix::fs::symlink(&target, mnt.join(format!("link{i}")))
            .unwrap_or_else(|e| panic!("symlink link{i} through the mount: {e}"));
        links += 1;
    }
    let st = stats(&mnt);
    assert_eq!(
        (st.legs[0].state, st.legs[1].state),
        (LegState::InSync, LegState::Failed),
        "the small leg ran out of space: it is dropped, the big one serves: {st:?}"
    );
    assert_eq!((st.state, st.legs_online), (MountState::Degraded, 1));
    let (code, report) = status(&mnt);
    assert_eq!(
        code,
        Some(1),
        "status with the small leg dropped:\n{report}"
    );
    assert!(
        status_leg_line(&report, "leg1").contains("FAULTED"),
        "{report}"
    );
    let on_small = (0..links)
        .filter(|i| m.leg(1).join(format!("link{i}")).exists())
        .count();
    assert!(on_small < links, "every symlink fitted on the small leg");
    for i in 0..links {
        let rel = format!("link{i}");
        for root in [m.leg(0), mnt.as_path()] {
            assert_eq!(
                fs::read_link(root.join(&rel)).unwrap().as_os_str(),
                target.as_str(),
                "{rel} under {}",
                root.display()
            );
        }
    }
    // The big leg takes data on until it is full itself.
    let mut late = Filled { files: Vec::new() };
    let err = late.fill(&mnt, "late", 3000);
    assert_eq!(errno_of(&err), libc::ENOSPC, "filling the big leg: {err}");
    assert!(
        late.total() > 16 * MIB,
        "only {} bytes written after the small leg was dropped",
        late.total()
    );
    // No data lost on the surviving leg: every byte acknowledged, there and through the mount.
    phase1.assert_on_leg(m.leg(0), true);
    late.assert_on_leg(m.leg(0), true);
    phase1.assert_on_leg(&mnt, true);
    late.assert_on_leg(&mnt, true);
    // What the small leg held before it filled is intact.
    phase1.assert_on_leg(m.leg(1), true);

    // --- Phase 4: the small leg comes back. Space is freed through the mount (half of the late
    // files: deletes the small leg must reproduce) and the small leg's tmpfs grows; then
    // `mirrorfs leg add` resyncs it online from the big leg's away log.
    let mut kept = Filled { files: Vec::new() };
    let mut deleted = Vec::new();
    for (i, f) in late.files.iter().enumerate() {
        if i % 2 == 1 {
            fs::remove_file(mnt.join(&f.0)).unwrap();
            deleted.push(f.0.clone());
        } else {
            kept.files.push(f.clone());
        }
    }
    let out = run(
        "mount",
        &[&"-o", &"remount,size=128m", &m.leg(1)],
        Duration::from_secs(30),
    );
    assert!(
        out.status.success(),
        "growing the small leg's tmpfs: {}",
        text(&out.stderr)
    );
    assert!(avail(m.leg(1)) > 64 * MIB as u64, "the tmpfs did not grow");
    mirrorfs_ok(&[&"leg", &"add", &mnt, &"leg1"]);
    let st = wait_resynced(&mnt);
    assert_eq!(st.legs_online, 2, "{st:?}");
    for name in &deleted {
        assert!(
            !m.leg(1).join(name).exists(),
            "{name}, deleted while the small leg was out, is on it"
        );
    }
    for leg in m.legs() {
        phase1.assert_on_leg(leg, true);
        kept.assert_on_leg(leg, true);
    }
    assert_legs_identical(m.legs());
    m.unmount();
    assert_legs_identical(m.legs());
    // Every member is in sync: the next mount needs no resync.
    let _r = mount_ok(m.legs(), m.mnt(), &[]);
    let st = stats(m.mnt());
    assert_eq!(
        (st.state, st.legs_online),
        (MountState::Online, 2),
        "{st:?}"
    );
    assert!(st.resync.is_none(), "a resync at the next mount: {st:?}");
}
