//! The checksum of one block: CRC-32C of the block's bytes, zero-padded to [`BLOCK`].
//!
//! Padding makes the end of a file and holes need no special case: a block past the end of
//! the file, a hole, and the unwritten tail of the last block all read as zeros, and a block
//! of zeros has the one checksum [`zero_sum`]. The choice (CRC-32C over xxh3-64, 4 KiB over
//! 64 KiB) and its measurements are in `docs/integrity.md`.

/// Bytes covered by one checksum.
pub const BLOCK: u64 = 4096;
/// Checksums kept together in one record of the store (1 MiB of data).
pub const CHUNK_BLOCKS: u64 = 256;
/// Bytes of data one record covers.
pub const CHUNK_BYTES: u64 = BLOCK * CHUNK_BLOCKS;

/// One block's checksum.
pub type Sum = u32;

static ZEROS: [u8; BLOCK as usize] = [0; BLOCK as usize];

/// The checksum of `data` (at most one block), zero-padded to a whole block.
pub fn sum(data: &[u8]) -> Sum {
    debug_assert!(data.len() as u64 <= BLOCK);
    let len = data.len().min(BLOCK as usize);
    let c = crc32c::crc32c(&data[..len]);
    if len < BLOCK as usize {
        crc32c::crc32c_append(c, &ZEROS[..BLOCK as usize - len])
    } else {
        c
    }
}

/// The checksum of a block of zeros: a hole, or any block past the end of the file.
pub fn zero_sum() -> Sum {
    static Z: std::sync::OnceLock<Sum> = std::sync::OnceLock::new();
    *Z.get_or_init(|| sum(&ZEROS))
}

/// The checksums of `data`, which starts at a block boundary; a partial last block is padded.
pub fn sums_of(data: &[u8]) -> Vec<Sum> {
    data.chunks(BLOCK as usize).map(sum).collect()
}

/// The block holding byte `offset`.
pub fn block_of(offset: u64) -> u64 {
    offset / BLOCK
}

/// `offset` rounded down to a block boundary.
pub fn align_down(offset: u64) -> u64 {
    offset - offset % BLOCK
}

/// `offset` rounded up to a block boundary (saturating).
pub fn align_up(offset: u64) -> u64 {
    match offset % BLOCK {
        0 => offset,
        r => offset.saturating_add(BLOCK - r),
    }
}

/// The record holding block `block`'s checksum, and its place in the record.
pub fn chunk_of(block: u64) -> (u64, usize) {
    (block / CHUNK_BLOCKS, (block % CHUNK_BLOCKS) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_makes_a_short_block_equal_to_its_zero_filled_self() {
        let mut full = vec![0u8; BLOCK as usize];
        full[..5].copy_from_slice(b"hello");
        assert_eq!(sum(b"hello"), sum(&full));
        assert_eq!(sum(&[]), zero_sum());
        assert_ne!(sum(b"hello"), zero_sum());
        // The standard CRC-32C check value: the algorithm is the one the docs name.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        // docs/integrity.md names it: a hole and a block of zeros.
        assert_eq!(zero_sum(), 0x98f9_4189);
    }

    #[test]
    fn a_single_flipped_bit_changes_the_sum() {
        let data: Vec<u8> = (0..BLOCK as usize).map(|i| (i * 7) as u8).collect();
        let good = sum(&data);
        for bit in [0usize, 1, 4095 * 8 + 7, 2048 * 8 + 3] {
            let mut bad = data.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert_ne!(sum(&bad), good, "bit {bit}");
        }
    }

    #[test]
    fn block_arithmetic() {
        assert_eq!(sums_of(&vec![1u8; 2 * BLOCK as usize + 1]).len(), 3);
        assert_eq!(align_down(4097), 4096);
        assert_eq!(align_up(4097), 8192);
        assert_eq!(align_up(8192), 8192);
        assert_eq!(align_up(u64::MAX), u64::MAX);
        assert_eq!(chunk_of(257), (1, 1));
        assert_eq!(block_of(4095), 0);
    }
}
