//! Crash-time expansion: the paths a directory cover or an identity record stands for.
//!
//! The change log ([`crate::meta::changes`]) writes these records; only the resync after a
//! crash reads them back as paths, by walking the legs.

use crate::meta::changes::{child_path, CoverRecord};
use crate::sys::fd::ROOT_REL;

/// Every name, relative to the leg root, of the object that is `ino` on the leg whose root is
/// `root` (directories are never it: they have one name, and a record of their own): the
/// names an [`identity_record`](crate::meta::changes::identity_record) stands for after a
/// crash. One walk of the leg's tree, one component at a time without following symlinks;
/// `skip` names entries never synced (the mirror's own directory at the root). A directory that
/// cannot be read is left out.
pub fn find_identity(
    root: std::os::fd::BorrowedFd<'_>,
    ino: u64,
    skip: &dyn Fn(&[u8], &[u8]) -> bool,
) -> Vec<Vec<u8>> {
    use std::os::unix::ffi::OsStringExt;
    let mut out = Vec::new();
    let mut todo: Vec<Vec<u8>> = vec![ROOT_REL.to_vec()];
    while let Some(dir) = todo.pop() {
        let Ok(fd) = crate::sys::fd::open_beneath(root, &dir) else {
            continue;
        };
        let Ok(entries) = crate::sys::dir::read_dir(std::os::fd::AsFd::as_fd(&fd)) else {
            continue;
        };
        for e in entries {
            let name = e.name.into_vec();
            if skip(&dir, &name) {
                continue;
            }
            let child = child_path(&dir, &name);
            let is_dir = match e.d_type {
                libc::DT_DIR => true,
                libc::DT_UNKNOWN => crate::sys::fd::open_beneath(root, &child)
                    .and_then(|c| crate::sys::fd::fstat(std::os::fd::AsFd::as_fd(&c)))
                    .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR),
                _ => false,
            };
            if is_dir {
                todo.push(child);
            } else if e.ino == ino {
                out.push(child);
            }
        }
    }
    out.sort();
    out
}

