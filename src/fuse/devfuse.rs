//! The /dev/fuse transport: threads that each read requests from their own clone of the
//! connection's descriptor, and write each answer back with one `writev`.
//!
//! Over io_uring it still runs, with one thread: the kernel sends forgets and interrupts
//! through /dev/fuse on both transports, and requests made before the rings were ready.

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

/// Answers the request in `msg` (one message read from /dev/fuse) on `dev`.
pub fn answer_message(fuse: &MirrorFuse, msg: &[u8], dev: &File) {
    let Ok((h, head, payload)) = request::split_message(msg) else {
        log::error!("a request too short for its header ({} bytes)", msg.len());
        return;
    };
    let a = super::answer_guarded(fuse, &h, head, payload);
    fuse.injected_death(h.opcode);
    if matches!(a, Answer::Nothing) {
        return;
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
}

/// Reads and answers requests on `dev` until the connection ends (unmount: ENODEV).
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
                answer_message(fuse, &buf[..n], &dev);
                gate.leave();
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
