//! Extent read-ahead: one sequential stream read by two or more disks at once, md raid10's
//! "far" layout done at read time.
//!
//! On a disk, a read that skips ahead costs about what reading the skipped bytes would (the
//! platter passes under the head either way), so `auto` keeps a stream on one disk of a pair
//! and the other disk idles. But a skip of a *long* run costs one seek: reading alternate
//! extents of [`EXTENT`] bytes, each disk pays a seek of a few ms per 16 MiB (about 110 ms of
//! transfer at 150 MB/s), so two disks together deliver close to twice one.
//!
//! Once a stream is confirmed ([`ENGAGE_RUN`] read contiguously) on a positional leg, and
//! another leg of the same speed is idle, the stream *engages*: the extents after the one the
//! reader is in are owned in turn by the idle legs and then the stream's own leg, and each leg
//! reads the extents it owns, in order, into a buffer, up to [`WINDOW_PER_LEG`] extents per
//! leg ahead of the reader. The reader is served from the buffer; extents it has passed are
//! released. A leg that gets another stream's reads stops taking new extents (the stream
//! disengages once its buffered extents run out), so several streams on a disk pair keep
//! today's routing: one stream per disk, no seeks between them.
//!
//! Flash and throttled devices never engage: their positioning cost is small, and `auto`
//! spreads whole reads over them instead. A slower leg never reads ahead for a faster one.
//!
//! This file is the plan only: which extents, on which legs, and when to stop. It holds no
//! data and does no I/O; the engine (`mirror/readahead.rs`) and the simulator (`sim/`) drive
//! it.

use super::{LegIdx, LegView, ReadRequest};
use std::collections::VecDeque;

/// Bytes per extent: a seek of a few ms is a few percent of reading 16 MiB from a disk.
pub const EXTENT: u64 = 16 << 20;
/// An extent is fetched in pieces of this size, one after another, so that the reader can use
/// its start before its end has arrived.
pub const CHUNK: u64 = 4 << 20;
/// A stream engages once it has read this much contiguously.
pub const ENGAGE_RUN: u64 = 16 << 20;
/// Extents each participating leg may hold ahead of the reader (fetched or being fetched): two
/// keep a disk busy with its next extent while the reader drains the current one.
pub const WINDOW_PER_LEG: usize = 2;
/// A leg takes part only if its large-read bandwidth is within this ratio of the stream's
/// leg's (or not measured). With equal shares, legs read at N times the slowest one's speed:
/// a leg at half the speed of the stream's gives nothing, and an SSD beside a disk is far
/// beyond. The figures are noisy (a leg measured by one probe), so the margin is wide.
const SAME_SPEED: f64 = 1.9;
/// A leg's bandwidth keeps it out ([`SAME_SPEED`]) only once it rests on this many reads. An
/// idle leg's first figure is the one read that follows the policy's first probe of it, and on
/// a loaded machine that read can take several times the disk's time (31 against 123 MB/s for
/// two equal disks, seen under CPU load): the leg looked slower than it is, and since a stream
/// that stays on its own leg gives the idle one no more contiguous reads, its figure stayed so
/// and no stream engaged. Taking part, the leg reads extents, whose reads correct it.
const SAME_SPEED_MIN_READS: u32 = 2;
/// A leg whose positioning cost is at least this (µs) is a disk for this purpose; flash and
/// throttled devices are served better by `auto`'s spreading of whole reads.
const POSITIONAL_SEEK_US: u32 = 1000;

/// The state of one extent of an engaged stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExtentState {
    /// Handed to its leg and not all there yet.
    Fetching,
    /// Every byte is in the buffer.
    Ready,
}

/// A fetch to start: read `len` bytes at `offset` from `leg` into the buffer of extent
/// `index`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fetch {
    pub index: u64,
    pub leg: LegIdx,
    pub offset: u64,
    pub len: u64,
}

