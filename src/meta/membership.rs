//! Who is a member of the mirror, and what each membership event writes into the legs'
//! superblocks: one pure function, [`transition`], for every event (mount, a leg dropped, a
//! leg joining after its resync, a leg replaced, a member removed, the clean unmount). The
//! mirror engine only performs the writes it returns.
//!
//! The rules:
//! - **The newest superblock is authoritative**: the one with the highest event counter; on a
//!   tie, the lowest slot's ([`authoritative`]). Its `members` list says who the members are
//!   (an empty entry: a slot whose member was removed) and its ids name them ([`member_id`]).
//!   An older superblock (a leg that was away while a member was removed or replaced) never
//!   brings a forgotten member back, however long its list.
//! - **Every serving leg says the same**: an event that writes gives every serving (in-sync)
//!   leg the same new event counter (one more than the highest anywhere), so that a leg left
//!   out of a write looks behind at the next mount.
//! - **A member that is not serving is recorded as out** (`failed_legs`) by every serving leg,
//!   before it could be read again: it may be behind.

use super::superblock::LegSuperblock;

/// The legs' superblocks by slot, as last written (`None`: a leg without one).
pub type Superblocks = [Option<LegSuperblock>];

/// The authoritative superblock among `sbs`, with its slot (see the module's rules).
pub fn authoritative(sbs: &Superblocks) -> Option<(usize, &LegSuperblock)> {
    sbs.iter()
        .enumerate()
        .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
        .fold(None, |best, (i, s)| match best {
            Some((_, b)) if b.events >= s.events => best,
            _ => Some((i, s)),
        })
}

/// The members by slot, as the authoritative superblock lists them (`""`: removed).
pub fn members(sbs: &Superblocks) -> Vec<String> {
    authoritative(sbs)
        .map(|(_, s)| s.members.clone())
        .unwrap_or_default()
}

/// The member id of `slot`: its own superblock's, else the authoritative member list's;
/// `None` for a slot without a member (removed, or never one).
pub fn member_id(sbs: &Superblocks, slot: usize) -> Option<String> {
    sbs.get(slot)
        .and_then(|s| s.as_ref().map(|s| s.leg_id.clone()))
        .or_else(|| members(sbs).get(slot).cloned())
        .filter(|id| !id.is_empty())
}

/// The members that are not serving: every member the authoritative superblock lists, or
/// with a superblock of its own in a slot that was not removed, but for `serving`'s.
pub fn out_ids(sbs: &Superblocks, serving: &[usize]) -> Vec<String> {
    let list = members(sbs);
    let serving_ids: Vec<String> = serving.iter().filter_map(|&s| member_id(sbs, s)).collect();
    let listed = list.iter().filter(|m| !m.is_empty()).cloned();
    let present = (0..sbs.len())
        .filter(|&i| list.get(i).is_none_or(|m| !m.is_empty()))
        .filter_map(|i| sbs[i].as_ref().map(|s| s.leg_id.clone()));
    let mut v: Vec<String> = listed
        .chain(present)
        .filter(|id| !serving_ids.contains(id))
        .collect();
    v.sort();
    v.dedup();
    v
}

/// A membership event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The mount is up: every serving leg moves on and is marked not clean (until the clean
    /// unmount); every member not serving is recorded as out. Always written.
    Mount,
    /// Some member stopped serving (dropped, or out since the mount): recorded as out by every
    /// serving leg. Written only if that changes something.
    Dropped,
    /// The clean unmount: as [`Event::Dropped`], and marked clean. Always written.
    CleanUnmount,
    /// The member `id` in `slot` has caught up and joins (`slot` is among the serving legs):
    /// no longer recorded as out, and it gets a superblock of its own.
    Join { slot: usize, id: String },
    /// `slot` gets a new, empty directory as the new member `new_id`, recorded as out until it
    /// is filled; the old member is forgotten. The new directory gets its superblock.
    Replace { slot: usize, new_id: String },
    /// The member in `slot` (out already) is forgotten: no longer listed, counted or awaited.
    Remove { slot: usize },
}

/// What an event does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    /// Every slot's superblock after the event.
    pub sbs: Vec<Option<LegSuperblock>>,
    /// The slots whose superblock must be written (in slot order).
    pub write: Vec<usize>,
}

