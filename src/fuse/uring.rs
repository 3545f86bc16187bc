//! The FUSE-over-io_uring transport: one queue per possible CPU, as the kernel wants, each with
//! `DEPTH` ring entries. A queue is served by `DEPTH` entry threads and one reader, all pinned
//! to the queue's CPU, each on a ring of its own.
//!
//! An entry is registered with `FUSE_IO_URING_CMD_REGISTER`; a request arrives as the
//! completion of it, and its answer goes back, with the fetch of the next request, as one
//! `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`. The kernel sends a request to the queue of the CPU
//! that made it, on any entry of that queue that is free, so a request and its answer stay on
//! the core of the program that asked. The kernel takes an entry's commit from any ring of the
//! connection, and the entry's next request then completes on that ring: an entry belongs to
//! the thread that last committed it, and moves with its request from one thread to another.
//!
//! Two kinds of thread, so that leg I/O never stalls a queue:
//!
//! - An **entry thread** answers a request by calling the core, which may block (a create on
//!   two legs, an fsync). It holds at most one entry: while it waits for a disk, no other
//!   request waits for it. An entry thread without an entry waits for one handed to it. It
//!   waits, and answers small requests, under `SCHED_IDLE`, so that the program it answers is
//!   not moved off the queue's CPU by the answer ([`Turns`], `ring_idle=`).
//! - The **reader** answers READs without blocking: the core routes and counts the read
//!   (`MirrorFs::read_start`), the legs' reads are submitted on the reader's own ring, and
//!   their completions are checked and answered (`MirrorFs::read_end`) as they come. It holds
//!   as many entries as there are READs in flight, so 16 random reads at iodepth 16 are 16 leg
//!   reads under way, served by one thread that sleeps only when there is nothing to do.
//!
//! A READ that comes to an entry thread while the queue is answering no other READ is answered
//! there, with `pread` (one reader at a time pays no hand-over); one that comes while others are
//! under way goes to the reader. Anything else that comes to the reader, and any READ it cannot
//! finish (a leg failed, a block did not match its checksum, faults injected, `leg_timeout`),
//! goes to an entry thread without an entry (there is always one: the reader holds k entries
//! only while k entry threads hold none), which answers it the blocking way: ask another leg,
//! repair. Measured (docs/architecture.md, "The FUSE session and its transports").

use super::abi;
use super::dispatch::{MirrorFuse, ReadBegun};
use super::reply::Answer;
use super::request;
use super::Ended;
use crate::fs::{LegRead, PendingRead};
use crate::sys::fusedev::pin_to_cpu;
use crate::sys::uring::{Done, EventFd, FuseRing, NoRead, RingRead, Slot};
use crossbeam_channel::{Receiver, Sender};
use std::fs::File;
use std::os::fd::BorrowedFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use zerocopy::{FromBytes, IntoBytes};

/// Ring entries per queue: requests one queue can have in flight.
pub const DEPTH: usize = 16;

/// Where the entry's trailer (`fuse_uring_ent_in_out`) is in its header.
const ENT_AT: usize = abi::URING_IN_OUT_HEADER_SZ + abi::URING_OP_IN_OUT_SZ;

/// What an entry thread without an entry is handed.
enum Job {
    /// An entry with a request in it, to answer the blocking way.
    Entry(Box<Slot>),
    /// The queue ended.
    Stop,
}

/// What the threads of one queue share.
struct Queue {
    qid: usize,
    /// Entries for the entry threads that hold none.
    jobs: (Sender<Job>, Receiver<Job>),
    /// READs for the reader, which `wake` wakes.
    to_reader: (Sender<Box<Slot>>, Receiver<Box<Slot>>),
    wake: Arc<EventFd>,
    /// READs being answered on the queue, by any of its threads.
    reads: AtomicUsize,
    ended: AtomicBool,
    /// How long the reader polls before it sleeps while reads are under way (`ring_poll=`).
    poll: std::time::Duration,
    /// Whether an entry thread waits for requests under `SCHED_IDLE` ([`Turns`], `ring_idle=`).
    idle_wait: bool,
}

