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
//!
//! A model's packed weights are many such buffers, most of a small model's a few megabytes:
//! only the 2 MiB pages wholly inside each would be huge (GPT-2 small's 2.4 MB attention
//! projection might have none), and each would start a cache line past a page boundary, where
//! the allocator puts large blocks. Buffers that live and die together are therefore gathered
//! ([`gathered`]): one after the other, each from a page boundary, in regions of whole 2 MiB
//! pages advised as a whole. Nearly every weight then lies on a huge page, and no more than
//! the last, partly used page of a region is spent on them.

use crate::error::{Error, Result};
use crate::formats::StorageFormat;
use crate::Element;

/// Buffers at least this large are advised to use huge pages.
const HUGE_MIN_BYTES: usize = 4 << 20;
const HUGE_PAGE: usize = 2 << 20;

#[cfg(target_os = "linux")]
mod sys {
    use std::ffi::{c_int, c_long, c_void};
    extern "C" {
        pub fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int;
        pub fn mmap(
            addr: *mut c_void,
            len: usize,
            prot: c_int,
            flags: c_int,
            fd: c_int,
            offset: c_long,
        ) -> *mut c_void;
        pub fn munmap(addr: *mut c_void, len: usize) -> c_int;
    }
    pub const MADV_HUGEPAGE: c_int = 14;
    // The same on x86-64 and on the architectures of Linux's generic table (ARM64).
    pub const PROT_READ_WRITE: c_int = 0x1 | 0x2;
    pub const MAP_PRIVATE_ANONYMOUS: c_int = 0x02 | 0x20;
    pub const MAP_FAILED: *mut c_void = !0usize as *mut c_void;
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

/// Bytes of address space a region of gathered buffers reserves (more for a larger buffer):
/// pages are only backed once written, so what a region leaves unused costs nothing but
/// addresses.
const REGION_BYTES: usize = 256 << 20;

/// Where gathered buffers start: at a page boundary. A packed matrix's panel halves (`kc`
/// steps of 64 bytes: six pages for 384 steps) then lie on whole pages, which the hardware
/// prefetchers, working within a page, stream best; matrices that started a cache line past a
/// page boundary made a batched decode step measurably slower (`benches/JOURNAL.md`).
const GATHER_ALIGN: usize = 4096;

/// Smaller buffers are not gathered (a toy model's matrices would otherwise take a whole 2 MiB
/// page where they need kilobytes).
pub const GATHER_MIN_BYTES: usize = 256 << 10;

/// One mapping of whole 2 MiB pages (at a 2 MiB boundary), advised for huge pages, zero until
/// written; unmapped when the last buffer in it is dropped.
pub struct Region {
    ptr: std::ptr::NonNull<u8>,
    bytes: usize,
}

// SAFETY: a region is plain memory; the buffers carved from it ([`Units`]) are disjoint and
// each has one owner.
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

impl Region {
    /// Maps at least `bytes` (rounded up to whole 2 MiB pages), or `None` where the system
    /// will not (or on systems other than Linux, where buffers are not gathered).
    fn map(bytes: usize) -> Option<Region> {
        let bytes = bytes.checked_next_multiple_of(HUGE_PAGE)?;
        #[cfg(target_os = "linux")]
        {
            use std::ffi::c_void;
            // Map a huge page more than asked, then give back what lies before the first 2 MiB
            // boundary and after the region.
            let span = bytes.checked_add(HUGE_PAGE)?;
            // SAFETY: a fresh private anonymous mapping; the two unmapped ends lie inside it.
            unsafe {
                let raw = sys::mmap(
                    std::ptr::null_mut(),
                    span,
                    sys::PROT_READ_WRITE,
                    sys::MAP_PRIVATE_ANONYMOUS,
                    -1,
                    0,
                );
                if raw == sys::MAP_FAILED || raw.is_null() {
                    return None;
                }
                let start = (raw as usize).next_multiple_of(HUGE_PAGE);
                let lead = start - raw as usize;
                if lead > 0 {
                    sys::munmap(raw, lead);
                }
                let tail = span - lead - bytes;
                if tail > 0 {
                    sys::munmap((start + bytes) as *mut c_void, tail);
                }
                sys::madvise(start as *mut c_void, bytes, sys::MADV_HUGEPAGE);
                Some(Region {
                    ptr: std::ptr::NonNull::new(start as *mut u8)?,
                    bytes,
                })
            }
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = bytes;
            None
        }
    }

