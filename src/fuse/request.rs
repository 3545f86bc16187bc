//! Decoding a request: every opcode is read in this one place, whichever transport brought it.
//!
//! A request is the kernel's `fuse_in_header`, the opcode's own fixed header (`fuse_read_in`,
//! `fuse_mknod_in`...; none for LOOKUP, UNLINK...) and a payload (names, written data). Over
//! /dev/fuse the three come as one message; over io_uring the header sits in the ring entry's
//! `in_out` area, the opcode's header in `op_in`, and the payload in the entry's payload
//! buffer. [`decode`] takes the opcode's header and the payload apart, so both transports hand
//! it the same pieces ([`split_message`] cuts a /dev/fuse message).

use super::abi::{self, op};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use zerocopy::FromBytes;

/// One decoded operation. Borrowed from the transport's buffer.
#[derive(Debug)]
pub enum Op<'a> {
    Lookup {
        name: &'a OsStr,
    },
    Forget {
        nlookup: u64,
    },
    BatchForget {
        /// `count` × `fuse_forget_one`, read with [`forgets`].
        nodes: &'a [u8],
    },
    Getattr {
        fh: Option<u64>,
    },
    Setattr(abi::SetattrIn),
    Readlink,
    Symlink {
        name: &'a OsStr,
        target: &'a OsStr,
    },
    Mknod {
        name: &'a OsStr,
        mode: u32,
        rdev: u32,
    },
    Mkdir {
        name: &'a OsStr,
        mode: u32,
    },
    Unlink {
        name: &'a OsStr,
    },
    Rmdir {
        name: &'a OsStr,
    },
    Rename {
        name: &'a OsStr,
        newdir: u64,
        newname: &'a OsStr,
        flags: u32,
    },
    Link {
        oldnodeid: u64,
        name: &'a OsStr,
    },
    Open {
        flags: i32,
    },
    Read {
        fh: u64,
        offset: u64,
        size: u32,
    },
    Write {
        fh: u64,
        offset: u64,
        data: &'a [u8],
        write_flags: u32,
    },
    Statfs,
    Release {
        fh: u64,
    },
    Fsync {
        fh: u64,
        datasync: bool,
    },
    Setxattr {
        name: &'a OsStr,
        value: &'a [u8],
        flags: i32,
    },
    Getxattr {
        name: &'a OsStr,
        size: u32,
    },
    Listxattr {
        size: u32,
    },
    Removexattr {
        name: &'a OsStr,
    },
    Flush {
        fh: u64,
    },
    Opendir,
    Readdir {
        fh: u64,
        offset: u64,
        size: u32,
        plus: bool,
    },
    Releasedir {
        fh: u64,
    },
    Fsyncdir {
        datasync: bool,
    },
    Access {
        mask: i32,
    },
    Create {
        name: &'a OsStr,
        mode: u32,
        flags: i32,
    },
    Interrupt,
    Destroy,
    Fallocate {
        fh: u64,
        offset: u64,
        length: u64,
        mode: i32,
    },
    Lseek {
        fh: u64,
        offset: i64,
        whence: i32,
    },
    CopyFileRange {
        fh_in: u64,
        off_in: u64,
        fh_out: u64,
        off_out: u64,
        len: u64,
    },
    /// INIT after the handshake, and the opcodes mirrorfs does not implement (locks, ioctl,
    /// poll, bmap...): answered ENOSYS.
    Unsupported(u32),
}

/// Why a request could not be read: it is answered EINVAL (EIO for a short header).
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed;

/// The size of the fixed header that the opcode puts before its payload.
pub fn op_header_size(opcode: u32) -> usize {
    use std::mem::size_of;
    match opcode {
        op::FORGET => size_of::<abi::ForgetIn>(),
        op::BATCH_FORGET => size_of::<abi::BatchForgetIn>(),
        op::GETATTR => size_of::<abi::GetattrIn>(),
        op::SETATTR => size_of::<abi::SetattrIn>(),
        op::MKNOD => size_of::<abi::MknodIn>(),
        op::MKDIR => size_of::<abi::MkdirIn>(),
        op::RENAME => size_of::<abi::RenameIn>(),
        op::RENAME2 => size_of::<abi::Rename2In>(),
        op::LINK => size_of::<abi::LinkIn>(),
        op::OPEN | op::OPENDIR => size_of::<abi::OpenIn>(),
        op::READ | op::READDIR | op::READDIRPLUS => size_of::<abi::ReadIn>(),
        op::WRITE => size_of::<abi::WriteIn>(),
        op::RELEASE | op::RELEASEDIR => size_of::<abi::ReleaseIn>(),
        op::FSYNC | op::FSYNCDIR => size_of::<abi::FsyncIn>(),
        op::SETXATTR => size_of::<abi::SetxattrIn>(),
        op::GETXATTR | op::LISTXATTR => size_of::<abi::GetxattrIn>(),
        op::FLUSH => size_of::<abi::FlushIn>(),
        op::ACCESS => size_of::<abi::AccessIn>(),
        op::CREATE => size_of::<abi::CreateIn>(),
        op::INTERRUPT => size_of::<abi::InterruptIn>(),
        op::FALLOCATE => size_of::<abi::FallocateIn>(),
        op::LSEEK => size_of::<abi::LseekIn>(),
        op::COPY_FILE_RANGE => size_of::<abi::CopyFileRangeIn>(),
        // LOOKUP, UNLINK, RMDIR, SYMLINK, REMOVEXATTR: a name only; READLINK, STATFS,
        // DESTROY: nothing.
        _ => 0,
    }
}

