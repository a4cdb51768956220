//! NEON micro-kernels (aarch64): 32 registers of 128 bits, so a block of C held in registers
//! is at most 24 vectors, leaving room for the A values and the B vectors of one depth step.
//!
//! A is packed in 12-row panels (as for AVX-512) and B in the shared panels of NR columns
//! (f32: 32 = 8 vectors of 4, f64: 16 = 8 vectors of 2). The tile kernel runs a 12-row tile
//! of one panel as a few register blocks, each through the whole depth block:
//!
//! - f32: 12 rows x 8 columns (24 accumulators, 3 A vectors, 2 B vectors: 29 registers) over
//!   the four 8-column quarters of the panel; 4-6 rows x 16 columns over its halves; 1-3 rows
//!   x 32 columns.
//! - f64: 6 rows x 8 columns (24 accumulators, 3 A vectors, 4 B vectors: 31 registers) over
//!   the two halves of the panel, for rows 0-5 and then rows 6-11; 1-3 rows x 16 columns.
//!
//! Each step multiplies a B vector by one lane of an A vector (`fmla v.4s, v.4s, v.s[l]`): a
//! fused multiply-add, exactly rounded, so every element of C is the contract's chain
//! `c = fma(a[k], b[k][j], c)`, k ascending, from zero or from the value in C. Column edges go
//! through a small buffer on the stack (once per block, outside the depth loop), so nothing
//! outside the tile is read or written.
//!
//! Against 16-bit B (bfloat16 or float16 panels, float32 A and C) the float32 blocks, tile and
//! wide kernel run with each 4-value B vector loaded as 8 bytes and widened exactly in a
//! register (bfloat16: `ushll` by 16; float16: `fcvtl`), then the same FMA chains.

use crate::formats::{Bf16, F16};
use crate::kernels::contract::{by_rows, BPanel, CTile, StreamArgs, TileArgs, TileAux, WideArgs};
use crate::kernels::transpose::four_row_groups;
use std::arch::aarch64::*;

pub const MR_F32: usize = 12;
pub const MR_F64: usize = 12;

#[inline(always)]
pub(super) unsafe fn fma_lane_f32(
    acc: float32x4_t,
    b: float32x4_t,
    a: float32x4_t,
    lane: usize,
) -> float32x4_t {
    // `lane` is a constant after unrolling: the match folds away.
    match lane {
        0 => vfmaq_laneq_f32::<0>(acc, b, a),
        1 => vfmaq_laneq_f32::<1>(acc, b, a),
        2 => vfmaq_laneq_f32::<2>(acc, b, a),
        _ => vfmaq_laneq_f32::<3>(acc, b, a),
    }
}

#[inline(always)]
unsafe fn fma_lane_f64(
    acc: float64x2_t,
    b: float64x2_t,
    a: float64x2_t,
    lane: usize,
) -> float64x2_t {
    match lane {
        0 => vfmaq_laneq_f64::<0>(acc, b, a),
        _ => vfmaq_laneq_f64::<1>(acc, b, a),
    }
}

/// Twelve rows of `kc` values (row stride `rs`, consecutive columns) into the 12-row panel
/// layout `dst[kk * 12 + i]` by 4 x 4 transposes in registers, four depth steps at a time
/// (the caller copies the last `kc % 4`). A plain copy (bits unchanged).
///
/// # Safety
/// See [`crate::kernels::PackPanelFn`].
pub(super) unsafe fn pack12_f32(src: *const f32, rs: isize, kc: usize, dst: *mut f32) -> usize {
    let mut kk = 0;
    while kk + 4 <= kc {
        for g in 0..3 {
            four_rows_f32(src.offset(4 * g as isize * rs), rs, kk, dst.add(4 * g), 12);
        }
        kk += 4;
    }
    kk
}

