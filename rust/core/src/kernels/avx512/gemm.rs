//! AVX-512F micro-kernels: 12 rows x 2 zmm vectors (f32: 12 x 32, f64: 12 x 16), 24
//! accumulators in registers. Column edges use masked loads and stores.
//!
//! With a prefetch run in its auxiliary arguments, the tile kernel fetches the run's cache
//! lines into L2 at an even pace over its depth steps: with it the loops fetch the packed B
//! read next while the row tiles compute (`gemm::loops::Ahead` for row blocks of many tiles,
//! `gemm::loops::few_rows_in_chunks` for at most 36 rows).

use crate::kernels::contract::{by_panels, by_rows, StreamArgs, TileArgs, TileAux, WideArgs};
use crate::kernels::pacer::Pacer;
use std::arch::x86_64::*;

pub const MR_F32: usize = 12;
pub const MR_F64: usize = 12;
/// Software prefetch distances of the tile kernels, in depth steps ahead (A: 32 steps =
/// 3 KiB; B: 16 steps = 2 KiB for f64 and for B read in place, [`PF_B_PACKED_F32`] for f32
/// packed panels): fetching ahead hides the latency of the streams the hardware prefetcher
/// follows late or not at all (B's rows far apart, the two halves of a panel).
const PF_A: usize = 32;
/// Prefetch distance of packed f32 B panels in the tile kernel: 32 steps = 4 KiB ahead (a step
/// of a float32 panel is two cache lines).
const PF_B_PACKED_F32: usize = 32;
/// Prefetch distance (depth steps) of the wide kernel when it reads B in place (rows far apart,
/// which the hardware prefetcher does not follow).
const PF_WIDE: usize = 8;
const PF_B: usize = 16;

/// The mask of the first `live` of `lanes` lanes (every lane when `live >= lanes`).
#[inline(always)]
fn lane_mask(live: usize, lanes: usize) -> u32 {
    (1u32 << live.min(lanes)) - 1
}

