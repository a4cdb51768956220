//! Kernel families: everything in gptcore that depends on the instruction set, one folder per
//! set (`avx512/`, `avx2/`, `neon/`, `portable/`). The GEMM loops, attention and the decoder only see
//! the contract below; they never name an instruction set.
//!
//! A family provides, for each element type ([`GemmKernels`]):
//! * the tile shape: `mr` rows (the width is the type's panel width `T::NR`, shared by every
//!   family so that a matrix packed once serves whichever family is active; `mr` divides 12,
//!   the row tiles work is shared out in);
//! * the **tile kernel** ([`TileFn`]), the one that does the work of large products, and
//!   optionally a variant of it that copies the panel it reads (`tile_copy`, for B read in
//!   place), and one that prefetches a given run of packed B into L2
//!   as it goes (`tile_prefetch`, for every row block against packed B);
//! * optionally a **wide kernel** ([`WideFn`], 1 to [`WIDE_ROWS`] rows against four panels) and a
//!   **stream kernel** ([`StreamFn`], 1 to [`STREAM_ROWS`] rows against B read in place);
//! * optionally a **panel packer** for A ([`PackPanelFn`]);
//!
//! and, for all types at once, [`Kernel::vectorized`]: a context in which generic Rust code (the
//! element-wise operations, the fused epilogue, attention's bookkeeping) is compiled for the
//! family's vector instructions.
//!
//! # The kernels' contract
//! A tile kernel computes a `rows x cols` tile (rows <= mr, cols <= NR) of C from a packed A
//! micro-panel (`mr` values per depth step, of which the first `rows` are read) and a B
//! micro-panel of NR values per depth step in two halves of `h = NR / 2` columns: value `j`
//! of step `k` is at `b + k * ldb + j` in the first half and at `b + hoff + k * ldb + (j - h)`
//! in the second ([`b_at`]). A panel packed as halves stores each half whole (`ldb = h`,
//! `hoff = kc * h`), so a strip of columns within one half reads its values in sequence; one
//! packed step by step (`ldb = NR`, `hoff = h`), B read in place and a panel copied in row
//! order have `ldb` = the row stride and `hoff = h`. Which layout a matrix is packed in follows
//! the family it is packed for ([`Kernel::half_panels`]); every kernel reads all of them.
//!
//! `c[i][j] = fma(a[k][i], b[k][j], c[i][j])` for k = 0, 1, ..., kc-1 in ascending order,
//! starting from 0 (`accumulate == false`) or from the value already in C (later depth
//! blocks). That is exactly the naive `mul_add` loop, so every kernel of every family gives the
//! same bits. The same holds for the wide and stream kernels. Generic code run through
//! [`Kernel::vectorized`] must not contain fused operations the compiler could form on its own
//! (Rust never contracts `a * b + c`), so it too gives the same bits in every family.

mod dispatch;
pub use dispatch::{available, current, detect, require, set_kernel, Kernel};

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "aarch64")]
mod neon;
#[cfg(target_arch = "x86_64")]
mod pacer;
mod portable;

use crate::half::{Bf16, F16};
use crate::Element;

/// `(rows, cols, kc, a_panel, b_panel, ldb, hoff, c, ldc, accumulate)`: see the module's
/// contract. `W` is what B holds: `T` itself, or 16-bit storage widened exactly to `T` on load
/// (the contract then holds for the widened values).
pub type TileFn<T, W = T> =
    unsafe fn(usize, usize, usize, *const T, *const W, usize, usize, *mut T, usize, bool);

/// The tile kernel's arguments, then `dst`: the tile kernel that also copies the B panel it
/// reads, all NR values of each of its `kc` steps, bit for bit into `dst` in row order (NR
/// values a step: `ldb = NR`, `hoff = h` for the tiles that read the copy).
pub type TileCopyFn<T, W = T> =
    unsafe fn(usize, usize, usize, *const T, *const W, usize, usize, *mut T, usize, bool, *mut W);

/// The tile kernel's arguments, then `(pf, lines)`: the tile kernel that also prefetches up to
/// `lines` cache lines from `pf` on into L2, spread over its depth steps (the packed B the
/// loops read next; the values are never read through `pf`).
pub type TilePrefetchFn<T, W = T> = unsafe fn(
    usize,
    usize,
    usize,
    *const T,
    *const W,
    usize,
    usize,
    *mut T,
    usize,
    bool,
    *const W,
    usize,
);

/// `(rows, cols_last, kc, a_panel, b_panel, ldb, hoff, b_stride, c, ldc, accumulate)`: up to
/// [`WIDE_ROWS`] rows against 4 consecutive B panels (`b_stride` apart, each addressed as in
/// the module's contract), the last with `cols_last` live columns.
pub type WideFn<T, W = T> =
    unsafe fn(usize, usize, usize, *const T, *const W, usize, usize, usize, *mut T, usize, bool);