impl Queue {
    /// The connection ended (seen by one thread): the others stop too.
    fn end(&self) {
        if !self.ended.swap(true, Ordering::AcqRel) {
            for _ in 0..DEPTH {
                let _ = self.jobs.0.send(Job::Stop);
            }
            self.wake.signal();
        }
    }

    fn to_entry_thread(&self, slot: Box<Slot>) {
        let _ = self.jobs.0.send(Job::Entry(slot));
    }

    fn to_reader(&self, slot: Box<Slot>) {
        let _ = self.to_reader.0.send(slot);
        self.wake.signal();
    }
}

/// The request's header and its entry's trailer, as the kernel wrote them into `slot`.
fn request_of(slot: &Slot) -> (abi::InHeader, abi::UringEntInOut) {
    let hdr = slot.header();
    let h = abi::InHeader::read_from_prefix(&hdr[..abi::URING_IN_OUT_HEADER_SZ])
        .map(|(h, _)| h)
        .unwrap_or_default();
    let ent = abi::UringEntInOut::read_from_prefix(&hdr[ENT_AT..])
        .map(|(e, _)| e)
        .unwrap_or_default();
    (h, ent)
}

/// The opcode's header and the payload of the request in `slot`.
fn parts_of<'a>(slot: &'a Slot, ent: &abi::UringEntInOut) -> (&'a [u8], &'a [u8]) {
    let op_in = &slot.header()[abi::URING_IN_OUT_HEADER_SZ..ENT_AT];
    let payload = slot.payload();
    let n = (ent.payload_sz as usize).min(payload.len());
    (op_in, &payload[..n])
}

/// Writes `a`, the answer to the request `unique`, into `slot`. Data read into the slot's
/// own payload (`ReadData::in_place`) is there already.
fn write_answer(slot: &mut Slot, unique: u64, commit_id: u64, a: Answer) {
    let in_place = match &a {
        Answer::Data(d) => d.in_place().filter(|(at, _)| *at == slot.payload_addr()),
        _ => None,
    };
    if let Some((_, sz)) = in_place {
        // The window into the payload goes before the payload is written through `slot`.
        let header = a.header(unique);
        drop(a);
        let (hdr, _) = slot.split_mut();
        hdr[..16].copy_from_slice(header.as_bytes());
        write_ent_out(hdr, sz, commit_id);
        return;
    }
    // Never expected: data in lent memory elsewhere than at the payload's start. Copied out
    // first, so that nothing reads the payload while it is written.
    let a = match a {
        Answer::Data(d) if d.in_place().is_some() => {
            Answer::Data(crate::fs::ReadData::Plain(d.as_slice().to_vec()))
        }
        a => a,
    };
    let (hdr, payload) = slot.split_mut();
    let a = match a.body().len() <= payload.len() {
        true => a,
        false => {
            log::error!(
                "an answer of {} bytes does not fit the ring entry",
                a.body().len()
            );
            Answer::Error(libc::EIO)
        }
    };
    let body = a.body();
    let sz = body.len();
    payload[..sz].copy_from_slice(body);
    hdr[..16].copy_from_slice(a.header(unique).as_bytes());
    write_ent_out(hdr, sz, commit_id);
}

/// The entry's trailer for an answer of `sz` payload bytes.
fn write_ent_out(hdr: &mut [u8], sz: usize, commit_id: u64) {
    let ent_out = abi::UringEntInOut {
        payload_sz: sz as u32,
        commit_id,
        ..Default::default()
    };
    hdr[ENT_AT..ENT_AT + 32].copy_from_slice(ent_out.as_bytes());
}

/// Answers the request in `slot` the blocking way; returns its commit id.
fn answer_slot(fuse: &MirrorFuse, slot: &mut Slot) -> u64 {
    let (h, ent) = request_of(slot);
    let (op_in, payload) = parts_of(slot, &ent);
    let a = super::answer_guarded(fuse, &h, op_in, payload);
    write_answer(slot, h.unique, ent.commit_id, a);
    ent.commit_id
}