/// One engaged stream's read-ahead plan.
#[derive(Clone, Debug)]
pub struct Extents {
    /// The owner of extent `first + i` is `order[i % order.len()]`.
    order: Vec<LegIdx>,
    first: u64,
    /// Extents from `base` on that are fetching or ready (index `base + i`).
    held: VecDeque<ExtentState>,
    base: u64,
    /// No new extents: a leg got other work, or the reader left.
    stopped: bool,
    /// The extent after the last one in `held` that was ever started.
    next: u64,
}

/// Whether the stream of `req`, on the legs `views` (the candidates, as the policy sees them),
/// should engage: the order of the legs that take part (the idle ones first, the stream's own
/// last), or `None`. `own_inflight(leg)`: the stream's own requests outstanding on the leg (a
/// probe `auto` sent to an idle leg is the stream's own, not competing work).
pub fn engage(
    views: &[LegView],
    req: &ReadRequest,
    own_inflight: &dyn Fn(LegIdx) -> u32,
) -> Option<Vec<LegIdx>> {
    let s = &req.stream;
    // A split stream may engage (its reads are then served from the buffers, not split); a
    // spread one may not (its legs have no positioning cost worth avoiding: `auto` already
    // reads it at N x one leg).
    if !s.sequential || s.run_bytes < ENGAGE_RUN || s.spread {
        return None;
    }
    let own = views.iter().find(|v| Some(v.idx) == s.leg)?;
    if own.writemostly || !positional(own) {
        return None;
    }
    // A stream sharing its disk with others is for `auto` to move to an idle disk, not for
    // the read-ahead (several streams on a disk pair read best one per disk).
    if own.inflight > own_inflight(own.idx) {
        return None;
    }
    let judged = |v: &LegView| {
        v.read_bandwidth
            .filter(|_| v.read_bandwidth_reads >= SAME_SPEED_MIN_READS)
    };
    let same_speed = |v: &LegView| match (judged(own), judged(v)) {
        (Some(a), Some(b)) if a > 0 && b > 0 => {
            let (a, b) = (a as f64, b as f64);
            a.max(b) / a.min(b) <= SAME_SPEED
        }
        _ => true,
    };
    let mut order: Vec<LegIdx> = views
        .iter()
        .filter(|v| v.idx != own.idx && !v.writemostly)
        .filter(|v| positional(v) && same_speed(v) && super::outstanding(v) <= own_inflight(v.idx))
        .map(|v| v.idx)
        .collect();
    if order.is_empty() {
        return None;
    }
    order.push(own.idx);
    Some(order)
}

/// A disk: rotational, or with a measured positioning cost. A disk's measured figure can come
/// out low (a short forward skip costs only the platter's pass-over), so the flag alone
/// suffices; a device flagged rotational without a positioning cost (the bench rig's throttled
/// loop devices) is spread by `auto` before it could engage.
fn positional(v: &LegView) -> bool {
    v.rotational || v.seek_us.is_some_and(|s| s >= POSITIONAL_SEEK_US)
}

impl Extents {
    /// Engages a stream whose reader is at `offset`, over the legs `order` (from [`engage`]).
    /// The extent the reader is in stays with the reader's leg; read-ahead starts at the next.
    pub fn new(order: Vec<LegIdx>, offset: u64) -> Extents {
        let first = offset / EXTENT + 1;
        Extents {
            order,
            first,
            held: VecDeque::new(),
            base: first,
            stopped: false,
            next: first,
        }
    }

    /// The legs taking part.
    pub fn legs(&self) -> &[LegIdx] {
        &self.order
    }

    /// Whether the fetch of extent `index` may start with the reader at `offset`. The reader's
    /// own leg still serves the extent the reader is in: its first extent waits until the
    /// reader has left that one, or the disk would seek between the two at every read.
    pub fn may_start(&self, index: u64, offset: u64) -> bool {
        self.owner(index) != self.order.last().copied() || offset >= self.first * EXTENT
    }