/// Depth steps `kk .. kk + 4` of four rows (`src + i * rs + k`) to `dst[k * ldd + i]`: a 4 x 4
/// transpose in registers.
///
/// # Safety
/// The rows hold those steps, `dst` the places.
#[inline(always)]
unsafe fn four_rows_f32(src: *const f32, rs: isize, kk: usize, dst: *mut f32, ldd: usize) {
    let row = |i: isize| vld1q_f32(src.offset(i * rs + kk as isize));
    let (r0, r1, r2, r3) = (row(0), row(1), row(2), row(3));
    // t0 = r0k0 r1k0 r0k2 r1k2, t1 = r0k1 r1k1 r0k3 r1k3 (t2, t3 likewise for r2, r3).
    let t0 = vreinterpretq_f64_f32(vtrn1q_f32(r0, r1));
    let t1 = vreinterpretq_f64_f32(vtrn2q_f32(r0, r1));
    let t2 = vreinterpretq_f64_f32(vtrn1q_f32(r2, r3));
    let t3 = vreinterpretq_f64_f32(vtrn2q_f32(r2, r3));
    let cols = [
        vtrn1q_f64(t0, t2),
        vtrn1q_f64(t1, t3),
        vtrn2q_f64(t0, t2),
        vtrn2q_f64(t1, t3),
    ];
    for (j, v) in cols.into_iter().enumerate() {
        vst1q_f32(dst.add((kk + j) * ldd), vreinterpretq_f32_f64(v));
    }
}

/// Depth steps `kk`, `kk + 1` of two rows to `dst[k * ldd + i]`: a 2 x 2 transpose.
///
/// # Safety
/// As for [`four_rows_f32`].
#[inline(always)]
unsafe fn two_rows_f64(src: *const f64, rs: isize, kk: usize, dst: *mut f64, ldd: usize) {
    let r0 = vld1q_f64(src.offset(kk as isize));
    let r1 = vld1q_f64(src.offset(rs + kk as isize));
    vst1q_f64(dst.add(kk * ldd), vtrn1q_f64(r0, r1));
    vst1q_f64(dst.add((kk + 1) * ldd), vtrn2q_f64(r0, r1));
}

/// # Safety
/// See [`crate::kernels::TransposeFn`].
pub(super) unsafe fn transpose_f32(
    src: *const f32,
    rs: isize,
    groups: usize,
    kc: usize,
    dst: *mut f32,
    ldd: usize,
) -> usize {
    four_row_groups((src, rs), groups, kc, dst, 4, |s, kk, d| {
        four_rows_f32(s, rs, kk, d, ldd)
    })
}

/// # Safety
/// See [`crate::kernels::TransposeFn`].
pub(super) unsafe fn transpose_f64(
    src: *const f64,
    rs: isize,
    groups: usize,
    kc: usize,
    dst: *mut f64,
    ldd: usize,
) -> usize {
    four_row_groups((src, rs), groups, kc, dst, 2, |s, kk, d| {
        two_rows_f64(s, rs, kk, d, ldd);
        two_rows_f64(s.offset(2 * rs), rs, kk, d.add(2), ldd);
    })
}

/// [`pack12_f32`] for f64: 2 x 2 transposes, two depth steps at a time.
///
/// # Safety
/// As for [`pack12_f32`].
pub(super) unsafe fn pack12_f64(src: *const f64, rs: isize, kc: usize, dst: *mut f64) -> usize {
    let mut kk = 0;
    while kk + 2 <= kc {
        for g in 0..6 {
            two_rows_f64(src.offset(2 * g as isize * rs), rs, kk, dst.add(2 * g), 12);
        }
        kk += 2;
    }
    kk
}

