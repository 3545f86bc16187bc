//! One answer from several legs' results, and which legs to drop.
//!
//! This is the only place that decides whether an error belongs to the caller (ENOENT, EEXIST,
//! ENOTEMPTY, EACCES...: every in-sync leg should say the same, and it is returned as is) or to
//! the leg ([`LEG_FAULTS`]: EIO, EROFS, ENODEV, ENXIO, ESTALE, ENOTCONN, ETIMEDOUT, a vanished
//! mount: the leg is dropped and the others carry on).

use crate::errno::Errno;
use crate::leg::LegIdx;

/// Errors that say the leg, not the request, is broken, with their names: the README and the
/// man page list them, and a test holds those lists to this one.
pub const LEG_FAULTS: &[(i32, &str)] = &[
    (libc::EIO, "EIO"),
    (libc::EROFS, "EROFS"),
    (libc::ENODEV, "ENODEV"),
    (libc::ENXIO, "ENXIO"),
    (libc::ESTALE, "ESTALE"),
    (libc::ENOTCONN, "ENOTCONN"),
    (libc::ETIMEDOUT, "ETIMEDOUT"),
];

/// Whether `e` is one of [`LEG_FAULTS`].
pub fn is_leg_fault(e: Errno) -> bool {
    LEG_FAULTS.iter().any(|&(code, _)| code == e.0)
}

/// Why a leg is dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// The leg returned an I/O-class error.
    LegFault(Errno),
    /// The leg answered differently from the others (it no longer holds the same tree).
    Disagreed(Errno),
    /// The user asked (`mirrorfs leg fail`).
    Requested,
}

impl DropReason {
    /// Why a leg that answered `e` while the chosen answer was another is dropped.
    fn for_error(e: Errno) -> DropReason {
        if is_leg_fault(e) {
            DropReason::LegFault(e)
        } else {
            DropReason::Disagreed(e)
        }
    }
}

/// The reconciled result of one operation on several legs.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome<T> {
    /// What the caller gets: the successful legs' values, or the error.
    pub answer: Result<Vec<(LegIdx, T)>, Errno>,
    /// Legs that must be marked failed, and why.
    pub drop: Vec<(LegIdx, DropReason)>,
    /// Legs whose part met a fault of mirrorfs itself ([`Errno::INTERNAL`]): never dropped
    /// for it (the disk did nothing wrong), but their copy may now differ: the caller logs it.
    pub internal: Vec<LegIdx>,
}

/// Reconciles per-leg results (in leg order).
///
/// - all succeed: success;
/// - some succeed: success from those; each failing leg is dropped (an I/O error, or a
///   disagreement: it answered an error the others did not);
/// - all fail alike: that error, nobody dropped;
/// - all fail differently: the first caller-class error wins (legs with I/O-class errors are
///   dropped, legs with another caller-class error disagreed and are dropped); if every error
///   is I/O-class, the first one is returned and nobody is dropped (the array cannot drop its
///   last legs; the error reaches the caller instead).
///
/// A leg that answered [`Errno::INTERNAL`] (a fault of mirrorfs, not of the leg) is left out of
/// all that and listed in `internal`: never dropped; the others decide, and when none is left,
/// the caller gets the internal error.
pub fn reconcile<T>(results: Vec<(LegIdx, Result<T, Errno>)>) -> Outcome<T> {
    let mut ok = Vec::new();
    let mut errs = Vec::new();
    let mut internal = Vec::new();
    for (leg, r) in results {
        match r {
            Ok(v) => ok.push((leg, v)),
            Err(Errno::INTERNAL) => internal.push(leg),
            Err(e) => errs.push((leg, e)),
        }
    }
    let (answer, drop) = decide(ok, errs, !internal.is_empty());
    Outcome {
        answer,
        drop,
        internal,
    }
}

type Decision<T> = (Result<Vec<(LegIdx, T)>, Errno>, Vec<(LegIdx, DropReason)>);