/// A /dev/fuse message cut into its header, the opcode's header and the payload. The header
/// says the message's length; bytes past it (there are none from a well-behaved kernel) and
/// the extensions at its end (`total_extlen`, not negotiated) are left out.
pub fn split_message(msg: &[u8]) -> Result<(abi::InHeader, &[u8], &[u8]), Malformed> {
    let (h, rest) = abi::InHeader::read_from_prefix(msg).map_err(|_| Malformed)?;
    let len = (h.len as usize).min(msg.len());
    let ext = h.total_extlen as usize * 8;
    let body_len = len
        .checked_sub(std::mem::size_of::<abi::InHeader>() + ext)
        .ok_or(Malformed)?;
    let body = &rest[..body_len.min(rest.len())];
    let hs = op_header_size(h.opcode).min(body.len());
    let (head, payload) = body.split_at(hs);
    Ok((h, head, payload))
}

/// The struct at the start of the opcode's header (copied: the buffer need not be aligned).
fn head<T: FromBytes>(bytes: &[u8]) -> Result<T, Malformed> {
    T::read_from_prefix(bytes)
        .map(|(t, _)| t)
        .map_err(|_| Malformed)
}

/// The nodes of a BATCH_FORGET: `(node id, lookups to forget)`.
pub fn forgets(nodes: &[u8]) -> impl Iterator<Item = (u64, u64)> + '_ {
    nodes
        .chunks_exact(std::mem::size_of::<abi::ForgetOne>())
        .filter_map(|c| abi::ForgetOne::read_from_bytes(c).ok())
        .map(|f| (f.nodeid, f.nlookup))
}

/// The NUL-terminated name at the start of `bytes`, and what follows it.
fn name(bytes: &[u8]) -> Result<(&OsStr, &[u8]), Malformed> {
    let end = bytes.iter().position(|&b| b == 0).ok_or(Malformed)?;
    Ok((OsStr::from_bytes(&bytes[..end]), &bytes[end + 1..]))
}

fn only_name(bytes: &[u8]) -> Result<&OsStr, Malformed> {
    name(bytes).map(|(n, _)| n)
}

