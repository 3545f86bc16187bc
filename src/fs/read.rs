//! Reading files: where a read goes, checking what comes back, and repairing a copy that
//! failed.
//!
//! Two ways to run the same read. [`MirrorFs::read`] blocks its thread until the legs answer,
//! asking another leg when one fails and repairing the failed copy (the /dev/fuse transport,
//! and any read the other way cannot finish). [`MirrorFs::read_start`] and
//! [`MirrorFs::read_end`] are its halves for a caller that runs the legs' reads itself (the
//! io_uring queues submit them on their ring, so that no thread waits in `pread`): the same
//! routing, counting and checking, and anything but a clean answer goes back to
//! [`MirrorFs::read`].

use super::handle::{open_maybe_direct, LegFd, OpenFile};
use super::inode::Inode;
use super::MirrorFs;
use crate::errno::{Errno, Result};
use crate::integrity::FileSums;
use crate::leg::LegIdx;
use crate::mirror::outcome::DropReason;
use crate::mirror::readahead::Served;
use crate::mirror::routed::Routed;
use crate::mirror::FailedRead;
use crate::mirror::Op;
use crate::policy::stream::StreamId;
use crate::policy::{ReadPlan, ReadRequest};
use crate::sys;
use crate::sys::aligned::{AlignedBuf, Lent};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Data read from a leg.
pub enum ReadData {
    Plain(Vec<u8>),
    Aligned(AlignedBuf, usize),
    /// The first `n` bytes of memory the caller lent ([`MirrorFs::read_start_into`]): the
    /// data is already where the caller wants it.
    Lent(Lent, usize),
}

impl crate::mirror::ReadLen for ReadData {
    fn len(&self) -> usize {
        self.as_slice().len()
    }
}

impl ReadData {
    pub fn as_slice(&self) -> &[u8] {
        match self {
            ReadData::Plain(v) => v,
            ReadData::Aligned(b, n) => &b.as_slice()[..*n],
            ReadData::Lent(w, n) => &w.as_slice()[..*n],
        }
    }

    /// Where the data starts when it was read into lent memory, and how long it is; the
    /// caller then has nothing to copy.
    pub fn in_place(&self) -> Option<(usize, usize)> {
        match self {
            ReadData::Lent(w, n) => Some((w.addr(), *n)),
            _ => None,
        }
    }
}

/// The caller's range `want_offset..+want_size` of `data`, read at `offset` (a checked read
/// is widened to whole blocks).
fn cut(data: ReadData, offset: u64, want_offset: u64, want_size: u32) -> ReadData {
    let have = data.as_slice().len();
    if offset == want_offset && have <= want_size as usize {
        return data;
    }
    let from = ((want_offset - offset) as usize).min(have);
    let to = (from + want_size as usize).min(have);
    ReadData::Plain(data.as_slice()[from..to].to_vec())
}

/// A read's pieces in offset order, joined up to the first short one (the end of the file; a
/// later piece could only hold data if the file grew meanwhile) and cut to the caller's range.
fn joined(mut pieces: Vec<ReadData>, wanted: &[u32], s: &ReadSetup) -> ReadData {
    let (offset, want_offset, want_size) = (s.req.offset, s.want_offset, s.want_size);
    if pieces.len() == 1 {
        let data = pieces.pop().expect("one piece");
        return cut(data, offset, want_offset, want_size);
    }
    if let Some(whole) = joined_in_place(&pieces, wanted) {
        return cut(whole, offset, want_offset, want_size);
    }
    let mut out = Vec::with_capacity(s.req.size as usize);
    for (p, want) in pieces.iter().zip(wanted) {
        out.extend_from_slice(p.as_slice());
        if p.as_slice().len() < *want as usize {
            break;
        }
    }
    cut(ReadData::Plain(out), offset, want_offset, want_size)
}

