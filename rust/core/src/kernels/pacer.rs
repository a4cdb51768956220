//! The paced prefetch of the x86-64 prefetching tile kernels: over a tile's depth steps, a
//! run of cache lines (the packed B the loops read next, see [`super::TileAux`]) is
//! fetched into L2 one line at a time, at an even pace, beside the arithmetic.

use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};

/// Bytes of a cache line.
const LINE: usize = 64;

/// Where the next line of the run is, and the steps left before it is fetched.
pub(super) struct Pacer {
    next: *const i8,
    every: usize,
    left: usize,
}

impl Pacer {
    /// Steps between two prefetches when `lines` lines are spread over `steps` steps, at most
    /// one a step; 0 when there is no line to fetch.
    #[inline(always)]
    pub(super) fn every(steps: usize, lines: usize) -> usize {
        steps.checked_div(lines).map_or(0, |e| e.max(1))
    }

    /// Line `i` of the run that starts at `from`.
    #[inline(always)]
    pub(super) fn line<T>(from: *const T, i: usize) -> *const T {
        from.cast::<u8>().wrapping_add(i * LINE).cast()
    }

    /// A run from `from` on, one line every `every` (> 0) steps.
    #[inline(always)]
    pub(super) fn new<T>(from: *const T, every: usize) -> Pacer {
        Pacer {
            next: from.cast(),
            every,
            left: every,
        }
    }

    /// One depth step: on every `every`-th, the next line goes into L2. The address may be
    /// anything (a prefetch never faults).
    #[inline(always)]
    pub(super) fn step(&mut self) {
        self.left -= 1;
        if self.left == 0 {
            self.left = self.every;
            // SAFETY: a prefetch is a hint; it reads nothing the program sees and never faults.
            unsafe { _mm_prefetch::<_MM_HINT_T1>(self.next) };
            self.next = self.next.wrapping_add(LINE);
        }
    }
}
