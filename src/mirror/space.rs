//! Free space: a write is refused (ENOSPC) before it starts when it would take a leg below
//! its reserve, and each leg's `statvfs` for the statistics, both within `leg_timeout`.

use super::{deadline, Mirror};
use crate::errno::{Errno, Result};
use crate::leg::LegIdx;
use std::sync::atomic::Ordering;

impl Mirror {
    /// ENOSPC, before anything is written, if `need` more bytes would take any of `legs`
    /// below its reserve (`minfreespace`): the legs fill evenly and stay identical, instead
    /// of one leg failing halfway through a write the others completed.
    pub fn check_space(&self, legs: &[LegIdx], need: u64) -> Result<()> {
        for &l in legs {
            let leg = &self.legs[l];
            let reserve = leg.reserve.load(Ordering::Relaxed);
            let fits = match leg.take_space_estimated(need, reserve) {
                Some(fits) => Ok(fits),
                None => self
                    .measure_space(l)
                    .map(|avail| leg.take_space_measured(avail, need, reserve)),
            };
            // A leg we cannot even measure will fail the write itself, and be dealt with there.
            if let Ok(false) = fits {
                log::info!(
                    "leg {} ('{}'): {} more would cross its reserve of {}: ENOSPC",
                    l,
                    leg.path().display(),
                    crate::value::show_size(need),
                    crate::value::show_size(reserve)
                );
                return Err(Errno::ENOSPC);
            }
        }
        Ok(())
    }

    /// Measures the free space of leg `l` (within `leg_timeout`): the bytes available.
    fn measure_space(&self, l: LegIdx) -> Result<u64> {
        let root = self.legs[l].root()?;
        let st = self.timed(
            l,
            "statfs",
            Box::new(move || crate::sys::fd::statvfs(std::os::fd::AsFd::as_fd(&*root))),
        )?;
        Ok(self.legs[l].note_space(&st).1)
    }

    /// The `statvfs` of leg `l`'s filesystem for the statistics: None if it cannot be had
    /// within `leg_timeout` (the leg is not dropped for that; its I/O will say).
    pub fn leg_statvfs(&self, l: LegIdx) -> Option<libc::statvfs> {
        let root = self.legs[l].root().ok()?;
        let op: deadline::OwnedOp<libc::statvfs> =
            Box::new(move || crate::sys::fd::statvfs(std::os::fd::AsFd::as_fd(&*root)));
        let Some(timeout) = self.leg_timeout() else {
            return op().ok();
        };
        let pending = self.hand_over(l, op);
        pending.wait(deadline::deadline(Some(timeout)))?.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_mirror;
    use crate::errno::Errno;
    use crate::leg::LegState;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    /// The bytes leg `l`'s filesystem has available now.
    fn avail(m: &super::Mirror, l: usize) -> u64 {
        m.leg(l).space().unwrap().1
    }

    #[test]
    fn a_write_past_one_legs_reserve_is_refused_for_all() {
        let (_d, m) = test_mirror::plain(2);
        assert_eq!(m.check_space(&[0, 1], 4096), Ok(()), "no reserve");
        // Leg 1 may not go below more than its filesystem has: nothing fits there.
        let too_much = avail(&m, 1) + (1 << 40);
        m.leg(1).reserve.store(too_much, Ordering::Relaxed);
        assert_eq!(m.check_space(&[0], 4096), Ok(()), "leg 0 alone has room");
        assert_eq!(m.check_space(&[0, 1], 4096), Err(Errno::ENOSPC));
        assert_eq!(m.check_space(&[1], 1), Err(Errno::ENOSPC));
        // Asked again (measured a moment ago now): still refused.
        assert_eq!(m.check_space(&[1, 0], 1), Err(Errno::ENOSPC));
        m.leg(1).reserve.store(0, Ordering::Relaxed);
        assert_eq!(m.check_space(&[0, 1], 4096), Ok(()));
    }

    #[test]
    fn the_need_counts_against_the_reserve() {
        let (_d, m) = test_mirror::plain(1);
        let free = avail(&m, 0);
        // A reserve of half the free space: a write of a quarter fits, one of the whole
        // free space does not.
        m.leg(0).reserve.store(free / 2, Ordering::Relaxed);
        assert_eq!(m.check_space(&[0], 4096), Ok(()));
        assert_eq!(m.check_space(&[0], free), Err(Errno::ENOSPC));
    }

    #[test]
    fn space_is_measured_on_the_legs_worker_under_a_leg_timeout() {
        let (_d, m) = test_mirror::plain(2);
        m.set_leg_timeout(Duration::from_secs(60));
        m.leg(1)
            .reserve
            .store(avail(&m, 1) + (1 << 40), Ordering::Relaxed);
        assert_eq!(m.check_space(&[0, 1], 4096), Err(Errno::ENOSPC));
        assert_eq!(m.leg(0).counters.timeouts.load(Ordering::Relaxed), 0);
        assert!(m.leg(1).is_in_sync(), "a full leg is not a failed one");
    }

    #[test]
    fn statvfs_for_the_statistics_with_and_without_a_timeout() {
        let (_d, m) = test_mirror::plain(2);
        let st = m.leg_statvfs(0).expect("a leg that is there answers");
        assert!(st.f_blocks > 0);
        m.set_leg_timeout(Duration::from_secs(60));
        let st = m.leg_statvfs(1).expect("and on its worker too");
        assert!(st.f_blocks > 0);
        // A leg without its root (out of the mirror, its filesystem let go): no figures.
        m.leg(1).set_state(LegState::Failed);
        assert!(m.leg(1).close_root());
        assert!(m.leg_statvfs(1).is_none());
    }
}