    /// The leg that owns extent `index` (of the stream's file), if read-ahead covers it.
    pub fn owner(&self, index: u64) -> Option<LegIdx> {
        let i = index.checked_sub(self.first)?;
        Some(self.order[(i % self.order.len() as u64) as usize])
    }

    /// The state of extent `index`, if it is held.
    pub fn state(&self, index: u64) -> Option<ExtentState> {
        let i = index.checked_sub(self.base)?;
        self.held.get(usize::try_from(i).ok()?).copied()
    }

    /// Extent `index` has arrived whole.
    pub fn ready(&mut self, index: u64) {
        if let Some(i) = index.checked_sub(self.base) {
            if let Some(s) = self.held.get_mut(i as usize) {
                *s = ExtentState::Ready;
            }
        }
    }

    /// Stops taking new extents; what is held stays until the reader passes it.
    pub fn stop(&mut self) {
        self.stopped = true;
    }

    /// Whether the plan takes no new extents.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Whether the plan is over: stopped, and nothing held.
    pub fn finished(&self) -> bool {
        self.stopped && self.held.is_empty()
    }

    /// Memory held (or being filled) now, bytes.
    pub fn held_bytes(&self) -> u64 {
        self.held.len() as u64 * EXTENT
    }

    /// The reader is at `offset`: releases the extents wholly behind it (their indices, for
    /// the caller to free), oldest first.
    pub fn release_behind(&mut self, offset: u64) -> Vec<u64> {
        let mut freed = Vec::new();
        while !self.held.is_empty() && (self.base + 1) * EXTENT <= offset {
            self.held.pop_front();
            freed.push(self.base);
            self.base += 1;
        }
        if self.held.is_empty() && self.base < offset / EXTENT {
            self.base = offset / EXTENT;
        }
        freed
    }

