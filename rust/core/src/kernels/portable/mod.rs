//! The portable family: plain Rust, correct on any CPU (a fused multiply-add everywhere: in
//! hardware where the build targets it, else float32 from float64 arithmetic, see [`fma`]);
//! generic code is compiled for the target's baseline.

mod fma;
mod gemm;
mod half;

pub(super) use half::half_kernels;

use super::contract::GemmKernels;
use super::family::Family;

pub(super) struct Portable;

impl Family for Portable {
    fn supported() -> bool {
        true
    }

    fn gemm_f32() -> GemmKernels<f32> {
        GemmKernels {
            mr: gemm::MR,
            tile: gemm::kernel::<f32>,
            tile_copy: None,
            tile_prefetch: None,
            wide: None,
            stream: None,
            pack_a_panel: None,
            fetch_next_a: false,
        }
    }

    fn gemm_f64() -> GemmKernels<f64> {
        GemmKernels {
            mr: gemm::MR,
            tile: gemm::kernel::<f64>,
            tile_copy: None,
            tile_prefetch: None,
            wide: None,
            stream: None,
            pack_a_panel: None,
            fetch_next_a: false,
        }
    }

    #[inline(always)]
    unsafe fn vectorized<R>(f: impl FnOnce() -> R) -> R {
        f()
    }
}
