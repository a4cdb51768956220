//! What a kernel family implements: one unit struct per folder (`avx512/`, `avx2/`, `neon/`,
//! `portable/`) implements [`Family`].

use super::contract::GemmKernels;
use super::probe::Probe;
use crate::half::{Bf16, F16};

/// What a family implements (one unit struct per folder).
pub(super) trait Family {
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
        super::portable::half_kernels::<f32, Bf16>()
    }
    fn gemm_f32_f16() -> GemmKernels<f32, F16> {
        super::portable::half_kernels::<f32, F16>()
    }
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
