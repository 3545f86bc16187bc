//! The volatile write cache: the newest contents of every 4 KiB block written since the last
//! flush, over the image (the medium).
//!
//! Nothing here knows about FUSE, locks or power: [`Cache`] is a map from block number to
//! contents, and the image is reached through the [`Image`] trait, which a real file and the
//! unit tests' memory image implement.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

/// The unit the cache keeps and a power cut keeps or loses whole: 4 KiB, ext4's block and the
/// page size, so a filesystem's block is never torn in two.
pub const BLOCK: u64 = 4096;

/// The medium: what survives a power cut. Reads and writes are whole (a short transfer is an
/// error), within the image's size.
pub trait Image {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Makes `len` bytes at `offset` read as zeros.
    fn zero(&self, offset: u64, len: u64) -> io::Result<()>;
    /// Makes everything written so far durable.
    fn sync(&self) -> io::Result<()>;
}

impl Image for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.read_exact_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.write_all_at(buf, offset)
    }

    fn zero(&self, offset: u64, len: u64) -> io::Result<()> {
        // A hole keeps the image sparse: mkfs discards the whole device first, and writing
        // 256 MiB of zeros for that would cost time and disk for nothing.
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        let r = unsafe { libc::fallocate(self.as_raw_fd(), mode, offset as i64, len as i64) };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
            return Err(e);
        }
        // The image's filesystem cannot punch holes: write the zeros.
        let zeros = vec![0u8; BLOCK as usize * 64];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(zeros.len() as u64);
            self.write_all_at(&zeros[..n as usize], offset + done)?;
            done += n;
        }
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        self.sync_data()
    }
}

/// One cached block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Block {
    /// Discarded or zeroed as a whole (FALLOCATE's punch hole or zero range, which the loop
    /// driver sends for DISCARD and WRITE_ZEROES): no 4 KiB of zeros held for it.
    Zero,
    /// Written: the block's bytes (always 4 KiB; past the end of an image whose size is not a
    /// multiple of 4 KiB they are never read or written out).
    Data(Box<[u8]>),
}

impl Block {
    fn bytes(&self) -> Box<[u8]> {
        match self {
            Block::Zero => vec![0u8; BLOCK as usize].into_boxed_slice(),
            Block::Data(d) => d.clone(),
        }
    }
}

/// The cached blocks of an image of `size` bytes.
pub struct Cache {
    size: u64,
    /// Block number -> newest contents. Ordered, so that a flush writes the image in order
    /// and a cut lists the blocks it kept in order.
    blocks: BTreeMap<u64, Block>,
}

/// The part of block `b` within an image of `size` bytes: its offset and length.
fn extent(b: u64, size: u64) -> (u64, usize) {
    let start = b * BLOCK;
    (start, (size - start).min(BLOCK) as usize)
}

impl Cache {
    pub fn new(size: u64) -> Cache {
        Cache {
            size,
            blocks: BTreeMap::new(),
        }
    }

    /// How many blocks are cached (not yet on the image).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// `len` bytes at `offset` clipped to the image's end.
    fn clip(&self, offset: u64, len: u64) -> u64 {
        len.min(self.size.saturating_sub(offset))
    }

    /// Reads up to `len` bytes at `offset`: the image's bytes with the cached blocks over them.
    /// Short (possibly empty) at the image's end, as a file is.
    pub fn read(&self, image: &impl Image, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        let len = self.clip(offset, len);
        let mut buf = vec![0u8; len as usize];
        if len == 0 {
            return Ok(buf);
        }
        image.read_at(&mut buf, offset)?;
        let end = offset + len;
        for (&b, block) in self.blocks.range(offset / BLOCK..end.div_ceil(BLOCK)) {
            // The overlap of block b with [offset, end).
            let (bs, be) = (b * BLOCK, (b + 1) * BLOCK);
            let (from, to) = (bs.max(offset), be.min(end));
            let dst = &mut buf[(from - offset) as usize..(to - offset) as usize];
            match block {
                Block::Zero => dst.fill(0),
                Block::Data(d) => dst.copy_from_slice(&d[(from - bs) as usize..(to - bs) as usize]),
            }
        }
        Ok(buf)
    }

