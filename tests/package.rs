//! Packages (issue 14, item 9): `make install` and `make uninstall` (into a DESTDIR) install and
//! remove the same set of files, leaving nothing; the .deb (`make deb-package`, what `make deb`
//! runs after the release build, through cargo-deb) holds exactly the files `make install-files`
//! installs under /usr (and the copyright file), has no maintainer scripts, installs on this
//! machine, mounts through an fstab line of type
//! `mirrorfs` with `nofail` (mount(8) runs its mount.mirrorfs), serves and answers the stats,
//! unmounts through its umount.fuse.mirrorfs (which waits for the daemon) in 20 rounds of
//! `umount MNT` followed at once by the unmount of each leg's disk, and purges leaving nothing. Both use the binary this test run built.

#[macro_use]
mod common;

use common::*;
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `make ARGS...` in the repository, which must succeed.
#[track_caller]
fn make(args: &[String]) {
    let out = run_timeout(
        Command::new("make")
            .arg("--no-print-directory")
            .args(args)
            .current_dir(repo()),
        Duration::from_secs(300),
    );
    assert_exit_code(&out, 0, &format!("make {args:?}"));
}

#[track_caller]
fn assert_exit_code(out: &std::process::Output, code: i32, what: &str) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{what}\nstdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// Every file and symlink under `root` (not the directories), relative.
fn files(root: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if fs::symlink_metadata(&p).unwrap().is_dir() {
                dirs.push(p);
            } else {
                out.insert(p.strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    out
}

#[test]
fn make_install_then_uninstall_leaves_nothing() {
    require_tool!("make");
    let dest = tempfile::tempdir().unwrap();
    let destdir = format!("DESTDIR={}", dest.path().display());
    make(&[
        "install-files".into(),
        format!("BIN={}", mirrorfs_bin()),
        destdir.clone(),
    ]);
    let got = files(dest.path());
    for want in [
        "usr/local/sbin/mirrorfs",
        "sbin/mount.mirrorfs",
        "sbin/umount.fuse.mirrorfs",
        "sbin/umount.mirrorfs",
        "usr/local/share/man/man8/mirrorfs.8",
        "usr/local/share/man/man8/mirrorfs-status.8",
        "usr/local/share/bash-completion/completions/mirrorfs",
        "usr/local/share/zsh/vendor-completions/_mirrorfs",
        "usr/local/share/fish/vendor_completions.d/mirrorfs.fish",
        "usr/local/lib/systemd/system/mirrorfs@.service",
        "usr/local/lib/systemd/system/mirrorfs-scrub@.timer",
        "usr/local/lib/systemd/system/mirrorfs-metrics.timer",
    ] {
        assert!(
            got.contains(Path::new(want)),
            "{want} not installed: {got:#?}"
        );
    }
    assert_eq!(
        fs::read_link(dest.path().join("sbin/umount.fuse.mirrorfs")).unwrap(),
        Path::new("/usr/local/sbin/mirrorfs")
    );
    make(&["uninstall".into(), destdir]);
    let left = files(dest.path());
    assert!(left.is_empty(), "make uninstall left {left:#?}");
}

fn package_installed() -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", "mirrorfs"])
        .output()
        .is_ok_and(|o| text(&o.stdout).contains("install ok installed"))
}

/// What `make install-files` installs under /usr as the .deb lays it out (helpers in /usr/sbin,
/// units in /usr/lib/systemd/system), man pages gzipped as Debian wants them: absolute paths.
fn install_files_under_usr() -> BTreeSet<PathBuf> {
    let dest = tempfile::tempdir().unwrap();
    make(&[
        "install-files".into(),
        format!("BIN={}", mirrorfs_bin()),
        format!("DESTDIR={}", dest.path().display()),
        "PREFIX=/usr".into(),
        "UMOUNT_HELPER_DIR=/usr/sbin".into(),
        "SYSTEMD_UNIT_DIR=/usr/lib/systemd/system".into(),
    ]);
    files(dest.path())
        .into_iter()
        .map(|p| {
            let p = Path::new("/").join(p);
            if p.extension().is_some_and(|x| x == "8") {
                p.with_extension("8.gz")
            } else {
                p
            }
        })
        .collect()
}

#[test]
fn deb_installs_mounts_from_fstab_and_purges_clean() {
    require_fuse!();
    require_tool!("dpkg-deb");
    require_tool!("make");
    require_tool!("cargo-deb");
    if package_installed() {
        cannot_run("a mirrorfs package is already installed here; this test would replace it");
        return;
    }
    let out_dir = tempfile::tempdir().unwrap();
    make(&[
        "deb-package".into(),
        format!("BIN={}", mirrorfs_bin()),
        format!("DEB_OUT={}", out_dir.path().display()),
        // (xz takes most of a minute on the debug binary: a test need not wait for it.)
        "DEB_COMPRESS=gz".into(),
    ]);
    let deb = fs::read_dir(out_dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .expect("a .deb");
    assert_eq!(
        deb.file_name().unwrap().to_string_lossy(),
        format!(
            "mirrorfs_{}_{}.deb",
            env!("CARGO_PKG_VERSION"),
            text(&run("dpkg", &[&"--print-architecture"], TOOL_TIMEOUT).stdout).trim()
        )
    );
    let info = run("dpkg-deb", &[&"-f", &deb, &"Depends"], TOOL_TIMEOUT);
    assert!(
        text(&info.stdout).contains("fuse3"),
        "{}",
        text(&info.stdout)
    );
    // No maintainer script: nothing enables, starts or restarts a unit (a restart on an
    // upgrade would unmount a live mirror).
    let control = text(
        &run(
            "sh",
            &[
                &"-c",
                &format!("dpkg-deb --ctrl-tarfile '{}' | tar -t", deb.display()),
            ],
            TOOL_TIMEOUT,
        )
        .stdout,
    );
    let members: Vec<&str> = control
        .lines()
        .map(|l| l.trim_start_matches("./"))
        .filter(|l| !l.is_empty())
        .collect();
    assert!(members.contains(&"control"), "{control}");
    for script in [
        "preinst", "postinst", "prerm", "postrm", "config", "triggers",
    ] {
        assert!(
            !members.contains(&script),
            "a {script} in the .deb: {members:?}"
        );
    }
    let listing = text(&run("dpkg-deb", &[&"-c", &deb], TOOL_TIMEOUT).stdout);
    // (is a directory, path) for every entry.
    let entries: Vec<(bool, PathBuf)> = listing
        .lines()
        .filter_map(|l| {
            let p = l.split_whitespace().nth(5)?;
            Some((l.starts_with('d'), PathBuf::from(p.trim_start_matches('.'))))
        })
        .collect();
    for want in [
        "/usr/sbin/mirrorfs",
        "/usr/sbin/mount.mirrorfs",
        "/usr/sbin/umount.fuse.mirrorfs",
        "/usr/share/man/man8/mirrorfs.8.gz",
        "/usr/share/bash-completion/completions/mirrorfs",
        "/usr/lib/systemd/system/mirrorfs@.service",
    ] {
        assert!(
            entries.iter().any(|(dir, p)| !dir && p == Path::new(want)),
            "{want} not in the .deb:\n{listing}"
        );
    }
    // Exactly what make install-files installs (the two lists are kept in step by this), and
    // the copyright file every .deb has.
    let in_deb: BTreeSet<PathBuf> = entries
        .iter()
        .filter(|(dir, _)| !dir)
        .map(|(_, p)| p.clone())
        .collect();
    let mut want = install_files_under_usr();
    want.insert("/usr/share/doc/mirrorfs/copyright".into());
    assert_eq!(in_deb, want, "the .deb against make install-files");
    // The packaged binary is the one under test, byte for byte; the helpers are links to it.
    let unpacked = out_dir.path().join("unpacked");
    let out = run("dpkg-deb", &[&"-x", &deb, &unpacked], TOOL_TIMEOUT);
    assert_exit_code(&out, 0, "dpkg-deb -x");
    assert!(
        fs::read(unpacked.join("usr/sbin/mirrorfs")).unwrap() == fs::read(mirrorfs_bin()).unwrap(),
        "the .deb does not hold the binary under test"
    );
    for helper in ["mount.mirrorfs", "umount.fuse.mirrorfs", "umount.mirrorfs"] {
        let link = fs::read_link(unpacked.join("usr/sbin").join(helper)).unwrap();
        assert!(
            link == Path::new("mirrorfs") || link == Path::new("/usr/sbin/mirrorfs"),
            "{helper} -> {}",
            link.display()
        );
    }
    // Files and symlinks (not directories) the package owns: all gone after the purge.
    let owned: Vec<PathBuf> = entries
        .into_iter()
        .filter(|(dir, _)| !dir)
        .map(|(_, p)| p)
        .collect();

    let out = run("dpkg", &[&"-i", &deb], Duration::from_secs(120));
    assert_exit_code(&out, 0, "dpkg -i");
    let purge = || {
        let out = run("dpkg", &[&"--purge", &"mirrorfs"], Duration::from_secs(120));
        assert_exit_code(&out, 0, "dpkg --purge mirrorfs");
    };
    let check = std::panic::catch_unwind(|| {
        assert!(package_installed());
        // An fstab line of type mirrorfs (not fuse.mirrorfs), with nofail: mount(8) runs
        // /sbin/mount.mirrorfs.
        let d = TestDirs::new(2);
        let fstab = d.root().join("fstab");
        fs::write(
            &fstab,
            format!(
                "{} {} mirrorfs nofail,allow_other,read_policy=first 0 0\n",
                d.legs_arg(),
                d.mnt.display()
            ),
        )
        .unwrap();
        let out = run("mount", &[&"-T", &fstab, &d.mnt], Duration::from_secs(60));
        assert_exit_code(&out, 0, "mount -T FSTAB MNT (type mirrorfs)");
        let entry = mount_entry_at(&d.mnt).expect("mounted");
        assert_eq!(entry.fstype, "fuse.mirrorfs");
        let pids = daemon_pids(&d.mnt);
        fs::write(d.mnt.join("f"), b"from the package").unwrap();
        assert_content_on_legs(&d.legs, "f", b"from the package");
        // The installed binary reads the stats.
        let out = run(
            "/usr/sbin/mirrorfs",
            &[&"status", &"--json", &d.mnt],
            TOOL_TIMEOUT,
        );
        assert_exit_code(&out, 0, "/usr/sbin/mirrorfs status --json");
        let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(st["read_policy"], "first");
        assert_eq!(st["legs_online"], 2);
        // umount(8) runs the package's umount.fuse.mirrorfs, which waits for the daemon.
        let out = run("umount", &[&d.mnt], Duration::from_secs(60));
        assert_exit_code(&out, 0, "umount MNT");
        assert!(
            pids.iter().all(|p| !process_alive(*p)),
            "the daemon {pids:?} still runs when umount returned"
        );
        assert_eq!(superblock(&d.legs[0])["clean"], true);

        // With the package's helper in place, 20 rounds of writes, `umount MNT` (util-linux,
        // plain) and at once the unmount of each leg's disk (a bind mount, busy while the
        // daemon holds any descriptor in it): every disk unmount succeeds at the first try,
        // and the next mount finds clean superblocks.
        let disks: Vec<PathBuf> = (0..2).map(|i| d.root().join(format!("disk{i}"))).collect();
        for (disk, leg) in disks.iter().zip(&d.legs) {
            // The mirror so far moves onto the disks.
            let out = run("cp", &[&"-a", &leg.join("."), &disk], TOOL_TIMEOUT);
            assert_exit_code(&out, 0, "cp -a leg disk");
        }
        for round in 0..20u64 {
            for (disk, leg) in disks.iter().zip(&d.legs) {
                let out = run("mount", &[&"--bind", &disk, &leg], TOOL_TIMEOUT);
                assert_exit_code(&out, 0, "mount --bind disk leg");
                assert_eq!(superblock(leg)["clean"], true, "round {round}: not clean");
            }
            let out = run("mount", &[&"-T", &fstab, &d.mnt], Duration::from_secs(60));
            assert_exit_code(&out, 0, &format!("round {round}: mount -T"));
            fs::write(d.mnt.join(format!("r{round}")), pattern(MIB, round)).unwrap();
            let out = run("umount", &[&d.mnt], Duration::from_secs(60));
            assert_exit_code(&out, 0, &format!("round {round}: umount MNT"));
            for leg in &d.legs {
                umount2(leg, 0).unwrap_or_else(|e| {
                    let _ = umount2(leg, libc::MNT_DETACH);
                    panic!("round {round}: umount {} right after: {e}", leg.display())
                });
            }
        }
        for disk in &disks {
            assert_eq!(superblock(disk)["clean"], true);
            assert_eq!(fs::read(disk.join("r19")).unwrap(), pattern(MIB, 19));
        }
    });
    purge();
    if let Err(e) = check {
        std::panic::resume_unwind(e);
    }
    assert!(!package_installed(), "still installed after the purge");
    let left: Vec<&PathBuf> = owned
        .iter()
        .filter(|p| fs::symlink_metadata(p).is_ok())
        .collect();
    assert!(left.is_empty(), "the purge left {left:#?}");
}