/// The tile's register blocks, the tile itself and the wide kernel, for compute type `$T`
/// against B values of type `$B`, loaded a vector at a time by `$ldb` (the compute type's own
/// load, or a 16-bit load widened exactly).
macro_rules! neon_blocks {
    ($block:ident, $tile:ident, $wide_entry:ident, $T:ty, $B:ty, $V:ty, $L:expr, $MR:expr,
     $zero:ident, $ld:ident, $ldb:ident, $st:ident, $fma_lane:ident) => {
        /// One register block: rows `0..R` of the A panel `t.a` (12 values per depth step)
        /// against `P` B pieces of `W` vectors (piece p at `t.b.ptr + p * bstride`, steps
        /// `ldb` apart, a piece of a whole panel in its two halves `hoff` apart, see
        /// [`BPanel`]), C at `t.c` with `P * W * LANES` consecutive columns of which the first
        /// `t.cols` are in the tile. With `P > 1` each piece is a whole panel (`W * LANES ==
        /// NR`); a piece of fewer columns lies within one half.
        #[inline(always)]
        unsafe fn $block<const R: usize, const P: usize, const W: usize>(
            t: &TileArgs<$T, $B>,
            bstride: usize,
        ) {
            let TileArgs { cols: live, kc, a, accumulate, .. } = *t;
            let BPanel { ptr: b, ldb, hoff } = t.b;
            let CTile { ptr: c, ldc } = t.c;
            const L: usize = $L;
            // Columns of half a panel, and where vector w of a piece lies.
            const H: usize = 4 * $L;
            let voff = |w: usize| crate::kernels::half_offset(w * L, H, hoff);
            let full = live >= P * W * L;
            let mut acc = [[[$zero(); W]; P]; R];
            if accumulate {
                if full {
                    for r in 0..R {
                        for p in 0..P {
                            for w in 0..W {
                                acc[r][p][w] = $ld(c.add(r * ldc + (p * W + w) * L));
                            }
                        }
                    }
                } else {
                    // The live columns through a buffer, the rest of it zero (never stored).
                    let mut buf = [0.0 as $T; 64];
                    for r in 0..R {
                        std::ptr::copy_nonoverlapping(c.add(r * ldc), buf.as_mut_ptr(), live);
                        for p in 0..P {
                            for w in 0..W {
                                acc[r][p][w] = $ld(buf.as_ptr().add((p * W + w) * L));
                            }
                        }
                    }
                }
            }
            // One depth step: the A values (ceil(R / L) vectors, inside the 12-row panel),
            // then each B vector into its R accumulators.
            let step = |acc: &mut [[[$V; W]; P]; R], ap: *const $T, bp: *const $B| {
                let mut av = [$zero(); 12 / $L];
                for q in 0..R.div_ceil(L) {
                    av[q] = $ld(ap.add(q * L));
                }
                for p in 0..P {
                    for w in 0..W {
                        let bv = $ldb(bp.add(p * bstride + voff(w)));
                        for r in 0..R {
                            acc[r][p][w] = $fma_lane(acc[r][p][w], bv, av[r / L], r % L);
                        }
                    }
                }
            };
            // Several steps per iteration (two; four for one or two rows, whose steps are
            // short): the loop's own instructions count that much less.
            let unroll = if R <= 2 { 4 } else { 2 };
            let mut ap = a;
            let mut bp = b;
            for _ in 0..kc / unroll {
                for u in 0..unroll {
                    step(&mut acc, ap.add(u * $MR), bp.add(u * ldb));
                }
                ap = ap.add(unroll * $MR);
                bp = bp.add(unroll * ldb);
            }
            for _ in 0..kc % unroll {
                step(&mut acc, ap, bp);
                ap = ap.add($MR);
                bp = bp.add(ldb);
            }
            if full {
                for r in 0..R {
                    for p in 0..P {
                        for w in 0..W {
                            $st(c.add(r * ldc + (p * W + w) * L), acc[r][p][w]);
                        }
                    }
                }
            } else {
                let mut buf = [0.0 as $T; 64];
                for r in 0..R {
                    for p in 0..P {
                        for w in 0..W {
                            $st(buf.as_mut_ptr().add((p * W + w) * L), acc[r][p][w]);
                        }
                    }
                    std::ptr::copy_nonoverlapping(buf.as_ptr(), c.add(r * ldc), live);
                }
            }
        }

        /// Rows `0..R` of a tile, `cols` live columns of one panel: the panel's column groups
        /// of `W` vectors one after the other (groups wholly past `cols` skipped). A function
        /// of its own for each shape, so that each depth loop gets the registers to itself.
        #[inline(never)]
        unsafe fn $tile<const R: usize, const W: usize>(t: &TileArgs<$T, $B>) {
            const GROUP: usize = $L * 8;
            let width = W * $L;
            let mut j = 0;
            while j < t.cols && j < GROUP {
                let group = TileArgs {
                    cols: t.cols - j,
                    b: BPanel {
                        ptr: crate::kernels::b_at(t.b.ptr, t.b.hoff, 4 * $L, j),
                        ..t.b
                    },
                    c: CTile {
                        ptr: t.c.ptr.add(j),
                        ..t.c
                    },
                    ..*t
                };
                $block::<R, 1, W>(&group, 0);
                j += width;
            }
        }

        /// Few rows (1 to 3) against 1 to 4 consecutive B panels (`bstride` apart, the last
        /// with `cols_last` live columns), the decode case: one row takes two panels at a time
        /// (16 accumulators, two memory streams), two or three rows one panel at a time. A is
        /// a packed panel (`a_step` = MR: the register blocks load a step's values a vector at
        /// a time).
        ///
        /// # Safety
        /// See [`crate::kernels::WideArgs`]; rows <= 3, panels 1 to 4, `a_step` MR.
        pub unsafe fn $wide_entry(w: &WideArgs<$T, $B>) {
            const NR: usize = $L * 8;
            debug_assert_eq!(w.a_step, $MR);
            // Panels `q ..` of the four as one register block's tile.
            let from = |q: usize| w.tile_from(q, NR, w.b.ptr.add(q * w.bstride));
            by_rows!(w.rows, [1, 2, 3], R => {
                if R == 1 {
                    for pair in 0..w.panels / 2 {
                        $block::<R, 2, 8>(&from(2 * pair), w.bstride);
                    }
                    if w.panels % 2 == 1 {
                        $block::<R, 1, 8>(&from(w.panels - 1), 0);
                    }
                } else {
                    for q in 0..w.panels {
                        $block::<R, 1, 8>(&from(q), 0);
                    }
                }
            })
        }
    };
}

