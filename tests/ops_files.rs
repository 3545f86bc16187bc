//! File data operations through a mirrorfs mount: every write must reach every leg.

#[macro_use]
mod common;

use common::*;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};

const MIB: usize = 1 << 20;

legs_test!(
    create_write_read,
    large_and_unaligned_writes,
    pread_pwrite_at_offsets,
    truncate_up_and_down,
    open_flags_append_trunc_excl,
    fsync_and_fdatasync,
    o_direct_write_read,
    shared_mmap_write,
    fallocate_and_punch_hole,
    seek_data_and_hole,
    copy_file_range_between_files,
);

fn read_all(p: &std::path::Path) -> Vec<u8> {
    fs::read(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
}

fn create_write_read(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();

    let p = m.path("hello.txt");
    fs::write(&p, b"hello, mirror\n").expect("write hello.txt");
    assert_eq!(read_all(&p), b"hello, mirror\n");
    assert_eq!(fs::metadata(&p).unwrap().len(), 14);

    // An empty file.
    File::create(m.path("empty")).expect("create empty");
    assert_eq!(fs::metadata(m.path("empty")).unwrap().len(), 0);

    // Rewrite in place with a shorter content (fs::write truncates).
    fs::write(&p, b"short").unwrap();
    assert_eq!(read_all(&p), b"short");

    // Files in a subdirectory.
    fs::create_dir(m.path("sub")).unwrap();
    fs::write(m.path("sub/a"), b"A").unwrap();
    assert_eq!(read_all(&m.path("sub/a")), b"A");

    assert_content_on_legs(m.legs(), "hello.txt", b"short");
    assert_content_on_legs(m.legs(), "empty", b"");
    assert_content_on_legs(m.legs(), "sub/a", b"A");
    m.finish();
}

fn large_and_unaligned_writes(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();

    // One write() call larger than max_write: the kernel splits it.
    let big = pattern(3 * MIB + 123, 1);
    {
        let mut f = File::create(m.path("big")).unwrap();
        f.write_all(&big).expect("write 3 MiB");
    }
    assert_bytes_eq(&read_all(&m.path("big")), &big, "big through the mount");
    assert_content_on_legs(m.legs(), "big", &big);

    // Many small writes at odd sizes and offsets, crossing page boundaries.
    let mut model = vec![0u8; 0];
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(m.path("unaligned"))
        .unwrap();
    let mut off = 1usize;
    for (i, len) in [1usize, 7, 511, 513, 4095, 4097, 65537, 3, 131071]
        .into_iter()
        .enumerate()
    {
        let data = pattern(len, 100 + i as u64);
        f.write_all_at(&data, off as u64).expect("pwrite unaligned");
        if model.len() < off + len {
            model.resize(off + len, 0);
        }
        model[off..off + len].copy_from_slice(&data);
        off = off + len / 2 + 4093; // overlapping, unaligned
    }
    drop(f);
    assert_bytes_eq(&read_all(&m.path("unaligned")), &model, "unaligned file");
    assert_content_on_legs(m.legs(), "unaligned", &model);

    // Reading back with a small unaligned buffer.
    let mut f = File::open(m.path("big")).unwrap();
    f.seek(SeekFrom::Start(4097)).unwrap();
    let mut buf = vec![0u8; 10001];
    f.read_exact(&mut buf).unwrap();
    assert_bytes_eq(&buf, &big[4097..4097 + 10001], "unaligned read of big");
    drop(f);
    m.finish();
}

/// A small fsx: random pwrite/pread/ftruncate on one fd, checked against a model.
fn pread_pwrite_at_offsets(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    let p = m.path("fsx");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    let mut model: Vec<u8> = Vec::new();
    let mut x: u64 = 0x1234_5678_9abc_def1;
    let mut rnd = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    for step in 0..300u64 {
        match rnd(10) {
            0..=4 => {
                let off = rnd(600_000) as usize;
                let len = 1 + rnd(70_000) as usize;
                let data = pattern(len, step + 7);
                f.write_all_at(&data, off as u64)
                    .unwrap_or_else(|e| panic!("step {step}: pwrite {len}@{off}: {e}"));
                if model.len() < off + len {
                    model.resize(off + len, 0);
                }
                model[off..off + len].copy_from_slice(&data);
            }
            5..=7 => {
                let off = rnd(700_000) as usize;
                let len = 1 + rnd(100_000) as usize;
                let mut buf = vec![0u8; len];
                let got = read_at_full(&f, &mut buf, off as u64);
                let want: &[u8] = if off >= model.len() {
                    &[]
                } else {
                    &model[off..(off + len).min(model.len())]
                };
                assert_bytes_eq(
                    &buf[..got],
                    want,
                    &format!("step {step}: pread {len}@{off}"),
                );
            }
            _ => {
                let len = rnd(650_000) as usize;
                f.set_len(len as u64)
                    .unwrap_or_else(|e| panic!("step {step}: ftruncate {len}: {e}"));
                model.resize(len, 0);
            }
        }
        assert_eq!(
            f.metadata().unwrap().len(),
            model.len() as u64,
            "step {step}: size"
        );
    }
    drop(f);
    assert_bytes_eq(&read_all(&p), &model, "fsx file at the end");
    assert_content_on_legs(m.legs(), "fsx", &model);
    m.finish();
}

fn read_at_full(f: &File, buf: &mut [u8], off: u64) -> usize {
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], off + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("pread: {e}"),
        }
    }
    n
}

