//! The FUSE-over-io_uring transport: one queue per possible CPU, each a ring served by a
//! thread pinned to that CPU, so that a request and its answer stay on the core that made it.
//!
//! A queue keeps `DEPTH` ring entries registered with the kernel (`FUSE_IO_URING_CMD_REGISTER`);
//! a request arrives as the completion of one, and its answer goes back, with the fetch of
//! the next request, as one `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`.
//!
//! Leg I/O never stalls a queue. Each kind of operation is timed ([`Costs`]); a kind that has
//! lately taken longer than [`INLINE_MAX_US`] (a read that reaches a disk, an fsync) is handed
//! to the queue's workers, which answer into the entry and pass it back through a channel and
//! an eventfd that the ring reads, and the queue thread commits it. Cheap kinds (a lookup, a
//! getattr, a write into the legs' page cache) are answered on the queue thread itself, with
//! no wake-up of another thread. So a queue keeps as many requests in flight as the kernel
//! gives it (up to `DEPTH`), and the queue's own thread is always free to take the next one.

use super::abi;
use super::dispatch::MirrorFuse;
use super::reply::Answer;
use crate::sys::fusedev::{pin_to_cpu, EventFd};
use crate::sys::uring::{Event, FuseRing, Slot};
use crossbeam_channel::{Receiver, Sender};
use std::fs::File;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;
use zerocopy::{FromBytes, IntoBytes};

/// Ring entries per queue: requests one queue can have in flight.
pub const DEPTH: usize = 16;
/// An operation kind whose recent mean is above this many microseconds goes to a worker.
pub const INLINE_MAX_US: u32 = 25;

/// The recent mean time of each opcode, in microseconds (an exponential mean over the last
/// few of its requests, on whichever thread they ran), shared by the queues.
pub struct Costs([AtomicU32; abi::op::COUNT]);

impl Default for Costs {
    fn default() -> Self {
        Costs(std::array::from_fn(|_| AtomicU32::new(0)))
    }
}

impl Costs {
    /// Whether a request of `opcode` should run on a worker.
    pub fn hand_off(&self, opcode: u32) -> bool {
        match opcode {
            // Always waits for a disk.
            abi::op::FSYNC | abi::op::FSYNCDIR => true,
            _ => self
                .0
                .get(opcode as usize)
                .is_some_and(|c| c.load(Ordering::Relaxed) > INLINE_MAX_US),
        }
    }

    /// One request of `opcode` took `us` microseconds.
    pub fn took(&self, opcode: u32, us: u64) {
        if let Some(c) = self.0.get(opcode as usize) {
            let old = c.load(Ordering::Relaxed) as u64;
            // 1/8 new: a kind turns slow after a few slow requests, fast after a few more.
            let new = (old * 7 + us.min(1_000_000)) / 8;
            c.store(new as u32, Ordering::Relaxed);
        }
    }
}

/// The request in a slot the kernel filled, answered into the same slot; returns the
/// request's unique id (the commit id).
fn answer_slot(fuse: &MirrorFuse, costs: &Costs, slot: &mut Slot) -> u64 {
    let (hdr, payload) = slot.split_mut();
    let h = abi::InHeader::read_from_prefix(&hdr[..abi::URING_IN_OUT_HEADER_SZ])
        .map(|(h, _)| h)
        .unwrap_or_default();
    let ent_at = abi::URING_IN_OUT_HEADER_SZ + abi::URING_OP_IN_OUT_SZ;
    let ent = abi::UringEntInOut::read_from_prefix(&hdr[ent_at..])
        .map(|(e, _)| e)
        .unwrap_or_default();
    let op_in = &hdr[abi::URING_IN_OUT_HEADER_SZ..ent_at];
    let n = (ent.payload_sz as usize).min(payload.len());
    let start = Instant::now();
    let a = super::answer_guarded(fuse, &h, op_in, &payload[..n]);
    costs.took(h.opcode, start.elapsed().as_micros() as u64);
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
    let out = a.header(h.unique);
    hdr[..16].copy_from_slice(out.as_bytes());
    let ent_out = abi::UringEntInOut {
        payload_sz: sz as u32,
        commit_id: ent.commit_id,
        ..Default::default()
    };
    hdr[ent_at..ent_at + 32].copy_from_slice(ent_out.as_bytes());
    ent.commit_id
}

/// A finished hand-off: the slot, its tag, its commit id.
type Done = (usize, Box<Slot>, u64);