/// The stream kernel for compute type `$T`.
macro_rules! neon_stream {
    ($stream_entry:ident, $stream:ident, $T:ty, $V:ty, $L:expr, $zero:ident, $ld:ident,
     $st:ident, $fma_lane:ident, $fma_n:ident) => {
        /// Few rows of A against B read in place along its whole rows (no packing): C is
        /// kept in memory and takes eight depth steps per pass, each from its own row of B,
        /// so B is read as eight long sequential streams. Per element the same chain
        /// `c = fma(a[k], b[k][j], c)`, k ascending from a zero C; the last `cols % LANES`
        /// columns one value at a time (B's rows are not read past `cols`).
        #[inline(always)]
        unsafe fn $stream<const M: usize>(s: &StreamArgs<$T, $T>) {
            let StreamArgs { cols, k, a, lda, b, ldb, .. } = *s;
            let CTile { ptr: c, ldc } = s.c;
            const L: usize = $L;
            const S: usize = 8;
            let nvec = cols / L;
            for i in 0..M {
                for v in 0..nvec {
                    $st(c.add(i * ldc + v * L), $zero());
                }
            }
            let mut kk = 0;
            while kk + S <= k {
                let mut av = [[$zero(); S / $L]; M];
                for i in 0..M {
                    for q in 0..S / L {
                        av[i][q] = $ld(a.add(i * lda + kk + q * L));
                    }
                }
                let b0 = b.add(kk * ldb);
                for v in 0..nvec {
                    let off = v * L;
                    let mut bv = [$zero(); S];
                    for s in 0..S {
                        bv[s] = $ld(b0.add(s * ldb + off));
                    }
                    for i in 0..M {
                        let cp = c.add(i * ldc + off);
                        let mut cv = $ld(cp);
                        for s in 0..S {
                            cv = $fma_lane(cv, bv[s], av[i][s / L], s % L);
                        }
                        $st(cp, cv);
                    }
                }
                kk += S;
            }
            while kk < k {
                let b0 = b.add(kk * ldb);
                for v in 0..nvec {
                    let off = v * L;
                    let bv = $ld(b0.add(off));
                    for i in 0..M {
                        let cp = c.add(i * ldc + off);
                        $st(cp, $fma_n($ld(cp), bv, *a.add(i * lda + kk)));
                    }
                }
                kk += 1;
            }
            for j in nvec * L..cols {
                for i in 0..M {
                    let mut acc: $T = 0.0;
                    for kk in 0..k {
                        acc = (*a.add(i * lda + kk)).mul_add(*b.add(kk * ldb + j), acc);
                    }
                    *c.add(i * ldc + j) = acc;
                }
            }
        }

        /// # Safety
        /// See [`crate::kernels::StreamArgs`]; 1 to 8 rows.
        pub unsafe fn $stream_entry(s: &StreamArgs<$T, $T>) {
            by_rows!(s.rows, [8, 7, 6, 5, 4, 3, 2, 1], R => $stream::<R>(s))
        }
    };
}

