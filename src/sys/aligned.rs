//! Buffers aligned for `O_DIRECT` I/O on a leg.

use std::alloc::{alloc_zeroed, dealloc, Layout};

/// Alignment that satisfies `O_DIRECT` on every block device we meet (logical block <= 4 KiB).
pub const DIRECT_IO_ALIGN: usize = 4096;

/// Whether a read of `buf` at `offset` meets `O_DIRECT`'s alignment: the buffer's address,
/// its length and the offset, each a multiple of [`DIRECT_IO_ALIGN`].
pub fn is_aligned(buf: &[u8], offset: u64) -> bool {
    let a = DIRECT_IO_ALIGN;
    (buf.as_ptr() as usize).is_multiple_of(a)
        && buf.len().is_multiple_of(a)
        && offset.is_multiple_of(a as u64)
}

/// A zeroed heap buffer whose start is aligned to [`DIRECT_IO_ALIGN`].
pub struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
    layout: Layout,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only reads the buffer, like &Vec<u8>.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A buffer of `len` bytes (at least one alignment unit is allocated).
    pub fn new(len: usize) -> AlignedBuf {
        let size = len.max(1).div_ceil(DIRECT_IO_ALIGN) * DIRECT_IO_ALIGN;
        let layout = Layout::from_size_align(size, DIRECT_IO_ALIGN).expect("valid layout");
        // SAFETY: layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        AlignedBuf { ptr, len, layout }
    }

    /// A copy of `data` in an aligned buffer.
    pub fn copy_of(data: &[u8]) -> AlignedBuf {
        let mut b = AlignedBuf::new(data.len());
        b.as_mut_slice().copy_from_slice(data);
        b
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for layout.size() >= len bytes, initialised (zeroed).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and we hold &mut self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: ptr was allocated with exactly this layout.
        unsafe { dealloc(self.ptr, self.layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_sized() {
        let mut b = AlignedBuf::new(10_000);
        assert_eq!(b.as_slice().len(), 10_000);
        assert_eq!(b.as_slice().as_ptr() as usize % DIRECT_IO_ALIGN, 0);
        b.as_mut_slice()[9_999] = 7;
        let c = AlignedBuf::copy_of(b.as_slice());
        assert_eq!(c.as_slice()[9_999], 7);
    }

    #[test]
    fn alignment_for_o_direct() {
        let mut b = AlignedBuf::new(3 * DIRECT_IO_ALIGN);
        let s = b.as_mut_slice();
        assert!(is_aligned(&s[..2 * DIRECT_IO_ALIGN], 8192));
        assert!(!is_aligned(&s[..2 * DIRECT_IO_ALIGN], 100));
        assert!(!is_aligned(&s[..100], 8192));
        assert!(!is_aligned(&s[1..1 + DIRECT_IO_ALIGN], 0));
    }
}
