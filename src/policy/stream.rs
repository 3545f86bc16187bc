//! Per-open-file stream detection: several cursors (md keeps one per disk, which two streams
//! in one file break; we keep several per open file, least recently used replaced).
//!
//! The engine holds one [`StreamTracker`] per open file (behind a lock) and, for each read:
//! [`observe`](StreamTracker::observe) before asking the policy (it gives the
//! [`StreamView`] for the request), [`record`](StreamTracker::record) with the plan the
//! policy made, and [`done`](StreamTracker::done) when the read has completed (so that the
//! stream's own in-flight reads are known and not taken for competing load).

use super::LegIdx;

use super::{ReadPlan, StreamView};

/// Which cursor a read was matched to; give it back to `record` and `done`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamId {
    slot: u8,
    generation: u32,
}

#[derive(Clone, Debug, Default)]
struct Cursor {
    /// The byte after the furthest read of the stream so far.
    next: u64,
    run_bytes: u64,
    leg: Option<LegIdx>,
    leg_run_bytes: u64,
    leg_since_us: u64,
    inflight: u32,
    split: bool,
    spread: bool,
    last_used: u64,
    generation: u32,
    in_use: bool,
}

/// The streams of one open file.
#[derive(Clone, Debug)]
pub struct StreamTracker {
    cursors: Vec<Cursor>,
    clock: u64,
}

impl StreamTracker {
    /// Cursors per open file by default.
    pub const DEFAULT_CURSORS: usize = 8;
    /// A read continues a stream when it starts within this many bytes of where the stream
    /// ended, or within 4 read sizes, whichever is larger (several FUSE threads and the
    /// kernel's readahead deliver a stream's reads slightly out of order).
    pub const NEAR: u64 = 256 * 1024;

    pub fn new() -> StreamTracker {
        StreamTracker::with_cursors(Self::DEFAULT_CURSORS)
    }

    pub fn with_cursors(n: usize) -> StreamTracker {
        StreamTracker {
            cursors: vec![Cursor::default(); n.clamp(1, 255)],
            clock: 0,
        }
    }

    /// Matches a read of `size` bytes at `offset` to a stream (a new one when it continues
    /// none) and gives what is known of that stream, this read not yet included.
    pub fn observe(&mut self, offset: u64, size: u32, now_us: u64) -> (StreamId, StreamView) {
        let _ = now_us;
        self.clock += 1;
        let window = Self::NEAR.max(4 * u64::from(size));
        let end = offset + u64::from(size);
        let matched = self
            .cursors
            .iter()
            .enumerate()
            .filter(|(_, c)| c.in_use && c.next.abs_diff(offset) <= window)
            .min_by_key(|(_, c)| c.next.abs_diff(offset))
            .map(|(i, _)| i);
        let (slot, view) = match matched {
            Some(i) => {
                let c = &mut self.cursors[i];
                let view = StreamView {
                    sequential: true,
                    run_bytes: c.run_bytes,
                    leg: c.leg,
                    leg_run_bytes: c.leg_run_bytes,
                    leg_since_us: c.leg_since_us,
                    inflight: c.inflight,
                    split: c.split,
                    spread: c.spread,
                };
                c.next = c.next.max(end);
                c.run_bytes += u64::from(size);
                (i, view)
            }
            None => {
                let i = self
                    .cursors
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, c)| (c.in_use, c.last_used))
                    .map(|(i, _)| i)
                    .unwrap_or(0);
                let c = &mut self.cursors[i];
                let generation = c.generation.wrapping_add(1);
                *c = Cursor {
                    next: end,
                    run_bytes: u64::from(size),
                    generation,
                    in_use: true,
                    ..Cursor::default()
                };
                (i, StreamView::default())
            }
        };
        let c = &mut self.cursors[slot];
        c.last_used = self.clock;
        let id = StreamId {
            slot: slot as u8,
            generation: c.generation,
        };
        (id, view)
    }

    /// The policy routed the read `id` (of `size` bytes) by `plan`.
    pub fn record(&mut self, id: StreamId, plan: &ReadPlan, size: u32, now_us: u64) {
        let Some(c) = self.cursor(id) else { return };
        c.inflight += 1;
        let (leg, split) = match plan {
            ReadPlan::One(l) => (*l, false),
            // A spread read leaves the stream on its leg (the first one if it has none).
            ReadPlan::Spread(l) => (c.leg.unwrap_or(*l), false),
            // A split stream stays "on" its leg if that leg takes part, else on the first.
            ReadPlan::Split(p) => (
                c.leg
                    .filter(|l| p.iter().any(|x| x.leg == *l))
                    .unwrap_or(p[0].leg),
                true,
            ),
        };
        c.split = split;
        c.spread = matches!(plan, ReadPlan::Spread(_));
        if c.leg == Some(leg) {
            c.leg_run_bytes += u64::from(size);
        } else {
            c.leg = Some(leg);
            c.leg_run_bytes = u64::from(size);
            c.leg_since_us = now_us;
        }
    }

    /// The read `id` has completed (successfully or not).
    pub fn done(&mut self, id: StreamId) {
        if let Some(c) = self.cursor(id) {
            c.inflight = c.inflight.saturating_sub(1);
        }
    }

    fn cursor(&mut self, id: StreamId) -> Option<&mut Cursor> {
        self.cursors
            .get_mut(usize::from(id.slot))
            .filter(|c| c.in_use && c.generation == id.generation)
    }
}

