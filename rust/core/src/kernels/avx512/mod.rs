//! The AVX-512F family: 12 x 32 (f32) and 12 x 16 (f64) tiles, wide and stream kernels, the
//! 12-row A packer (shared with the AVX2 family), the float32 tile and wide kernels against
//! 16-bit B (`widen16.rs`) and block formats (`blocks.rs`), and AVX-512 code generation for
//! the generic element-wise code.

mod blocks;
mod gemm;
mod peak;
mod wide_masks;
mod widen16;

use super::contract::{GemmKernels, TransposeFn};
use super::family::Family;
use crate::formats::{Bf16, F16, Q4_0, Q8_0};

pub(super) struct Avx512;

impl Family for Avx512 {
    fn supported() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
    }

    fn gemm_f32() -> GemmKernels<f32> {
        GemmKernels {
            mr: gemm::MR_F32,
            tile: gemm::kernel_f32,
            tile_copies: false,
            tile_prefetches: true,
            wide: Some(gemm::wide_f32),
            wide_compact_a: true,
            stream: Some(gemm::stream_f32),
            pack_a_panel: Some(super::avx2::pack::pack_rows_f32::<12>),
            fetch_next_a: false,
        }
    }

    fn gemm_f64() -> GemmKernels<f64> {
        GemmKernels {
            mr: gemm::MR_F64,
            tile: gemm::kernel_f64,
            tile_copies: false,
            tile_prefetches: true,
            wide: Some(gemm::wide_f64),
            wide_compact_a: true,
            stream: Some(gemm::stream_f64),
            pack_a_panel: Some(super::avx2::pack::pack_rows_f64::<12>),
            fetch_next_a: false,
        }
    }

    fn transpose_f32() -> Option<TransposeFn<f32>> {
        Some(super::avx2::pack::transpose_f32)
    }

    fn transpose_f64() -> Option<TransposeFn<f64>> {
        Some(super::avx2::pack::transpose_f64)
    }

    fn bf16() -> GemmKernels<f32, Bf16> {
        GemmKernels {
            mr: widen16::MR,
            tile: widen16::tile_bf16,
            tile_copies: false,
            tile_prefetches: false,
            wide: Some(widen16::wide_bf16),
            wide_compact_a: true,
            stream: None,
            pack_a_panel: Some(super::avx2::pack::pack_rows_f32::<12>),
            fetch_next_a: false,
        }
    }

    fn f16() -> GemmKernels<f32, F16> {
        GemmKernels {
            mr: widen16::MR,
            tile: widen16::tile_f16,
            tile_copies: false,
            tile_prefetches: false,
            wide: Some(widen16::wide_f16),
            wide_compact_a: true,
            stream: None,
            pack_a_panel: Some(super::avx2::pack::pack_rows_f32::<12>),
            fetch_next_a: false,
        }
    }

    fn q8_0() -> GemmKernels<f32, Q8_0> {
        GemmKernels {
            mr: blocks::MR,
            tile: blocks::tile_q8_0,
            tile_copies: false,
            tile_prefetches: true,
            wide: Some(blocks::wide_q8_0),
            wide_compact_a: true,
            stream: None,
            pack_a_panel: Some(super::avx2::pack::pack_rows_f32::<12>),
            fetch_next_a: false,
        }
    }

    fn q4_0() -> GemmKernels<f32, Q4_0> {
        GemmKernels {
            mr: blocks::MR,
            tile: blocks::tile_q4_0,
            tile_copies: false,
            tile_prefetches: true,
            wide: Some(blocks::wide_q4_0),
            wide_compact_a: true,
            stream: None,
            pack_a_panel: Some(super::avx2::pack::pack_rows_f32::<12>),
            fetch_next_a: false,
        }
    }

    #[inline(always)]
    unsafe fn vectorized<R>(f: impl FnOnce() -> R) -> R {
        #[target_feature(enable = "avx512f")]
        unsafe fn run<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        run(f)
    }

    unsafe fn fma_probe_f32(rounds: usize) -> super::probe::Probe {
        peak::fma_f32(rounds)
    }

    unsafe fn fma_probe_f64(rounds: usize) -> super::probe::Probe {
        peak::fma_f64(rounds)
    }
}