/// Whether the connection's end shows in a completion's result: ENOTCONN, ECANCELED or ENODEV
/// end a thread quietly; another error is a fault of ours, and ends the mount.
fn ended(qid: usize, res: i32) -> std::io::Result<()> {
    let e = std::io::Error::from_raw_os_error(-res);
    match -res {
        libc::ENOTCONN | libc::ECANCELED | libc::ENODEV => {
            log::debug!("queue {qid}: an entry ended: {e}");
            Ok(())
        }
        _ => Err(std::io::Error::new(
            e.kind(),
            format!("the kernel refused a ring entry: {e}"),
        )),
    }
}

fn pin(qid: usize) {
    if let Err(e) = pin_to_cpu(qid) {
        // An offline CPU: its queue still has to exist for the kernel to use the rings.
        log::debug!("queue {qid}: cannot pin to CPU {qid}: {e}");
    }
}

/// An entry thread of queue `q`: registers one entry, then answers what comes on it or is
/// handed to it, until the connection ends; says on `registered` once the kernel has the
/// entry (or why it could not).
fn serve_entry(
    fuse: &MirrorFuse,
    dev: Arc<File>,
    q: &Queue,
    registered: Sender<std::io::Result<()>>,
) -> std::io::Result<()> {
    pin(q.qid);
    let payload_len = (fuse.negotiated().max_write as usize).max(1 << 20) + 4096;
    let setup = || -> std::io::Result<FuseRing<NoRead>> {
        let mut ring = FuseRing::new(dev.clone(), q.qid as u16, 4)?;
        ring.register(Slot::new(payload_len)?)?;
        ring.submit_and_wait(0)?;
        Ok(ring)
    };
    let mut ring = match setup() {
        Ok(r) => r,
        Err(e) => {
            let _ = registered.send(Err(std::io::Error::new(e.kind(), e.to_string())));
            return Err(e);
        }
    };
    let _ = registered.send(Ok(()));
    let mut done = Vec::with_capacity(2);
    let mut turns = Turns::new(q.qid, q.idle_wait);
    loop {
        let mut slot = match ring.slots_held() {
            0 => match q.jobs.1.recv() {
                Ok(Job::Entry(mut slot)) => {
                    fuse.injected_fault(true)?;
                    turns.busy(&slot);
                    let id = answer_slot(fuse, &mut slot);
                    turns.done();
                    ring.commit(slot, id)?;
                    continue;
                }
                Ok(Job::Stop) | Err(_) => return Ok(()),
            },
            _ => {
                ring.submit_and_wait(1)?;
                done.clear();
                ring.reap(&mut done)?;
                match done.pop() {
                    Some(Done::Slot(res, _)) if res < 0 => {
                        q.end();
                        return ended(q.qid, res);
                    }
                    Some(Done::Slot(_, slot)) => slot,
                    _ => continue,
                }
            }
        };
        fuse.injected_fault(true)?;
        let (h, _) = request_of(&slot);
        if h.opcode == abi::op::READ && q.reads.load(Ordering::Acquire) > 0 {
            q.to_reader(slot);
            continue;
        }
        turns.busy(&slot);
        let id = if h.opcode == abi::op::READ {
            q.reads.fetch_add(1, Ordering::AcqRel);
            let id = answer_slot(fuse, &mut slot);
            q.reads.fetch_sub(1, Ordering::AcqRel);
            id
        } else {
            answer_slot(fuse, &mut slot)
        };
        turns.done();
        ring.commit(slot, id)?;
    }
}

