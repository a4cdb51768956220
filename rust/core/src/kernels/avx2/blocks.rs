//! AVX2+FMA kernels against B in a block format (`q8_0`, `q4_0` panels, float32 A and C): the
//! float32 kernel's 6 x 16 tile (the 32-column panel in two passes of 16 columns, each through
//! the whole depth block; 1-3 rows take the whole panel per pass), with each block's float16
//! scales widened once a block (F16C `vcvtph2ps`) and each 8-column quarter of a depth step
//! widened to float32 weights in a register, then the same FMA chain as the float32 kernel.
//!
//! `q8_0`: 8 signed bytes sign-extended (`vpmovsxbd`), converted (exact) and multiplied by the
//! scales (exact). `q4_0`: 8 bytes zero-extended; the low nibbles (masked) or the high ones
//! (shifted by 4) converted to `q` and the weight computed as `fma(q, d, -8 d)`: `d * q - 8 d`
//! is `d * (q - 8)`, representable exactly, and the fused operation rounds that exact value
//! once, so it is the weight itself. Every weight is the format's definition
//! (`formats::block::widen_block_step`) bit for bit.
//!
//! With a prefetch run in its auxiliary arguments ([`crate::kernels::TileAux`]), the tile
//! kernel fetches the packed B the loops read next into L2 while it computes, as the float32
//! one does; with it products of at most 36 rows take the loops' chunked path.
//!
//! The wide kernel (1-3 rows against 1-4 panels, A packed, compact or in place: the decode
//! case) takes the panels' 8-column vectors side by side in groups of as many as its
//! accumulators hold, as the float32 wide kernel does, each group one pass over the depth
//! block, its scales widened once a block.

use super::gemm::f32k::lane_mask;
use super::gemm::{load_f32, store_f32};
use super::wide_groups::{live_columns, vectors, wide_groups};
use crate::formats::block::{BlockFormat, QK, SCALE_BYTES};
use crate::formats::{Q4_0, Q8_0};
use crate::kernels::contract::{by_rows, TileArgs, TileAux, WideArgs};
use crate::kernels::pacer::Pacer;
use std::arch::x86_64::*;

/// Rows of a tile (the A panel height these kernels read).
pub const MR: usize = 6;

/// Software prefetch distance of the panels, in bytes ahead of the step being read (about two
/// blocks of `q8_0`): a tile of fewer than 4 rows (decode) streams B from memory; larger ones
/// read it from L2, half as far ahead.
const PF_FEW: usize = 2176;
const PF_MANY: usize = 1088;

/// 8 bytes at `p`.
#[inline(always)]
unsafe fn load8(p: *const u8) -> __m128i {
    _mm_loadl_epi64(p as *const __m128i)
}

/// The 8 float16 scales at `p`, widened.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn scales8(p: *const u8) -> __m256 {
    _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
}

/// `q8_0`: the 8 weights of columns `c0 .. c0 + 8` (`c0` a multiple of 8) of the step at `p`,
/// under their scales `d`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn widen_q8_0(p: *const u8, c0: usize, d: __m256) -> __m256 {
    _mm256_mul_ps(
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(load8(p.add(c0)))),
        d,
    )
}

/// `q4_0`: the 8 weights of columns `c0 .. c0 + 8` of the step at `p` (columns `j < 16` in the
/// low nibbles of bytes `j`, columns `j + 16` in their high nibbles), under their scales `d`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn widen_q4_0(p: *const u8, c0: usize, d: __m256) -> __m256 {
    let raw = _mm256_cvtepu8_epi32(load8(p.add(c0 % 16)));
    let q = if c0 < 16 {
        _mm256_and_si256(raw, _mm256_set1_epi32(0x0F))
    } else {
        _mm256_srli_epi32::<4>(raw)
    };
    let m8d = _mm256_mul_ps(d, _mm256_set1_ps(-8.0));
    _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), d, m8d)
}

