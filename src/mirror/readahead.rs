//! The extent read-ahead ([`crate::policy::extents`]) run for real: the buffers, the fetches
//! on the idle disks, and the reads served from them.
//!
//! - One plan at most per file ([`Stream`], kept by the caller with the file's inode). It is
//!   engaged by [`ReadAhead::step`] after a read of a confirmed stream on a disk, when another
//!   disk of the same speed is idle, and moved along by every read of the file after that.
//! - Each leg has one read-ahead thread, started when first needed. A leg fetches its extents
//!   one after another, in [`CHUNK`]s, each a read of the leg's copy counted as the leg's own
//!   (in-flight count, read history, so that the policies see the disk busy and its figures
//!   stay fresh).
//! - [`ReadAhead::serve`] answers a read whose bytes lie in held extents, waiting for a chunk
//!   still on its way (at most [`WAIT`]; then the read goes to a leg as usual).
//! - Memory: every held extent counts [`EXTENT`] bytes against the `readahead` limit, and no
//!   extent is started beyond it. A plan ends when the reader passes its last extent, when a
//!   participating leg gets other work, or when the file changes ([`Stream::invalidate`],
//!   called by every change of the file's data, under its data lock).
//! - A chunk that fails (an I/O error, a checksum mismatch: the caller's fetch function
//!   verifies) marks its extent failed: reads there go to a leg as usual, which retries,
//!   repairs and counts as for any read.

use super::Mirror;
use crate::errno::{Errno, Result};
use crate::leg::{InflightGuard, LegIdx};
use crate::policy::extents::{self, Extents, CHUNK, EXTENT};
use crate::policy::{LegView, ReadRequest};
use crate::sys;
use crate::sys::aligned::Mapped;
use crossbeam_channel::{unbounded, Sender};
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// How long a read waits for a chunk being fetched before it goes to a leg itself.
pub const WAIT: Duration = Duration::from_secs(2);

/// Reads `buf.len()` bytes at the offset from the leg's copy of the file (short at the end of
/// the file); an error or a checksum mismatch is an `Err`.
pub type FetchFn = Arc<dyn Fn(LegIdx, u64, &mut [u8]) -> Result<usize> + Send + Sync>;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// The mount's read-ahead figures (the statistics' `readahead`).
#[derive(Default)]
pub struct Counters {
    /// Bytes of extents held (being fetched or fetched) now.
    pub held: AtomicU64,
    /// Bytes read ahead from the legs, since the mount.
    pub fetched: AtomicU64,
    /// Bytes of reads answered from the buffers, since the mount.
    pub served: AtomicU64,
    /// Plans engaged, since the mount.
    pub engaged: AtomicU64,
    /// Plans whose buffers a change of the file dropped, since the mount.
    pub invalidated: AtomicU64,
    /// Times the read-ahead, left holding nothing, asked for its memory to be given back.
    pub gave_back: AtomicU64,
}

impl Counters {
    /// The read-ahead holds nothing now: its freed buffers go back to the system.
    fn give_back(&self) {
        self.gave_back.fetch_add(1, Ordering::Relaxed);
        sys::host::give_back_free_memory_soon();
    }
}

/// The read-ahead of one mount: the memory limit, the figures and a thread per leg.
pub struct ReadAhead {
    limit: AtomicU64,
    counters: Arc<Counters>,
    threads: Vec<OnceLock<Option<Sender<Job>>>>,
    /// The open files that read lately: (open file, when, µs), most recent first.
    readers: Mutex<Vec<(u64, u64)>>,
}

/// Another open file that read within this long (µs) is another reader: while there is one,
/// no stream engages, and an engaged one stops taking extents. Several streams on a set of
/// disks read best one per disk, which `auto` does; a snapshot of the legs' queues misses a
/// reader between two reads.
pub const OTHER_READER_US: u64 = 250_000;

/// Open files remembered as recent readers.
const READERS: usize = 8;

