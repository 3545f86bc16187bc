//! Reading a leg directory's entries.

use super::rx;
use crate::errno::Result;
use rustix::fs::FileType;
use std::ffi::OsString;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStringExt;

/// One entry as the leg's filesystem reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LegDirEntry {
    pub name: OsString,
    pub ino: u64,
    /// `DT_*` value.
    pub d_type: u8,
}

/// All entries of the directory `fd` holds (an `O_PATH` descriptor is fine), `.` and `..`
/// excluded.
///
/// Read with `getdents64` through rustix's `Dir`, which, as glibc's `readdir`, takes `ENOENT`
/// (a directory removed while read) for the end.
pub fn read_dir(fd: BorrowedFd<'_>) -> Result<Vec<LegDirEntry>> {
    let mut dir = rx(rustix::fs::Dir::new(super::fd::open_dir_for_read(fd)?))?;
    let mut out = Vec::new();
    while let Some(ent) = dir.read() {
        let ent = rx(ent)?;
        let name = ent.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        out.push(LegDirEntry {
            name: OsString::from_vec(name.to_vec()),
            ino: ent.ino(),
            d_type: dt_of(ent.file_type()),
        });
    }
    Ok(out)
}

/// The `DT_*` value of a file type as rustix reports it (rustix reads any type it does not
/// know, `DT_WHT` included, as unknown).
fn dt_of(t: FileType) -> u8 {
    match t {
        FileType::RegularFile => libc::DT_REG,
        FileType::Directory => libc::DT_DIR,
        FileType::Symlink => libc::DT_LNK,
        FileType::Fifo => libc::DT_FIFO,
        FileType::Socket => libc::DT_SOCK,
        FileType::CharacterDevice => libc::DT_CHR,
        FileType::BlockDevice => libc::DT_BLK,
        FileType::Unknown => libc::DT_UNKNOWN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn names_inode_numbers_and_types_as_the_directory_has_them() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("f"), b"x").unwrap();
        std::fs::create_dir(d.path().join("d")).unwrap();
        std::os::unix::fs::symlink("f", d.path().join("l")).unwrap();
        // Enough names to take more than one getdents64 call.
        for i in 0..300 {
            std::fs::write(d.path().join(format!("n{i:04}")), b"").unwrap();
        }
        let fd = std::fs::File::open(d.path()).unwrap();
        let mut got = read_dir(fd.as_fd()).unwrap();
        got.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(got.len(), 303);
        let ino = |n: &str| std::fs::symlink_metadata(d.path().join(n)).unwrap().ino();
        let first: Vec<_> = got[..3].iter().map(|e| (e.name.clone(), e.ino)).collect();
        assert_eq!(
            first,
            [("d", ino("d")), ("f", ino("f")), ("l", ino("l"))].map(|(n, i)| (n.into(), i))
        );
        // tmpfs and the usual disk filesystems all report d_type.
        let types: Vec<u8> = got[..3].iter().map(|e| e.d_type).collect();
        assert_eq!(types, [libc::DT_DIR, libc::DT_REG, libc::DT_LNK]);
        assert!(got[3..].iter().all(|e| e.d_type == libc::DT_REG));
    }
}
