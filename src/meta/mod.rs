//! What mirrorfs keeps on each leg for itself, in the leg's `.mirrorfs/` folder (invisible
//! through the mount).

pub mod array;
pub mod changes;
pub mod superblock;
pub mod tree_compare;

/// The metadata folder's name at the root of every leg.
pub const META_DIR: &str = ".mirrorfs";