neon_blocks!(
    block_f32,
    tile_f32,
    wide_f32,
    f32,
    f32,
    float32x4_t,
    4,
    MR_F32,
    zero_f32,
    vld1q_f32,
    vld1q_f32,
    vst1q_f32,
    fma_lane_f32
);
neon_blocks!(
    block_f64,
    tile_f64,
    wide_f64,
    f64,
    f64,
    float64x2_t,
    2,
    MR_F64,
    zero_f64,
    vld1q_f64,
    vld1q_f64,
    vst1q_f64,
    fma_lane_f64
);
neon_blocks!(
    block_bf16,
    tile_bf16,
    wide_bf16,
    f32,
    Bf16,
    float32x4_t,
    4,
    MR_F32,
    zero_f32,
    vld1q_f32,
    widen_bf16,
    vst1q_f32,
    fma_lane_f32
);
neon_blocks!(
    block_f16,
    tile_f16,
    wide_f16,
    f32,
    F16,
    float32x4_t,
    4,
    MR_F32,
    zero_f32,
    vld1q_f32,
    widen_f16,
    vst1q_f32,
    fma_lane_f32
);
neon_stream!(
    stream_f32,
    stream_rows_f32,
    f32,
    float32x4_t,
    4,
    zero_f32,
    vld1q_f32,
    vst1q_f32,
    fma_lane_f32,
    vfmaq_n_f32
);
neon_stream!(
    stream_f64,
    stream_rows_f64,
    f64,
    float64x2_t,
    2,
    zero_f64,
    vld1q_f64,
    vst1q_f64,
    fma_lane_f64,
    vfmaq_n_f64
);

/// Four bfloat16 values at `p` as float32 (exact: the 16 bits become the high half).
#[inline(always)]
unsafe fn widen_bf16(p: *const Bf16) -> float32x4_t {
    vreinterpretq_f32_u32(vshll_n_u16::<16>(vld1_u16(p as *const u16)))
}

/// Four float16 values at `p` as float32 (exact), by `fcvtl`: every aarch64 CPU has it, but
/// Rust's intrinsic for it takes a 16-bit float type that is not stable yet.
#[inline(always)]
unsafe fn widen_f16(p: *const F16) -> float32x4_t {
    let h = vld1_u16(p as *const u16);
    let out: float32x4_t;
    std::arch::asm!(
        "fcvtl {out:v}.4s, {h:v}.4h",
        out = lateout(vreg) out,
        h = in(vreg) h,
        options(pure, nomem, nostack, preserves_flags)
    );
    out
}

#[inline(always)]
fn zero_f32() -> float32x4_t {
    unsafe { vdupq_n_f32(0.0) }
}

#[inline(always)]
fn zero_f64() -> float64x2_t {
    unsafe { vdupq_n_f64(0.0) }
}

/// Register blocks of `W` vectors for a tile of `rows` rows (the widest that fits the 24
/// accumulators; see the module documentation).
const fn block_width_f32(rows: usize) -> usize {
    match rows {
        7.. => 2,
        4..=6 => 4,
        _ => 8,
    }
}

/// The float32 tile kernel's entry against B values of type `$B`.
macro_rules! f32_tile_entry {
    ($entry:ident, $tile:ident, $B:ty) => {
        /// # Safety
        /// See [`crate::kernels::TileArgs`]; 1 to 12 rows. Nothing is done beside the tile.
        pub unsafe fn $entry(t: &TileArgs<f32, $B>, _: &TileAux<$B>) {
            by_rows!(t.rows, [12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1], R => {
                const W: usize = block_width_f32(R);
                $tile::<R, W>(t)
            })
        }
    };
}

f32_tile_entry!(kernel_f32, tile_f32, f32);
f32_tile_entry!(kernel_bf16, tile_bf16, Bf16);
f32_tile_entry!(kernel_f16, tile_f16, F16);

/// # Safety
/// See [`crate::kernels::TileArgs`]; 1 to 12 rows. Nothing is done beside the tile.
pub unsafe fn kernel_f64(t: &TileArgs<f64, f64>, _: &TileAux<f64>) {
    // Up to six rows in one pass over the panel's halves (4 vectors a block); more as rows
    // 0-5, then the rest (A's 12-value steps read from value 6 on, C six rows down).
    const fn width(rows: usize) -> usize {
        if rows >= 4 {
            4
        } else {
            8
        }
    }
    by_rows!(t.rows, [12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1], R => {
        if R <= 6 {
            const W: usize = width(R);
            tile_f64::<R, W>(t)
        } else {
            tile_f64::<6, 4>(t);
            const R2: usize = R.saturating_sub(6);
            const W2: usize = width(R2);
            let lower = TileArgs {
                a: t.a.add(6),
                c: CTile {
                    ptr: t.c.ptr.add(6 * t.c.ldc),
                    ..t.c
                },
                ..*t
            };
            tile_f64::<R2, W2>(&lower)
        }
    })
}
