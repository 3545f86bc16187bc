//! The per-leg superblock: which mirror a leg belongs to, which slot it holds, and which of its
//! peers it has seen dropped.
//!
//! Stored as `.mirrorfs/superblock.json`, written atomically (temporary file, fsync, rename,
//! fsync of the folder), so a crash leaves either the old or the new version.

use super::META_DIR;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The format's version; a leg with a newer one is refused.
pub const FORMAT_VERSION: u32 = 1;
const FILE_NAME: &str = "superblock.json";
const MAGIC: &str = "mirrorfs-superblock";

/// One leg's superblock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LegSuperblock {
    /// Always "mirrorfs-superblock".
    pub magic: String,
    pub format_version: u32,
    /// Shared by every leg of one mirror.
    pub array_id: String,
    /// This leg's own identity.
    pub leg_id: String,
    /// Position in the leg list.
    pub slot: usize,
    /// How many legs the mirror had when this was written.
    pub leg_count: usize,
    /// Leg ids this leg saw dropped (after an I/O error or a disagreement): their copies may
    /// be behind, and must not be trusted until they are resynced.
    #[serde(default)]
    pub failed_legs: Vec<String>,
    /// md's event counter: moves on at every mount, clean unmount and leg drop written here.
    /// Of two legs, the one with fewer events missed something.
    #[serde(default)]
    pub events: u64,
    /// False from the mount until the clean unmount: a leg found not clean at mount was
    /// part of a mirror that crashed (or lost power).
    #[serde(default = "clean_by_default")]
    pub clean: bool,
    /// Every member's leg id, by slot, as this leg last knew them (so that a member missing
    /// at mount can be named and recorded).
    #[serde(default)]
    pub members: Vec<String>,
}

fn clean_by_default() -> bool {
    true
}

impl LegSuperblock {
    /// A new superblock for `slot` of a new mirror.
    pub fn new(array_id: &str, slot: usize, leg_count: usize) -> LegSuperblock {
        LegSuperblock {
            magic: MAGIC.to_string(),
            format_version: FORMAT_VERSION,
            array_id: array_id.to_string(),
            leg_id: crate::sys::random_hex_id(),
            slot,
            leg_count,
            failed_legs: Vec::new(),
            events: 0,
            clean: true,
            members: Vec::new(),
        }
    }

    /// The superblock's path on the leg at `leg_root`.
    pub fn path(leg_root: &Path) -> PathBuf {
        leg_root.join(META_DIR).join(FILE_NAME)
    }

    /// Reads the leg's superblock: `Ok(None)` when the leg has none yet.
    pub fn read(leg_root: &Path) -> Result<Option<LegSuperblock>, String> {
        let p = Self::path(leg_root);
        let text = match std::fs::read_to_string(&p) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot read '{}': {e}", p.display())),
        };
        let sb: LegSuperblock = serde_json::from_str(&text)
            .map_err(|e| format!("'{}' is damaged: {e}", p.display()))?;
        if sb.magic != MAGIC {
            return Err(format!("'{}' is not a mirrorfs superblock", p.display()));
        }
        if sb.format_version > FORMAT_VERSION {
            return Err(format!(
                "'{}' has format version {}, newer than this mirrorfs ({FORMAT_VERSION})",
                p.display(),
                sb.format_version
            ));
        }
        Ok(Some(sb))
    }

    /// Writes the superblock atomically, creating `.mirrorfs/` if needed.
    pub fn write(&self, leg_root: &Path) -> std::io::Result<()> {
        let mut text = serde_json::to_string_pretty(self)?;
        text.push('\n');
        super::write_atomic(leg_root, FILE_NAME, text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_absent() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(LegSuperblock::read(d.path()).unwrap(), None);
        let mut sb = LegSuperblock::new("abc", 1, 2);
        sb.failed_legs.push("x".into());
        sb.write(d.path()).unwrap();
        assert_eq!(LegSuperblock::read(d.path()).unwrap(), Some(sb));
    }

    #[test]
    fn damaged_or_newer_is_refused() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join(META_DIR)).unwrap();
        std::fs::write(LegSuperblock::path(d.path()), "{").unwrap();
        assert!(LegSuperblock::read(d.path())
            .unwrap_err()
            .contains("damaged"));
        let mut sb = LegSuperblock::new("abc", 0, 1);
        sb.format_version = FORMAT_VERSION + 1;
        sb.write(d.path()).unwrap();
        assert!(LegSuperblock::read(d.path()).unwrap_err().contains("newer"));
    }
}