    /// Writes `data` at `offset` into the cache (not the image), clipped to the image's end:
    /// the number of bytes taken. A block written in part starts from its current contents
    /// (cached, else read from the image).
    pub fn write(&mut self, image: &impl Image, offset: u64, data: &[u8]) -> io::Result<usize> {
        let len = self.clip(offset, data.len() as u64);
        self.fill(image, offset, len, |dst, at| {
            dst.copy_from_slice(&data[at as usize..at as usize + dst.len()])
        })?;
        Ok(len as usize)
    }

    /// Makes `len` bytes at `offset` read as zeros (clipped to the image's end), in the cache.
    pub fn zero(&mut self, image: &impl Image, offset: u64, len: u64) -> io::Result<()> {
        let len = self.clip(offset, len);
        self.fill(image, offset, len, |dst, _| dst.fill(0))
    }

    /// Applies `put(part of a block, its offset from `offset`)` to every block [offset,
    /// offset + len) touches. A block that ends up all zeros, written or zeroed, is kept as
    /// [`Block::Zero`]: it reads the same and goes out to the image as a hole.
    fn fill(
        &mut self,
        image: &impl Image,
        offset: u64,
        len: u64,
        mut put: impl FnMut(&mut [u8], u64),
    ) -> io::Result<()> {
        let end = offset + len;
        let mut at = offset;
        while at < end {
            let b = at / BLOCK;
            let (bs, valid) = extent(b, self.size);
            let to = ((b + 1) * BLOCK).min(end);
            let whole = at == bs && to - bs >= valid as u64;
            let mut bytes = match self.blocks.get(&b) {
                Some(block) => block.bytes(),
                None if whole => vec![0u8; BLOCK as usize].into_boxed_slice(),
                None => {
                    let mut d = vec![0u8; BLOCK as usize].into_boxed_slice();
                    image.read_at(&mut d[..valid], bs)?;
                    d
                }
            };
            put(
                &mut bytes[(at - bs) as usize..(to - bs) as usize],
                at - offset,
            );
            let block = if bytes.iter().all(|&x| x == 0) {
                Block::Zero
            } else {
                Block::Data(bytes)
            };
            self.blocks.insert(b, block);
            at = to;
        }
        Ok(())
    }

    /// The numbers of the cached blocks, in order.
    pub fn numbers(&self) -> Vec<u64> {
        self.blocks.keys().copied().collect()
    }

    /// Writes the cached blocks `numbers` (in order) to the image and forgets them, as long
    /// as `go()` says so before each write: the number written. Runs of zeroed blocks go out
    /// as one hole. Stops at the first error, or when `go()` is false, with the blocks not
    /// written still cached.
    pub fn write_out(
        &mut self,
        image: &impl Image,
        numbers: &[u64],
        mut go: impl FnMut() -> bool,
    ) -> io::Result<usize> {
        let mut done = 0;
        let mut i = 0;
        while i < numbers.len() {
            if !go() {
                break;
            }
            let b = numbers[i];
            let Some(block) = self.blocks.get(&b) else {
                i += 1;
                continue;
            };
            match block {
                Block::Data(d) => {
                    let (bs, valid) = extent(b, self.size);
                    image.write_at(&d[..valid], bs)?;
                    self.blocks.remove(&b);
                    done += 1;
                    i += 1;
                }
                Block::Zero => {
                    // The run of zeroed blocks with consecutive numbers starting at b.
                    let mut n = 1;
                    while i + n < numbers.len()
                        && numbers[i + n] == b + n as u64
                        && self.blocks.get(&(b + n as u64)) == Some(&Block::Zero)
                    {
                        n += 1;
                    }
                    let (bs, _) = extent(b, self.size);
                    let (last_start, last_len) = extent(b + n as u64 - 1, self.size);
                    image.zero(bs, last_start + last_len as u64 - bs)?;
                    for k in 0..n as u64 {
                        self.blocks.remove(&(b + k));
                    }
                    done += n;
                    i += n;
                }
            }
        }
        Ok(done)
    }

