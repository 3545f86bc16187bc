//! One FUSE io_uring queue's ring (`Documentation/filesystems/fuse/fuse-io-uring.rst`): its
//! entries' buffers, the REGISTER and COMMIT_AND_FETCH commands, and the completions.
//!
//! The memory rule lives here. A ring entry ([`Slot`]) is a header buffer and a payload buffer
//! that the kernel writes a request into and reads a reply from. It belongs either to the
//! daemon (between a completion and the next command) or to the kernel (from a command until
//! its completion): [`FuseRing::register`] and [`FuseRing::commit`] take the slot, and the
//! completion gives it back, so no Rust reference to it exists while the kernel may write it.
//! A slot the kernel still holds when the ring goes is never freed: the kernel keeps the
//! addresses of registered entries for the connection's life.

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::ptr::NonNull;
use std::sync::Arc;

/// The size of `fuse_uring_req_header`.
pub const HEADER_LEN: usize = 288;
/// Where the payload starts in a slot's mapping (the header has the first page).
const PAYLOAD_AT: usize = 4096;

/// One ring entry's buffers: the header (`fuse_uring_req_header`) and the payload.
pub struct Slot {
    mem: NonNull<u8>,
    payload_len: usize,
    /// The two buffers as the REGISTER command names them (the kernel reads these when the
    /// command is issued; boxed with the slot, so they do not move).
    iov: [libc::iovec; 2],
}

// SAFETY: a slot is plain memory owned by one thread at a time (it moves between the ring's
// thread, the kernel, and a worker by value).
unsafe impl Send for Slot {}

impl Slot {
    /// A slot with a payload of `payload_len` bytes (at least the connection's largest
    /// request: the kernel refuses a smaller one). Anonymous memory: pages cost nothing until
    /// a request of that size touches them.
    pub fn new(payload_len: usize) -> io::Result<Box<Slot>> {
        let len = PAYLOAD_AT + payload_len;
        // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mem = NonNull::new(p as *mut u8).ok_or_else(io::Error::last_os_error)?;
        let mut s = Box::new(Slot {
            mem,
            payload_len,
            iov: [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; 2],
        });
        s.iov[0] = libc::iovec {
            iov_base: p,
            iov_len: HEADER_LEN,
        };
        s.iov[1] = libc::iovec {
            // SAFETY: within the mapping.
            iov_base: unsafe { (p as *mut u8).add(PAYLOAD_AT) } as *mut libc::c_void,
            iov_len: payload_len,
        };
        Ok(s)
    }

    pub fn header(&self) -> &[u8] {
        // SAFETY: the mapping holds HEADER_LEN bytes at its start; the daemon owns the slot
        // (it is not in the kernel), so nothing else writes it.
        unsafe { std::slice::from_raw_parts(self.mem.as_ptr(), HEADER_LEN) }
    }

    pub fn header_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `header`, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.mem.as_ptr(), HEADER_LEN) }
    }

    pub fn payload(&self) -> &[u8] {
        // SAFETY: the payload's bytes are within the mapping; owned as in `header`.
        unsafe { std::slice::from_raw_parts(self.mem.as_ptr().add(PAYLOAD_AT), self.payload_len) }
    }

    /// The header and the payload at once, the header to read and the payload to write.
    pub fn split_mut(&mut self) -> (&mut [u8], &mut [u8]) {
        // SAFETY: two disjoint ranges of the mapping; `&mut self` makes them the only
        // references.
        unsafe {
            (
                std::slice::from_raw_parts_mut(self.mem.as_ptr(), HEADER_LEN),
                std::slice::from_raw_parts_mut(self.mem.as_ptr().add(PAYLOAD_AT), self.payload_len),
            )
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // SAFETY: the mapping was made in `new` with this length and is not referenced any
        // more (a slot the kernel holds is leaked, never dropped: see `FuseRing`'s drop).
        unsafe {
            libc::munmap(
                self.mem.as_ptr() as *mut libc::c_void,
                PAYLOAD_AT + self.payload_len,
            )
        };
    }
}

/// A ring that serves one entry of a FUSE queue, on the FUSE connection's descriptor.
pub struct FuseRing {
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    dev: RawFd,
    /// Keeps the connection's descriptor open while the ring uses it.
    _dev_owner: Arc<dyn AsRawFd + Send + Sync>,
    qid: u16,
    /// The slot, while the kernel holds it.
    in_kernel: Option<Box<Slot>>,
}

impl FuseRing {
    /// A ring for one entry of queue `qid`. To be made on the thread that will submit on it:
    /// it is set up for a single issuer.
    pub fn new(dev: Arc<dyn AsRawFd + Send + Sync>, qid: u16) -> io::Result<FuseRing> {
        let entries = 4;
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_cqsize(entries * 2)
            .build(entries)
            .or_else(|_| {
                IoUring::<squeue::Entry128, cqueue::Entry>::builder()
                    .setup_cqsize(entries * 2)
                    .build(entries)
            })?;
        Ok(FuseRing {
            ring,
            dev: dev.as_raw_fd(),
            _dev_owner: dev,
            qid,
            in_kernel: None,
        })
    }

    fn push(&mut self, e: &squeue::Entry128) -> io::Result<()> {
        loop {
            // SAFETY: the buffers an entry names (the slot's iovecs) are owned by `self`
            // until its completion is reaped.
            let pushed = unsafe { self.ring.submission().push(e) };
            match pushed {
                Ok(()) => return Ok(()),
                Err(_) => {
                    self.ring.submit()?;
                }
            }
        }
    }

