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

/// A large buffer that is a memory mapping of its own: filled from the start, up to the
/// capacity it was made with, and given back to the system when dropped. For buffers of many
/// MiB that come and go (the read-ahead's extents): from the allocator, they stayed in its
/// heaps once freed, spread over its per-thread arenas, and the daemon's memory grew past
/// what it held. Pages cost nothing until written; the start is page-aligned, so `O_DIRECT`
/// reads may fill it.
pub struct Mapped {
    ptr: std::ptr::NonNull<u8>,
    /// Bytes mapped (0: nothing is).
    cap: usize,
    /// Bytes filled.
    len: usize,
}

// SAFETY: a mapping owned exclusively by the value, like a Vec<u8>'s heap block.
unsafe impl Send for Mapped {}
// SAFETY: shared access only reads the filled bytes.
unsafe impl Sync for Mapped {}

impl Mapped {
    /// A buffer with no room, which maps nothing.
    pub fn empty() -> Mapped {
        Mapped {
            ptr: std::ptr::NonNull::dangling(),
            cap: 0,
            len: 0,
        }
    }

    /// An empty buffer with room for `cap` bytes; Err when the mapping cannot be made.
    pub fn with_capacity(cap: usize) -> std::io::Result<Mapped> {
        if cap == 0 {
            return Ok(Mapped::empty());
        }
        // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                cap,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let ptr = std::ptr::NonNull::new(p as *mut u8).ok_or_else(std::io::Error::last_os_error)?;
        Ok(Mapped { ptr, cap, len: 0 })
    }

    /// The bytes filled.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the first `len` bytes are within the mapping (or `len` is 0).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// Every byte of the capacity (zeroes where never written), to fill; then
    /// [`set_len`](Self::set_len).
    pub fn whole_mut(&mut self) -> &mut [u8] {
        // SAFETY: the mapping holds `cap` initialised bytes; `&mut self` makes this the only
        // reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.cap) }
    }

    /// Says how many bytes from the start are filled (clipped to the capacity).
    pub fn set_len(&mut self, len: usize) {
        self.len = len.min(self.cap);
    }

    /// Appends as much of `data` as there is room for; the bytes appended.
    pub fn extend_from_slice(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.cap - self.len);
        let at = self.len;
        self.whole_mut()[at..at + n].copy_from_slice(&data[..n]);
        self.len += n;
        n
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        if self.cap > 0 {
            // SAFETY: the mapping was made with this length and no reference to it outlives
            // the value.
            unsafe { libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.cap) };
        }
    }
}

/// Memory a caller lends a read to fill in place (a FUSE ring entry's payload), so that the
/// data is never copied from a buffer of the read's own into the answer.
///
/// A window holds no borrow: whoever makes one promises ([`Lent::new`]) that the memory stays
/// mapped, and that nothing else reads or writes it, until every window cut from it is
/// dropped, including while the kernel fills one.
pub struct Lent {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: a window is a pointer to memory that no one else uses while it lives (the promise
// of `Lent::new`); it moves between threads like the buffer it stands for.
unsafe impl Send for Lent {}
// SAFETY: shared access only reads.
unsafe impl Sync for Lent {}

impl Lent {
    /// A window on the `len` bytes at `ptr`.
    ///
    /// # Safety
    /// The bytes stay valid for reads and writes, and no reference to them is made or used
    /// except through this window and those cut from it, until they are all dropped.
    pub unsafe fn new(ptr: std::ptr::NonNull<u8>, len: usize) -> Lent {
        Lent { ptr, len }
    }

    /// The window on `len` bytes from `from` (clipped to this one): for one piece of a read.
    pub fn cut(&self, from: usize, len: usize) -> Lent {
        let from = from.min(self.len);
        Lent {
            // SAFETY: from <= self.len, within the lent memory.
            ptr: unsafe { self.ptr.add(from) },
            len: len.min(self.len - from),
        }
    }

    /// This window and `next`, when `next` starts where this one ends: one window on both.
    pub fn joined_with(&self, next: &Lent) -> Option<Lent> {
        (self.addr() + self.len == next.addr()).then(|| Lent {
            ptr: self.ptr,
            len: self.len + next.len,
        })
    }

    /// Where the window starts.
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: valid and unaliased for `len` bytes (the promise of `new`).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
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
    fn a_mapped_buffer_fills_up_to_its_capacity() {
        let mut m = Mapped::with_capacity(3 << 20).unwrap();
        assert!(m.is_empty() && is_aligned(m.whole_mut(), 0));
        assert_eq!(m.extend_from_slice(&[7u8; 2 << 20]), 2 << 20);
        assert_eq!(m.extend_from_slice(&[9u8; 2 << 20]), 1 << 20);
        assert_eq!(m.len(), 3 << 20);
        assert_eq!(m.as_slice()[(2 << 20) - 1..(2 << 20) + 1], [7, 9]);
        m.set_len(1);
        assert_eq!(m.as_slice(), [7]);
        drop(m);
        let empty = Mapped::with_capacity(0).unwrap();
        assert!(Mapped::empty().as_slice().is_empty());
        assert!(empty.as_slice().is_empty());
    }

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
    fn lent_windows_cut_within_the_memory() {
        let mut b = AlignedBuf::new(3 * DIRECT_IO_ALIGN);
        let base = b.as_mut_slice().as_mut_ptr();
        // SAFETY: `b` outlives the windows and is not used while they live.
        let w = unsafe { Lent::new(std::ptr::NonNull::new(base).unwrap(), 3 * DIRECT_IO_ALIGN) };
        let mut a = w.cut(DIRECT_IO_ALIGN, DIRECT_IO_ALIGN);
        assert_eq!(a.addr(), base as usize + DIRECT_IO_ALIGN);
        assert!(is_aligned(a.as_slice(), 0));
        a.as_mut_slice()[0] = 9;
        assert_eq!(w.cut(2 * DIRECT_IO_ALIGN, 1 << 20).len(), DIRECT_IO_ALIGN);
        assert!(w.cut(1 << 20, 10).is_empty());
        let (x, y) = (w.cut(0, 100), w.cut(100, 50));
        assert_eq!(
            x.joined_with(&y).map(|j| (j.addr(), j.len())),
            Some((base as usize, 150))
        );
        assert!(y.joined_with(&x).is_none());
        assert_eq!(w.as_slice()[DIRECT_IO_ALIGN], 9);
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
