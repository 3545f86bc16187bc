//! The checksum store of one leg: `.mirrorfs/checksums.redb`, a redb database (ACID, its own
//! commits checksummed), so a crash leaves either the last commit or the one before it.
//!
//! Every in-sync leg's store holds the same records: file identities are the same on every
//! leg (an xattr, see [`super::ID_XATTR`]) and the data is the same. So one leg with its store
//! can be verified alone, and a lost store is rebuilt by copying another leg's. The format,
//! byte for byte, is in `docs/integrity.md`:
//!
//! - table `meta` (`&str` → `u64`): `format` = [`FORMAT`], `block_size` = 4096, `algorithm` = 1
//!   (CRC-32C), `generation` (one more at every commit; the same on every in-sync leg).
//! - table `files` (`u64` file id → `(u64, u64)`: the generation of the commit that first
//!   recorded it, and the file's size at the last commit): the files whose data is covered. A
//!   file without a record is not covered (not verified). `meta`'s `covered_bytes` is the sum
//!   of those sizes.
//! - table `sums` (`(u64 file id, u64 record number)` → bytes): the checksums of blocks
//!   `256 * n .. 256 * n + 255`, 4 bytes each, little-endian; a record that is absent is 256
//!   blocks of zeros (a hole, or past the end of the file), and so is a short record's tail.
//! - table `stamps` (`u64` file id → `(i64, u32)`: seconds and nanoseconds): the ctime of
//!   *this leg's* copy when the mirror last changed it and the change had settled. The only
//!   table that differs between legs: a copied store starts with it empty. A copy whose ctime
//!   is no longer its stamp was changed behind the mirror's back (see [`super::classify`]).
//!   Added in format 2; a format 1 store is upgraded in place (it had no stamps).

use super::sum::{zero_sum, Sum, CHUNK_BLOCKS};
use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use std::io;
use std::path::{Path, PathBuf};

/// The store's file name inside a leg's `.mirrorfs/`.
pub const STORE_FILE: &str = "checksums.redb";
/// The version of the layout above.
pub const FORMAT: u64 = 2;
/// `algorithm` in `meta`: CRC-32C.
pub const ALGORITHM_CRC32C: u64 = 1;

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const FILES: TableDefinition<u64, (u64, u64)> = TableDefinition::new("files");
const SUMS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("sums");
const STAMPS: TableDefinition<u64, (i64, u32)> = TableDefinition::new("stamps");

/// A copy's ctime: seconds and nanoseconds.
pub type Stamp = (i64, u32);

fn err(what: &str, path: &Path, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("checksum store '{}': {what}: {e}", path.display()))
}

/// What one commit changes for one file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileChange {
    pub id: u64,
    /// The file is gone: its record and sums are removed (the rest is ignored).
    pub delete: bool,
    /// Records from this number on are removed first (a truncation).
    pub drop_from: Option<u64>,
    /// The file's size now.
    pub size: u64,
    /// Records to write (an all-zero record is removed instead).
    pub chunks: Vec<(u64, Vec<Sum>)>,
}

/// One leg's store.
pub struct Store {
    /// None only while it is reopened (see [`Store::commit`]).
    db: parking_lot::RwLock<Option<Database>>,
    path: PathBuf,
}

/// The store's path under a leg root.
pub fn store_path(leg_root: &Path) -> PathBuf {
    leg_root.join(crate::meta::META_DIR).join(STORE_FILE)
}

fn encode(sums: &[Sum]) -> Vec<u8> {
    sums.iter().flat_map(|s| s.to_le_bytes()).collect()
}