/// Where value `j` (< NR) of a depth step lies, in values from the step's first, for a panel
/// whose second half is `hoff` values after its first (see the module's contract); `h` is
/// half the panel.
#[inline(always)]
pub const fn half_offset(j: usize, h: usize, hoff: usize) -> usize {
    if j < h {
        j
    } else {
        hoff + (j - h)
    }
}

/// Where value `j` (< NR) of a depth step that starts at `b` lies ([`half_offset`]).
#[inline(always)]
pub fn b_at<W>(b: *const W, hoff: usize, h: usize, j: usize) -> *const W {
    b.wrapping_add(half_offset(j, h, hoff))
}

/// `(rows, cols, k, a, lda, b, ldb, c, ldc)`: C (rows x cols) = A (rows x k, rows `lda` apart,
/// unit column stride) times B read in place (`k` rows `ldb` apart); up to [`STREAM_ROWS`]
/// rows.
pub type StreamFn<T, W = T> =
    unsafe fn(usize, usize, usize, *const T, usize, *const W, usize, *mut T, usize);

/// `(src, rs, kc, dst) -> steps`: packs depth steps `0 .. steps` (a prefix of `0 .. kc` the
/// family chooses) of `mr` full rows (`src + i * rs + k`) into `dst[k * mr + i]`; the caller
/// copies the remaining steps. A plain copy: values are moved bit for bit.
pub type PackPanelFn<T> = unsafe fn(*const T, isize, usize, *mut T) -> usize;

/// Rows up to which the wide kernel is used.
pub const WIDE_ROWS: usize = 3;

/// Rows up to which the stream kernel can be used.
pub const STREAM_ROWS: usize = 8;

/// One family's matrix-multiply kernels for one element type `T` (A and C) and what B holds
/// (`W`: `T`, or 16-bit storage of float32 values).
#[derive(Clone, Copy)]
pub struct GemmKernels<T, W = T> {
    /// Rows of a tile (divides 12).
    pub mr: usize,
    pub tile: TileFn<T, W>,
    /// The tile kernel copying the panel it reads ([`TileCopyFn`]), for a family whose tile
    /// reads a panel in several passes: for B read in place, a row block's first tile copies
    /// each panel and the other tiles read the copy. `None`: every tile reads B in place.
    pub tile_copy: Option<TileCopyFn<T, W>>,
    /// The tile kernel prefetching packed B ahead ([`TilePrefetchFn`]): against packed panels
    /// the row tiles of a column group and depth block each fetch a slice of the next one
    /// into L2, and a row block of at most 36 rows takes each panel in depth chunks, the row
    /// tiles of a chunk fetching the packed B two chunks on (see `gemm::loops`). `None`: the
    /// plain tile kernel, no such prefetch, whole depth blocks.
    pub tile_prefetch: Option<TilePrefetchFn<T, W>>,
    pub wide: Option<WideFn<T, W>>,
    pub stream: Option<StreamFn<T, W>>,
    pub pack_a_panel: Option<PackPanelFn<T>>,
    /// Whether the loops fetch the next row tile's A micro-panel into L2 while the current
    /// tile goes through the panels of its column group (a slice before each panel), for a
    /// family whose tile kernel leaves A to the hardware prefetcher (see `gemm::loops`).
    pub fetch_next_a: bool,
}

/// What a family implements (one unit struct per folder).
trait Family {
    /// Whether this CPU can run the family's code.
    fn supported() -> bool;
    /// Whether float32 and float64 B panels packed for this family are stored as two halves
    /// (see [`crate::gemm::PackedB`]): for a tile whose strips read half a panel's step each.
    /// Every family reads both layouts, with the same bits.
    const HALF_PANELS: bool = false;
    fn gemm_f32() -> GemmKernels<f32>;
    fn gemm_f64() -> GemmKernels<f64>;
    /// float32 A and C against bfloat16 / float16 B (packed panels only: no stream kernel).
    /// A family without its own gets the portable ones (same bits, slower).
    fn gemm_f32_bf16() -> GemmKernels<f32, Bf16> {
        portable::half_kernels::<f32, Bf16>()
    }
    fn gemm_f32_f16() -> GemmKernels<f32, F16> {
        portable::half_kernels::<f32, F16>()
    }
    /// Runs `f` inside a function compiled for the family's instructions.
    ///
    /// # Safety
    /// The CPU supports the family.
    unsafe fn vectorized<R>(f: impl FnOnce() -> R) -> R;
    /// The FMA probe ([`peak`]) on the family's widest float32 / float64 vectors: scalar
    /// chains for a family without vectors of its own.
    ///
    /// # Safety
    /// The CPU supports the family.
    unsafe fn fma_probe_f32(rounds: usize) -> peak::Probe {
        peak::scalar::<f32>(rounds)
    }
    /// See [`Family::fma_probe_f32`].
    ///
    /// # Safety
    /// The CPU supports the family.
    unsafe fn fma_probe_f64(rounds: usize) -> peak::Probe {
        peak::scalar::<f64>(rounds)
    }
}

