//! NEON kernels against B in a block format (`q8_0`, `q4_0` panels, float32 A and C): the
//! float32 tile's register blocks (12 rows x 8 columns, 4-6 rows x 16, 1-3 rows x 32; see
//! `gemm.rs`), each through the whole depth block, with each block's float16 scales widened
//! once a block (`fcvtl`) and each depth step's integers widened to float32 weights in
//! registers, then the same chains of `fmla` by lane.
//!
//! An 8-column group of a step is one 8-byte load: `q8_0` sign-extends the bytes twice
//! (`sxtl`, to 32 bits) and converts them (`scvtf`, exact); `q4_0` takes the low nibbles
//! (`and`) or the high ones (`ushr` by 4), widens them (`uxtl`), subtracts 8 in 16 bits and
//! sign-extends and converts `q - 8`. The product with the scale (`fmul`) is exact in float32
//! (11 significant bits times at most 8), so every weight is the format's definition
//! (`formats::block::widen_block_step`) bit for bit, and every element of C the contract's
//! chain.

use super::gemm::{fma_lane_f32, MR_F32};
use crate::formats::block::{BlockFormat, BLOCK_NR as NR, QK, SCALE_BYTES};
use crate::formats::{Q4_0, Q8_0};
use crate::kernels::contract::{by_rows, CTile, TileArgs, TileAux, WideArgs};
use std::arch::aarch64::*;

/// Four float16 scales at `p`, widened (`fcvtl`; see `widen_f16` in `gemm.rs` for why not
/// the intrinsic).
#[inline(always)]
unsafe fn scales4(p: *const u8) -> float32x4_t {
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

/// Eight signed 16-bit integers as float32 times their scales `d` (columns 0-3, 4-7).
#[inline(always)]
unsafe fn scaled(q: int16x8_t, d0: float32x4_t, d1: float32x4_t) -> [float32x4_t; 2] {
    [
        vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(q))), d0),
        vmulq_f32(vcvtq_f32_s32(vmovl_high_s16(q)), d1),
    ]
}

/// `q8_0`: the weights of columns `c0 .. c0 + 8` (`c0` a multiple of 8) of the step at `p`.
#[inline(always)]
unsafe fn widen8_q8_0(
    p: *const u8,
    c0: usize,
    d0: float32x4_t,
    d1: float32x4_t,
) -> [float32x4_t; 2] {
    scaled(vmovl_s8(vld1_s8(p.add(c0) as *const i8)), d0, d1)
}

/// `q4_0`: the weights of columns `c0 .. c0 + 8` of the step at `p` (columns `j < 16` in the
/// low nibbles of bytes `j`, columns `j + 16` in their high nibbles).
#[inline(always)]
unsafe fn widen8_q4_0(
    p: *const u8,
    c0: usize,
    d0: float32x4_t,
    d1: float32x4_t,
) -> [float32x4_t; 2] {
    let bytes = vld1_u8(p.add(c0 % 16));
    let q = if c0 < 16 {
        vand_u8(bytes, vdup_n_u8(0x0F))
    } else {
        vshr_n_u8::<4>(bytes)
    };
    let q = vsubq_s16(vreinterpretq_s16_u16(vmovl_u8(q)), vdupq_n_s16(8));
    scaled(q, d0, d1)
}