/// One extent held for a plan.
struct Buf {
    index: u64,
    leg: LegIdx,
    start: u64,
    len: u64,
    /// A mapping of its own ([`Mapped`]): given back to the system when the extent is freed.
    data: Mapped,
    /// Its first chunk was handed to the leg's thread.
    started: bool,
    /// Every chunk arrived (`data` may be shorter than `len` at the end of the file).
    done: bool,
    failed: bool,
}

struct PlanState {
    plan: Extents,
    bufs: Vec<Buf>,
    /// Per leg: a fetch of this plan is running there.
    fetching: Vec<bool>,
    /// The end of the file, once a fetch came back short.
    eof: Option<u64>,
    /// Where the reader last read.
    reader: u64,
    /// The file changed: nothing more is served or fetched.
    dead: bool,
}

/// An engaged plan of one file.
pub struct Stream {
    fetch: FetchFn,
    counters: Arc<Counters>,
    st: Mutex<PlanState>,
    arrived: Condvar,
}

impl Stream {
    /// The file's data changed: drops every buffer; fetches under way stop at their next
    /// chunk, and what they read is thrown away.
    pub fn invalidate(&self) {
        if !self.st.lock().dead {
            self.counters.invalidated.fetch_add(1, Ordering::Relaxed);
        }
        self.release();
    }

    /// The file's last open was closed: gives every buffer back (fetches under way stop at
    /// their next chunk).
    pub fn release(&self) {
        let mut st = self.st.lock();
        st.dead = true;
        let (gone, emptied) = self.free(&mut st, |_| true);
        st.plan.stop();
        self.arrived.notify_all();
        drop(st);
        drop(gone);
        if emptied {
            self.counters.give_back();
        }
    }

    /// Takes the buffers `which` selects out of the plan, and says whether that left the
    /// mount's read-ahead holding nothing. The caller drops the buffers once it has let go of
    /// the stream's lock: each extent is a mapping of its own ([`Mapped`]), and unmapping its
    /// 16 MiB frees 4,096 pages, which the reads and fetches waiting on that lock need not
    /// wait for. When it emptied the mount, the caller then asks for what the reads it served
    /// left in the allocator's heaps (their copies) to go back too
    /// ([`sys::host::give_back_free_memory_soon`]), once it will not take more at once: a
    /// stream going on frees the extents behind its reader before it takes the next ones,
    /// and must not have the heaps trimmed in between.
    #[must_use]
    fn free(&self, st: &mut PlanState, which: impl Fn(&Buf) -> bool) -> (Vec<Buf>, bool) {
        let gone: Vec<Buf> = st.bufs.extract_if(.., |b| which(b)).collect();
        let mut emptied = false;
        for _ in &gone {
            emptied |= self.counters.held.fetch_sub(EXTENT, Ordering::Relaxed) == EXTENT;
        }
        (gone, emptied)
    }

    /// Whether the plan is over (stopped, nothing held): the caller forgets it.
    pub fn finished(&self) -> bool {
        let st = self.st.lock();
        st.dead || st.plan.finished()
    }

    /// Fetches the extents of `leg`, in order, until none is left unstarted (runs on the
    /// leg's read-ahead thread).
    fn run_fetches(self: &Arc<Self>, leg: LegIdx) {
        // What each chunk is read into, page-aligned for `O_DIRECT`; one for the run.
        let mut chunk = Mapped::with_capacity(CHUNK as usize);
        loop {
            let next = {
                let mut st = self.st.lock();
                loop {
                    let first = (!st.dead)
                        .then(|| {
                            st.bufs
                                .iter()
                                .filter(|b| b.leg == leg && !b.started)
                                .map(|b| b.index)
                                .min()
                        })
                        .flatten();
                    // The reader's own leg waits until the reader has left the extent that
                    // leg serves it from ([`Extents::may_start`]).
                    match first {
                        Some(k) if !st.plan.may_start(k, st.reader) => {
                            let _ = self.arrived.wait_for(&mut st, Duration::from_millis(100));
                        }
                        _ => break,
                    }
                }
                let found = (!st.dead)
                    .then(|| {
                        st.bufs
                            .iter_mut()
                            .filter(|b| b.leg == leg && !b.started)
                            .min_by_key(|b| b.index)
                    })
                    .flatten()
                    .map(|b| {
                        b.started = true;
                        (b.index, b.start, b.len)
                    });
                if found.is_none() {
                    st.fetching[leg] = false;
                }
                found
            };
            let Some((index, start, len)) = next else {
                return;
            };
            match chunk.as_mut() {
                Ok(chunk) => self.fetch_extent(leg, index, start, len, chunk),
                Err(_) => self.extent_failed(index),
            }
        }
    }

