//! What a kernel family implements: one unit struct per folder (`avx512/`, `avx2/`, `neon/`,
//! `portable/`) implements [`Family`].

use super::contract::{GemmKernels, TransposeFn};
use super::probe::Probe;

/// The methods of [`Family`] for the stored formats (see [`crate::formats`]).
macro_rules! stored_format_methods {
    ($($W:ty => $method:ident in $kind:ident),* $(,)?) => {$(
        #[doc = concat!(
            "float32 A and C against B stored as [`", stringify!($W), "`]: the portable ",
            "kernels unless the family has its own."
        )]
        fn $method() -> GemmKernels<f32, $W> {
            super::portable::stored_kernels::<f32, $W>()
        }
    )*};
}

/// What a family implements (one unit struct per folder).
pub(super) trait Family {
    /// Whether this CPU can run the family's code.
    fn supported() -> bool;
    /// Whether float32 and float64 B panels packed for this family are stored as two halves
    /// (the gemm loops' `PackedB` packs them): for a tile whose strips read half a panel's step each.
    /// Every family reads both layouts, with the same bits.
    const HALF_PANELS: bool = false;
    fn gemm_f32() -> GemmKernels<f32>;
    fn gemm_f64() -> GemmKernels<f64>;
    /// Moving rows into columns ([`TransposeFn`]): attention turns the keys of the cache's
    /// last, partly filled K^T panel, held as rows, into a panel. `None`: one value at a time.
    fn transpose_f32() -> Option<TransposeFn<f32>> {
        None
    }
    /// See [`Family::transpose_f32`].
    fn transpose_f64() -> Option<TransposeFn<f64>> {
        None
    }
    // float32 A and C against B in each stored format (packed panels only: no stream
    // kernel), one method per format, named in its registration: a family without kernels of
    // its own for a format gets the portable ones (same bits, slower).
    crate::formats::for_each_stored_format!(stored_format_methods);
    /// Runs `f` inside a function compiled for the family's instructions.
    ///
    /// # Safety
    /// The CPU supports the family.
    unsafe fn vectorized<R>(f: impl FnOnce() -> R) -> R;
    /// The FMA probe ([`super::peak`]) on the family's widest float32 / float64 vectors: scalar
    /// chains for a family without vectors of its own.
    ///
    /// # Safety
    /// The CPU supports the family.
    unsafe fn fma_probe_f32(rounds: usize) -> Probe {
        super::probe::scalar::<f32>(rounds)
    }
    /// See [`Family::fma_probe_f32`].
    ///
    /// # Safety
    /// The CPU supports the family.
    unsafe fn fma_probe_f64(rounds: usize) -> Probe {
        super::probe::scalar::<f64>(rounds)
    }
}
