//! Cache hints: asking for a cache line ahead of its use (never faults, whatever the address).

/// Asks the cache for the 64-byte line at `p` (a hint: never faults, whatever the address).
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    hint::<{ HINT_L1 }, T>(p)
}

/// Asks the L2 cache for the 64-byte line at `p`, as [`prefetch`] does.
#[inline(always)]
pub fn prefetch_l2<T>(p: *const T) {
    hint::<{ HINT_L2 }, T>(p)
}

/// Asks L1 for the 64-byte line at `p` with the intent to write it (so that the store that
/// follows finds the line owned), as [`prefetch`] does (a CPU without write prefetches takes
/// the instruction as a no-op).
#[inline(always)]
pub fn prefetch_write<T>(p: *const T) {
    hint::<{ HINT_WRITE }, T>(p)
}

/// x86-64's prefetch hints (`_MM_HINT_T0`, `_MM_HINT_T1`, `_MM_HINT_ET0`): into L1, into L2,
/// into L1 to be written.
const HINT_L1: i32 = 3;
const HINT_L2: i32 = 2;
const HINT_WRITE: i32 = 7;

/// The prefetch with hint `LEVEL`; nothing where the architecture has no such hint here.
#[inline(always)]
fn hint<const LEVEL: i32, T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<LEVEL>(p as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    /// The hints are x86-64's own, and prefetching any address (null, past a buffer) is harmless.
    #[test]
    fn prefetch_hints() {
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(super::HINT_L1, std::arch::x86_64::_MM_HINT_T0);
            assert_eq!(super::HINT_L2, std::arch::x86_64::_MM_HINT_T1);
            assert_eq!(super::HINT_WRITE, std::arch::x86_64::_MM_HINT_ET0);
        }
        let v = [1u8; 64];
        for p in [
            std::ptr::null(),
            v.as_ptr(),
            v.as_ptr().wrapping_add(1 << 30),
        ] {
            super::prefetch(p);
            super::prefetch_l2(p);
            super::prefetch_write(p);
        }
        assert_eq!(v, [1u8; 64]);
    }
}