    fn fuse_cmd(&mut self, slot: Box<Slot>, cmd_op: u32, commit_id: u64) -> io::Result<()> {
        let mut cmd = [0u8; 80];
        // struct fuse_uring_cmd_req { u64 flags; u64 commit_id; u16 qid; u8 padding[6]; }
        cmd[8..16].copy_from_slice(&commit_id.to_ne_bytes());
        cmd[16..18].copy_from_slice(&self.qid.to_ne_bytes());
        let mut e = opcode::UringCmd80::new(types::Fd(self.dev), cmd_op)
            .cmd(cmd)
            .addr(Some(slot.iov.as_ptr() as u64))
            .build()
            .user_data(SLOT);
        set_sqe_len(&mut e, 2);
        self.in_kernel = Some(slot);
        self.push(&e)
    }

    /// Hands the slot to the kernel as a new ring entry (`FUSE_IO_URING_CMD_REGISTER`).
    pub fn register(&mut self, slot: Box<Slot>) -> io::Result<()> {
        self.fuse_cmd(slot, CMD_REGISTER, 0)
    }

    /// Sends the reply in the slot and asks for the next request
    /// (`FUSE_IO_URING_CMD_COMMIT_AND_FETCH`).
    pub fn commit(&mut self, slot: Box<Slot>, commit_id: u64) -> io::Result<()> {
        self.fuse_cmd(slot, CMD_COMMIT_AND_FETCH, commit_id)
    }

    /// Submits what was queued and waits for `want` completions (EINTR is waited through).
    pub fn submit_and_wait(&mut self, want: usize) -> io::Result<()> {
        loop {
            match self.ring.submit_and_wait(want) {
                Ok(_) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// The slot, if the kernel gave it back: a request is in it (`res` 0), or the kernel gave
    /// the entry up (`res` a negated errno: `-ENOTCONN` once the connection is gone).
    pub fn reap(&mut self) -> Option<(i32, Box<Slot>)> {
        let mut got = None;
        for c in self.ring.completion() {
            if c.user_data() == SLOT {
                got = Some(c.result());
            }
        }
        let res = got?;
        self.in_kernel.take().map(|s| (res, s))
    }
}

impl Drop for FuseRing {
    fn drop(&mut self) {
        // The kernel may still hold the entry's addresses (until the connection ends).
        if let Some(s) = self.in_kernel.take() {
            std::mem::forget(s);
        }
    }
}

/// The user data of the slot's commands.
const SLOT: u64 = 1;

/// `FUSE_IO_URING_CMD_REGISTER`.
pub const CMD_REGISTER: u32 = 1;
/// `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`.
pub const CMD_COMMIT_AND_FETCH: u32 = 2;

/// Sets the `len` field of a 128-byte SQE, which the REGISTER command reads (the number of
/// iovecs) and `io-uring`'s `UringCmd80` builder does not set.
fn set_sqe_len(e: &mut squeue::Entry128, len: u32) {
    const _: () = assert!(std::mem::size_of::<squeue::Entry128>() == 128);
    // SAFETY: Entry128 is `#[repr(C)]`, a `struct io_uring_sqe` (whose `len` is the u32 at
    // byte 24) followed by the 64 command bytes; the size is checked above.
    unsafe {
        let p = (e as *mut squeue::Entry128 as *mut u8).add(24) as *mut u32;
        p.write_unaligned(len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_s_buffers_are_disjoint_and_as_large_as_asked() {
        let mut s = Slot::new(1 << 20).unwrap();
        let (h, p) = s.split_mut();
        assert_eq!((h.len(), p.len()), (HEADER_LEN, 1 << 20));
        h[0] = 1;
        p[0] = 2;
        p[(1 << 20) - 1] = 3;
        assert_eq!(s.header()[0], 1);
        assert_eq!(s.payload()[0], 2);
        assert_eq!(s.iov[1].iov_len, 1 << 20);
        assert_eq!(
            s.iov[1].iov_base as usize - s.iov[0].iov_base as usize,
            PAYLOAD_AT
        );
    }

    #[test]
    fn the_sqe_len_lands_where_the_kernel_reads_it() {
        let mut e = opcode::UringCmd80::new(types::Fd(3), CMD_REGISTER)
            .addr(Some(0x1000))
            .build();
        set_sqe_len(&mut e, 2);
        let mut raw = [0u8; 128];
        // Read the entry's bytes back through its Debug-free layout: compare to a Readv,
        // which sets addr and len through the crate's own builder.
        let r: squeue::Entry128 = opcode::Readv::new(types::Fd(3), 0x1000 as *const _, 2)
            .build()
            .into();
        // SAFETY: both are 128 bytes of plain data (checked in set_sqe_len).
        let (a, b): (&[u8; 128], &[u8; 128]) = unsafe {
            (
                &*(&e as *const squeue::Entry128 as *const [u8; 128]),
                &*(&r as *const squeue::Entry128 as *const [u8; 128]),
            )
        };
        raw.copy_from_slice(a);
        assert_eq!(&raw[16..28], &b[16..28], "addr and len as Readv sets them");
        assert_eq!(u32::from_ne_bytes(raw[24..28].try_into().unwrap()), 2);
    }
}
