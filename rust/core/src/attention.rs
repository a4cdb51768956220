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
//! forward's bits.

use crate::gemm::kernels::{HasKernels, KernelSpec};
use crate::gemm::pack::{pack_a, KBlocks};
use crate::gemm::MatRef;
use crate::kv_cache::{HeadKv, KB};
use crate::ops::Transcendental;

/// Attention for query positions `q0 .. q0 + nq` (all inside one key block) of one head.
///
/// `q` holds the nq query rows (`dh` values each, row stride `ldq`); the result rows are
/// written to `out` (row stride `ldo`). Keys `0 ..= q0 + i` are visited for row i when
/// `causal`, else all `kv.len` keys.
///
/// # Safety
/// `q` and `out` address `nq` rows of `dh` values with the given strides.
#[allow(clippy::too_many_arguments)]
pub unsafe fn attend_block<T: HasKernels + Transcendental>(
    spec: KernelSpec<T>,
    kv: &HeadKv<T>,
    q: *const T,
    ldq: usize,
    q0: usize,
    nq: usize,
    out: *mut T,
    ldo: usize,
    causal: bool,
    scratch: &mut Scratch<T>,
) {
    // The element-wise loops (zeroing, rescaling, packing) vectorise in the wider copy; the
    // arithmetic is the same in every copy (no fused operations are introduced).
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return attend_block_avx512(spec, kv, q, ldq, q0, nq, out, ldo, causal, scratch);
        }
    }
    attend_block_impl(spec, kv, q, ldq, q0, nq, out, ldo, causal, scratch)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn attend_block_avx512<T: HasKernels + Transcendental>(
    spec: KernelSpec<T>,
    kv: &HeadKv<T>,
    q: *const T,
    ldq: usize,
    q0: usize,
    nq: usize,
    out: *mut T,
    ldo: usize,
    causal: bool,
    scratch: &mut Scratch<T>,
) {
    attend_block_impl(spec, kv, q, ldq, q0, nq, out, ldo, causal, scratch)
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn attend_block_impl<T: HasKernels + Transcendental>(
    spec: KernelSpec<T>,
    kv: &HeadKv<T>,
    q: *const T,
    ldq: usize,
    q0: usize,
    nq: usize,
    out: *mut T,
    ldo: usize,
    causal: bool,
    scratch: &mut Scratch<T>,
) {
    let dh = kv.dh;
    let nr = T::NR;
    let scale = T::ONE / T::from_f64(dh as f64).sqrt();
    let last = if causal { q0 + nq - 1 } else { kv.len - 1 };
    debug_assert!(last < kv.len);
    // Pack the query rows once: they are the A operand of every score tile.
    let qview = MatRef::from_raw(q, nq, dh, ldq as isize, 1);
    pack_a(
        qview,
        spec.mr,
        KBlocks::new(dh, dh.max(1)),
        &mut scratch.qpack,
    );
    scratch.s.clear();
    scratch.s.resize(nq * KB, T::ZERO);
    scratch.m.clear();
    scratch.m.resize(nq, T::neg_infinity());
    scratch.l.clear();
    scratch.l.resize(nq, T::ZERO);
    for i in 0..nq {
        for c in 0..dh {
            *out.add(i * ldo + c) = T::ZERO;
        }
    }
    let mr = spec.mr;
    for kb in 0..=last / KB {
        let k0 = kb * KB;
        let nkeys = KB.min(last + 1 - k0);
        // S = Q K^T for this key block, tile by tile; a tile whose keys all lie after every
        // query of its rows is skipped (those scores are masked and never read).
        let mut j = 0;
        while j < nkeys {
            let cols = nr.min(nkeys - j);
            let mut i = 0;
            while i < nq {
                let rows = mr.min(nq - i);
                if causal && k0 + j > q0 + i + rows - 1 {
                    i += rows;
                    continue;
                }
                (spec.run)(
                    rows,
                    cols,
                    dh,
                    scratch.qpack.as_ptr().add(i * dh),
                    kv.kt_panel(k0 + j),
                    nr,
                    scratch.s.as_mut_ptr().add(i * KB + j),
                    KB,
                    false,
                );
                i += rows;
            }
            j += cols;
        }
        // Online softmax update, row by row.
        for i in 0..nq {
            let valid = if causal {
                (q0 + i + 1).saturating_sub(k0).min(nkeys)
            } else {
                nkeys
            };
            let row = &mut scratch.s[i * KB..i * KB + nkeys];
            let m_old = scratch.m[i];
            let (mx, sum) = T::softmax_step(row, valid, scale, m_old);
            if valid > 0 && mx != m_old {
                let mut c = [m_old - mx];
                T::exp_inplace(&mut c);
                let c = c[0];
                scratch.l[i] = scratch.l[i] * c + sum;
                let orow = std::slice::from_raw_parts_mut(out.add(i * ldo), dh);
                for o in orow.iter_mut() {
                    *o = *o * c;
                }
                scratch.m[i] = mx;
            } else {
                scratch.l[i] = scratch.l[i] + sum;
            }
        }
        // O += P V for this key block. Each row's chain runs over exactly its own visible keys:
        // a group of rows goes through the kernel up to the first row's last visible key, and
        // the rows that see further continue their chains one key at a time (the same fused
        // operations in the same order), so masked positions are never touched (a NaN there
        // cannot leak backwards).
        pack_a(
            MatRef::from_slice(&scratch.s, nq, KB).cols_range(nkeys),
            mr,
            KBlocks::new(nkeys, nkeys),
            &mut scratch.ppack,
        );
        let valid = |i: usize| {
            if causal {
                (q0 + i + 1).saturating_sub(k0).min(nkeys)
            } else {
                nkeys
            }
        };
        let mut c0 = 0;
        let mut jp = 0;
        while c0 < dh {
            let cols = nr.min(dh - c0);
            let vpanel = kv.v_panel(kb, jp);
            let mut i = 0;
            while i < nq {
                let rows = mr.min(nq - i);
                let kc = valid(i);
                if kc > 0 {
                    (spec.run)(
                        rows,
                        cols,
                        kc,
                        scratch.ppack.as_ptr().add(i * nkeys),
                        vpanel,
                        nr,
                        out.add(i * ldo + c0),
                        ldo,
                        true,
                    );
                }
                for r in 1..rows {
                    for key in kc..valid(i + r) {
                        let p = scratch.s[(i + r) * KB + key];
                        let vrow = std::slice::from_raw_parts(vpanel.add(key * nr), cols);
                        let orow =
                            std::slice::from_raw_parts_mut(out.add((i + r) * ldo + c0), cols);
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
    for i in 0..nq {
        let l = scratch.l[i];
        for c in 0..dh {
            let o = out.add(i * ldo + c);
            *o = *o / l;
        }
    }
}

/// Reusable buffers of [`attend_block`].
pub struct Scratch<T> {
    qpack: Vec<T>,
    ppack: Vec<T>,
    s: Vec<T>,
    m: Vec<T>,
    l: Vec<T>,
}

impl<T> Default for Scratch<T> {
    fn default() -> Self {
        Scratch {
            qpack: Vec::new(),
            ppack: Vec::new(),
            s: Vec::new(),
            m: Vec::new(),
            l: Vec::new(),
        }
    }
}