fn truncate_up_and_down(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    let p = m.path("t");
    let data = pattern(100_000, 3);
    fs::write(&p, &data).unwrap();

    // truncate(2) by path, down then up.
    truncate(&p, 5000).expect("truncate down");
    assert_eq!(fs::metadata(&p).unwrap().len(), 5000);
    assert_bytes_eq(&read_all(&p), &data[..5000], "after truncate down");
    truncate(&p, 200_000).expect("truncate up");
    let mut want = data[..5000].to_vec();
    want.resize(200_000, 0);
    assert_bytes_eq(&read_all(&p), &want, "after truncate up (zeros)");
    assert_content_on_legs(m.legs(), "t", &want);

    // ftruncate(2) on an open fd, down then up.
    let f = OpenOptions::new().write(true).open(&p).unwrap();
    f.set_len(7).expect("ftruncate down");
    assert_eq!(f.metadata().unwrap().len(), 7);
    f.set_len(MIB as u64 + 3).expect("ftruncate up");
    drop(f);
    let mut want = data[..7].to_vec();
    want.resize(MIB + 3, 0);
    assert_bytes_eq(&read_all(&p), &want, "after ftruncate");
    assert_content_on_legs(m.legs(), "t", &want);

    // To zero.
    truncate(&p, 0).unwrap();
    assert_eq!(fs::metadata(&p).unwrap().len(), 0);
    assert_content_on_legs(m.legs(), "t", b"");
    m.finish();
}

