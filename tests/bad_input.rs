//! Bad input on the command line (docs/cli-contract.md): exit status 1, one stderr line
//! `mirrorfs: ...` naming the problem, nothing mounted, no daemon left, and every leg
//! byte-for-byte unchanged (no `.mirrorfs` created). Plus the accepted forms.

#[macro_use]
mod common;

use common::*;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn os(s: impl Into<OsString>) -> OsString {
    s.into()
}

fn p2s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// Put the same small tree on a leg.
/// The same small tree on every leg it is called for, with fixed file mtimes: two writes of
/// one file on two legs can fall in different clock ticks, and the first mount compares mtimes.
fn populate(leg: &Path) {
    fs::create_dir_all(leg.join("dir/sub")).unwrap();
    let when = std::time::UNIX_EPOCH + Duration::from_secs(1_600_000_000);
    for (rel, data) in [("dir/file", &b"content"[..]), ("top", &b"top"[..])] {
        fs::write(leg.join(rel), data).unwrap();
        let f = fs::File::options().write(true).open(leg.join(rel)).unwrap();
        f.set_modified(when).unwrap();
    }
}

/// Run mirrorfs with `args`; assert the rejection contract. `watch` are the directories
/// that must stay byte-for-byte unchanged (legs, mount point...).
#[track_caller]
fn expect_rejected(args: &[OsString], phrases: &[&str], watch: &[PathBuf], mnt: Option<&Path>) {
    let before: Vec<BTreeMap<PathBuf, String>> = watch.iter().map(|p| snapshot_tree(p)).collect();
    let out = run_mirrorfs(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    // Whatever happens next, do not leave a mount behind.
    let mounted_dirs: Vec<PathBuf> = watch
        .iter()
        .map(|p| p.to_path_buf())
        .chain(mnt.map(Path::to_path_buf))
        .filter(|p| is_mounted(p))
        .collect();
    for p in &mounted_dirs {
        let _ = unmount_path(p);
    }
    assert!(
        mounted_dirs.is_empty(),
        "mirrorfs {args:?} mounted {mounted_dirs:?} despite bad input (stderr: {stderr:?})"
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "mirrorfs {args:?}: exit status {} (want 1), stderr: {stderr:?}",
        out.status
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "mirrorfs {args:?}: stderr should be exactly one line, got {stderr:?}"
    );
    assert!(
        lines[0].starts_with("mirrorfs: "),
        "stderr line does not start with 'mirrorfs: ': {:?}",
        lines[0]
    );
    for ph in phrases {
        assert!(
            lines[0].contains(ph),
            "stderr {:?} does not contain {ph:?} (args {args:?})",
            lines[0]
        );
    }
    if let Some(mnt) = mnt {
        let pids = daemon_pids(mnt);
        assert!(
            wait_pids_gone(&pids, Duration::from_secs(5)),
            "a mirrorfs process for {} is still running after the rejection: {pids:?}",
            mnt.display()
        );
    }
    for (p, b) in watch.iter().zip(before.iter()) {
        let a = snapshot_tree(p);
        assert_snapshot_eq(b, &a, &format!("{} (after mirrorfs {args:?})", p.display()));
    }
}

/// Legs + mount point, for the usual argument list.
fn watch_all(d: &TestDirs) -> Vec<PathBuf> {
    let mut v = d.legs.clone();
    v.push(d.mnt.clone());
    v
}

#[test]
fn unknown_option() {
    let d = TestDirs::new(2);
    populate(&d.legs[0]);
    populate(&d.legs[1]);
    expect_rejected(
        &[os(d.legs_arg()), os(&d.mnt), os("-o"), os("bogus")],
        &["unknown option 'bogus'"],
        &watch_all(&d),
        Some(&d.mnt),
    );
    // Among valid options, and before the positionals.
    expect_rejected(
        &[
            os("-o"),
            os("allow_other,frobnicate=1"),
            os(d.legs_arg()),
            os(&d.mnt),
        ],
        &["unknown option 'frobnicate"],
        &watch_all(&d),
        Some(&d.mnt),
    );
}

/// A bad line in `-o config=FILE`: refused like a bad `-o`, the message naming FILE:LINE,
/// nothing on any leg touched; so is a file that cannot be read.
#[test]
fn bad_config_file() {
    let d = TestDirs::new(2);
    populate(&d.legs[0]);
    populate(&d.legs[1]);
    let conf = d.root().join("mirror.conf");
    fs::write(&conf, "# ok so far\nthreads=2\nread_policy=fastest\n").unwrap();
    let at = format!(
        "{}:3: invalid value for 'read_policy': 'fastest'",
        p2s(&conf)
    );
    expect_rejected(
        &[
            os(d.legs_arg()),
            os(&d.mnt),
            os("-o"),
            os(format!("config={}", p2s(&conf))),
        ],
        &[&at],
        &watch_all(&d),
        Some(&d.mnt),
    );
    let missing = d.root().join("nope.conf");
    expect_rejected(
        &[
            os(d.legs_arg()),
            os(&d.mnt),
            os("-o"),
            os(format!("allow_other,config={}", p2s(&missing))),
        ],
        &[&format!(
            "invalid value for 'config': '{}' (cannot read it: No such file",
            p2s(&missing)
        )],
        &watch_all(&d),
        Some(&d.mnt),
    );
}

#[test]
fn bad_threads_value() {
    let d = TestDirs::new(2);
    for v in ["abc", "0", "-1", ""] {
        expect_rejected(
            &[
                os(d.legs_arg()),
                os(&d.mnt),
                os("-o"),
                os(format!("threads={v}")),
            ],
            &[&format!("invalid value for 'threads': '{v}'")],
            &watch_all(&d),
            Some(&d.mnt),
        );
    }
}

#[test]
fn bad_timeout_values() {
    let d = TestDirs::new(2);
    for opt in ["attr_timeout", "entry_timeout"] {
        for v in ["-1", "soon"] {
            expect_rejected(
                &[
                    os(d.legs_arg()),
                    os(&d.mnt),
                    os("-o"),
                    os(format!("{opt}={v}")),
                ],
                &[&format!("invalid value for '{opt}': '{v}'")],
                &watch_all(&d),
                Some(&d.mnt),
            );
        }
    }
}

#[test]
fn missing_leg() {
    let d = TestDirs::new(2);
    let missing = d.root().join("nope");
    let legs = format!("{}:{}", p2s(&d.legs[0]), p2s(&missing));
    expect_rejected(
        &[os(legs), os(&d.mnt)],
        &[&format!("leg '{}' does not exist", p2s(&missing))],
        &watch_all(&d),
        Some(&d.mnt),
    );
    assert!(!missing.exists(), "mirrorfs created the missing leg");
}

#[test]
fn leg_is_a_file() {
    let d = TestDirs::new(2);
    let file = d.root().join("file");
    fs::write(&file, b"I am a file").unwrap();
    let legs = format!("{}:{}", p2s(&d.legs[0]), p2s(&file));
    let mut watch = watch_all(&d);
    watch.push(file.clone());
    expect_rejected(
        &[os(legs), os(&d.mnt)],
        &[&format!("leg '{}' is not a directory", p2s(&file))],
        &watch,
        Some(&d.mnt),
    );
}

#[test]
fn same_leg_twice() {
    let d = TestDirs::new(2);
    let l0 = p2s(&d.legs[0]);
    let alias = d.root().join("alias");
    symlink(&d.legs[0], &alias).unwrap();
    let dotted = format!("{}/./leg0", p2s(d.root()));
    let dotdot = format!("{}/leg1/../leg0", p2s(d.root()));
    for second in [l0.clone(), dotted, format!("{l0}/"), dotdot, p2s(&alias)] {
        expect_rejected(
            &[os(format!("{l0}:{second}")), os(&d.mnt)],
            &["is given twice"],
            &watch_all(&d),
            Some(&d.mnt),
        );
    }
    // Three legs, the duplicate last.
    expect_rejected(
        &[os(format!("{l0}:{}:{l0}", p2s(&d.legs[1]))), os(&d.mnt)],
        &["is given twice"],
        &watch_all(&d),
        Some(&d.mnt),
    );
}

#[test]
fn leg_inside_leg() {
    let d = TestDirs::new(2);
    let inner = d.legs[0].join("inner");
    fs::create_dir(&inner).unwrap();
    for legs in [
        format!("{}:{}", p2s(&d.legs[0]), p2s(&inner)),
        format!("{}:{}", p2s(&inner), p2s(&d.legs[0])),
    ] {
        expect_rejected(
            &[os(legs), os(&d.mnt)],
            &["is inside leg"],
            &watch_all(&d),
            Some(&d.mnt),
        );
    }
}

#[test]
fn leg_inside_mount_point() {
    let d = TestDirs::new(2);
    let inner = d.mnt.join("inner");
    fs::create_dir(&inner).unwrap();
    let legs = format!("{}:{}", p2s(&d.legs[0]), p2s(&inner));
    expect_rejected(
        &[os(legs), os(&d.mnt)],
        &[
            &format!("leg '{}'", p2s(&inner)),
            &format!("is inside the mount point '{}'", p2s(&d.mnt)),
        ],
        &watch_all(&d),
        Some(&d.mnt),
    );
    // The mount point itself as a leg.
    let legs = format!("{}:{}", p2s(&d.legs[0]), p2s(&d.mnt));
    let out_phrases = ["mirrorfs: "];
    expect_rejected(
        &[os(legs), os(&d.mnt)],
        &out_phrases,
        &watch_all(&d),
        Some(&d.mnt),
    );
}

#[test]
fn mount_point_inside_leg() {
    let d = TestDirs::new(2);
    let m = d.legs[1].join("m");
    fs::create_dir(&m).unwrap();
    expect_rejected(
        &[os(d.legs_arg()), os(&m)],
        &[
            &format!("mount point '{}'", p2s(&m)),
            &format!("is inside leg '{}'", p2s(&d.legs[1])),
        ],
        &watch_all(&d),
        Some(&m),
    );
    // A leg as the mount point.
    expect_rejected(
        &[os(d.legs_arg()), os(&d.legs[0])],
        &["mirrorfs: "],
        &watch_all(&d),
        Some(&d.legs[0]),
    );
}

#[test]
fn missing_mount_point() {
    let d = TestDirs::new(2);
    let nope = d.root().join("nomnt");
    expect_rejected(
        &[os(d.legs_arg()), os(&nope)],
        &[&format!("mount point '{}' does not exist", p2s(&nope))],
        &d.legs.clone(),
        Some(&nope),
    );
    assert!(!nope.exists(), "mirrorfs created the missing mount point");
    let file = d.root().join("mntfile");
    fs::write(&file, b"x").unwrap();
    expect_rejected(
        &[os(d.legs_arg()), os(&file)],
        &[&format!("mount point '{}' is not a directory", p2s(&file))],
        &d.legs.clone(),
        Some(&file),
    );
}

#[test]
fn legs_differ_at_first_mount() {
    // An extra file on one leg.
    let d = TestDirs::new(2);
    populate(&d.legs[0]);
    populate(&d.legs[1]);
    fs::write(d.legs[1].join("dir/only_here.txt"), b"extra").unwrap();
    expect_rejected(
        &[os(d.legs_arg()), os(&d.mnt)],
        &["legs differ at first mount", "only_here.txt"],
        &watch_all(&d),
        Some(&d.mnt),
    );

    // Same names, different content (and so size). Content with the same size and time is
    // not read before the mount answers: tests/first_mount.rs.
    let d = TestDirs::new(3);
    for l in &d.legs {
        populate(l);
    }
    fs::write(d.legs[2].join("top"), b"TOP!").unwrap();
    expect_rejected(
        &[os(d.legs_arg()), os(&d.mnt)],
        &["legs differ at first mount", "top"],
        &watch_all(&d),
        Some(&d.mnt),
    );

    // A file on one leg, a directory of the same name on the other.
    let d = TestDirs::new(2);
    fs::write(d.legs[0].join("thing"), b"").unwrap();
    fs::create_dir(d.legs[1].join("thing")).unwrap();
    expect_rejected(
        &[os(d.legs_arg()), os(&d.mnt)],
        &["legs differ at first mount", "thing"],
        &watch_all(&d),
        Some(&d.mnt),
    );

    // Two populated legs that differ, with no source named.
    let d = TestDirs::new(2);
    populate(&d.legs[0]);
    fs::write(d.legs[1].join("other"), b"x").unwrap();
    expect_rejected(
        &[os(d.legs_arg()), os(&d.mnt)],
        &["legs differ at first mount", "init_from"],
        &watch_all(&d),
        Some(&d.mnt),
    );
    // (One populated leg and empty others is adopted: tests/safety_first_mount.rs.)
}

#[test]
fn leg_of_another_mirror() {
    require_fuse!();
    // Mirror 1 = leg0:leg1, mirror 2 = leg2:leg3; then try leg0:leg2.
    let d = TestDirs::new(4);
    let m1 = [d.legs[0].clone(), d.legs[1].clone()];
    let m2 = [d.legs[2].clone(), d.legs[3].clone()];
    for legs in [&m1, &m2] {
        let out = run_mirrorfs([os(legs_arg(legs)), os(&d.mnt)]);
        assert!(
            out.status.success(),
            "setting up mirror {legs:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let pids = daemon_pids(&d.mnt);
        unmount_path(&d.mnt).expect("unmount");
        wait_pids_gone(&pids, Duration::from_secs(10));
        for l in legs.iter() {
            assert!(
                l.join(".mirrorfs").is_dir(),
                "{} has no .mirrorfs",
                l.display()
            );
        }
    }
    let mixed = [d.legs[0].clone(), d.legs[2].clone()];
    expect_rejected(
        &[os(legs_arg(&mixed)), os(&d.mnt)],
        &["belongs to another mirror"],
        &watch_all(&d),
        Some(&d.mnt),
    );
}

#[test]
fn version_and_help() {
    let out = run_mirrorfs(["--version"]);
    assert_eq!(out.status.code(), Some(0), "--version exit status");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(env!("CARGO_PKG_VERSION")),
        "--version prints {stdout:?}, without {}",
        env!("CARGO_PKG_VERSION")
    );
    let out = run_mirrorfs(["--help"]);
    assert_eq!(out.status.code(), Some(0), "--help exit status");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("MOUNTPOINT") || stdout.contains("mountpoint") || stdout.contains("-o"),
        "--help output looks empty: {stdout:?}"
    );
}

