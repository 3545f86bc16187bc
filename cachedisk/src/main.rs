//! `mirrorfs-cachedisk`: a disk with a volatile write cache, which a power cut empties, for
//! power-loss tests.
//!
//! ```text
//! mirrorfs-cachedisk [--seed N] [--keep-fraction F] [--control PATH] [--report PATH] [--trace] IMAGE MNT
//! ```
//!
//! It serves one file, `MNT/disk`, whose contents are the image file IMAGE (same size, fixed).
//! A test attaches a loop device to it (`losetup -f --show MNT/disk`) and makes a real
//! filesystem on that. The kernel only kills the daemon in the crash tests so far, which keeps
//! every disk's data; a real power cut makes each disk lose what it had not flushed, and two
//! disks lose different things. This disk does that:
//!
//! - Writes are kept in memory, per 4 KiB block (the newest contents), and not written to
//!   IMAGE until a flush. Reads see the cached blocks over IMAGE. Discards and writes of zeros
//!   (FALLOCATE punch hole or zero range, which the loop driver sends for them) are writes of
//!   zeros.
//! - A flush is an FSYNC of the file (`fsync`/`fdatasync`; FLUSH, sent at each close(), is
//!   not one). The loop driver turns its block device's cache flushes (REQ_PREFLUSH, and the
//!   FUA writes the block layer splits into a write and a flush, since a loop device does not
//!   advertise FUA) into an fsync of its backing file, so a filesystem's journal commits and
//!   a program's fsync arrive here as FSYNC. On FSYNC every cached block is written to IMAGE
//!   and IMAGE is fsynced, then the request is answered.
//! - The file is opened with `FOPEN_DIRECT_IO`, so the kernel keeps no page cache of it: every
//!   read and write reaches the daemon when it is made.
//! - The power cut: when the file `--control PATH` appears (see [`control`]: inotify on its
//!   directory, so one `touch PATH` cuts every disk watching it at the same instant), the
//!   power goes off: every later request on the disk fails with EIO, and the unflushed blocks
//!   are lost except a `--keep-fraction F` share (default 0), chosen by `--seed N` (default 0)
//!   and the block numbers alone ([`choose`]), which are written to IMAGE: a real disk may
//!   have written part of its cache before the power went. The same seed and the same
//!   unflushed blocks give the same survivors. The numbers of dropped and kept blocks go to
//!   stderr, and with `--report PATH` a report (`name value` lines: `cut_at_ns`, on
//!   CLOCK_MONOTONIC, `dropped`, `kept`, the request counters, `kept_blocks`,
//!   `dropped_blocks`) is written to PATH (whole: written aside and renamed).
//! - The power comes back when the process is started again on the same IMAGE: a fresh start
//!   reads IMAGE as it is. PATH must not exist then (it would cut at once): the start is
//!   refused until it is removed.
//! - It runs in the foreground until MNT is unmounted. An unmount without a cut is an orderly
//!   power-off: the cache is written to IMAGE first. A kill (SIGKILL) loses the cache whole.
//! - `--trace`: a line on stderr for each WRITE, FSYNC and FALLOCATE, with its CLOCK_MONOTONIC
//!   time: how a client (the loop driver under a filesystem) writes and flushes.
//!
//! The unflushed blocks are held in memory: up to the image's size in the worst case.

mod cache;
mod choose;
mod control;
mod disk;
mod fuse;

use std::ffi::OsString;
use std::fs::File;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const USAGE: &str = "mirrorfs-cachedisk [--seed N] [--keep-fraction F] [--control PATH] [--report PATH] [--trace] IMAGE MNT";

#[derive(Debug, PartialEq)]
struct Options {
    seed: u64,
    keep: f64,
    control: Option<PathBuf>,
    report: Option<PathBuf>,
    trace: bool,
    image: PathBuf,
    mnt: PathBuf,
}

