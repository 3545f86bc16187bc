//! What completed reads taught the engine about each leg, and the snapshot a read policy
//! decides on. The policy owns its input types ([`LegView`]); the engine fills them from the
//! leg ([`Leg`]: flags, in-flight counts, the device) and from the leg's read history kept
//! here (service times, where the last read ended).

use crate::leg::Leg;
use crate::policy::service_time::ServiceTime;
use crate::policy::LegView;
use std::sync::atomic::Ordering;

/// A read handed to a leg, and what was known of the leg then.
#[derive(Clone, Copy, Debug)]
pub struct HandOver {
    /// The mirror's inode number of the file, and the offset the read starts at.
    pub file: u64,
    pub offset: u64,
    /// Our other requests outstanding on the leg then.
    pub queued: u32,
}

/// A leg's measured read figures; each `None` until measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServiceFigures {
    /// Mean service time of small reads, µs.
    pub small_read_us: Option<u64>,
    /// Mean service time of large reads, µs.
    pub large_read_us: Option<u64>,
    /// Positioning cost, µs.
    pub seek_us: Option<u64>,
    /// Large-read bandwidth, bytes per second.
    pub read_bandwidth: Option<u64>,
}

/// One leg's read history (behind a lock per leg, in the mirror).
#[derive(Default)]
pub struct ReadHistory {
    service: ServiceTime,
    /// (file, offset) where the last read handed to this leg ended (the policies' position).
    last_end: Option<(u64, u64)>,
    /// (file, offset) where the last read completed on this leg ended: whether a read
    /// continued it is judged in completion order, as the device served them (a disk
    /// reorders a queue of two streams' reads into runs; handed-over order would take most
    /// of its reads for jumps and find the seeks cheap).
    last_done_end: Option<(u64, u64)>,
}

impl ReadHistory {
    /// What a read policy may know of `leg` now. Samples the device's in-flight count (at
    /// most every 10 ms).
    pub fn view(&self, leg: &Leg) -> LegView {
        let mut v = LegView {
            idx: leg.idx,
            rotational: leg.rotational,
            writemostly: leg.reads_last(),
            inflight: leg.inflight.load(Ordering::Acquire),
            device_inflight: leg.device.inflight(),
            ..Default::default()
        };
        self.service.fill(&mut v);
        v.last_read_end = self.last_end;
        v
    }

    /// A read of `len` bytes at `offset` of `file` is handed to `leg` (as md moves its head
    /// position at submission): returns what [`record`](Self::record) needs later.
    pub fn hand_over(&mut self, leg: &Leg, file: u64, offset: u64, len: u32) -> HandOver {
        self.last_end = Some((file, offset + u64::from(len)));
        HandOver {
            file,
            offset,
            // Counted by the guard already taken for this read: the others.
            queued: leg.inflight.load(Ordering::Acquire).saturating_sub(1),
        }
    }

    /// A read handed over as `h` completed after `elapsed_us` with `bytes`, at `now_us` on the
    /// mirror's clock (taken under this history's lock, so that completions are recorded in
    /// order).
    pub fn record(&mut self, h: &HandOver, bytes: u64, elapsed_us: u64, now_us: u64) {
        // A leg that has completed no read yet: its position is unknown, so the read counts
        // as a jump (a disk's head is somewhere else).
        let contiguous = self.last_done_end == Some((h.file, h.offset));
        self.last_done_end = Some((h.file, h.offset + bytes));
        self.service
            .record_queued(bytes, elapsed_us, now_us, Some(contiguous), Some(h.queued));
    }

    /// The measured service-time figures (for the statistics).
    pub fn figures(&self) -> ServiceFigures {
        ServiceFigures {
            small_read_us: self.service.small_read_us().map(u64::from),
            large_read_us: self.service.large_read_us().map(u64::from),
            seek_us: self.service.seek_us().map(u64::from),
            read_bandwidth: self.service.read_bandwidth(),
        }
    }
}
