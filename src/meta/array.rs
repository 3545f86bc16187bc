//! Deciding, before anything is written, whether a set of legs forms one mirror, and what
//! state each leg is in.
//!
//! - No leg has a superblock: a new mirror. Every leg must be there. Legs that hold the same
//!   tree (all empty, or identical) start in sync. When exactly one leg holds data and the
//!   others are empty, that data is adopted: the empty legs start stale and are resynced
//!   from it in the background. Legs holding different data are refused unless the user names
//!   the source (`-o init_from=LEG`): mirrorfs never guesses which copy to keep. Superblocks
//!   are written only once the mount is up ([`ArrayPlan::commit`]).
//! - Otherwise the legs with a superblock must name the same array and distinct leg ids.
//!   A leg is **missing** when it does not exist, cannot be used, or has no superblock (the
//!   empty mount point of a disk that is not mounted). A leg is **stale** when it is behind:
//!   another leg recorded it as dropped or missing, or its event counter is lower. A missing
//!   leg refuses the mount unless `-o degraded` is given; then the others serve and record it.
//!   A stale leg is mounted but not used: it is resynced in the background and joins once up
//!   to date. Two legs that each recorded the other as dropped were used apart (split
//!   brain): always refused.

use super::membership;
use super::superblock::LegSuperblock;
use std::os::fd::AsFd;
use std::path::PathBuf;

/// What the mount will do with one leg.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlannedLeg {
    /// Up to date: serves reads and takes writes.
    InSync,
    /// Not there or not usable; the reason, in words.
    Missing(String),
    /// There, but behind the others; the reason, in words.
    Stale(String),
}

/// What mounting these legs means for their superblocks.
#[derive(Debug)]
pub struct ArrayPlan {
    /// By slot; `None` for a leg without one (missing).
    pub superblocks: Vec<Option<LegSuperblock>>,
    pub states: Vec<PlannedLeg>,
    /// True when the superblocks are new and still have to be written.
    pub is_new: bool,
    /// Some in-sync leg was not cleanly unmounted: the mirror crashed or lost power.
    pub crashed: bool,
    /// A new mirror over legs that already held the same tree: their metadata agree, and
    /// their contents are to be compared in the background once the mount is up (a scrub).
    pub check_contents: bool,
    /// Members of the mirror not in the leg list at all (only with `-o degraded`).
    pub unlisted_members: usize,
    legs: Vec<PathBuf>,
}