macro_rules! neon_blocks {
    ($W:ty, $widen8:ident, $entry:ident, $tile:ident, $block:ident, $wide_entry:ident) => {
        /// One register block: rows `0..R` of A (row i of depth step k at `t.a[k * a_step +
        /// i]`: a 12-row panel, `a_step` = 12, loaded a vector at a time; or, `COMPACT`, a
        /// compact copy or the row itself, loaded a value at a time) against `V` vectors (`4 V`
        /// columns from panel column `c0`; `t.cols` of them live, C at `t.c`), through all
        /// `t.kc` steps.
        #[inline(always)]
        unsafe fn $block<const R: usize, const V: usize, const COMPACT: bool>(
            t: &TileArgs<f32, $W>,
            c0: usize,
            a_step: usize,
        ) {
            const STEP: usize = <$W as BlockFormat>::STEP_BYTES;
            let TileArgs { cols: live, kc, a, accumulate, .. } = *t;
            let (b, ldb) = (t.b.ptr as *const u8, t.b.ldb);
            let CTile { ptr: c, ldc } = t.c;
            let full = live >= 4 * V;
            let zero = vdupq_n_f32(0.0);
            let mut acc = [[zero; V]; R];
            if accumulate {
                // The live columns through a buffer (the rest zero, never stored).
                let mut buf = [0f32; 32];
                for r in 0..R {
                    if full {
                        for v in 0..V {
                            acc[r][v] = vld1q_f32(c.add(r * ldc + 4 * v));
                        }
                    } else {
                        std::ptr::copy_nonoverlapping(c.add(r * ldc), buf.as_mut_ptr(), live);
                        for v in 0..V {
                            acc[r][v] = vld1q_f32(buf.as_ptr().add(4 * v));
                        }
                    }
                }
            }
            let mut ap = a;
            let mut blk = b;
            let mut left = kc;
            while left > 0 {
                let mut d = [zero; V];
                for v in 0..V {
                    d[v] = scales4(blk.add(2 * (c0 + 4 * v)));
                }
                let sp = blk.add(SCALE_BYTES);
                let mut step = |s: usize| {
                    let mut av = [zero; 3];
                    if COMPACT {
                        // R <= 3 values: one vector, built lane by lane (never reading past
                        // the step's R values).
                        let mut v = [0f32; 4];
                        for (r, x) in v.iter_mut().enumerate().take(R) {
                            *x = *ap.add(r);
                        }
                        av[0] = vld1q_f32(v.as_ptr());
                    } else {
                        for q in 0..R.div_ceil(4) {
                            av[q] = vld1q_f32(ap.add(4 * q));
                        }
                    }
                    for g in 0..V / 2 {
                        let w = $widen8(sp.add(s * STEP), c0 + 8 * g, d[2 * g], d[2 * g + 1]);
                        for h in 0..2 {
                            for r in 0..R {
                                acc[r][2 * g + h] =
                                    fma_lane_f32(acc[r][2 * g + h], w[h], av[r / 4], r % 4);
                            }
                        }
                    }
                    ap = ap.add(a_step);
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
            let mut buf = [0f32; 32];
            for r in 0..R {
                if full {
                    for v in 0..V {
                        vst1q_f32(c.add(r * ldc + 4 * v), acc[r][v]);
                    }
                } else {
                    for v in 0..V {
                        vst1q_f32(buf.as_mut_ptr().add(4 * v), acc[r][v]);
                    }
                    std::ptr::copy_nonoverlapping(buf.as_ptr(), c.add(r * ldc), live);
                }
            }
        }

        /// Rows `0..R` of a tile, A read as `$block` says: the panel's column groups of `V`
        /// vectors one after the other (groups wholly past `t.cols` skipped). A function of its
        /// own for each shape, so that each depth loop gets the registers to itself.
        #[inline(never)]
        unsafe fn $tile<const R: usize, const V: usize, const COMPACT: bool>(
            t: &TileArgs<f32, $W>,
            a_step: usize,
        ) {
            let mut j = 0;
            while j < t.cols {
                let group = TileArgs {
                    cols: t.cols - j,
                    c: CTile {
                        ptr: t.c.ptr.add(j),
                        ..t.c
                    },
                    ..*t
                };
                $block::<R, V, COMPACT>(&group, j, a_step);
                j += 4 * V;
            }
        }

        /// # Safety
        /// See [`crate::kernels::TileArgs`]; 1 to 12 rows. Nothing is done beside the tile.
        pub unsafe fn $entry(t: &TileArgs<f32, $W>, _: &TileAux<$W>) {
            by_rows!(t.rows, [12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1], R => {
                const V: usize = block_width(R);
                $tile::<R, V, false>(t, MR_F32)
            })
        }

        /// Few rows (1 to 3) against 1 to 4 consecutive panels (`bstride` bytes apart, the
        /// last with `cols_last` live columns), the decode case: the tile for those rows panel
        /// after panel, A compact or the row itself (row i of step k at `a[k * a_step + i]`),
        /// so that one call covers what the loops would pack into a 12-row panel and hand to
        /// four tiles.
        ///
        /// # Safety
        /// See [`crate::kernels::WideArgs`]; rows 1 to 3, panels 1 to 4.
        pub unsafe fn $wide_entry(w: &WideArgs<f32, $W>) {
            // Panel q alone (`bstride` in bytes here).
            let panel = |q: usize| {
                let b = (w.b.ptr as *const u8).add(q * w.bstride) as *const $W;
                let t = w.tile_from(q, NR, b);
                TileArgs {
                    cols: t.cols.min(NR),
                    ..t
                }
            };
            by_rows!(w.rows, [1, 2, 3], R => {
                const V: usize = block_width(R);
                for q in 0..w.panels {
                    $tile::<R, V, true>(&panel(q), w.a_step);
                }
            })
        }
    };
}

/// Vectors of a register block for a tile of `rows` rows: 12 x 8 columns, 4-6 (and 2-3) rows
/// x 16, one row x 32 (the scales of a block take registers beside the accumulators).
const fn block_width(rows: usize) -> usize {
    match rows {
        7.. => 2,
        2..=6 => 4,
        _ => 8,
    }
}

neon_blocks!(
    Q8_0,
    widen8_q8_0,
    kernel_q8_0,
    tile_q8_0,
    block_q8_0,
    wide_q8_0
);
neon_blocks!(
    Q4_0,
    widen8_q4_0,
    kernel_q4_0,
    tile_q4_0,
    block_q4_0,
    wide_q4_0
);