/// An entry thread's scheduling policy: `SCHED_IDLE`, and `SCHED_OTHER` only while it answers
/// a request that moves much data ([`moves_data`]).
///
/// An answer wakes the program that asked from inside the entry thread's commit, on the
/// queue's CPU, where the entry thread still runs, and the scheduler places a woken task on a
/// CPU that is idle. With the entry thread under the normal policy that moved the program to
/// the other CPU at every request (a `stat` loop migrated 51,680 times in 60,000 requests),
/// whose next request then went to that CPU's queue and woke it from idle. A CPU whose only
/// runnable thread is `SCHED_IDLE` counts as idle, so the program stays, and takes the CPU at
/// once. The price is paid while other programs keep the CPU busy: a `SCHED_IDLE` thread runs
/// there last, which a request with much work would feel most, so such a one is answered under
/// the normal policy, and the thread keeps it until a request without much work has been
/// answered (a `sched_setscheduler` costs about 2.5 us: too dear for every request).
/// Measured in docs/architecture.md; `ring_idle=off` leaves the policy alone.
struct Turns {
    qid: usize,
    /// Whether the thread is `SCHED_IDLE` now; None when it keeps its policy (`ring_idle=off`,
    /// or a change of policy failed).
    idle: Option<bool>,
    /// Whether the request being answered moves much data.
    moving: bool,
}

impl Turns {
    fn new(qid: usize, on: bool) -> Turns {
        let mut t = Turns {
            qid,
            idle: on.then_some(false),
            moving: false,
        };
        t.done();
        t
    }

    /// The request in `slot` is to be answered.
    fn busy(&mut self, slot: &Slot) {
        self.moving = self.idle.is_some() && {
            let (h, ent) = request_of(slot);
            moves_data(h.opcode, parts_of(slot, &ent).0)
        };
        if self.moving && self.idle == Some(true) {
            self.set(false);
        }
    }

    /// The answer is ready: it goes back with the thread's next wait. After one that moved
    /// much data the thread stays under the normal policy, since such requests come in runs
    /// (a stream of writes): each would otherwise wait for the CPU under `SCHED_IDLE` first.
    fn done(&mut self) {
        if self.idle == Some(false) && !self.moving {
            self.set(true);
        }
    }

    fn set(&mut self, idle: bool) {
        match crate::sys::fusedev::set_idle_policy(idle) {
            Ok(()) => self.idle = Some(idle),
            Err(e) if idle || crate::sys::fusedev::set_idle_policy(false).is_ok() => {
                log::info!(
                    "queue {}: the entry thread keeps the normal policy: {e}",
                    self.qid
                );
                self.idle = None;
            }
            Err(e) => {
                // Stuck under SCHED_IDLE: the thread still answers, later on a busy CPU.
                log::warn!(
                    "queue {}: an entry thread cannot leave SCHED_IDLE: {e}",
                    self.qid
                );
                self.idle = None;
            }
        }
    }
}

/// A READ or WRITE of at least this many bytes is answered under the normal policy.
const BIG_IO: u32 = 64 << 10;

/// Whether a request (`opcode`, and its opcode's header `op_in`) is one an entry thread answers
/// under the normal policy: a READ or WRITE of [`BIG_IO`] bytes or more, and what waits for
/// data to reach the disks or copies it there (`fsync`, `fallocate`, `copy_file_range`).
fn moves_data(opcode: u32, op_in: &[u8]) -> bool {
    use abi::op;
    match opcode {
        op::READ => abi::ReadIn::read_from_prefix(op_in).is_ok_and(|(r, _)| r.size >= BIG_IO),
        op::WRITE => abi::WriteIn::read_from_prefix(op_in).is_ok_and(|(w, _)| w.size >= BIG_IO),
        op::FSYNC | op::FSYNCDIR | op::FALLOCATE | op::COPY_FILE_RANGE => true,
        _ => false,
    }
}

/// One leg read of a READ the reader waits on.
struct Piece {
    /// The READ's place in the reader's table, and the read's place in the READ.
    id: usize,
    index: usize,
    read: LegRead,
}

impl RingRead for Piece {
    fn target(&mut self) -> (BorrowedFd<'_>, &mut [u8], u64) {
        self.read.target()
    }

    fn may_block(&self) -> bool {
        self.read.may_block
    }
}