fn open_flags_append_trunc_excl(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    let p = m.path("f");

    // O_CREAT|O_EXCL on a new name works and applies the mode.
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&p)
            .expect("O_CREAT|O_EXCL on a new name");
        f.write_all(b"abc").unwrap();
    }
    assert_eq!(
        fs::metadata(&p).unwrap().mode() & 0o7777,
        0o600 & !current_umask()
    );
    // ... and fails with EEXIST on an existing one, leaving it alone.
    assert_errno(
        OpenOptions::new().write(true).create_new(true).open(&p),
        libc::EEXIST,
        "O_CREAT|O_EXCL on an existing file",
    );
    assert_eq!(read_all(&p), b"abc");

    // O_APPEND: writes go to the end, also with two fds interleaved.
    {
        let mut a = OpenOptions::new().append(true).open(&p).unwrap();
        let mut b = OpenOptions::new().append(true).open(&p).unwrap();
        a.write_all(b"def").unwrap();
        b.write_all(b"ghi").unwrap();
        a.write_all(b"jkl").unwrap();
        // pwrite on an O_APPEND fd appends on Linux.
        b.write_all_at(b"mno", 0).unwrap();
    }
    assert_eq!(read_all(&p), b"abcdefghijklmno");
    assert_content_on_legs(m.legs(), "f", b"abcdefghijklmno");

    // O_TRUNC empties the file.
    {
        let mut f = OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&p)
            .unwrap();
        assert_eq!(f.metadata().unwrap().len(), 0, "size right after O_TRUNC");
        f.write_all(b"xy").unwrap();
    }
    assert_eq!(read_all(&p), b"xy");
    // O_TRUNC with O_RDONLY-less read/write open on an existing file.
    OpenOptions::new()
        .read(true)
        .write(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    assert_eq!(fs::metadata(&p).unwrap().len(), 0);
    assert_content_on_legs(m.legs(), "f", b"");

    // Opening a missing file without O_CREAT: ENOENT.
    assert_errno(File::open(m.path("missing")), libc::ENOENT, "open missing");
    // Opening a directory for writing: EISDIR.
    fs::create_dir(m.path("d")).unwrap();
    assert_errno(
        OpenOptions::new().write(true).open(m.path("d")),
        libc::EISDIR,
        "open a directory O_WRONLY",
    );
    m.finish();
}

fn fsync_and_fdatasync(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    let p = m.path("synced");
    let data = pattern(300_000, 9);
    {
        let mut f = File::create(&p).unwrap();
        f.write_all(&data).unwrap();
        f.sync_all().expect("fsync");
        f.write_all(b"tail").unwrap();
        f.sync_data().expect("fdatasync");
    }
    let mut want = data.clone();
    want.extend_from_slice(b"tail");
    assert_content_on_legs(m.legs(), "synced", &want);

    // fsync on a read-only fd and on a directory.
    File::open(&p)
        .unwrap()
        .sync_all()
        .expect("fsync O_RDONLY fd");
    fs::create_dir(m.path("dir")).unwrap();
    File::open(m.path("dir"))
        .unwrap()
        .sync_all()
        .expect("fsync a directory");
    File::open(m.mnt())
        .unwrap()
        .sync_all()
        .expect("fsync the mount root");
    m.finish();
}

fn o_direct_write_read(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    let p = m.path("direct");
    let len = MIB;
    let data = pattern(len, 11);
    let mut wbuf = AlignedBuf::new(len, 4096);
    wbuf.as_mut_slice().copy_from_slice(&data);
    {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(&p)
            .expect("open with O_DIRECT");
        f.write_all_at(wbuf.as_slice(), 0)
            .expect("O_DIRECT write 1 MiB at 0");
        f.write_all_at(&wbuf.as_slice()[..8192], 3 * 4096)
            .expect("O_DIRECT write 8 KiB at 12 KiB");
        let mut rbuf = AlignedBuf::new(len, 4096);
        let got = read_at_full(&f, rbuf.as_mut_slice(), 0);
        assert_eq!(got, len, "O_DIRECT read length");
        let mut want = data.clone();
        want.copy_within(0..8192, 3 * 4096);
        assert_bytes_eq(rbuf.as_slice(), &want, "O_DIRECT read back");
    }
    let mut want = data.clone();
    want.copy_within(0..8192, 3 * 4096);
    // Through the page cache too.
    assert_bytes_eq(&read_all(&p), &want, "buffered read after O_DIRECT writes");
    assert_content_on_legs(m.legs(), "direct", &want);
    m.finish();
}

fn shared_mmap_write(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    let p = m.path("mapped");
    let len = 256 * 1024 + 100;
    let mut want = pattern(len, 21);
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&p)
        .unwrap();
    f.write_all_at(&want, 0).unwrap();
    let mut map = SharedMap::new(&f, len);
    let s = map.bytes();
    assert_bytes_eq(s, &want, "mapping shows the written data");
    // Dirty a few pages, one byte in the last partial page too.
    let patch = pattern(10_000, 22);
    s[5000..15000].copy_from_slice(&patch);
    want[5000..15000].copy_from_slice(&patch);
    s[len - 1] = 0xAB;
    want[len - 1] = 0xAB;
    s[200_000] = 0xCD;
    want[200_000] = 0xCD;
    map.sync();
    // Read back through another fd while still mapped.
    let other = read_all(&p);
    assert_bytes_eq(&other, &want, "read through another fd after msync");
    drop(map);
    drop(f);
    assert_eq!(fs::metadata(&p).unwrap().len(), len as u64);
    assert_content_on_legs(m.legs(), "mapped", &want);
    m.finish();
}

