//! LayerNorm over the rows of an activation, and the row-parallel loop it runs in.

use super::schema::{export, Exported, NormSpec, Source};
use super::Float;
use crate::ops;
use crate::threads::{self, SendPtr};
use crate::Result;

/// LayerNorm parameters (None: no affine).
pub struct Norm<T> {
    pub affine: Option<(Vec<T>, Vec<T>)>,
}

impl<T: Float> Norm<T> {
    pub fn load(spec: &NormSpec, src: &Source<'_, '_, T>) -> Result<Self> {
        Ok(Norm {
            affine: match &spec.affine {
                Some((g, b)) => Some((src.get(g)?.to_vec(), src.get(b)?.to_vec())),
                None => None,
            },
        })
    }

    pub fn export(&self, spec: &NormSpec, out: &mut Exported<T>) {
        if let (Some((sg, sb)), Some((g, b))) = (&spec.affine, &self.affine) {
            export(out, sg, g.clone());
            export(out, sb, b.clone());
        }
    }

    /// `out (rows, d) = LN(x (rows, d))`, row by row.
    pub fn forward(&self, x: &[T], out: &mut Vec<T>, d: usize, eps: T) {
        crate::memory::resize_for_overwrite(out, x.len());
        let aff = self
            .affine
            .as_ref()
            .map(|(g, b)| (g.as_slice(), b.as_slice()));
        for_rows(out, d, |i, row| {
            ops::layernorm_row(&x[i * d..(i + 1) * d], row, aff, eps)
        });
    }
}

/// Run `f(row_index, row)` over the rows of a row-major buffer, in parallel when large.
pub fn for_rows<T: Send>(buf: &mut [T], width: usize, f: impl Fn(usize, &mut [T]) + Sync + Send) {
    if width == 0 {
        return;
    }
    let rows = buf.len() / width;
    if buf.len() >= 1 << 15 && threads::num_threads() > 1 {
        // Chunks of rows about 8K values each, so an item is worth handing out.
        let per = (8192 / width).max(1);
        let ptr = SendPtr(buf.as_mut_ptr());
        threads::parallel_for(rows.div_ceil(per), |c| {
            for i in c * per..((c + 1) * per).min(rows) {
                // SAFETY: row i lies inside `buf` and belongs to chunk c alone.
                let r = unsafe { std::slice::from_raw_parts_mut(ptr.get().add(i * width), width) };
                f(i, r);
            }
        });
    } else {
        buf.chunks_mut(width).enumerate().for_each(|(i, r)| f(i, r));
    }
}
