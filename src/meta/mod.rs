//! What mirrorfs keeps on each leg for itself, in the leg's `.mirrorfs/` folder (invisible
//! through the mount).

pub mod array;
pub mod changes;
pub mod membership;
pub mod scrub_record;
pub mod superblock;

/// The metadata folder's name at the root of every leg.
pub const META_DIR: &str = ".mirrorfs";

/// The names at a leg's root that belong to the leg, not to the mirror: `.mirrorfs`, and
/// `lost+found` when some leg is the root of its own filesystem (`hide_lost_found`). They are
/// never shown, mirrored, compared or removed.
pub fn foreign_root_names(hide_lost_found: bool) -> Vec<std::ffi::OsString> {
    let mut names = vec![std::ffi::OsString::from(META_DIR)];
    if hide_lost_found {
        names.push("lost+found".into());
    }
    names
}

/// Whether `name`, at a leg's root, is one of [`foreign_root_names`].
pub fn is_foreign_root_name(name: &std::ffi::OsStr, hide_lost_found: bool) -> bool {
    name == META_DIR || (hide_lost_found && name == "lost+found")
}

/// The leg's `.mirrorfs/` folder, opened for reading (and flushing) by descriptor from the
/// leg's root, which is opened from `leg_root` (the callers have only the path); `.mirrorfs`
/// itself is never followed if it is a symlink. With `create`, the folder is made (0700) if
/// there is none.
pub fn open_meta_dir(
    leg_root: &std::path::Path,
    create: bool,
) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::AsFd;
    let name = std::ffi::CString::new(META_DIR).expect("no NUL in the name");
    let root = crate::sys::fd::open_root(leg_root)?;
    if create {
        match crate::sys::fd::mkdir_at(root.as_fd(), &name, 0o700) {
            Ok(()) | Err(crate::errno::Errno(libc::EEXIST)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(crate::sys::fd::open_dir_at(root.as_fd(), &name)?)
}

/// Writes `contents` as `.mirrorfs/NAME` on the leg at `leg_root` atomically, creating the
/// folder (0700) if needed: [`crate::sys::replace::replace_file`] in the folder opened by
/// [`open_meta_dir`] (a temporary file (0600), fsync, rename over `NAME`, fsync of the
/// folder). A crash leaves the old version or the new one, never a mix (at worst the
/// temporary file, `.NAME.PID.N.tmp`).
pub fn write_atomic(
    leg_root: &std::path::Path,
    name: &str,
    contents: &[u8],
) -> std::io::Result<()> {
    let dir = open_meta_dir(leg_root, true)?;
    crate::sys::replace::replace_file_with(&dir, name, 0o600, contents)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_atomic_makes_the_folder_and_never_follows_a_symlink_there() {
        let leg = tempfile::tempdir().unwrap();
        write_atomic(leg.path(), "f", b"one").unwrap();
        write_atomic(leg.path(), "f", b"two").unwrap();
        let dir = leg.path().join(META_DIR);
        assert_eq!(std::fs::read(dir.join("f")).unwrap(), b"two");
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode();
        assert_eq!(mode(&dir) & 0o077, 0, "the folder is private");
        assert_eq!(mode(&dir.join("f")) & 0o7777, 0o600);
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file left");
        // A `.mirrorfs` that is a symlink is refused, not written through.
        let other = tempfile::tempdir().unwrap();
        let leg2 = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(other.path(), leg2.path().join(META_DIR)).unwrap();
        assert!(write_atomic(leg2.path(), "f", b"x").is_err());
        assert!(open_meta_dir(leg2.path(), false).is_err());
        assert_eq!(std::fs::read_dir(other.path()).unwrap().count(), 0);
        // Without `create`, a missing folder is an error.
        let leg3 = tempfile::tempdir().unwrap();
        assert!(open_meta_dir(leg3.path(), false).is_err());
        assert!(!leg3.path().join(META_DIR).exists());
    }
}
