//! A linear layer `x @ W + b` with W packed once, and what runs on its output tiles while they
//! are still in the cache (bias, GELU, SwiGLU's gating, the residual addition).

use super::schema::{export, stored_columns, Exported, LinearSpec, Source};
use super::storage::Packed;
use super::Float;
use crate::gemm::{MatRef, Options, Tile};
use crate::kernels;
use crate::threads::SendPtr;
use crate::Result;

/// `x @ W + b` with W packed once (in the compute type or 16-bit; the bias in the compute
/// type).
pub struct Linear<T: Float> {
    pub w: Packed<T>,
    pub b: Option<Vec<T>>,
}

/// What a linear layer does with its output while it is still in the cache.
pub enum After<'a, T> {
    /// Nothing more than the bias.
    Bias,
    /// Bias, then GELU.
    Gelu,
    /// Bias, then times the SiLU of the gate `g` (same shape as the output): `silu(g) * out`.
    SiluMul(&'a [T]),
    /// Bias, then add the result into this residual stream (`x += out`).
    AddInto(&'a mut [T]),
}

impl<T: Float> Linear<T> {
    pub fn load(spec: &LinearSpec, src: &Source<'_, '_, T>) -> Result<Self> {
        Ok(Linear {
            w: src.matrix(&spec.weight, spec.transposed)?,
            b: match &spec.bias {
                Some(b) => Some(src.get(b)?.to_vec()),
                None => None,
            },
        })
    }

    pub fn export(&self, spec: &LinearSpec, out: &mut Exported<T>) {
        let (k, n) = (self.w.rows(), self.w.cols());
        let w = self.w.unpack();
        let w = if spec.transposed {
            stored_columns(&w, k, n, 0, n, true)
        } else {
            w
        };
        export(out, &spec.weight, w);
        if let (Some(s), Some(b)) = (&spec.bias, &self.b) {
            export(out, s, b.clone());
        }
    }

    pub fn nbytes(&self) -> usize {
        self.w.nbytes()
            + self
                .b
                .as_ref()
                .map_or(0, |b| b.len() * std::mem::size_of::<T>())
    }

    /// `out (rows x n) = x (rows x k) @ W + b`, then `after` on every element. The bias, the
    /// GELU or the gating and the residual addition run on each tile of the product as soon
    /// as it is final (the same operations, in the same order, as separate passes over `out`).
    pub fn forward(&self, x: &[T], rows: usize, out: &mut Vec<T>, after: After<'_, T>) {
        let (k, n) = (self.w.rows(), self.w.cols());
        // The product writes every element of `out`, so a buffer of the right size is reused
        // as it is (no zero fill).
        crate::memory::resize_for_overwrite(out, rows * n);
        let bias = self.b.as_deref();
        let (gelu, gate, resid) = match after {
            After::Bias => (false, None, None),
            After::Gelu => (true, None, None),
            After::SiluMul(g) => {
                assert_eq!(g.len(), rows * n, "gate size");
                (false, Some(SendPtr(g.as_ptr() as *mut T)), None)
            }
            After::AddInto(r) => {
                assert_eq!(r.len(), rows * n, "residual stream size");
                (false, None, Some(SendPtr(r.as_mut_ptr())))
            }
        };
        let opts = Options::default();
        let kernel = opts.kernel;
        let epilogue = |mut t: Tile<'_, T>| {
            kernel.vectorized(
                #[inline(always)]
                || finish_tile(&mut t, bias, gelu, gate, resid, n),
            )
        };
        let opts = Options {
            epilogue: Some(&epilogue),
            ..opts
        };
        let a = MatRef::from_slice(x, rows, k);
        self.w.gemm(a, out, n, &opts);
    }
}

/// The epilogue of [`Linear::forward`] on one finished tile: `+ bias`, then GELU or the
/// gate's SiLU times the value (the gate with row stride `n`), then added into the residual
/// stream (row stride `n`). Each element gets the steps in that order: they run over the whole
/// tile one after the other.
#[inline(always)]
fn finish_tile<T: Float>(
    t: &mut Tile<'_, T>,
    bias: Option<&[T]>,
    gelu: bool,
    gate: Option<SendPtr<T>>,
    resid: Option<SendPtr<T>>,
    n: usize,
) {
    let (i0, j0, rows, cols) = (t.i0, t.j0, t.rows, t.cols);
    if let Some(b) = bias {
        for r in 0..rows {
            for (v, &bj) in t.row(r).iter_mut().zip(&b[j0..j0 + cols]) {
                *v += bj;
            }
        }
    }
    if gelu {
        let ld = t.ld();
        // SAFETY: the tile's rows are valid for reads and writes.
        unsafe { T::gelu_rows(t.as_mut_ptr(), rows, cols, ld) };
    }
    if let Some(g) = gate {
        let ld = t.ld();
        // SAFETY: the tile's rows are valid for reads and writes; the gate has the output's
        // shape (row stride n), so its rows i0 .., columns j0 .. of the tile exist.
        unsafe { T::silu_mul_rows(t.as_mut_ptr(), ld, g.get().add(i0 * n + j0), n, rows, cols) };
    }
    if let Some(x) = resid {
        // The next tile down (the product's next call) reads the residual rows below these:
        // ask for them now, since rows n values apart are not a pattern the hardware follows.
        for r in rows..2 * rows {
            let p = x.get().wrapping_add((i0 + r) * n + j0) as *const u8;
            for off in (0..cols * std::mem::size_of::<T>()).step_by(64) {
                kernels::prefetch(p.wrapping_add(off));
            }
        }
        for r in 0..rows {
            // SAFETY: row i0 + r, columns j0.. of the residual stream match this row of the
            // tile, which the product hands to exactly one call.
            let xs =
                unsafe { std::slice::from_raw_parts_mut(x.get().add((i0 + r) * n + j0), cols) };
            for (a, &v) in xs.iter_mut().zip(t.row(r).iter()) {
                *a += v;
            }
        }
    }
}