impl ArrayPlan {
    /// Checks the legs (given as shown to the user, and canonical; `missing[i]` says why leg
    /// `i` cannot be used) and plans their states.
    pub fn prepare(
        shown: &[String],
        legs: &[PathBuf],
        missing: &[Option<String>],
        hide_lost_found: bool,
        degraded: bool,
        init_from: Option<usize>,
    ) -> Result<ArrayPlan, String> {
        let n = legs.len();
        let mut states: Vec<PlannedLeg> = missing
            .iter()
            .map(|m| match m {
                Some(why) => PlannedLeg::Missing(why.clone()),
                None => PlannedLeg::InSync,
            })
            .collect();
        let mut existing: Vec<Option<LegSuperblock>> = vec![None; n];
        for i in 0..n {
            if states[i] == PlannedLeg::InSync {
                existing[i] = LegSuperblock::read(&legs[i])
                    .map_err(|e| format!("leg '{}': {e}", shown[i]))?;
            }
        }
        let have = existing.iter().filter(|s| s.is_some()).count();
        if have == 0 {
            if let Some(i) = states.iter().position(|s| *s != PlannedLeg::InSync) {
                return Err(format!(
                    "leg '{}' is missing, and a new mirror needs every leg",
                    shown[i]
                ));
            }
            let holds_data = |i: usize| {
                std::fs::read_dir(&legs[i]).is_ok_and(|mut rd| {
                    rd.any(|e| {
                        e.is_ok_and(|e| {
                            !super::is_foreign_root_name(&e.file_name(), hide_lost_found)
                        })
                    })
                })
            };
            let source = match (init_from, first_difference(shown, legs, hide_lost_found)?) {
                (Some(s), _) => Some(s),
                (None, None) => None,
                (None, Some(d)) => {
                    let full: Vec<usize> = (0..n).filter(|&i| holds_data(i)).collect();
                    if full.len() == 1 {
                        Some(full[0])
                    } else {
                        return Err(format!(
                            "legs differ at first mount: {d}; name the leg whose data to keep \
                             with -o init_from=LEG (the others are overwritten), or make them \
                             identical (or empty) first"
                        ));
                    }
                }
            };
            if let Some(s) = source {
                for i in (0..n).filter(|&i| i != s) {
                    let pair = [shown[s].clone(), shown[i].clone()];
                    let same = first_difference(
                        &pair,
                        &[legs[s].clone(), legs[i].clone()],
                        hide_lost_found,
                    )?
                    .is_none();
                    if !same {
                        states[i] = PlannedLeg::Stale(format!(
                            "leg '{}' is initialised from '{}'",
                            shown[i], shown[s]
                        ));
                    }
                }
            }
            let check_contents = (0..n)
                .filter(|&i| states[i] == PlannedLeg::InSync && holds_data(i))
                .count()
                >= 2;
            let array_id = crate::sys::random_hex_id();
            let superblocks: Vec<LegSuperblock> = (0..n)
                .map(|slot| LegSuperblock::new(&array_id, slot, n))
                .collect();
            let members: Vec<String> = superblocks.iter().map(|s| s.leg_id.clone()).collect();
            // The legs to fill start behind: every other leg records them as dropped, so that
            // a crash before they are filled cannot make them look in sync.
            let behind: Vec<String> = (0..n)
                .filter(|&i| states[i] != PlannedLeg::InSync)
                .map(|i| superblocks[i].leg_id.clone())
                .collect();
            let superblocks: Vec<LegSuperblock> = superblocks
                .into_iter()
                .enumerate()
                .map(|(i, mut s)| {
                    if states[i] == PlannedLeg::InSync {
                        s.failed_legs = behind.clone();
                    }
                    s
                })
                .collect();
            return Ok(ArrayPlan {
                superblocks: superblocks
                    .into_iter()
                    .map(|mut s| {
                        s.members = members.clone();
                        Some(s)
                    })
                    .collect(),
                states,
                is_new: true,
                crashed: false,
                check_contents,
                unlisted_members: 0,
                legs: legs.to_vec(),
            });
        }
        // Present legs without a superblock are not (or no longer) members.
        for i in 0..n {
            if states[i] == PlannedLeg::InSync && existing[i].is_none() {
                states[i] = PlannedLeg::Missing(format!(
                    "leg '{}' has no superblock: it is not part of this mirror (a disk that is \
                     not mounted?)",
                    shown[i]
                ));
            }
        }
        let present: Vec<usize> = (0..n).filter(|&i| existing[i].is_some()).collect();
        let first = existing[present[0]].as_ref().expect("present");
        for &i in &present {
            let sb = existing[i].as_ref().expect("present");
            if sb.array_id != first.array_id {
                return Err(format!(
                    "leg '{}' belongs to another mirror (array {}, not {})",
                    shown[i], sb.array_id, first.array_id
                ));
            }
            if let Some(&j) = present
                .iter()
                .take_while(|&&j| j < i)
                .find(|&&j| existing[j].as_ref().expect("present").leg_id == sb.leg_id)
            {
                return Err(format!(
                    "legs '{}' and '{}' are the same leg (a copy of a leg's folder?)",
                    shown[j], shown[i]
                ));
            }
        }
        let sb = |i: usize| existing[i].as_ref().expect("present");
        // Split brain: each recorded the other as dropped.
        for &i in &present {
            for &j in &present {
                if i < j
                    && sb(i).failed_legs.contains(&sb(j).leg_id)
                    && sb(j).failed_legs.contains(&sb(i).leg_id)
                {
                    return Err(format!(
                        "legs '{}' and '{}' were each used without the other (each recorded \
                         the other as dropped); their copies may both hold changes. Mount one \
                         of them alone with -o degraded, and bring the other back as a new leg",
                        shown[i], shown[j]
                    ));
                }
            }
        }
        let max_events = present.iter().map(|&i| sb(i).events).max().unwrap_or(0);
        for &i in &present {
            let dropped_by = present
                .iter()
                .find(|&&j| sb(j).failed_legs.contains(&sb(i).leg_id));
            if let Some(&j) = dropped_by {
                states[i] = PlannedLeg::Stale(format!(
                    "leg '{}' was dropped from the mirror while '{}' carried on; its copy is out \
                     of date",
                    shown[i], shown[j]
                ));
            } else if sb(i).events < max_events {
                states[i] = PlannedLeg::Stale(format!(
                    "leg '{}' is behind the others (event {} of {max_events}); its copy is out \
                     of date",
                    shown[i],
                    sb(i).events
                ));
            }
        }
        // Members the authoritative (newest) superblock knows of that were not given at all.
        let newest = membership::authoritative(&existing)
            .map(|(i, _)| i)
            .expect("one present");
        let given_ids: Vec<&str> = present.iter().map(|&i| sb(i).leg_id.as_str()).collect();
        let not_given = sb(newest)
            .members
            .iter()
            .filter(|m| !m.is_empty() && !given_ids.contains(&m.as_str()))
            .count();
        let absent_members = not_given.max(sb(newest).leg_count.saturating_sub(n));
        let missing_in_list = states
            .iter()
            .filter(|s| matches!(s, PlannedLeg::Missing(_)))
            .count();
        let unlisted_members = absent_members.saturating_sub(missing_in_list);
        if !states.contains(&PlannedLeg::InSync) {
            return Err("no leg of the mirror is up to date and usable".into());
        }
        if !degraded {
            for s in &states {
                if let PlannedLeg::Missing(why) = s {
                    return Err(format!(
                        "{why}; mount with -o degraded to serve from the other legs"
                    ));
                }
            }
            if absent_members > n.saturating_sub(present.len()) {
                return Err(format!(
                    "the mirror has {} legs but {n} were given; mount with -o degraded to \
                     serve from these",
                    sb(newest).leg_count
                ));
            }
        }
        let crashed = present
            .iter()
            .any(|&i| states[i] == PlannedLeg::InSync && !sb(i).clean);
        Ok(ArrayPlan {
            superblocks: existing,
            states,
            is_new: false,
            crashed,
            check_contents: false,
            unlisted_members,
            legs: legs.to_vec(),
        })
    }