/// What the command line asks: the options, `Ok(None)` for `--help`, or the one-line problem.
fn parse(args: Vec<OsString>) -> Result<Option<Options>, String> {
    let mut o = Options {
        seed: 0,
        keep: 0.0,
        control: None,
        report: None,
        trace: false,
        image: PathBuf::new(),
        mnt: PathBuf::new(),
    };
    let mut positional = Vec::new();
    let mut args = args.into_iter();
    while let Some(a) = args.next() {
        let flag = a.to_string_lossy().into_owned();
        let mut value = || {
            args.next()
                .ok_or_else(|| format!("{flag} needs a value (usage: {USAGE})"))
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "--seed" => {
                let v = value()?;
                let v = v.to_string_lossy();
                o.seed = v
                    .parse()
                    .map_err(|_| format!("--seed: '{v}' is not a whole number from 0 to 2^64-1"))?;
            }
            "--keep-fraction" => {
                let v = value()?;
                let v = v.to_string_lossy();
                o.keep = v
                    .parse::<f64>()
                    .ok()
                    .filter(|f| (0.0..=1.0).contains(f))
                    .ok_or_else(|| format!("--keep-fraction: '{v}' is not a number from 0 to 1"))?;
            }
            "--control" => o.control = Some(value()?.into()),
            "--report" => o.report = Some(value()?.into()),
            "--trace" => o.trace = true,
            "--" => positional.extend(args.by_ref().map(PathBuf::from)),
            f if f.starts_with('-') && f.len() > 1 => {
                return Err(format!("unknown option '{f}' (usage: {USAGE})"))
            }
            _ => positional.push(PathBuf::from(a)),
        }
    }
    let [image, mnt] = <[PathBuf; 2]>::try_from(positional).map_err(|p| {
        format!(
            "needs IMAGE and MNT, got {} argument(s) (usage: {USAGE})",
            p.len()
        )
    })?;
    o.image = image;
    o.mnt = mnt;
    Ok(Some(o))
}

fn fail(code: i32, msg: &str) -> ! {
    eprintln!("mirrorfs-cachedisk: {msg}");
    std::process::exit(code)
}

/// Opens the image read-write: the file and its size.
fn open_image(p: &Path) -> Result<(File, u64), String> {
    let shown = p.display();
    let f = File::options()
        .read(true)
        .write(true)
        .open(p)
        .map_err(|e| format!("IMAGE '{shown}': {e}"))?;
    let m = f.metadata().map_err(|e| format!("IMAGE '{shown}': {e}"))?;
    if !m.file_type().is_file() {
        let what = if m.file_type().is_block_device() {
            "a block device"
        } else if m.is_dir() {
            "a directory"
        } else {
            "not a regular file"
        };
        return Err(format!("IMAGE '{shown}' is {what}: give an image file"));
    }
    if m.len() == 0 {
        return Err(format!(
            "IMAGE '{shown}' is empty: make it the disk's size first (truncate -s 256M)"
        ));
    }
    Ok((f, m.len()))
}

/// What a cut prints and reports.
fn after_cut(cut: &disk::Cut, d: &disk::Disk<File>, report: Option<&Path>) {
    eprintln!(
        "mirrorfs-cachedisk: power cut at {} ns: dropped {} blocks, kept {} (seed {}, keep-fraction {}){}",
        cut.at_ns,
        cut.dropped.len(),
        cut.kept.len(),
        d.seed(),
        d.keep(),
        cut.error
            .as_ref()
            .map(|e| format!("; writing the kept blocks failed: {e}"))
            .unwrap_or_default()
    );
    let Some(path) = report else { return };
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let text = cut.report(d.seed(), d.keep(), &d.stats);
    if let Err(e) = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path)) {
        eprintln!("mirrorfs-cachedisk: --report '{}': {e}", path.display());
    }
}