    /// Forgets the cached blocks `numbers` (lost with the power).
    pub fn drop_blocks(&mut self, numbers: &[u64]) {
        for b in numbers {
            self.blocks.remove(b);
        }
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use parking_lot::Mutex;

    /// An image in memory that counts its syncs and holes.
    pub struct Mem {
        pub bytes: Mutex<Vec<u8>>,
        pub syncs: Mutex<usize>,
        pub holes: Mutex<usize>,
    }

    impl Mem {
        pub fn new(size: usize, fill: u8) -> Mem {
            Mem {
                bytes: Mutex::new(vec![fill; size]),
                syncs: Mutex::new(0),
                holes: Mutex::new(0),
            }
        }
    }

    impl Image for Mem {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            let b = self.bytes.lock();
            buf.copy_from_slice(&b[offset as usize..offset as usize + buf.len()]);
            Ok(())
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
            let mut b = self.bytes.lock();
            b[offset as usize..offset as usize + buf.len()].copy_from_slice(buf);
            Ok(())
        }
        fn zero(&self, offset: u64, len: u64) -> io::Result<()> {
            *self.holes.lock() += 1;
            self.bytes.lock()[offset as usize..(offset + len) as usize].fill(0);
            Ok(())
        }
        fn sync(&self) -> io::Result<()> {
            *self.syncs.lock() += 1;
            Ok(())
        }
    }

    #[test]
    fn reads_see_the_cached_blocks_over_the_image() {
        let img = Mem::new(5 * BLOCK as usize, 0xAA);
        let mut c = Cache::new(5 * BLOCK);
        // Across a block boundary, not aligned.
        assert_eq!(c.write(&img, BLOCK - 10, &[1u8; 20]).unwrap(), 20);
        assert_eq!(c.len(), 2);
        let got = c.read(&img, BLOCK - 12, 24).unwrap();
        assert_eq!(got[..2], [0xAA, 0xAA]);
        assert_eq!(got[2..22], [1u8; 20]);
        assert_eq!(got[22..], [0xAA, 0xAA]);
        // The image is untouched until written out.
        assert!(img.bytes.lock().iter().all(|&x| x == 0xAA));
    }

