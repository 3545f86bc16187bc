//! Encoding a reply: what an operation answers, as the bytes after `fuse_out_header`. Both
//! transports send an [`Answer`]: /dev/fuse writes the header and the body in one `writev`,
//! io_uring puts the header in the ring entry's `in_out` area and the body in its payload.

use super::abi;
use crate::fs::ReadData;
use fuser::{FileAttr, FileType};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use zerocopy::{Immutable, IntoBytes};

/// What one request gets back.
pub enum Answer {
    /// Nothing at all (FORGET, BATCH_FORGET).
    Nothing,
    /// An errno (positive), no body.
    Error(i32),
    /// A body of bytes: a struct, a listing, a value.
    Bytes(Vec<u8>),
    /// The data of a READ.
    Data(ReadData),
}

impl Answer {
    /// Success with no body.
    pub fn ok() -> Answer {
        Answer::Bytes(Vec::new())
    }

    /// Success with a struct as the body.
    pub fn of<T: IntoBytes + Immutable>(t: &T) -> Answer {
        Answer::Bytes(t.as_bytes().to_vec())
    }

    /// The `error` field of the out header: 0 or a negated errno.
    pub fn error(&self) -> i32 {
        match self {
            Answer::Error(e) => -e,
            _ => 0,
        }
    }

    pub fn body(&self) -> &[u8] {
        match self {
            Answer::Nothing | Answer::Error(_) => &[],
            Answer::Bytes(b) => b,
            Answer::Data(d) => d.as_slice(),
        }
    }

    /// The out header for the request `unique`.
    pub fn header(&self, unique: u64) -> abi::OutHeader {
        abi::OutHeader {
            len: (std::mem::size_of::<abi::OutHeader>() + self.body().len()) as u32,
            error: self.error(),
            unique,
        }
    }
}

/// A timeout as the kernel takes it: seconds and nanoseconds.
pub fn ttl(d: Duration) -> (u64, u32) {
    (d.as_secs(), d.subsec_nanos())
}

/// A time as seconds (negative before 1970) and nanoseconds.
fn time(t: SystemTime) -> (u64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (d.as_secs(), d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            let (mut s, mut ns) = (-(d.as_secs() as i64), -(d.subsec_nanos() as i64));
            if ns < 0 {
                s -= 1;
                ns += 1_000_000_000;
            }
            (s as u64, ns as u32)
        }
    }
}

/// The `S_IF*` bits of a file type.
pub fn mode_bits(kind: FileType) -> u32 {
    match kind {
        FileType::NamedPipe => libc::S_IFIFO,
        FileType::CharDevice => libc::S_IFCHR,
        FileType::BlockDevice => libc::S_IFBLK,
        FileType::Directory => libc::S_IFDIR,
        FileType::RegularFile => libc::S_IFREG,
        FileType::Symlink => libc::S_IFLNK,
        FileType::Socket => libc::S_IFSOCK,
    }
}

/// The kernel's `fuse_attr` of the core's attributes.
pub fn attr(a: &FileAttr) -> abi::Attr {
    let (atime, atimensec) = time(a.atime);
    let (mtime, mtimensec) = time(a.mtime);
    let (ctime, ctimensec) = time(a.ctime);
    abi::Attr {
        ino: a.ino.0,
        size: a.size,
        blocks: a.blocks,
        atime,
        mtime,
        ctime,
        atimensec,
        mtimensec,
        ctimensec,
        mode: mode_bits(a.kind) | a.perm as u32,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: a.blksize,
        flags: a.flags,
    }
}

/// A `fuse_entry_out`: node id `a.ino`, names and attributes valid for `entry` and `attr`.
pub fn entry(a: &FileAttr, entry: Duration, attr_ttl: Duration) -> abi::EntryOut {
    let (entry_valid, entry_valid_nsec) = ttl(entry);
    let (attr_valid, attr_valid_nsec) = ttl(attr_ttl);
    abi::EntryOut {
        nodeid: a.ino.0,
        generation: 0,
        entry_valid,
        attr_valid,
        entry_valid_nsec,
        attr_valid_nsec,
        attr: attr(a),
    }
}

/// A `fuse_attr_out`.
pub fn attr_out(a: &FileAttr, valid: Duration) -> abi::AttrOut {
    let (attr_valid, attr_valid_nsec) = ttl(valid);
    abi::AttrOut {
        attr_valid,
        attr_valid_nsec,
        dummy: 0,
        attr: attr(a),
    }
}

/// The `DT_*` type of a dirent.
fn dtype(kind: FileType) -> u32 {
    mode_bits(kind) >> 12
}