macro_rules! avx512_kernel {
    ($entry:ident, $tile:ident, $wide_entry:ident, $wide:ident, $stream_entry:ident, $stream:ident, $T:ty, $MR:expr, $LANES:expr, $pf_packed:expr, $mask:ty,
     $zero:ident, $loadu:ident, $storeu:ident, $maskz_loadu:ident, $mask_storeu:ident, $set1:ident, $fmadd:ident) => {
        /// `M` rows of the tile `t`. `PF`: every `every` (> 0) steps, one more cache line from
        /// `pf` on is prefetched into L2.
        #[target_feature(enable = "avx512f")]
        unsafe fn $tile<const M: usize, const PF: bool>(
            t: &TileArgs<$T, $T>,
            pf: *const u8,
            every: usize,
        ) {
            let TileArgs { cols, kc, a, accumulate, .. } = *t;
            let (b, ldb, hoff) = (t.b.ptr, t.b.ldb, t.b.hoff);
            let (c, ldc) = (t.c.ptr, t.c.ldc);
            let m0 = lane_mask(cols, $LANES) as $mask;
            let m1 = lane_mask(cols.saturating_sub($LANES), $LANES) as $mask;
            let mut acc0 = [$zero(); M];
            let mut acc1 = [$zero(); M];
            if accumulate {
                for i in 0..M {
                    acc0[i] = $maskz_loadu(m0, c.add(i * ldc));
                    acc1[i] = $maskz_loadu(m1, c.add(i * ldc + $LANES));
                }
            }
            let mut ap = a;
            let mut bp = b;
            // B read in place (rows far apart) is prefetched by both types: the hardware
            // prefetcher does not follow it from memory. Packed B panels by both too, f32
            // further ahead (see PF_B_PACKED_F32), each half of a panel on its own.
            let packed = ldb == $LANES || ldb == 2 * $LANES;
            let ahead = if packed { $pf_packed } else { PF_B } * ldb;
            let mut pacer = Pacer::new(pf, every);
            for _ in 0..kc {
                if PF {
                    pacer.step();
                }
                // Addresses past the panels' ends are harmless: a prefetch never faults.
                _mm_prefetch::<_MM_HINT_T0>(ap.wrapping_add(PF_A * $MR) as *const i8);
                _mm_prefetch::<_MM_HINT_T0>(bp.wrapping_add(ahead) as *const i8);
                _mm_prefetch::<_MM_HINT_T0>(bp.wrapping_add(ahead + hoff) as *const i8);
                let b0 = $loadu(bp);
                let b1 = $loadu(bp.add(hoff));
                for i in 0..M {
                    let ai = $set1(*ap.add(i));
                    acc0[i] = $fmadd(ai, b0, acc0[i]);
                    acc1[i] = $fmadd(ai, b1, acc1[i]);
                }
                ap = ap.add($MR);
                bp = bp.add(ldb);
            }
            for i in 0..M {
                $mask_storeu(c.add(i * ldc), m0, acc0[i]);
                $mask_storeu(c.add(i * ldc + $LANES), m1, acc1[i]);
            }
        }

        /// Few rows (1 to 3) against `P` (1 to 4) consecutive B panels at once: with four, 8
        /// independent vectors per row keep the FMA pipes busy and read 4 memory streams in
        /// parallel (the decode case); fewer for the last panels of a thread's share.
        #[target_feature(enable = "avx512f")]
        unsafe fn $wide<const M: usize, const P: usize>(w: &WideArgs<$T, $T>) {
            let WideArgs { cols_last, kc, a, a_step, bstride, accumulate, .. } = *w;
            let (b, ldb, hoff) = (w.b.ptr, w.b.ldb, w.b.hoff);
            let (c, ldc) = (w.c.ptr, w.c.ldc);
            const NR: usize = 2 * $LANES;
            let masks = super::wide_masks::wide_masks::<P>(cols_last, $LANES).map(|m| m as $mask);
            let mut acc = [[$zero(); 8]; M];
            if accumulate {
                for i in 0..M {
                    for v in 0..2 * P {
                        acc[i][v] = $maskz_loadu(
                            masks[v],
                            c.add(i * ldc + (v / 2) * NR + (v % 2) * $LANES),
                        );
                    }
                }
            }
            let mut ap = a;
            let mut bp = b;
            for _ in 0..kc {
                let mut av = [$zero(); M];
                for i in 0..M {
                    av[i] = $set1(*ap.add(i));
                }
                if ldb != NR && ldb != $LANES {
                    // B read in place: rows far apart, which the hardware prefetcher does not
                    // follow; ask for the row PF_WIDE steps ahead of each panel.
                    for v in 0..2 * P {
                        let ahead = PF_WIDE * ldb + (v / 2) * bstride + (v % 2) * hoff;
                        _mm_prefetch::<_MM_HINT_T0>(bp.wrapping_add(ahead) as *const i8);
                    }
                }
                for v in 0..2 * P {
                    let bv = $loadu(bp.add((v / 2) * bstride + (v % 2) * hoff));
                    for i in 0..M {
                        acc[i][v] = $fmadd(av[i], bv, acc[i][v]);
                    }
                }
                ap = ap.add(a_step);
                bp = bp.add(ldb);
            }
            for i in 0..M {
                for v in 0..2 * P {
                    $mask_storeu(
                        c.add(i * ldc + (v / 2) * NR + (v % 2) * $LANES),
                        masks[v],
                        acc[i][v],
                    );
                }
            }
        }

        /// Few rows of A against B read in place along its whole rows (no packing): C is
        /// kept in memory (the rows' column range stays in L1 or L2) and takes eight depth
        /// steps per pass, each from its own row of B, so B is read as eight long sequential
        /// streams instead of one short piece per row and panel. Per element the same chain
        /// `c = fma(a[k], b[k][j], c)`, k ascending from a zero C (eight streams keep the
        /// memory busier than four; more pass C less often but do not read faster).
        ///
        /// Whole vectors of C and B go through plain loads and stores, only a partial last
        /// vector through masked ones: masked loads are slower on some cores.
        #[target_feature(enable = "avx512f")]
        unsafe fn $stream<const M: usize>(s: &StreamArgs<$T, $T>) {
            let StreamArgs { cols, k, a, lda, b, ldb, .. } = *s;
            let (c, ldc) = (s.c.ptr, s.c.ldc);
            // Whole vectors with plain loads and stores, the last partial one masked (see
            // above).
            let nfull = cols / $LANES;
            let tail = cols % $LANES;
            let tmask = lane_mask(tail, $LANES) as $mask;
            for i in 0..M {
                for v in 0..nfull {
                    $storeu(c.add(i * ldc + v * $LANES), $zero());
                }
                if tail > 0 {
                    $mask_storeu(c.add(i * ldc + nfull * $LANES), tmask, $zero());
                }
            }
            // Depth steps per pass over C.
            const S: usize = 8;
            let mut kk = 0;
            while kk + S <= k {
                let mut av = [[$zero(); S]; M];
                for i in 0..M {
                    for s in 0..S {
                        av[i][s] = $set1(*a.add(i * lda + kk + s));
                    }
                }
                let b0 = b.add(kk * ldb);
                for v in 0..nfull {
                    let off = v * $LANES;
                    let mut bv = [$zero(); S];
                    for s in 0..S {
                        bv[s] = $loadu(b0.add(s * ldb + off));
                    }
                    for i in 0..M {
                        let cp = c.add(i * ldc + off);
                        let mut cv = $loadu(cp);
                        for s in 0..S {
                            cv = $fmadd(av[i][s], bv[s], cv);
                        }
                        $storeu(cp, cv);
                    }
                }
                if tail > 0 {
                    let off = nfull * $LANES;
                    let mut bv = [$zero(); S];
                    for s in 0..S {
                        bv[s] = $maskz_loadu(tmask, b0.add(s * ldb + off));
                    }
                    for i in 0..M {
                        let cp = c.add(i * ldc + off);
                        let mut cv = $maskz_loadu(tmask, cp);
                        for s in 0..S {
                            cv = $fmadd(av[i][s], bv[s], cv);
                        }
                        $mask_storeu(cp, tmask, cv);
                    }
                }
                kk += S;
            }
            while kk < k {
                let b0 = b.add(kk * ldb);
                for v in 0..nfull {
                    let off = v * $LANES;
                    let bv = $loadu(b0.add(off));
                    for i in 0..M {
                        let cp = c.add(i * ldc + off);
                        let cv = $fmadd($set1(*a.add(i * lda + kk)), bv, $loadu(cp));
                        $storeu(cp, cv);
                    }
                }
                if tail > 0 {
                    let off = nfull * $LANES;
                    let bv = $maskz_loadu(tmask, b0.add(off));
                    for i in 0..M {
                        let cp = c.add(i * ldc + off);
                        let cv = $fmadd($set1(*a.add(i * lda + kk)), bv, $maskz_loadu(tmask, cp));
                        $mask_storeu(cp, tmask, cv);
                    }
                }
                kk += 1;
            }
        }

        /// # Safety
        /// The CPU supports AVX-512F; `s` describes a stream product (see
        /// [`crate::kernels::StreamArgs`]) of 1 to 8 rows.
        pub unsafe fn $stream_entry(s: &StreamArgs<$T, $T>) {
            by_rows!(s.rows, [8, 7, 6, 5, 4, 3, 2, 1], R => $stream::<R>(s))
        }

        /// # Safety
        /// The CPU supports AVX-512F; `w` describes a wide call (see
        /// [`crate::kernels::WideArgs`]) of 1 to 3 rows.
        pub unsafe fn $wide_entry(w: &WideArgs<$T, $T>) {
            by_rows!(w.rows, [3, 2, 1], R => by_panels!(w.panels, P => $wide::<R, P>(w)))
        }

        /// The tile kernel; with a prefetch run in `aux`, it also fetches the run's lines into
        /// L2, at most one a depth step, spread evenly over them.
        ///
        /// # Safety
        /// The CPU supports AVX-512F; `t` describes a tile of 1 to 12 rows (see
        /// [`crate::kernels::TileArgs`]); the prefetch run may point anywhere (prefetches do
        /// not fault and it is never read).
        pub unsafe fn $entry(t: &TileArgs<$T, $T>, aux: &TileAux<$T>) {
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

avx512_kernel!(
    kernel_f32,
    tile_f32,
    wide_f32,
    wide_tile_f32,
    stream_f32,
    stream_rows_f32,
    f32,
    MR_F32,
    16,
    PF_B_PACKED_F32,
    __mmask16,
    _mm512_setzero_ps,
    _mm512_loadu_ps,
    _mm512_storeu_ps,
    _mm512_maskz_loadu_ps,
    _mm512_mask_storeu_ps,
    _mm512_set1_ps,
    _mm512_fmadd_ps
);
avx512_kernel!(
    kernel_f64,
    tile_f64,
    wide_f64,
    wide_tile_f64,
    stream_f64,
    stream_rows_f64,
    f64,
    MR_F64,
    8,
    PF_B,
    __mmask8,
    _mm512_setzero_pd,
    _mm512_loadu_pd,
    _mm512_storeu_pd,
    _mm512_maskz_loadu_pd,
    _mm512_mask_storeu_pd,
    _mm512_set1_pd,
    _mm512_fmadd_pd
);