/// Applies `event` to `sbs`, where `serving` are the slots in sync after it.
pub fn transition(sbs: &Superblocks, serving: &[usize], event: &Event) -> Transition {
    let mut next: Vec<Option<LegSuperblock>> = sbs.to_vec();
    let events = sbs.iter().flatten().map(|s| s.events).max().unwrap_or(0) + 1;
    let out = out_ids(sbs, serving);
    let template = authoritative(&serving_only(sbs, serving)).map(|(_, s)| s.clone());
    let always: bool;
    let mut extra_writes: Vec<usize> = Vec::new();
    match event {
        Event::Mount | Event::Dropped | Event::CleanUnmount => {
            always = !matches!(event, Event::Dropped);
            let clean = *event == Event::CleanUnmount;
            for &s in serving {
                if let Some(sb) = next[s].as_mut() {
                    for id in &out {
                        if !sb.failed_legs.contains(id) {
                            sb.failed_legs.push(id.clone());
                        }
                    }
                    sb.clean = clean;
                }
            }
        }
        Event::Join { slot, id } => {
            always = true;
            // Its own superblock: the others' (the member list, the array) as they are now.
            let others: Vec<usize> = serving.iter().copied().filter(|s| s != slot).collect();
            if let Some((_, t)) = authoritative(&serving_only(sbs, &others)) {
                let mut own = t.clone();
                own.leg_id = id.clone();
                own.slot = *slot;
                next[*slot] = Some(own);
            }
            for &s in serving {
                if let Some(sb) = next[s].as_mut() {
                    sb.failed_legs.retain(|x| x != id);
                    sb.clean = false;
                    // A member that joins is listed (a removed one given again at a mount
                    // comes back as a member).
                    if let Some(m) = sb.members.get_mut(*slot).filter(|m| m.is_empty()) {
                        *m = id.clone();
                        sb.leg_count += 1;
                    }
                }
            }
        }
        Event::Replace { slot, new_id } => {
            always = true;
            let old = member_id(sbs, *slot);
            for &s in serving {
                if let Some(sb) = next[s].as_mut() {
                    sb.failed_legs.retain(|x| Some(x) != old.as_ref());
                    if !sb.failed_legs.contains(new_id) {
                        sb.failed_legs.push(new_id.clone());
                    }
                    if let Some(m) = sb.members.get_mut(*slot) {
                        *m = new_id.clone();
                    }
                }
            }
            if let Some(mut own) = template.clone() {
                own.leg_id = new_id.clone();
                own.slot = *slot;
                own.events = 0;
                own.clean = true;
                own.failed_legs.clear();
                if let Some(m) = own.members.get_mut(*slot) {
                    *m = new_id.clone();
                }
                next[*slot] = Some(own);
                extra_writes.push(*slot);
            }
        }
        Event::Remove { slot } => {
            always = true;
            if let Some(id) = member_id(sbs, *slot) {
                for &s in serving {
                    if let Some(sb) = next[s].as_mut() {
                        sb.failed_legs.retain(|x| *x != id);
                        for m in sb.members.iter_mut().filter(|m| **m == id) {
                            m.clear();
                        }
                        sb.leg_count = sb.leg_count.saturating_sub(1);
                    }
                }
            }
        }
    }
    let changed = serving.iter().any(|&s| next[s] != sbs[s]);
    let mut write: Vec<usize> = Vec::new();
    if always || changed {
        for &s in serving {
            if let Some(sb) = next[s].as_mut() {
                sb.events = events;
                write.push(s);
            }
        }
    }
    write.extend(extra_writes);
    write.sort_unstable();
    write.dedup();
    Transition { sbs: next, write }
}

