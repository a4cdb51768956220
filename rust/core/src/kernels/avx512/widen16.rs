//! AVX-512F kernels against 16-bit B (bfloat16 or float16 panels, float32 A and C): the
//! float32 tile (12 x 32) and wide (1-3 rows x 1-4 panels) kernels with each 16-value half of a
//! B step loaded as 32 bytes and widened in a register (bfloat16: zero-extend and shift left
//! by 16; float16: `vcvtph2ps`), both exact, then the same FMA chain as the float32 kernels.

use crate::formats::{Bf16, F16};
use crate::kernels::contract::{by_panels, by_rows, TileArgs, TileAux, WideArgs};
use std::arch::x86_64::*;

/// Rows of a tile (the A panel height these kernels read).
pub const MR: usize = 12;

/// Software prefetch of the packed 16-bit B panels, in depth steps ahead (one step of a panel
/// is 64 bytes, one cache line; 16-bit panels are stored step by step). The tile kernel: 64
/// steps = 4 KiB; the wide kernel, which reads four panels side by side: 32 steps of each =
/// 8 KiB in all. The hardware prefetcher alone leaves the loads waiting on memory in decoding
/// (the widening instructions take the stall cycles).
const PF_TILE: usize = 64;
/// The tile kernel's distance for a full 12-row tile (prefill, a panel read from L2 once per
/// tile): 32 steps = 2 KiB.
const PF_TILE_FULL: usize = 32;
const PF_WIDE: usize = 32;

/// 16 bfloat16 values at `p` as float32.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn widen_bf16(p: *const Bf16) -> __m512 {
    let h = _mm256_loadu_si256(p as *const __m256i);
    _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
}

/// 16 float16 values at `p` as float32.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn widen_f16(p: *const F16) -> __m512 {
    _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
}

/// Columns of a panel.
const NR: usize = 32;

#[inline(always)]
fn lane_mask(live: usize) -> __mmask16 {
    ((1u32 << live.min(16)) - 1) as __mmask16
}

