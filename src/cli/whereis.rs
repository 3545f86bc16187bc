//! `mirrorfs where FILE...`: where each leg keeps its copy of a file of a mirror, and whether
//! that copy is in sync (mergerfs users ask which drive holds a file; in a mirror every leg
//! should, and this says whether it does).
//!
//! The mount is the innermost mirrorfs mount holding FILE; the copy on each leg is the leg's
//! directory joined with FILE's path inside the mount. Each leg's word comes from the daemon
//! (`user.mirrorfs.copies`: `in_sync`, `stale` when the leg is out of the mirror, `missing`
//! when an in-sync leg has no copy), and the copy itself is looked at on the leg: present, and
//! of the same type, size and modification time as the file the mount serves.

use super::control::{self, EXIT_USAGE};
use crate::stats::LegState;
use serde::Serialize;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// One leg's copy.
#[derive(Serialize, Debug, PartialEq)]
pub struct Copy {
    pub leg: String,
    /// The leg's state in the mirror (ONLINE, FAULTED...).
    pub leg_state: LegState,
    /// What the daemon says of this copy: `in_sync`, `stale` or `missing`.
    pub copy: String,
    pub path: String,
    /// The copy is there, with the served file's type, size and mtime.
    pub exists: bool,
    pub matches: bool,
    /// In sync: the daemon counts it in sync and it looks like the served file.
    pub in_sync: bool,
}

/// Where a file's copies are.
#[derive(Serialize, Debug)]
pub struct Location {
    pub file: String,
    pub mount: String,
    pub relpath: String,
    pub copies: Vec<Copy>,
}

/// `path` made absolute with its directory's symlinks resolved, the last component kept as is
/// (a symlink is looked at itself, not followed).
fn resolved(path: &Path) -> Result<PathBuf, String> {
    let abs = std::path::absolute(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let ends_in_dots = matches!(
        abs.components().next_back(),
        Some(std::path::Component::ParentDir | std::path::Component::CurDir)
    );
    if ends_in_dots {
        return std::fs::canonicalize(&abs).map_err(|e| format!("{}: {e}", path.display()));
    }
    match (abs.parent(), abs.file_name()) {
        (Some(dir), Some(name)) => {
            let dir = std::fs::canonicalize(dir).map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(dir.join(name))
        }
        _ => Ok(abs),
    }
}

/// The innermost mirrorfs mount holding `path`.
fn mount_of(path: &Path) -> Option<PathBuf> {
    control::mounts()
        .into_iter()
        .filter(|m| path.starts_with(m))
        .max_by_key(|m| m.as_os_str().len())
}

fn same(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    a.file_type() == b.file_type()
        && (a.is_dir()
            || (a.len() == b.len() && a.mtime() == b.mtime() && a.mtime_nsec() == b.mtime_nsec()))
}

/// Where `file`'s copies are, or why that cannot be said (exit status, message).
pub fn locate(file: &Path) -> Result<Location, (i32, String)> {
    let path = resolved(file).map_err(|e| (EXIT_USAGE, e))?;
    let served = std::fs::symlink_metadata(&path)
        .map_err(|e| (EXIT_USAGE, format!("{}: {e}", file.display())))?;
    let mount = mount_of(&path).ok_or_else(|| {
        (
            EXIT_USAGE,
            format!("{}: not inside a mirrorfs mount", file.display()),
        )
    })?;
    let rel = path.strip_prefix(&mount).unwrap_or(Path::new(""));
    if rel.starts_with(".mirrorfs") && rel.components().count() == 1 {
        return Err((
            EXIT_USAGE,
            format!("{}: the control file has no copies", file.display()),
        ));
    }
    let st = control::stats(&mount)?;
    // The daemon's word on each copy (not for a symlink: the key would follow it).
    let words: BTreeMap<String, String> = if served.file_type().is_symlink() {
        BTreeMap::new()
    } else {
        let key = CString::new("user.mirrorfs.copies").expect("no NUL");
        let raw = crate::sys::xattr::get_path(&path, &key).map_err(|e| {
            (
                1,
                format!("{}: cannot read its copies: {e}", file.display()),
            )
        })?;
        serde_json::from_slice(&raw)
            .map_err(|e| (1, format!("{}: unreadable copies: {e}", file.display())))?
    };
    let copies = st
        .legs
        .iter()
        .map(|l| {
            let copy_path = if rel.as_os_str().is_empty() {
                PathBuf::from(&l.path)
            } else {
                Path::new(&l.path).join(rel)
            };
            let on_leg = std::fs::symlink_metadata(&copy_path).ok();
            let exists = on_leg.is_some();
            let matches = on_leg.as_ref().is_some_and(|m| same(m, &served));
            let word = words.get(&l.name).cloned().unwrap_or_else(|| {
                match (l.state, exists) {
                    (LegState::InSync, true) => "in_sync",
                    (LegState::InSync, false) => "missing",
                    _ => "stale",
                }
                .to_string()
            });
            Copy {
                leg: l.name.clone(),
                leg_state: l.state,
                in_sync: word == "in_sync" && matches,
                copy: word,
                path: copy_path.display().to_string(),
                exists,
                matches,
            }
        })
        .collect();
    let relpath = format!("/{}", rel.display());
    Ok(Location {
        file: path.display().to_string(),
        mount: mount.display().to_string(),
        relpath,
        copies,
    })
}

/// The report of one file.
pub fn render(loc: &Location) -> String {
    let mut o = format!("{}  (mount {}, {})\n", loc.file, loc.mount, loc.relpath);
    let w = loc
        .copies
        .iter()
        .map(|c| c.leg.len())
        .max()
        .unwrap_or(3)
        .max(3);
    for c in &loc.copies {
        let what = match (c.copy.as_str(), c.exists, c.matches) {
            ("in_sync", _, true) => "in sync".to_string(),
            ("in_sync", true, false) => {
                "DIFFERS: not the served file's type, size or mtime (run a scrub)".to_string()
            }
            ("in_sync", false, _) => "MISSING on the leg (run a scrub)".to_string(),
            ("missing", _, _) => "MISSING: the leg has no copy".to_string(),
            (_, true, _) => format!(
                "NOT IN SYNC: the leg is {} (its copy may be old until it is resynced)",
                c.leg_state
            ),
            (_, false, _) => format!("NOT IN SYNC: the leg is {}, no copy there", c.leg_state),
        };
        o.push_str(&format!(
            "  {:<w$}  {:<9}  {}  {what}\n",
            c.leg,
            c.leg_state.as_str(),
            c.path
        ));
    }
    o
}

/// `mirrorfs where [--json] FILE...`: 0 when every copy of every file is in sync, 1 when one is
/// not, 2 when a file is not in a mirror.
pub fn run(files: &[PathBuf], json: bool) -> i32 {
    let mut worst = 0;
    for f in files {
        match locate(f) {
            Ok(loc) => {
                if json {
                    println!("{}", serde_json::to_string(&loc).expect("serializable"));
                } else {
                    print!("{}", render(&loc));
                }
                if loc.copies.iter().any(|c| !c.in_sync) {
                    worst = worst.max(1);
                }
            }
            Err((code, e)) => {
                eprintln!("mirrorfs: {e}");
                worst = worst.max(code);
            }
        }
    }
    worst
}
