//! Causal multi-head attention over packed keys and values, tiled, with an online softmax.
//!
//! For a block of query rows, the keys are walked in blocks of `KB` positions whose boundaries
//! are absolute (multiples of `KB`). Per key block: scores `S = Q K^T` by the matmul
//! micro-kernel (each score one ascending FMA chain over the head width), scaled by
//! 1/sqrt(dh); positions after the query are masked (they contribute exactly zero); then the
//! running max `m`, running sum `l` and output `o` are updated:
//! `m' = max(m, max S)`, `c = exp(m - m')`, `p = exp(S - m')`, `l' = l c + sum p` (plain sum),
//! `o' = o c + P V` (the kernel continues the FMA chain from `o c`). Finally `o / l`.
//! No T x T matrix is ever built, and each query row's arithmetic is independent of the other
//! rows and of how many positions follow it, so a one-row decode step reproduces the full
//! forward's bits. Rows that all see the same keys (a decode step's row, or the heads of a
//! group at one position) go through the family's wide kernel instead of its tile kernel when
//! they are few: more chains at once, the same chain for every element.

use crate::gemm::pack::{pack_a, KBlocks};
use crate::gemm::MatRef;
use crate::kernels::{
    BPanel, CTile, GemmKernels, HasKernels, Kernel, TileArgs, TileAux, TransposeFn, WideArgs,
    WIDE_PANELS, WIDE_ROWS,
};
use crate::kv_cache::{HeadKv, KB};
use crate::ops::Transcendental;

/// A block of query rows against one key/value head and where their results go: rows of one
/// query head at consecutive positions (`pos_step` 1), or rows of the query heads that share
/// the key/value head, all at one position (`pos_step` 0: a decode step of grouped-query
/// attention reads the head's keys and values once for its whole group).
#[derive(Clone, Copy)]
pub struct QueryBlock<T> {
    /// The first query row (`dh` values; rows `ldq` apart).
    pub q: *const T,
    pub ldq: usize,
    /// Position of the first row, the number of rows (all inside one key block), and the
    /// positions from one row to the next (1 or 0).
    pub q0: usize,
    pub nq: usize,
    pub pos_step: usize,
    /// The first output row (rows `ldo` apart).
    pub out: *mut T,
    pub ldo: usize,
}

/// Which keys a query row sees.
#[derive(Clone, Copy)]
struct Visible {
    causal: bool,
    q0: usize,
    pos_step: usize,
}

impl Visible {
    /// How many of the `nkeys` keys from `k0` on query row `i` sees: those up to its own
    /// position (`q0 + i * pos_step`) when causal, else all.
    #[inline(always)]
    fn keys(self, i: usize, k0: usize, nkeys: usize) -> usize {
        if self.causal {
            (self.q0 + i * self.pos_step + 1)
                .saturating_sub(k0)
                .min(nkeys)
        } else {
            nkeys
        }
    }

    /// Whether all `nq` rows see the same keys: one row, the heads of a group at one position,
    /// or no mask.
    #[inline(always)]
    fn uniform(self, nq: usize) -> bool {
        nq == 1 || self.pos_step == 0 || !self.causal
    }
}

/// The wide kernel for a block of query rows that all see the same keys, when the family has
/// one and the rows are few enough: a decode step's row (or its group of heads). A tile of one
/// row keeps four FMA chains going through a panel, each step waiting on the last (latency
/// bound); the wide kernel takes up to four panels side by side, up to eight chains a row.
/// Each element's chain is the same (ascending depth from the same start), so are the bits.
#[inline(always)]
fn wide_for<T: HasKernels>(
    kernels: &GemmKernels<T>,
    blk: &QueryBlock<T>,
    vis: Visible,
) -> Option<crate::kernels::WideFn<T, T>> {
    match kernels.wide {
        Some(wide) if blk.nq <= WIDE_ROWS && vis.uniform(blk.nq) => Some(wide),
        _ => None,
    }
}