/// A READ whose legs' reads are under way on the reader's ring.
struct Waiting {
    slot: Box<Slot>,
    unique: u64,
    commit_id: u64,
    read: Box<PendingRead>,
    /// The leg reads as they come back, and what each gave.
    back: Vec<Option<(LegRead, crate::errno::Result<usize>)>>,
    left: usize,
}

/// The reader of queue `q`: answers READs with their legs' reads submitted on its own ring,
/// until the connection ends.
fn serve_reads(
    fuse: &MirrorFuse,
    dev: Arc<File>,
    q: &Queue,
    registered: Sender<std::io::Result<()>>,
) -> std::io::Result<()> {
    // Not pinned: a reader mostly waits for disks, and one that shares the CPU of the
    // program it serves takes turns with it. Measured on two CPUs, random 4 KiB reads at
    // iodepth 16 and 1 MiB sequential reads were 6 % and 19 % faster with the reader free to
    // run beside the program (docs/architecture.md).
    let setup = || -> std::io::Result<FuseRing<Piece>> {
        let mut ring = FuseRing::new(dev.clone(), q.qid as u16, 4 * DEPTH as u32)?;
        ring.arm_wake(&q.wake)?;
        ring.submit()?;
        Ok(ring)
    };
    let mut ring = match setup() {
        Ok(r) => r,
        Err(e) => {
            let _ = registered.send(Err(std::io::Error::new(e.kind(), e.to_string())));
            return Err(e);
        }
    };
    let _ = registered.send(Ok(()));
    let mut r = Reader {
        fuse,
        q,
        waiting: Vec::new(),
        free: Vec::new(),
    };
    let mut done = Vec::with_capacity(4 * DEPTH);
    let mut poll = PollWindow::new(q.poll);
    loop {
        // Only while reads are under way: an idle reader sleeps at once.
        match ring.reads_under_way() > 0 {
            true => {
                let t = std::time::Instant::now();
                ring.submit_and_poll(poll.window())?;
                poll.waited(t.elapsed());
            }
            false => ring.submit_and_poll(std::time::Duration::ZERO)?,
        }
        done.clear();
        ring.reap(&mut done)?;
        // New READs first, so that the disks get their reads while the reads that came back are
        // checked and answered. And each one's leg reads, and each answer, are submitted at once,
        // not with the next wait: on two CPUs, 16 random reads in flight otherwise move in step,
        // all 16 waiting for the reader to go through all 16 (each stage in turn, the disks idle
        // meanwhile). Each submit also runs what the kernel has pending for the ring
        // (`IORING_SQ_TASKRUN`): requests that came meanwhile. Measured in
        // docs/architecture.md ("The FUSE session and its transports").
        done.sort_by_key(|d| matches!(d, Done::Read(..)));
        for d in done.drain(..) {
            match d {
                Done::Wake => {
                    while let Ok(slot) = q.to_reader.1.try_recv() {
                        r.start(&mut ring, slot)?;
                        ring.submit()?;
                    }
                    if !q.ended.load(Ordering::Acquire) {
                        ring.arm_wake(&q.wake)?;
                    }
                }
                Done::Slot(res, _) if res < 0 => {
                    q.end();
                    ended(q.qid, res)?;
                }
                Done::Slot(_, slot) => {
                    fuse.injected_fault(true)?;
                    r.start(&mut ring, slot)?;
                    ring.submit()?;
                }
                Done::Read(piece, got) => {
                    r.piece_done(&mut ring, *piece, got)?;
                    ring.submit()?;
                }
            }
        }
        if q.ended.load(Ordering::Acquire) && ring.slots_held() == 0 {
            // Reads still under way stay with the ring, which never frees what the kernel
            // may still write.
            return Ok(());
        }
    }
}

/// The reader's READs in flight.
struct Reader<'a> {
    fuse: &'a MirrorFuse,
    q: &'a Queue,
    waiting: Vec<Option<Waiting>>,
    free: Vec<usize>,
}

