//! The NEON family (aarch64): 12 x 8 (f32) and 6 x 8 (f64) register blocks run over the
//! panels, wide and stream kernels, the 12-row A packer and row transposes, the float32 tile
//! and wide kernels against bfloat16 and float16 B, and the float32 tile and wide kernels
//! against block formats (`blocks.rs`). Generic element-wise code needs no separate context: NEON
//! is part of aarch64's baseline, so plain code is already vectorised.

mod blocks;
mod gemm;
mod peak;

use super::contract::{GemmKernels, TransposeFn};
use super::family::Family;
use crate::formats::{Bf16, F16, Q4_0, Q8_0};

pub(super) struct Neon;

impl Family for Neon {
    fn supported() -> bool {
        std::arch::is_aarch64_feature_detected!("neon")
    }

    fn gemm_f32() -> GemmKernels<f32> {
        GemmKernels {
            mr: gemm::MR_F32,
            tile: gemm::kernel_f32,
            tile_copies: false,
            tile_prefetches: false,
            wide: Some(gemm::wide_f32),
            wide_compact_a: false,
            stream: Some(gemm::stream_f32),
            pack_a_panel: Some(gemm::pack12_f32),
            fetch_next_a: false,
        }
    }

    fn gemm_f64() -> GemmKernels<f64> {
        GemmKernels {
            mr: gemm::MR_F64,
            tile: gemm::kernel_f64,
            tile_copies: false,
            tile_prefetches: false,
            wide: Some(gemm::wide_f64),
            wide_compact_a: false,
            stream: Some(gemm::stream_f64),
            pack_a_panel: Some(gemm::pack12_f64),
            fetch_next_a: false,
        }
    }

    fn transpose_f32() -> Option<TransposeFn<f32>> {
        Some(gemm::transpose_f32)
    }

    fn transpose_f64() -> Option<TransposeFn<f64>> {
        Some(gemm::transpose_f64)
    }

    fn bf16() -> GemmKernels<f32, Bf16> {
        GemmKernels {
            mr: gemm::MR_F32,
            tile: gemm::kernel_bf16,
            tile_copies: false,
            tile_prefetches: false,
            wide: Some(gemm::wide_bf16),
            wide_compact_a: false,
            stream: None,
            pack_a_panel: Some(gemm::pack12_f32),
            fetch_next_a: false,
        }
    }

    fn f16() -> GemmKernels<f32, F16> {
        GemmKernels {
            mr: gemm::MR_F32,
            tile: gemm::kernel_f16,
            tile_copies: false,
            tile_prefetches: false,
            wide: Some(gemm::wide_f16),
            wide_compact_a: false,
            stream: None,
            pack_a_panel: Some(gemm::pack12_f32),
            fetch_next_a: false,
        }
    }

    fn q8_0() -> GemmKernels<f32, Q8_0> {
        GemmKernels {
            mr: gemm::MR_F32,
            tile: blocks::kernel_q8_0,
            tile_copies: false,
            tile_prefetches: false,
            wide: Some(blocks::wide_q8_0),
            wide_compact_a: true,
            stream: None,
            pack_a_panel: Some(gemm::pack12_f32),
            fetch_next_a: false,
        }
    }

    fn q4_0() -> GemmKernels<f32, Q4_0> {
        GemmKernels {
            mr: gemm::MR_F32,
            tile: blocks::kernel_q4_0,
            tile_copies: false,
            tile_prefetches: false,
            wide: Some(blocks::wide_q4_0),
            wide_compact_a: true,
            stream: None,
            pack_a_panel: Some(gemm::pack12_f32),
            fetch_next_a: false,
        }
    }

    #[inline(always)]
    unsafe fn vectorized<R>(f: impl FnOnce() -> R) -> R {
        f()
    }

    unsafe fn fma_probe_f32(rounds: usize) -> super::probe::Probe {
        peak::fma_f32(rounds)
    }

    unsafe fn fma_probe_f64(rounds: usize) -> super::probe::Probe {
        peak::fma_f64(rounds)
    }
}