/// `C (rows x cols) (+)= A B` by the wide kernel, up to [`WIDE_PANELS`] panels a call: A packed
/// (`a_step` values a depth step), B `kc` steps of NR-column panels in row order (panel q at
/// `b + q bstride`), C from `c` with rows `ldc` apart.
///
/// # Safety
/// The buffers hold what the shapes say (B whole panels, C the live columns only).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn wide_across<T: HasKernels>(
    wide: crate::kernels::WideFn<T, T>,
    rows: usize,
    cols: usize,
    kc: usize,
    a: *const T,
    a_step: usize,
    (b, bstride): (*const T, usize),
    (c, ldc): (*mut T, usize),
    accumulate: bool,
) {
    let nr = T::NR;
    let mut j = 0;
    while j < cols {
        let panels = (cols - j).div_ceil(nr).min(WIDE_PANELS);
        wide(&WideArgs {
            rows,
            panels,
            cols_last: (cols - j - (panels - 1) * nr).min(nr),
            kc,
            a,
            a_step,
            b: BPanel {
                ptr: b.add((j / nr) * bstride),
                ldb: nr,
                hoff: nr / 2,
            },
            bstride,
            c: CTile { ptr: c.add(j), ldc },
            accumulate,
        });
        j += panels * nr;
    }
}

/// Attention for the query rows of `blk` against the keys and values of `kv`: keys
/// `0 ..= q0 + i * pos_step` for row i when `causal`, else all `kv.len` keys.
///
/// # Safety
/// `blk.q` and `blk.out` address `blk.nq` rows of `dh` values with their strides.
pub unsafe fn attend_block<T: HasKernels + Transcendental>(
    kernel: Kernel,
    kv: &HeadKv<T>,
    blk: &QueryBlock<T>,
    causal: bool,
    scratch: &mut Scratch<T>,
) {
    // The element-wise loops (zeroing, rescaling, packing) run compiled for the family.
    let kernels = T::gemm_kernels(kernel);
    let transpose = T::transposer(kernel);
    kernel.vectorized(
        #[inline(always)]
        || attend(&kernels, transpose, kv, blk, causal, scratch),
    )
}

#[inline(always)]
unsafe fn attend<T: HasKernels + Transcendental>(
    kernels: &GemmKernels<T>,
    transpose: Option<TransposeFn<T>>,
    kv: &HeadKv<T>,
    blk: &QueryBlock<T>,
    causal: bool,
    scratch: &mut Scratch<T>,
) {
    let (dh, nq) = (kv.dh, blk.nq);
    debug_assert!(blk.pos_step <= 1);
    let vis = Visible {
        causal,
        q0: blk.q0,
        pos_step: blk.pos_step,
    };
    let last = if causal {
        blk.q0 + (nq - 1) * blk.pos_step
    } else {
        kv.len - 1
    };
    debug_assert!(last < kv.len);
    // Pack the query rows once: they are the A operand of every score tile.
    let qview = MatRef::from_raw(blk.q, nq, dh, blk.ldq as isize, 1);
    pack_a(
        qview,
        kernels,
        KBlocks::new(dh, dh.max(1)),
        0, // packed on this work item's thread
        &mut scratch.qpack,
    );
    scratch.s.clear();
    scratch.s.resize(nq * KB, T::ZERO);
    scratch.m.clear();
    scratch.m.resize(nq, T::neg_infinity());
    scratch.l.clear();
    scratch.l.resize(nq, T::ZERO);
    if last >= kv.whole() {
        kv.tail_transposed(&mut scratch.kt_tail, transpose);
    }
    let scale = T::ONE / T::from_f64(dh as f64).sqrt();
    for kb in 0..=last / KB {
        let k0 = kb * KB;
        let nkeys = KB.min(last + 1 - k0);
        scores(kernels, kv, blk, vis, k0, nkeys, scratch);
        softmax_update(blk, vis, kb, nkeys, scale, dh, scratch);
        add_pv(kernels, kv, blk, vis, kb, nkeys, scratch);
    }
    // A row at a time as a slice, so that the divisions run in the family's vectors (through
    // the raw pointer the compiler kept them one by one).
    for i in 0..nq {
        let l = scratch.l[i];
        let orow = std::slice::from_raw_parts_mut(blk.out.add(i * blk.ldo), dh);
        for o in orow.iter_mut() {
            *o = *o / l;
        }
    }
}