    /// The extents to start now, at most `room` of them, with the reader at `offset` and the
    /// legs as `views` show them (`own_inflight(leg)`: this stream's own requests outstanding
    /// on the leg, demand reads and fetches, which are not competing work). A participant with
    /// other work stops the plan: our own requests only (`LegView::inflight`), as the device's
    /// count holds this plan's fetches split into several requests. `file_size` bounds the
    /// extents.
    pub fn wanted(
        &mut self,
        offset: u64,
        views: &[LegView],
        own_inflight: &dyn Fn(LegIdx) -> u32,
        file_size: u64,
        room: usize,
    ) -> Vec<Fetch> {
        if self.stopped {
            return Vec::new();
        }
        let busy = self.order.iter().any(|&leg| {
            views
                .iter()
                .find(|v| v.idx == leg)
                .is_none_or(|v| v.inflight > own_inflight(leg))
        });
        if busy || offset / EXTENT + 1 < self.first {
            // Another stream came to one of the legs (or a leg left), or the reader went back.
            self.stopped = true;
            return Vec::new();
        }
        let ahead = (self.order.len() * WINDOW_PER_LEG) as u64;
        let last = offset / EXTENT + ahead;
        let mut out = Vec::new();
        while self.next <= last && self.next * EXTENT < file_size && out.len() < room {
            let index = self.next;
            let leg = self.owner(index).expect("next is at or after first");
            let start = index * EXTENT;
            // Held extents are contiguous from `base`: a reader that jumped ahead leaves a gap
            // that nobody fetches, so `base` follows it.
            if self.held.is_empty() {
                self.base = index;
            }
            self.held.push_back(ExtentState::Fetching);
            out.push(Fetch {
                index,
                leg,
                offset: start,
                len: EXTENT.min(file_size - start),
            });
            self.next += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::StreamView;

    fn disk(idx: LegIdx, inflight: u32) -> LegView {
        LegView {
            idx,
            rotational: true,
            inflight,
            seek_us: Some(5000),
            read_bandwidth: Some(150_000_000),
            read_bandwidth_reads: 8,
            ..Default::default()
        }
    }

    fn confirmed(leg: LegIdx, offset: u64) -> ReadRequest {
        ReadRequest {
            offset,
            size: 1 << 20,
            stream: StreamView {
                sequential: true,
                run_bytes: ENGAGE_RUN,
                leg: Some(leg),
                inflight: 3,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn a_confirmed_stream_on_a_disk_engages_the_idle_disk_first() {
        let views = [disk(0, 3), disk(1, 0)];
        let idle = |l: LegIdx| if l == 0 { 3 } else { 0 };
        assert_eq!(
            engage(&views, &confirmed(0, 40 << 20), &idle),
            Some(vec![1, 0])
        );
        let mut short = confirmed(0, 40 << 20);
        short.stream.run_bytes = ENGAGE_RUN - 1;
        assert_eq!(engage(&views, &short, &idle), None);
        // A probe of the stream's own on the other disk is not competing work.
        let probed = [disk(0, 3), disk(1, 1)];
        assert_eq!(
            engage(&probed, &confirmed(0, 40 << 20), &|l: LegIdx| if l == 0 {
                3
            } else {
                0
            }),
            None
        );
        assert_eq!(
            engage(&probed, &confirmed(0, 40 << 20), &|l| if l == 1 {
                1
            } else {
                3
            }),
            Some(vec![1, 0])
        );
    }

    #[test]
    fn busy_fast_slow_or_flash_legs_do_not_engage() {
        let idle = |l: LegIdx| if l == 0 { 3 } else { 0 };
        // The other disk serves another stream; or another stream shares the stream's disk.
        assert_eq!(
            engage(&[disk(0, 5), disk(1, 0)], &confirmed(0, 0), &idle),
            None
        );
        assert_eq!(
            engage(&[disk(0, 3), disk(1, 2)], &confirmed(0, 0), &idle),
            None
        );
        // A much slower disk never reads ahead for a faster one (half its speed: equal
        // shares would give no more than the fast one alone); a little slower, it helps.
        let slow = |bw| LegView {
            read_bandwidth: Some(bw),
            ..disk(1, 0)
        };
        assert_eq!(
            engage(&[disk(0, 3), slow(70_000_000)], &confirmed(0, 0), &idle),
            None
        );
        assert_eq!(
            engage(&[disk(0, 3), slow(100_000_000)], &confirmed(0, 0), &idle),
            Some(vec![1, 0])
        );
        // A figure from one read (the one after a probe, which a loaded machine can stretch)
        // does not keep the leg out; from two it does.
        let once = |reads| LegView {
            read_bandwidth_reads: reads,
            ..slow(31_000_000)
        };
        assert_eq!(
            engage(&[disk(0, 3), once(1)], &confirmed(0, 0), &idle),
            Some(vec![1, 0])
        );
        assert_eq!(
            engage(&[disk(0, 3), once(2)], &confirmed(0, 0), &idle),
            None
        );
        // Flash: no positioning cost, `auto` spreads whole reads instead.
        let flash = |idx| LegView {
            seek_us: Some(50),
            rotational: false,
            ..disk(idx, 0)
        };
        assert_eq!(engage(&[flash(0), flash(1)], &confirmed(0, 0), &idle), None);
        // A disk stream with an SSD beside it: the SSD serves, nothing to engage.
        assert_eq!(
            engage(&[disk(0, 3), flash(1)], &confirmed(0, 0), &idle),
            None
        );
        // A disk whose measured seek came out low (short skips cost only the pass-over) is
        // still a disk; a stream already spread over legs is left to `auto`.
        let cheap_skips = |idx, q| LegView {
            seek_us: Some(800),
            ..disk(idx, q)
        };
        assert_eq!(
            engage(
                &[cheap_skips(0, 3), cheap_skips(1, 0)],
                &confirmed(0, 0),
                &idle
            ),
            Some(vec![1, 0])
        );
        let mut spread = confirmed(0, 0);
        spread.stream.spread = true;
        assert_eq!(engage(&[disk(0, 3), disk(1, 0)], &spread, &idle), None);
        // Write-mostly legs are not read.
        let mut wm = disk(1, 0);
        wm.writemostly = true;
        assert_eq!(engage(&[disk(0, 3), wm], &confirmed(0, 0), &idle), None);
    }

    #[test]
    fn three_disks_take_extents_in_turn_the_readers_leg_last() {
        let views = [disk(0, 0), disk(1, 3), disk(2, 0)];
        let order = engage(&views, &confirmed(1, 5 << 20), &|l| {
            if l == 1 {
                3
            } else {
                0
            }
        })
        .unwrap();
        assert_eq!(order, vec![0, 2, 1]);
        let mut e = Extents::new(order, 5 << 20);
        let own = |l: LegIdx| if l == 1 { 3 } else { 0 };
        let f = e.wanted(5 << 20, &views, &own, 1 << 40, usize::MAX);
        // The reader is in extent 0; extents 1..=6 are fetched, owned 0, 2, 1, 0, 2, 1.
        let got: Vec<(u64, LegIdx)> = f.iter().map(|f| (f.index, f.leg)).collect();
        assert_eq!(got, vec![(1, 0), (2, 2), (3, 1), (4, 0), (5, 2), (6, 1)]);
        assert_eq!(f[0].offset, EXTENT);
        assert_eq!(e.held_bytes(), 6 * EXTENT);
        assert_eq!(e.owner(0), None);
        assert_eq!(e.owner(7), Some(0));
        // The reader's leg (1) starts its extents once the reader has left extent 0.
        assert!(e.may_start(1, 5 << 20) && e.may_start(2, 5 << 20));
        assert!(!e.may_start(3, 5 << 20) && !e.may_start(6, EXTENT - 1));
        assert!(e.may_start(3, EXTENT) && e.may_start(6, EXTENT));
    }

    #[test]
    fn the_window_moves_with_the_reader_and_frees_what_it_passed() {
        let views = [disk(0, 1), disk(1, 1)];
        let own = |_| 1;
        let mut e = Extents::new(vec![1, 0], 0);
        assert_eq!(e.wanted(0, &views, &own, 1 << 40, usize::MAX).len(), 4);
        assert_eq!(e.wanted(0, &views, &own, 1 << 40, usize::MAX), vec![]);
        e.ready(1);
        assert_eq!(e.state(1), Some(ExtentState::Ready));
        assert_eq!(e.state(2), Some(ExtentState::Fetching));
        // The reader is in extent 2: extent 1 is freed and extents 5 and 6 come.
        assert_eq!(e.release_behind(2 * EXTENT + 7), vec![1]);
        assert_eq!(e.state(1), None);
        let f = e.wanted(2 * EXTENT + 7, &views, &own, 1 << 40, usize::MAX);
        assert_eq!(
            f.iter().map(|f| (f.index, f.leg)).collect::<Vec<_>>(),
            vec![(5, 1), (6, 0)]
        );
        // The end of the file bounds the last extent.
        let mut e = Extents::new(vec![1, 0], 0);
        let f = e.wanted(0, &views, &own, EXTENT + 100, usize::MAX);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].len, 100);
    }

    #[test]
    fn other_work_on_a_leg_stops_new_extents_and_the_plan_ends_when_drained() {
        let mut e = Extents::new(vec![1, 0], 0);
        let own = |_| 0;
        assert_eq!(
            e.wanted(0, &[disk(0, 0), disk(1, 0)], &own, 1 << 40, usize::MAX)
                .len(),
            4
        );
        // Another stream's read on leg 1.
        assert_eq!(
            e.wanted(0, &[disk(0, 0), disk(1, 1)], &own, 1 << 40, usize::MAX),
            vec![]
        );
        assert!(!e.finished());
        assert_eq!(e.release_behind(5 * EXTENT).len(), 4);
        assert!(e.finished());
        // A leg that left the candidates stops it too.
        let mut e = Extents::new(vec![1, 0], 0);
        assert_eq!(
            e.wanted(0, &[disk(0, 0)], &own, 1 << 40, usize::MAX),
            vec![]
        );
        assert!(e.finished());
    }
}
