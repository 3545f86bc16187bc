//! The damage list: the damaged files, the diverged ones, and the rule that tells them apart.
//!
//! Damaged: no leg could give a range back as it was written. Diverged: a leg's copy was
//! changed behind the mirror's back.

use super::store::Stamp;
use super::Integrity;
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};

/// A range of a file that no leg could give back as it was written.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Damage {
    /// The file's path in the mirror, when it was found.
    pub path: String,
    /// First byte and length of each damaged range.
    pub ranges: Vec<(u64, u64)>,
}

/// The damaged and the diverged files of a mount.
#[derive(Default)]
pub(super) struct DamageList {
    damaged: Mutex<BTreeMap<u64, Damage>>,
    /// How many files `damaged` lists (read without its lock on every write).
    count: AtomicU64,
    /// Files whose copy on some leg was changed behind the mirror's back: path, leg names.
    diverged: Mutex<BTreeMap<String, BTreeSet<String>>>,
}

/// Why a copy fails its checksums.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// Its bytes changed without a change to the file (bit rot, a misdirected write): repair.
    Rot,
    /// The copy was changed on its leg behind the mirror's back: report, never revert.
    Diverged,
}

/// The one rule that tells rot from a change on the leg (docs/integrity.md). A copy's ctime
/// moves with every change made through its filesystem and never with rot. `stamp` is the
/// copy's ctime when the mirror last changed it (see [`store`](super::store)); `ctime` is its
/// ctime now. A copy whose ctime is still its stamp was not changed since: rot. One whose ctime
/// moved was changed behind the mirror's back: diverged. Without a stamp (not taken yet, or the
/// leg's store was copied from another leg's), `differs` decides: the copy's size or mtime
/// differ from those of a copy that verifies, which the mirror keeps equal.
///
/// Times compare as equal when their seconds are and one of them has no nanoseconds: a
/// filesystem that keeps none on disk (ext4 with 128-byte inodes) shows them in memory until
/// the inode is evicted.
pub fn classify(stamp: Option<Stamp>, ctime: Stamp, differs: bool) -> Cause {
    let same = |a: Stamp, b: Stamp| a.0 == b.0 && (a.1 == b.1 || a.1 == 0 || b.1 == 0);
    match stamp {
        Some(s) if same(s, ctime) => Cause::Rot,
        Some(_) => Cause::Diverged,
        None if differs => Cause::Diverged,
        None => Cause::Rot,
    }
}

/// The ctime in `st`, as a stamp.
pub fn ctime_of(st: &libc::stat) -> Stamp {
    (st.st_ctime, st.st_ctime_nsec as u32)
}

impl Integrity {
    /// Notes a damaged range (no leg holds it as written).
    pub fn record_damage(&self, id: u64, path: String, offset: u64, len: u64) {
        let mut d = self.damage.damaged.lock();
        let e = d.entry(id).or_insert_with(|| Damage {
            path: path.clone(),
            ranges: Vec::new(),
        });
        e.path = path;
        if !e.ranges.contains(&(offset, len)) {
            e.ranges.push((offset, len));
        }
        self.damage.count.store(d.len() as u64, Ordering::Relaxed);
    }

    /// The file was rewritten over `offset..offset + len`, or removed (`None`): its damage
    /// there is gone.
    pub fn clear_damage(&self, id: u64, range: Option<(u64, u64)>) {
        if self.damage.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut d = self.damage.damaged.lock();
        let Some(e) = d.get_mut(&id) else { return };
        match range {
            None => {
                d.remove(&id);
            }
            Some((o, l)) => {
                e.ranges
                    .retain(|&(ro, rl)| !(ro >= o && ro + rl <= o.saturating_add(l)));
                if e.ranges.is_empty() {
                    d.remove(&id);
                }
            }
        }
        self.damage.count.store(d.len() as u64, Ordering::Relaxed);
    }

    /// Forgets every damaged and diverged file (`mirrorfs status --clear`).
    pub fn clear_all_damage(&self) {
        self.damage.damaged.lock().clear();
        self.damage.count.store(0, Ordering::Relaxed);
        self.damage.diverged.lock().clear();
    }

    /// Notes that `leg`'s copy of the file at `path` was changed behind the mirror's back.
    pub fn record_diverged(&self, path: String, leg: &str) {
        self.damage
            .diverged
            .lock()
            .entry(path)
            .or_default()
            .insert(leg.to_string());
    }

    /// The diverged files: path and the legs whose copy diverged.
    pub fn diverged(&self) -> Vec<(String, Vec<String>)> {
        self.damage
            .diverged
            .lock()
            .iter()
            .map(|(p, l)| (p.clone(), l.iter().cloned().collect()))
            .collect()
    }

    /// The damaged files.
    pub fn damaged(&self) -> Vec<Damage> {
        self.damage.damaged.lock().values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::sum::sum;
    use super::super::tests::{block, mount};
    use super::*;

    #[test]
    fn a_moved_ctime_is_an_edit_an_unmoved_one_rot() {
        use Cause::*;
        // With a stamp, only the ctime counts: not size or mtime.
        assert_eq!(classify(Some((10, 5)), (10, 5), true), Rot);
        assert_eq!(classify(Some((10, 5)), (10, 6), false), Diverged);
        assert_eq!(classify(Some((10, 5)), (11, 5), false), Diverged);
        // Nanoseconds a filesystem did not keep on disk.
        assert_eq!(classify(Some((10, 5)), (10, 0), false), Rot);
        assert_eq!(classify(Some((10, 0)), (10, 7), false), Rot);
        assert_eq!(classify(Some((10, 5)), (9, 0), false), Diverged);
        // Without one: size or mtime.
        assert_eq!(classify(None, (10, 5), false), Rot);
        assert_eq!(classify(None, (10, 5), true), Diverged);
    }

    #[test]
    fn damage_is_listed_until_rewritten() {
        let (_d, ig) = mount(1);
        let f = ig.new_file(4);
        ig.record_damage(4, "a/b".into(), 4096, 4096);
        assert_eq!(ig.damaged().len(), 1);
        f.set(&ig, 1, &[sum(&block(1))], 0).unwrap();
        assert!(ig.damaged().is_empty());
    }
}