/// `S = Q K^T` for the `nkeys` keys from `k0`, tile by tile into `scratch.s` (row stride KB); a
/// tile whose keys no row of it sees is skipped (those scores are masked and never read).
#[inline(always)]
unsafe fn scores<T: HasKernels + Transcendental>(
    kernels: &GemmKernels<T>,
    kv: &HeadKv<T>,
    blk: &QueryBlock<T>,
    vis: Visible,
    k0: usize,
    nkeys: usize,
    scratch: &mut Scratch<T>,
) {
    let (mr, nr, dh, nq) = (kernels.mr, T::NR, kv.dh, blk.nq);
    // Keys from `whole` on lie in the cache's last, partly filled panel, which holds them as
    // rows: the item transposed them into `scratch.kt_tail` (see `attend`).
    let whole = kv.whole();
    let panel = |pos: usize| {
        if pos < whole {
            kv.kt_panel(pos)
        } else {
            scratch.kt_tail.as_ptr()
        }
    };
    if let Some(wide) = wide_for(kernels, blk, vis) {
        // The key block's whole K^T panels lie one after the other, `dh * nr` values apart;
        // the keys in the last panel, if the block reaches it, take a call of their own (each
        // score is its own chain, whichever call computes it).
        let q = scratch.qpack.as_ptr();
        let s = scratch.s.as_mut_ptr();
        let inside = nkeys.min(whole.saturating_sub(k0));
        if inside > 0 {
            let panels = (kv.kt_panel(k0), dh * nr);
            wide_across(wide, nq, inside, dh, q, mr, panels, (s, KB), false);
        }
        if inside < nkeys {
            let tail = (scratch.kt_tail.as_ptr(), dh * nr);
            let to = (s.add(inside), KB);
            wide_across(wide, nq, nkeys - inside, dh, q, mr, tail, to, false);
        }
        return;
    }
    let mut j = 0;
    while j < nkeys {
        let cols = nr.min(nkeys - j);
        let mut i = 0;
        while i < nq {
            let rows = mr.min(nq - i);
            if vis.keys(i + rows - 1, k0 + j, nkeys - j) > 0 {
                let tile = TileArgs {
                    rows,
                    cols,
                    kc: dh,
                    a: scratch.qpack.as_ptr().add(i * dh),
                    b: BPanel {
                        ptr: panel(k0 + j),
                        ldb: nr,
                        hoff: nr / 2,
                    },
                    c: CTile {
                        ptr: scratch.s.as_mut_ptr().add(i * KB + j),
                        ldc: KB,
                    },
                    accumulate: false,
                };
                (kernels.tile)(&tile, &TileAux::NONE);
            }
            i += rows;
        }
        j += cols;
    }
}

/// The online-softmax update: the scores of the key block become `p = exp(S - m')` (0 where
/// masked), the running sum becomes `l c + sum p` and the output row is scaled by
/// `c = exp(m - m')`. Every row is scaled and takes its new maximum before any row's
/// exponentials, so that the rows' short dependent chains (the maximum and the sum across
/// lanes) overlap; each row's operations and their order are those of a row alone.
#[inline(always)]
unsafe fn softmax_update<T: HasKernels + Transcendental>(
    blk: &QueryBlock<T>,
    vis: Visible,
    kb: usize,
    nkeys: usize,
    scale: T,
    dh: usize,
    scratch: &mut Scratch<T>,
) {
    let k0 = kb * KB;
    let mut m_new = std::mem::take(&mut scratch.m_new);
    m_new.clear();
    for i in 0..blk.nq {
        let valid = vis.keys(i, k0, nkeys);
        let row = &mut scratch.s[i * KB..i * KB + valid];
        m_new.push(T::scale_max(row, scale, scratch.m[i]));
    }
    for (i, &mx) in m_new.iter().enumerate() {
        let valid = vis.keys(i, k0, nkeys);
        let sum = T::exp_sum(&mut scratch.s[i * KB..i * KB + nkeys], valid, mx);
        let m_old = scratch.m[i];
        if valid > 0 && mx != m_old {
            let c = T::exp_one(m_old - mx);
            scratch.l[i] = scratch.l[i] * c + sum;
            // The first key block writes the output rather than adding to it (see `add_pv`).
            if kb > 0 {
                let orow = std::slice::from_raw_parts_mut(blk.out.add(i * blk.ldo), dh);
                for o in orow.iter_mut() {
                    *o = *o * c;
                }
            }
            scratch.m[i] = mx;
        } else {
            scratch.l[i] = scratch.l[i] + sum;
        }
    }
    scratch.m_new = m_new;
}

