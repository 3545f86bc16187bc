//! The lock order, written once here and checked in debug builds.
//!
//! A thread takes mirrorfs's long-held locks in this order, never the other way round:
//!
//! 1. **the barrier** (`Mirror::barrier`, shared, for the whole of every operation that changes
//!    the legs; `Mirror::exclusive` while a leg joins or a scrub compares the legs). The shared
//!    barrier may be taken again by a thread that holds it (it is read recursively, so a
//!    waiting `exclusive` cannot wedge it); the exclusive one never while any lock is held;
//! 2. **directory locks** (`Inode::dir_lock`); a thread that needs two (rename) takes them in
//!    ascending inode number;
//! 3. **data locks** (`Inode::data_lock`), two of them also in ascending inode number;
//! 4. **the change log's state** (`ChangeLog`), held for no other lock.
//!
//! Each of these locks is an [`Ordered`] lock: it knows its [`Rank`] and its key (the inode
//! number), and in debug builds every thread keeps a list of the ones it holds. Taking one out
//! of order panics before the lock is waited for, naming both, so a test that runs the path
//! finds an inversion that would otherwise deadlock only now and then. Release builds keep no
//! list: an `Ordered` lock is the plain `parking_lot` lock.

use parking_lot::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::ops::{Deref, DerefMut};

/// Where a lock stands in the order: a thread takes a lower rank before a higher one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Rank {
    Barrier,
    Dir,
    Data,
    ChangeLog,
}

/// How a lock is being taken: a shared barrier may be taken again by its holder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Shared,
    Exclusive,
}

/// Why taking `(rank, key)` in `mode` would break the order, given what the thread holds.
/// (Release builds do not check, but the tests run it in every profile.)
#[cfg_attr(not(debug_assertions), allow(dead_code))]
fn violation(held: &[(Rank, u64, Mode)], rank: Rank, key: u64, mode: Mode) -> Option<String> {
    for &(r, k, m) in held {
        let fine = if r < rank {
            true
        } else if r > rank {
            false
        } else {
            match rank {
                Rank::Barrier => m == Mode::Shared && mode == Mode::Shared,
                Rank::Dir | Rank::Data => k < key,
                Rank::ChangeLog => false,
            }
        };
        if !fine {
            return Some(format!(
                "lock order: taking {rank:?} {key} ({mode:?}) while holding {r:?} {k} ({m:?}); \
                 the order is barrier, directory locks, data locks (each in ascending inode \
                 number), the change log (src/lock_order.rs)"
            ));
        }
    }
    None
}

#[cfg(debug_assertions)]
thread_local! {
    static HELD: std::cell::RefCell<Vec<(Rank, u64, Mode)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// This thread holds `(rank, key)` until it is dropped (debug builds only).
struct Held {
    #[cfg(debug_assertions)]
    entry: (Rank, u64, Mode),
}

impl Held {
    /// Checks the order and records the lock; called before the lock is waited for.
    #[track_caller]
    fn take(rank: Rank, key: u64, mode: Mode) -> Held {
        #[cfg(debug_assertions)]
        {
            let entry = (rank, key, mode);
            HELD.with(|h| {
                let mut h = h.borrow_mut();
                if let Some(why) = violation(&h, rank, key, mode) {
                    drop(h);
                    panic!("{why}");
                }
                h.push(entry);
            });
            Held { entry }
        }
        #[cfg(not(debug_assertions))]
        {
            let _ = (rank, key, mode);
            Held {}
        }
    }
}

#[cfg(debug_assertions)]
impl Drop for Held {
    fn drop(&mut self) {
        // Guards may go in any order (a tuple of two directory guards): the last entry alike.
        let _ = HELD.try_with(|h| {
            let mut h = h.borrow_mut();
            if let Some(i) = h.iter().rposition(|e| *e == self.entry) {
                h.remove(i);
            }
        });
    }
}

/// A guard of an [`Ordered`] lock: the lock's own guard, and the thread's record of it.
pub struct Guard<G> {
    // Declared first: the lock is let go before the record of it goes.
    guard: G,
    _held: Held,
}

impl<G: Deref> Deref for Guard<G> {
    type Target = G::Target;
    fn deref(&self) -> &G::Target {
        &self.guard
    }
}

impl<G: DerefMut> DerefMut for Guard<G> {
    fn deref_mut(&mut self) -> &mut G::Target {
        &mut self.guard
    }
}

/// A lock with its place in the order: its rank and its key (an inode number; 0 for the
/// barrier and the change log).
pub struct Ordered<L> {
    rank: Rank,
    key: u64,
    lock: L,
}

impl<L> Ordered<L> {
    /// Checks the order and records the lock, then waits for it with `wait`.
    #[track_caller]
    fn take<'a, G>(&'a self, mode: Mode, wait: impl FnOnce(&'a L) -> G) -> Guard<G> {
        let held = Held::take(self.rank, self.key, mode);
        Guard {
            guard: wait(&self.lock),
            _held: held,
        }
    }
}

impl<T> Ordered<RwLock<T>> {
    pub fn rw(rank: Rank, key: u64, value: T) -> Self {
        Ordered {
            rank,
            key,
            lock: RwLock::new(value),
        }
    }

    #[track_caller]
    pub fn read(&self) -> Guard<RwLockReadGuard<'_, T>> {
        self.take(Mode::Shared, RwLock::read)
    }

    /// A shared lock that a waiting writer does not hold off (see the barrier above).
    #[track_caller]
    pub fn read_recursive(&self) -> Guard<RwLockReadGuard<'_, T>> {
        self.take(Mode::Shared, RwLock::read_recursive)
    }

    #[track_caller]
    pub fn write(&self) -> Guard<RwLockWriteGuard<'_, T>> {
        self.take(Mode::Exclusive, RwLock::write)
    }
}