/// Decodes `opcode` from the opcode's header `h` and its `payload`.
pub fn decode<'a>(opcode: u32, h: &'a [u8], payload: &'a [u8]) -> Result<Op<'a>, Malformed> {
    Ok(match opcode {
        op::LOOKUP => Op::Lookup {
            name: only_name(payload)?,
        },
        op::FORGET => Op::Forget {
            nlookup: head::<abi::ForgetIn>(h)?.nlookup,
        },
        op::BATCH_FORGET => {
            let count = head::<abi::BatchForgetIn>(h)?.count as usize;
            let n = count.min(payload.len() / std::mem::size_of::<abi::ForgetOne>());
            Op::BatchForget {
                nodes: &payload[..n * std::mem::size_of::<abi::ForgetOne>()],
            }
        }
        op::GETATTR => {
            let g = head::<abi::GetattrIn>(h)?;
            Op::Getattr {
                fh: (g.getattr_flags & abi::GETATTR_FH != 0).then_some(g.fh),
            }
        }
        op::SETATTR => Op::Setattr(head::<abi::SetattrIn>(h)?),
        op::READLINK => Op::Readlink,
        op::SYMLINK => {
            let (name, rest) = name(payload)?;
            Op::Symlink {
                name,
                target: only_name(rest)?,
            }
        }
        op::MKNOD => {
            let m = head::<abi::MknodIn>(h)?;
            Op::Mknod {
                name: only_name(payload)?,
                mode: m.mode,
                rdev: m.rdev,
            }
        }
        op::MKDIR => Op::Mkdir {
            name: only_name(payload)?,
            mode: head::<abi::MkdirIn>(h)?.mode,
        },
        op::UNLINK => Op::Unlink {
            name: only_name(payload)?,
        },
        op::RMDIR => Op::Rmdir {
            name: only_name(payload)?,
        },
        op::RENAME | op::RENAME2 => {
            let (newdir, flags) = match opcode {
                op::RENAME => (head::<abi::RenameIn>(h)?.newdir, 0),
                _ => {
                    let r = head::<abi::Rename2In>(h)?;
                    (r.newdir, r.flags)
                }
            };
            let (name, rest) = name(payload)?;
            Op::Rename {
                name,
                newdir,
                newname: only_name(rest)?,
                flags,
            }
        }
        op::LINK => Op::Link {
            oldnodeid: head::<abi::LinkIn>(h)?.oldnodeid,
            name: only_name(payload)?,
        },
        op::OPEN => Op::Open {
            flags: head::<abi::OpenIn>(h)?.flags as i32,
        },
        op::READ => {
            let r = head::<abi::ReadIn>(h)?;
            Op::Read {
                fh: r.fh,
                offset: r.offset,
                size: r.size,
            }
        }
        op::WRITE => {
            let w = head::<abi::WriteIn>(h)?;
            Op::Write {
                fh: w.fh,
                offset: w.offset,
                data: payload.get(..w.size as usize).ok_or(Malformed)?,
                write_flags: w.write_flags,
            }
        }
        op::STATFS => Op::Statfs,
        op::RELEASE => Op::Release {
            fh: head::<abi::ReleaseIn>(h)?.fh,
        },
        op::FSYNC => {
            let f = head::<abi::FsyncIn>(h)?;
            Op::Fsync {
                fh: f.fh,
                datasync: f.fsync_flags & abi::FSYNC_FDATASYNC != 0,
            }
        }
        op::SETXATTR => {
            let s = head::<abi::SetxattrIn>(h)?;
            let (name, rest) = name(payload)?;
            Op::Setxattr {
                name,
                value: rest.get(..s.size as usize).ok_or(Malformed)?,
                flags: s.flags as i32,
            }
        }
        op::GETXATTR => Op::Getxattr {
            size: head::<abi::GetxattrIn>(h)?.size,
            name: only_name(payload)?,
        },
        op::LISTXATTR => Op::Listxattr {
            size: head::<abi::GetxattrIn>(h)?.size,
        },
        op::REMOVEXATTR => Op::Removexattr {
            name: only_name(payload)?,
        },
        op::FLUSH => Op::Flush {
            fh: head::<abi::FlushIn>(h)?.fh,
        },
        op::OPENDIR => Op::Opendir,
        op::READDIR | op::READDIRPLUS => {
            let r = head::<abi::ReadIn>(h)?;
            Op::Readdir {
                fh: r.fh,
                offset: r.offset,
                size: r.size,
                plus: opcode == op::READDIRPLUS,
            }
        }
        op::RELEASEDIR => Op::Releasedir {
            fh: head::<abi::ReleaseIn>(h)?.fh,
        },
        op::FSYNCDIR => Op::Fsyncdir {
            datasync: head::<abi::FsyncIn>(h)?.fsync_flags & abi::FSYNC_FDATASYNC != 0,
        },
        op::ACCESS => Op::Access {
            mask: head::<abi::AccessIn>(h)?.mask as i32,
        },
        op::CREATE => {
            let c = head::<abi::CreateIn>(h)?;
            Op::Create {
                name: only_name(payload)?,
                mode: c.mode,
                flags: c.flags as i32,
            }
        }
        op::INTERRUPT => Op::Interrupt,
        op::DESTROY => Op::Destroy,
        op::FALLOCATE => {
            let f = head::<abi::FallocateIn>(h)?;
            Op::Fallocate {
                fh: f.fh,
                offset: f.offset,
                length: f.length,
                mode: f.mode as i32,
            }
        }
        op::LSEEK => {
            let l = head::<abi::LseekIn>(h)?;
            Op::Lseek {
                fh: l.fh,
                offset: l.offset as i64,
                whence: l.whence as i32,
            }
        }
        op::COPY_FILE_RANGE => {
            let c = head::<abi::CopyFileRangeIn>(h)?;
            Op::CopyFileRange {
                fh_in: c.fh_in,
                off_in: c.off_in,
                fh_out: c.fh_out,
                off_out: c.off_out,
                len: c.len,
            }
        }
        other => Op::Unsupported(other),
    })
}

