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

/// Writes `contents` as `.mirrorfs/NAME` on the leg at `leg_root` atomically, creating the
/// folder (0700) if needed: a temporary file `NAME.tmp` (0600), fsync, rename over `NAME`,
/// fsync of the folder. A crash leaves the old version or the new one, never a mix (at worst
/// the temporary file, which the next write replaces).
pub fn write_atomic(
    leg_root: &std::path::Path,
    name: &str,
    contents: &[u8],
) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let dir = leg_root.join(META_DIR);
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(contents)?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))?;
    std::fs::File::open(&dir)?.sync_all()
}
