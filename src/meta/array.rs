//! Deciding, before anything is written, whether a set of legs forms one mirror.
//!
//! - No leg has a superblock: a new mirror. Its legs must hold the same tree (all empty, or
//!   identical); mirrorfs never guesses which copy to keep. Superblocks are written only once
//!   the mount is up ([`ArrayPlan::commit`]).
//! - Every leg has one: they must name the same array, distinct slots, and no leg may have been
//!   dropped by another (its copy may be behind; resync comes with the recovery work).
//! - A mix: refused (adding a leg to an existing mirror is not supported yet).

use super::superblock::LegSuperblock;
use super::tree_compare;
use std::path::PathBuf;

/// What mounting these legs means for their superblocks.
#[derive(Debug)]
pub struct ArrayPlan {
    pub superblocks: Vec<LegSuperblock>,
    /// True when the superblocks are new and still have to be written.
    pub is_new: bool,
    legs: Vec<PathBuf>,
}

impl ArrayPlan {
    /// Checks the legs (given as shown to the user, and canonical) and plans the superblocks.
    pub fn prepare(
        shown: &[String],
        legs: &[PathBuf],
        hide_lost_found: bool,
    ) -> Result<ArrayPlan, String> {
        let mut existing = Vec::new();
        for (i, leg) in legs.iter().enumerate() {
            let sb = LegSuperblock::read(leg).map_err(|e| format!("leg '{}': {e}", shown[i]))?;
            existing.push(sb);
        }
        let have = existing.iter().filter(|s| s.is_some()).count();
        if have == 0 {
            if let Some(d) = tree_compare::first_difference(legs, hide_lost_found) {
                return Err(format!(
                    "legs differ at first mount: {d}; make them identical (or empty) first"
                ));
            }
            let array_id = crate::sys::random_hex_id();
            let superblocks = (0..legs.len())
                .map(|slot| LegSuperblock::new(&array_id, slot, legs.len()))
                .collect();
            return Ok(ArrayPlan {
                superblocks,
                is_new: true,
                legs: legs.to_vec(),
            });
        }
        if have < legs.len() {
            let i = existing.iter().position(|s| s.is_none()).unwrap_or(0);
            return Err(format!(
                "leg '{}' is not part of this mirror (it has no superblock); adding a leg to \
                 an existing mirror is not supported yet",
                shown[i]
            ));
        }
        let sbs: Vec<LegSuperblock> = existing.into_iter().flatten().collect();
        for (i, sb) in sbs.iter().enumerate() {
            if sb.array_id != sbs[0].array_id {
                return Err(format!(
                    "leg '{}' belongs to another mirror (array {}, not {})",
                    shown[i], sb.array_id, sbs[0].array_id
                ));
            }
            if let Some(j) = sbs[..i].iter().position(|o| o.leg_id == sb.leg_id) {
                return Err(format!(
                    "legs '{}' and '{}' are the same leg (a copy of a leg's folder?)",
                    shown[j], shown[i]
                ));
            }
        }
        for (i, sb) in sbs.iter().enumerate() {
            if let Some(j) = sbs.iter().position(|o| o.failed_legs.contains(&sb.leg_id)) {
                return Err(format!(
                    "leg '{}' was dropped from the mirror while '{}' carried on; its copy may be \
                     out of date and must be resynced before use (not supported yet)",
                    shown[i], shown[j]
                ));
            }
        }
        Ok(ArrayPlan {
            superblocks: sbs,
            is_new: false,
            legs: legs.to_vec(),
        })
    }

    /// Writes the superblocks of a new mirror.
    pub fn commit(&self) -> Result<(), String> {
        if !self.is_new {
            return Ok(());
        }
        for (sb, leg) in self.superblocks.iter().zip(&self.legs) {
            sb.write(leg)
                .map_err(|e| format!("cannot write the superblock on '{}': {e}", leg.display()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn legs(n: usize) -> (tempfile::TempDir, Vec<PathBuf>, Vec<String>) {
        let d = tempfile::tempdir().unwrap();
        let v: Vec<PathBuf> = (0..n).map(|i| d.path().join(format!("l{i}"))).collect();
        for p in &v {
            std::fs::create_dir(p).unwrap();
        }
        let s = v.iter().map(|p| p.display().to_string()).collect();
        (d, v, s)
    }

    #[test]
    fn new_then_existing() {
        let (_d, l, s) = legs(2);
        let p = ArrayPlan::prepare(&s, &l, false).unwrap();
        assert!(p.is_new);
        p.commit().unwrap();
        let again = ArrayPlan::prepare(&s, &l, false).unwrap();
        assert!(!again.is_new);
        assert_eq!(again.superblocks, p.superblocks);
    }

    #[test]
    fn mixed_foreign_and_dropped_legs_are_refused() {
        let (_d, l, s) = legs(3);
        ArrayPlan::prepare(&s[..2], &l[..2], false)
            .unwrap()
            .commit()
            .unwrap();
        let e = ArrayPlan::prepare(&s, &l, false).unwrap_err();
        assert!(e.contains("not part of this mirror"), "{e}");
        // A leg of another mirror.
        ArrayPlan::prepare(&s[2..], &l[2..], false)
            .unwrap()
            .commit()
            .unwrap();
        let e = ArrayPlan::prepare(&s[1..], &l[1..], false).unwrap_err();
        assert!(e.contains("belongs to another mirror"), "{e}");
        // A leg recorded as dropped by its peer.
        let mut sb0 = LegSuperblock::read(&l[0]).unwrap().unwrap();
        let sb1 = LegSuperblock::read(&l[1]).unwrap().unwrap();
        sb0.failed_legs.push(sb1.leg_id);
        sb0.write(&l[0]).unwrap();
        let e = ArrayPlan::prepare(&s[..2], &l[..2], false).unwrap_err();
        assert!(e.contains("was dropped"), "{e}");
    }
}
