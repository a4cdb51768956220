//! Kernel families: everything in gptcore that depends on the instruction set, one folder per
//! set (`avx512/`, `avx2/`, `neon/`, `portable/`). The GEMM loops, attention and the decoder only
//! see the contract below; they never name an instruction set.
//!
//! A family provides, for each element type and storage format of B ([`GemmKernels`]):
//! * the tile shape: `mr` rows (the width is the format's panel width `NR`, shared by every
//!   family so that a matrix packed once serves whichever family is active; `mr` divides 12,
//!   the row tiles work is shared out in);
//! * the **tile kernel** ([`TileFn`]: one call computes one tile, [`TileArgs`]), the one that
//!   does the work of large products; it may also do either of two things beside its tile when
//!   the loops ask ([`TileAux`]): copy the panel it reads (for B read in place), or prefetch a
//!   given run of packed B into L2 as it goes;
//! * optionally a **wide kernel** ([`WideFn`], 1 to [`WIDE_ROWS`] rows against one to four
//!   panels, A packed or, where the family allows, compact or in place) and a
//!   **stream kernel** ([`StreamFn`], 1 to [`STREAM_ROWS`] rows against B read in place);
//! * optionally a **panel packer** for A ([`PackPanelFn`]);
//!
//! and, for all types at once, [`Kernel::vectorized`]: a context in which generic Rust code (the
//! element-wise operations, the fused epilogue, attention's bookkeeping) is compiled for the
//! family's vector instructions. Every kernel dispatches on its row count through the one
//! shared `by_rows!` (an unexpected count stops the program). The families are listed once, in
//! `dispatch.rs`; a family without kernels of its own for a storage format runs the portable
//! ones ([`crate::formats`]).
//!
//! # The kernels' contract
//! A tile kernel computes a `rows x cols` tile (rows <= mr, cols <= NR) of C from a packed A
//! micro-panel (`mr` values per depth step, of which the first `rows` are read) and a B
//! micro-panel of NR values per depth step laid out as [`BPanel`] says (two halves of
//! `h = NR / 2` columns: value `j` of step `k` is at `b + k * ldb + j` in the first half and at
//! `b + hoff + k * ldb + (j - h)` in the second, [`b_at`]). A panel packed as halves stores each
//! half whole (`ldb = h`, `hoff = kc * h`), so a strip of columns within one half reads its
//! values in sequence; one packed step by step (`ldb = NR`, `hoff = h`), B read in place and a
//! panel copied in row order have `ldb` = the row stride and `hoff = h`. Which layout a matrix
//! is packed in follows the family it is packed for ([`Kernel::half_panels`]); every kernel
//! reads all of them. A block format's panel is laid out as the format says.
//!
//! `c[i][j] = fma(a[k][i], b[k][j], c[i][j])` for k = 0, 1, ..., kc-1 in ascending order,
//! starting from 0 (`accumulate == false`) or from the value already in C (later depth
//! blocks), `b` being the value the format widens to. That is exactly the naive `mul_add`
//! loop, so every kernel of every family gives the same bits. The same holds for the wide and
//! stream kernels. Generic code run through [`Kernel::vectorized`] must not contain fused
//! operations the compiler could form on its own (Rust never contracts `a * b + c`), so it too
//! gives the same bits in every family.

mod contract;
mod dispatch;
mod family;
mod prefetch;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "aarch64")]
mod neon;
#[cfg(target_arch = "x86_64")]
mod pacer;
mod portable;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod transpose;

pub mod bandwidth;
pub mod peak;
pub mod probe;

pub use crate::formats::{b_at, half_offset};
pub use contract::{
    BPanel, CTile, GemmKernels, PackPanelFn, PrefetchRun, StreamArgs, StreamFn, TileArgs, TileAux,
    TileFn, TransposeFn, WideArgs, WideFn, STREAM_ROWS, WIDE_PANELS, WIDE_ROWS,
};
pub use dispatch::{
    available, current, detect, require, set_kernel, HasKernels, Kernel, KernelsFor,
    KernelsForStored,
};
pub use prefetch::{prefetch, prefetch_l2, prefetch_write};