    /// The superblocks as they are once the mount is up ([`membership::Event::Mount`]): every
    /// in-sync leg moves its event counter on, is marked not clean (until the clean unmount),
    /// and records every member that is missing or stale, so that it cannot come back
    /// unnoticed.
    pub fn mounted_superblocks(&self) -> Vec<Option<LegSuperblock>> {
        self.mount_transition().sbs
    }

    fn mount_transition(&self) -> membership::Transition {
        let serving: Vec<usize> = (0..self.states.len())
            .filter(|&i| self.states[i] == PlannedLeg::InSync)
            .collect();
        membership::transition(&self.superblocks, &serving, &membership::Event::Mount)
    }

    /// Writes the in-sync legs' superblocks for the mount (see
    /// [`mounted_superblocks`](Self::mounted_superblocks)), and for a new mirror the legs to
    /// fill as well (their superblock as a member that is behind); returns them.
    ///
    /// A new mirror's `.mirrorfs/` folders move the leg roots' mtimes, each by its own clock:
    /// afterwards every in-sync leg's root gets the mtime the first one had before, so that
    /// the roots stay what they were to users and identical to each other.
    pub fn commit(&self) -> Result<Vec<Option<LegSuperblock>>, String> {
        let t = self.mount_transition();
        let serving: Vec<usize> = (0..self.states.len())
            .filter(|&i| self.states[i] == PlannedLeg::InSync)
            .collect();
        let root_times = match (self.is_new, serving.first()) {
            (true, Some(&first)) => std::fs::symlink_metadata(&self.legs[first]).ok(),
            _ => None,
        };
        for (i, (sb, leg)) in t.sbs.iter().zip(&self.legs).enumerate() {
            let write = t.write.contains(&i)
                || (self.is_new && matches!(self.states[i], PlannedLeg::Stale(_)));
            if let (Some(sb), true) = (sb, write) {
                sb.write(leg).map_err(|e| {
                    format!("cannot write the superblock on '{}': {e}", leg.display())
                })?;
            }
        }
        if let Some(m) = root_times {
            use std::os::unix::fs::MetadataExt;
            let ts = |sec, nsec| libc::timespec {
                tv_sec: sec,
                tv_nsec: nsec,
            };
            let (atime, mtime) = (ts(m.atime(), m.atime_nsec()), ts(m.mtime(), m.mtime_nsec()));
            for &i in &serving {
                let set = crate::sys::fd::open_root(&self.legs[i])
                    .and_then(|fd| crate::sys::fd::set_times(fd.as_fd(), atime, mtime));
                if let Err(e) = set {
                    log::warn!("cannot set the mtime of '{}': {e}", self.legs[i].display());
                }
            }
        }
        Ok(t.sbs)
    }
}