/// Whether the opcode gets no reply at all.
pub fn is_unanswered(opcode: u32) -> bool {
    matches!(opcode, op::FORGET | op::BATCH_FORGET)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::IntoBytes;

    fn message(opcode: u32, head: &[u8], payload: &[u8]) -> Vec<u8> {
        let len = 40 + head.len() + payload.len();
        let h = abi::InHeader {
            len: len as u32,
            opcode,
            unique: 7,
            nodeid: 1,
            uid: 1000,
            gid: 100,
            pid: 42,
            ..Default::default()
        };
        let mut m = h.as_bytes().to_vec();
        m.extend_from_slice(head);
        m.extend_from_slice(payload);
        m
    }

    #[test]
    fn a_message_is_cut_where_the_opcode_s_header_ends() {
        let w = abi::WriteIn {
            fh: 3,
            offset: 4096,
            size: 5,
            write_flags: abi::WRITE_KILL_SUIDGID,
            ..Default::default()
        };
        let m = message(op::WRITE, w.as_bytes(), b"hello");
        let (h, head, payload) = split_message(&m).unwrap();
        assert_eq!((h.opcode, h.unique, h.uid, h.pid), (op::WRITE, 7, 1000, 42));
        match decode(h.opcode, head, payload).unwrap() {
            Op::Write {
                fh,
                offset,
                data,
                write_flags,
            } => {
                assert_eq!((fh, offset, data, write_flags), (3, 4096, &b"hello"[..], 4));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn names_and_two_names_are_read_up_to_their_nul() {
        let m = message(op::SYMLINK, &[], b"link\0/some/target\0");
        let (h, head, payload) = split_message(&m).unwrap();
        match decode(h.opcode, head, payload).unwrap() {
            Op::Symlink { name, target } => {
                assert_eq!(name, "link");
                assert_eq!(target, "/some/target");
            }
            other => panic!("{other:?}"),
        }
        let r = abi::Rename2In {
            newdir: 9,
            flags: libc::RENAME_NOREPLACE,
            padding: 0,
        };
        let m = message(op::RENAME2, r.as_bytes(), b"a\0b\0");
        let (h, head, payload) = split_message(&m).unwrap();
        match decode(h.opcode, head, payload).unwrap() {
            Op::Rename {
                name,
                newdir,
                newname,
                flags,
            } => assert_eq!(
                (name, newdir, newname, flags),
                (OsStr::new("a"), 9, OsStr::new("b"), libc::RENAME_NOREPLACE)
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_batch_forget_lists_its_nodes() {
        let b = abi::BatchForgetIn { count: 2, dummy: 0 };
        let nodes = [
            abi::ForgetOne {
                nodeid: 5,
                nlookup: 1,
            },
            abi::ForgetOne {
                nodeid: 6,
                nlookup: 3,
            },
        ];
        let m = message(op::BATCH_FORGET, b.as_bytes(), nodes.as_bytes());
        let (h, head, payload) = split_message(&m).unwrap();
        match decode(h.opcode, head, payload).unwrap() {
            Op::BatchForget { nodes } => {
                assert_eq!(forgets(nodes).collect::<Vec<_>>(), vec![(5, 1), (6, 3)]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn short_or_unterminated_requests_are_malformed_not_a_panic() {
        assert!(split_message(&[0u8; 10]).is_err());
        // A name without its NUL.
        assert!(decode(op::LOOKUP, &[], b"abc").is_err());
        // A header shorter than the opcode's struct.
        assert!(decode(op::READ, &[0u8; 8], &[]).is_err());
        // A write that claims more data than it carries.
        let w = abi::WriteIn {
            size: 100,
            ..Default::default()
        };
        assert!(decode(op::WRITE, w.as_bytes(), b"short").is_err());
        // A length in the header longer than the message read.
        let mut m = message(op::LOOKUP, &[], b"x\0");
        m[0] = 200;
        let (h, head, payload) = split_message(&m).unwrap();
        assert!(matches!(
            decode(h.opcode, head, payload),
            Ok(Op::Lookup { .. })
        ));
        // Every opcode number on an empty body: an answer or Malformed, never a panic.
        for opcode in 0..100 {
            let _ = decode(opcode, &[], &[]);
        }
    }

    #[test]
    fn unknown_opcodes_are_unsupported() {
        assert!(matches!(
            decode(op::GETLK, &[0u8; 64], &[]),
            Ok(Op::Unsupported(op::GETLK))
        ));
        assert!(matches!(decode(999, &[], &[]), Ok(Op::Unsupported(999))));
    }
}