/// Calls `$body` with `$F` bound to the family type of kernel `$k`.
macro_rules! with_family {
    ($k:expr, $F:ident => $body:expr) => {
        match $k {
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => {
                type $F = avx512::Avx512;
                $body
            }
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => {
                type $F = avx2::Avx2;
                $body
            }
            #[cfg(target_arch = "aarch64")]
            Kernel::Neon => {
                type $F = neon::Neon;
                $body
            }
            // Portable, and the kernels not built for this architecture (never supported).
            #[allow(unreachable_patterns)]
            _ => {
                type $F = portable::Portable;
                $body
            }
        }
    };
}

pub mod bandwidth;
pub mod peak;

/// Kernel `k`'s FMA probe ([`peak`]), float64 when `double`.
///
/// # Safety
/// The CPU supports `k`.
unsafe fn fma_probe(k: Kernel, double: bool, rounds: usize) -> peak::Probe {
    with_family!(k, F => if double { F::fma_probe_f64(rounds) } else { F::fma_probe_f32(rounds) })
}

impl Kernel {
    /// Runs `f` compiled for this family's instructions (plain code where the CPU lacks them:
    /// the bits are the same either way, only the speed differs). `f` should call
    /// `#[inline(always)]` code so that it is compiled inside the family's context.
    #[inline(always)]
    pub fn vectorized<R>(self, f: impl FnOnce() -> R) -> R {
        if !self.supported() {
            return f();
        }
        // SAFETY: checked just above.
        with_family!(self, F => unsafe { F::vectorized(f) })
    }

    fn family_supported(self) -> bool {
        with_family!(self, F => F::supported())
    }

    /// Whether B panels packed for this kernel are stored as two halves where the value type
    /// allows them (float32, float64): see [`crate::gemm::PackedB`].
    pub fn half_panels(self) -> bool {
        with_family!(self, F => F::HALF_PANELS)
    }
}

/// Per-type table of the kernels.
pub trait HasKernels: Element {
    fn gemm_kernels(k: Kernel) -> GemmKernels<Self>;
}

impl HasKernels for f32 {
    fn gemm_kernels(k: Kernel) -> GemmKernels<f32> {
        with_family!(k, F => F::gemm_f32())
    }
}

impl HasKernels for f64 {
    fn gemm_kernels(k: Kernel) -> GemmKernels<f64> {
        with_family!(k, F => F::gemm_f64())
    }
}

/// The kernels for A and C of type `Self` against a B holding `W` (every family: the
/// portable ones where a family has none of its own).
pub trait KernelsFor<W>: Element {
    fn kernels_for(k: Kernel) -> GemmKernels<Self, W>;
}

impl<T: HasKernels> KernelsFor<T> for T {
    #[inline]
    fn kernels_for(k: Kernel) -> GemmKernels<T, T> {
        T::gemm_kernels(k)
    }
}

impl KernelsFor<Bf16> for f32 {
    fn kernels_for(k: Kernel) -> GemmKernels<f32, Bf16> {
        with_family!(k, F => F::gemm_f32_bf16())
    }
}

impl KernelsFor<F16> for f32 {
    fn kernels_for(k: Kernel) -> GemmKernels<f32, F16> {
        with_family!(k, F => F::gemm_f32_f16())
    }
}

/// float64 against half-size B: the portable kernels (the decoder's float64 reference path
/// with half-size weights; exact, not tuned).
impl KernelsFor<Bf16> for f64 {
    fn kernels_for(_: Kernel) -> GemmKernels<f64, Bf16> {
        portable::half_kernels::<f64, Bf16>()
    }
}

impl KernelsFor<F16> for f64 {
    fn kernels_for(_: Kernel) -> GemmKernels<f64, F16> {
        portable::half_kernels::<f64, F16>()
    }
}

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

/// x86-64's prefetch hints (`_MM_HINT_T0`, `_MM_HINT_T1`): into L1, into L2.
const HINT_L1: i32 = 3;
const HINT_L2: i32 = 2;

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
        }
        let v = [1u8; 64];
        for p in [
            std::ptr::null(),
            v.as_ptr(),
            v.as_ptr().wrapping_add(1 << 30),
        ] {
            super::prefetch(p);
            super::prefetch_l2(p);
        }
        assert_eq!(v, [1u8; 64]);
    }
}
