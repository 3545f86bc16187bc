//! Turning a leg's `stat` into the attributes the mount shows.

use fuser::{FileAttr, FileType, INodeNo};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn time(sec: i64, nsec: i64) -> SystemTime {
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec as u32)
    } else {
        UNIX_EPOCH - Duration::new((-sec) as u64, 0) + Duration::from_nanos(nsec as u64)
    }
}

/// The FUSE file type for `S_IFMT` bits.
pub fn file_type(kind: u32) -> FileType {
    match kind {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

/// `S_IFMT` bits for a `DT_*` directory entry type (0 if unknown).
pub fn kind_of_dtype(d_type: u8) -> u32 {
    match d_type {
        libc::DT_DIR => libc::S_IFDIR,
        libc::DT_LNK => libc::S_IFLNK,
        libc::DT_FIFO => libc::S_IFIFO,
        libc::DT_SOCK => libc::S_IFSOCK,
        libc::DT_CHR => libc::S_IFCHR,
        libc::DT_BLK => libc::S_IFBLK,
        libc::DT_REG => libc::S_IFREG,
        _ => 0,
    }
}

/// The attributes of a leg object, shown under our inode number `ino`.
pub fn from_stat(st: &libc::stat, ino: u64) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: st.st_size as u64,
        blocks: st.st_blocks as u64,
        atime: time(st.st_atime, st.st_atime_nsec),
        mtime: time(st.st_mtime, st.st_mtime_nsec),
        ctime: time(st.st_ctime, st.st_ctime_nsec),
        crtime: time(st.st_ctime, st.st_ctime_nsec),
        kind: file_type(st.st_mode & libc::S_IFMT),
        perm: (st.st_mode & 0o7777) as u16,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev as u32,
        blksize: st.st_blksize as u32,
        flags: 0,
    }
}

/// The permission bits a regular file keeps when a change drops its privileges, as the kernel
/// decides for a local filesystem (`setattr_should_drop_suidgid`, `chown_common`): setuid
/// goes; setgid goes when group execute is set (it then marks a setgid program) or when the
/// caller is neither in the file's group nor holds `CAP_FSETID` (`in_group_or_capable`, asked
/// only then). Without group execute, setgid marks mandatory locking and stays for the others.
///
/// A chown always drops them; a write, truncate or fallocate only when the caller lacks
/// `CAP_FSETID`: that gate is the caller's to apply.
pub fn without_privs(mode: u32, in_group_or_capable: impl FnOnce() -> bool) -> u32 {
    let mut kill = mode & libc::S_ISUID;
    if mode & libc::S_ISGID != 0 && (mode & libc::S_IXGRP != 0 || !in_group_or_capable()) {
        kill |= libc::S_ISGID;
    }
    mode & !kill
}

#[cfg(test)]
mod tests {
    use super::without_privs;

    #[test]
    fn a_dropped_privilege_follows_the_kernels_rule() {
        let never = || -> bool { panic!("group membership asked needlessly") };
        assert_eq!(without_privs(0o4755, never), 0o755);
        assert_eq!(without_privs(0o6755, never), 0o755, "setgid with group x");
        assert_eq!(without_privs(0o0755, never), 0o755);
        assert_eq!(without_privs(0o1777, never), 0o1777, "sticky stays");
        assert_eq!(
            without_privs(0o2745, || true),
            0o2745,
            "locking mark, member"
        );
        assert_eq!(
            without_privs(0o2745, || false),
            0o745,
            "locking mark, outsider"
        );
        assert_eq!(without_privs(0o6745, || false), 0o745);
    }
}