/// Pieces read into consecutive windows of lent memory are already joined: the whole, up to
/// the first short piece, as one window. `None` when any piece has a buffer of its own.
fn joined_in_place(pieces: &[ReadData], wanted: &[u32]) -> Option<ReadData> {
    let mut whole: Option<Lent> = None;
    for (p, want) in pieces.iter().zip(wanted) {
        let ReadData::Lent(w, n) = p else {
            return None;
        };
        let got = w.cut(0, *n);
        whole = Some(match whole {
            None => got,
            Some(so_far) => so_far.joined_with(&got)?,
        });
        if *n < *want as usize {
            break;
        }
    }
    let whole = whole?;
    let n = whole.len();
    Some(ReadData::Lent(whole, n))
}

/// What every read does before it reaches a leg.
struct ReadSetup {
    fh: u64,
    h: Arc<OpenFile>,
    sums: Option<Arc<FileSums>>,
    /// The caller's range (the request's is widened to whole blocks when checked).
    want_offset: u64,
    want_size: u32,
    stream_id: StreamId,
    req: ReadRequest,
}

/// A read's start: answered already, or set up for its legs.
enum Begun {
    Served(ReadData),
    Setup(ReadSetup),
    /// The read-ahead holds the range but is still fetching it, and the caller may not wait.
    Wait,
}

/// How a read handed to [`MirrorFs::read_start`] goes on.
pub enum ReadStart {
    /// Answered without a leg read: the read-ahead held it, the control file, an error.
    Done(Result<ReadData>),
    /// The legs' reads to run ([`PendingRead::reads`]), then [`MirrorFs::read_end`].
    Legs(Box<PendingRead>),
    /// Only [`MirrorFs::read`] may answer it: leg deadlines (`leg_timeout`), injected faults,
    /// or no leg to route it to (the blocking path says which error).
    Blocking,
}

/// One leg read of a [`PendingRead`]: `len` bytes at `offset` through `fd`, into a buffer
/// of its own (aligned for an `O_DIRECT` descriptor).
pub struct LegRead {
    fd: Arc<LegFd>,
    pub leg: LegIdx,
    pub offset: u64,
    pub len: u32,
    /// The leg's reads may wait for more than a local disk ([`crate::leg::Leg::reads_may_block`]).
    pub may_block: bool,
    buf: ReadData,
}

impl LegRead {
    /// The descriptor to read from, the buffer to read into (`len` bytes, which stays where
    /// it is while the read is moved), and the file offset to read at.
    pub fn target(&mut self) -> (BorrowedFd<'_>, &mut [u8], u64) {
        let buf = match &mut self.buf {
            ReadData::Plain(v) => v.as_mut_slice(),
            ReadData::Aligned(b, _) => b.as_mut_slice(),
            ReadData::Lent(w, _) => w.as_mut_slice(),
        };
        (self.fd.as_fd(), buf, self.offset)
    }

    /// The data, once `n` bytes were read.
    fn into_data(self, n: usize) -> ReadData {
        match self.buf {
            ReadData::Plain(mut v) => {
                v.truncate(n);
                ReadData::Plain(v)
            }
            ReadData::Aligned(b, _) => {
                let n = n.min(b.as_slice().len());
                ReadData::Aligned(b, n)
            }
            ReadData::Lent(w, _) => {
                let n = n.min(w.len());
                ReadData::Lent(w, n)
            }
        }
    }
}

/// A read routed to its legs, whose reads the caller runs.
pub struct PendingRead {
    setup: ReadSetup,
    routed: Routed,
    /// The legs' reads, in offset order.
    pub reads: Vec<LegRead>,
}

/// How long each piece of `plan` asks for, `size` in all.
fn plan_lengths(plan: &ReadPlan, size: u32) -> Vec<u32> {
    match plan {
        ReadPlan::One(_) | ReadPlan::Spread(_) => vec![size],
        ReadPlan::Split(p) => p.iter().map(|x| x.len).collect(),
    }
}