/// [`reconcile`]'s rules for the legs that did not meet an internal fault (`internal`: some
/// did).
fn decide<T>(ok: Vec<(LegIdx, T)>, errs: Vec<(LegIdx, Errno)>, internal: bool) -> Decision<T> {
    if !ok.is_empty() {
        let drop = errs
            .into_iter()
            .map(|(leg, e)| (leg, DropReason::for_error(e)))
            .collect();
        return (Ok(ok), drop);
    }
    let Some(&(_, first)) = errs.first() else {
        return match internal {
            true => (Err(Errno::INTERNAL), Vec::new()),
            false => (Ok(Vec::new()), Vec::new()),
        };
    };
    if errs.iter().all(|&(_, e)| e == first) {
        return (Err(first), Vec::new());
    }
    match errs.iter().find(|&&(_, e)| !is_leg_fault(e)) {
        Some(&(_, chosen)) => (
            Err(chosen),
            errs.iter()
                .filter(|&&(_, e)| e != chosen)
                .map(|&(leg, e)| (leg, DropReason::for_error(e)))
                .collect(),
        ),
        None => (Err(first), Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_ok() {
        let o = reconcile(vec![(0, Ok(1)), (1, Ok(1))]);
        assert_eq!(o.answer, Ok(vec![(0, 1), (1, 1)]));
        assert!(o.drop.is_empty());
    }

    #[test]
    fn caller_error_everywhere_is_returned_and_nobody_dropped() {
        let o = reconcile::<()>(vec![(0, Err(Errno::EEXIST)), (1, Err(Errno::EEXIST))]);
        assert_eq!(o.answer, Err(Errno::EEXIST));
        assert!(o.drop.is_empty());
    }

    #[test]
    fn io_error_on_one_leg_drops_it_and_succeeds() {
        let o = reconcile(vec![(0, Ok(5)), (1, Err(Errno::EIO)), (2, Ok(5))]);
        assert_eq!(o.answer, Ok(vec![(0, 5), (2, 5)]));
        assert_eq!(o.drop, vec![(1, DropReason::LegFault(Errno::EIO))]);
    }

    #[test]
    fn disagreeing_leg_is_dropped() {
        let o = reconcile(vec![(0, Ok(())), (1, Err(Errno::EEXIST))]);
        assert!(o.answer.is_ok());
        assert_eq!(o.drop, vec![(1, DropReason::Disagreed(Errno::EEXIST))]);
    }

    #[test]
    fn caller_error_beats_io_errors() {
        let o = reconcile::<()>(vec![(0, Err(Errno::EROFS)), (1, Err(Errno::ENOENT))]);
        assert_eq!(o.answer, Err(Errno::ENOENT));
        assert_eq!(o.drop, vec![(0, DropReason::LegFault(Errno::EROFS))]);
    }

    #[test]
    fn all_io_errors_drop_nobody() {
        let o = reconcile::<()>(vec![(0, Err(Errno::EIO)), (1, Err(Errno::EROFS))]);
        assert_eq!(o.answer, Err(Errno::EIO));
        assert!(o.drop.is_empty());
    }

    #[test]
    fn an_internal_fault_drops_no_leg() {
        // Beside a success: the others' answer, the leg kept and named.
        let o = reconcile(vec![(0, Ok(7)), (1, Err(Errno::INTERNAL))]);
        assert_eq!(o.answer, Ok(vec![(0, 7)]));
        assert!(o.drop.is_empty());
        assert_eq!(o.internal, vec![1]);
        // Beside a leg fault: that leg answers as if alone (not dropped: it is the last).
        let o = reconcile::<()>(vec![(0, Err(Errno::INTERNAL)), (1, Err(Errno::EIO))]);
        assert_eq!(o.answer, Err(Errno::EIO));
        assert!(o.drop.is_empty());
        assert_eq!(o.internal, vec![0]);
        // Beside a caller's error and a leg fault: the caller's error, the faulty leg dropped.
        let o = reconcile::<()>(vec![
            (0, Err(Errno::ENOENT)),
            (1, Err(Errno::INTERNAL)),
            (2, Err(Errno::EIO)),
        ]);
        assert_eq!(o.answer, Err(Errno::ENOENT));
        assert_eq!(o.drop, vec![(2, DropReason::LegFault(Errno::EIO))]);
        // Everywhere: the caller gets it (as EIO), nobody is dropped.
        let o = reconcile::<()>(vec![(0, Err(Errno::INTERNAL)), (1, Err(Errno::INTERNAL))]);
        assert_eq!(o.answer, Err(Errno::INTERNAL));
        assert!(o.drop.is_empty());
        assert_eq!(o.internal, vec![0, 1]);
        assert!(!is_leg_fault(Errno::INTERNAL));
    }

    #[test]
    fn classification() {
        for e in [
            Errno::EIO,
            Errno::EROFS,
            Errno::ENODEV,
            Errno::ENXIO,
            Errno::ESTALE,
        ] {
            assert!(is_leg_fault(e));
        }
        for e in [
            Errno::ENOENT,
            Errno::EEXIST,
            Errno::ENOTEMPTY,
            Errno::EACCES,
        ] {
            assert!(!is_leg_fault(e));
        }
    }

    /// The README and the man page name exactly the errors [`is_leg_fault`] drops a leg for.
    #[test]
    fn the_docs_list_every_leg_fault() {
        let want: Vec<&str> = LEG_FAULTS.iter().map(|&(_, n)| n).collect();
        for (doc, text) in [
            ("README.md", include_str!("../../README.md")),
            ("docs/mirrorfs.8", include_str!("../../docs/mirrorfs.8")),
        ] {
            let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
            let at = flat
                .find("I/O-class error (")
                .unwrap_or_else(|| panic!("{doc} names no I/O-class errors"));
            let list = &flat[at + "I/O-class error (".len()..];
            let list = &list[..list.find(')').unwrap()];
            let got: Vec<&str> = list.split(", ").collect();
            assert_eq!(got, want, "{doc}'s list of the errors that drop a leg");
        }
    }
}