macro_rules! avx512_widen16 {
    ($H:ty, $widen:ident, $tile_entry:ident, $tile:ident, $wide_entry:ident, $wide:ident) => {
        #[target_feature(enable = "avx512f")]
        unsafe fn $tile<const M: usize>(t: &TileArgs<f32, $H>) {
            let TileArgs { cols, kc, a, accumulate, .. } = *t;
            let (b, ldb, hoff) = (t.b.ptr, t.b.ldb, t.b.hoff);
            let (c, ldc) = (t.c.ptr, t.c.ldc);
            let m0 = lane_mask(cols);
            let m1 = lane_mask(cols.saturating_sub(16));
            let mut acc0 = [_mm512_setzero_ps(); M];
            let mut acc1 = [_mm512_setzero_ps(); M];
            if accumulate {
                for i in 0..M {
                    acc0[i] = _mm512_maskz_loadu_ps(m0, c.add(i * ldc));
                    acc1[i] = _mm512_maskz_loadu_ps(m1, c.add(i * ldc + 16));
                }
            }
            let mut ap = a;
            let mut bp = b;
            // A tile of fewer than MR rows is the decode case (B streamed from memory once):
            // PF_TILE ahead; a full tile belongs to a larger product that reads the panel from
            // L2 once per tile: PF_TILE_FULL ahead.
            let dist = if M < MR { PF_TILE } else { PF_TILE_FULL };
            // A panel in halves (its step's two halves in two lines), else step by step.
            let halves = hoff != NR / 2;
            for _ in 0..kc {
                // Past the panel's end is harmless: a prefetch never faults.
                let ahead = bp.wrapping_add(dist * ldb);
                _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8);
                if halves {
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(hoff) as *const i8);
                }
                let b0 = $widen(bp);
                let b1 = $widen(bp.add(hoff));
                for i in 0..M {
                    let ai = _mm512_set1_ps(*ap.add(i));
                    acc0[i] = _mm512_fmadd_ps(ai, b0, acc0[i]);
                    acc1[i] = _mm512_fmadd_ps(ai, b1, acc1[i]);
                }
                ap = ap.add(MR);
                bp = bp.add(ldb);
            }
            for i in 0..M {
                _mm512_mask_storeu_ps(c.add(i * ldc), m0, acc0[i]);
                _mm512_mask_storeu_ps(c.add(i * ldc + 16), m1, acc1[i]);
            }
        }

        #[target_feature(enable = "avx512f")]
        unsafe fn $wide<const M: usize, const P: usize>(w: &WideArgs<f32, $H>) {
            let WideArgs { cols_last, kc, a, a_step, bstride, accumulate, .. } = *w;
            let (b, ldb, hoff) = (w.b.ptr, w.b.ldb, w.b.hoff);
            let (c, ldc) = (w.c.ptr, w.c.ldc);
            let masks = super::wide_masks::wide_masks::<P>(cols_last, 16).map(|m| m as __mmask16);
            let mut acc = [[_mm512_setzero_ps(); 8]; M];
            if accumulate {
                for i in 0..M {
                    for v in 0..2 * P {
                        acc[i][v] = _mm512_maskz_loadu_ps(
                            masks[v],
                            c.add(i * ldc + (v / 2) * NR + (v % 2) * 16),
                        );
                    }
                }
            }
            let mut ap = a;
            let mut bp = b;
            let halves = hoff != NR / 2;
            for kk in 0..kc {
                // Panel q's step PF_WIDE ahead. Past the call's last step the stream goes on in
                // the panel P on: the loops hand this kernel a depth block's panels four at a
                // time, `bstride` apart, so the next call's first steps arrive during this
                // call's last ones (past its own end, panel q's stream would run into panel
                // q + 1, already read). Only a hint: an address past the packed matrix is never
                // read, and a prefetch does not fault.
                let t = kk + PF_WIDE;
                let ahead = |q: usize| {
                    if t < kc {
                        b.wrapping_add(q * bstride + t * ldb)
                    } else {
                        b.wrapping_add((P + q) * bstride + (t - kc) * ldb)
                    }
                };
                if !halves {
                    // Step by step: a step of each panel is one line.
                    for q in 0..P {
                        _mm_prefetch::<_MM_HINT_T0>(ahead(q) as *const i8);
                    }
                } else if kk % 2 == 0 {
                    // Each half of each panel, every other step (a half's step is half a line).
                    for q in 0..P {
                        let ahead = ahead(q);
                        _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8);
                        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(hoff) as *const i8);
                    }
                }
                let mut av = [_mm512_setzero_ps(); M];
                for i in 0..M {
                    av[i] = _mm512_set1_ps(*ap.add(i));
                }
                for v in 0..2 * P {
                    let bv = $widen(bp.add((v / 2) * bstride + (v % 2) * hoff));
                    for i in 0..M {
                        acc[i][v] = _mm512_fmadd_ps(av[i], bv, acc[i][v]);
                    }
                }
                ap = ap.add(a_step);
                bp = bp.add(ldb);
            }
            for i in 0..M {
                for v in 0..2 * P {
                    _mm512_mask_storeu_ps(
                        c.add(i * ldc + (v / 2) * NR + (v % 2) * 16),
                        masks[v],
                        acc[i][v],
                    );
                }
            }
        }

        /// # Safety
        /// See [`crate::kernels::WideArgs`]; the CPU supports AVX-512F; rows <= 3.
        pub unsafe fn $wide_entry(w: &WideArgs<f32, $H>) {
            by_rows!(w.rows, [3, 2, 1], R => by_panels!(w.panels, P => $wide::<R, P>(w)))
        }

        /// # Safety
        /// See [`crate::kernels::TileArgs`]; the CPU supports AVX-512F; rows <= 12. Nothing
        /// is done beside the tile (no copy, no prefetch run).
        pub unsafe fn $tile_entry(t: &TileArgs<f32, $H>, _: &TileAux<$H>) {
            by_rows!(t.rows, [12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1], R => $tile::<R>(t))
        }
    };
}

avx512_widen16!(
    Bf16,
    widen_bf16,
    tile_bf16,
    tile_rows_bf16,
    wide_bf16,
    wide_rows_bf16
);
avx512_widen16!(
    F16,
    widen_f16,
    tile_f16,
    tile_rows_f16,
    wide_f16,
    wide_rows_f16
);
