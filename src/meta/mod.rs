//! What mirrorfs keeps on each leg for itself, in the leg's `.mirrorfs/` folder (invisible
//! through the mount).

pub mod array;
pub mod changes;
pub mod membership;
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