impl Drop for Reader<'_> {
    fn drop(&mut self) {
        // A READ whose leg reads are still under way when the queue ends keeps its slot for
        // good: the kernel may still write those reads into the slot's payload.
        for w in self.waiting.drain(..).flatten() {
            if w.left > 0 {
                std::mem::forget(w.slot);
            }
        }
    }
}

impl Reader<'_> {
    /// A request on an entry the reader holds, or a READ handed to it.
    // The one `unsafe` here: the slot's payload lent to the read (`Slot::lend_payload`).
    #[allow(unsafe_code)]
    fn start(&mut self, ring: &mut FuseRing<Piece>, mut slot: Box<Slot>) -> std::io::Result<()> {
        let (h, ent) = request_of(&slot);
        if h.opcode != abi::op::READ {
            self.q.to_entry_thread(slot);
            return Ok(());
        }
        let begun = {
            let (op_in, payload) = parts_of(&slot, &ent);
            match request::decode(h.opcode, op_in, payload) {
                // The blocking way says what is malformed.
                Err(_) => ReadBegun::Blocking,
                Ok(op) => catch_unwind(AssertUnwindSafe(|| {
                    // SAFETY: the payload is not used but through the window: the slot
                    // goes into `waiting` with the read, and out again only when its last
                    // leg read is back (or stays there for good: see `Reader`'s drop).
                    let into = unsafe { slot.lend_payload() };
                    self.fuse.read_begin(&h, op, Some(into))
                }))
                .unwrap_or_else(|_| {
                    log::error!(
                        "the daemon panicked starting a read (node {}): answered EIO",
                        h.nodeid
                    );
                    self.fuse.count_request();
                    ReadBegun::Answer(Answer::Error(libc::EIO))
                }),
            }
        };
        match begun {
            ReadBegun::Answer(a) => {
                write_answer(&mut slot, h.unique, ent.commit_id, a);
                ring.commit(slot, ent.commit_id)
            }
            ReadBegun::Blocking => {
                self.q.to_entry_thread(slot);
                Ok(())
            }
            ReadBegun::Legs(mut read) => {
                self.q.reads.fetch_add(1, Ordering::AcqRel);
                let id = match self.free.pop() {
                    Some(id) => id,
                    None => {
                        self.waiting.push(None);
                        self.waiting.len() - 1
                    }
                };
                let reads = std::mem::take(&mut read.reads);
                let n = reads.len();
                self.waiting[id] = Some(Waiting {
                    slot,
                    unique: h.unique,
                    commit_id: ent.commit_id,
                    read,
                    back: (0..n).map(|_| None).collect(),
                    left: n,
                });
                if n == 0 {
                    return self.finish(ring, id);
                }
                for (index, read) in reads.into_iter().enumerate() {
                    ring.read(Box::new(Piece { id, index, read }))?;
                }
                Ok(())
            }
        }
    }

    /// A leg read came back.
    fn piece_done(
        &mut self,
        ring: &mut FuseRing<Piece>,
        piece: Piece,
        got: std::io::Result<usize>,
    ) -> std::io::Result<()> {
        let Some(Some(w)) = self.waiting.get_mut(piece.id) else {
            return Ok(());
        };
        if let Some(b) = w.back.get_mut(piece.index) {
            *b = Some((piece.read, got.map_err(crate::errno::Errno::from)));
            w.left -= 1;
        }
        match w.left {
            0 => self.finish(ring, piece.id),
            _ => Ok(()),
        }
    }

    /// Every leg read of READ `id` came back: answered, or handed to an entry thread.
    fn finish(&mut self, ring: &mut FuseRing<Piece>, id: usize) -> std::io::Result<()> {
        let Some(mut w) = self.waiting.get_mut(id).and_then(Option::take) else {
            return Ok(());
        };
        self.free.push(id);
        let mut got = Vec::with_capacity(w.back.len());
        for (read, r) in w.back.into_iter().flatten() {
            w.read.reads.push(read);
            got.push(r);
        }
        let fuse = self.fuse;
        let a = catch_unwind(AssertUnwindSafe(|| fuse.read_finish(w.read, &got))).unwrap_or_else(
            |_| {
                log::error!("the daemon panicked finishing a read: answered EIO");
                fuse.count_request();
                Some(Answer::Error(libc::EIO))
            },
        );
        self.q.reads.fetch_sub(1, Ordering::AcqRel);
        match a {
            Some(a) => {
                write_answer(&mut w.slot, w.unique, w.commit_id, a);
                ring.commit(w.slot, w.commit_id)
            }
            None => {
                self.q.to_entry_thread(w.slot);
                Ok(())
            }
        }
    }
}