    /// The extent `index` cannot be fetched: reads of it go to the legs.
    fn extent_failed(&self, index: u64) {
        let mut st = self.st.lock();
        if let Some(b) = st.bufs.iter_mut().find(|b| b.index == index) {
            b.failed = true;
        }
        self.arrived.notify_all();
    }

    fn fetch_extent(&self, leg: LegIdx, index: u64, start: u64, len: u64, chunk: &mut Mapped) {
        let mut done = 0u64;
        while done < len {
            let want = CHUNK.min(len - done) as usize;
            let r = (self.fetch)(leg, start + done, &mut chunk.whole_mut()[..want]);
            let mut st = self.st.lock();
            let Some(b) = st.bufs.iter_mut().find(|b| b.index == index) else {
                // Released (the reader passed it) or dropped (the file changed).
                return;
            };
            match r {
                Ok(n) => {
                    chunk.set_len(n);
                    b.data.extend_from_slice(chunk.as_slice());
                    done += n as u64;
                    self.counters.fetched.fetch_add(n as u64, Ordering::Relaxed);
                    if n < want {
                        b.done = true;
                        let end = start + done;
                        st.eof = Some(st.eof.map_or(end, |e| e.min(end)));
                        self.arrived.notify_all();
                        return;
                    }
                    if done >= len {
                        b.done = true;
                        st.plan.ready(index);
                    }
                }
                Err(_) => {
                    b.failed = true;
                    self.arrived.notify_all();
                    return;
                }
            }
            self.arrived.notify_all();
        }
    }
}

/// What the held extents give a read.
#[derive(Debug, PartialEq, Eq)]
pub enum Served {
    /// The range, all of it held.
    Data(Vec<u8>),
    /// Held, but some of it is still being fetched.
    Pending,
    /// Not held (or an extent failed): the read goes to a leg.
    No,
}

impl ReadAhead {
    /// Read-ahead for `n_legs` legs, holding at most `limit` bytes (0: off).
    pub fn new(n_legs: usize, limit: u64) -> ReadAhead {
        ReadAhead {
            limit: AtomicU64::new(limit),
            counters: Arc::new(Counters::default()),
            threads: (0..n_legs).map(|_| OnceLock::new()).collect(),
            readers: Mutex::new(Vec::with_capacity(READERS)),
        }
    }

    /// Open file `reader` reads at `now_us`; whether another one read lately.
    fn other_readers(&self, reader: u64, now_us: u64) -> bool {
        let mut r = self.readers.lock();
        r.retain(|&(f, t)| f != reader && now_us.saturating_sub(t) < OTHER_READER_US);
        let others = !r.is_empty();
        r.insert(0, (reader, now_us));
        r.truncate(READERS);
        others
    }

    pub fn set_limit(&self, limit: u64) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The read of `offset..+size` from the held extents of `s`, waiting up to [`WAIT`] for
    /// chunks on their way; `None` when the range is not all held (or an extent failed, or
    /// the wait ran out): the read then goes to a leg.
    pub fn serve(&self, s: &Stream, offset: u64, size: u32) -> Option<Vec<u8>> {
        match self.serve_until(s, offset, size, Some(std::time::Instant::now() + WAIT)) {
            Served::Data(d) => Some(d),
            Served::Pending | Served::No => None,
        }
    }

    /// As [`serve`](Self::serve), without waiting: [`Served::Pending`] when the range is
    /// held but some of it is still on its way (for a thread that must not block).
    pub fn try_serve(&self, s: &Stream, offset: u64, size: u32) -> Served {
        self.serve_until(s, offset, size, None)
    }