    #[test]
    fn a_block_keeps_its_newest_contents() {
        let img = Mem::new(2 * BLOCK as usize, 0);
        let mut c = Cache::new(2 * BLOCK);
        c.write(&img, 0, &[1u8; 4096]).unwrap();
        c.write(&img, 100, &[2u8; 10]).unwrap();
        c.write(&img, 0, &[3u8; 50]).unwrap();
        let got = c.read(&img, 0, 4096).unwrap();
        assert_eq!(got[..50], [3u8; 50]);
        assert_eq!(got[50..100], [1u8; 50]);
        assert_eq!(got[100..110], [2u8; 10]);
        assert_eq!(got[110..], [1u8; 3986]);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn the_image_end_clips_reads_and_writes() {
        // 2.5 blocks: the last block is partial.
        let size = 2 * BLOCK + 2048;
        let img = Mem::new(size as usize, 9);
        let mut c = Cache::new(size);
        assert_eq!(c.write(&img, size - 100, &[5u8; 300]).unwrap(), 100);
        assert_eq!(c.write(&img, size, &[5u8; 10]).unwrap(), 0);
        assert_eq!(c.read(&img, size - 200, 4096).unwrap().len(), 200);
        assert!(c.read(&img, size + 1, 10).unwrap().is_empty());
        let numbers = c.numbers();
        assert_eq!(c.write_out(&img, &numbers, || true).unwrap(), 1);
        let b = img.bytes.lock();
        assert_eq!(b.len(), size as usize);
        assert_eq!(b[size as usize - 100..], [5u8; 100]);
        assert_eq!(b[size as usize - 101], 9);
    }

    #[test]
    fn zeroed_blocks_are_held_without_their_bytes_and_go_out_as_one_hole() {
        let img = Mem::new(8 * BLOCK as usize, 7);
        let mut c = Cache::new(8 * BLOCK);
        // Blocks 1..=5 whole, and a part of block 0 and of block 6.
        c.zero(&img, BLOCK - 8, 5 * BLOCK + 16).unwrap();
        assert_eq!(c.blocks.get(&3), Some(&Block::Zero));
        assert!(matches!(c.blocks.get(&0), Some(Block::Data(_))));
        assert!(matches!(c.blocks.get(&6), Some(Block::Data(_))));
        let got = c.read(&img, 0, 8 * BLOCK).unwrap();
        assert!(got[..4088].iter().all(|&x| x == 7));
        assert!(got[4088..6 * 4096 + 8].iter().all(|&x| x == 0));
        assert!(got[6 * 4096 + 8..].iter().all(|&x| x == 7));
        let numbers = c.numbers();
        assert_eq!(c.write_out(&img, &numbers, || true).unwrap(), 7);
        assert_eq!(*img.holes.lock(), 1, "blocks 1..=5 in one hole");
        assert_eq!(img.bytes.lock()[..], got[..]);
        assert!(c.is_empty());
    }

    #[test]
    fn a_write_into_a_zeroed_block_keeps_the_zeros_around_it() {
        let img = Mem::new(BLOCK as usize, 7);
        let mut c = Cache::new(BLOCK);
        c.zero(&img, 0, BLOCK).unwrap();
        c.write(&img, 10, &[1, 2]).unwrap();
        let got = c.read(&img, 0, 16).unwrap();
        assert_eq!(got, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0]);
    }

    #[test]
    fn writing_out_stops_when_told_and_keeps_the_rest() {
        let img = Mem::new(10 * BLOCK as usize, 0);
        let mut c = Cache::new(10 * BLOCK);
        for b in 0..10u64 {
            c.write(&img, b * BLOCK, &[b as u8 + 1; 4096]).unwrap();
        }
        let numbers = c.numbers();
        let mut budget = 4;
        let n = c
            .write_out(&img, &numbers, || {
                budget -= 1;
                budget >= 0
            })
            .unwrap();
        assert_eq!(n, 4);
        assert_eq!(c.numbers(), (4..10).collect::<Vec<_>>());
        assert_eq!(img.bytes.lock()[3 * 4096], 4);
        assert_eq!(img.bytes.lock()[4 * 4096], 0);
        // Dropping the rest leaves the image as it was for them.
        c.drop_blocks(&c.numbers());
        assert!(c.is_empty());
        assert_eq!(c.read(&img, 9 * BLOCK, 1).unwrap(), [0]);
    }

    #[test]
    fn a_real_file_image() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img");
        let f = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&p)
            .unwrap();
        f.set_len(4 * BLOCK).unwrap();
        f.write_all_at(&[3u8; 4 * 4096], 0).unwrap();
        let mut c = Cache::new(4 * BLOCK);
        c.write(&f, 5, b"hello").unwrap();
        c.zero(&f, BLOCK, 2 * BLOCK).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), vec![3u8; 4 * 4096]);
        let numbers = c.numbers();
        c.write_out(&f, &numbers, || true).unwrap();
        f.sync().unwrap();
        let on_disk = std::fs::read(&p).unwrap();
        assert_eq!(&on_disk[5..10], b"hello");
        assert_eq!(on_disk[4], 3);
        assert!(on_disk[4096..3 * 4096].iter().all(|&x| x == 0));
        assert!(on_disk[3 * 4096..].iter().all(|&x| x == 3));
    }
}
