//! The inode-number memory: the number of each object on the legs, kept past its inode.
//!
//! Inode numbers are ours, not a leg's: a number is found through the *identity* of the object
//! on any leg, `(leg, st_dev, st_ino)`. All names of a hard link therefore share one number, a
//! rename keeps it, and it does not depend on which leg serves reads. Identities outlive the
//! inode (the kernel may forget it and look it up again: it gets the same number back). A leg
//! can only reuse a backing inode number after the object is gone and its descriptors closed,
//! which happens only once the kernel has forgotten our inode, so a reused identity can never
//! collide with a live inode.

use crate::leg::LegIdx;
use smallvec::SmallVec;
use std::collections::{HashMap, VecDeque};

/// Most inode numbers kept for objects that are not live (forgotten by the kernel, or only
/// named by a listing), with their identities: a few hundred bytes each with two legs.
pub const REMEMBERED: usize = 1 << 16;

/// Where an object sits on one leg.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Identity {
    pub leg: LegIdx,
    pub dev: u64,
    pub ino: u64,
}

/// What the table knows of one inode number.
pub(super) struct Known {
    /// The identities that map to it (the reverse of `identity`), so that a number handed to
    /// a new object first drops every identity of the dead one it replaces. Inline up to two
    /// legs: a remembered number is one of the few things that outlive an inode, and a heap
    /// block of its own for each would stay scattered among the freed inodes, keeping their
    /// memory pages from being given back.
    pub(super) ids: SmallVec<[Identity; 2]>,
    /// While the number is not live: the stamp of its entry in `Numbers::idle_order`; 0 while
    /// it is live.
    idle_stamp: u64,
}

/// Every number handed out that is still known: those of live inodes, and of at most
/// `remembered` that are not.
pub(super) struct Numbers {
    /// Identity on a leg -> inode number: those of live inodes, and of at most `remembered`
    /// numbers that are not live (forgotten by the kernel, or only named by a listing), so
    /// that an object forgotten recently gets the same number back.
    pub(super) identity: HashMap<Identity, u64>,
    /// Every number `identity` maps to, live or not.
    pub(super) known: HashMap<u64, Known>,
    /// The numbers that are known but not live, oldest first, each with the stamp it was
    /// queued under. An entry whose stamp is no longer its number's (the number went live,
    /// was queued again, or was dropped) is stale and skipped.
    idle_order: VecDeque<(u64, u64)>,
    /// How many known numbers are not live (the entries of `idle_order` that are not stale).
    idle: usize,
    /// Most numbers kept while not live: past it, the oldest are dropped.
    remembered: usize,
    next_stamp: u64,
    pub(super) next_ino: u64,
}

impl Numbers {
    /// No number known yet; the first handed out is `first`, and at most `remembered` are
    /// kept while not live.
    pub(super) fn new(remembered: usize, first: u64) -> Numbers {
        Numbers {
            identity: HashMap::new(),
            known: HashMap::new(),
            idle_order: VecDeque::new(),
            idle: 0,
            remembered: remembered.max(1),
            next_stamp: 0,
            next_ino: first,
        }
    }

    /// Makes `ino` the number of exactly the identities `ids`: stale identities of an earlier
    /// object with that number are dropped, and `ids` leave the numbers they had before.
    pub(super) fn bind(&mut self, ino: u64, ids: &[Identity]) {
        let idle_stamp = match self.known.remove(&ino) {
            Some(old) => {
                for id in old.ids {
                    if self.identity.get(&id) == Some(&ino) {
                        self.identity.remove(&id);
                    }
                }
                old.idle_stamp
            }
            None => 0,
        };
        self.known.insert(
            ino,
            Known {
                ids: SmallVec::new(),
                idle_stamp,
            },
        );
        for id in ids {
            self.add_identity(ino, *id);
        }
    }

    /// Maps `id` to `ino` (which must be known), taking it from the number it had.
    pub(super) fn add_identity(&mut self, ino: u64, id: Identity) {
        if let Some(prev) = self.identity.insert(id, ino) {
            if prev != ino {
                let mut orphan = false;
                if let Some(k) = self.known.get_mut(&prev) {
                    k.ids.retain(|x| *x != id);
                    // A number that is not live and has no identity left can never be found
                    // again: it goes now rather than when its turn comes.
                    orphan = k.ids.is_empty() && k.idle_stamp != 0;
                }
                if orphan {
                    self.known.remove(&prev);
                    self.idle -= 1;
                }
            }
        }
        if let Some(k) = self.known.get_mut(&ino) {
            if !k.ids.contains(&id) {
                k.ids.push(id);
            }
        }
    }

    /// `ino` is live (again).
    pub(super) fn set_live(&mut self, ino: u64) {
        if let Some(k) = self.known.get_mut(&ino) {
            if k.idle_stamp != 0 {
                k.idle_stamp = 0;
                self.idle -= 1;
            }
        }
    }