    fn serve_until(
        &self,
        s: &Stream,
        offset: u64,
        size: u32,
        deadline: Option<std::time::Instant>,
    ) -> Served {
        let end = offset + u64::from(size);
        let mut st = s.st.lock();
        loop {
            if st.dead {
                return Served::No;
            }
            let mut ready = true;
            for k in offset / EXTENT..=(end.max(offset + 1) - 1) / EXTENT {
                let Some(b) = st.bufs.iter().find(|b| b.index == k) else {
                    return Served::No;
                };
                if b.failed {
                    return Served::No;
                }
                // Bytes from the extent's start this read needs.
                let need = end.min(b.start + b.len) - b.start;
                if !b.done && (b.data.len() as u64) < need {
                    ready = false;
                }
                if b.done && (b.data.len() as u64) < b.len {
                    // The end of the file is in this extent: nothing after it.
                    break;
                }
            }
            if ready {
                let mut out = Vec::with_capacity(size as usize);
                let mut at = offset;
                while at < end {
                    let Some(b) = st.bufs.iter().find(|b| b.index == at / EXTENT) else {
                        break;
                    };
                    let from = (at - b.start) as usize;
                    let to = ((end - b.start) as usize).min(b.data.len());
                    if from >= to {
                        break;
                    }
                    out.extend_from_slice(&b.data.as_slice()[from..to]);
                    at = b.start + to as u64;
                    if to < (b.len as usize).min((end - b.start) as usize) {
                        break;
                    }
                }
                self.counters
                    .served
                    .fetch_add(out.len() as u64, Ordering::Relaxed);
                return Served::Data(out);
            }
            match deadline {
                None => return Served::Pending,
                Some(d) => {
                    if s.arrived.wait_until(&mut st, d).timed_out() {
                        return Served::No;
                    }
                }
            }
        }
    }