fn main() {
    let o = match parse(std::env::args_os().skip(1).collect()) {
        Ok(Some(o)) => o,
        Ok(None) => {
            println!("usage: {USAGE}");
            return;
        }
        Err(e) => fail(2, &e),
    };
    let (image, size) = open_image(&o.image).unwrap_or_else(|e| fail(1, &e));
    if !o.mnt.is_dir() {
        fail(1, &format!("MNT '{}' is not a directory", o.mnt.display()));
    }
    // Watching starts before the mount, so that no control file can come unseen.
    let control = o
        .control
        .as_deref()
        .map(control::Control::new)
        .transpose()
        .unwrap_or_else(|e| fail(1, &e));
    let d = Arc::new(disk::Disk::new(image, size, o.seed, o.keep));
    if let Some(c) = control {
        let d = d.clone();
        let report = o.report.clone();
        let spawned = std::thread::Builder::new()
            .name("control".into())
            .spawn(move || {
                let fast = control::realtime_priority();
                let waited = c.wait();
                let cut = waited.is_ok().then(|| d.cut()).flatten();
                if fast {
                    control::normal_priority();
                }
                match (waited, cut) {
                    (Ok(()), Some(cut)) => after_cut(&cut, &d, report.as_deref()),
                    (Ok(()), None) => {}
                    (Err(e), _) => eprintln!("mirrorfs-cachedisk: {e}"),
                }
            });
        if let Err(e) = spawned {
            fail(1, &format!("cannot start the control thread: {e}"));
        }
    }
    let fs = fuse::CacheDiskFs {
        disk: d.clone(),
        size,
        started: std::time::SystemTime::now(),
        trace: o.trace,
    };
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName("cachedisk".into()),
        fuser::MountOption::DefaultPermissions,
    ];
    config.acl = fuser::SessionACL::All;
    // A few requests at once: reads wait only for each other's image reads.
    config.n_threads = Some(4);
    if let Err(e) = fuser::Session::new(fs, &o.mnt, &config).and_then(|s| s.run()) {
        fail(1, &format!("MNT '{}': {e}", o.mnt.display()));
    }
    eprint!(
        "mirrorfs-cachedisk: unmounted; served:\n{}",
        d.stats.lines()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<OsString> {
        s.split_whitespace().map(OsString::from).collect()
    }

    #[test]
    fn the_defaults_and_every_option() {
        let o = parse(args("img mnt")).unwrap().unwrap();
        assert_eq!((o.seed, o.keep, o.trace), (0, 0.0, false));
        assert_eq!((o.control, o.report), (None, None));
        let o = parse(args(
            "--seed 18446744073709551615 --keep-fraction 0.25 --control /tmp/c --report /tmp/r --trace img mnt",
        ))
        .unwrap()
        .unwrap();
        assert_eq!(o.seed, u64::MAX);
        assert_eq!(o.keep, 0.25);
        assert_eq!(o.control, Some(PathBuf::from("/tmp/c")));
        assert_eq!(o.report, Some(PathBuf::from("/tmp/r")));
        assert!(o.trace);
        assert_eq!((o.image, o.mnt), ("img".into(), "mnt".into()));
        assert_eq!(parse(args("--help")), Ok(None));
        // After --, a name may start with a dash.
        let o = parse(args("-- -img mnt")).unwrap().unwrap();
        assert_eq!(o.image, PathBuf::from("-img"));
    }

    #[test]
    fn bad_arguments_get_one_line_that_names_the_problem() {
        for (a, want) in [
            ("", "needs IMAGE and MNT, got 0"),
            ("img", "needs IMAGE and MNT, got 1"),
            ("a b c", "got 3"),
            ("--seed -1 img mnt", "--seed: '-1'"),
            ("--seed x img mnt", "--seed: 'x'"),
            ("--keep-fraction 1.5 img mnt", "--keep-fraction: '1.5'"),
            ("--keep-fraction -0.1 img mnt", "--keep-fraction: '-0.1'"),
            ("--keep-fraction NaN img mnt", "--keep-fraction: 'NaN'"),
            ("--keep-fraction img mnt", "--keep-fraction: 'img'"),
            ("img mnt --control", "--control needs a value"),
            ("--bogus img mnt", "unknown option '--bogus'"),
        ] {
            let e = parse(args(a)).expect_err(a);
            assert!(e.contains(want), "{a:?}: {e}");
            assert!(!e.contains('\n'), "{a:?}: one line: {e}");
        }
    }

    #[test]
    fn the_image_must_be_a_regular_nonempty_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img");
        assert!(open_image(&p).unwrap_err().contains("No such file"));
        std::fs::write(&p, b"").unwrap();
        assert!(open_image(&p).unwrap_err().contains("is empty"));
        assert!(open_image(dir.path()).unwrap_err().contains("directory"));
        std::fs::write(&p, [0u8; 5000]).unwrap();
        assert_eq!(open_image(&p).unwrap().1, 5000);
    }
}