fn fallocate(f: &File, mode: i32, off: i64, len: i64) -> std::io::Result<()> {
    cvt(unsafe { libc::fallocate(f.as_raw_fd(), mode, off, len) })?;
    Ok(())
}

fn fallocate_and_punch_hole(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    let p = m.path("falloc");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&p)
        .unwrap();

    // Mode 0 extends the file; the new range reads as zeros.
    fallocate(&f, 0, 0, MIB as i64).expect("fallocate mode 0");
    assert_eq!(
        f.metadata().unwrap().len(),
        MIB as u64,
        "size after fallocate"
    );
    assert_bytes_eq(&read_all(&p), &vec![0u8; MIB], "fallocated range");
    assert_content_on_legs(m.legs(), "falloc", &vec![0u8; MIB]);

    // Fill with data, then punch a hole in the middle.
    let mut want = pattern(MIB, 31);
    f.write_all_at(&want, 0).unwrap();
    let (hole_off, hole_len) = (65536usize, 131072usize);
    fallocate(
        &f,
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        hole_off as i64,
        hole_len as i64,
    )
    .expect("fallocate PUNCH_HOLE|KEEP_SIZE");
    want[hole_off..hole_off + hole_len].fill(0);
    assert_eq!(
        f.metadata().unwrap().len(),
        MIB as u64,
        "size after punch hole"
    );
    let mut buf = vec![0xFFu8; hole_len];
    assert_eq!(read_at_full(&f, &mut buf, hole_off as u64), hole_len);
    assert!(
        buf.iter().all(|b| *b == 0),
        "punched hole does not read as zeros through the mount"
    );
    assert_bytes_eq(&read_all(&p), &want, "file after punch hole");
    assert_content_on_legs(m.legs(), "falloc", &want);

    // KEEP_SIZE beyond EOF: size unchanged. Mode 0 beyond EOF: size grows.
    fallocate(&f, libc::FALLOC_FL_KEEP_SIZE, MIB as i64, MIB as i64)
        .expect("fallocate KEEP_SIZE beyond EOF");
    assert_eq!(f.metadata().unwrap().len(), MIB as u64);
    fallocate(&f, 0, MIB as i64, 65536).expect("fallocate mode 0 beyond EOF");
    assert_eq!(f.metadata().unwrap().len(), MIB as u64 + 65536);
    want.resize(MIB + 65536, 0);
    drop(f);
    assert_content_on_legs(m.legs(), "falloc", &want);
    for leg in m.leg_paths("falloc") {
        assert_eq!(
            fs::metadata(&leg).unwrap().len(),
            MIB as u64 + 65536,
            "size of {}",
            leg.display()
        );
    }
    m.finish();
}

fn lseek(f: &File, off: i64, whence: i32) -> std::io::Result<i64> {
    cvt(unsafe { libc::lseek(f.as_raw_fd(), off, whence) })
}