/// `sbs` with only the `serving` slots' superblocks.
fn serving_only(sbs: &Superblocks, serving: &[usize]) -> Vec<Option<LegSuperblock>> {
    (0..sbs.len())
        .map(|i| serving.contains(&i).then(|| sbs[i].clone()).flatten())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mirror of `n` legs with ids `L0..`, every superblock at `events`.
    fn mirror(n: usize, events: u64) -> Vec<Option<LegSuperblock>> {
        let ids: Vec<String> = (0..n).map(|i| format!("L{i}")).collect();
        (0..n)
            .map(|i| {
                let mut s = LegSuperblock::new("A", i, n);
                s.leg_id = ids[i].clone();
                s.members = ids.clone();
                s.events = events;
                Some(s)
            })
            .collect()
    }

    fn sb(t: &Transition, slot: usize) -> &LegSuperblock {
        t.sbs[slot].as_ref().unwrap()
    }

    #[test]
    fn the_newest_superblock_decides_who_is_a_member() {
        // L2 was removed while leg 2 was away: the newer superblocks (leg 0, 1) no longer
        // list it; leg 2's old one still lists all three, and is as long. The old rule (the
        // longest list, last one on a tie) took leg 2's list and counted L2 as a member.
        let mut sbs = mirror(3, 5);
        for s in sbs.iter_mut().take(2).flatten() {
            s.members[2].clear();
            s.leg_count = 2;
            s.events = 6;
        }
        let longest_last = sbs
            .iter()
            .flatten()
            .map(|s| s.members.clone())
            .max_by_key(|m| m.len())
            .unwrap();
        assert_eq!(
            longest_last,
            vec!["L0", "L1", "L2"],
            "what the old rule saw"
        );
        assert_eq!(members(&sbs), vec!["L0", "L1", ""]);
        assert_eq!(authoritative(&sbs).unwrap().0, 0);
        // Leg 2 given again at a mount: L2 is not a member to record, and its own id stays
        // out of the serving legs' records.
        let t = transition(&sbs, &[0, 1], &Event::Mount);
        assert!(sb(&t, 0).failed_legs.is_empty(), "{:?}", sb(&t, 0));
        // A tie on events: the lowest slot decides, whatever the order.
        let mut tie = mirror(2, 3);
        tie[1].as_mut().unwrap().members = vec!["L0".into(), "X".into()];
        assert_eq!(members(&tie), vec!["L0", "L1"]);
    }

    #[test]
    fn mount_drop_join_and_clean_unmount() {
        let sbs = mirror(2, 4);
        // Mount with leg 1 missing: leg 0 moves on, records L1, is not clean.
        let t = transition(&sbs, &[0], &Event::Mount);
        assert_eq!(t.write, vec![0]);
        assert_eq!(sb(&t, 0).events, 5);
        assert_eq!(sb(&t, 0).failed_legs, vec!["L1"]);
        assert!(!sb(&t, 0).clean);
        // Nothing new to record: a drop writes nothing.
        let again = transition(&t.sbs, &[0], &Event::Dropped);
        assert!(again.write.is_empty());
        assert_eq!(again.sbs, t.sbs);
        // Leg 1 joins: no longer recorded, both legs say the same.
        let j = transition(
            &t.sbs,
            &[0, 1],
            &Event::Join {
                slot: 1,
                id: "L1".into(),
            },
        );
        assert_eq!(j.write, vec![0, 1]);
        for s in [0, 1] {
            assert!(sb(&j, s).failed_legs.is_empty());
            assert_eq!(sb(&j, s).events, 6);
        }
        assert_eq!(sb(&j, 1).leg_id, "L1");
        assert_eq!(sb(&j, 1).slot, 1);
        // The clean unmount: written, clean.
        let c = transition(&j.sbs, &[0, 1], &Event::CleanUnmount);
        assert_eq!(c.write, vec![0, 1]);
        assert!(sb(&c, 0).clean && sb(&c, 1).clean);
        assert_eq!(sb(&c, 0).events, 7);
    }

    #[test]
    fn a_drop_is_recorded_by_every_serving_leg_alike() {
        let sbs = mirror(3, 2);
        // Leg 2 dropped; leg 0 had already recorded it (its write went through, leg 1's
        // not): both are written, with one counter.
        let mut sbs = sbs;
        sbs[0].as_mut().unwrap().failed_legs.push("L2".into());
        let t = transition(&sbs, &[0, 1], &Event::Dropped);
        assert_eq!(t.write, vec![0, 1]);
        assert_eq!(sb(&t, 0).events, sb(&t, 1).events);
        assert_eq!(sb(&t, 1).failed_legs, vec!["L2"]);
        assert_eq!(sb(&t, 0).failed_legs, vec!["L2"], "not twice");
    }

    #[test]
    fn replace_and_remove() {
        let mut sbs = mirror(2, 3);
        sbs[0].as_mut().unwrap().failed_legs.push("L1".into());
        let t = transition(
            &sbs,
            &[0],
            &Event::Replace {
                slot: 1,
                new_id: "N1".into(),
            },
        );
        assert_eq!(t.write, vec![0, 1]);
        assert_eq!(
            sb(&t, 0).failed_legs,
            vec!["N1"],
            "the old member forgotten"
        );
        assert_eq!(sb(&t, 0).members, vec!["L0", "N1"]);
        let new = sb(&t, 1);
        assert_eq!((new.leg_id.as_str(), new.slot, new.events), ("N1", 1, 0));
        assert!(new.clean && new.failed_legs.is_empty());
        assert_eq!(member_id(&t.sbs, 1).as_deref(), Some("N1"));
        // Now forget it.
        let r = transition(&t.sbs, &[0], &Event::Remove { slot: 1 });
        assert_eq!(r.write, vec![0]);
        assert!(sb(&r, 0).failed_legs.is_empty());
        assert_eq!(sb(&r, 0).members, vec!["L0", ""]);
        assert_eq!(sb(&r, 0).leg_count, 1);
        // A later mount with only leg 0 records nobody.
        let m = transition(&r.sbs[..1], &[0], &Event::Mount);
        assert!(sb(&m, 0).failed_legs.is_empty());
        // The removed directory given again, resynced and joined: a member again.
        let mut back = r.sbs.clone();
        back[1].as_mut().unwrap().events = 0;
        let j = transition(
            &back,
            &[0, 1],
            &Event::Join {
                slot: 1,
                id: "N1".into(),
            },
        );
        assert_eq!(sb(&j, 0).members, vec!["L0", "N1"]);
        assert_eq!(sb(&j, 0).leg_count, 2);
        assert_eq!(sb(&j, 1).members, vec!["L0", "N1"]);
    }

    #[test]
    fn members_not_given_at_mount_are_recorded() {
        // Three members; only leg 0 given (slots 1 and 2 have no superblock here).
        let full = mirror(3, 1);
        let given = vec![full[0].clone()];
        let t = transition(&given, &[0], &Event::Mount);
        assert_eq!(sb(&t, 0).failed_legs, vec!["L1", "L2"]);
        assert_eq!(member_id(&given, 0).as_deref(), Some("L0"));
    }
}
