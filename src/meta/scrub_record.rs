//! The record of the last scrub, kept on the legs so that it outlives the mount: operators
//! alert on "no scrub for 35 days", and a reboot must not make a mirror look never scrubbed.
//!
//! Stored as `.mirrorfs/last-scrub.json` on every leg the scrub compared that is still in
//! sync when it ends, written atomically as the superblock is ([`super::write_atomic`]). At
//! mount the newest record of the in-sync legs is taken. The statistics document shows it as
//! `last_scrub`, with the same fields.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

const FILE_NAME: &str = "last-scrub.json";

/// How the last scrub ended, and what it found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubRecord {
    /// `finished` (it went through every entry), `cancelled`, or `failed: REASON`, as the
    /// scrub's own `state` says it.
    pub state: String,
    /// The legs it compared, by name.
    pub legs: Vec<String>,
    /// When it started and ended, Unix seconds.
    pub started_unix_s: u64,
    pub ended_unix_s: u64,
    /// What it went through.
    pub done_entries: u64,
    pub done_bytes: u64,
    /// Differences found, repaired, and errors (as the scrub's progress counts them).
    pub differences: u64,
    pub repaired: u64,
    pub errors: u64,
    /// When the last scrub that went through every entry (`finished`) ended: this one, or
    /// an earlier one when this one was cancelled or failed; `None` if none did.
    pub last_finished_unix_s: Option<u64>,
}

impl ScrubRecord {
    /// Whether the scrub went through every entry.
    pub fn finished(&self) -> bool {
        self.state == "finished"
    }

    /// The record's path on the leg at `leg_root`.
    pub fn path(leg_root: &Path) -> PathBuf {
        leg_root.join(super::META_DIR).join(FILE_NAME)
    }

    /// The leg's record: `Ok(None)` when it has none (never scrubbed, or a leg that was out).
    pub fn read(leg_root: &Path) -> Result<Option<ScrubRecord>, String> {
        let p = Self::path(leg_root);
        match std::fs::read_to_string(&p) {
            Ok(t) => serde_json::from_str(&t)
                .map(Some)
                .map_err(|e| format!("'{}' is damaged: {e}", p.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("cannot read '{}': {e}", p.display())),
        }
    }

    /// The newest record (by end) of the legs at `leg_roots`; a record that cannot be read is
    /// logged and left out: it only ever says when a scrub ran.
    pub fn newest<'a>(leg_roots: impl IntoIterator<Item = &'a Path>) -> Option<ScrubRecord> {
        leg_roots
            .into_iter()
            .filter_map(|root| match Self::read(root) {
                Ok(r) => r,
                Err(e) => {
                    log::warn!("last scrub: {e}");
                    None
                }
            })
            .max_by_key(|r| r.ended_unix_s)
    }

    /// Writes the record on the leg at `leg_root`, atomically.
    pub fn write(&self, leg_root: &Path) -> std::io::Result<()> {
        let mut text = serde_json::to_string_pretty(self)?;
        text.push('\n');
        super::write_atomic(leg_root, FILE_NAME, text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(state: &str, ended: u64) -> ScrubRecord {
        ScrubRecord {
            state: state.into(),
            legs: vec!["leg0".into(), "leg1".into()],
            started_unix_s: ended - 10,
            ended_unix_s: ended,
            done_entries: 9,
            done_bytes: 36,
            differences: 1,
            repaired: 1,
            errors: 0,
            last_finished_unix_s: (state == "finished").then_some(ended),
        }
    }

    #[test]
    fn written_read_back_and_the_newest_wins() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let c = tempfile::tempdir().unwrap();
        assert_eq!(ScrubRecord::read(a.path()).unwrap(), None);
        let old = record("finished", 1_000);
        let new = record("cancelled", 2_000);
        old.write(a.path()).unwrap();
        new.write(b.path()).unwrap();
        assert_eq!(ScrubRecord::read(a.path()).unwrap(), Some(old.clone()));
        assert!(
            new.write(b.path()).is_ok(),
            "a second write replaces the first"
        );
        let roots = [a.path(), b.path(), c.path()];
        assert_eq!(ScrubRecord::newest(roots), Some(new.clone()));
        assert!(!new.finished() && old.finished());
        // No temporary file is left, and the folder is private, like the superblock's.
        let names: Vec<_> = std::fs::read_dir(b.path().join(crate::meta::META_DIR))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(FILE_NAME)]);
        // A damaged record is left out, not taken for none at all.
        std::fs::write(ScrubRecord::path(b.path()), "{").unwrap();
        assert!(ScrubRecord::read(b.path()).unwrap_err().contains("damaged"));
        assert_eq!(ScrubRecord::newest(roots), Some(old));
        assert_eq!(ScrubRecord::newest([c.path()]), None);
    }
}