fn seek_data_and_hole(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    let p = m.path("sparse");
    let chunk = pattern(65536, 41);
    let far = 4 * MIB as u64;
    {
        let f = File::create(&p).unwrap();
        f.write_all_at(&chunk, 0).unwrap();
        f.write_all_at(&chunk, far).unwrap();
        f.sync_all().unwrap();
    }
    let size = far + 65536;
    assert_eq!(fs::metadata(&p).unwrap().len(), size);

    let via_mnt = File::open(&p).unwrap();
    let on_leg = File::open(m.leg(0).join("sparse")).unwrap();
    // What the backing filesystem says is the reference.
    let leg_hole = lseek(&on_leg, 0, libc::SEEK_HOLE).unwrap();
    let leg_data = lseek(&on_leg, 65536, libc::SEEK_DATA).unwrap();
    assert!(
        leg_hole < far as i64 && leg_data >= 65536,
        "the leg filesystem does not report holes (hole at {leg_hole}, data at {leg_data}); \
         the test cannot check SEEK_HOLE"
    );
    assert_eq!(
        lseek(&via_mnt, 0, libc::SEEK_DATA).expect("SEEK_DATA 0"),
        0,
        "SEEK_DATA from 0"
    );
    assert_eq!(
        lseek(&via_mnt, 0, libc::SEEK_HOLE).expect("SEEK_HOLE 0"),
        leg_hole,
        "SEEK_HOLE from 0 (the leg says {leg_hole})"
    );
    assert_eq!(
        lseek(&via_mnt, 65536, libc::SEEK_DATA).expect("SEEK_DATA 64K"),
        leg_data,
        "SEEK_DATA from 64 KiB (the leg says {leg_data})"
    );
    assert_eq!(
        lseek(&via_mnt, far as i64, libc::SEEK_HOLE).expect("SEEK_HOLE far"),
        size as i64,
        "SEEK_HOLE in the last extent = EOF"
    );
    assert_errno(
        lseek(&via_mnt, size as i64, libc::SEEK_DATA),
        libc::ENXIO,
        "SEEK_DATA at EOF",
    );
    // Plain seeks still work.
    assert_eq!(lseek(&via_mnt, 10, libc::SEEK_SET).unwrap(), 10);
    assert_eq!(
        lseek(&via_mnt, -1, libc::SEEK_END).unwrap(),
        size as i64 - 1
    );
    drop(via_mnt);
    drop(on_leg);

    let mut want = vec![0u8; size as usize];
    want[..65536].copy_from_slice(&chunk);
    want[far as usize..].copy_from_slice(&chunk);
    assert_content_on_legs(m.legs(), "sparse", &want);
    m.finish();
}

fn copy_file_range_between_files(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    let src_data = pattern(MIB + 4096 + 77, 51);
    fs::write(m.path("src"), &src_data).unwrap();
    let src = File::open(m.path("src")).unwrap();
    let dst = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(m.path("dst"))
        .unwrap();

    // With explicit offsets: 500000 bytes from 4096 to 100.
    let mut off_in: i64 = 4096;
    let mut off_out: i64 = 100;
    let mut left = 500_000usize;
    while left > 0 {
        let r = unsafe {
            libc::copy_file_range(
                src.as_raw_fd(),
                &mut off_in,
                dst.as_raw_fd(),
                &mut off_out,
                left,
                0,
            )
        };
        let k = cvt(r).expect("copy_file_range with offsets");
        assert!(k > 0, "copy_file_range returned 0 before the end");
        left -= k as usize;
    }
    assert_eq!(off_in, 4096 + 500_000);
    assert_eq!(off_out, 100 + 500_000);
    let mut want = vec![0u8; 100];
    want.extend_from_slice(&src_data[4096..4096 + 500_000]);
    assert_bytes_eq(
        &read_all(&m.path("dst")),
        &want,
        "dst after copy_file_range",
    );

    // Whole file, using the file offsets, into a second destination.
    let dst2 = File::create(m.path("dst2")).unwrap();
    let mut left = src_data.len();
    while left > 0 {
        let r = unsafe {
            libc::copy_file_range(
                src.as_raw_fd(),
                std::ptr::null_mut(),
                dst2.as_raw_fd(),
                std::ptr::null_mut(),
                left,
                0,
            )
        };
        let k = cvt(r).expect("copy_file_range whole file");
        assert!(k > 0, "copy_file_range returned 0 before the end");
        left -= k as usize;
    }
    drop((src, dst, dst2));
    assert_bytes_eq(&read_all(&m.path("dst2")), &src_data, "dst2");
    assert_content_on_legs(m.legs(), "dst", &want);
    assert_content_on_legs(m.legs(), "dst2", &src_data);
    m.finish();
}

