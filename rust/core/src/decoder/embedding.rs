//! Token and position embedding: `x = wte[id] + pos(t)`, a learned table or the sinusoidal
//! encoding.

use super::norm::for_rows;
use super::schema::{export, Exported, Layout, Source};
use super::storage::Table;
use super::Float;
use crate::ops;
use crate::Result;

pub struct Embedding<T> {
    /// `(V, d)`, in the compute type or 16-bit (rows widened on lookup).
    pub wte: Table<T>,
    /// `(n_ctx, d)`, stored as `wte`; None: sinusoidal.
    pub wpe: Option<Table<T>>,
    pub d: usize,
}

impl<T: Float> Embedding<T> {
    pub fn load(layout: &Layout, src: &Source<'_, '_, T>) -> Result<Self> {
        Ok(Embedding {
            wte: src.table(&layout.wte)?,
            wpe: match &layout.wpe {
                Some(s) => Some(src.table(s)?),
                None => None,
            },
            d: layout.wte.shape[1],
        })
    }

    pub fn export(&self, layout: &Layout, out: &mut Exported<T>) {
        export(out, &layout.wte, self.wte.widened());
        if let (Some(s), Some(w)) = (&layout.wpe, &self.wpe) {
            export(out, s, w.widened());
        }
    }

    pub fn nbytes(&self) -> usize {
        self.wte.nbytes() + self.wpe.as_ref().map_or(0, |w| w.nbytes())
    }

    /// `x (B*T, d)`: row `b * t_new + t` is token `ids[b * t_new + t]` at position `p0 + t`.
    /// The ids are in range (checked by the caller).
    pub fn forward(&self, ids: &[u32], t_new: usize, p0: usize) -> Result<Vec<T>> {
        let d = self.d;
        let mut x = crate::memory::try_zeroed::<T>(ids.len().saturating_mul(d), "residual stream")?;
        for_rows(&mut x, d, |r, row| {
            let pos = p0 + r % t_new;
            let id = ids[r] as usize;
            let e = self.wte.row(id, d);
            match &self.wpe {
                Some(wpe) => {
                    let pe = wpe.row(pos, d);
                    for c in 0..d {
                        row[c] = e[c] + pe[c];
                    }
                }
                None => {
                    ops::sinusoidal_row(pos, row);
                    for c in 0..d {
                        row[c] = e[c] + row[c];
                    }
                }
            }
        });
        Ok(x)
    }
}
