//! The disk: the write cache over the image, the power switch, and what a flush and a cut do.
//!
//! Every request takes the cache's lock and then looks at the power, so a cut (which turns
//! the power off first and then takes the lock) splits the requests in two: those that held
//! the lock before it were served whole, every later one fails with EIO.

use crate::cache::{Cache, Image};
use crate::choose;
use parking_lot::RwLock;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};

/// An errno: what a request fails with.
pub type Res<T> = Result<T, i32>;

fn errno(e: io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// CLOCK_MONOTONIC in ns: one clock for every process on the machine, so the instants at which
/// several disks were cut can be compared.
pub fn monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Counters of the requests served, for the report and for finding out how a client (the
/// loop driver) flushes.
#[derive(Default)]
pub struct Stats {
    pub reads: AtomicU64,
    pub writes: AtomicU64,
    pub bytes_written: AtomicU64,
    pub zeroings: AtomicU64,
    pub fsyncs: AtomicU64,
    pub blocks_flushed: AtomicU64,
}

impl Stats {
    /// `name value` pairs, one a line.
    pub fn lines(&self) -> String {
        let v = |a: &AtomicU64| a.load(Relaxed);
        format!(
            "reads {}\nwrites {}\nbytes_written {}\nzeroings {}\nfsyncs {}\nblocks_flushed {}\n",
            v(&self.reads),
            v(&self.writes),
            v(&self.bytes_written),
            v(&self.zeroings),
            v(&self.fsyncs),
            v(&self.blocks_flushed)
        )
    }
}

/// What a power cut did.
pub struct Cut {
    /// When the power went (CLOCK_MONOTONIC, ns): no request was served after it.
    pub at_ns: u64,
    /// Unflushed blocks written to the image before the power went (the keep fraction's
    /// share), in order.
    pub kept: Vec<u64>,
    /// Unflushed blocks lost, in order.
    pub dropped: Vec<u64>,
    /// Writing the kept blocks to the image failed (they are lost too).
    pub error: Option<String>,
}

impl Cut {
    /// The report: `name value` lines that tests read.
    pub fn report(&self, seed: u64, keep: f64, stats: &Stats) -> String {
        let list = |v: &[u64]| {
            v.iter()
                .map(|b| b.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        };
        let mut s = format!(
            "cut_at_ns {}\nseed {seed}\nkeep_fraction {keep}\ndropped {}\nkept {}\n",
            self.at_ns,
            self.dropped.len(),
            self.kept.len()
        );
        s += &stats.lines();
        s += &format!("kept_blocks {}\n", list(&self.kept));
        s += &format!("dropped_blocks {}\n", list(&self.dropped));
        if let Some(e) = &self.error {
            s += &format!("error {e}\n");
        }
        s
    }
}

pub struct Disk<I: Image> {
    image: I,
    cache: RwLock<Cache>,
    powered: AtomicBool,
    seed: u64,
    keep: f64,
    pub stats: Stats,
}

impl<I: Image> Disk<I> {
    /// A powered disk over `image` of `size` bytes, whose cut keeps the `keep` fraction of the
    /// unflushed blocks chosen by `seed`.
    pub fn new(image: I, size: u64, seed: u64, keep: f64) -> Disk<I> {
        Disk {
            image,
            cache: RwLock::new(Cache::new(size)),
            powered: AtomicBool::new(true),
            seed,
            keep,
            stats: Stats::default(),
        }
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn keep(&self) -> f64 {
        self.keep
    }

    pub fn powered(&self) -> bool {
        self.powered.load(SeqCst)
    }

    /// Ok while the power is on. Called with the cache's lock held (see the module's docs).
    fn on(&self) -> Res<()> {
        if self.powered() {
            Ok(())
        } else {
            Err(libc::EIO)
        }
    }

    pub fn read(&self, offset: u64, len: u64) -> Res<Vec<u8>> {
        let c = self.cache.read();
        self.on()?;
        self.stats.reads.fetch_add(1, Relaxed);
        c.read(&self.image, offset, len).map_err(errno)
    }

    /// Takes `data` into the cache: the number of bytes taken (short at the image's end).
    pub fn write(&self, offset: u64, data: &[u8]) -> Res<usize> {
        let mut c = self.cache.write();
        self.on()?;
        self.stats.writes.fetch_add(1, Relaxed);
        let n = c.write(&self.image, offset, data).map_err(errno)?;
        self.stats.bytes_written.fetch_add(n as u64, Relaxed);
        Ok(n)
    }

    /// Zeroes a range in the cache (a discard or a write of zeros).
    pub fn zero(&self, offset: u64, len: u64) -> Res<()> {
        let mut c = self.cache.write();
        self.on()?;
        self.stats.zeroings.fetch_add(1, Relaxed);
        c.zero(&self.image, offset, len).map_err(errno)
    }

    /// A cache flush: every cached block to the image, then the image made durable. The
    /// number of blocks written. Fails with EIO, its remaining blocks still cached, when the
    /// power goes during it; and a flush the power outlived only in part is not acknowledged
    /// (EIO) even if its blocks reached the image, as a disk that lost power answers nothing.
    pub fn flush(&self) -> Res<usize> {
        let n = {
            let mut c = self.cache.write();
            self.on()?;
            self.stats.fsyncs.fetch_add(1, Relaxed);
            let numbers = c.numbers();
            let n = c
                .write_out(&self.image, &numbers, || self.powered())
                .map_err(errno)?;
            self.stats.blocks_flushed.fetch_add(n as u64, Relaxed);
            self.on()?;
            n
        };
        // Outside the lock: the blocks are on the image already, and reads and writes need
        // not wait for the image's own disk.
        self.image.sync().map_err(errno)?;
        self.on()?;
        Ok(n)
    }

    /// The power cut: from now on every request fails with EIO; the cached blocks that the
    /// keep fraction and the seed choose reach the image, the others are lost. None when the
    /// power was off already.
    pub fn cut(&self) -> Option<Cut> {
        if !self.powered.swap(false, SeqCst) {
            return None;
        }
        let at_ns = monotonic_ns();
        // Waits for the requests being served (a flush stops at its next block).
        let mut c = self.cache.write();
        let (kept, dropped): (Vec<u64>, Vec<u64>) = c
            .numbers()
            .into_iter()
            .partition(|&b| choose::survives(self.seed, b, self.keep));
        c.drop_blocks(&dropped);
        let written = c.write_out(&self.image, &kept, || true);
        // Whatever could not be written is lost with the rest.
        c.drop_blocks(&kept);
        let error = match written.and_then(|_| self.image.sync()) {
            Ok(()) => None,
            Err(e) => Some(e.to_string()),
        };
        Some(Cut {
            at_ns,
            kept,
            dropped,
            error,
        })
    }

    /// An orderly power-off (the disk is unmounted without a cut): the cache is written out,
    /// as a drive writes its cache when the system shuts down. Nothing to do after a cut.
    pub fn shutdown(&self) -> Res<usize> {
        if !self.powered() {
            return Ok(0);
        }
        self.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::tests::Mem;
    use crate::cache::BLOCK;
    use std::sync::Arc;
    use std::time::Duration;

    const N: u64 = 64;

    fn disk(seed: u64, keep: f64) -> Disk<Mem> {
        Disk::new(Mem::new((N * BLOCK) as usize, 0), N * BLOCK, seed, keep)
    }

    /// Writes block b full of b + 1 for every block.
    fn fill(d: &Disk<Mem>) {
        for b in 0..N {
            assert_eq!(d.write(b * BLOCK, &[b as u8 + 1; 4096]), Ok(4096));
        }
    }

    /// The blocks whose new contents are on the image.
    fn on_image(d: &Disk<Mem>) -> Vec<u64> {
        let img = d.image.bytes.lock();
        (0..N)
            .filter(|&b| img[(b * BLOCK) as usize] == b as u8 + 1)
            .collect()
    }

    #[test]
    fn writes_stay_in_the_cache_until_a_flush() {
        let d = disk(0, 0.0);
        fill(&d);
        assert_eq!(d.cache.read().len(), N as usize);
        assert!(on_image(&d).is_empty());
        assert_eq!(d.read(5 * BLOCK, 2).unwrap(), [6, 6]);
        assert_eq!(d.flush(), Ok(N as usize));
        assert_eq!(*d.image.syncs.lock(), 1, "the image made durable");
        assert_eq!(on_image(&d).len(), N as usize);
        assert_eq!(d.cache.read().len(), 0);
        assert_eq!(d.read(5 * BLOCK, 2).unwrap(), [6, 6]);
    }

    #[test]
    fn a_cut_with_nothing_kept_loses_what_was_not_flushed() {
        let d = disk(0, 0.0);
        d.write(0, &[9; 4096]).unwrap();
        d.flush().unwrap();
        fill(&d);
        let cut = d.cut().expect("the first cut");
        assert_eq!(cut.kept, Vec::<u64>::new());
        assert_eq!(cut.dropped, (0..N).collect::<Vec<_>>());
        // Block 0 holds what the flush wrote, the others what they held before.
        let img = d.image.bytes.lock();
        assert_eq!(img[0], 9);
        assert_eq!(img[BLOCK as usize], 0);
    }

    #[test]
    fn after_a_cut_every_request_fails_with_eio() {
        let d = disk(0, 0.0);
        fill(&d);
        d.cut().unwrap();
        assert_eq!(d.read(0, 1), Err(libc::EIO));
        assert_eq!(d.write(0, &[1]), Err(libc::EIO));
        assert_eq!(d.zero(0, 1), Err(libc::EIO));
        assert_eq!(d.flush(), Err(libc::EIO));
        assert!(d.cut().is_none(), "the power is off already");
        assert_eq!(d.shutdown(), Ok(0));
    }

    #[test]
    fn a_cut_keeping_everything_writes_everything() {
        let d = disk(3, 1.0);
        fill(&d);
        let cut = d.cut().unwrap();
        assert_eq!(cut.kept.len(), N as usize);
        assert!(cut.dropped.is_empty());
        assert_eq!(on_image(&d).len(), N as usize);
    }

    #[test]
    fn the_kept_blocks_are_the_seeds_choice_and_reach_the_image() {
        let run = |seed| {
            let d = disk(seed, 0.5);
            fill(&d);
            let cut = d.cut().unwrap();
            assert_eq!(
                on_image(&d),
                cut.kept,
                "kept blocks on the image, no others"
            );
            assert_eq!(cut.kept.len() + cut.dropped.len(), N as usize);
            let want: Vec<u64> = (0..N).filter(|&b| choose::survives(seed, b, 0.5)).collect();
            assert_eq!(cut.kept, want);
            cut.kept
        };
        assert_eq!(run(11), run(11), "the same seed keeps the same blocks");
        assert_ne!(run(11), run(12), "another seed keeps others");
    }

    #[test]
    fn a_report_names_every_block() {
        let d = disk(8, 0.5);
        fill(&d);
        let cut = d.cut().unwrap();
        let r = cut.report(8, 0.5, &d.stats);
        let field = |name: &str| {
            r.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
                .unwrap_or_else(|| panic!("no {name} in {r}"))
                .to_string()
        };
        assert_eq!(field("writes"), N.to_string());
        assert_eq!(field("kept"), cut.kept.len().to_string());
        let listed: Vec<u64> = field("kept_blocks")
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        assert_eq!(listed, cut.kept);
    }

    #[test]
    fn an_orderly_shutdown_writes_the_cache() {
        let d = disk(0, 0.0);
        fill(&d);
        assert_eq!(d.shutdown(), Ok(N as usize));
        assert_eq!(on_image(&d).len(), N as usize);
    }

    /// An image whose writes are slow, so that a cut lands in the middle of a flush.
    struct Slow(Mem);

    impl Image for Slow {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            self.0.read_at(buf, offset)
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
            std::thread::sleep(Duration::from_millis(3));
            self.0.write_at(buf, offset)
        }
        fn zero(&self, offset: u64, len: u64) -> io::Result<()> {
            self.0.zero(offset, len)
        }
        fn sync(&self) -> io::Result<()> {
            self.0.sync()
        }
    }

    #[test]
    fn a_cut_during_a_flush_loses_exactly_the_blocks_not_yet_written() {
        let d = Arc::new(Disk::new(
            Slow(Mem::new((N * BLOCK) as usize, 0)),
            N * BLOCK,
            0,
            0.0,
        ));
        for b in 0..N {
            d.write(b * BLOCK, &[b as u8 + 1; 4096]).unwrap();
        }
        let flusher = {
            let d = d.clone();
            std::thread::spawn(move || d.flush())
        };
        // About a third of the way through the flush (64 blocks x 3 ms); whatever the timing,
        // every block is either flushed or dropped, never both, never neither.
        std::thread::sleep(Duration::from_millis(60));
        let cut = d.cut().unwrap();
        let flushed = flusher.join().unwrap();
        let img = d.image.0.bytes.lock();
        let on_image: Vec<u64> = (0..N)
            .filter(|&b| img[(b * BLOCK) as usize] == b as u8 + 1)
            .collect();
        match flushed {
            Ok(n) => assert_eq!((n, cut.dropped.len()), (N as usize, 0)),
            Err(e) => {
                assert_eq!(e, libc::EIO);
                assert_eq!(on_image.len() + cut.dropped.len(), N as usize);
                assert!(cut.dropped.iter().all(|b| !on_image.contains(b)));
                // The flush goes in order: what it wrote is a prefix.
                assert_eq!(on_image, (0..on_image.len() as u64).collect::<Vec<_>>());
            }
        }
    }
}