/// How long the reader looks for a completion before it sleeps, while reads are under way.
/// Polling answers reads sooner: a sleeping thread waits to be woken, which an idle CPU of a
/// virtual machine does slowly, and a wake-up that comes late leaves the legs with fewer reads
/// to do. It costs CPU time, and pays only when completions come within the window: the reader
/// keeps the mean time it waited for the next one, and while that is longer than the window
/// (slow disks, such as a rotating one at a few hundred reads a second) it sleeps at once
/// instead of spending the window on every turn.
struct PollWindow {
    max: std::time::Duration,
    /// The mean wait, in nanoseconds, each new wait weighing 1/8.
    mean_wait: u64,
}

impl PollWindow {
    fn new(max: std::time::Duration) -> PollWindow {
        PollWindow { max, mean_wait: 0 }
    }

    fn window(&self) -> std::time::Duration {
        match self.mean_wait > self.max.as_nanos() as u64 {
            true => std::time::Duration::ZERO,
            false => self.max,
        }
    }

    /// The reader waited `d` for its next completion (polling, sleeping, or both). A wait
    /// counts as at most four windows, so one long wait among short ones (a tail) does not
    /// stop the polling.
    fn waited(&mut self, d: std::time::Duration) {
        let cap = 4 * self.max.as_nanos().min(u64::MAX as u128 / 32) as u64;
        let d = d.as_nanos().min(cap as u128) as u64;
        self.mean_wait = (self.mean_wait * 7 + d) / 8;
    }
}

/// How a queue's threads wait (`ring_poll=`, `ring_idle=`).
#[derive(Clone, Copy, Debug)]
pub struct Tuning {
    /// How long the reader polls before it sleeps while reads are under way ([`PollWindow`]).
    pub poll: std::time::Duration,
    /// Whether an entry thread waits for requests under `SCHED_IDLE` ([`Turns`]).
    pub idle_wait: bool,
}

/// Starts the threads of one queue per possible CPU on the connection `dev`, each thread
/// saying on `ended` when it ends (how, and under which name); returns the number of queues
/// and of threads once every entry is registered (the kernel then sends requests on the
/// rings).
pub fn start(
    fuse: Arc<MirrorFuse>,
    dev: Arc<File>,
    ended: &Sender<Ended>,
    tuning: Tuning,
) -> std::io::Result<(usize, usize)> {
    let queues = crate::sys::fusedev::possible_cpus()?;
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut threads = 0;
    for qid in 0..queues {
        let q = Arc::new(Queue {
            qid,
            jobs: crossbeam_channel::unbounded(),
            to_reader: crossbeam_channel::unbounded(),
            wake: Arc::new(EventFd::new()?),
            reads: AtomicUsize::new(0),
            ended: AtomicBool::new(false),
            poll: tuning.poll,
            idle_wait: tuning.idle_wait,
        });
        for e in 0..=DEPTH {
            let (fuse, dev, tx, ended, q) = (
                fuse.clone(),
                dev.clone(),
                tx.clone(),
                ended.clone(),
                q.clone(),
            );
            let name = match e {
                DEPTH => format!("fuse-q{qid}-read"),
                _ => format!("fuse-q{qid}-e{e}"),
            };
            let n = name.clone();
            std::thread::Builder::new().name(name).spawn(move || {
                let r = catch_unwind(AssertUnwindSafe(|| match e {
                    DEPTH => serve_reads(&fuse, dev, &q, tx),
                    _ => serve_entry(&fuse, dev, &q, tx),
                }));
                // Whatever ended this thread, the queue's others must not wait for it.
                q.end();
                let _ = ended.send((n, r));
            })?;
            threads += 1;
        }
    }
    drop(tx);
    for _ in 0..threads {
        match rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(std::io::Error::other(
                    "a queue thread ended before it registered",
                ))
            }
        }
    }
    Ok((queues, threads))
}

