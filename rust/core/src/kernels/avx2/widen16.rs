//! AVX2+FMA kernels against 16-bit B (bfloat16 or float16 panels, float32 A and C): the
//! float32 kernel's 6 x 16 tile (the 32-column panel in two halves, each through the whole
//! depth block; 1-3 rows take the whole panel per pass), with each 8-value quarter of a B step
//! loaded as 16 bytes and widened in a register (bfloat16: zero-extend and shift left by 16;
//! float16: F16C `vcvtph2ps`), both exact, then the same FMA chain as the float32 kernel.
//!
//! With a prefetch run in its auxiliary arguments ([`crate::kernels::TileAux`]), the tile
//! kernel fetches the packed B the loops read next into L2 while it computes, as the float32
//! one does; with it products of at most 36 rows take the loops' chunked path.
//!
//! The wide kernel (1-3 rows against 1-4 panels, A packed, compact or in place: the decode
//! case) takes the panels' vectors side by side in groups of as many as its accumulators
//! hold, as the float32 wide kernel does, each group one pass over the depth block.

use super::gemm::f32k::lane_mask;
use super::gemm::{load_f32, store_f32};
use super::wide_groups::{live_columns, vectors, wide_groups};
use crate::formats::{Bf16, F16};
use crate::kernels::contract::{by_rows, BPanel, CTile, TileArgs, TileAux, WideArgs};
use crate::kernels::pacer::Pacer;
use std::arch::x86_64::*;

/// Rows of a tile (the A panel height these kernels read).
pub const MR: usize = 6;

/// Software prefetch of the packed B panel, in depth steps ahead (a step of a panel is 64
/// bytes): a tile of fewer than 4 rows (decode) streams B from memory, 4 KiB ahead; larger
/// ones read it from L2, 2 KiB ahead (as the AVX-512 16-bit kernels).
const PF_FEW: usize = 64;
const PF_MANY: usize = 32;

/// Prefetch distance (depth steps) of the wide kernel against B read in place (rows far
/// apart, which the hardware prefetcher does not follow).
const PF_IN_PLACE: usize = 8;

/// Columns of half a panel.
const H: usize = 16;

/// Where the 8-value quarter `u` of a run of quarters that starts at a half's first column
/// lies, for a panel whose second half is `hoff` values after its first.
#[inline(always)]
fn qoff(u: usize, hoff: usize) -> usize {
    crate::kernels::half_offset(u * 8, H, hoff)
}

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