/// Serves queue `qid` until the connection ends.
fn serve_queue(
    fuse: Arc<MirrorFuse>,
    dev: Arc<File>,
    qid: usize,
    workers: usize,
    costs: Arc<Costs>,
    registered: Sender<std::io::Result<()>>,
) -> std::io::Result<()> {
    if let Err(e) = pin_to_cpu(qid) {
        // An offline CPU: its queue still has to exist for the kernel to use the rings.
        log::debug!("queue {qid}: cannot pin to CPU {qid}: {e}");
    }
    let payload_len = (fuse.negotiated().max_write as usize).max(1 << 20) + 4096;
    let setup = || -> std::io::Result<(FuseRing, Vec<Box<Slot>>, Arc<EventFd>)> {
        let ring = FuseRing::new(dev.clone(), qid as u16, DEPTH)?;
        let slots = (0..DEPTH)
            .map(|_| Slot::new(payload_len))
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok((ring, slots, Arc::new(EventFd::new()?)))
    };
    let (mut ring, slots, wake) = match setup() {
        Ok(s) => s,
        Err(e) => {
            let _ = registered.send(Err(std::io::Error::new(e.kind(), e.to_string())));
            return Err(e);
        }
    };
    let (jobs_tx, jobs_rx) = crossbeam_channel::bounded::<(usize, Box<Slot>)>(DEPTH);
    let (done_tx, done_rx) = crossbeam_channel::unbounded::<Done>();
    for w in 0..workers {
        let (fuse, costs, jobs, done, wake) = (
            fuse.clone(),
            costs.clone(),
            jobs_rx.clone(),
            done_tx.clone(),
            wake.clone(),
        );
        std::thread::Builder::new()
            .name(format!("fuse-q{qid}-w{w}"))
            .spawn(move || worker(&fuse, &costs, jobs, done, &wake))?;
    }
    drop((jobs_rx, done_tx));
    for (tag, slot) in slots.into_iter().enumerate() {
        ring.register(tag, slot)?;
    }
    ring.arm_wake(&wake)?;
    ring.submit_and_wait(0)?;
    let _ = registered.send(Ok(()));
    let mut events = Vec::with_capacity(DEPTH + 1);
    loop {
        ring.submit_and_wait(1)?;
        ring.reap(&mut events);
        for ev in events.drain(..) {
            match ev {
                Event::Slot { tag, res, mut slot } => {
                    if res < 0 {
                        // ENOTCONN/ECANCELED: the connection is gone (unmount) or the ring
                        // is being torn down. Anything else is a fault of ours.
                        let e = std::io::Error::from_raw_os_error(-res);
                        match -res {
                            libc::ENOTCONN | libc::ECANCELED | libc::ENODEV => {
                                log::debug!("queue {qid}: entry {tag} ended: {e}")
                            }
                            _ => log::error!("queue {qid}: the kernel refused entry {tag}: {e}"),
                        }
                        if ring.held() == 0 {
                            return Ok(());
                        }
                        continue;
                    }
                    let opcode =
                        abi::InHeader::read_from_prefix(slot.header()).map_or(0, |(h, _)| h.opcode);
                    if costs.hand_off(opcode) {
                        if let Err(e) = jobs_tx.send((tag, slot)) {
                            // No worker left: answer here.
                            let (tag, mut slot) = e.into_inner();
                            let id = answer_slot(&fuse, &costs, &mut slot);
                            ring.commit(tag, slot, id)?;
                        }
                    } else {
                        let id = answer_slot(&fuse, &costs, &mut slot);
                        ring.commit(tag, slot, id)?;
                    }
                }
                Event::Woken => {
                    for (tag, slot, id) in done_rx.try_iter() {
                        ring.commit(tag, slot, id)?;
                    }
                    ring.arm_wake(&wake)?;
                }
            }
        }
    }
}

fn worker(
    fuse: &MirrorFuse,
    costs: &Costs,
    jobs: Receiver<(usize, Box<Slot>)>,
    done: Sender<Done>,
    wake: &EventFd,
) {
    for (tag, mut slot) in jobs {
        let id = answer_slot(fuse, costs, &mut slot);
        if done.send((tag, slot, id)).is_err() {
            return;
        }
        wake.notify();
    }
}

/// Starts one queue per possible CPU on the connection `dev`; returns their threads once
/// every queue has registered its entries (the kernel then sends requests on the rings).
pub fn start(
    fuse: Arc<MirrorFuse>,
    dev: Arc<File>,
) -> std::io::Result<Vec<std::thread::JoinHandle<std::io::Result<()>>>> {
    let queues = crate::sys::fusedev::possible_cpus()?;
    let costs = Arc::new(Costs::default());
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut threads = Vec::with_capacity(queues);
    for qid in 0..queues {
        let (fuse, dev, costs, tx) = (fuse.clone(), dev.clone(), costs.clone(), tx.clone());
        threads.push(
            std::thread::Builder::new()
                .name(format!("fuse-q{qid}"))
                .spawn(move || serve_queue(fuse, dev, qid, DEPTH, costs, tx))?,
        );
    }
    for _ in 0..queues {
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
    Ok(threads)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_goes_to_the_workers_once_it_is_slow_and_comes_back_once_fast() {
        let c = Costs::default();
        assert!(!c.hand_off(abi::op::READ), "unknown: inline");
        assert!(c.hand_off(abi::op::FSYNC), "fsync always waits for a disk");
        for _ in 0..4 {
            c.took(abi::op::READ, 200);
        }
        assert!(c.hand_off(abi::op::READ));
        assert!(!c.hand_off(abi::op::GETATTR), "kinds are timed apart");
        for _ in 0..40 {
            c.took(abi::op::READ, 5);
        }
        assert!(!c.hand_off(abi::op::READ));
        // Out-of-range opcodes are neither timed nor handed off.
        c.took(9999, 1_000_000);
        assert!(!c.hand_off(9999));
    }
}