fn decode(bytes: &[u8]) -> Vec<Sum> {
    let mut v: Vec<Sum> = bytes
        .chunks_exact(4)
        .map(|b| Sum::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    v.resize(CHUNK_BLOCKS as usize, zero_sum());
    v
}

/// redb's page cache for one store, bytes. Its default (1 GiB) lets the cache follow the store
/// file, which grows with every file covered: a million files would keep hundreds of MiB per leg
/// in the daemon.
const CACHE_BYTES: usize = 16 << 20;

/// Opens (or creates) the database at `path`, with the error kinds [`Store::open`] gives.
fn open_db(path: &Path) -> io::Result<Database> {
    Database::builder()
        .set_cache_size(CACHE_BYTES)
        .create(path)
        .map_err(|e| open_error(path, e))
}

/// The database in `file` (the store at `path`), with [`open_db`]'s error kinds.
fn open_db_file(file: std::fs::File, path: &Path) -> io::Result<Database> {
    redb::backends::FileBackend::new(file)
        .and_then(|b| {
            Database::builder()
                .set_cache_size(CACHE_BYTES)
                .create_with_backend(b)
        })
        .map_err(|e| open_error(path, e))
}

fn open_error(path: &Path, e: redb::DatabaseError) -> io::Error {
    use redb::{DatabaseError as D, StorageError as S};
    let kind = match &e {
        // Another mirrorfs (or one still unmounting) holds it.
        D::DatabaseAlreadyOpen | D::LockProtocolMismatch => io::ErrorKind::ResourceBusy,
        D::UpgradeRequired(_) => io::ErrorKind::Unsupported,
        D::Storage(S::Io(e)) if e.kind() != io::ErrorKind::UnexpectedEof => e.kind(),
        // Not a store, or a damaged one: only this may be rebuilt from another leg.
        _ => io::ErrorKind::InvalidData,
    };
    io::Error::new(
        kind,
        format!("checksum store '{}': open: {e}", path.display()),
    )
}

impl Store {
    /// Opens the store of the leg at `leg_root`, creating an empty one if there is none.
    /// A store of another format or block size is an error (never rewritten).
    pub fn open(leg_root: &Path) -> io::Result<Store> {
        let path = store_path(leg_root);
        // Only root reads or writes it (the daemon's umask is 0).
        {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .mode(0o600)
                .open(&path)
                .map_err(|e| err("create", &path, e))?;
        }
        let db = open_db(&path)?;
        let s = Store {
            db: parking_lot::RwLock::new(Some(db)),
            path,
        };
        s.init()?;
        Ok(s)
    }

    fn init(&self) -> io::Result<()> {
        let p = &self.path;
        let tx = self.write_tx().map_err(|e| err("begin", p, e))?;
        {
            let mut meta = tx.open_table(META).map_err(|e| err("meta", p, e))?;
            let want = [
                ("format", FORMAT),
                ("block_size", super::sum::BLOCK),
                ("algorithm", ALGORITHM_CRC32C),
            ];
            for (k, v) in want {
                let have = meta
                    .get(k)
                    .map_err(|e| err("meta", p, e))?
                    .map(|g| g.value());
                match have {
                    None => {
                        meta.insert(k, v).map_err(|e| err("meta", p, e))?;
                    }
                    Some(h) if h == v => {}
                    // Format 1 lacked only the stamps table, created below.
                    Some(1) if k == "format" => {
                        meta.insert(k, v).map_err(|e| err("meta", p, e))?;
                    }
                    Some(h) => {
                        return Err(err(
                            "incompatible",
                            p,
                            format!("{k} is {h}, this mirrorfs writes {v}"),
                        ))
                    }
                }
            }
            tx.open_table(FILES).map_err(|e| err("files", p, e))?;
            tx.open_table(SUMS).map_err(|e| err("sums", p, e))?;
            tx.open_table(STAMPS).map_err(|e| err("stamps", p, e))?;
        }
        tx.commit().map_err(|e| err("commit", p, e))
    }

    /// This leg's stamp of file `id` (None: not known, see the module's note).
    pub fn stamp(&self, id: u64) -> io::Result<Option<Stamp>> {
        let p = &self.path;
        let tx = self.read_tx().map_err(|e| err("read", p, e))?;
        let t = tx.open_table(STAMPS).map_err(|e| err("stamps", p, e))?;
        let r = t.get(id).map_err(|e| err("stamps", p, e))?;
        Ok(r.map(|v| v.value()))
    }

    /// How many stamps the store holds.
    pub fn stamp_count(&self) -> io::Result<u64> {
        let p = &self.path;
        let tx = self.read_tx().map_err(|e| err("read", p, e))?;
        let t = tx.open_table(STAMPS).map_err(|e| err("stamps", p, e))?;
        t.len().map_err(|e| err("stamps", p, e))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read_tx(&self) -> Result<redb::ReadTransaction, String> {
        let g = self.db.read();
        let db = g.as_ref().ok_or("closed")?;
        db.begin_read().map_err(|e| e.to_string())
    }

    fn write_tx(&self) -> Result<redb::WriteTransaction, String> {
        let g = self.db.read();
        let db = g.as_ref().ok_or("closed")?;
        db.begin_write().map_err(|e| e.to_string())
    }

    /// Closes and opens the database again: after an I/O error (a full filesystem, say)
    /// redb refuses every later transaction until then.
    fn reopen(&self) -> io::Result<()> {
        let mut g = self.db.write();
        drop(g.take());
        // A read transaction of another thread may hold the old file a moment longer.
        let mut tries = 0;
        loop {
            match open_db(&self.path) {
                Ok(db) => {
                    *g = Some(db);
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::ResourceBusy && tries < 20 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The generation of the last commit (0 for a new store).
    pub fn generation(&self) -> io::Result<u64> {
        let p = &self.path;
        let tx = self.read_tx().map_err(|e| err("read", p, e))?;
        let meta = tx.open_table(META).map_err(|e| err("meta", p, e))?;
        let g = meta.get("generation").map_err(|e| err("meta", p, e))?;
        Ok(g.map_or(0, |g| g.value()))
    }

    /// A `meta` value (None if unset).
    pub fn meta(&self, key: &str) -> io::Result<Option<u64>> {
        let p = &self.path;
        let tx = self.read_tx().map_err(|e| err("read", p, e))?;
        let meta = tx.open_table(META).map_err(|e| err("meta", p, e))?;
        let v = meta.get(key).map_err(|e| err("meta", p, e))?;
        Ok(v.map(|g| g.value()))
    }

    /// Sets a `meta` value, durably.
    pub fn set_meta(&self, key: &str, value: u64) -> io::Result<()> {
        let p = &self.path;
        let tx = self.write_tx().map_err(|e| err("begin", p, e))?;
        {
            let mut meta = tx.open_table(META).map_err(|e| err("meta", p, e))?;
            meta.insert(key, value).map_err(|e| err("meta", p, e))?;
        }
        tx.commit().map_err(|e| err("commit", p, e))
    }

    /// Whether file `id` is covered.
    pub fn has_file(&self, id: u64) -> io::Result<bool> {
        Ok(self.file_size(id)?.is_some())
    }

    /// The size of file `id` at the last commit, if it is covered.
    pub fn file_size(&self, id: u64) -> io::Result<Option<u64>> {
        let p = &self.path;
        let tx = self.read_tx().map_err(|e| err("read", p, e))?;
        let files = tx.open_table(FILES).map_err(|e| err("files", p, e))?;
        let r = files.get(id).map_err(|e| err("files", p, e))?;
        Ok(r.map(|v| v.value().1))
    }

    /// The checksums of record `chunk` of file `id` ([`CHUNK_BLOCKS`] of them).
    pub fn chunk(&self, id: u64, chunk: u64) -> io::Result<Vec<Sum>> {
        let p = &self.path;
        let tx = self.read_tx().map_err(|e| err("read", p, e))?;
        let sums = tx.open_table(SUMS).map_err(|e| err("sums", p, e))?;
        let r = sums.get((id, chunk)).map_err(|e| err("sums", p, e))?;
        Ok(match r {
            Some(v) => decode(v.value()),
            None => vec![zero_sum(); CHUNK_BLOCKS as usize],
        })
    }

    /// Every record of file `id`, in order (record number and its checksums).
    pub fn chunks_of(&self, id: u64) -> io::Result<Vec<(u64, Vec<Sum>)>> {
        let p = &self.path;
        let tx = self.read_tx().map_err(|e| err("read", p, e))?;
        let sums = tx.open_table(SUMS).map_err(|e| err("sums", p, e))?;
        let mut out = Vec::new();
        for r in sums
            .range((id, 0)..=(id, u64::MAX))
            .map_err(|e| err("sums", p, e))?
        {
            let (k, v) = r.map_err(|e| err("sums", p, e))?;
            out.push((k.value().1, decode(v.value())));
        }
        Ok(out)
    }

    /// How many files are covered, and how many records the store holds.
    pub fn counts(&self) -> io::Result<(u64, u64)> {
        let p = &self.path;
        let tx = self.read_tx().map_err(|e| err("read", p, e))?;
        let files = tx.open_table(FILES).map_err(|e| err("files", p, e))?;
        let sums = tx.open_table(SUMS).map_err(|e| err("sums", p, e))?;
        Ok((
            files.len().map_err(|e| err("files", p, e))?,
            sums.len().map_err(|e| err("sums", p, e))?,
        ))
    }

    /// Every covered file id (for the scrub's check of orphan records).
    pub fn file_ids(&self) -> io::Result<Vec<u64>> {
        let p = &self.path;
        let tx = self.read_tx().map_err(|e| err("read", p, e))?;
        let files = tx.open_table(FILES).map_err(|e| err("files", p, e))?;
        let mut out = Vec::new();
        for r in files.iter().map_err(|e| err("files", p, e))? {
            let (k, _) = r.map_err(|e| err("files", p, e))?;
            out.push(k.value());
        }
        Ok(out)
    }

    /// Applies `changes` in one durable transaction and records `generation`. After a failure
    /// (redb then refuses everything until the database is reopened) the store is reopened
    /// and the commit tried once more: a filesystem that was full for a moment does not cost
    /// the leg its place in the mirror.
    ///
    /// `stamps` are this leg's new stamps (None removes one); a removed file's stamp goes too.
    /// A commit of stamps alone (`changes` empty) leaves the generation as it was.
    pub fn commit(
        &self,
        changes: &[FileChange],
        stamps: &[(u64, Option<Stamp>)],
        generation: u64,
    ) -> io::Result<()> {
        match self.commit_once(changes, stamps, generation) {
            Ok(()) => Ok(()),
            Err(e) => {
                log::warn!("{e}; opening it again to retry");
                self.reopen()
                    .and_then(|()| self.commit_once(changes, stamps, generation))
                    .map_err(|again| io::Error::new(again.kind(), format!("{e}; again: {again}")))
            }
        }
    }

    fn commit_once(
        &self,
        changes: &[FileChange],
        stamps: &[(u64, Option<Stamp>)],
        generation: u64,
    ) -> io::Result<()> {
        let p = &self.path;
        let tx = self.write_tx().map_err(|e| err("begin", p, e))?;
        {
            let mut st = tx.open_table(STAMPS).map_err(|e| err("stamps", p, e))?;
            for &(id, s) in stamps {
                match s {
                    Some(s) => st.insert(id, s).map(drop),
                    None => st.remove(id).map(drop),
                }
                .map_err(|e| err("stamps", p, e))?;
            }
            for c in changes.iter().filter(|c| c.delete) {
                st.remove(c.id).map_err(|e| err("stamps", p, e))?;
            }
        }
        if changes.is_empty() {
            return tx.commit().map_err(|e| err("commit", p, e));
        }
        {
            let mut files = tx.open_table(FILES).map_err(|e| err("files", p, e))?;
            let mut sums = tx.open_table(SUMS).map_err(|e| err("sums", p, e))?;
            let mut meta = tx.open_table(META).map_err(|e| err("meta", p, e))?;
            let mut covered = meta
                .get("covered_bytes")
                .map_err(|e| err("meta", p, e))?
                .map_or(0, |g| g.value());
            let zero = zero_sum();
            for c in changes {
                let old = files
                    .get(c.id)
                    .map_err(|e| err("files", p, e))?
                    .map(|g| g.value());
                covered = covered.saturating_sub(old.map_or(0, |o| o.1));
                if c.delete || c.drop_from.is_some() {
                    let from = if c.delete {
                        0
                    } else {
                        c.drop_from.unwrap_or(0)
                    };
                    sums.retain_in((c.id, from)..=(c.id, u64::MAX), |_, _| false)
                        .map_err(|e| err("sums", p, e))?;
                }
                if c.delete {
                    files.remove(c.id).map_err(|e| err("files", p, e))?;
                    continue;
                }
                covered += c.size;
                files
                    .insert(c.id, (old.map_or(generation, |o| o.0), c.size))
                    .map_err(|e| err("files", p, e))?;
                for (n, chunk) in &c.chunks {
                    // Trailing zero sums are implied: store up to the last non-zero one.
                    let keep = chunk.iter().rposition(|&s| s != zero).map_or(0, |i| i + 1);
                    if keep == 0 {
                        sums.remove((c.id, *n)).map_err(|e| err("sums", p, e))?;
                    } else {
                        sums.insert((c.id, *n), encode(&chunk[..keep]).as_slice())
                            .map_err(|e| err("sums", p, e))?;
                    }
                }
            }
            meta.insert("generation", generation)
                .map_err(|e| err("meta", p, e))?;
            meta.insert("covered_bytes", covered)
                .map_err(|e| err("meta", p, e))?;
        }
        tx.commit().map_err(|e| err("commit", p, e))
    }
}

/// Moves the store of the leg at `leg_root` aside (to `checksums.redb.off`), for a mount that
/// will change data without checksums. Returns a line for the log if there was one.
pub fn set_aside(leg_root: &Path) -> Option<String> {
    let from = store_path(leg_root);
    if !from.exists() {
        return None;
    }
    let to = from.with_extension("redb.off");
    Some(match std::fs::rename(&from, &to) {
        Ok(()) => format!(
            "checksum=off: '{}' set aside as '{}': files changed by this mount would no longer \
             match it; with checksums again, files get new ones when they are rewritten",
            from.display(),
            to.display()
        ),
        Err(e) => format!("checksum=off: cannot set '{}' aside: {e}", from.display()),
    })
}

/// Replaces the store of the leg at `to_root` with a copy of `from`'s file (written beside
/// it, flushed, renamed over, by [`crate::sys::replace::replace_file`] in the leg's
/// `.mirrorfs/`, which must exist): rebuilding a lost store, or giving a leg that joins the
/// mirror the records of the data it was given. The caller holds off commits to `from`
/// meanwhile. The copy has `from`'s mode. Its stamps are dropped: they were the ctimes of the
/// other leg's copies.
pub fn copy_store(from: &Path, to_root: &Path) -> io::Result<()> {
    use std::os::fd::AsFd;
    use std::os::unix::fs::PermissionsExt;
    let to = store_path(to_root);
    let mut source = std::fs::File::open(from)?;
    let mode = source.metadata()?.permissions().mode() & 0o7777;
    let dir = crate::meta::open_meta_dir(to_root, false)?;
    crate::sys::replace::replace_file(dir.as_fd(), STORE_FILE, mode, |copy| {
        std::io::copy(&mut source, copy)?;
        let db = open_db_file(copy.try_clone()?, &to)?;
        let tx = db.begin_write().map_err(|e| err("begin", &to, e))?;
        tx.delete_table(STAMPS).map_err(|e| err("stamps", &to, e))?;
        tx.open_table(STAMPS).map_err(|e| err("stamps", &to, e))?;
        tx.commit().map_err(|e| err("commit", &to, e))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leg() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join(crate::meta::META_DIR)).unwrap();
        d
    }

    #[test]
    fn records_round_trip_and_truncation_drops_the_tail() {
        let d = leg();
        let s = Store::open(d.path()).unwrap();
        assert_eq!(s.generation().unwrap(), 0);
        assert!(!s.has_file(7).unwrap());
        let mut c0 = vec![zero_sum(); CHUNK_BLOCKS as usize];
        c0[3] = 42;
        let c1 = vec![9; CHUNK_BLOCKS as usize];
        let change = FileChange {
            id: 7,
            chunks: vec![(0, c0.clone()), (1, c1.clone()), (2, c1.clone())],
            size: 3 << 20,
            ..Default::default()
        };
        s.commit(&[change], &[], 1).unwrap();
        assert!(s.has_file(7).unwrap());
        assert_eq!(s.chunk(7, 0).unwrap(), c0);
        assert_eq!(s.chunk(7, 1).unwrap(), c1);
        assert_eq!(s.generation().unwrap(), 1);
        assert_eq!(s.counts().unwrap(), (1, 3));
        assert_eq!(s.meta("covered_bytes").unwrap(), Some(3 << 20));
        assert_eq!(s.file_size(7).unwrap(), Some(3 << 20));
        let cut = FileChange {
            id: 7,
            drop_from: Some(1),
            size: 1 << 20,
            ..Default::default()
        };
        s.commit(&[cut], &[], 2).unwrap();
        assert_eq!(
            s.chunk(7, 1).unwrap(),
            vec![zero_sum(); CHUNK_BLOCKS as usize]
        );
        assert_eq!(s.counts().unwrap(), (1, 1));
        assert_eq!(s.meta("covered_bytes").unwrap(), Some(1 << 20));
        drop(s);
        // Reopened: the same.
        let s = Store::open(d.path()).unwrap();
        assert_eq!(s.chunk(7, 0).unwrap(), c0);
        assert_eq!(s.file_ids().unwrap(), vec![7]);
        s.commit(
            &[FileChange {
                id: 7,
                delete: true,
                ..Default::default()
            }],
            &[],
            3,
        )
        .unwrap();
        assert_eq!(s.counts().unwrap(), (0, 0));
        assert_eq!(s.meta("covered_bytes").unwrap(), Some(0));
    }

    #[test]
    fn a_copied_store_has_the_same_records() {
        let (a, b) = (leg(), leg());
        let s = Store::open(a.path()).unwrap();
        let change = FileChange {
            id: 1,
            chunks: vec![(0, vec![5; CHUNK_BLOCKS as usize])],
            ..Default::default()
        };
        s.commit(&[change], &[(1, Some((100, 5)))], 4).unwrap();
        assert_eq!(s.stamp(1).unwrap(), Some((100, 5)));
        copy_store(s.path(), b.path()).unwrap();
        let t = Store::open(b.path()).unwrap();
        assert_eq!(t.generation().unwrap(), 4);
        assert_eq!(t.chunk(1, 0).unwrap(), vec![5; CHUNK_BLOCKS as usize]);
        // The stamps were leg a's copies' ctimes: not leg b's.
        assert_eq!(t.stamp(1).unwrap(), None);
        assert_eq!(s.stamp(1).unwrap(), Some((100, 5)));
    }

    #[test]
    fn stamps_alone_keep_the_generation_and_go_with_their_file() {
        let d = leg();
        let s = Store::open(d.path()).unwrap();
        let one = FileChange {
            id: 3,
            chunks: vec![(0, vec![1; CHUNK_BLOCKS as usize])],
            size: 4096,
            ..Default::default()
        };
        s.commit(&[one], &[], 1).unwrap();
        s.commit(&[], &[(3, Some((7, 8))), (4, Some((1, 1)))], 99)
            .unwrap();
        assert_eq!(s.generation().unwrap(), 1);
        assert_eq!(s.stamp(3).unwrap(), Some((7, 8)));
        s.commit(&[], &[(4, None)], 99).unwrap();
        assert_eq!(s.stamp(4).unwrap(), None);
        let gone = FileChange {
            id: 3,
            delete: true,
            ..Default::default()
        };
        s.commit(&[gone], &[], 2).unwrap();
        assert_eq!(s.stamp(3).unwrap(), None);
        assert_eq!(s.stamp_count().unwrap(), 0);
    }

    #[test]
    fn a_format_1_store_is_upgraded_in_place() {
        let d = leg();
        {
            let db = Database::create(store_path(d.path())).unwrap();
            let tx = db.begin_write().unwrap();
            {
                let mut meta = tx.open_table(META).unwrap();
                meta.insert("format", 1).unwrap();
                meta.insert("block_size", super::super::sum::BLOCK).unwrap();
                meta.insert("algorithm", ALGORITHM_CRC32C).unwrap();
                meta.insert("generation", 5).unwrap();
                let mut files = tx.open_table(FILES).unwrap();
                files.insert(9, (1, 10)).unwrap();
                tx.open_table(SUMS).unwrap();
            }
            tx.commit().unwrap();
        }
        let s = Store::open(d.path()).unwrap();
        assert_eq!(s.meta("format").unwrap(), Some(FORMAT));
        assert_eq!(s.generation().unwrap(), 5);
        assert!(s.has_file(9).unwrap());
        assert_eq!(s.stamp(9).unwrap(), None);
    }

    #[test]
    fn a_reopened_store_keeps_its_records_and_takes_commits() {
        let d = leg();
        let s = Store::open(d.path()).unwrap();
        let one = |id| FileChange {
            id,
            chunks: vec![(0, vec![id as Sum; CHUNK_BLOCKS as usize])],
            size: 4096,
            ..Default::default()
        };
        s.commit(&[one(1)], &[], 1).unwrap();
        s.reopen().unwrap();
        s.commit(&[one(2)], &[], 2).unwrap();
        assert_eq!(s.counts().unwrap(), (2, 2));
        assert_eq!(s.generation().unwrap(), 2);
        assert_eq!(s.chunk(1, 0).unwrap(), vec![1; CHUNK_BLOCKS as usize]);
    }

    #[test]
    fn a_store_in_use_is_busy_not_damaged() {
        let d = leg();
        let _held = Store::open(d.path()).unwrap();
        let e = Store::open(d.path()).err().expect("refused");
        assert_eq!(e.kind(), io::ErrorKind::ResourceBusy, "{e}");
    }

    #[test]
    fn only_its_owner_may_read_or_write_it() {
        use std::os::unix::fs::PermissionsExt;
        let d = leg();
        // (Under the tests' umask a default-mode file would be 0644; the daemon's is 0.)
        let s = Store::open(d.path()).unwrap();
        let mode = std::fs::metadata(s.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn garbage_is_refused_not_overwritten() {
        let d = leg();
        std::fs::write(store_path(d.path()), b"not a database at all").unwrap();
        let e = Store::open(d.path()).err().expect("refused");
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        assert_eq!(
            std::fs::read(store_path(d.path())).unwrap(),
            b"not a database at all"
        );
    }
}