/// `O += P V` for key block `kb`. Each row's chain runs over exactly its own visible keys: a
/// group of rows goes through the kernel up to the first row's last visible key, and the rows
/// that see further continue their chains one key at a time (the same fused operations in the
/// same order), so masked positions are never touched (a NaN there cannot leak backwards).
#[inline(always)]
unsafe fn add_pv<T: HasKernels + Transcendental>(
    kernels: &GemmKernels<T>,
    kv: &HeadKv<T>,
    blk: &QueryBlock<T>,
    vis: Visible,
    kb: usize,
    nkeys: usize,
    scratch: &mut Scratch<T>,
) {
    let (mr, nr, dh, nq) = (kernels.mr, T::NR, kv.dh, blk.nq);
    let k0 = kb * KB;
    pack_a(
        MatRef::from_slice(&scratch.s, nq, KB).cols_range(nkeys),
        kernels,
        KBlocks::new(nkeys, nkeys),
        0, // packed on this work item's thread
        &mut scratch.ppack,
    );
    if let Some(wide) = wide_for(kernels, blk, vis) {
        // Every row sees the block's first `kc` keys (at least key 0 of the sequence, so at
        // least one in every block visited); V's panels of the block lie `KB * nr` values
        // apart.
        let kc = vis.keys(0, k0, nkeys);
        let (panels, to) = ((kv.v_panel(kb, 0), KB * nr), (blk.out, blk.ldo));
        wide_across(
            wide,
            nq,
            dh,
            kc,
            scratch.ppack.as_ptr(),
            mr,
            panels,
            to,
            kb > 0,
        );
        return;
    }
    let mut c0 = 0;
    let mut jp = 0;
    while c0 < dh {
        let cols = nr.min(dh - c0);
        let vpanel = kv.v_panel(kb, jp);
        let mut i = 0;
        while i < nq {
            let rows = mr.min(nq - i);
            let kc = vis.keys(i, k0, nkeys);
            if kc > 0 {
                let tile = TileArgs {
                    rows,
                    cols,
                    kc,
                    a: scratch.ppack.as_ptr().add(i * nkeys),
                    b: BPanel {
                        ptr: vpanel,
                        ldb: nr,
                        hoff: nr / 2,
                    },
                    c: CTile {
                        ptr: blk.out.add(i * blk.ldo + c0),
                        ldc: blk.ldo,
                    },
                    accumulate: kb > 0,
                };
                (kernels.tile)(&tile, &TileAux::NONE);
            } else if kb == 0 {
                // (Every row sees key 0, so this does not happen; the rows are still defined.)
                for r in 0..rows {
                    for c in 0..cols {
                        *blk.out.add((i + r) * blk.ldo + c0 + c) = T::ZERO;
                    }
                }
            }
            for r in 1..rows {
                for key in kc..vis.keys(i + r, k0, nkeys) {
                    let p = scratch.s[(i + r) * KB + key];
                    let vrow = std::slice::from_raw_parts(vpanel.add(key * nr), cols);
                    let orow =
                        std::slice::from_raw_parts_mut(blk.out.add((i + r) * blk.ldo + c0), cols);
                    for (o, &v) in orow.iter_mut().zip(vrow) {
                        *o = p.mul_add(v, *o);
                    }
                }
            }
            i += rows;
        }
        c0 += cols;
        jp += 1;
    }
}

/// Reusable buffers of [`attend_block`].
pub struct Scratch<T> {
    qpack: Vec<T>,
    /// The keys of the cache's last, partly filled panel, transposed.
    kt_tail: Vec<T>,
    ppack: Vec<T>,
    s: Vec<T>,
    m: Vec<T>,
    /// The rows' new maxima during a softmax update.
    m_new: Vec<T>,
    l: Vec<T>,
}