impl MirrorFs {
    /// The start every read shares: the handle, its checksums, the range widened to whole
    /// blocks when checked, what the read-ahead holds (waiting for what it is fetching, or
    /// [`Begun::Wait`] unless `may_wait`), and the stream the read belongs to.
    fn read_setup(
        &self,
        fh: u64,
        offset: u64,
        size: u32,
        pid: u32,
        may_wait: bool,
    ) -> Result<Begun> {
        if fh == super::control::CONTROL_FH {
            return Ok(Begun::Served(ReadData::Plain(Vec::new())));
        }
        let h = self.handles.file(fh)?;
        let sums = self.sums(&h.inode);
        // A checked read covers whole blocks: the caller's range is cut out afterwards.
        let (want_offset, want_size) = (offset, size);
        let (offset, size) = match &sums {
            Some(_) => {
                let start = crate::integrity::sum::align_down(offset);
                let end = crate::integrity::sum::align_up(offset + size as u64);
                (start, (end - start).min(u32::MAX as u64 & !4095) as u32)
            }
            None => (offset, size),
        };
        // The extent read-ahead may hold the range already (`mirror/readahead.rs`).
        let plan = h.inode.readahead.lock().clone();
        let served = match plan {
            Some(s) if may_wait => self.mirror.readahead().serve(&s, offset, size),
            Some(s) => match self.mirror.readahead().try_serve(&s, offset, size) {
                Served::Data(d) => Some(d),
                Served::Pending => return Ok(Begun::Wait),
                Served::No => None,
            },
            None => None,
        };
        let now_us = self.mirror.now_us();
        let (stream_id, stream) = h.streams.lock().observe(offset, size, now_us);
        let req = ReadRequest {
            pid,
            file: h.inode.ino,
            offset,
            size,
            now_us,
            stream,
        };
        if let Some(data) = served {
            let mut streams = h.streams.lock();
            let leg = req.stream.leg.unwrap_or(0);
            streams.record(stream_id, &ReadPlan::Spread(leg), size, now_us);
            streams.done(stream_id);
            drop(streams);
            self.read_ahead_step(fh, &h, &req, &sums);
            return Ok(Begun::Served(cut(
                ReadData::Plain(data),
                offset,
                want_offset,
                want_size,
            )));
        }
        Ok(Begun::Setup(ReadSetup {
            fh,
            h,
            sums,
            want_offset,
            want_size,
            stream_id,
            req,
        }))
    }

    /// What a leg's read gave, counted as the leg's and checked against the file's checksums:
    /// EBADMSG when a block does not match.
    fn leg_read_checked(
        &self,
        sums: &Option<Arc<FileSums>>,
        leg: LegIdx,
        offset: u64,
        len: u32,
        data: ReadData,
    ) -> Result<ReadData> {
        let c = &self.mirror.leg(leg).counters;
        c.read_ops.fetch_add(1, Ordering::Relaxed);
        c.read_bytes
            .fetch_add(data.as_slice().len() as u64, Ordering::Relaxed);
        if let Some(f) = sums {
            let got = data.as_slice();
            let v = f.verify(
                self.mirror.integrity(),
                offset,
                got,
                got.len() < len as usize,
            );
            if matches!(v, Ok(crate::integrity::Verdict::Bad(_))) {
                return Err(Errno::EBADMSG);
            }
        }
        Ok(data)
    }

