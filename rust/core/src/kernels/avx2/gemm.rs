//! AVX2+FMA micro-kernels (16 ymm registers).
//!
//! - Tile kernel: `MR` = 6 rows x 2 ymm vectors (f32: 6 x 16, f64: 6 x 8), 12 accumulators,
//!   the shape of BLIS's Haswell kernels. The shared packed B panel (NR = 32 f32 / 16 f64
//!   columns, stored as two k-major halves) is taken half after half, each through the whole
//!   depth block, reading the half's values in sequence; the A micro-panel (6 values per depth
//!   step) is read once per half, from L1. In cache it runs near the AVX2 FMA peak (3 x 4 and
//!   4 x 2 tiles ran well below it).
//!   With a prefetch run in its auxiliary arguments, the tile kernel also fetches it into L2 at
//!   an even pace over its depth steps (the loops hand each row tile a slice of the packed B
//!   read next, see `gemm::loops::Ahead` and `gemm::loops::few_rows_in_chunks`); with a copy
//!   destination, it stores the B panel it reads there as a packed copy, for B read in place
//!   (the other row tiles read the copy).
//! - Wide kernel (1 to 3 rows against 1 to 4 consecutive panels): the 16 vectors per row
//!   (4 a panel) are taken in groups of as many as the 12 accumulators allow (1 row: 8, 2
//!   rows: 6, 3 rows: 4).
//! - Stream kernel (1 to 8 rows against B read in place along whole rows): as in the AVX-512
//!   file, C kept in memory, eight depth steps per pass.
//!
//! Every element of C is one FMA chain over k ascending, so all give the bits of
//! `gemm_reference`. Column edges use `vmaskmov` loads and stores; whole vectors plain ones
//! (`vmaskmov` stores are slow on AMD cores).

use super::wide_groups::{live_columns, vectors, wide_groups};
use crate::kernels::contract::{by_rows, BPanel, CTile, StreamArgs, TileArgs, TileAux, WideArgs};
use crate::kernels::pacer::Pacer;
use std::arch::x86_64::*;

pub const MR_F32: usize = 6;
pub const MR_F64: usize = 6;

/// Prefetch distance (depth steps) for B read in place by the tile kernel: each step is another
/// row of B, so the distance is all that hides memory's latency from the row tile that reads
/// (and copies) the panels first.
const PF_B: usize = 32;
/// Prefetch distance (depth steps) for packed B panels in the tile kernel: 48 steps = 6 KiB of
/// the panel (not 32, exactly 4 KiB ahead, which some cores handle worst).
const PF_B_PACKED: usize = 48;
/// Prefetch distance (depth steps) for B read in place by the wide kernel.
const PF_WIDE: usize = 8;
/// Prefetch distance (depth steps, into L2) for packed half panels in the wide kernel's
/// three-row passes, which read a panel's two halves side by side: 64 steps = 4 KiB of each
/// half: three rows read from memory wait on the two halves' streams otherwise.
const PF_WIDE_HALVES: usize = 64;