impl<T> Default for Scratch<T> {
    fn default() -> Self {
        Scratch {
            qpack: Vec::new(),
            kt_tail: Vec::new(),
            ppack: Vec::new(),
            s: Vec::new(),
            m: Vec::new(),
            m_new: Vec::new(),
            l: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::available;

    /// Attention of one query row in float64, written out plainly: scores over the visible
    /// keys, their softmax, and the weighted sum of the values.
    fn plain(q: &[f64], keys: &[Vec<f64>], vals: &[Vec<f64>]) -> Vec<f64> {
        let dh = q.len();
        let s: Vec<f64> = keys
            .iter()
            .map(|k| q.iter().zip(k).map(|(a, b)| a * b).sum::<f64>() / (dh as f64).sqrt())
            .collect();
        let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let p: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
        let l: f64 = p.iter().sum();
        (0..dh)
            .map(|c| p.iter().zip(vals).map(|(p, v)| p * v[c]).sum::<f64>() / l)
            .collect()
    }

    /// Rows of several query heads at one position against one key/value head (`pos_step` 0,
    /// a grouped-query decode step): every row bit for bit the row alone at that position, on
    /// every kernel, causal or not, the output rows between sentinels.
    #[test]
    fn grouped_rows_at_one_position_equal_each_row_alone() {
        fn check<T: HasKernels + Transcendental>() {
            for (dh, len, group) in [
                (64usize, 1usize, 3usize),
                (64, 97, 7),
                (40, 250, 2),
                (8, 5, 13),
            ] {
                let ld = 2 * dh;
                let val = |i: usize| T::from_f64(((i * 131 + 17) % 97) as f64 / 97.0 - 0.5);
                let kvsrc: Vec<T> = (0..len * ld).map(val).collect();
                let mut kv = HeadKv::<T>::new(dh);
                kv.push_rows(&kvsrc, ld, (0, dh), len);
                // The group's query rows side by side, as a qkv row holds a group's heads.
                let q: Vec<T> = (0..group * dh)
                    .map(|i| T::from_f64(((i * 37) % 53) as f64 / 13.0 - 2.0))
                    .collect();
                for causal in [true, false] {
                    for kernel in available() {
                        for pos in [0, len / 2, len - 1] {
                            if !causal && pos != len - 1 {
                                continue;
                            }
                            let ldo = dh + 1;
                            let run = |rows: std::ops::Range<usize>, out: &mut Vec<T>| {
                                let blk = QueryBlock {
                                    q: q[rows.start * dh..].as_ptr(),
                                    ldq: dh,
                                    q0: pos,
                                    nq: rows.len(),
                                    pos_step: 0,
                                    out: out[rows.start * ldo..].as_mut_ptr(),
                                    ldo,
                                };
                                // SAFETY: the rows of `q` and `out` exist; pos < kv.len.
                                unsafe {
                                    attend_block(kernel, &kv, &blk, causal, &mut Scratch::default())
                                };
                            };
                            let fresh = || {
                                let mut o = vec![T::from_f64(f64::NAN); group * ldo];
                                for r in 0..group {
                                    o[r * ldo + dh] = T::from_f64(7.0);
                                }
                                o
                            };
                            let (mut together, mut alone) = (fresh(), fresh());
                            run(0..group, &mut together);
                            for r in 0..group {
                                run(r..r + 1, &mut alone);
                            }
                            let t: Vec<u64> =
                                together.iter().map(|v| v.to_f64().to_bits()).collect();
                            let a: Vec<u64> = alone.iter().map(|v| v.to_f64().to_bits()).collect();
                            assert!(
                                t == a && together[dh].to_f64() == 7.0,
                                "{} {kernel:?} dh={dh} len={len} group={group} pos={pos} causal={causal}",
                                T::NAME
                            );
                            assert!(together
                                .iter()
                                .enumerate()
                                .all(|(i, v)| i % ldo == dh || v.to_f64().is_finite()));
                        }
                    }
                }
            }
        }
        check::<f32>();
        check::<f64>();
    }

    /// Every query block of a sequence, as the decoder cuts them (inside one key block), each
    /// row again on its own (a decode step: the wide kernel where the family has one, several
    /// calls of it for the widest heads) and all rows as one block, with the output filled
    /// with NaN beforehand and a sentinel beside each output row: against the plain float64
    /// attention, the rows alone and the single block bit for bit against the blocks, and every
    /// kernel against the first.
    #[test]
    fn attention_matches_a_plain_softmax_and_writes_only_its_rows() {
        fn check<T: HasKernels + Transcendental>(tol: f64) {
            for (dh, len) in [
                (64usize, 1usize),
                (64, 97),
                (40, 250),
                (64, 2 * KB),
                (8, 5),
                (136, KB + 33),
            ] {
                let ld = 3 * dh + 3; // q | k | v side by side, as in the qkv product
                let val = |t: usize, j: usize| {
                    let x = ((t * 131 + j * 71) % 97) as f64 / 97.0 - 0.5;
                    T::from_f64(x * if j < dh { 3.0 } else { 1.0 })
                };
                let src: Vec<T> = (0..len * ld).map(|i| val(i / ld, i % ld)).collect();
                let mut kv = HeadKv::<T>::new(dh);
                kv.push_rows(&src, ld, (dh, 2 * dh), len);
                let f = |t: usize, j: usize| src[t * ld + j].to_f64();
                let keys: Vec<Vec<f64>> = (0..len)
                    .map(|t| (0..dh).map(|c| f(t, dh + c)).collect())
                    .collect();
                let vals: Vec<Vec<f64>> = (0..len)
                    .map(|t| (0..dh).map(|c| f(t, 2 * dh + c)).collect())
                    .collect();
                for causal in [true, false] {
                    let mut first: Option<Vec<u64>> = None;
                    for kernel in available() {
                        let ldo = dh + 1;
                        let run = |q0: usize, nq: usize, out: &mut Vec<T>, s: &mut Scratch<T>| {
                            let blk = QueryBlock {
                                q: src[q0 * ld..].as_ptr(),
                                ldq: ld,
                                q0,
                                nq,
                                pos_step: 1,
                                out: out[q0 * ldo..].as_mut_ptr(),
                                ldo,
                            };
                            // SAFETY: rows q0 .. q0 + nq of `src` and `out` exist.
                            unsafe { attend_block(kernel, &kv, &blk, causal, s) };
                        };
                        let fresh = || {
                            let mut o = vec![T::from_f64(f64::NAN); len * ldo];
                            for t in 0..len {
                                o[t * ldo + dh] = T::from_f64(7.0);
                            }
                            o
                        };
                        let (mut blocks, mut rows, mut s) = (fresh(), fresh(), Scratch::default());
                        let mut q0 = 0;
                        while q0 < len {
                            let nq = ((q0 / KB + 1) * KB).min(len) - q0;
                            run(q0, nq, &mut blocks, &mut s);
                            q0 += nq;
                        }
                        for t in 0..len {
                            run(t, 1, &mut rows, &mut s);
                        }
                        // And all rows as one block, across key blocks.
                        let mut whole = fresh();
                        run(0, len, &mut whole, &mut s);
                        let what = |t: usize| {
                            format!(
                                "{} {kernel:?} dh={dh} len={len} causal={causal} row {t}",
                                T::NAME
                            )
                        };
                        for t in 0..len {
                            let seen = if causal { t + 1 } else { len };
                            let q: Vec<f64> = (0..dh).map(|c| f(t, c)).collect();
                            let want = plain(&q, &keys[..seen], &vals[..seen]);
                            for c in 0..dh {
                                let got = blocks[t * ldo + c].to_f64();
                                assert!(
                                    (got - want[c]).abs() <= tol,
                                    "{}: {got} vs {}",
                                    what(t),
                                    want[c]
                                );
                                let alone = rows[t * ldo + c].to_f64();
                                assert_eq!(alone.to_bits(), got.to_bits(), "{}: alone", what(t));
                                let one = whole[t * ldo + c].to_f64();
                                assert_eq!(one.to_bits(), got.to_bits(), "{}: one block", what(t));
                            }
                            assert_eq!(blocks[t * ldo + dh].to_f64(), 7.0, "{}: sentinel", what(t));
                            assert_eq!(rows[t * ldo + dh].to_f64(), 7.0, "{}: sentinel", what(t));
                            assert_eq!(whole[t * ldo + dh].to_f64(), 7.0, "{}: sentinel", what(t));
                        }
                        let bits: Vec<u64> = blocks.iter().map(|v| v.to_f64().to_bits()).collect();
                        match &first {
                            None => first = Some(bits),
                            Some(b) => assert!(
                                b == &bits,
                                "{kernel:?} differs from the first kernel ({})",
                                T::NAME
                            ),
                        }
                    }
                }
            }
        }
        check::<f32>(2e-6);
        check::<f64>(1e-13);
    }
}