    /// Reads where the read policy says (one leg, or pieces on several in parallel). An I/O
    /// error there is answered from another in-sync leg and the range repaired on the failing
    /// one (see [`Self::repair_range`]).
    pub fn read(&self, fh: u64, offset: u64, size: u32, pid: u32) -> Result<ReadData> {
        let s = match self.read_setup(fh, offset, size, pid, true)? {
            Begun::Served(d) => return Ok(d),
            Begun::Setup(s) => s,
            // Only without waiting.
            Begun::Wait => return Err(Errno::INTERNAL),
        };
        let (h, sums, req) = (&s.h, &s.sums, &s.req);
        let mut wanted: Vec<u32> = Vec::new();
        let pieces = self.mirror.read_routed(
            &h.legs(),
            req,
            "read",
            |plan| {
                wanted = plan_lengths(plan, req.size);
                h.streams
                    .lock()
                    .record(s.stream_id, plan, req.size, req.now_us)
            },
            |leg, offset, len| {
                let fd = h.fd(leg)?;
                let direct = h.is_direct(leg);
                // Within `leg_timeout`: the part owns its descriptor and buffer.
                let data = self.mirror.timed(
                    leg,
                    "read",
                    Box::new(move || read_leg_range(&fd, direct, offset, len)),
                )?;
                self.leg_read_checked(sums, leg, offset, len, data)
            },
        );
        h.streams.lock().done(s.stream_id);
        if pieces.is_ok() {
            self.read_ahead_step(fh, h, req, sums);
        }
        let (offset, size) = (req.offset, req.size);
        let outcome = match (pieces, sums) {
            (Err(Errno::EBADMSG), Some(f)) => {
                let data = self.read_when_all_bad(&h.inode, f, offset, size as usize)?;
                let data = ReadData::Plain(data);
                return Ok(cut(data, offset, s.want_offset, s.want_size));
            }
            (Err(Errno::EBADMSG), None) => return Err(Errno::EIO),
            (r, _) => r?,
        };
        for f in &outcome.failed {
            match (sums, f.errno) {
                (Some(sums), Errno::EBADMSG) => {
                    self.repair_checksum(&h.inode, sums, f.leg, f.offset, f.len as usize)
                }
                _ => self.repair_range(&h.inode, f),
            }
        }
        Ok(joined(outcome.data, &wanted, &s))
    }

    /// The first half of [`read`](Self::read), for a caller that runs the legs' reads itself:
    /// routed and counted as that would, with a buffer for each leg read.
    pub fn read_start(&self, fh: u64, offset: u64, size: u32, pid: u32) -> ReadStart {
        self.read_start_into(fh, offset, size, pid, None)
    }

    /// [`read_start`](Self::read_start), with memory the caller lends for the answer: a leg
    /// read whose bytes are all the caller's (not widened to whole blocks for the checksums)
    /// is read straight into its place there, where `O_DIRECT` allows, so that nothing is
    /// copied on the way ([`ReadData::in_place`]). Any other piece gets a buffer of its own.
    pub fn read_start_into(
        &self,
        fh: u64,
        offset: u64,
        size: u32,
        pid: u32,
        into: Option<Lent>,
    ) -> ReadStart {
        if self.mirror.leg_timeout().is_some() || self.mirror.faults_injected() {
            return ReadStart::Blocking;
        }
        let s = match self.read_setup(fh, offset, size, pid, false) {
            Err(e) => return ReadStart::Done(Err(e)),
            Ok(Begun::Served(d)) => return ReadStart::Done(Ok(d)),
            Ok(Begun::Setup(s)) => s,
            // The read-ahead is still fetching it: a thread that may wait serves it.
            Ok(Begun::Wait) => return ReadStart::Blocking,
        };
        let Some(routed) = self.mirror.route(&s.h.legs(), &s.req) else {
            s.h.streams.lock().done(s.stream_id);
            return ReadStart::Blocking;
        };
        s.h.streams
            .lock()
            .record(s.stream_id, routed.plan(), s.req.size, s.req.now_us);
        // Lent memory takes only the caller's own bytes, all of them.
        let into = into.filter(|w| {
            s.req.offset == s.want_offset
                && s.req.size == s.want_size
                && w.len() >= s.req.size as usize
        });
        let reads: Result<Vec<LegRead>> = routed
            .pieces()
            .iter()
            .map(|p| {
                let fd = s.h.fd(p.leg)?;
                let lent = into.as_ref().and_then(|w| {
                    let at = p.offset.checked_sub(s.req.offset)? as usize;
                    let w = w.cut(at, p.len as usize);
                    let fits = w.len() == p.len as usize
                        && (!fd.direct || sys::aligned::is_aligned(w.as_slice(), p.offset));
                    fits.then_some(w)
                });
                let buf = match (lent, fd.direct) {
                    (Some(w), _) => ReadData::Lent(w, 0),
                    (None, true) => ReadData::Aligned(AlignedBuf::new(p.len as usize), 0),
                    (None, false) => ReadData::Plain(vec![0u8; p.len as usize]),
                };
                Ok(LegRead {
                    fd,
                    leg: p.leg,
                    offset: p.offset,
                    len: p.len,
                    may_block: self.mirror.leg(p.leg).reads_may_block(),
                    buf,
                })
            })
            .collect();
        match reads {
            Ok(reads) => {
                self.ring_reads.fetch_add(1, Ordering::Relaxed);
                ReadStart::Legs(Box::new(PendingRead {
                    setup: s,
                    routed,
                    reads,
                }))
            }
            // No descriptor to read by: the blocking path meets the same and answers it.
            Err(_) => {
                s.h.streams.lock().done(s.stream_id);
                ReadStart::Blocking
            }
        }
    }