legs_test!(
    offsets_beyond_4gib,
    private_mmap_stays_private,
    fallocate_zero_range,
    rename_over_open_file_keeps_old_data
);

/// 64-bit offsets all the way down: a sparse file with data past 4 GiB.
fn offsets_beyond_4gib(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    let off: u64 = 5 * (1 << 30) + 123;
    let data = pattern(10_000, 61);
    {
        let f = File::create(m.path("huge")).unwrap();
        f.write_all_at(&data, off).expect("pwrite at 5 GiB");
    }
    let f = File::open(m.path("huge")).unwrap();
    assert_eq!(f.metadata().unwrap().len(), off + data.len() as u64);
    let mut buf = vec![0u8; data.len()];
    assert_eq!(read_at_full(&f, &mut buf, off), data.len());
    assert_bytes_eq(&buf, &data, "data at 5 GiB through the mount");
    let mut zeros = vec![1u8; 4096];
    assert_eq!(read_at_full(&f, &mut zeros, 1 << 32), 4096);
    assert!(zeros.iter().all(|b| *b == 0), "hole at 4 GiB is not zeros");
    for leg in m.leg_paths("huge") {
        let lf = File::open(&leg).unwrap();
        assert_eq!(
            lf.metadata().unwrap().len(),
            off + data.len() as u64,
            "{}",
            leg.display()
        );
        let mut buf = vec![0u8; data.len()];
        assert_eq!(read_at_full(&lf, &mut buf, off), data.len());
        assert_bytes_eq(&buf, &data, &format!("data at 5 GiB on {}", leg.display()));
    }
    drop(f);
    // The leg comparison reads whole files; shrink it first.
    truncate(m.path("huge"), 1 << 20).unwrap();
    m.finish();
}

/// Writes to a MAP_PRIVATE mapping never reach the file or the legs.
fn private_mmap_stays_private(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    let want = pattern(65536, 71);
    fs::write(m.path("p"), &want).unwrap();
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.path("p"))
        .unwrap();
    unsafe {
        let ptr = libc::mmap(
            std::ptr::null_mut(),
            65536,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(ptr, libc::MAP_FAILED, "mmap MAP_PRIVATE");
        std::ptr::write_bytes(ptr as *mut u8, 0xEE, 65536);
        libc::msync(ptr, 65536, libc::MS_SYNC);
        libc::munmap(ptr, 65536);
    }
    f.sync_all().unwrap();
    drop(f);
    assert_bytes_eq(
        &read_all(&m.path("p")),
        &want,
        "file after MAP_PRIVATE writes",
    );
    assert_content_on_legs(m.legs(), "p", &want);
    m.finish();
}

/// FALLOC_FL_ZERO_RANGE (used by fsx): zeros a range, on every leg.
fn fallocate_zero_range(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    let mut want = pattern(300_000, 81);
    fs::write(m.path("z"), &want).unwrap();
    let f = OpenOptions::new().write(true).open(m.path("z")).unwrap();
    fallocate(&f, libc::FALLOC_FL_ZERO_RANGE, 5000, 100_000).expect("FALLOC_FL_ZERO_RANGE");
    want[5000..105_000].fill(0);
    fallocate(
        &f,
        libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
        290_000,
        50_000,
    )
    .expect("FALLOC_FL_ZERO_RANGE|KEEP_SIZE past EOF");
    want[290_000..].fill(0);
    drop(f);
    assert_eq!(fs::metadata(m.path("z")).unwrap().len(), 300_000);
    assert_bytes_eq(&read_all(&m.path("z")), &want, "after ZERO_RANGE");
    assert_content_on_legs(m.legs(), "z", &want);
    m.finish();
}

/// An fd open on the old target of a rename keeps reading the old data.
fn rename_over_open_file_keeps_old_data(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    fs::write(m.path("old"), b"old data").unwrap();
    fs::write(m.path("new"), b"new data!").unwrap();
    let mut held = File::open(m.path("old")).unwrap();
    fs::rename(m.path("new"), m.path("old")).unwrap();
    let mut s = Vec::new();
    held.read_to_end(&mut s).unwrap();
    assert_eq!(
        s, b"old data",
        "the held fd must still see the replaced file"
    );
    assert_eq!(read_all(&m.path("old")), b"new data!");
    drop(held);
    assert_content_on_legs(m.legs(), "old", b"new data!");
    m.finish();
}