    /// The region's first byte (at a 2 MiB boundary) and its length.
    pub fn span(&self) -> (*const u8, usize) {
        (self.ptr.as_ptr(), self.bytes)
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        // SAFETY: the mapping `map` made, which no buffer uses any more.
        unsafe {
            sys::munmap(self.ptr.as_ptr() as *mut _, self.bytes);
        }
    }
}

/// The values of one buffer: a vector of its own, or a range of a shared [`Region`] that no
/// other buffer overlaps.
pub enum Units<T> {
    Own(Vec<T>),
    Gathered {
        region: std::sync::Arc<Region>,
        ptr: std::ptr::NonNull<T>,
        len: usize,
    },
}

// SAFETY: a gathered buffer owns its range alone (as a vector owns its values); `T` is Send /
// Sync as the values themselves are.
unsafe impl<T: Send> Send for Units<T> {}
unsafe impl<T: Sync> Sync for Units<T> {}

impl<T> From<Vec<T>> for Units<T> {
    fn from(v: Vec<T>) -> Self {
        Units::Own(v)
    }
}

impl<T> std::ops::Deref for Units<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            Units::Own(v) => v,
            // SAFETY: `len` initialised values of this buffer's own range of the region,
            // which lives as long as `region` is held.
            Units::Gathered { ptr, len, .. } => unsafe {
                std::slice::from_raw_parts(ptr.as_ptr(), *len)
            },
        }
    }
}

impl<T> std::ops::DerefMut for Units<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            Units::Own(v) => v,
            // SAFETY: as for `deref`; no other buffer overlaps the range, and `&mut self`
            // is its one owner.
            Units::Gathered { ptr, len, .. } => unsafe {
                std::slice::from_raw_parts_mut(ptr.as_ptr(), *len)
            },
        }
    }
}

impl<T: Copy> Units<T> {
    /// The values as a vector: this buffer's own, or a copy of a gathered one.
    pub fn into_vec(self) -> Vec<T> {
        match self {
            Units::Own(v) => v,
            g => g.to_vec(),
        }
    }

    /// The region a gathered buffer lies in.
    pub fn region(&self) -> Option<&Region> {
        match self {
            Units::Own(_) => None,
            Units::Gathered { region, .. } => Some(region),
        }
    }
}

/// The region that the buffers of a [`gathered`] scope go to now, and the bytes of it used.
struct Gathering {
    region: Option<std::sync::Arc<Region>>,
    used: usize,
}