    /// The second half: `got[i]` is what `p.reads[i]` gave (the bytes read, fewer only at
    /// the end of the file; or the error). `None` when only [`read`](Self::read) may answer:
    /// a leg failed, or a block did not match its checksum. That read asks the leg again and
    /// handles it as always (counts the error, asks another leg, repairs), so a failure costs
    /// one more read and is never answered from here.
    pub fn read_end(&self, p: Box<PendingRead>, got: &[Result<usize>]) -> Option<Result<ReadData>> {
        let PendingRead {
            setup: s,
            routed,
            reads,
        } = *p;
        s.h.streams.lock().done(s.stream_id);
        let redone = || {
            self.ring_reads_redone.fetch_add(1, Ordering::Relaxed);
            None
        };
        if got.len() != reads.len() {
            return redone();
        }
        let mut pieces = Vec::with_capacity(reads.len());
        for (i, (r, g)) in reads.into_iter().zip(got).enumerate() {
            let Ok(n) = g else { return redone() };
            let n = (*n).min(r.len as usize);
            let (leg, offset, len) = (r.leg, r.offset, r.len);
            let Ok(data) = self.leg_read_checked(&s.sums, leg, offset, len, r.into_data(n)) else {
                return redone();
            };
            routed.piece_done(i, n as u64);
            pieces.push(data);
        }
        let wanted = plan_lengths(routed.plan(), s.req.size);
        drop(routed);
        self.read_ahead_step(s.fh, &s.h, &s.req, &s.sums);
        Some(Ok(joined(pieces, &wanted, &s)))
    }

    /// The extent read-ahead's step after a read of `req` through `h`: its fetches read the
    /// leg's copy through a descriptor of their own and verify it against the checksums, as a
    /// read does.
    fn read_ahead_step(
        &self,
        fh: u64,
        h: &Arc<OpenFile>,
        req: &ReadRequest,
        sums: &Option<Arc<crate::integrity::FileSums>>,
    ) {
        self.mirror
            .read_ahead_step(&h.inode.readahead, fh, &h.legs(), req, || {
                // Weak: the plan lives in the inode it reads.
                let inode = Arc::downgrade(&h.inode);
                let ino = h.inode.ino;
                let mirror = self.mirror.clone();
                let sums = sums.clone();
                // Per leg, for the plan's life (each open of a remote or modelled leg is a
                // round trip of its own): a descriptor opened with O_DIRECT where the leg
                // allows it, and a buffered one. Aligned chunks (all but a file's unaligned
                // tail) go direct: the leg's page cache would only hold a second copy of
                // what the reader is given, and a buffered read of a FUSE leg (a remote or
                // modelled one) is cut into the kernel's read-ahead requests.
                type Fds = Vec<[Option<Arc<OwnedFd>>; 2]>;
                let fds: parking_lot::Mutex<Fds> =
                    parking_lot::Mutex::new(vec![[None, None]; mirror.legs().len()]);
                Arc::new(move |leg, offset, buf: &mut [u8]| {
                    let len = buf.len() as u32;
                    mirror.read_ahead_fetch(leg, ino, offset, len, || {
                        let direct = sys::aligned::is_aligned(buf, offset);
                        let cached = fds.lock().get(leg).and_then(|f| f[direct as usize].clone());
                        let fd = match cached {
                            Some(fd) => fd,
                            None => {
                                let inode = inode.upgrade().ok_or(Errno::INTERNAL)?;
                                let on_leg = inode.fd(leg)?;
                                let flags =
                                    libc::O_RDONLY | if direct { libc::O_DIRECT } else { 0 };
                                let (fd, _) = open_maybe_direct(flags, |f| {
                                    sys::fd::reopen(on_leg.as_fd(), f)
                                })?;
                                let fd = Arc::new(fd);
                                if let Some(slot) = fds.lock().get_mut(leg) {
                                    slot[direct as usize] = Some(fd.clone());
                                }
                                fd
                            }
                        };
                        let n = sys::fd::pread_full(fd.as_fd(), buf, offset)?;
                        if let Some(f) = &sums {
                            let v = f.verify(mirror.integrity(), offset, &buf[..n], n < buf.len());
                            if matches!(v, Ok(crate::integrity::Verdict::Bad(_))) {
                                return Err(Errno::EBADMSG);
                            }
                        }
                        Ok(n)
                    })
                })
            });
    }

