//! AVX-512F kernels against B in a block format (`q8_0`, `q4_0` panels, float32 A and C): the
//! float32 tile (12 x 32) and wide (1-3 rows x 1-4 panels) kernels with each block's 32 float16
//! scales widened once (`vcvtph2ps`, two vectors) and each depth step's 32 integers widened to
//! float32 weights in registers, then the same FMA chain as the float32 kernels.
//!
//! A step's weights are `d * value(q)`: `q8_0` sign-extends its 32 bytes to integers
//! (`vpmovsxbd`) and converts them (`vcvtdq2ps`, exact for |q| <= 128); `q4_0` zero-extends its
//! 16 bytes (`vpmovzxbd`) and looks each nibble up in a table of the 16 values `q - 8`
//! (`vpermps` reads the low 4 bits of each lane: the low nibbles directly, the high ones after
//! a shift by 4). The product with the scale is exact in float32 (the scale's 11 significant
//! bits times at most 8), so every weight is the format's definition
//! (`formats::block::widen_block_step`) bit for bit, and every element of C the contract's
//! chain.

use crate::formats::block::{BlockFormat, QK, SCALE_BYTES};
use crate::formats::{Q4_0, Q8_0};
use crate::kernels::contract::{by_panels, by_rows, TileArgs, TileAux, WideArgs};
use crate::kernels::pacer::Pacer;
use std::arch::x86_64::*;

/// Rows of a tile (the A panel height these kernels read).
pub const MR: usize = 12;

/// Software prefetch distance of the tile kernel's panel, in bytes ahead of the step being
/// read: two blocks of `q8_0` (2 KiB), nearly four of `q4_0`, for a tile of a few rows
/// (decode, B streamed from memory once); a full 12-row tile (a larger product, the panel
/// read from L2 once per tile): [`PF_FULL`]. The wide kernel fetches one and two blocks ahead.
const PF_FEW: usize = 2176;
const PF_FULL: usize = 1088;

/// The 32 weights of one depth step, as two vectors (columns 0-15, 16-31).
type Step = (__m512, __m512);

/// 16 bytes at `p`.
#[inline(always)]
unsafe fn load16(p: *const u8) -> __m128i {
    _mm_loadu_si128(p as *const __m128i)
}

/// The 32 float16 scales of a panel block at `p`, widened (columns 0-15, 16-31).
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn scales(p: *const u8) -> Step {
    (
        _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)),
        _mm512_cvtph_ps(_mm256_loadu_si256(p.add(32) as *const __m256i)),
    )
}

/// `q8_0`: 16 signed bytes at `p` times the scales `d`.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn widen16_q8_0(p: *const u8, d: __m512) -> __m512 {
    _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load16(p))), d)
}

/// `q8_0`: the weights of the step at `p` (32 bytes).
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn widen_q8_0(p: *const u8, d: Step) -> Step {
    (widen16_q8_0(p, d.0), widen16_q8_0(p.add(16), d.1))
}

/// The 16 values `q - 8` of a nibble `q`, as float32.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn nibble_values() -> __m512 {
    _mm512_setr_ps(
        -8.0, -7.0, -6.0, -5.0, -4.0, -3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0,
    )
}

/// `q4_0`: the weights of the step at `p` (16 bytes: column `j` in the low nibble of byte `j`,
/// column `j + 16` in its high nibble).
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn widen_q4_0(p: *const u8, d: Step) -> Step {
    let raw = _mm512_cvtepu8_epi32(load16(p));
    let table = nibble_values();
    let lo = _mm512_permutexvar_ps(raw, table);
    let hi = _mm512_permutexvar_ps(_mm512_srli_epi32::<4>(raw), table);
    (_mm512_mul_ps(lo, d.0), _mm512_mul_ps(hi, d.1))
}

#[inline(always)]
fn lane_mask(live: usize) -> __mmask16 {
    ((1u32 << live.min(16)) - 1) as __mmask16
}