impl<T> Ordered<Mutex<T>> {
    pub fn mutex(rank: Rank, key: u64, value: T) -> Self {
        Ordered {
            rank,
            key,
            lock: Mutex::new(value),
        }
    }

    #[track_caller]
    pub fn lock(&self) -> Guard<MutexGuard<'_, T>> {
        self.take(Mode::Exclusive, Mutex::lock)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::panic::{catch_unwind, AssertUnwindSafe};

    fn breaks(held: &[(Rank, u64, Mode)], rank: Rank, key: u64, mode: Mode) -> bool {
        violation(held, rank, key, mode).is_some()
    }

    #[test]
    fn the_order_is_barrier_directories_data_change_log() {
        use Mode::*;
        let b = (Rank::Barrier, 0, Shared);
        assert!(!breaks(&[], Rank::ChangeLog, 0, Exclusive));
        assert!(!breaks(&[b], Rank::Dir, 5, Exclusive));
        assert!(!breaks(
            &[b, (Rank::Dir, 5, Exclusive)],
            Rank::Data,
            3,
            Shared
        ));
        assert!(!breaks(
            &[b, (Rank::Dir, 5, Exclusive), (Rank::Data, 3, Shared)],
            Rank::ChangeLog,
            0,
            Exclusive
        ));
        // Backwards.
        assert!(breaks(
            &[(Rank::Dir, 5, Exclusive)],
            Rank::Barrier,
            0,
            Shared
        ));
        assert!(breaks(&[(Rank::Data, 5, Shared)], Rank::Dir, 9, Exclusive));
        assert!(breaks(
            &[(Rank::ChangeLog, 0, Exclusive)],
            Rank::Data,
            9,
            Shared
        ));
        assert!(breaks(
            &[(Rank::ChangeLog, 0, Exclusive)],
            Rank::ChangeLog,
            0,
            Exclusive
        ));
    }

    #[test]
    fn two_of_a_rank_go_in_ascending_inode_number() {
        use Mode::*;
        assert!(!breaks(
            &[(Rank::Dir, 5, Exclusive)],
            Rank::Dir,
            9,
            Exclusive
        ));
        assert!(breaks(
            &[(Rank::Dir, 9, Exclusive)],
            Rank::Dir,
            5,
            Exclusive
        ));
        assert!(breaks(&[(Rank::Dir, 5, Shared)], Rank::Dir, 5, Shared));
        assert!(!breaks(
            &[(Rank::Data, 2, Shared)],
            Rank::Data,
            3,
            Exclusive
        ));
        assert!(breaks(&[(Rank::Data, 3, Shared)], Rank::Data, 2, Exclusive));
    }

    #[test]
    fn the_shared_barrier_may_be_taken_again_but_never_the_exclusive_one() {
        use Mode::*;
        let shared = (Rank::Barrier, 0, Shared);
        assert!(!breaks(&[shared], Rank::Barrier, 0, Shared));
        assert!(breaks(&[shared], Rank::Barrier, 0, Exclusive));
        assert!(breaks(
            &[(Rank::Barrier, 0, Exclusive)],
            Rank::Barrier,
            0,
            Shared
        ));
    }

    /// The locks themselves: in order they are taken, out of order (debug builds) the thread
    /// panics before it waits, and what it held is let go as the guards drop, in any order.
    #[test]
    fn ordered_locks_record_what_the_thread_holds() {
        let barrier = Ordered::rw(Rank::Barrier, 0, ());
        let d5 = Ordered::rw(Rank::Dir, 5, ());
        let d9 = Ordered::rw(Rank::Dir, 9, ());
        let log = Ordered::mutex(Rank::ChangeLog, 0, 7u32);
        {
            let _b = barrier.read_recursive();
            let _again = barrier.read_recursive();
            let (a, b) = (d5.write(), d9.write());
            drop(a);
            drop(b);
            let mut l = log.lock();
            *l += 1;
        }
        assert_eq!(*log.lock(), 8);
        let out_of_order = catch_unwind(AssertUnwindSafe(|| {
            let _late = d9.write();
            let _early = d5.write();
        }));
        assert_eq!(out_of_order.is_err(), cfg!(debug_assertions));
        // Nothing is left recorded after the panic: in order again, no complaint.
        let _b = barrier.write();
        let _d = d5.read();
    }
}