    /// `ino` is not live (any more), or was named again while not live: it becomes the most
    /// recent of the numbers kept, and the oldest go while there are more than `remembered`.
    pub(super) fn set_idle(&mut self, ino: u64) {
        let Some(k) = self.known.get_mut(&ino) else {
            return;
        };
        if k.idle_stamp == 0 {
            self.idle += 1;
        }
        self.next_stamp += 1;
        k.idle_stamp = self.next_stamp;
        self.idle_order.push_back((ino, self.next_stamp));
        while self.idle > self.remembered {
            let Some((old, stamp)) = self.idle_order.pop_front() else {
                break;
            };
            if self.known.get(&old).is_some_and(|k| k.idle_stamp == stamp) {
                self.drop_number(old);
            }
        }
        // Stale entries pile up when numbers go live and idle again without any being
        // dropped: compact.
        if self.idle_order.len() > 2 * self.remembered + 64 {
            let known = &self.known;
            self.idle_order
                .retain(|(n, stamp)| known.get(n).is_some_and(|k| k.idle_stamp == *stamp));
        }
    }

    /// Forgets the number `ino` (not live) and its identities: the objects get a new number
    /// when next seen. Numbers are never handed out twice, so this one is gone for good.
    fn drop_number(&mut self, ino: u64) {
        if let Some(k) = self.known.remove(&ino) {
            if k.idle_stamp != 0 {
                self.idle -= 1;
            }
            for id in k.ids {
                if self.identity.get(&id) == Some(&ino) {
                    self.identity.remove(&id);
                }
            }
        }
    }

