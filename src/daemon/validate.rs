//! Checking the legs and the mount point before anything is touched.

use crate::leg::spec::{parse_list, LegSpec};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Legs and mount point, checked and canonical.
#[derive(Debug)]
pub struct Validated {
    /// The legs' paths as the user wrote them (for messages).
    pub shown: Vec<String>,
    /// The legs' attributes (`PATH=rot,name=...`).
    pub specs: Vec<LegSpec>,
    pub legs: Vec<PathBuf>,
    pub mountpoint: PathBuf,
    /// Some leg is the root of its own filesystem (its `lost+found` is not ours).
    pub some_leg_is_fs_root: bool,
    /// Per leg: why it cannot be used (only with `-o degraded`; otherwise that is an error).
    pub missing: Vec<Option<String>>,
}

fn canonical_dir(what: &str, shown: &str) -> Result<PathBuf, String> {
    let p = Path::new(shown);
    let meta = match std::fs::metadata(p) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!("{what} '{shown}' does not exist"))
        }
        Err(e) => return Err(format!("{what} '{shown}' cannot be used: {e}")),
    };
    if !meta.is_dir() {
        return Err(format!("{what} '{shown}' is not a directory"));
    }
    std::fs::canonicalize(p).map_err(|e| format!("{what} '{shown}' cannot be used: {e}"))
}

fn is_fs_root(p: &Path) -> bool {
    let Some(parent) = p.parent() else {
        return true;
    };
    match (std::fs::metadata(p), std::fs::metadata(parent)) {
        (Ok(a), Ok(b)) => a.dev() != b.dev(),
        _ => false,
    }
}

/// Checks `LEG[:LEG...]` and the mount point. With `degraded`, a leg that does not exist or
/// cannot be used is recorded as missing instead of refusing (the mirror decides later
/// whether the others can serve).
///
/// A successor (`keeper.rs`) takes the mount point as the first server resolved it
/// (`taken_over`): looking at it would wait for the server that is to answer.
pub fn validate_with(
    legs_arg: &str,
    mountpoint: &Path,
    degraded: bool,
    taken_over: bool,
) -> Result<Validated, String> {
    let specs = parse_list(legs_arg)?;
    let shown: Vec<String> = specs.iter().map(|s| s.path.clone()).collect();
    let mut legs: Vec<PathBuf> = Vec::new();
    let mut missing: Vec<Option<String>> = Vec::new();
    let mut ids: Vec<(u64, u64)> = Vec::new();
    for s in &shown {
        let checked = canonical_dir("leg", s).and_then(|c| {
            let m = std::fs::metadata(&c).map_err(|e| format!("leg '{s}' cannot be used: {e}"))?;
            Ok((c, m))
        });
        let (c, m) = match checked {
            Ok(x) => x,
            Err(e) if degraded => {
                legs.push(PathBuf::from(s));
                missing.push(Some(e));
                continue;
            }
            Err(e) => return Err(e),
        };
        if legs.contains(&c) || ids.contains(&(m.dev(), m.ino())) {
            return Err(format!("leg '{s}' is given twice"));
        }
        ids.push((m.dev(), m.ino()));
        legs.push(c);
        missing.push(None);
    }
    let present = |i: usize| missing[i].is_none();
    for (i, a) in legs.iter().enumerate() {
        for (j, b) in legs.iter().enumerate() {
            if i != j && present(i) && present(j) && a.starts_with(b) {
                return Err(format!("leg '{}' is inside leg '{}'", shown[i], shown[j]));
            }
        }
    }
    let mshown = mountpoint.display().to_string();
    let m = match taken_over {
        true => mountpoint.to_path_buf(),
        false => canonical_dir("mount point", &mshown)?,
    };
    for (i, leg) in legs.iter().enumerate() {
        if !present(i) {
            continue;
        }
        if leg.starts_with(&m) {
            return Err(format!(
                "leg '{}' is inside the mount point '{mshown}'",
                shown[i]
            ));
        }
        if m.starts_with(leg) {
            return Err(format!(
                "mount point '{mshown}' is inside leg '{}'",
                shown[i]
            ));
        }
    }
    let some_leg_is_fs_root = legs
        .iter()
        .enumerate()
        .any(|(i, l)| present(i) && is_fs_root(l));
    Ok(Validated {
        shown,
        specs,
        legs,
        mountpoint: m,
        some_leg_is_fs_root,
        missing,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validate(legs_arg: &str, mountpoint: &Path, degraded: bool) -> Result<Validated, String> {
        validate_with(legs_arg, mountpoint, degraded, false)
    }

    #[test]
    fn bad_layouts_are_named() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        let m = d.path().join("m");
        std::fs::create_dir_all(a.join("inner")).unwrap();
        std::fs::create_dir(&m).unwrap();
        std::fs::write(d.path().join("file"), b"").unwrap();
        let s = |p: &Path| p.display().to_string();
        let ok = validate(
            &format!("{}:{}", s(&a), s(&d.path().join("b_missing"))),
            &m,
            false,
        );
        assert!(ok.unwrap_err().ends_with("does not exist"));
        let e = validate(
            &format!("{}:{}", s(&a), s(&d.path().join("file"))),
            &m,
            false,
        )
        .unwrap_err();
        assert!(e.ends_with("is not a directory"), "{e}");
        let e = validate(&format!("{}:{}/.", s(&a), s(&a)), &m, false).unwrap_err();
        assert!(e.ends_with("is given twice"), "{e}");
        let e = validate(&format!("{}:{}", s(&a), s(&a.join("inner"))), &m, false).unwrap_err();
        assert!(e.contains("is inside leg"), "{e}");
        let e = validate(&s(&a), &a.join("inner"), false).unwrap_err();
        assert!(
            e.contains("mount point") && e.contains("is inside leg"),
            "{e}"
        );
        std::fs::create_dir(m.join("leg")).unwrap();
        let e = validate(&s(&m.join("leg")), &m, false).unwrap_err();
        assert!(e.contains("is inside the mount point"), "{e}");
        assert!(validate(&format!("{}:", s(&a)), &m, false)
            .unwrap_err()
            .contains("empty leg"));
    }
}
