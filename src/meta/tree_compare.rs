//! Comparing legs' trees at first mount: mirrorfs only adopts legs that already agree (all empty,
//! or identical); it never guesses which copy to keep.

use std::fs::{self, Metadata};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::is_foreign_root_name;

/// Returns `None` when every leg holds the same tree, or a description of the first difference.
pub fn first_difference(legs: &[PathBuf], hide_lost_found: bool) -> Option<String> {
    let (first, rest) = legs.split_first()?;
    for other in rest {
        if let Some(d) = compare_dirs(first, other, Path::new(""), hide_lost_found) {
            return Some(d);
        }
    }
    None
}

fn entries(dir: &Path, at_root: bool, hide_lost_found: bool) -> std::io::Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter(|e| !(at_root && is_foreign_root_name(&e.file_name(), hide_lost_found)))
        .map(|e| PathBuf::from(e.file_name()))
        .collect();
    v.sort();
    Ok(v)
}

fn kind(m: &Metadata) -> &'static str {
    let t = m.file_type();
    if t.is_dir() {
        "directory"
    } else if t.is_file() {
        "file"
    } else if t.is_symlink() {
        "symlink"
    } else if t.is_fifo() {
        "fifo"
    } else if t.is_socket() {
        "socket"
    } else if t.is_char_device() {
        "char device"
    } else {
        "block device"
    }
}

fn compare_dirs(a: &Path, b: &Path, rel: &Path, hide_lost_found: bool) -> Option<String> {
    let at_root = rel.as_os_str().is_empty();
    let ea = entries(&a.join(rel), at_root, hide_lost_found);
    let eb = entries(&b.join(rel), at_root, hide_lost_found);
    let (ea, eb) = match (ea, eb) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(e), _) | (_, Err(e)) => return Some(format!("'{}' cannot be read: {e}", shown(rel))),
    };
    if ea != eb {
        let only = ea
            .iter()
            .find(|n| !eb.contains(n))
            .map(|n| (n, a))
            .or_else(|| eb.iter().find(|n| !ea.contains(n)).map(|n| (n, b)));
        if let Some((n, leg)) = only {
            return Some(format!(
                "'{}' exists only on '{}'",
                shown(&rel.join(n)),
                leg.display()
            ));
        }
    }
    for name in &ea {
        let r = rel.join(name);
        let (ma, mb) = match (
            fs::symlink_metadata(a.join(&r)),
            fs::symlink_metadata(b.join(&r)),
        ) {
            (Ok(x), Ok(y)) => (x, y),
            (Err(e), _) | (_, Err(e)) => {
                return Some(format!("'{}' cannot be read: {e}", shown(&r)))
            }
        };
        if let Some(d) = compare_entry(a, b, &r, &ma, &mb, hide_lost_found) {
            return Some(d);
        }
    }
    None
}

fn compare_entry(
    a: &Path,
    b: &Path,
    r: &Path,
    ma: &Metadata,
    mb: &Metadata,
    hide_lost_found: bool,
) -> Option<String> {
    let what = |x: String| Some(format!("'{}' {x}", shown(r)));
    if kind(ma) != kind(mb) {
        return what(format!(
            "is a {} on one leg, a {} on another",
            kind(ma),
            kind(mb)
        ));
    }
    if ma.mode() != mb.mode() {
        return what(format!("has mode {:o} and {:o}", ma.mode(), mb.mode()));
    }
    if (ma.uid(), ma.gid()) != (mb.uid(), mb.gid()) {
        return what("has different owners".into());
    }
    let t = ma.file_type();
    if t.is_dir() {
        return compare_dirs(a, b, r, hide_lost_found);
    }
    if t.is_symlink() {
        if fs::read_link(a.join(r)).ok() != fs::read_link(b.join(r)).ok() {
            return what("points to different targets".into());
        }
    } else if t.is_file() {
        if ma.len() != mb.len() {
            return what(format!("has sizes {} and {}", ma.len(), mb.len()));
        }
        if !same_content(&a.join(r), &b.join(r)) {
            return what("has different contents".into());
        }
    } else if (t.is_char_device() || t.is_block_device()) && ma.rdev() != mb.rdev() {
        return what("is a different device".into());
    }
    None
}

fn same_content(x: &Path, y: &Path) -> bool {
    let (Ok(mut fx), Ok(mut fy)) = (fs::File::open(x), fs::File::open(y)) else {
        return false;
    };
    let mut bx = vec![0u8; 1 << 20];
    let mut by = vec![0u8; 1 << 20];
    loop {
        let nx = match read_full(&mut fx, &mut bx) {
            Ok(n) => n,
            Err(_) => return false,
        };
        let ny = match read_full(&mut fy, &mut by) {
            Ok(n) => n,
            Err(_) => return false,
        };
        if nx != ny || bx[..nx] != by[..ny] {
            return false;
        }
        if nx == 0 {
            return true;
        }
    }
}

fn read_full(f: &mut fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

fn shown(rel: &Path) -> String {
    format!("/{}", rel.display())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::META_DIR;

    fn legs(n: usize) -> (tempfile::TempDir, Vec<PathBuf>) {
        let d = tempfile::tempdir().unwrap();
        let v: Vec<PathBuf> = (0..n).map(|i| d.path().join(format!("l{i}"))).collect();
        for p in &v {
            fs::create_dir(p).unwrap();
        }
        (d, v)
    }

    #[test]
    fn empty_and_identical_agree() {
        let (_d, l) = legs(2);
        assert_eq!(first_difference(&l, false), None);
        for p in &l {
            fs::create_dir(p.join("sub")).unwrap();
            fs::write(p.join("sub/f"), b"same").unwrap();
            fs::create_dir(p.join(META_DIR)).unwrap();
        }
        fs::write(l[0].join(META_DIR).join("x"), b"ignored").unwrap();
        assert_eq!(first_difference(&l, false), None);
    }

    #[test]
    fn differences_are_named() {
        let (_d, l) = legs(2);
        fs::write(l[0].join("f"), b"one").unwrap();
        assert!(first_difference(&l, false)
            .unwrap()
            .contains("'/f' exists only on"));
        fs::write(l[1].join("f"), b"two").unwrap();
        assert!(first_difference(&l, false)
            .unwrap()
            .contains("different contents"));
        fs::write(l[1].join("f"), b"three").unwrap();
        assert!(first_difference(&l, false)
            .unwrap()
            .contains("sizes 3 and 5"));
    }

    #[test]
    fn lost_found_is_ignored_only_when_asked() {
        let (_d, l) = legs(2);
        fs::create_dir(l[0].join("lost+found")).unwrap();
        assert!(first_difference(&l, false).is_some());
        assert_eq!(first_difference(&l, true), None);
    }
}