macro_rules! avx2_impl {
    ($module:ident, $T:ty, $MR:expr, $LANES:expr, $maskint:ty,
     $zero:ident, $loadu:ident, $storeu:ident, $maskload:ident, $maskstore:ident,
     $set1:ident, $fmadd:ident) => {
        pub mod $module {
            use super::*;

            /// Lanes per vector.
            const L: usize = $LANES;
            /// Columns of a packed B panel.
            const NR: usize = 4 * L;
            /// Columns of half a panel.
            const H: usize = 2 * L;

            /// Where vector `u` of a run of vectors that starts at a half's first column lies,
            /// for a panel whose second half is `hoff` values after its first.
            #[inline(always)]
            fn voff(u: usize, hoff: usize) -> usize {
                crate::kernels::half_offset(u * L, H, hoff)
            }

            /// Whether a B panel with steps `ldb` apart is packed (its halves stored whole, or
            /// a copy in row order) rather than read in place.
            #[inline(always)]
            fn packed(ldb: usize) -> bool {
                ldb == H || ldb == NR
            }

            const fn mask_table() -> [$maskint; 2 * L] {
                let mut t = [0 as $maskint; 2 * L];
                let mut i = 0;
                while i < L {
                    t[i] = -1;
                    i += 1;
                }
                t
            }
            /// L set lanes then L clear ones: the mask of the first `live` lanes starts at
            /// `L - live`.
            static MASKS: [$maskint; 2 * L] = mask_table();

            /// The first `live` of the L lanes (all of them when `live >= L`).
            #[inline(always)]
            pub(in crate::kernels::avx2) unsafe fn lane_mask(live: usize) -> __m256i {
                _mm256_loadu_si256(MASKS.as_ptr().add(L - live.min(L)) as *const __m256i)
            }

            /// `M` rows x `V` vectors of C (`t.cols` <= V L live columns) over `t.kc` depth steps;
            /// A has `MRS` values per depth step. `COPY`: each step's B vectors are also stored
            /// to `dst` (NR values a step). `PF`: every `every` (> 0) steps, one more cache line
            /// from `pf` on is prefetched into L2.
            #[target_feature(enable = "avx2,fma")]
            unsafe fn tile<
                const M: usize,
                const V: usize,
                const MRS: usize,
                const COPY: bool,
                const PF: bool,
            >(
                t: &TileArgs<$T, $T>,
                dst: *mut $T,
                pf: *const u8,
                every: usize,
            ) {
                let TileArgs { cols, kc, a, accumulate, .. } = *t;
                let (b, ldb, hoff) = (t.b.ptr, t.b.ldb, t.b.hoff);
                let (c, ldc) = (t.c.ptr, t.c.ldc);
                let full = cols >= V * L;
                let mut acc = [[$zero(); V]; M];
                if accumulate {
                    for i in 0..M {
                        for v in 0..V {
                            let cp = c.add(i * ldc + v * L);
                            acc[i][v] = if full {
                                $loadu(cp)
                            } else {
                                $maskload(cp, lane_mask(cols.saturating_sub(v * L)))
                            };
                        }
                    }
                }
                let mut ap = a;
                let mut bp = b;
                let mut dp = dst;
                // Packed B PF_B_PACKED steps ahead; B read in place (rows far apart, which the
                // hardware prefetcher does not follow from memory) PF_B steps ahead. Addresses
                // past the end are harmless (no fault).
                let dist = if packed(ldb) { PF_B_PACKED } else { PF_B };
                let mut pacer = Pacer::new(pf, every);
                // One depth step. `two_lines`: the strip's values may span two cache lines, and
                // both are fetched ahead: B read in place (rows at any address), or a strip of
                // more than 64 bytes (in the two halves of a packed panel). A packed panel's
                // lines are aligned, so a strip of at most two vectors reads one line a step.
                //
                // A step of the 6 x 16 strip is 12 FMAs and 8 loads (2 of B, 6 broadcasts of
                // A); with a prefetch and loop control it is over 4 instructions a cycle at the
                // FMA rate, near what a core's front end issues: hence two steps an iteration
                // and one prefetch a step for a packed strip (below).
                let mut step = |two_lines: bool| {
                    if PF {
                        pacer.step();
                    }
                    let ahead = bp.wrapping_add(dist * ldb);
                    _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8);
                    if two_lines {
                        let last = voff(V - 1, hoff) + L - 1;
                        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(last) as *const i8);
                    }
                    let mut bv = [$zero(); V];
                    for v in 0..V {
                        bv[v] = $loadu(bp.add(voff(v, hoff)));
                    }
                    if COPY {
                        for v in 0..V {
                            $storeu(dp.add(v * L), bv[v]);
                        }
                        dp = dp.add(NR);
                    }
                    for i in 0..M {
                        let ai = $set1(*ap.add(i));
                        for v in 0..V {
                            acc[i][v] = $fmadd(ai, bv[v], acc[i][v]);
                        }
                    }
                    ap = ap.add(MRS);
                    bp = bp.add(ldb);
                };
                if packed(ldb) && V <= 2 {
                    // Two steps an iteration: fewer instructions of loop control a step. (Not
                    // for a whole-panel strip of 1-3 rows, whose accumulators, B vectors and
                    // broadcast already fill the 16 registers: two steps would spill.)
                    for _ in 0..kc / 2 {
                        step(false);
                        step(false);
                    }
                    if kc % 2 == 1 {
                        step(false);
                    }
                } else {
                    let two_lines = !packed(ldb) || V * L * std::mem::size_of::<$T>() > 64;
                    for _ in 0..kc {
                        step(two_lines);
                    }
                }
                for i in 0..M {
                    for v in 0..V {
                        let cp = c.add(i * ldc + v * L);
                        if full {
                            $storeu(cp, acc[i][v]);
                        } else {
                            $maskstore(cp, lane_mask(cols.saturating_sub(v * L)), acc[i][v]);
                        }
                    }
                }
            }

            /// A panel of NR columns as `NR / (V L)` strips of V vectors, each through the
            /// whole depth block, for `rows` <= MRS rows.
            ///
            /// `COPY`: every strip also stores the B values it loads to `dst`, NR values a
            /// step, including the strips with no live column of C. `PF`: the strips prefetch
            /// `pf_lines` cache lines from `pf` on into L2, each strip an equal consecutive
            /// share (a strip with no live column does not run, and its share is not fetched).
            #[inline(always)]
            unsafe fn strips<const V: usize, const MRS: usize, const COPY: bool, const PF: bool>(
                t: &TileArgs<$T, $T>,
                dst: *mut $T,
                pf: *const u8,
                pf_lines: usize,
            ) {
                let TileArgs { rows, cols, kc, .. } = *t;
                let BPanel { ptr: b, ldb, hoff } = t.b;
                let w = V * L;
                // `PF`: strip j / w prefetches share j / w of the lines, at most one a step,
                // spread evenly over its steps.
                let share = pf_lines.div_ceil(NR / w);
                let every = Pacer::every(kc, share);
                let mut j = 0;
                // Copying, every strip of the panel is read (and copied whole).
                let end = if COPY { NR } else { cols };
                while j < end {
                    let bj = crate::kernels::b_at(b, hoff, H, j);
                    if COPY && j >= cols {
                        // No live column of C left: the copy alone.
                        for k in 0..kc {
                            for v in 0..V {
                                let x = $loadu(bj.add(k * ldb + voff(v, hoff)));
                                $storeu(dst.add(k * NR + j + v * L), x);
                            }
                        }
                        j += w;
                        continue;
                    }
                    // The strip: columns j .. j + w of the tile.
                    let strip = TileArgs {
                        cols: (cols - j).min(w),
                        b: BPanel { ptr: bj, ..t.b },
                        c: CTile {
                            ptr: t.c.ptr.add(j),
                            ..t.c
                        },
                        ..*t
                    };
                    let dj = dst.wrapping_add(j);
                    let pfj = Pacer::line(pf, (j / w) * share);
                    by_rows!(rows, [1, 2, 3, 4, 5, 6], R => {
                        if PF && every > 0 {
                            tile::<R, V, MRS, COPY, true>(&strip, dj, pfj, every)
                        } else {
                            tile::<R, V, MRS, COPY, false>(&strip, dj, pfj, 0)
                        }
                    });
                    j += w;
                }
            }

            /// The tile kernel: the panel in strips of half a panel (from 4 rows) or a whole
            /// one (1 to 3 rows), each strip through the whole depth block.
            ///
            /// With a prefetch run in `aux`, the strips also fetch its lines into L2, each
            /// strip an equal consecutive share, spread evenly over its depth steps, at most one
            /// a step.
            ///
            /// With a copy destination in `aux`, every strip also stores the B values it loads
            /// there, NR values a step (including the strips with no live column of C): for B
            /// read in place with rows a multiple of 2 KiB apart (their steps share one or two
            /// L1 sets, so with half-panel passes no row tile finds the panel in L1 and each
            /// reads it from L2), the loops have a row block's first tile copy each panel, and
            /// the others read the copy. Copying for every row stride cost speed where the rows
            /// spread over four or more sets.
            ///
            /// # Safety
            /// The CPU supports AVX2 and FMA; `t` describes a tile of at most MR rows (see
            /// [`crate::kernels::TileArgs`]); a copy destination has room for `kc * NR`
            /// values and overlaps nothing else; the prefetch run may point anywhere
            /// (prefetches do not fault and it is never read).
            pub unsafe fn kernel(t: &TileArgs<$T, $T>, aux: &TileAux<$T>) {
                match (aux.copy_to, aux.prefetch) {
                    (Some(dst), _) => strips_for::<true, false>(t, dst, std::ptr::null(), 0),
                    (None, Some(run)) => strips_for::<false, true>(t, std::ptr::null_mut(), run.ptr, run.lines),
                    (None, None) => strips_for::<false, false>(t, std::ptr::null_mut(), std::ptr::null(), 0),
                }
            }

            /// The strips a tile of `t.rows` rows takes (`COPY`, `PF`: as for `strips`).
            #[inline(always)]
            unsafe fn strips_for<const COPY: bool, const PF: bool>(
                t: &TileArgs<$T, $T>,
                dst: *mut $T,
                pf: *const u8,
                pf_lines: usize,
            ) {
                if t.rows <= 3 {
                    // Few rows (the last tile of a row block, T = 1 to 3): the whole panel per
                    // pass, so that there are 4 to 12 accumulator chains rather than 2 to 6
                    // (two FMA pipes of latency 4 need 8 to stay busy).
                    strips::<4, { $MR }, COPY, PF>(t, dst, pf, pf_lines)
                } else {
                    strips::<2, { $MR }, COPY, PF>(t, dst, pf, pf_lines)
                }
            }

            /// `G` consecutive vectors (from vector `V0`, vector v being columns v L .. v L + L
            /// of the `P` panels side by side) of `M` rows through the depth block; the
            /// vectors past the panels (v >= 4 P) are not there (neither read nor written).
            #[target_feature(enable = "avx2,fma")]
            unsafe fn wide_group<const M: usize, const G: usize, const V0: usize, const P: usize>(
                w: &WideArgs<$T, $T>,
            ) {
                let WideArgs { cols_last, kc, a, a_step, bstride, accumulate, .. } = *w;
                let (b, ldb, hoff) = (w.b.ptr, w.b.ldb, w.b.hoff);
                let (c, ldc) = (w.c.ptr, w.c.ldc);
                // Vectors of the call (a constant), and the live columns of vector v: whole
                // vectors in the first P - 1 panels, the last panel's `cols_last` columns after
                // that.
                let nv = vectors(V0, G, P);
                let live = |v: usize| live_columns(v, P, cols_last, L);
                let boff = |v: usize| (v / 4) * bstride + voff(v % 4, hoff);
                let mut acc = [[$zero(); G]; M];
                if accumulate {
                    for i in 0..M {
                        for g in 0..nv {
                            let v = V0 + g;
                            let cp = c.add(i * ldc + v * L);
                            acc[i][g] = if live(v) == L {
                                $loadu(cp)
                            } else {
                                $maskload(cp, lane_mask(live(v)))
                            };
                        }
                    }
                }
                let mut ap = a;
                let mut bp = b;
                let in_place = !packed(ldb);
                for _ in 0..kc {
                    if in_place {
                        for g in 0..nv {
                            let ahead = PF_WIDE * ldb + boff(V0 + g);
                            _mm_prefetch::<_MM_HINT_T0>(bp.wrapping_add(ahead) as *const i8);
                        }
                    } else if M == 3 && hoff != H {
                        // Halves: a line of each a step (the pass reads one panel).
                        for g in [0, G / 2] {
                            if g >= nv {
                                continue;
                            }
                            let ahead = PF_WIDE_HALVES * ldb + boff(V0 + g);
                            _mm_prefetch::<_MM_HINT_T1>(bp.wrapping_add(ahead) as *const i8);
                        }
                    }
                    let mut av = [$zero(); M];
                    for i in 0..M {
                        av[i] = $set1(*ap.add(i));
                    }
                    for g in 0..nv {
                        let bv = $loadu(bp.add(boff(V0 + g)));
                        for i in 0..M {
                            acc[i][g] = $fmadd(av[i], bv, acc[i][g]);
                        }
                    }
                    ap = ap.add(a_step);
                    bp = bp.add(ldb);
                }
                for i in 0..M {
                    for g in 0..nv {
                        let v = V0 + g;
                        let cp = c.add(i * ldc + v * L);
                        if live(v) == L {
                            $storeu(cp, acc[i][g]);
                        } else {
                            $maskstore(cp, lane_mask(live(v)), acc[i][g]);
                        }
                    }
                }
            }

            /// The wide kernel: the 4 P vectors a row of the P panels side by side, in groups
            /// of as many as the 12 accumulators hold (1 row: 8, 2 rows: 6, 3 rows: 4).
            ///
            /// # Safety
            /// The CPU supports AVX2 and FMA; `w` describes a wide call of 1 to 3 rows (see
            /// [`crate::kernels::WideArgs`]).
            pub unsafe fn wide(w: &WideArgs<$T, $T>) {
                wide_groups!(w, wide_group, false)
            }

            /// Few rows of A against B read in place along its whole rows: C kept in memory,
            /// eight depth steps per pass over it, each from its own row of B (eight long
            /// sequential streams). Per element the chain `c = fma(a[k], b[k][j], c)`, k
            /// ascending from a zero C.
            #[target_feature(enable = "avx2,fma")]
            unsafe fn stream_rows<const M: usize>(s: &StreamArgs<$T, $T>) {
                let StreamArgs { cols, k, a, lda, b, ldb, .. } = *s;
                let (c, ldc) = (s.c.ptr, s.c.ldc);
                let nfull = cols / L;
                let tail = cols % L;
                let tmask = lane_mask(tail);
                for i in 0..M {
                    for v in 0..nfull {
                        $storeu(c.add(i * ldc + v * L), $zero());
                    }
                    if tail > 0 {
                        $maskstore(c.add(i * ldc + nfull * L), tmask, $zero());
                    }
                }
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
                        let off = v * L;
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
                        let off = nfull * L;
                        let mut bv = [$zero(); S];
                        for s in 0..S {
                            bv[s] = $maskload(b0.add(s * ldb + off), tmask);
                        }
                        for i in 0..M {
                            let cp = c.add(i * ldc + off);
                            let mut cv = $maskload(cp, tmask);
                            for s in 0..S {
                                cv = $fmadd(av[i][s], bv[s], cv);
                            }
                            $maskstore(cp, tmask, cv);
                        }
                    }
                    kk += S;
                }
                while kk < k {
                    let b0 = b.add(kk * ldb);
                    for v in 0..nfull {
                        let off = v * L;
                        let bv = $loadu(b0.add(off));
                        for i in 0..M {
                            let cp = c.add(i * ldc + off);
                            let cv = $fmadd($set1(*a.add(i * lda + kk)), bv, $loadu(cp));
                            $storeu(cp, cv);
                        }
                    }
                    if tail > 0 {
                        let off = nfull * L;
                        let bv = $maskload(b0.add(off), tmask);
                        for i in 0..M {
                            let cp = c.add(i * ldc + off);
                            let cv = $fmadd($set1(*a.add(i * lda + kk)), bv, $maskload(cp, tmask));
                            $maskstore(cp, tmask, cv);
                        }
                    }
                    kk += 1;
                }
            }

            /// # Safety
            /// The CPU supports AVX2 and FMA; `s` describes a stream product of 1 to 8 rows
            /// (see [`crate::kernels::StreamArgs`]).
            pub unsafe fn stream(s: &StreamArgs<$T, $T>) {
                by_rows!(s.rows, [8, 7, 6, 5, 4, 3, 2, 1], R => stream_rows::<R>(s))
            }
        }
    };
}