macro_rules! avx512_blocks {
    ($W:ty, $widen:ident, $tile_entry:ident, $tile:ident, $wide_entry:ident, $wide:ident) => {
        /// `M` rows of the tile `t`. `PF`: every `every` (> 0) steps, one more cache line from
        /// `pf` on is prefetched into L2.
        #[target_feature(enable = "avx512f")]
        unsafe fn $tile<const M: usize, const PF: bool>(
            t: &TileArgs<f32, $W>,
            pf: *const u8,
            every: usize,
        ) {
            const STEP: usize = <$W as BlockFormat>::STEP_BYTES;
            let TileArgs { cols, kc, a, accumulate, .. } = *t;
            let (b, ldb) = (t.b.ptr as *const u8, t.b.ldb);
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
            let ahead = if M < MR { PF_FEW } else { PF_FULL };
            let mut pacer = Pacer::new(pf, every);
            let mut ap = a;
            let mut blk = b;
            let mut left = kc;
            while left > 0 {
                let d = scales(blk);
                let sp = blk.add(SCALE_BYTES);
                // One depth step: its weights into every row's two accumulators. Past the
                // panel's end a prefetch is harmless (it never faults).
                let mut step = |s: usize| {
                    if PF {
                        pacer.step();
                    }
                    _mm_prefetch::<_MM_HINT_T0>(
                        blk.wrapping_add(ahead + s * (ldb / QK)) as *const i8,
                    );
                    let w = $widen(sp.add(s * STEP), d);
                    for i in 0..M {
                        let ai = _mm512_set1_ps(*ap.add(i));
                        acc0[i] = _mm512_fmadd_ps(ai, w.0, acc0[i]);
                        acc1[i] = _mm512_fmadd_ps(ai, w.1, acc1[i]);
                    }
                    ap = ap.add(MR);
                };
                if left >= QK {
                    for s in 0..QK {
                        step(s);
                    }
                    left -= QK;
                } else {
                    for s in 0..left {
                        step(s);
                    }
                    left = 0;
                }
                blk = blk.add(ldb);
            }
            for i in 0..M {
                _mm512_mask_storeu_ps(c.add(i * ldc), m0, acc0[i]);
                _mm512_mask_storeu_ps(c.add(i * ldc + 16), m1, acc1[i]);
            }
        }

        /// 1 to 3 rows against `P` (1 to 4) consecutive panels (`bstride` bytes apart): two
        /// accumulators a row and panel, the panels' scales widened once a block (kept where
        /// the compiler likes: registers, or the stack for three rows, read as memory operands).
        #[target_feature(enable = "avx512f")]
        unsafe fn $wide<const M: usize, const P: usize>(w: &WideArgs<f32, $W>) {
            const STEP: usize = <$W as BlockFormat>::STEP_BYTES;
            let WideArgs { cols_last, kc, a, a_step, bstride, accumulate, .. } = *w;
            let (b, ldb) = (w.b.ptr as *const u8, w.b.ldb);
            let (c, ldc) = (w.c.ptr, w.c.ldc);
            let masks = super::wide_masks::wide_masks::<P>(cols_last, 16).map(|m| m as __mmask16);
            let mut acc = [[_mm512_setzero_ps(); 8]; M];
            if accumulate {
                for i in 0..M {
                    for v in 0..2 * P {
                        acc[i][v] = _mm512_maskz_loadu_ps(
                            masks[v],
                            c.add(i * ldc + (v / 2) * 32 + (v % 2) * 16),
                        );
                    }
                }
            }
            let blocks = kc.div_ceil(QK);
            let mut ap = a;
            let mut blk = b;
            let mut left = kc;
            while left > 0 {
                let mut d = [(_mm512_setzero_ps(), _mm512_setzero_ps()); 4];
                for q in 0..P {
                    d[q] = scales(blk.add(q * bstride));
                }
                let sp = blk.add(SCALE_BYTES);
                let mut step = |s: usize| {
                    let mut av = [_mm512_setzero_ps(); M];
                    for i in 0..M {
                        av[i] = _mm512_set1_ps(*ap.add(i));
                    }
                    for q in 0..P {
                        let wq = $widen(sp.add(q * bstride + s * STEP), d[q]);
                        for i in 0..M {
                            acc[i][2 * q] = _mm512_fmadd_ps(av[i], wq.0, acc[i][2 * q]);
                            acc[i][2 * q + 1] = _mm512_fmadd_ps(av[i], wq.1, acc[i][2 * q + 1]);
                        }
                    }
                    ap = ap.add(a_step);
                };
                if left >= QK {
                    // A cache line of each panel's stream every 64 bytes of steps (and the
                    // block's last line with the first): into L1 one block ahead, into L2 two
                    // blocks ahead (benches/JOURNAL.md). Past the panel's end the stream goes
                    // on in the panel P on: the loops hand this kernel a depth block's panels
                    // four at a time, consecutive `bstride` apart, so the next call's first
                    // blocks arrive during this call's last ones. Only a hint: an address past
                    // the packed matrix is never read and a prefetch does not fault.
                    let cur = (kc - left) / QK;
                    let stream = |q: usize, dist: usize| {
                        let t = cur + dist;
                        if t < blocks {
                            b.wrapping_add(q * bstride + t * ldb)
                        } else {
                            b.wrapping_add((P + q) * bstride + (t - blocks) * ldb)
                        }
                    };
                    let near = [stream(0, 1), stream(1, 1), stream(2, 1), stream(3, 1)];
                    let far = [stream(0, 2), stream(1, 2), stream(2, 2), stream(3, 2)];
                    const U: usize = 64 / <$W as BlockFormat>::STEP_BYTES;
                    for g in 0..QK / U {
                        for q in 0..P {
                            let (l1, l2) = (near[q].wrapping_add(g * 64), far[q].wrapping_add(g * 64));
                            _mm_prefetch::<_MM_HINT_T0>(l1 as *const i8);
                            _mm_prefetch::<_MM_HINT_T1>(l2 as *const i8);
                            if g == 0 {
                                _mm_prefetch::<_MM_HINT_T0>(l1.wrapping_add(ldb - 64) as *const i8);
                                _mm_prefetch::<_MM_HINT_T1>(l2.wrapping_add(ldb - 64) as *const i8);
                            }
                        }
                        for u in 0..U {
                            step(g * U + u);
                        }
                    }
                    left -= QK;
                } else {
                    for s in 0..left {
                        step(s);
                    }
                    left = 0;
                }
                blk = blk.add(ldb);
            }
            for i in 0..M {
                for v in 0..2 * P {
                    _mm512_mask_storeu_ps(
                        c.add(i * ldc + (v / 2) * 32 + (v % 2) * 16),
                        masks[v],
                        acc[i][v],
                    );
                }
            }
        }

        /// # Safety
        /// See [`crate::kernels::WideArgs`]; the CPU supports AVX-512F; rows <= 3.
        pub unsafe fn $wide_entry(w: &WideArgs<f32, $W>) {
            by_rows!(w.rows, [3, 2, 1], R => by_panels!(w.panels, P => $wide::<R, P>(w)))
        }

        /// The tile kernel; with a prefetch run in `aux`, it also fetches the run's lines into
        /// L2, at most one a depth step, spread evenly over them.
        ///
        /// # Safety
        /// See [`crate::kernels::TileArgs`]; the CPU supports AVX-512F; rows <= 12; the
        /// prefetch run may point anywhere (prefetches do not fault and it is never read).
        pub unsafe fn $tile_entry(t: &TileArgs<f32, $W>, aux: &TileAux<$W>) {
            match aux.prefetch {
                Some(run) if run.lines > 0 => {
                    let every = Pacer::every(t.kc, run.lines);
                    by_rows!(
                        t.rows,
                        [12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1],
                        R => $tile::<R, true>(t, run.ptr, every)
                    )
                }
                _ => by_rows!(
                    t.rows,
                    [12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1],
                    R => $tile::<R, false>(t, std::ptr::null(), 0)
                ),
            }
        }
    };
}

avx512_blocks!(
    Q8_0,
    widen_q8_0,
    tile_q8_0,
    tile_rows_q8_0,
    wide_q8_0,
    wide_rows_q8_0
);
avx512_blocks!(
    Q4_0,
    widen_q4_0,
    tile_q4_0,
    tile_rows_q4_0,
    wide_q4_0,
    wide_rows_q4_0
);