macro_rules! avx2_blocks {
    ($W:ty, $widen:ident, $entry:ident, $tile:ident, $passes:ident, $wide_entry:ident,
     $wide_group:ident, $by_panel:expr) => {
        /// `M` rows x `V` vectors of the tile `t` from panel column `c0` on (`t.cols` live
        /// columns from there; `t.c` at that column). `PF`: every `every` (> 0) steps, one more
        /// cache line from `pf` on is prefetched into L2.
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $tile<const M: usize, const V: usize, const PF: bool>(
            t: &TileArgs<f32, $W>,
            c0: usize,
            pf: *const u8,
            every: usize,
        ) {
            const STEP: usize = <$W as BlockFormat>::STEP_BYTES;
            let TileArgs { cols, kc, a, accumulate, .. } = *t;
            let (b, ldb) = (t.b.ptr as *const u8, t.b.ldb);
            let (c, ldc) = (t.c.ptr, t.c.ldc);
            let mut masks = [_mm256_setzero_si256(); V];
            for v in 0..V {
                masks[v] = lane_mask(cols.saturating_sub(v * 8));
            }
            let mut acc = [[_mm256_setzero_ps(); V]; M];
            if accumulate {
                for i in 0..M {
                    for v in 0..V {
                        acc[i][v] = _mm256_maskload_ps(c.add(i * ldc + v * 8), masks[v]);
                    }
                }
            }
            let ahead = if M < 4 { PF_FEW } else { PF_MANY };
            let mut pacer = Pacer::new(pf, every);
            let mut ap = a;
            let mut blk = b;
            let mut left = kc;
            while left > 0 {
                let mut d = [_mm256_setzero_ps(); V];
                for v in 0..V {
                    d[v] = scales8(blk.add(2 * (c0 + 8 * v)));
                }
                let sp = blk.add(SCALE_BYTES);
                let mut step = |s: usize| {
                    if PF {
                        pacer.step();
                    }
                    // Past the panel's end a prefetch is harmless (it never faults).
                    _mm_prefetch::<_MM_HINT_T0>(
                        blk.wrapping_add(ahead + s * (ldb / QK)) as *const i8,
                    );
                    let mut w = [_mm256_setzero_ps(); V];
                    for v in 0..V {
                        w[v] = $widen(sp.add(s * STEP), c0 + 8 * v, d[v]);
                    }
                    for i in 0..M {
                        let ai = _mm256_set1_ps(*ap.add(i));
                        for v in 0..V {
                            acc[i][v] = _mm256_fmadd_ps(ai, w[v], acc[i][v]);
                        }
                    }
                    ap = ap.add(MR);
                };
                let steps = left.min(QK);
                if steps == QK {
                    for s in 0..QK {
                        step(s);
                    }
                } else {
                    for s in 0..steps {
                        step(s);
                    }
                }
                left -= steps;
                blk = blk.add(ldb);
            }
            for i in 0..M {
                for v in 0..V {
                    _mm256_maskstore_ps(c.add(i * ldc + v * 8), masks[v], acc[i][v]);
                }
            }
        }

        /// The tile's passes over the panel (`PF`: the passes that run prefetch `pf_lines`
        /// cache lines from `pf` on into L2, each pass an equal consecutive share, at most one
        /// line a step).
        #[inline(always)]
        unsafe fn $passes<const PF: bool>(t: &TileArgs<f32, $W>, pf: *const u8, pf_lines: usize) {
            // One pass of V vectors over `cols` columns from column `off`, prefetching its
            // `share` of the lines from `pf` on.
            macro_rules! pass {
                ($m:ident, $v:literal, $cols:expr, $off:expr, $pf:expr, $share:expr) => {{
                    let pass = TileArgs {
                        cols: $cols,
                        c: crate::kernels::CTile {
                            ptr: t.c.ptr.add($off),
                            ..t.c
                        },
                        ..*t
                    };
                    let every = Pacer::every(t.kc, $share);
                    if PF && every > 0 {
                        $tile::<$m, $v, true>(&pass, $off, $pf, every)
                    } else {
                        $tile::<$m, $v, false>(&pass, $off, $pf, 0)
                    }
                }};
            }
            let cols = t.cols;
            by_rows!(t.rows, [1, 2, 3, 4, 5, 6], R => {
                if R <= 3 {
                    // Few rows: the whole panel per pass (4 to 12 accumulator chains).
                    pass!(R, 4, cols, 0, pf, pf_lines)
                } else {
                    let share = pf_lines.div_ceil(2);
                    pass!(R, 2, cols.min(16), 0, pf, share);
                    if cols > 16 {
                        pass!(R, 2, cols - 16, 16, Pacer::line(pf, share), pf_lines - share);
                    }
                }
            })
        }

        /// The tile kernel; with a prefetch run in `aux`, its passes also fetch the run's lines
        /// into L2, spread evenly over their depth steps.
        ///
        /// # Safety
        /// See [`crate::kernels::TileArgs`]; the CPU supports AVX2, FMA and F16C; rows <= 6;
        /// the prefetch run may point anywhere (prefetches do not fault and it is never read).
        pub unsafe fn $entry(t: &TileArgs<f32, $W>, aux: &TileAux<$W>) {
            match aux.prefetch {
                Some(run) => $passes::<true>(t, run.ptr, run.lines),
                None => $passes::<false>(t, std::ptr::null(), 0),
            }
        }

        /// `G` consecutive vectors (from vector `V0`, vector v being columns 8 v .. 8 v + 8 of
        /// the `P` panels side by side, `bstride` bytes apart) of `M` rows through the depth
        /// block; the vectors past the panels (v >= 4 P) are not there (neither read nor
        /// written).
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $wide_group<const M: usize, const G: usize, const V0: usize, const P: usize>(
            w: &WideArgs<f32, $W>,
        ) {
            const STEP: usize = <$W as BlockFormat>::STEP_BYTES;
            let WideArgs { cols_last, kc, a, a_step, bstride, accumulate, .. } = *w;
            let (b, ldb) = (w.b.ptr as *const u8, w.b.ldb);
            let (c, ldc) = (w.c.ptr, w.c.ldc);
            let nv = vectors(V0, G, P);
            let live = |v: usize| live_columns(v, P, cols_last, 8);
            let mut acc = load_f32::<M, G>(c, ldc, V0, nv, live, accumulate);
            let mut ap = a;
            let mut blk = b;
            let mut left = kc;
            while left > 0 {
                let mut d = [_mm256_setzero_ps(); G];
                for g in 0..nv {
                    let v = V0 + g;
                    d[g] = scales8(blk.add((v / 4) * bstride + 2 * (8 * (v % 4))));
                }
                let sp = blk.add(SCALE_BYTES);
                let steps = left.min(QK);
                for s in 0..steps {
                    // Each panel's stream as the few-row tile fetches it: PF_FEW bytes ahead,
                    // the block's bytes spread over its steps (past a panel's end, whatever
                    // follows: harmless, a prefetch never faults).
                    for g in 0..nv {
                        let v = V0 + g;
                        if g == 0 || v % 4 == 0 {
                            let ahead = (v / 4) * bstride + PF_FEW + s * (ldb / QK);
                            _mm_prefetch::<_MM_HINT_T0>(blk.wrapping_add(ahead) as *const i8);
                        }
                    }
                    let mut av = [_mm256_setzero_ps(); M];
                    for i in 0..M {
                        av[i] = _mm256_set1_ps(*ap.add(i));
                    }
                    for g in 0..nv {
                        let v = V0 + g;
                        let wv = $widen(sp.add((v / 4) * bstride + s * STEP), 8 * (v % 4), d[g]);
                        for i in 0..M {
                            acc[i][g] = _mm256_fmadd_ps(av[i], wv, acc[i][g]);
                        }
                    }
                    ap = ap.add(a_step);
                }
                left -= steps;
                blk = blk.add(ldb);
            }
            store_f32(&acc, c, ldc, V0, nv, live);
        }

        /// The wide kernel. `q8_0`: the 4 P vectors a row of the P panels side by side, in
        /// groups of as many as the accumulators hold, as the float32 wide kernel (see
        /// `wide_groups`). `q4_0` (`$by_panel`): a panel a pass, so that its 4 scale vectors
        /// and their `-8 d` stay in registers beside its 4 M accumulators (two panels a pass
        /// spill them and ran slower, benches/JOURNAL.md).
        ///
        /// # Safety
        /// See [`crate::kernels::WideArgs`]; the CPU supports AVX2, FMA and F16C; rows <= 3.
        pub unsafe fn $wide_entry(w: &WideArgs<f32, $W>) {
            wide_groups!(w, $wide_group, $by_panel)
        }
    };
}

avx2_blocks!(
    Q8_0,
    widen_q8_0,
    tile_q8_0,
    tile_rows_q8_0,
    passes_q8_0,
    wide_q8_0,
    wide_group_q8_0,
    false
);
avx2_blocks!(
    Q4_0,
    widen_q4_0,
    tile_q4_0,
    tile_rows_q4_0,
    passes_q4_0,
    wide_q4_0,
    wide_group_q4_0,
    true
);