    /// After a read of `req` by the open file `reader` (routed or served): engages a plan for
    /// the file in `slot` when the stream qualifies ([`extents::engage`]) and no other open
    /// file reads ([`OTHER_READER_US`]), moves the plan to the reader and starts the extents
    /// it wants. `views`: the candidate legs now; `fetch` makes the function that reads a
    /// leg's copy (called once, when a plan is engaged).
    pub fn step(
        &self,
        slot: &Mutex<Option<Arc<Stream>>>,
        reader: u64,
        views: &dyn Fn() -> Vec<LegView>,
        req: &ReadRequest,
        fetch: impl FnOnce() -> FetchFn,
    ) {
        let limit = self.limit();
        let mut held_slot = slot.lock();
        if held_slot.is_none() && !req.stream.sequential {
            // Random reads neither engage nor count as another reader (their I/O on the legs
            // stops a plan through the queues).
            return;
        }
        let others = self.other_readers(reader, req.now_us);
        if held_slot.is_none() {
            let s = &req.stream;
            if limit < 2 * EXTENT || !s.sequential || s.run_bytes < extents::ENGAGE_RUN || others {
                return;
            }
            let v = views();
            let own = |l: LegIdx| if Some(l) == s.leg { s.inflight } else { 0 };
            let Some(order) = extents::engage(&v, req, &own) else {
                log::trace!("read-ahead: not engaged: {s:?} {v:?}");
                return;
            };
            log::debug!(
                "read-ahead: inode {} at {}: extents from legs {order:?}",
                req.file,
                req.offset
            );
            self.counters.engaged.fetch_add(1, Ordering::Relaxed);
            *held_slot = Some(Arc::new(Stream {
                fetch: fetch(),
                counters: self.counters.clone(),
                st: Mutex::new(PlanState {
                    plan: Extents::new(order, req.offset),
                    bufs: Vec::new(),
                    fetching: vec![false; self.threads.len()],
                    eof: None,
                    reader: req.offset,
                    dead: false,
                }),
                arrived: Condvar::new(),
            }));
        }
        let stream = held_slot.clone().expect("engaged");
        if stream.finished() {
            *held_slot = None;
            return;
        }
        drop(held_slot);
        let v = views();
        let s = &req.stream;
        let mut st = stream.st.lock();
        if others && !st.plan.stopped() {
            log::debug!("read-ahead: inode {}: another reader, stopped", req.file);
            st.plan.stop();
        }
        st.reader = req.offset;
        // A fetch of the reader's leg may be waiting for the reader to leave its extent.
        stream.arrived.notify_all();
        // Reads arrive slightly out of order (several FUSE threads, the kernel's readahead):
        // an extent is freed once the reader is well past it.
        let behind = req.offset.saturating_sub(4 * CHUNK);
        let freed = st.plan.release_behind(behind);
        let (gone, emptied) = stream.free(&mut st, |b| freed.contains(&b.index));
        let held = self.counters.held.load(Ordering::Relaxed);
        let room = (limit.saturating_sub(held) / EXTENT) as usize;
        let fetching = st.fetching.clone();
        let was_stopped = st.plan.stopped();
        let own = |l: LegIdx| {
            u32::from(fetching.get(l).copied().unwrap_or(false))
                + if Some(l) == s.leg { s.inflight } else { 0 }
        };
        let eof = st.eof.unwrap_or(u64::MAX);
        let wanted = st.plan.wanted(req.offset, &v, &own, eof, room);
        if st.plan.stopped() && !was_stopped {
            log::debug!(
                "read-ahead: inode {} at {}: stopped (own {:?}, legs {v:?})",
                req.file,
                req.offset,
                st.plan.legs().iter().map(|&l| own(l)).collect::<Vec<_>>()
            );
        }
        let mut start_on = Vec::new();
        for f in wanted {
            self.counters.held.fetch_add(EXTENT, Ordering::Relaxed);
            // No memory for it: the extent stands failed, and its reads go to the legs.
            let data = Mapped::with_capacity(f.len as usize);
            st.bufs.push(Buf {
                index: f.index,
                leg: f.leg,
                start: f.offset,
                len: f.len,
                failed: data.is_err(),
                data: data.unwrap_or_else(|_| Mapped::empty()),
                started: false,
                done: false,
            });
            if !st.fetching[f.leg] {
                st.fetching[f.leg] = true;
                start_on.push(f.leg);
            }
        }
        drop(st);
        drop(gone);
        if emptied && self.counters.held.load(Ordering::Relaxed) == 0 {
            self.counters.give_back();
        }
        for leg in start_on {
            let s = stream.clone();
            if !self.submit(leg, Box::new(move || s.run_fetches(leg))) {
                // No thread: the extents of that leg are never fetched; reads there go to the
                // legs as usual.
                let mut st = stream.st.lock();
                st.fetching[leg] = false;
                let (gone, emptied) = stream.free(&mut st, |b| b.leg == leg && !b.started);
                drop(st);
                drop(gone);
                if emptied {
                    self.counters.give_back();
                }
            }
        }
    }

    /// Hands a job to `leg`'s read-ahead thread, starting it if need be.
    fn submit(&self, leg: LegIdx, job: Job) -> bool {
        let Some(cell) = self.threads.get(leg) else {
            return false;
        };
        let tx = cell.get_or_init(|| {
            let (tx, rx) = unbounded::<Job>();
            std::thread::Builder::new()
                .name(format!("leg{leg}-ahead"))
                .spawn(move || {
                    while let Ok(job) = rx.recv() {
                        job();
                    }
                })
                .map_err(|e| log::error!("cannot start leg {leg}'s read-ahead thread: {e}"))
                .ok()
                .map(|_| tx)
        });
        tx.as_ref().is_some_and(|tx| tx.send(job).is_ok())
    }
}

impl Mirror {
    /// The extent read-ahead (this file).
    pub fn readahead(&self) -> &ReadAhead {
        &self.readahead
    }