/// Pages of the file `p` in the page cache (`mincore` over a mapping of it).
fn cached_pages(p: &std::path::Path) -> usize {
    let f = File::open(p).unwrap();
    let len = f.metadata().unwrap().len() as usize;
    if len == 0 {
        return 0;
    }
    let page = 4096;
    let pages = len.div_ceil(page);
    // SAFETY: a shared read-only mapping of an open file, unmapped before return; `vec`
    // holds one byte per page of it, as mincore wants.
    unsafe {
        let at = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(at, libc::MAP_FAILED, "mmap {}", p.display());
        let mut vec = vec![0u8; pages];
        let r = libc::mincore(at, len, vec.as_mut_ptr());
        libc::munmap(at, len);
        assert_eq!(r, 0, "mincore {}", p.display());
        vec.iter().filter(|&&b| b & 1 == 1).count()
    }
}

/// Large block-aligned writes are streamed: once written back, they leave the legs' page cache
/// (RWF_DONTCACHE), which would only hold a second copy of what the mount's cache holds. Small
/// writes stay cached on the legs. A leg whose filesystem cannot (tmpfs) gets the same data
/// by a plain write. The same with `leg_timeout`, whose writes run on owned copies.
#[test]
fn streamed_writes_leave_the_legs_page_cache() {
    require_fuse!();
    streamed_writes_with(&[]);
    streamed_writes_with(&["leg_timeout=30"]);
}

fn streamed_writes_with(options: &[&str]) {
    let mut dirs = TestDirs::new(2);
    dirs.mount_tmpfs_leg(1, "64m");
    let m = TestMirror::new(2).with_dirs(dirs).options(options).mount();

    // 8 MiB in 1 MiB writes, then fsync: every page written back.
    let big = pattern(8 * MIB, 7);
    let mut f = File::create(m.path("big")).unwrap();
    for chunk in big.chunks(MIB) {
        f.write_all(chunk).unwrap();
    }
    f.sync_all().unwrap();
    drop(f);
    // The pages go when their writeback ends, which fsync waited for; the last ones may be
    // dropped a moment later (a page still locked is left to the next try).
    let on_disk_leg = m.leg(0).join("big");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut cached = cached_pages(&on_disk_leg);
    while cached > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        cached = cached_pages(&on_disk_leg);
    }
    assert_eq!(
        cached, 0,
        "pages of a streamed 8 MiB file still cached on the disk leg ({options:?})"
    );
    // The mount still reads it, and both legs hold it (the tmpfs leg by a plain write).
    assert_bytes_eq(&read_all(&m.path("big")), &big, "big through the mount");
    assert_content_on_legs(m.legs(), "big", &big);

    // 256 KiB in 8 KiB writes: the legs keep those pages.
    let small = pattern(256 << 10, 8);
    let mut f = File::create(m.path("small")).unwrap();
    for chunk in small.chunks(8 << 10) {
        f.write_all(chunk).unwrap();
    }
    f.sync_all().unwrap();
    drop(f);
    assert_eq!(
        cached_pages(&m.leg(0).join("small")),
        64,
        "a file written 8 KiB at a time is cached on the disk leg"
    );
    assert_content_on_legs(m.legs(), "small", &small);

    // A large write that ends inside a block stays cached: the next write's checksum reads
    // that block back.
    let odd = pattern(MIB + 100, 9);
    fs::write(m.path("odd"), &odd).unwrap();
    File::open(m.path("odd")).unwrap().sync_all().unwrap();
    assert!(
        cached_pages(&m.leg(0).join("odd")) > 0,
        "a write that ends inside a block left the disk leg's cache"
    );
    assert_content_on_legs(m.legs(), "odd", &odd);
    m.finish();
}