impl Default for StreamTracker {
    fn default() -> StreamTracker {
        StreamTracker::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_is_followed_and_counted() {
        let mut t = StreamTracker::new();
        let (a, v) = t.observe(0, 4096, 10);
        assert!(!v.sequential);
        t.record(a, &ReadPlan::One(1), 4096, 10);
        let (b, v) = t.observe(4096, 4096, 20);
        assert_eq!(a, b);
        assert_eq!(
            v,
            StreamView {
                sequential: true,
                run_bytes: 4096,
                leg: Some(1),
                leg_run_bytes: 4096,
                leg_since_us: 10,
                inflight: 1,
                split: false,
                spread: false,
            }
        );
        t.done(a);
        t.record(b, &ReadPlan::One(0), 4096, 20);
        let (_, v) = t.observe(8192, 4096, 30);
        assert_eq!(
            (v.leg, v.leg_run_bytes, v.leg_since_us, v.inflight),
            (Some(0), 4096, 20, 1)
        );
        assert_eq!(v.run_bytes, 8192);
    }

    #[test]
    fn interleaved_streams_keep_their_cursors() {
        let mut t = StreamTracker::new();
        let base = [0u64, 1 << 30, 2 << 30, 3 << 30];
        for (i, b) in base.iter().enumerate() {
            let (id, _) = t.observe(*b, 1 << 20, 0);
            t.record(id, &ReadPlan::One(i % 2), 1 << 20, 0);
        }
        for round in 1..5u64 {
            for (i, b) in base.iter().enumerate() {
                let (_, v) = t.observe(b + round * (1 << 20), 1 << 20, round);
                assert!(v.sequential);
                assert_eq!(v.leg, Some(i % 2));
                assert_eq!(v.run_bytes, round << 20);
            }
        }
    }

    #[test]
    fn slightly_out_of_order_still_sequential_and_random_is_not() {
        let mut t = StreamTracker::new();
        t.observe(0, 131072, 0);
        assert!(t.observe(262144, 131072, 0).1.sequential); // ahead of the other thread
        assert!(t.observe(131072, 131072, 0).1.sequential); // the late one
        assert!(!t.observe(10 << 30, 4096, 0).1.sequential);
        assert!(!t.observe(20 << 30, 4096, 0).1.sequential);
    }

    #[test]
    fn least_recently_used_cursor_is_replaced() {
        let mut t = StreamTracker::with_cursors(2);
        let (a, _) = t.observe(0, 4096, 0);
        let (b, _) = t.observe(1 << 30, 4096, 0);
        t.observe(4096, 4096, 0); // touches a
        let (c, _) = t.observe(2 << 30, 4096, 0); // replaces b, the least recently used
        assert_ne!(b, c);
        assert!(t.observe(8192, 4096, 0).1.sequential);
        assert!(!t.observe((1 << 30) + 4096, 4096, 0).1.sequential);
        let _ = a;
    }

    #[test]
    fn a_stale_id_is_ignored() {
        let mut t = StreamTracker::with_cursors(1);
        let (a, _) = t.observe(0, 4096, 0);
        let (b, _) = t.observe(1 << 30, 4096, 0);
        assert_ne!(a, b);
        t.record(a, &ReadPlan::One(3), 4096, 0);
        t.done(a);
        let (_, v) = t.observe((1 << 30) + 4096, 4096, 0);
        assert_eq!((v.leg, v.inflight), (None, 0));
    }

    #[test]
    fn split_plans_mark_the_stream() {
        let mut t = StreamTracker::new();
        let (a, _) = t.observe(0, 1 << 20, 0);
        t.record(a, &ReadPlan::One(1), 1 << 20, 0);
        let (b, _) = t.observe(1 << 20, 1 << 20, 5);
        let plan = ReadPlan::Split(vec![
            crate::policy::ReadPiece {
                leg: 0,
                offset: 1 << 20,
                len: 1 << 19,
            },
            crate::policy::ReadPiece {
                leg: 1,
                offset: 3 << 19,
                len: 1 << 19,
            },
        ]);
        t.record(b, &plan, 1 << 20, 5);
        let (_, v) = t.observe(2 << 20, 1 << 20, 9);
        assert!(v.split);
        assert_eq!(v.leg, Some(1));
        assert_eq!(v.leg_run_bytes, 2 << 20);
    }
}