#[test]
fn options_after_positionals() {
    require_fuse!();
    let d = TestDirs::new(2);
    let args = vec![os(d.legs_arg()), os(&d.mnt), os("-o"), os("threads=2")];
    let m = mount_with_args(d, args);
    fs::write(m.path("f"), b"after").unwrap();
    assert_content_on_legs(m.legs(), "f", b"after");
    m.finish();
}

#[test]
fn options_repeated_before_and_after() {
    require_fuse!();
    let d = TestDirs::new(3);
    let args = vec![
        os("-o"),
        os("threads=2"),
        os(d.legs_arg()),
        os("-o"),
        os("attr_timeout=0"),
        os(&d.mnt),
        os("-o"),
        os("entry_timeout=0.5,fsname=repeated"),
    ];
    let m = mount_with_args(d, args);
    let e = mount_entry_at(m.mnt()).expect("mount entry");
    assert_eq!(e.source, "repeated", "fsname from the last -o");
    fs::write(m.path("f"), b"x").unwrap();
    m.finish();
}

#[test]
fn identical_trees_accepted_at_first_mount() {
    require_fuse!();
    let d = TestDirs::new(3);
    let l0 = d.legs[0].clone();
    fs::create_dir_all(l0.join("dir/sub")).unwrap();
    fs::write(l0.join("dir/file"), pattern(100_000, 3)).unwrap();
    fs::write(l0.join("top"), b"top").unwrap();
    fs::hard_link(l0.join("top"), l0.join("dir/toplink")).unwrap();
    symlink("../top", l0.join("dir/sym")).unwrap();
    chmod(l0.join("dir/file"), 0o640).unwrap();
    chown(l0.join("top"), 1000, 100).unwrap();
    set_xattr(l0.join("top"), "user.note", b"same", 0).unwrap();
    for other in &d.legs[1..] {
        let out = run_timeout(
            std::process::Command::new("cp")
                .arg("-a")
                .arg(format!("{}/.", p2s(&l0)))
                .arg(other),
            Duration::from_secs(30),
        );
        assert!(
            out.status.success(),
            "cp -a: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_legs_identical(&d.legs);
    let m = TestMirror::new(3).with_dirs(d).mount();
    assert_eq!(fs::read(m.path("top")).unwrap(), b"top");
    assert_bytes_eq(
        &fs::read(m.path("dir/file")).unwrap(),
        &pattern(100_000, 3),
        "dir/file through the mount",
    );
    assert_eq!(
        fs::read_link(m.path("dir/sym")).unwrap(),
        Path::new("../top")
    );
    assert_eq!(lstat_ok(m.path("top")).st_nlink, 2);
    assert_eq!(
        lstat_ok(m.path("top")).st_ino,
        lstat_ok(m.path("dir/toplink")).st_ino,
        "existing hard links are one inode through the mount"
    );
    assert_eq!(get_xattr(m.path("top"), "user.note").unwrap(), b"same");
    let mut names = dir_names(m.mnt());
    names.sort();
    assert_eq!(names, vec!["dir", "top"]);
    m.finish();
}

/// Every option that takes a value, given every hostile value the parsers are tested with
/// (signs, NaN, infinities, overflow, junk), through the real binary: one line naming the
/// option, exit 1, nothing touched; never a panic.
#[test]
fn hostile_values_for_every_option() {
    let d = TestDirs::new(2);
    let mut tried = 0;
    for o in mirrorfs::config::table::OPTIONS
        .iter()
        .filter(|o| !o.form.is_empty())
    {
        for v in mirrorfs::value::HOSTILE {
            if v.contains('\0') {
                continue; // cannot be a command-line argument
            }
            let mut c = mirrorfs::config::MountConfig::default();
            if c.apply(o.name, Some(v)).is_ok() || v.contains(',') {
                continue; // a value this option takes (a size, a name): not hostile to it
            }
            expect_rejected(
                &[
                    os(d.legs_arg()),
                    os(&d.mnt),
                    os("-o"),
                    os(format!("{}={v}", o.name)),
                ],
                &[&format!("invalid value for '{}'", o.name)],
                &watch_all(&d),
                Some(&d.mnt),
            );
            tried += 1;
        }
    }
    assert!(tried > 200, "only {tried} hostile values tried");
}

/// More I/O threads than a pids limit allows (threads=256 on 8 legs): one line saying so,
/// exit 1, nothing on any leg; never a panic.
#[test]
fn threads_beyond_a_pids_limit() {
    require_fuse!();
    let group =
        Path::new("/sys/fs/cgroup/pids").join(format!("mirrorfs-test-{}", std::process::id()));
    fs::create_dir(&group).expect("a pids cgroup (cgroup v1 pids controller)");
    fs::write(group.join("pids.max"), "200").unwrap();
    let d = TestDirs::new(8);
    let before: Vec<_> = d.legs.iter().map(|l| snapshot_tree(l)).collect();
    let script = format!(
        "echo $$ > {}/cgroup.procs && exec {} {} {} -o threads=256",
        shq(&group),
        shq(mirrorfs_bin()),
        shq(d.legs_arg()),
        shq(&d.mnt)
    );
    let out = run_timeout(
        std::process::Command::new("/bin/sh").arg("-c").arg(&script),
        Duration::from_secs(60),
    );
    let _ = fs::remove_dir(&group);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if is_mounted(&d.mnt) {
        let _ = unmount_path(&d.mnt);
        panic!("mounted despite the pids limit: {stderr}");
    }
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("mirrorfs: cannot start 2048 I/O threads"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    for (l, b) in d.legs.iter().zip(&before) {
        assert_snapshot_eq(b, &snapshot_tree(l), &l.display().to_string());
    }
}