    /// Read-repair: copies the range that failed on `f.leg` from another in-sync leg (one that
    /// did not fail), as md and btrfs do. Runs under the file's data lock, so no write races
    /// with the copy. If the copy cannot be written, the leg is dropped.
    fn repair_range(&self, inode: &Arc<Inode>, f: &FailedRead) {
        let _barrier = self.mirror.barrier();
        let _data = inode.data_lock.write();
        let bad = f.leg;
        if !self.mirror.leg(bad).is_in_sync() {
            return;
        }
        let good = self
            .mirror
            .in_sync_legs()
            .into_iter()
            .filter(|&l| l != bad)
            .find_map(|l| {
                let fd = sys::fd::reopen(inode.fd(l).ok()?.as_fd(), libc::O_RDONLY).ok()?;
                let mut buf = vec![0u8; f.len as usize];
                let n = sys::fd::pread_full(fd.as_fd(), &mut buf, f.offset).ok()?;
                buf.truncate(n);
                Some((l, buf))
            });
        let Some((good_leg, good)) = good else {
            log::error!(
                "read-repair of inode {} at {}: no other leg could read the range",
                inode.ino,
                f.offset
            );
            return;
        };
        let r = self
            .mirror
            .check_fault_file(bad, "repair", Some(inode.ino))
            .and_then(|()| sys::fd::reopen(inode.fd(bad)?.as_fd(), libc::O_WRONLY))
            .and_then(|fd| sys::fd::pwrite_full(fd.as_fd(), &good, f.offset))
            // A repair is no change of the file: the copy keeps the good copy's mtime.
            .and_then(|_| self.align_mtime(&[good_leg, bad], Op::Repair, |l| inode.fd(l)));
        if r.is_ok() {
            self.recovery.stamp(&[inode.ino]);
        }
        let leg = self.mirror.leg(bad);
        match r {
            Ok(_) => {
                leg.counters.read_repairs.fetch_add(1, Ordering::Relaxed);
                log::warn!(
                    "leg {} ('{}'): repaired {} bytes at {} of inode {} after {:?}",
                    bad,
                    leg.path().display(),
                    good.len(),
                    f.offset,
                    inode.ino,
                    f.errno
                );
            }
            Err(e) => {
                leg.counters.write_errors.fetch_add(1, Ordering::Relaxed);
                self.mirror
                    .mark_failed(bad, "read-repair", DropReason::LegFault(e));
            }
        }
    }
}

/// Reads `len` bytes at `offset` through one leg's descriptor (into an aligned buffer for an
/// `O_DIRECT` one).
fn read_leg_range(
    fd: &super::handle::LegFd,
    direct: bool,
    offset: u64,
    len: u32,
) -> Result<ReadData> {
    if direct {
        let mut buf = AlignedBuf::new(len as usize);
        let n = sys::fd::pread_full(fd.as_fd(), buf.as_mut_slice(), offset)?;
        return Ok(ReadData::Aligned(buf, n));
    }
    let mut buf = vec![0u8; len as usize];
    let n = sys::fd::pread_full(fd.as_fd(), &mut buf, offset)?;
    buf.truncate(n);
    Ok(ReadData::Plain(buf))
}