    pub(super) fn fresh_number(&mut self) -> u64 {
        let n = self.next_ino;
        self.next_ino += 1;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::id;
    use super::super::{Inode, InodeTable};
    use super::*;
    use std::sync::Arc;

    #[test]
    fn listing_numbers_match_later_lookups() {
        let t = InodeTable::new(vec![None], &[], 64);
        let n = t.number_for(id(0, 55));
        let i = t.claim(&[id(0, 55)], vec![None], libc::S_IFDIR, 0);
        assert_eq!(i.ino, n);
        assert_ne!(t.number_for(id(0, 56)), n);
    }

    #[test]
    fn a_reused_backing_number_never_aliases_a_live_inode() {
        let t = InodeTable::new(vec![None], &[], 64);
        // A dies; a leg reuses one of its backing numbers for B (the other leg does not).
        let a = t.claim(
            &[id(0, 100), id(1, 200)],
            vec![None, None],
            libc::S_IFREG,
            0,
        );
        t.forget(a.ino, 1);
        let b = t.claim(
            &[id(0, 300), id(1, 200)],
            vec![None, None],
            libc::S_IFREG,
            0,
        );
        // Leg 0 now reuses A's other number for C while B is live: C must not become B.
        let c = t.claim(
            &[id(0, 100), id(1, 400)],
            vec![None, None],
            libc::S_IFREG,
            0,
        );
        assert_ne!(c.ino, b.ino);
        // And B's own identities still find B.
        let b2 = t.claim(
            &[id(0, 300), id(1, 200)],
            vec![None, None],
            libc::S_IFREG,
            0,
        );
        assert_eq!(b2.ino, b.ino);
    }

    /// The table's maps agree with each other, and the numbers kept while not live are
    /// within the bound.
    fn check(t: &InodeTable) {
        let inner = t.inner.lock();
        for (id, ino) in &inner.numbers.identity {
            let k = inner
                .numbers
                .known
                .get(ino)
                .expect("an identity maps to a known number");
            assert!(
                k.ids.contains(id),
                "{id:?} -> {ino} not in its number's identities"
            );
        }
        let mut idle = 0;
        for (ino, k) in &inner.numbers.known {
            for id in &k.ids {
                assert_eq!(inner.numbers.identity.get(id), Some(ino), "{id:?} of {ino}");
            }
            assert_eq!(inner.live.contains_key(ino), k.idle_stamp == 0, "{ino}");
            if k.idle_stamp != 0 {
                idle += 1;
                assert!(
                    inner.numbers.idle_order.contains(&(*ino, k.idle_stamp)),
                    "{ino} not queued"
                );
            }
        }
        for ino in inner.live.keys() {
            assert!(
                inner.numbers.known.contains_key(ino),
                "live {ino} not known"
            );
        }
        assert_eq!(inner.numbers.idle, idle);
        assert!(inner.numbers.idle <= inner.numbers.remembered);
        assert!(inner.numbers.idle_order.len() <= 2 * inner.numbers.remembered + 64 + 1);
    }

    fn claim(t: &InodeTable, ids: &[Identity]) -> Arc<Inode> {
        t.claim(ids, vec![None, None], libc::S_IFREG, 0)
    }

    #[test]
    fn numbers_kept_while_not_live_are_bounded() {
        let t = InodeTable::with_remembered(vec![None], &[id(0, 2)], 64, 4);
        for n in 0..1000 {
            let i = claim(&t, &[id(0, 1000 + n), id(1, 5000 + n)]);
            check(&t);
            t.forget(i.ino, 1);
            check(&t);
            t.number_for(id(0, 100_000 + n));
            check(&t);
        }
        // The root (one identity) and four numbers of at most two identities each.
        assert_eq!(t.live_count(), 1);
        assert!(t.known_count() <= 1 + 4 * 2, "{}", t.known_count());
        assert!(t.inner.lock().numbers.known.len() <= 1 + 4);
    }

    #[test]
    fn recently_forgotten_objects_get_their_number_back() {
        let t = InodeTable::with_remembered(vec![None], &[], 64, 4);
        let objs: Vec<_> = (0..10).map(|n| [id(0, 10 + n), id(1, 20 + n)]).collect();
        let first: Vec<u64> = objs
            .iter()
            .map(|ids| {
                let i = claim(&t, ids);
                t.forget(i.ino, 1);
                i.ino
            })
            .collect();
        check(&t);
        // The last four forgotten keep their numbers, the oldest does not (and is not given
        // any number handed out before).
        let seen_before = first.iter().max().copied().unwrap();
        for (n, ids) in objs.iter().enumerate().rev().take(4) {
            assert_eq!(claim(&t, ids).ino, first[n], "object {n}");
        }
        let again = claim(&t, &objs[0]);
        assert!(again.ino > seen_before, "{} reused", again.ino);
        check(&t);
        // Looked up again (live), then forgotten: the most recent again, kept over others.
        let keep = claim(&t, &objs[9]).ino;
        t.forget(keep, 2);
        for ids in &objs[1..4] {
            let i = claim(&t, ids);
            t.forget(i.ino, 1);
        }
        assert_eq!(claim(&t, &objs[9]).ino, keep);
        check(&t);
    }

    #[test]
    fn numbers_are_never_shared_with_a_live_inode() {
        let t = InodeTable::with_remembered(vec![None], &[], 64, 2);
        // A hard link, seen under two names while live, and held by the kernel throughout.
        let link = [id(0, 7), id(1, 8)];
        let a = claim(&t, &link);
        let mut handed = std::collections::HashSet::new();
        handed.insert(a.ino);
        for n in 0..500 {
            let i = claim(&t, &[id(0, 100 + n % 50), id(1, 1000 + n % 50)]);
            assert_ne!(i.ino, a.ino);
            handed.insert(i.ino);
            t.forget(i.ino, 1);
            let listed = t.number_for(id(0, 10_000 + n));
            assert_ne!(listed, a.ino);
            handed.insert(listed);
            check(&t);
        }
        // The live inode kept its number through all of it, and its other name finds it.
        assert_eq!(claim(&t, &link).ino, a.ino);
        assert_eq!(t.number_for(id(0, 7)), a.ino);
        // A number dropped is never handed out again: every new one is new.
        let fresh = claim(&t, &[id(0, 1_000_000), id(1, 1_000_000)]);
        assert!(!handed.contains(&fresh.ino));
        check(&t);
    }

    #[test]
    fn listing_numbers_within_the_bound_match_later_lookups() {
        let t = InodeTable::with_remembered(vec![None], &[], 64, 8);
        let listed: Vec<u64> = (0..20).map(|n| t.number_for(id(0, 500 + n))).collect();
        check(&t);
        // The last eight are kept. Named again by a second listing pass, the oldest of them
        // becomes the most recent: the next new entry pushes out the one after it.
        assert_eq!(t.number_for(id(0, 512)), listed[12]);
        t.number_for(id(0, 600));
        check(&t);
        assert_eq!(claim(&t, &[id(0, 512), id(1, 912)]).ino, listed[12]);
        for n in 14..20 {
            assert_eq!(
                claim(&t, &[id(0, 500 + n), id(1, 900 + n)]).ino,
                listed[n as usize]
            );
        }
        for n in [0, 11, 13] {
            let i = claim(&t, &[id(0, 500 + n), id(1, 900 + n)]);
            assert!(i.ino > listed[19], "{n}: {}", i.ino);
        }
        check(&t);
    }

    #[test]
    fn going_live_and_idle_over_and_over_stays_bounded() {
        let t = InodeTable::with_remembered(vec![None], &[], 64, 4);
        for _ in 0..10_000 {
            let i = claim(&t, &[id(0, 1), id(1, 1)]);
            t.forget(i.ino, 1);
        }
        check(&t);
        assert_eq!(t.inner.lock().numbers.known.len(), 2); // the root and the one object
    }
}
