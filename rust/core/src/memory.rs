//! Large buffers: zero-filled without writing, and backed by huge pages where the system
//! offers them.
//!
//! A buffer of many megabytes (packed weights, logits, a long sequence's activations) is
//! allocated zeroed by the allocator, which for such sizes maps fresh pages and writes
//! nothing; before the first write, the 2 MiB-aligned inside of it is marked for transparent
//! huge pages (Linux `madvise(MADV_HUGEPAGE)`, as numpy does for its own large arrays). The
//! first write then faults in one 2 MiB page where it would fault 512 small ones, and streaming
//! the weights needs 512 times fewer TLB entries. Elsewhere, or when the system says no, the
//! buffer is an ordinary zeroed allocation.

use crate::error::{Error, Result};
use crate::formats::StorageFormat;
use crate::Element;

/// Buffers at least this large are advised to use huge pages.
const HUGE_MIN_BYTES: usize = 4 << 20;
const HUGE_PAGE: usize = 2 << 20;

#[cfg(target_os = "linux")]
mod sys {
    use std::ffi::{c_int, c_void};
    extern "C" {
        pub fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int;
    }
    pub const MADV_HUGEPAGE: c_int = 14;
}

/// Advise huge pages for the whole 2 MiB pages inside `[ptr, ptr + bytes)` (a hint: failure
/// is ignored and changes nothing but speed).
fn advise_huge(ptr: *mut u8, bytes: usize) {
    if bytes < HUGE_MIN_BYTES {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
        let end = (ptr as usize + bytes) / HUGE_PAGE * HUGE_PAGE;
        if end > start {
            // SAFETY: the range lies inside an allocation this process owns; MADV_HUGEPAGE
            // changes how pages are backed, never their contents.
            unsafe {
                sys::madvise(start as *mut _, end - start, sys::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = ptr;
}

/// A zero-filled vector of `n` values, or `Error::Memory` stating the bytes needed (instead of
/// aborting the process when the allocation cannot be made).
pub fn try_zeroed<T: StorageFormat>(n: usize, what: &str) -> Result<Vec<T>> {
    let layout = n
        .checked_mul(std::mem::size_of::<T>())
        .filter(|&b| b <= isize::MAX as usize)
        .and_then(|_| std::alloc::Layout::array::<T>(n).ok());
    let fail = || {
        Error::Memory(format!(
            "{what}: cannot allocate {} bytes",
            n.checked_mul(std::mem::size_of::<T>())
                .map_or_else(|| "more than 2^64".to_string(), |b| b.to_string())
        ))
    };
    let layout = layout.ok_or_else(fail)?;
    if layout.size() == 0 {
        return Ok(vec![T::ZERO_UNIT; n]);
    }
    // SAFETY: the layout has non-zero size; a panel value's zero (`PAD`: 0.0, or the 16-bit
    // pattern 0) is the all-zero bit pattern
    // (0.0), so zeroed memory holds `n` valid values; the vector takes the allocation with the
    // same layout it will free it with.
    unsafe {
        let ptr = std::alloc::alloc_zeroed(layout);
        if ptr.is_null() {
            return Err(fail());
        }
        advise_huge(ptr, layout.size());
        Ok(Vec::from_raw_parts(ptr as *mut T, n, n))
    }
}

/// [`try_zeroed`] for buffers whose size the caller has already checked (panics when memory
/// runs out, like any allocation).
pub fn zeroed<T: Element>(n: usize) -> Vec<T> {
    try_zeroed(n, "buffer").unwrap_or_else(|e| panic!("{e}"))
}

/// Make `buf` hold exactly `n` values, for callers that overwrite every value: its memory is
/// kept when it has room for `n` (the values are then stale, or zero past its old length),
/// otherwise replaced by zeros.
pub fn resize_for_overwrite<T: Element>(buf: &mut Vec<T>, n: usize) {
    if n <= buf.len() {
        buf.truncate(n);
    } else if n <= buf.capacity() {
        buf.resize(n, T::ZERO);
    } else {
        *buf = zeroed(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_buffers_are_zero_and_sized() {
        for n in [0usize, 1, 1000, (5 << 20) / 4 + 3] {
            let v = try_zeroed::<f32>(n, "x").unwrap();
            assert_eq!(v.len(), n);
            assert!(v.iter().all(|&x| x.to_bits() == 0));
            let w = try_zeroed::<f64>(n, "x").unwrap();
            assert!(w.iter().all(|&x| x.to_bits() == 0));
        }
        let e = try_zeroed::<f64>(usize::MAX / 4, "big").unwrap_err();
        assert!(matches!(e, Error::Memory(ref s) if s.starts_with("big: cannot allocate")));
        let mut b = vec![1.0f32; 3];
        resize_for_overwrite(&mut b, 3);
        assert_eq!(b, [1.0; 3]);
        resize_for_overwrite(&mut b, 5);
        assert_eq!(b, [0.0; 5]);
    }
}