    /// After a read of `req` (served or routed) among `candidates`: the extent read-ahead's
    /// step for the file whose plan `slot` holds ([`ReadAhead::step`]). Only under
    /// `auto`, and only when the read-ahead has memory.
    pub fn read_ahead_step(
        &self,
        slot: &Mutex<Option<Arc<Stream>>>,
        reader: u64,
        candidates: &[LegIdx],
        req: &ReadRequest,
        fetch: impl FnOnce() -> FetchFn,
    ) {
        if self.readahead.limit() == 0 || !self.auto.load(Ordering::Relaxed) {
            if let Some(s) = slot.lock().take() {
                s.release();
            }
            return;
        }
        let views = || -> Vec<LegView> {
            candidates
                .iter()
                .filter(|&&l| self.legs[l].is_in_sync())
                .map(|&l| self.reads[l].lock().view(&self.legs[l]))
                .collect()
        };
        self.readahead.step(slot, reader, &views, req, fetch);
    }

    /// A read-ahead fetch of `len` bytes at `offset` of `file` from `leg`, by `op`: counted
    /// as the leg's own read (in flight while it runs, its read history, its read counters)
    /// and subject to injected read faults, like any read.
    pub fn read_ahead_fetch(
        &self,
        leg: LegIdx,
        file: u64,
        offset: u64,
        len: u32,
        op: impl FnOnce() -> Result<usize>,
    ) -> Result<usize> {
        let l = self.legs.get(leg).ok_or(Errno::EIO)?;
        if !l.is_in_sync() {
            return Err(Errno::EIO);
        }
        self.faults.check_file(leg, "read", Some(file))?;
        let _inflight = InflightGuard::new(l);
        let h = self.reads[leg].lock().hand_over(l, file, offset, len);
        let start = std::time::Instant::now();
        let n = op()?;
        let elapsed = start.elapsed().as_micros() as u64;
        self.reads[leg]
            .lock()
            .record(&h, n as u64, elapsed, self.now_us());
        l.counters.read_ops.fetch_add(1, Ordering::Relaxed);
        l.counters.read_bytes.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fault::FaultRule;
    use super::super::test_mirror;
    use super::*;
    use crate::leg::LegState;
    use crate::policy::StreamView;

    fn disk(idx: LegIdx, inflight: u32) -> LegView {
        LegView {
            idx,
            rotational: true,
            inflight,
            seek_us: Some(5000),
            read_bandwidth: Some(150_000_000),
            ..Default::default()
        }
    }

    /// A file of `size` bytes whose byte at `o` is `o % 251`, the same on every leg; reads
    /// are logged (leg, offset).
    fn file(size: u64, log: Arc<Mutex<Vec<(LegIdx, u64)>>>) -> FetchFn {
        Arc::new(move |leg, offset, buf: &mut [u8]| {
            // Every chunk may be read with O_DIRECT.
            assert!(
                crate::sys::aligned::is_aligned(buf, offset) || !buf.len().is_multiple_of(4096)
            );
            log.lock().push((leg, offset));
            let n = (size.saturating_sub(offset) as usize).min(buf.len());
            for (i, b) in buf[..n].iter_mut().enumerate() {
                *b = ((offset + i as u64) % 251) as u8;
            }
            Ok(n)
        })
    }

    fn req(offset: u64) -> ReadRequest {
        ReadRequest {
            file: 7,
            offset,
            size: 1 << 20,
            stream: StreamView {
                sequential: true,
                run_bytes: offset,
                leg: Some(0),
                inflight: 0,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn two_disks() -> Vec<LegView> {
        vec![disk(0, 0), disk(1, 0)]
    }

    /// A plan engaged on a large file by a reader 16 MiB in, on [`two_disks`]: the file's
    /// slot and the plan.
    fn engaged(ra: &ReadAhead) -> (Mutex<Option<Arc<Stream>>>, Arc<Stream>) {
        let slot = Mutex::new(None);
        let log = Arc::new(Mutex::new(Vec::new()));
        ra.step(&slot, 1, &two_disks, &req(EXTENT + 5), || {
            file(1 << 40, log)
        });
        let s = slot.lock().clone().expect("engaged");
        (slot, s)
    }

    fn wait_held(ra: &ReadAhead, s: &Stream, offset: u64) -> Vec<u8> {
        ra.serve(s, offset, 1 << 20).expect("held")
    }

    #[test]
    fn a_stream_is_read_ahead_by_both_disks_and_served_from_the_buffer() {
        let ra = ReadAhead::new(2, 256 << 20);
        let slot = Mutex::new(None);
        let log = Arc::new(Mutex::new(Vec::new()));
        let size = 5 * EXTENT + 12345;
        let views = || vec![disk(0, 0), disk(1, 0)];
        // Not confirmed yet: nothing.
        ra.step(&slot, 1, &views, &req(EXTENT / 2), || {
            file(size, log.clone())
        });
        assert!(slot.lock().is_none());
        ra.step(&slot, 1, &views, &req(EXTENT + 5), || {
            file(size, log.clone())
        });
        let s = slot.lock().clone().expect("engaged");
        assert_eq!(ra.counters().engaged.load(Ordering::Relaxed), 1);
        // Extent 2 (the next) from leg 1, extent 3 from leg 0, ... up to 4 ahead.
        let data = wait_held(&ra, &s, 2 * EXTENT + 4096);
        assert_eq!(data.len(), 1 << 20);
        assert!(data
            .iter()
            .enumerate()
            .all(|(i, &b)| b == ((2 * EXTENT + 4096 + i as u64) % 251) as u8));
        // The reader's own leg (0) starts its extent 3 once the reader has left extent 1.
        ra.step(&slot, 1, &views, &req(2 * EXTENT), || unreachable!());
        let d3 = wait_held(&ra, &s, 3 * EXTENT);
        assert_eq!(d3[0], ((3 * EXTENT) % 251) as u8);
        // The end of the file: a short answer; then no extent is started past it.
        let tail = wait_held(&ra, &s, 5 * EXTENT);
        assert_eq!(tail.len(), 12345);
        assert_eq!(
            wait_held(&ra, &s, 5 * EXTENT - (1 << 20))[0],
            ((5 * EXTENT - (1 << 20)) % 251) as u8
        );
        // Until a short read shows the end, an extent past it may be asked for (and comes
        // back empty); after, none is.
        std::thread::sleep(Duration::from_millis(100));
        let asked = log.lock().len();
        ra.step(&slot, 1, &views, &req(5 * EXTENT), || unreachable!());
        std::thread::sleep(Duration::from_millis(100));
        let log = log.lock().clone();
        assert!(log[asked..].iter().all(|&(_, o)| o < size), "{log:?}");
        assert!(log.contains(&(1, 2 * EXTENT)) && log.contains(&(0, 3 * EXTENT)));
        assert!(log.contains(&(1, 4 * EXTENT)) && log.contains(&(0, 5 * EXTENT)));
        // Not the extent the reader was in.
        assert!(log.iter().all(|&(_, o)| o >= 2 * EXTENT));
        assert!(ra.counters().served.load(Ordering::Relaxed) >= 2 << 20);
    }

    #[test]
    fn the_memory_goes_back_when_the_stream_ends_not_while_it_moves_on() {
        let ra = ReadAhead::new(2, 2 * EXTENT);
        let views = two_disks;
        let (slot, s) = engaged(&ra);
        wait_held(&ra, &s, 2 * EXTENT);
        // Extent 3 starts once the reader has left extent 1.
        ra.step(&slot, 1, &views, &req(2 * EXTENT), || unreachable!());
        wait_held(&ra, &s, 3 * EXTENT);
        let held = &ra.counters().held;
        assert_eq!(held.load(Ordering::Relaxed), 2 * EXTENT);
        // The reader is past both held extents: they are freed, and the next two taken in
        // the same step. The mount held nothing for a moment, but the stream goes on.
        ra.step(
            &slot,
            1,
            &views,
            &req(4 * EXTENT + 5 * CHUNK),
            || unreachable!(),
        );
        assert!(held.load(Ordering::Relaxed) > 0);
        assert!(ra.serve(&s, 3 * EXTENT, 4096).is_none());
        assert_eq!(ra.counters().gave_back.load(Ordering::Relaxed), 0);
        // The last close: everything goes, and back to the system.
        s.release();
        assert_eq!(held.load(Ordering::Relaxed), 0);
        assert_eq!(ra.counters().gave_back.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_change_of_the_file_drops_the_buffers() {
        let ra = ReadAhead::new(2, 256 << 20);
        let views = two_disks;
        let (slot, s) = engaged(&ra);
        assert!(ra.serve(&s, 2 * EXTENT, 4096).is_some());
        s.invalidate();
        assert!(ra.serve(&s, 2 * EXTENT, 4096).is_none());
        assert!(s.finished());
        assert_eq!(ra.counters().invalidated.load(Ordering::Relaxed), 1);
        // Every buffer is given back at once; a fetch under way throws its chunk away.
        assert_eq!(ra.counters().held.load(Ordering::Relaxed), 0);
        // The finished plan is forgotten at the next step.
        ra.step(&slot, 1, &views, &req(EXTENT + 6), || unreachable!());
        assert!(slot.lock().is_none());
    }

    #[test]
    fn the_limit_bounds_what_is_held_and_a_failed_extent_is_not_served() {
        let ra = ReadAhead::new(2, 2 * EXTENT);
        let slot = Mutex::new(None);
        let views = || vec![disk(0, 0), disk(1, 0)];
        let failing: FetchFn = Arc::new(|leg, _, _: &mut [u8]| {
            if leg == 1 {
                Err(crate::errno::Errno::EIO)
            } else {
                Ok(0)
            }
        });
        ra.step(&slot, 1, &views, &req(EXTENT + 5), || failing);
        assert!(ra.counters().held.load(Ordering::Relaxed) <= 2 * EXTENT);
        let s = slot.lock().clone().unwrap();
        // Extent 2 is leg 1's, which fails: the read goes to the legs.
        assert!(ra.serve(&s, 2 * EXTENT, 4096).is_none());
        // Off: nothing engages.
        let off = ReadAhead::new(2, 0);
        let slot = Mutex::new(None);
        off.step(&slot, 1, &views, &req(EXTENT + 5), || unreachable!());
        assert!(slot.lock().is_none());
    }

    #[test]
    fn a_read_ahead_fetch_is_counted_as_its_legs_read() {
        let (_d, m) = test_mirror::plain(2);
        let l = m.leg(1);
        let r = m.read_ahead_fetch(1, 9, 0, 8192, || {
            assert_eq!(
                l.inflight.load(Ordering::Acquire),
                1,
                "in flight while it runs"
            );
            Ok(8192)
        });
        assert_eq!(r, Ok(8192));
        assert_eq!(l.inflight.load(Ordering::Acquire), 0);
        assert_eq!(l.counters.read_ops.load(Ordering::Relaxed), 1);
        assert_eq!(l.counters.read_bytes.load(Ordering::Relaxed), 8192);
        // An injected read fault for the file, a leg out of the mirror, no such leg: EIO,
        // and nothing is read.
        m.inject_fault(FaultRule {
            leg: 1,
            op: "read".into(),
            errno: Errno::EIO,
            times: Some(1),
            file: Some(9),
        });
        let never = || -> Result<usize> { panic!("read") };
        assert_eq!(m.read_ahead_fetch(1, 9, 0, 8192, never), Err(Errno::EIO));
        l.set_state(LegState::Failed);
        assert_eq!(m.read_ahead_fetch(1, 9, 0, 8192, never), Err(Errno::EIO));
        assert_eq!(m.read_ahead_fetch(2, 9, 0, 8192, never), Err(Errno::EIO));
        assert_eq!(l.counters.read_ops.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn without_auto_the_read_ahead_step_lets_the_files_plan_go() {
        let (_d, m) = test_mirror::plain(2);
        let ra = m.readahead();
        ra.set_limit(256 << 20);
        let (slot, s) = engaged(ra);
        // The policy is `first`: the mirror's step gives the plan up instead of running it.
        let never = || -> FetchFn { panic!("engaged again") };
        m.read_ahead_step(&slot, 1, &[0, 1], &req(EXTENT + 6), never);
        assert!(slot.lock().is_none());
        assert!(s.finished());
        assert_eq!(ra.counters().held.load(Ordering::Relaxed), 0);
    }
}