/// A READDIR or READDIRPLUS answer being filled, up to the size the kernel asked for.
pub struct Listing {
    buf: Vec<u8>,
    max: usize,
}

impl Listing {
    pub fn new(max: u32) -> Listing {
        Listing {
            buf: Vec::with_capacity((max as usize).min(64 * 1024)),
            max: max as usize,
        }
    }

    fn push(&mut self, plus: Option<&abi::EntryOut>, d: abi::Dirent, name: &[u8]) -> bool {
        let fixed = plus.map_or(0, |e| e.as_bytes().len()) + d.as_bytes().len();
        let padded = (fixed + name.len() + 7) & !7;
        if self.buf.len() + padded > self.max {
            return true;
        }
        let start = self.buf.len();
        if let Some(e) = plus {
            self.buf.extend_from_slice(e.as_bytes());
        }
        self.buf.extend_from_slice(d.as_bytes());
        self.buf.extend_from_slice(name);
        self.buf.resize(start + padded, 0);
        false
    }

    /// Adds a READDIR entry; true when it did not fit (the listing is full).
    pub fn add(&mut self, ino: u64, next: u64, kind: FileType, name: &OsStr) -> bool {
        let d = abi::Dirent {
            ino,
            off: next,
            namelen: name.len() as u32,
            typ: dtype(kind),
        };
        self.push(None, d, name.as_bytes())
    }

    /// Adds a READDIRPLUS entry; true when it did not fit.
    pub fn add_plus(&mut self, e: &abi::EntryOut, next: u64, kind: FileType, name: &OsStr) -> bool {
        let d = abi::Dirent {
            ino: e.attr.ino,
            off: next,
            namelen: name.len() as u32,
            typ: dtype(kind),
        };
        self.push(Some(e), d, name.as_bytes())
    }

    pub fn into_answer(self) -> Answer {
        Answer::Bytes(self.buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fuser::INodeNo;

    fn some_attr() -> FileAttr {
        FileAttr {
            ino: INodeNo(12),
            size: 5,
            blocks: 8,
            atime: UNIX_EPOCH + Duration::new(100, 5),
            mtime: UNIX_EPOCH - Duration::new(1, 500_000_000),
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind: FileType::Directory,
            perm: 0o1755,
            nlink: 2,
            uid: 1,
            gid: 2,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    #[test]
    fn attributes_carry_type_bits_and_times_before_1970() {
        let a = attr(&some_attr());
        assert_eq!(a.mode, libc::S_IFDIR | 0o1755);
        assert_eq!((a.atime, a.atimensec), (100, 5));
        // 1.5 s before the epoch: -2 s + 0.5 s.
        assert_eq!((a.mtime as i64, a.mtimensec), (-2, 500_000_000));
        let e = entry(&some_attr(), Duration::from_millis(1500), Duration::ZERO);
        assert_eq!(
            (e.nodeid, e.entry_valid, e.entry_valid_nsec),
            (12, 1, 500_000_000)
        );
        assert_eq!((e.attr_valid, e.attr_valid_nsec), (0, 0));
    }

    #[test]
    fn a_listing_pads_each_entry_to_eight_bytes_and_stops_when_full() {
        let mut l = Listing::new(64);
        assert!(!l.add(5, 1, FileType::RegularFile, OsStr::new("a")));
        // 24 + 1 -> 32 bytes; a second of 24 + 9 = 33 -> 40 would make 72 > 64.
        assert!(l.add(6, 2, FileType::Symlink, OsStr::new("ninechars")));
        let b = l.into_answer();
        let body = b.body();
        assert_eq!(body.len(), 32);
        assert_eq!(u64::from_ne_bytes(body[0..8].try_into().unwrap()), 5);
        assert_eq!(
            u32::from_ne_bytes(body[20..24].try_into().unwrap()),
            libc::DT_REG as u32
        );
        assert_eq!(body[24], b'a');
        assert!(body[25..32].iter().all(|&b| b == 0));
        let mut p = Listing::new(4096);
        let e = entry(&some_attr(), Duration::ZERO, Duration::ZERO);
        assert!(!p.add_plus(&e, 3, FileType::Directory, OsStr::new("dir")));
        let body = p.into_answer();
        assert_eq!(body.body().len(), (128 + 24 + 3 + 7) & !7);
    }

    #[test]
    fn an_error_has_a_negated_errno_and_no_body() {
        let a = Answer::Error(libc::ENOENT);
        let h = a.header(9);
        assert_eq!((h.len, h.error, h.unique), (16, -libc::ENOENT, 9));
        let ok = Answer::of(&abi::WriteOut {
            size: 3,
            padding: 0,
        });
        assert_eq!(ok.header(1).len, 24);
    }
}