avx2_impl!(
    f32k,
    f32,
    MR_F32,
    8,
    i32,
    _mm256_setzero_ps,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_maskload_ps,
    _mm256_maskstore_ps,
    _mm256_set1_ps,
    _mm256_fmadd_ps
);
avx2_impl!(
    f64k,
    f64,
    MR_F64,
    4,
    i64,
    _mm256_setzero_pd,
    _mm256_loadu_pd,
    _mm256_storeu_pd,
    _mm256_maskload_pd,
    _mm256_maskstore_pd,
    _mm256_set1_pd,
    _mm256_fmadd_pd
);

pub use f32k::{kernel as kernel_f32, stream as stream_f32, wide as wide_f32};
pub use f64k::{kernel as kernel_f64, stream as stream_f64, wide as wide_f64};

/// A float32 wide group's accumulators (see `wide_groups`), for the 16-bit and block wide
/// kernels: `M` rows of the `nv` (<= `G`) 8-column vectors from vector
/// `v0` of C (`ldc` apart), their `live(v)` columns loaded when `accumulate`, else zero (a
/// vector with no live column is neither read nor, in [`store_f32`], written).
#[target_feature(enable = "avx2")]
#[inline]
pub(super) unsafe fn load_f32<const M: usize, const G: usize>(
    c: *const f32,
    ldc: usize,
    v0: usize,
    nv: usize,
    live: impl Fn(usize) -> usize,
    accumulate: bool,
) -> [[__m256; G]; M] {
    let mut acc = [[_mm256_setzero_ps(); G]; M];
    if accumulate {
        for (i, row) in acc.iter_mut().enumerate() {
            for (g, a) in row.iter_mut().enumerate().take(nv) {
                let cp = c.add(i * ldc + (v0 + g) * 8);
                *a = _mm256_maskload_ps(cp, f32k::lane_mask(live(v0 + g)));
            }
        }
    }
    acc
}

/// Stores the accumulators of [`load_f32`] back to their live columns of C.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) unsafe fn store_f32<const M: usize, const G: usize>(
    acc: &[[__m256; G]; M],
    c: *mut f32,
    ldc: usize,
    v0: usize,
    nv: usize,
    live: impl Fn(usize) -> usize,
) {
    for (i, row) in acc.iter().enumerate() {
        for (g, a) in row.iter().enumerate().take(nv) {
            let cp = c.add(i * ldc + (v0 + g) * 8);
            _mm256_maskstore_ps(cp, f32k::lane_mask(live(v0 + g)), *a);
        }
    }
}
