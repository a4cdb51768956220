//! The AVX2+FMA family: 6 x 16 (f32) and 6 x 8 (f64) tiles (two half-panels of 12
//! accumulators), wide and stream kernels, the 6- and 12-row A packers and row transposes, the
//! float32 tile and wide kernels against 16-bit B (`widen16.rs`) and block formats
//! (`blocks.rs`), and AVX2 code generation for the generic element-wise code.

mod blocks;
mod gemm;
pub(super) mod pack;
mod peak;
mod wide_groups;
mod widen16;

use super::contract::{GemmKernels, TransposeFn};
use super::family::Family;
use crate::formats::{Bf16, F16, Q4_0, Q8_0};

pub(super) struct Avx2;

impl Family for Avx2 {
    fn supported() -> bool {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }

    /// The 6 x 16 strips read half of each 32-column step of a float32 panel (of each
    /// 16-column step of a float64 one): stored step by step, every other cache line.
    const HALF_PANELS: bool = true;

    fn gemm_f32() -> GemmKernels<f32> {
        GemmKernels {
            mr: gemm::MR_F32,
            tile: gemm::kernel_f32,
            tile_copies: true,
            tile_prefetches: true,
            wide: Some(gemm::wide_f32),
            wide_compact_a: true,
            stream: Some(gemm::stream_f32),
            pack_a_panel: Some(pack::pack_rows_f32::<6>),
            fetch_next_a: true,
        }
    }

    fn gemm_f64() -> GemmKernels<f64> {
        GemmKernels {
            mr: gemm::MR_F64,
            tile: gemm::kernel_f64,
            tile_copies: true,
            tile_prefetches: true,
            wide: Some(gemm::wide_f64),
            wide_compact_a: true,
            stream: Some(gemm::stream_f64),
            pack_a_panel: Some(pack::pack_rows_f64::<6>),
            fetch_next_a: true,
        }
    }

    fn transpose_f32() -> Option<TransposeFn<f32>> {
        Some(pack::transpose_f32)
    }

    fn transpose_f64() -> Option<TransposeFn<f64>> {
        Some(pack::transpose_f64)
    }

    /// 16-bit B needs F16C as well (every AVX2 CPU known has it); without it, the
    /// portable kernels.
    fn bf16() -> GemmKernels<f32, Bf16> {
        if !std::arch::is_x86_feature_detected!("f16c") {
            return super::portable::stored_kernels();
        }
        GemmKernels {
            mr: widen16::MR,
            tile: widen16::tile_bf16,
            tile_copies: false,
            tile_prefetches: true,
            wide: Some(widen16::wide_bf16),
            wide_compact_a: true,
            stream: None,
            pack_a_panel: Some(pack::pack_rows_f32::<6>),
            fetch_next_a: true,
        }
    }

    fn f16() -> GemmKernels<f32, F16> {
        if !std::arch::is_x86_feature_detected!("f16c") {
            return super::portable::stored_kernels();
        }
        GemmKernels {
            mr: widen16::MR,
            tile: widen16::tile_f16,
            tile_copies: false,
            tile_prefetches: true,
            wide: Some(widen16::wide_f16),
            wide_compact_a: true,
            stream: None,
            pack_a_panel: Some(pack::pack_rows_f32::<6>),
            fetch_next_a: true,
        }
    }

    /// Block formats need F16C for their scales (every AVX2 CPU known has it); without it,
    /// the portable kernels.
    fn q8_0() -> GemmKernels<f32, Q8_0> {
        if !std::arch::is_x86_feature_detected!("f16c") {
            return super::portable::stored_kernels();
        }
        GemmKernels {
            mr: blocks::MR,
            tile: blocks::tile_q8_0,
            tile_copies: false,
            tile_prefetches: true,
            wide: Some(blocks::wide_q8_0),
            wide_compact_a: true,
            stream: None,
            pack_a_panel: Some(pack::pack_rows_f32::<6>),
            fetch_next_a: true,
        }
    }

    fn q4_0() -> GemmKernels<f32, Q4_0> {
        if !std::arch::is_x86_feature_detected!("f16c") {
            return super::portable::stored_kernels();
        }
        GemmKernels {
            mr: blocks::MR,
            tile: blocks::tile_q4_0,
            tile_copies: false,
            tile_prefetches: true,
            wide: Some(blocks::wide_q4_0),
            wide_compact_a: true,
            stream: None,
            pack_a_panel: Some(pack::pack_rows_f32::<6>),
            fetch_next_a: true,
        }
    }

    #[inline(always)]
    unsafe fn vectorized<R>(f: impl FnOnce() -> R) -> R {
        #[target_feature(enable = "avx2,fma")]
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