/// What the first mount checks of legs that already hold data, with the tree engine (one
/// component at a time, without following symlinks): every entry's name, type, size, mode,
/// owner, mtime (files, symlinks and devices; not directories'), symlink target, device
/// number, xattrs and hard links. File contents are not read here (a large tree would keep the
/// mount from answering for as long as reading it takes); a scrub compares them in the
/// background once the mount is up ([`ArrayPlan::check_contents`]). `None` when every leg
/// holds the same tree, else the first difference in words; `Err` when a leg cannot be read
/// at all.
fn first_difference(
    shown: &[String],
    legs: &[PathBuf],
    hide_lost_found: bool,
) -> Result<Option<String>, String> {
    use crate::tree::{self, Control, DiffKind, Difference, EntryHook, TreeOptions};
    use std::sync::{atomic::AtomicBool, Arc, Mutex};
    if legs.len() < 2 {
        return Ok(None);
    }
    /// Keeps the first difference (or unreadable entry) and stops the walk there.
    struct First {
        found: Mutex<Option<String>>,
        cancel: Arc<AtomicBool>,
        shown: Vec<String>,
    }
    impl First {
        fn keep(&self, what: String) {
            self.found
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(what);
            self.cancel
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    impl EntryHook for First {
        fn difference(&self, d: &Difference) {
            self.keep(describe(d, &self.shown));
        }
        fn error(&self, path: &std::path::Path, leg: usize, errno: crate::errno::Errno) {
            let leg = self.shown.get(leg).map_or("?", String::as_str);
            self.keep(format!(
                "'/{}' cannot be read on '{leg}': {errno}",
                path.display()
            ));
        }
    }
    /// A difference in words: where it is, and what differs.
    fn describe(d: &Difference, shown: &[String]) -> String {
        let at = format!("'/{}'", d.path.display());
        let on = |pick: &dyn Fn(&crate::tree::LegDetail) -> bool| -> String {
            let legs: Vec<&str> = (d.legs.iter().zip(shown))
                .filter(|(l, _)| pick(l))
                .map(|(_, s)| s.as_str())
                .collect();
            legs.join("', '")
        };
        if d.has(DiffKind::Missing) {
            return format!("{at} exists only on '{}'", on(&|l| l.compared && l.present));
        }
        let what: Vec<String> = d
            .kinds
            .iter()
            .map(|k| match k {
                DiffKind::Type => {
                    "type (a file on one leg, a directory or other on another)".into()
                }
                DiffKind::Size => {
                    let sizes: Vec<String> = d.legs.iter().map(|l| l.size.to_string()).collect();
                    format!("size ({})", sizes.join(" and "))
                }
                DiffKind::Mode => {
                    let modes: Vec<String> =
                        d.legs.iter().map(|l| format!("{:o}", l.mode)).collect();
                    format!("mode ({})", modes.join(" and "))
                }
                DiffKind::Owner => "owner".into(),
                DiffKind::Mtime => "modification time".into(),
                DiffKind::SymlinkTarget => "symlink target".into(),
                DiffKind::Rdev => "device number".into(),
                DiffKind::Xattrs => "extended attributes".into(),
                DiffKind::Content => "contents".into(),
                DiffKind::HardLinks => "hard links".into(),
                DiffKind::ReadError => "cannot be read on some leg".into(),
                DiffKind::Missing => "presence".into(),
            })
            .collect();
        format!("{at} has a different {}", what.join(", "))
    }
    let roots = legs
        .iter()
        .zip(shown)
        .map(|(l, s)| {
            crate::sys::fd::open_root(l).map_err(|e| format!("leg '{s}' cannot be read: {e}"))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let fds: Vec<_> = roots.iter().map(|r| r.as_fd()).collect();
    let opts = TreeOptions {
        skip_root_names: super::foreign_root_names(hide_lost_found),
        compare_content: false,
        count_first: false,
        ..TreeOptions::default()
    };
    let ctl = Control::new(None);
    let first = Arc::new(First {
        found: Mutex::new(None),
        cancel: ctl.cancel.clone(),
        shown: shown.to_vec(),
    });
    let ctl = ctl.with_hook(first.clone());
    tree::scrub(&fds, &opts, tree::Repair::None, &ctl)
        .map_err(|e| format!("the legs cannot be compared: {e}"))?;
    let found = first.found.lock().unwrap_or_else(|p| p.into_inner()).take();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn existing_data_is_adopted_or_needs_a_named_source() {
        let (_d, l, s) = legs(3);
        let none = vec![None; 3];
        std::fs::write(l[1].join("f"), b"data").unwrap();
        // One leg holds data, the others are empty: adopted from it.
        let p = ArrayPlan::prepare(&s, &l, &none, false, false, None).unwrap();
        assert!(p.is_new);
        assert_eq!(p.states[1], PlannedLeg::InSync);
        assert!(matches!(&p.states[0], PlannedLeg::Stale(w) if w.contains("initialised from")));
        let sbs = p.commit().unwrap();
        let sb1 = sbs[1].as_ref().unwrap();
        for i in [0, 2] {
            let id = &sbs[i].as_ref().unwrap().leg_id;
            assert!(
                sb1.failed_legs.contains(id),
                "the leg to fill is recorded as behind"
            );
            assert!(
                LegSuperblock::read(&l[i]).unwrap().is_some(),
                "and has a superblock"
            );
        }
        // Two legs with different data: refused unless the source is named.
        let (_d2, l2, s2) = legs(2);
        std::fs::write(l2[0].join("f"), b"one").unwrap();
        std::fs::write(l2[1].join("g"), b"two").unwrap();
        let e = ArrayPlan::prepare(&s2, &l2, &none[..2], false, false, None).unwrap_err();
        assert!(e.contains("init_from"), "{e}");
        assert!(
            LegSuperblock::read(&l2[0]).unwrap().is_none(),
            "nothing written"
        );
        let p = ArrayPlan::prepare(&s2, &l2, &none[..2], false, false, Some(1)).unwrap();
        assert_eq!(p.states[1], PlannedLeg::InSync);
        assert!(matches!(p.states[0], PlannedLeg::Stale(_)));
    }

    #[test]
    fn missing_and_behind_legs_need_degraded_and_are_recorded() {
        let (_d, l, s) = legs(2);
        let none = vec![None; 2];
        let first = ArrayPlan::prepare(&s, &l, &none, false, false, None).unwrap();
        first.commit().unwrap();
        // Leg 1 is gone (its disk not mounted): refused, then served with degraded.
        let gone = vec![None, Some("leg 'l1' does not exist".to_string())];
        let e = ArrayPlan::prepare(&s, &l, &gone, false, false, None).unwrap_err();
        assert!(
            e.contains("does not exist") && e.contains("-o degraded"),
            "{e}"
        );
        let p = ArrayPlan::prepare(&s, &l, &gone, false, true, None).unwrap();
        assert_eq!(p.states[0], PlannedLeg::InSync);
        let sbs = p.commit().unwrap();
        let id1 = first.superblocks[1].as_ref().unwrap().leg_id.clone();
        assert!(sbs[0].as_ref().unwrap().failed_legs.contains(&id1));
        assert_eq!(sbs[0].as_ref().unwrap().events, 2);
        // It comes back: stale (recorded, and behind), mounted without degraded, to resync.
        let p = ArrayPlan::prepare(&s, &l, &none, false, false, None).unwrap();
        assert!(matches!(&p.states[1], PlannedLeg::Stale(w) if w.contains("was dropped")));
        // Only one leg given of two: degraded needed.
        let mut sb0 = LegSuperblock::read(&l[0]).unwrap().unwrap();
        sb0.failed_legs.clear();
        sb0.write(&l[0]).unwrap();
        let e = ArrayPlan::prepare(&s[..1], &l[..1], &none[..1], false, false, None).unwrap_err();
        assert!(e.contains("has 2 legs but 1 were given"), "{e}");
        assert!(ArrayPlan::prepare(&s[..1], &l[..1], &none[..1], false, true, None).is_ok());
        // A new mirror needs every leg.
        let (_d2, l2, s2) = legs(2);
        let gone = vec![None, Some("x".to_string())];
        let e = ArrayPlan::prepare(&s2, &l2, &gone, false, true, None).unwrap_err();
        assert!(e.contains("a new mirror needs every leg"), "{e}");
    }

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
        use std::os::unix::fs::MetadataExt;
        let (_d, l, s) = legs(2);
        let none = vec![None; 2];
        let p = ArrayPlan::prepare(&s, &l, &none, false, false, None).unwrap();
        assert!(p.is_new);
        let before = std::fs::metadata(&l[0]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let written = p.commit().unwrap();
        // `.mirrorfs/` was created on both; the roots keep the first leg's mtime.
        for leg in &l {
            let m = std::fs::metadata(leg).unwrap();
            assert!(leg.join(".mirrorfs").is_dir());
            assert_eq!(
                (m.mtime(), m.mtime_nsec()),
                (before.mtime(), before.mtime_nsec())
            );
        }
        let again = ArrayPlan::prepare(&s, &l, &none, false, false, None).unwrap();
        assert!(!again.is_new);
        assert_eq!(again.superblocks, written);
        assert!(again.crashed, "mounted and never cleanly unmounted");
        assert!(written
            .iter()
            .flatten()
            .all(|sb| sb.events == 1 && !sb.clean));
    }

    #[test]
    fn mixed_foreign_and_dropped_legs_are_refused() {
        let (_d, l, s) = legs(3);
        let none = vec![None; 3];
        ArrayPlan::prepare(&s[..2], &l[..2], &none[..2], false, false, None)
            .unwrap()
            .commit()
            .unwrap();
        let e = ArrayPlan::prepare(&s, &l, &none, false, false, None).unwrap_err();
        assert!(e.contains("not part of this mirror"), "{e}");
        // A leg of another mirror.
        ArrayPlan::prepare(&s[2..], &l[2..], &none[2..], false, false, None)
            .unwrap()
            .commit()
            .unwrap();
        let e = ArrayPlan::prepare(&s[1..], &l[1..], &none[1..], false, false, None).unwrap_err();
        assert!(e.contains("belongs to another mirror"), "{e}");
        // A leg recorded as dropped by its peer: stale (to be resynced).
        let mut sb0 = LegSuperblock::read(&l[0]).unwrap().unwrap();
        let sb1 = LegSuperblock::read(&l[1]).unwrap().unwrap();
        sb0.failed_legs.push(sb1.leg_id.clone());
        sb0.write(&l[0]).unwrap();
        let p = ArrayPlan::prepare(&s[..2], &l[..2], &none[..2], false, false, None).unwrap();
        assert_eq!(p.states[0], PlannedLeg::InSync);
        assert!(matches!(p.states[1], PlannedLeg::Stale(_)));
        // Split brain: each dropped the other.
        let mut sb1 = sb1;
        sb1.failed_legs.push(sb0.leg_id.clone());
        sb1.write(&l[1]).unwrap();
        let e = ArrayPlan::prepare(&s[..2], &l[..2], &none[..2], false, true, None).unwrap_err();
        assert!(e.contains("each used without the other"), "{e}");
    }

    fn same(l: &[PathBuf], hide_lost_found: bool) -> Option<String> {
        let shown: Vec<String> = l.iter().map(|p| p.display().to_string()).collect();
        first_difference(&shown, l, hide_lost_found).unwrap()
    }

    /// Copies `from`'s tree onto `to` as `cp -a` does (times, modes, links kept).
    fn cp_a(from: &std::path::Path, to: &std::path::Path) {
        let ok = std::process::Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", from.display()))
            .arg(to)
            .status()
            .unwrap()
            .success();
        assert!(ok);
    }

    #[test]
    fn the_first_mount_compares_metadata_with_the_tree_engine() {
        use std::os::unix::fs::symlink;
        let (_d, l, _) = legs(2);
        assert_eq!(same(&l, false), None, "empty legs agree");
        std::fs::create_dir_all(l[0].join("sub/deeper")).unwrap();
        std::fs::write(l[0].join("sub/f"), b"same").unwrap();
        std::fs::hard_link(l[0].join("sub/f"), l[0].join("h")).unwrap();
        symlink("/etc/passwd", l[0].join("link")).unwrap();
        cp_a(&l[0], &l[1]);
        assert_eq!(same(&l, false), None, "cp -a copies agree");
        // A name on one leg only.
        std::fs::write(l[1].join("sub/extra"), b"x").unwrap();
        let d = same(&l, false).unwrap();
        assert!(d.contains("'/sub/extra' exists only on"), "{d}");
        std::fs::remove_file(l[1].join("sub/extra")).unwrap();
        // Sizes (of /h first, in walk order: it is the same file as /sub/f).
        std::fs::write(l[1].join("sub/f"), b"longer").unwrap();
        let d = same(&l, false).unwrap();
        assert!(d.contains("'/h'") && d.contains("size (4 and 6)"), "{d}");
        // Hard links: the copy has the same bytes and times, but two separate files.
        std::fs::remove_dir_all(&l[1]).unwrap();
        std::fs::create_dir(&l[1]).unwrap();
        cp_a(&l[0], &l[1]);
        assert_eq!(same(&l, false), None);
        std::fs::remove_file(l[1].join("h")).unwrap();
        std::fs::copy(l[0].join("sub/f"), l[1].join("h")).unwrap();
        let t = std::fs::metadata(l[0].join("h"))
            .unwrap()
            .modified()
            .unwrap();
        std::fs::File::options()
            .write(true)
            .open(l[1].join("h"))
            .unwrap()
            .set_modified(t)
            .unwrap();
        let d = same(&l, false).unwrap();
        assert!(d.contains("hard links"), "{d}");
        // The contents themselves are not read here: same sizes and times, other bytes, agree
        // (the scrub after the mount compares them).
        let (_d2, m, _) = legs(2);
        for leg in &m {
            std::fs::write(leg.join("f"), b"AAAA").unwrap();
        }
        std::fs::write(m[1].join("f"), b"BBBB").unwrap();
        let t = std::fs::metadata(m[0].join("f"))
            .unwrap()
            .modified()
            .unwrap();
        std::fs::File::options()
            .write(true)
            .open(m[1].join("f"))
            .unwrap()
            .set_modified(t)
            .unwrap();
        assert_eq!(same(&m, false), None);
        let none = vec![None; 2];
        let shown: Vec<String> = m.iter().map(|p| p.display().to_string()).collect();
        let p = ArrayPlan::prepare(&shown, &m, &none, false, false, None).unwrap();
        assert!(
            p.check_contents,
            "legs adopted with data get their contents compared"
        );
    }

    #[test]
    fn lost_found_is_ignored_only_when_asked() {
        let (_d, l, _) = legs(2);
        std::fs::create_dir(l[0].join("lost+found")).unwrap();
        assert!(same(&l, false).is_some());
        assert_eq!(same(&l, true), None);
    }
}
