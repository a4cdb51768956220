//! The portable family: plain Rust, correct on any CPU (a fused multiply-add everywhere: in
//! hardware where the build targets it, else float32 from float64 arithmetic, see [`fma`]);
//! generic code is compiled for the target's baseline.

mod fma;
mod gemm;

pub(super) use gemm::kernels as stored_kernels;

use super::contract::GemmKernels;
use super::family::Family;

pub(super) struct Portable;

impl Family for Portable {
    fn supported() -> bool {
        true
    }

    fn gemm_f32() -> GemmKernels<f32> {
        gemm::kernels()
    }

    fn gemm_f64() -> GemmKernels<f64> {
        gemm::kernels()
    }

    #[inline(always)]
    unsafe fn vectorized<R>(f: impl FnOnce() -> R) -> R {
        f()
    }
}
