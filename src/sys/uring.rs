//! A FUSE io_uring queue's ring (`Documentation/filesystems/fuse/fuse-io-uring.rst`): its
//! entries' buffers, the REGISTER and COMMIT_AND_FETCH commands, reads of leg files run beside
//! them, a wake-up from other threads, and the completions.
//!
//! The memory rule lives here. A ring entry ([`Slot`]) is a header buffer and a payload buffer
//! that the kernel writes a request into and reads a reply from. It belongs either to the
//! daemon (between a completion and the next command) or to the kernel (from a command until
//! its completion): [`FuseRing::register`] and [`FuseRing::commit`] take the slot, and the
//! completion gives it back, so no Rust reference to it exists while the kernel may write it.
//! A leg read's buffer ([`RingRead`]) moves the same way, by value into [`FuseRing::read`] and
//! back out with its completion.
//! A slot the kernel still holds when the ring goes is never freed: the kernel keeps the
//! addresses of registered entries for the connection's life.

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
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

    /// The payload as memory lent to a read that fills it in place.
    ///
    /// # Safety
    /// Until the window and every window cut from it are dropped, the slot is neither
    /// dropped nor given to the kernel, and its payload is not used but through them.
    pub unsafe fn lend_payload(&self) -> crate::sys::aligned::Lent {
        // SAFETY: the payload's bytes are within the mapping, which lives as long as the
        // slot; the caller keeps everything else off them.
        unsafe { crate::sys::aligned::Lent::new(self.mem.add(PAYLOAD_AT), self.payload_len) }
    }

    /// Where the payload starts.
    pub fn payload_addr(&self) -> usize {
        self.mem.as_ptr() as usize + PAYLOAD_AT
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

/// What a ring read fills: a descriptor and a buffer, both owned by the value. The ring holds
/// the value (boxed) from [`FuseRing::read`] until the read's completion, so the buffer can
/// neither move nor be freed while the kernel writes it, and the descriptor stays open.
pub trait RingRead: Send + 'static {
    /// The descriptor, the whole buffer to fill, and the file offset its first byte is read
    /// from. Asked again for a read that came back short before the end of the file.
    fn target(&mut self) -> (BorrowedFd<'_>, &mut [u8], u64);

    /// Whether the read may block its submitter: the kernel then runs it on its own worker
    /// threads (`IOSQE_ASYNC`) instead of trying it inline first. A file of a FUSE or network
    /// filesystem is such: the kernel's inline attempt at a read there waits for the answer
    /// (measured: a FUSE leg with 100 ms of latency held the submitting thread 100 ms per
    /// read), where a block-device filesystem returns EAGAIN instead and is punted.
    fn may_block(&self) -> bool {
        false
    }
}

/// A ring read under way: the value, and how much of its buffer is filled.
struct Reading<R> {
    target: Box<R>,
    done: usize,
}

/// What the ring gave back.
pub enum Done<R> {
    /// The kernel gave a slot back: a request is in it (`res` 0), or the kernel gave the entry
    /// up (`res` a negated errno: `-ENOTCONN` once the connection is gone).
    Slot(i32, Box<Slot>),
    /// A read finished: the bytes read (fewer than the buffer only at the end of the file),
    /// or its error.
    Read(Box<R>, io::Result<usize>),
    /// The wake-up descriptor ([`FuseRing::arm_wake`]) was signalled.
    Wake,
}

/// A ring that serves entries of one FUSE queue, on the FUSE connection's descriptor, and
/// runs reads of leg files beside them. The thread that made it is the only one to use it.
pub struct FuseRing<R: RingRead = NoRead> {
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    dev: RawFd,
    /// Keeps the connection's descriptor open while the ring uses it.
    _dev_owner: Arc<dyn AsRawFd + Send + Sync>,
    qid: u16,
    /// The slots the kernel holds, by tag.
    slots: Vec<Option<Box<Slot>>>,
    /// The reads under way, by tag.
    reads: Vec<Option<Reading<R>>>,
    free_reads: Vec<u32>,
    /// The wake-up eventfd and the buffer its read fills, while armed.
    wake: Option<(Arc<EventFd>, Box<u64>)>,
    wake_armed: bool,
    /// Commands queued but not yet submitted.
    queued: usize,
}

/// For a ring that runs no reads.
pub struct NoRead;

impl RingRead for NoRead {
    fn target(&mut self) -> (BorrowedFd<'_>, &mut [u8], u64) {
        unreachable!("a ring without reads submits none")
    }
}

/// User data: the kind in the top two bits, a tag below.
const KIND_SLOT: u64 = 0;
const KIND_READ: u64 = 1 << 62;
const KIND_WAKE: u64 = 2 << 62;
const KIND_MASK: u64 = 3 << 62;

impl<R: RingRead> FuseRing<R> {
    /// A ring for entries of queue `qid`, room for `depth` commands at once (entries, reads
    /// and the wake-up). To be made on the thread that will submit on it: it is set up for a
    /// single issuer, whose completions the kernel handles when that thread waits.
    pub fn new(dev: Arc<dyn AsRawFd + Send + Sync>, qid: u16, depth: u32) -> io::Result<Self> {
        let entries = depth.max(4).next_power_of_two();
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag()
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
            slots: Vec::new(),
            reads: Vec::new(),
            free_reads: Vec::new(),
            wake: None,
            wake_armed: false,
            queued: 0,
        })
    }

    fn push(&mut self, e: &squeue::Entry128) -> io::Result<()> {
        loop {
            // SAFETY: the buffers an entry names (a slot's iovecs, a read's buffer, the wake
            // counter) are owned by `self` until its completion is reaped.
            let pushed = unsafe { self.ring.submission().push(e) };
            match pushed {
                Ok(()) => {
                    self.queued += 1;
                    return Ok(());
                }
                Err(_) => {
                    self.submit()?;
                }
            }
        }
    }

    fn fuse_cmd(&mut self, slot: Box<Slot>, cmd_op: u32, commit_id: u64) -> io::Result<()> {
        let mut cmd = [0u8; 80];
        // struct fuse_uring_cmd_req { u64 flags; u64 commit_id; u16 qid; u8 padding[6]; }
        cmd[8..16].copy_from_slice(&commit_id.to_ne_bytes());
        cmd[16..18].copy_from_slice(&self.qid.to_ne_bytes());
        let tag = match self.slots.iter().position(Option::is_none) {
            Some(t) => t,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        let mut e = opcode::UringCmd80::new(types::Fd(self.dev), cmd_op)
            .cmd(cmd)
            .addr(Some(slot.iov.as_ptr() as u64))
            .build()
            .user_data(KIND_SLOT | tag as u64);
        set_sqe_len(&mut e, 2);
        self.slots[tag] = Some(slot);
        self.push(&e)
    }

    /// Hands the slot to the kernel as a new ring entry (`FUSE_IO_URING_CMD_REGISTER`).
    pub fn register(&mut self, slot: Box<Slot>) -> io::Result<()> {
        self.fuse_cmd(slot, CMD_REGISTER, 0)
    }

    /// Sends the reply in the slot and asks for the next request
    /// (`FUSE_IO_URING_CMD_COMMIT_AND_FETCH`). The entry may have come from another ring:
    /// the kernel takes an entry's commit from any ring of the connection, and the next
    /// request on it then completes here.
    pub fn commit(&mut self, slot: Box<Slot>, commit_id: u64) -> io::Result<()> {
        self.fuse_cmd(slot, CMD_COMMIT_AND_FETCH, commit_id)
    }

    /// The slots the kernel holds on this ring.
    pub fn slots_held(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// Reads into `target`'s buffer from its descriptor (`pread` until the buffer is full or
    /// the file ends); [`Done::Read`] gives it back.
    pub fn read(&mut self, target: Box<R>) -> io::Result<()> {
        let tag = match self.free_reads.pop() {
            Some(t) => t as usize,
            None => {
                self.reads.push(None);
                self.reads.len() - 1
            }
        };
        self.reads[tag] = Some(Reading { target, done: 0 });
        self.submit_read(tag)
    }

    /// Queues the read `tag` for the part of its buffer not yet filled.
    fn submit_read(&mut self, tag: usize) -> io::Result<()> {
        let Some(Some(r)) = self.reads.get_mut(tag) else {
            return Ok(());
        };
        let done = r.done;
        let flags = match r.target.may_block() {
            true => squeue::Flags::ASYNC,
            false => squeue::Flags::empty(),
        };
        let (fd, buf, offset) = r.target.target();
        let from = done.min(buf.len());
        let rest = &mut buf[from..];
        let e = opcode::Read::new(
            types::Fd(fd.as_raw_fd()),
            rest.as_mut_ptr(),
            rest.len().min(u32::MAX as usize) as u32,
        )
        .offset(offset + done as u64)
        .build()
        .flags(flags)
        .user_data(KIND_READ | tag as u64);
        self.push(&e.into())
    }

    /// Makes `efd` wake this ring's thread: a signal of it completes as [`Done::Wake`], after
    /// which it is armed again by the next call.
    pub fn arm_wake(&mut self, efd: &Arc<EventFd>) -> io::Result<()> {
        if self.wake_armed {
            return Ok(());
        }
        let (_, buf) = self
            .wake
            .get_or_insert_with(|| (efd.clone(), Box::new(0u64)));
        let p = &mut **buf as *mut u64 as *mut u8;
        let e = opcode::Read::new(types::Fd(efd.as_raw_fd()), p, 8)
            .build()
            .user_data(KIND_WAKE);
        self.wake_armed = true;
        self.push(&e.into())
    }

    /// Submits what was queued, without waiting.
    pub fn submit(&mut self) -> io::Result<()> {
        loop {
            match self.ring.submit() {
                Ok(_) => {
                    self.queued = 0;
                    return Ok(());
                }
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Submits what was queued and waits for `want` completions (EINTR is waited through).
    pub fn submit_and_wait(&mut self, want: usize) -> io::Result<()> {
        loop {
            match self.ring.submit_and_wait(want) {
                Ok(_) => {
                    self.queued = 0;
                    return Ok(());
                }
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Submits what was queued and waits for a completion, looking for one without sleeping
    /// for up to `poll` first (each look runs the task work the kernel left for this ring,
    /// which the ring's flag says is there).
    pub fn submit_and_poll(&mut self, poll: std::time::Duration) -> io::Result<()> {
        if poll.is_zero() || !self.ring.completion().is_empty() {
            return self.submit_and_wait(1);
        }
        let start = std::time::Instant::now();
        loop {
            self.submit_and_wait(0)?;
            if !self.ring.completion().is_empty() {
                return Ok(());
            }
            if start.elapsed() >= poll {
                return self.submit_and_wait(1);
            }
            std::hint::spin_loop();
        }
    }

    /// What completed, appended to `out`. A read that came back short before the end of its
    /// buffer is asked for the rest (and EINTR or EAGAIN again), so it comes out only whole,
    /// at the end of the file, or failed.
    pub fn reap(&mut self, out: &mut Vec<Done<R>>) -> io::Result<()> {
        let done: Vec<(u64, i32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (data, res) in done {
            let tag = (data & !KIND_MASK) as usize;
            match data & KIND_MASK {
                KIND_SLOT => {
                    if let Some(slot) = self.slots.get_mut(tag).and_then(Option::take) {
                        out.push(Done::Slot(res, slot));
                    }
                }
                KIND_READ => {
                    let Some(Some(r)) = self.reads.get_mut(tag) else {
                        continue;
                    };
                    let again = match res {
                        n if n > 0 => {
                            r.done += n as usize;
                            r.done < r.target.target().1.len()
                        }
                        0 => false,
                        e => -e == libc::EINTR || -e == libc::EAGAIN,
                    };
                    if again {
                        self.submit_read(tag)?;
                        continue;
                    }
                    let r = self.reads[tag].take().expect("a read under way");
                    self.free_reads.push(tag as u32);
                    let result = match res {
                        e if e < 0 => Err(io::Error::from_raw_os_error(-e)),
                        _ => Ok(r.done),
                    };
                    out.push(Done::Read(r.target, result));
                }
                _ => {
                    self.wake_armed = false;
                    out.push(Done::Wake);
                }
            }
        }
        Ok(())
    }

    /// Reads under way on this ring.
    pub fn reads_under_way(&self) -> usize {
        self.reads.len() - self.free_reads.len()
    }
}

impl<R: RingRead> Drop for FuseRing<R> {
    fn drop(&mut self) {
        // The kernel may still hold the entries' addresses (until the connection ends), and
        // reads or the wake-up read may still be under way: their memory is never freed.
        for s in self.slots.drain(..).flatten() {
            std::mem::forget(s);
        }
        for r in self.reads.drain(..).flatten() {
            std::mem::forget(r.target);
        }
        if self.wake_armed {
            if let Some(w) = self.wake.take() {
                std::mem::forget(w);
            }
        }
    }
}

/// An eventfd: one thread signals it, another's ring wakes ([`FuseRing::arm_wake`]).
pub struct EventFd(OwnedFd);

impl EventFd {
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: eventfd takes no pointers.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor just returned to us, owned by nobody else.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Wakes the ring that waits on it (several signals before it reads are one wake-up).
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64.
        let _ = unsafe { libc::write(self.0.as_raw_fd(), &one as *const u64 as *const _, 8) };
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

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
