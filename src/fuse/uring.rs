//! The FUSE-over-io_uring transport: one queue per possible CPU, as the kernel wants, and in
//! each queue `DEPTH` ring entries, each served by a thread of its own, pinned to the queue's
//! CPU, on a ring of its own.
//!
//! An entry is registered with `FUSE_IO_URING_CMD_REGISTER`; a request arrives as the
//! completion of it, and its answer goes back, with the fetch of the next request, as one
//! `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`. The kernel sends a request to the queue of the CPU
//! that made it, on any entry of that queue that is free: so a request and its answer stay on
//! the core of the program that asked, and the thread that takes it is the one that answers,
//! with no hand-off and no wake-up of another thread.
//!
//! Leg I/O never stalls a queue: an entry whose thread waits for a disk holds only that entry,
//! and the queue's other entries go on serving. So a queue keeps as many requests in flight
//! as the kernel gives it, up to `DEPTH` (16 random reads at iodepth 16 are 16 leg reads under
//! way). Measured against one thread per queue that answers cheap requests itself and hands
//! slow ones to workers (a channel there, an eventfd read on the ring back), this serves the
//! same metadata load as fast and random reads 1.3-1.5 x faster: a hand-off costs two wake-ups
//! per request (docs/architecture.md, "The FUSE session and its transports").

use super::abi;
use super::dispatch::MirrorFuse;
use super::reply::Answer;
use super::Ended;
use crate::sys::fusedev::pin_to_cpu;
use crate::sys::uring::{FuseRing, Slot};
use crossbeam_channel::Sender;
use std::fs::File;
use std::sync::Arc;
use zerocopy::{FromBytes, IntoBytes};

/// Ring entries per queue: requests one queue can have in flight.
pub const DEPTH: usize = 16;

/// The request in a slot the kernel filled, answered into the same slot; returns the
/// request's unique id (the commit id).
fn answer_slot(fuse: &MirrorFuse, slot: &mut Slot) -> u64 {
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
    let a = super::answer_guarded(fuse, &h, op_in, &payload[..n]);
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

/// Serves one entry of queue `qid`, on a ring of its own, until the connection ends; says on
/// `registered` once the kernel has the entry (or why it could not).
fn serve_entry(
    fuse: &MirrorFuse,
    dev: Arc<File>,
    qid: usize,
    registered: Sender<std::io::Result<()>>,
) -> std::io::Result<()> {
    if let Err(e) = pin_to_cpu(qid) {
        // An offline CPU: its queue still has to exist for the kernel to use the rings.
        log::debug!("queue {qid}: cannot pin to CPU {qid}: {e}");
    }
    let payload_len = (fuse.negotiated().max_write as usize).max(1 << 20) + 4096;
    let setup = || -> std::io::Result<FuseRing> {
        let mut ring = FuseRing::new(dev.clone(), qid as u16)?;
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
    loop {
        ring.submit_and_wait(1)?;
        let Some((res, mut slot)) = ring.reap() else {
            continue;
        };
        if res < 0 {
            // ENOTCONN/ECANCELED/ENODEV: the connection is gone (unmount) or the ring is
            // being torn down. Anything else is a fault of ours, and ends the mount.
            let e = std::io::Error::from_raw_os_error(-res);
            return match -res {
                libc::ENOTCONN | libc::ECANCELED | libc::ENODEV => {
                    log::debug!("queue {qid}: an entry ended: {e}");
                    Ok(())
                }
                _ => Err(std::io::Error::new(
                    e.kind(),
                    format!("the kernel refused a ring entry: {e}"),
                )),
            };
        }
        fuse.injected_fault(true)?;
        let id = answer_slot(fuse, &mut slot);
        ring.commit(slot, id)?;
    }
}

/// Starts the entries of one queue per possible CPU on the connection `dev`, each thread
/// saying on `ended` when it ends (how, and under which name); returns the number of threads
/// once every entry is registered (the kernel then sends requests on the rings).
pub fn start(
    fuse: Arc<MirrorFuse>,
    dev: Arc<File>,
    ended: &Sender<Ended>,
) -> std::io::Result<(usize, usize)> {
    let queues = crate::sys::fusedev::possible_cpus()?;
    let (tx, rx) = crossbeam_channel::unbounded();
    let mut threads = 0;
    for qid in 0..queues {
        for e in 0..DEPTH {
            let (fuse, dev, tx, ended) = (fuse.clone(), dev.clone(), tx.clone(), ended.clone());
            let name = format!("fuse-q{qid}-e{e}");
            let n = name.clone();
            std::thread::Builder::new().name(name).spawn(move || {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    serve_entry(&fuse, dev, qid, tx)
                }));
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
