//! Concurrent clients: racing writes and namespace changes must be applied in the same order
//! on every leg, so that whatever the outcome, the legs agree with each other and with the
//! mount.

#[macro_use]
mod common;

use common::*;
use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

legs_test!(
    overlapping_writes_to_one_file,
    writers_on_separate_files,
    racing_renames_of_one_name,
    racing_exclusive_creates,
    racing_mkdir_rmdir_and_links
);

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn overlapping_writes_to_one_file(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).option("threads=4").mount();
    let p = m.path("shared");
    fs::write(&p, vec![0u8; 1 << 20]).unwrap();
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let p = p.clone();
            thread::spawn(move || {
                let f = OpenOptions::new().write(true).open(&p).unwrap();
                let mut x = 0x9E37_79B9 + t;
                for i in 0..150 {
                    let len = 4096 + (xorshift(&mut x) % 61440) as usize;
                    let off = xorshift(&mut x) % ((1 << 20) - len as u64);
                    let data = pattern(len, t * 1000 + i);
                    f.write_all_at(&data, off).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let content = fs::read(&p).unwrap();
    assert_eq!(content.len(), 1 << 20);
    assert_content_on_legs(m.legs(), "shared", &content);
    m.finish();
}

fn writers_on_separate_files(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).option("threads=4").mount();
    let handles: Vec<_> = (0..6u64)
        .map(|t| {
            let dir = m.mnt().to_path_buf();
            thread::spawn(move || {
                for k in 0..10u64 {
                    let data = pattern(50_000 + (k as usize) * 777, t * 100 + k);
                    let name = dir.join(format!("t{t}-f{k}"));
                    fs::write(&name, &data).unwrap();
                    if k % 3 == 0 {
                        fs::rename(&name, dir.join(format!("t{t}-r{k}"))).unwrap();
                    } else if k % 3 == 1 {
                        fs::remove_file(&name).unwrap();
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    for t in 0..6u64 {
        for k in 0..10u64 {
            let data = pattern(50_000 + (k as usize) * 777, t * 100 + k);
            match k % 3 {
                0 => assert_content_on_legs(m.legs(), &format!("t{t}-r{k}"), &data),
                1 => assert!(!m.path(&format!("t{t}-f{k}")).exists()),
                _ => assert_content_on_legs(m.legs(), &format!("t{t}-f{k}"), &data),
            }
        }
    }
    m.finish();
}

fn racing_renames_of_one_name(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).option("threads=4").mount();
    fs::write(m.path("x"), b"the one file").unwrap();
    let moves = Arc::new(AtomicUsize::new(0));
    let pairs = [("x", "y"), ("y", "z"), ("z", "x"), ("y", "x")];
    let handles: Vec<_> = pairs
        .iter()
        .map(|(a, b)| {
            let (a, b) = (m.path(a), m.path(b));
            let moves = moves.clone();
            thread::spawn(move || {
                for _ in 0..300 {
                    match fs::rename(&a, &b) {
                        Ok(()) => {
                            moves.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                        Err(e) => panic!("rename {} {}: {e}", a.display(), b.display()),
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert!(moves.load(Ordering::Relaxed) > 0, "no rename succeeded");
    let names = dir_names(m.mnt());
    assert_eq!(names.len(), 1, "exactly one name must be left: {names:?}");
    assert_eq!(fs::read(m.path(&names[0])).unwrap(), b"the one file");
    assert_content_on_legs(m.legs(), &names[0], b"the one file");
    m.finish();
}

fn racing_exclusive_creates(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).option("threads=4").mount();
    for round in 0..30 {
        let name = m.path(&format!("excl{round}"));
        let winners = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = (0..4u8)
            .map(|t| {
                let name = name.clone();
                let winners = winners.clone();
                thread::spawn(move || {
                    match OpenOptions::new().write(true).create_new(true).open(&name) {
                        Ok(f) => {
                            winners.fetch_add(1, Ordering::Relaxed);
                            f.write_all_at(&[b'A' + t], 0).unwrap();
                        }
                        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
                        Err(e) => panic!("O_EXCL create: {e}"),
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(
            winners.load(Ordering::Relaxed),
            1,
            "round {round}: exactly one O_EXCL create must win"
        );
        let content = fs::read(&name).unwrap();
        assert_eq!(content.len(), 1);
        assert_content_on_legs(m.legs(), &format!("excl{round}"), &content);
    }
    m.finish();
}

fn racing_mkdir_rmdir_and_links(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).option("threads=4").mount();
    fs::write(m.path("target"), b"t").unwrap();
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let root = m.mnt().to_path_buf();
            thread::spawn(move || {
                let mut x = 12345 + t;
                for _ in 0..200 {
                    let d = root.join(format!("d{}", xorshift(&mut x) % 3));
                    let l = root.join(format!("l{}", xorshift(&mut x) % 3));
                    let r = match xorshift(&mut x) % 4 {
                        0 => fs::create_dir(&d),
                        1 => fs::remove_dir(&d),
                        2 => fs::hard_link(root.join("target"), &l),
                        _ => fs::remove_file(&l),
                    };
                    if let Err(e) = r {
                        let code = e.raw_os_error().unwrap_or(0);
                        assert!(
                            [libc::EEXIST, libc::ENOENT, libc::ENOTEMPTY].contains(&code),
                            "unexpected error {e}"
                        );
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    // nlink of the target matches the number of link names left.
    let links = dir_names(m.mnt())
        .iter()
        .filter(|n| n.starts_with('l'))
        .count();
    assert_eq!(
        lstat_ok(m.path("target")).st_nlink as usize,
        1 + links,
        "nlink of target vs names left"
    );
    m.finish();
}

legs_test!(reads_see_acknowledged_writes);

/// Once a write returns, every reader sees it, whichever leg serves the read. O_DIRECT on
/// both sides keeps the page cache out; several reader threads (different tids) so that
/// per-pid read policies pick different legs.
fn reads_see_acknowledged_writes(n: usize) {
    require_fuse!();
    use std::os::unix::fs::OpenOptionsExt;
    let m = TestMirror::new(n).option("threads=4").mount();
    let p = m.path("rw");
    fs::write(&p, vec![0u8; 64 * 4096]).unwrap();
    let w = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&p)
        .unwrap();
    let readers: Vec<fs::File> = (0..3)
        .map(|_| {
            OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(&p)
                .unwrap()
        })
        .collect();
    let readers = Arc::new(readers);
    let mut buf = AlignedBuf::new(4096, 4096);
    for i in 0..64u64 {
        buf.as_mut_slice().copy_from_slice(&pattern(4096, 500 + i));
        w.write_all_at(buf.as_slice(), i * 4096).unwrap();
        let handles: Vec<_> = (0..3)
            .map(|r| {
                let readers = readers.clone();
                thread::spawn(move || {
                    let mut rb = AlignedBuf::new(4096, 4096);
                    readers[r]
                        .read_exact_at(rb.as_mut_slice(), i * 4096)
                        .unwrap();
                    rb.as_slice() == pattern(4096, 500 + i).as_slice()
                })
            })
            .collect();
        for (r, h) in handles.into_iter().enumerate() {
            assert!(
                h.join().unwrap(),
                "reader {r} saw stale data for block {i} after the write returned"
            );
        }
    }
    drop(w);
    drop(readers);
    m.finish();
}

legs_test!(parallel_file_churn_keeps_files_apart);

/// Several clients, each in its own directory, doing what git does: write a temp file, link
/// it to its final name and unlink the temp name, append to files, take a lock file with
/// O_EXCL and rename it into place. The backing filesystem reuses inode numbers of deleted
/// files all the time; no file's data may ever end up in another file.
fn parallel_file_churn_keeps_files_apart(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    let threads = 8u64;
    let rounds = 120u64;
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let dir = m.path(&format!("t{t}"));
            thread::spawn(move || -> Result<(), String> {
                fs::create_dir(&dir).map_err(|e| e.to_string())?;
                for k in 0..rounds {
                    let tmp = dir.join(format!("tmp_{k}"));
                    let obj = dir.join(format!("obj_{k}"));
                    fs::write(&tmp, format!("object {t}/{k}")).map_err(|e| format!("{e}"))?;
                    fs::hard_link(&tmp, &obj).map_err(|e| format!("link {k}: {e}"))?;
                    fs::remove_file(&tmp).map_err(|e| format!("unlink tmp {k}: {e}"))?;
                    let f = dir.join(format!("f_{k}"));
                    fs::write(&f, format!("file {t}/{k}\n")).map_err(|e| format!("{e}"))?;
                    let mut a = OpenOptions::new()
                        .append(true)
                        .open(&f)
                        .map_err(|e| format!("open append {k}: {e}"))?;
                    std::io::Write::write_all(&mut a, b"change\n").map_err(|e| e.to_string())?;
                    drop(a);
                    let lock = dir.join("index.lock");
                    let l = OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&lock)
                        .map_err(|e| format!("create index.lock {k}: {e}"))?;
                    l.write_all_at(format!("index {k}").as_bytes(), 0)
                        .map_err(|e| e.to_string())?;
                    drop(l);
                    lstat(&lock)
                        .map_err(|e| format!("stat index.lock right after create {k}: {e}"))?;
                    fs::rename(&lock, dir.join("index"))
                        .map_err(|e| format!("rename index.lock {k}: {e}"))?;
                    let got = fs::read(&f).map_err(|e| e.to_string())?;
                    let want = format!("file {t}/{k}\nchange\n");
                    if got != want.as_bytes() {
                        return Err(format!(
                            "{} right after writing: {:?}, want {want:?}",
                            f.display(),
                            String::from_utf8_lossy(&got)
                        ));
                    }
                }
                Ok(())
            })
        })
        .collect();
    let errors: Vec<String> = handles
        .into_iter()
        .filter_map(|h| h.join().unwrap().err())
        .collect();
    assert!(
        errors.is_empty(),
        "clients failed:\n  {}",
        errors.join("\n  ")
    );
    let mut wrong = Vec::new();
    for t in 0..threads {
        for k in 0..rounds {
            for (rel, want) in [
                (format!("t{t}/obj_{k}"), format!("object {t}/{k}")),
                (format!("t{t}/f_{k}"), format!("file {t}/{k}\nchange\n")),
            ] {
                let mut places = vec![m.path(&rel)];
                places.extend(m.leg_paths(&rel));
                for p in places {
                    let got = fs::read(&p).map(|v| String::from_utf8_lossy(&v).into_owned());
                    if got.as_deref().ok() != Some(want.as_str()) {
                        wrong.push(format!("{}: {got:?}, want {want:?}", p.display()));
                    }
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} files hold the wrong data, e.g.:\n  {}",
        wrong.len(),
        wrong
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n  ")
    );
    m.finish();
}
