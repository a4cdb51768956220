//! AVX2+FMA kernels against half-size B (bfloat16 or float16 panels, float32 A and C): the
//! float32 3 x 32 tile with each 8-value quarter of a B step loaded as 16 bytes and widened in
//! a register (bfloat16: zero-extend and shift left by 16; float16: F16C `vcvtph2ps`), both
//! exact, then the same FMA chain as the float32 kernel.

use crate::half::{Bf16, F16};
use std::arch::x86_64::*;

/// Rows of a tile (the A panel height these kernels read).
pub const MR: usize = 3;

/// 8 bfloat16 values at `p` as float32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn widen_bf16(p: *const Bf16) -> __m256 {
    let h = _mm_loadu_si128(p as *const __m128i);
    _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
}

/// 8 float16 values at `p` as float32.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn widen_f16(p: *const F16) -> __m256 {
    _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
}

macro_rules! avx2_half {
    ($H:ty, $widen:ident, $entry:ident, $tile:ident) => {
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $tile<const M: usize>(
            cols: usize,
            kc: usize,
            a: *const f32,
            b: *const $H,
            ldb: usize,
            c: *mut f32,
            ldc: usize,
            accumulate: bool,
        ) {
            let mut masks = [_mm256_setzero_si256(); 4];
            for v in 0..4 {
                let mut lanes = [0i32; 8];
                for l in 0..8 {
                    if v * 8 + l < cols {
                        lanes[l] = -1;
                    }
                }
                masks[v] = _mm256_loadu_si256(lanes.as_ptr() as *const __m256i);
            }
            let mut acc = [[_mm256_setzero_ps(); 4]; M];
            if accumulate {
                for i in 0..M {
                    for v in 0..4 {
                        acc[i][v] = _mm256_maskload_ps(c.add(i * ldc + v * 8), masks[v]);
                    }
                }
            }
            let mut ap = a;
            let mut bp = b;
            for _ in 0..kc {
                // 64 steps (4 KiB) ahead, as the AVX-512 half kernels; past the end is harmless.
                _mm_prefetch::<_MM_HINT_T0>(bp.wrapping_add(64 * ldb) as *const i8);
                let mut av = [_mm256_setzero_ps(); M];
                for i in 0..M {
                    av[i] = _mm256_set1_ps(*ap.add(i));
                }
                for v in 0..4 {
                    let bv = $widen(bp.add(v * 8));
                    for i in 0..M {
                        acc[i][v] = _mm256_fmadd_ps(av[i], bv, acc[i][v]);
                    }
                }
                ap = ap.add(MR);
                bp = bp.add(ldb);
            }
            for i in 0..M {
                for v in 0..4 {
                    _mm256_maskstore_ps(c.add(i * ldc + v * 8), masks[v], acc[i][v]);
                }
            }
        }

        /// # Safety
        /// See [`crate::kernels::TileFn`]; the CPU supports AVX2, FMA and F16C; rows <= 3.
        pub unsafe fn $entry(
            rows: usize,
            cols: usize,
            kc: usize,
            a: *const f32,
            b: *const $H,
            ldb: usize,
            c: *mut f32,
            ldc: usize,
            accumulate: bool,
        ) {
            match rows {
                3 => $tile::<3>(cols, kc, a, b, ldb, c, ldc, accumulate),
                2 => $tile::<2>(cols, kc, a, b, ldb, c, ldc, accumulate),
                1 => $tile::<1>(cols, kc, a, b, ldb, c, ldc, accumulate),
                _ => {}
            }
        }
    };
}

avx2_half!(Bf16, widen_bf16, tile_bf16, tile_rows_bf16);
avx2_half!(F16, widen_f16, tile_f16, tile_rows_f16);