#[cfg(test)]
mod tests {
    use super::{abi, moves_data, PollWindow, BIG_IO};
    use std::time::Duration;
    use zerocopy::IntoBytes;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn the_reader_polls_while_completions_come_within_the_window() {
        let mut p = PollWindow::new(200 * US);
        assert_eq!(p.window(), 200 * US, "no wait seen yet: poll");
        for _ in 0..100 {
            p.waited(30 * US);
        }
        assert_eq!(p.window(), 200 * US);
        // A long wait among many short ones (a tail): still worth polling.
        p.waited(2_000 * US);
        assert_eq!(p.window(), 200 * US);
        p.waited(30 * US);
        p.waited(2_000 * US);
        assert_eq!(p.window(), 200 * US);
    }

    #[test]
    fn slow_disks_make_the_reader_sleep_at_once_until_they_answer_faster() {
        let mut p = PollWindow::new(200 * US);
        for _ in 0..20 {
            p.waited(5_000 * US);
        }
        assert_eq!(
            p.window(),
            Duration::ZERO,
            "a 5 ms disk: polling would only burn CPU"
        );
        let mut turns = 0;
        while p.window().is_zero() {
            p.waited(40 * US);
            turns += 1;
            assert!(turns < 100, "never polls again");
        }
        assert_eq!(p.window(), 200 * US);
    }

    #[test]
    fn only_requests_with_much_data_to_move_are_answered_under_the_normal_policy() {
        use abi::op;
        let read = |size: u32| {
            abi::ReadIn {
                size,
                ..Default::default()
            }
            .as_bytes()
            .to_vec()
        };
        let write = |size: u32| {
            abi::WriteIn {
                size,
                ..Default::default()
            }
            .as_bytes()
            .to_vec()
        };
        assert!(!moves_data(op::READ, &read(4096)), "a small read");
        assert!(moves_data(op::READ, &read(BIG_IO)));
        assert!(moves_data(op::READ, &read(1 << 20)));
        assert!(!moves_data(op::WRITE, &write(BIG_IO - 1)), "tar's writes");
        assert!(moves_data(op::WRITE, &write(1 << 20)), "a stream of writes");
        assert!(!moves_data(op::WRITE, &[0u8; 8]), "a header cut short");
        for o in [op::FSYNC, op::FSYNCDIR, op::FALLOCATE, op::COPY_FILE_RANGE] {
            assert!(moves_data(o, &[]), "opcode {o}");
        }
        for o in [
            op::LOOKUP,
            op::GETATTR,
            op::CREATE,
            op::UNLINK,
            op::SETATTR,
            op::FORGET,
        ] {
            assert!(!moves_data(o, &read(1 << 20)), "opcode {o}");
        }
    }

    #[test]
    fn ring_poll_0_never_polls_and_huge_waits_do_not_overflow() {
        let mut p = PollWindow::new(Duration::ZERO);
        assert_eq!(p.window(), Duration::ZERO);
        p.waited(Duration::MAX);
        p.waited(Duration::MAX);
        assert_eq!(p.window(), Duration::ZERO);
        let mut p = PollWindow::new(200 * US);
        p.waited(Duration::MAX);
        assert_eq!(p.window(), 200 * US, "one wait, however long, is a tail");
        for _ in 0..5 {
            p.waited(Duration::MAX);
        }
        assert_eq!(p.window(), Duration::ZERO);
    }
}