thread_local! {
    static GATHERING: std::cell::RefCell<Option<Gathering>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` with the buffers of at least [`GATHER_MIN_BYTES`] that [`try_zeroed_units`] hands
/// out on this thread gathered: one after the other, each from a page boundary, in shared
/// regions of whole huge pages (see the module documentation), for buffers that live and die
/// together, such as a model's packed weights. Scopes nest (the inner one gathers into regions
/// of its own).
pub fn gathered<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Gathering>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let outer = self.0.take();
            GATHERING.with(|g| *g.borrow_mut() = outer);
        }
    }
    let outer = GATHERING.with(|g| {
        g.borrow_mut().replace(Gathering {
            region: None,
            used: 0,
        })
    });
    let _restore = Restore(outer);
    f()
}

/// `n` zero values of `T` from this thread's [`gathered`] scope, or `None` outside one, for
/// fewer than [`GATHER_MIN_BYTES`], or where no region can be mapped.
fn gather<T: StorageFormat>(n: usize) -> Option<Units<T>> {
    let bytes = n.checked_mul(std::mem::size_of::<T>())?;
    if bytes < GATHER_MIN_BYTES || std::mem::align_of::<T>() > GATHER_ALIGN {
        return None;
    }
    GATHERING.with(|g| {
        let mut g = g.borrow_mut();
        let g = g.as_mut()?;
        let fits = |r: &Region, used: usize| used.checked_add(bytes).is_some_and(|e| e <= r.bytes);
        if !g.region.as_ref().is_some_and(|r| fits(r, g.used)) {
            g.region = Some(std::sync::Arc::new(Region::map(bytes.max(REGION_BYTES))?));
            g.used = 0;
        }
        let region = g.region.clone()?;
        let at = g.used;
        g.used = (at + bytes).next_multiple_of(GATHER_ALIGN);
        // SAFETY: `at .. at + bytes` lies inside the region and after every range handed out
        // before; the mapping is zero until written, and zero bits are a valid `T` (a
        // storage format's zero unit is the all-zero pattern, see `try_zeroed`).
        let ptr = unsafe { region.ptr.as_ptr().add(at) } as *mut T;
        Some(Units::Gathered {
            region,
            ptr: std::ptr::NonNull::new(ptr)?,
            len: n,
        })
    })
}

/// [`try_zeroed`] as [`Units`]: inside a [`gathered`] scope, a range of the scope's regions;
/// else (or when no region can be mapped) a vector of its own.
pub fn try_zeroed_units<T: StorageFormat>(n: usize, what: &str) -> Result<Units<T>> {
    match gather::<T>(n) {
        Some(u) => Ok(u),
        None => try_zeroed(n, what).map(Units::Own),
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

    fn gathered_range(u: &Units<f32>) -> (usize, usize, usize) {
        match u {
            Units::Own(_) => panic!("not gathered"),
            Units::Gathered { region, ptr, len } => {
                (region.ptr.as_ptr() as usize, ptr.as_ptr() as usize, *len)
            }
        }
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn gathered_buffers_lie_back_to_back_in_huge_page_regions() {
        let big = GATHER_MIN_BYTES / 4 + 5;
        let (mut a, mut b, small, inner) = gathered(|| {
            let a = try_zeroed_units::<f32>(big, "a").unwrap();
            let b = try_zeroed_units::<f32>(2 * big, "b").unwrap();
            let small = try_zeroed_units::<f32>(100, "small").unwrap();
            let inner = gathered(|| try_zeroed_units::<f32>(big, "inner").unwrap());
            (a, b, small, inner)
        });
        let (ra, pa, la) = gathered_range(&a);
        let (rb, pb, lb) = gathered_range(&b);
        let (ri, _, _) = gathered_range(&inner);
        assert_eq!((la, lb), (big, 2 * big));
        // One region, at a 2 MiB boundary and whole 2 MiB pages long; the second buffer from
        // the first page boundary after the first; an inner scope's in a region of its own.
        assert_eq!(ra, rb);
        assert_ne!(ri, ra);
        assert_eq!(ra % HUGE_PAGE, 0);
        assert_eq!(a.region().unwrap().span().1 % HUGE_PAGE, 0);
        assert_eq!(pa, ra);
        assert_eq!(pb, (pa + 4 * big).next_multiple_of(GATHER_ALIGN));
        // Too small to gather, and outside the scope: buffers of their own.
        assert!(matches!(small, Units::Own(ref v) if v.len() == 100));
        assert!(matches!(
            try_zeroed_units::<f32>(big, "x").unwrap(),
            Units::Own(_)
        ));
        // Zero, and each buffer its own values.
        assert!(a.iter().chain(b.iter()).all(|x| x.to_bits() == 0));
        a.iter_mut().for_each(|x| *x = 1.0);
        b.iter_mut().for_each(|x| *x = 2.0);
        assert!(a.iter().all(|&x| x == 1.0) && b.iter().all(|&x| x == 2.0));
        // The region is advised for huge pages as a whole, as a mapping advised directly is
        // where the system keeps the advice (Linux with transparent huge pages; an emulator
        // such as qemu-user may drop it).
        let smaps_flags = |addr: usize| {
            let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
            // The mapping that holds `addr` (it may have merged with a neighbour advised alike).
            let holds = |l: &str| {
                let range = l.split_whitespace().next().and_then(|r| r.split_once('-'));
                range.is_some_and(|(lo, hi)| {
                    let at = |x| usize::from_str_radix(x, 16).ok();
                    matches!((at(lo), at(hi)), (Some(lo), Some(hi)) if lo <= addr && addr < hi)
                })
            };
            let flags = smaps
                .lines()
                .skip_while(|l| !holds(l))
                .find(|l| l.starts_with("VmFlags:"));
            flags.unwrap().to_string()
        };
        let advised = |addr: usize| smaps_flags(addr).split_whitespace().any(|f| f == "hg");
        // SAFETY: a fresh private anonymous mapping of one page, advised, read, and unmapped.
        let control = unsafe {
            let p = sys::mmap(
                std::ptr::null_mut(),
                4096,
                sys::PROT_READ_WRITE,
                sys::MAP_PRIVATE_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, sys::MAP_FAILED);
            sys::madvise(p, 4096, sys::MADV_HUGEPAGE);
            let kept = advised(p as usize);
            sys::munmap(p, 4096);
            kept
        };
        assert_eq!(advised(ra), control, "{}", smaps_flags(ra));
        // The region lives while a buffer in it does.
        let region = match &a {
            Units::Gathered { region, .. } => std::sync::Arc::clone(region),
            Units::Own(_) => unreachable!(),
        };
        assert_eq!(std::sync::Arc::strong_count(&region), 3);
        drop((a, b));
        assert_eq!(std::sync::Arc::strong_count(&region), 1);
        assert_eq!(inner.into_vec().len(), big);
    }
}