/// What a cover of `dir` (time `t`) stands for after a crash, on legs `roots`: the directory
/// itself, then every entry in it (on any leg) whose ctime on some leg is at or after `t`, that
/// some leg lacks, or whose type, size, mode or mtime differ between the legs; and the same,
/// recursively, in each of those entries that is a directory on some leg with a ctime at or
/// after `t` there (directories born under the cover: see [`crate::meta::changes`]). `skip` names
/// entries never synced (the mirror's own directory at the root). Entries that cannot be
/// read are included: the sync decides.
pub fn expand_cover(
    roots: &[std::os::fd::BorrowedFd<'_>],
    cover: CoverRecord<'_>,
    skip: &dyn Fn(&[u8], &[u8]) -> bool,
) -> Vec<Vec<u8>> {
    let mut out = vec![cover.dir.to_vec()];
    let mut todo = vec![cover.dir.to_vec()];
    while let Some(d) = todo.pop() {
        let (listed, sub) = expand_one(roots, &d, cover.t, cover.subtree, skip);
        out.extend(listed);
        todo.extend(sub);
    }
    out.sort();
    out.dedup();
    out
}

/// [`expand_cover`] for one directory: what it stands for in it, and the subdirectories to
/// look into too (recent ones, or all of them for a subtree cover, `all`).
fn expand_one(
    roots: &[std::os::fd::BorrowedFd<'_>],
    dir: &[u8],
    t: u64,
    all: bool,
    skip: &dyn Fn(&[u8], &[u8]) -> bool,
) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    use std::os::unix::ffi::OsStringExt;
    let mut out = Vec::new();
    let mut sub = Vec::new();
    let mut names: std::collections::BTreeSet<Vec<u8>> = Default::default();
    for &root in roots {
        let Ok(fd) = crate::sys::fd::open_beneath(root, dir) else {
            continue;
        };
        let Ok(entries) = crate::sys::dir::read_dir(std::os::fd::AsFd::as_fd(&fd)) else {
            continue;
        };
        for e in entries {
            let n = e.name.into_vec();
            if !skip(dir, &n) {
                names.insert(n);
            }
        }
    }
    for name in names {
        let child = child_path(dir, &name);
        let stats: Vec<Option<crate::sys::fd::Stat>> = roots
            .iter()
            .map(|&r| {
                let fd = crate::sys::fd::open_beneath(r, &child).ok()?;
                crate::sys::fd::fstat(std::os::fd::AsFd::as_fd(&fd)).ok()
            })
            .collect();
        let key = |s: &crate::sys::fd::Stat| (s.st_mode, s.st_size, s.st_mtime, s.st_mtime_nsec);
        let recent = |s: &crate::sys::fd::Stat| s.st_ctime >= 0 && s.st_ctime as u64 >= t;
        let changed = stats.iter().any(|s| s.as_ref().is_none_or(recent))
            || stats
                .iter()
                .flatten()
                .any(|s| key(s) != key(stats[0].as_ref().unwrap_or(s)));
        if stats
            .iter()
            .flatten()
            .any(|s| s.st_mode & libc::S_IFMT == libc::S_IFDIR && (all || recent(s)))
        {
            sub.push(child.clone());
        }
        if changed {
            out.push(child);
        }
    }
    (out, sub)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::changes::testing::legs;
    use crate::meta::META_DIR;
    use std::path::PathBuf;
    use std::time::Duration;

    /// The legs' root descriptors, for `expand_cover`.
    fn open_roots(roots: &[PathBuf]) -> Vec<std::os::fd::OwnedFd> {
        roots
            .iter()
            .map(|r| crate::sys::fd::open_root(r).unwrap())
            .collect()
    }

    /// A (not subtree) cover of `dir` at `t`.
    fn cov(dir: &[u8], t: u64) -> CoverRecord<'_> {
        CoverRecord {
            t,
            dir,
            subtree: false,
        }
    }

    #[test]
    fn an_identity_record_stands_for_every_name_of_its_object() {
        use std::os::fd::AsFd;
        use std::os::unix::fs::MetadataExt;
        let (_d, roots) = legs(1);
        let r = &roots[0];
        for d in ["a", "b/c", "e"] {
            std::fs::create_dir_all(r.join(d)).unwrap();
        }
        std::fs::write(r.join("a/x (deleted)"), b"x").unwrap();
        std::fs::hard_link(r.join("a/x (deleted)"), r.join("b/c/y")).unwrap();
        std::fs::hard_link(r.join("a/x (deleted)"), r.join(META_DIR).join("h")).unwrap();
        std::fs::write(r.join("e/z"), b"z").unwrap();
        let ino = std::fs::metadata(r.join("b/c/y")).unwrap().ino();
        let root = crate::sys::fd::open_root(r).unwrap();
        let skip = |dir: &[u8], name: &[u8]| dir == ROOT_REL && name == META_DIR.as_bytes();
        assert_eq!(
            find_identity(root.as_fd(), ino, &skip),
            vec![b"a/x (deleted)".to_vec(), b"b/c/y".to_vec()]
        );
        let gone = std::fs::metadata(r.join("e/z")).unwrap().ino();
        std::fs::remove_file(r.join("e/z")).unwrap();
        assert!(find_identity(root.as_fd(), gone, &skip).is_empty());
    }

    #[test]
    fn a_cover_expands_to_what_changed_since_its_time() {
        use std::os::fd::AsFd;
        let (_d, roots) = legs(2);
        for r in &roots {
            std::fs::create_dir_all(r.join("d/sub")).unwrap();
            std::fs::write(r.join("d/old"), b"settled").unwrap();
            std::fs::write(r.join("d/same"), b"same").unwrap();
        }
        std::fs::write(roots[0].join("d/new"), b"only on leg 0").unwrap();
        std::fs::write(roots[1].join("d/same"), b"SAME").unwrap();
        // Equal mtimes on both legs (the two writes may fall in different clock ticks).
        let then = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        for r in &roots {
            for f in ["d/old", "d/same", "d/sub"] {
                std::fs::File::open(r.join(f))
                    .unwrap()
                    .set_modified(then)
                    .unwrap();
            }
        }
        let fds = open_roots(&roots);
        let b: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
        let never = |_: &[u8], _: &[u8]| false;
        // Everything was changed after time 0.
        let mut all = expand_cover(&b, cov(b"d", 0), &never);
        all.sort();
        assert_eq!(
            all,
            vec![
                b"d".to_vec(),
                b"d/new".to_vec(),
                b"d/old".to_vec(),
                b"d/same".to_vec(),
                b"d/sub".to_vec()
            ]
        );
        // Far in the future: only what differs or is missing somewhere.
        let mut later = expand_cover(&b, cov(b"d", u64::MAX / 2), &never);
        later.retain(|p| p != b"d/same");
        later.sort();
        assert_eq!(later, vec![b"d".to_vec(), b"d/new".to_vec()]);
        // ("same" and "SAME": equal sizes, and mtimes that may fall in one clock tick, so
        // only the ctime rule is sure to list them.)
        let root = expand_cover(&b, cov(b".", u64::MAX / 2), &|d, n| {
            d == b"." && n == META_DIR.as_bytes()
        });
        // ("d" may be listed: leg 0's copy got an entry more, so its mtime may differ.)
        assert_eq!(root[0], b".");
        assert!(root.iter().all(|p| p == b"." || p == b"d"), "{root:?}");
    }

    #[test]
    fn a_cover_expands_into_recent_subdirectories() {
        use std::os::fd::AsFd;
        let (_d, roots) = legs(2);
        for r in &roots {
            std::fs::create_dir_all(r.join("d/new/newer")).unwrap();
            std::fs::write(r.join("d/new/newer/f"), b"same").unwrap();
        }
        std::fs::write(roots[0].join("d/new/newer/only0"), b"x").unwrap();
        let fds = open_roots(&roots);
        let b: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
        let never = |_: &[u8], _: &[u8]| false;
        let got = expand_cover(&b, cov(b"d", 0), &never);
        let want: Vec<&[u8]> = vec![
            b"d",
            b"d/new",
            b"d/new/newer",
            b"d/new/newer/f",
            b"d/new/newer/only0",
        ];
        assert_eq!(got, want);
        // Subdirectories older than the cover are not entered: their entries are as settled
        // as they are.
        // (d/new itself may be listed: its mtimes on the two legs may differ.)
        let later = expand_cover(&b, cov(b"d", u64::MAX / 2), &never);
        assert!(!later.iter().any(|p| p.starts_with(b"d/new/")), "{later:?}");
    }

    #[test]
    fn a_subtree_cover_looks_into_every_directory_below() {
        use std::os::fd::AsFd;
        let (_d, roots) = legs(2);
        for r in &roots {
            std::fs::create_dir_all(r.join("t/old/older")).unwrap();
        }
        // Only on leg 1: what an unlink that reached leg 0 alone leaves.
        std::fs::write(roots[1].join("t/old/older/gone"), b"x").unwrap();
        let fds = open_roots(&roots);
        let b: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
        let never = |_: &[u8], _: &[u8]| false;
        let far = u64::MAX / 2;
        let plain = expand_cover(&b, cov(b"t", far), &never);
        assert!(!plain.iter().any(|p| p.ends_with(b"gone")), "{plain:?}");
        let subtree = CoverRecord {
            t: far,
            dir: b"t",
            subtree: true,
        };
        let got = expand_cover(&b, subtree, &never);
        assert!(got.contains(&b"t/old/older/gone".to_vec()), "{got:?}");
        assert_eq!(got[0], b"t");
    }
}