macro_rules! avx2_widen16 {
    ($H:ty, $widen:ident, $entry:ident, $tile:ident, $passes:ident, $wide_entry:ident,
     $wide_group:ident) => {
        /// `M` rows x `V` vectors of the tile `t`. `PF`: every `every` (> 0) steps, one more
        /// cache line from `pf` on is prefetched into L2.
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $tile<const M: usize, const V: usize, const PF: bool>(
            t: &TileArgs<f32, $H>,
            pf: *const u8,
            every: usize,
        ) {
            let TileArgs { cols, kc, a, accumulate, .. } = *t;
            let (b, ldb, hoff) = (t.b.ptr, t.b.ldb, t.b.hoff);
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
            let mut ap = a;
            let mut bp = b;
            let dist = if M < 4 { PF_FEW } else { PF_MANY };
            let mut pacer = Pacer::new(pf, every);
            let mut step = || {
                if PF {
                    pacer.step();
                }
                // Past the panel's end is harmless: a prefetch never faults. (The second half's
                // line too, for a panel in halves when the pass reads both.)
                let ahead = bp.wrapping_add(dist * ldb);
                _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8);
                if V > 2 && hoff != H {
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(qoff(V - 1, hoff)) as *const i8);
                }
                let mut bv = [_mm256_setzero_ps(); V];
                for v in 0..V {
                    bv[v] = $widen(bp.add(qoff(v, hoff)));
                }
                for i in 0..M {
                    let ai = _mm256_set1_ps(*ap.add(i));
                    for v in 0..V {
                        acc[i][v] = _mm256_fmadd_ps(ai, bv[v], acc[i][v]);
                    }
                }
                ap = ap.add(MR);
                bp = bp.add(ldb);
            };
            if V <= 2 {
                // Two steps an iteration (see the float32 tile).
                for _ in 0..kc / 2 {
                    step();
                    step();
                }
                if kc % 2 == 1 {
                    step();
                }
            } else {
                for _ in 0..kc {
                    step();
                }
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
        unsafe fn $passes<const PF: bool>(t: &TileArgs<f32, $H>, pf: *const u8, pf_lines: usize) {
            // One pass of V vectors over `cols` columns from column `off`, prefetching its
            // `share` of the lines (all of them, or half with two passes) from `pf` on.
            macro_rules! pass {
                ($m:ident, $v:literal, $cols:expr, $off:expr, $pf:expr, $share:expr) => {{
                    let pass = TileArgs {
                        cols: $cols,
                        b: BPanel {
                            ptr: crate::kernels::b_at(t.b.ptr, t.b.hoff, H, $off),
                            ..t.b
                        },
                        c: CTile {
                            ptr: t.c.ptr.add($off),
                            ..t.c
                        },
                        ..*t
                    };
                    let every = Pacer::every(t.kc, $share);
                    if PF && every > 0 {
                        $tile::<$m, $v, true>(&pass, $pf, every)
                    } else {
                        $tile::<$m, $v, false>(&pass, $pf, 0)
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
                    pass!(R, 2, cols.min(H), 0, pf, share);
                    if cols > H {
                        pass!(R, 2, cols - H, H, Pacer::line(pf, share), pf_lines - share);
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
        pub unsafe fn $entry(t: &TileArgs<f32, $H>, aux: &TileAux<$H>) {
            match aux.prefetch {
                Some(run) => $passes::<true>(t, run.ptr, run.lines),
                None => $passes::<false>(t, std::ptr::null(), 0),
            }
        }

        /// `G` consecutive vectors (from vector `V0`, vector v being columns 8 v .. 8 v + 8 of
        /// the `P` panels side by side) of `M` rows through the depth block; the vectors past
        /// the panels (v >= 4 P) are not there (neither read nor written).
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $wide_group<const M: usize, const G: usize, const V0: usize, const P: usize>(
            w: &WideArgs<f32, $H>,
        ) {
            let WideArgs { cols_last, kc, a, a_step, bstride, accumulate, .. } = *w;
            let (b, ldb, hoff) = (w.b.ptr, w.b.ldb, w.b.hoff);
            let (c, ldc) = (w.c.ptr, w.c.ldc);
            let nv = vectors(V0, G, P);
            let live = |v: usize| live_columns(v, P, cols_last, 8);
            let boff = |v: usize| (v / 4) * bstride + qoff(v % 4, hoff);
            let mut acc = load_f32::<M, G>(c, ldc, V0, nv, live, accumulate);
            // A packed panel's step is one cache line (its two halves' lines in halves): each
            // panel's stream from memory, PF_FEW steps ahead. Past a panel's end the stream
            // goes on in whatever follows: harmless, a prefetch never faults.
            let dist = if ldb == 2 * H || ldb == H { PF_FEW } else { PF_IN_PLACE };
            let mut ap = a;
            let mut bp = b;
            for _ in 0..kc {
                for g in 0..nv {
                    let v = V0 + g;
                    if g == 0 || v % 4 == 0 || (hoff != H && v % 4 == 2) {
                        let ahead = bp.wrapping_add(dist * ldb + boff(v));
                        _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8);
                    }
                }
                let mut av = [_mm256_setzero_ps(); M];
                for i in 0..M {
                    av[i] = _mm256_set1_ps(*ap.add(i));
                }
                for g in 0..nv {
                    let bv = $widen(bp.add(boff(V0 + g)));
                    for i in 0..M {
                        acc[i][g] = _mm256_fmadd_ps(av[i], bv, acc[i][g]);
                    }
                }
                ap = ap.add(a_step);
                bp = bp.add(ldb);
            }
            store_f32(&acc, c, ldc, V0, nv, live);
        }

        /// The wide kernel: the 4 P vectors a row of the P panels side by side, in groups of
        /// as many as the accumulators hold (1 row: 8, 2 rows: 6, 3 rows: 4), each group a
        /// pass over the depth block (A is read once a pass).
        ///
        /// # Safety
        /// See [`crate::kernels::WideArgs`]; the CPU supports AVX2, FMA and F16C; rows <= 3.
        pub unsafe fn $wide_entry(w: &WideArgs<f32, $H>) {
            wide_groups!(w, $wide_group, false)
        }
    };
}

avx2_widen16!(
    Bf16,
    widen_bf16,
    tile_bf16,
    tile_rows_bf16,
    passes_bf16,
    wide_bf16,
    wide_group_bf16
);
avx2_widen16!(
    F16,
    widen_f16,
    tile_f16,
    tile_rows_f16,
    passes_f16,
    wide_f16,
    wide_group_f16
);
