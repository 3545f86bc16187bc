//! The /dev/fuse transport: threads that each read requests from their own clone of the
//! connection's descriptor, and write each answer back with one `writev`.
//!
//! Over io_uring it still runs, with one thread: the kernel sends forgets and interrupts
//! through /dev/fuse on both transports, and requests made before the rings were ready.

use super::abi;
use super::dispatch::MirrorFuse;
use super::reply::Answer;
use super::request;
use std::fs::File;
use std::io::{IoSlice, Read, Write};
use zerocopy::IntoBytes;

/// The read buffer: the largest request (a 1 MiB WRITE) and its headers.
fn buffer_len(max_write: u32) -> usize {
    max_write as usize + 4096
}

/// Over io_uring, how long the /dev/fuse reader waits after a forget before it reads again,
/// so that the forgets the kernel queues meanwhile come as one BATCH_FORGET. Read at once,
/// each evicted inode (an `rm -rf` makes one per file) was a FORGET of its own and a wake-up
/// of this thread, most often on the other CPU. Nothing else waits on this descriptor over
/// io_uring but interrupts, which this delays by as much.
const FORGET_GATHER: std::time::Duration = std::time::Duration::from_millis(1);

/// Answers the request in `msg` (one message read from /dev/fuse) on `dev`; its opcode.
pub fn answer_message(fuse: &MirrorFuse, msg: &[u8], dev: &File) -> Option<u32> {
    let Ok((h, head, payload)) = request::split_message(msg) else {
        log::error!("a request too short for its header ({} bytes)", msg.len());
        return None;
    };
    let a = super::answer_guarded(fuse, &h, head, payload);
    fuse.injected_death(h.opcode);
    if matches!(a, Answer::Nothing) {
        return Some(h.opcode);
    }
    let out = a.header(h.unique);
    let mut dev = dev;
    if let Err(e) = dev.write_vectored(&[IoSlice::new(out.as_bytes()), IoSlice::new(a.body())]) {
        // ENOENT: the request was interrupted and is gone; the kernel wants no answer.
        if e.raw_os_error() != Some(libc::ENOENT) {
            log::warn!(
                "cannot answer request {} (opcode {}): {e}",
                h.unique,
                h.opcode
            );
        }
    }
    Some(h.opcode)
}

/// Reads and answers requests on `dev` until the connection ends (unmount: ENODEV). Once the
/// io_uring queues serve (this is then the only reader, and carries no other request), it
/// waits [`FORGET_GATHER`] after a forget before it reads again.
pub fn serve_one(fuse: &MirrorFuse, dev: File) -> std::io::Result<()> {
    let mut buf = vec![0u8; buffer_len(fuse.negotiated().max_write)];
    let mut reader = &dev;
    loop {
        match reader.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                fuse.injected_fault(false)?;
                let gate = fuse.gate();
                if !gate.enter() {
                    // The session is being handed over: the successor gets this request
                    // again; this thread waits for the process to end.
                    loop {
                        std::thread::park();
                    }
                }
                let op = answer_message(fuse, &buf[..n], &dev);
                gate.leave();
                let forgot = matches!(op, Some(abi::op::FORGET | abi::op::BATCH_FORGET));
                if forgot && fuse.rings() {
                    std::thread::sleep(FORGET_GATHER);
                }
            }
            Err(e) => match e.raw_os_error() {
                // Interrupted before it was read, a signal, or nothing yet.
                Some(libc::ENOENT) | Some(libc::EINTR) | Some(libc::EAGAIN) => continue,
                Some(libc::ENODEV) => return Ok(()),
                _ => return Err(e),
            },
        }
    }
}
