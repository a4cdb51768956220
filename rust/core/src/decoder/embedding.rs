//! Token and position embedding: `x = wte[id] + pos(t)`, with a learned table, the sinusoidal
//! encoding, or nothing (rotary positions enter inside attention).

use super::norm::for_rows;
use super::schema::{export, Exported, Layout, PositionSpec, Source};
use super::storage::Table;
use super::Float;
use crate::ops;
use crate::Result;

/// What is added to a token's embedding at position `t`.
pub enum Added<T> {
    /// Row `t` of a table `(n_ctx, d)`, stored as `wte`.
    Learned(Table<T>),
    Sinusoidal,
    /// Nothing.
    None,
}

pub struct Embedding<T> {
    /// `(V, d)`, in the compute type or 16-bit (rows widened on lookup).
    pub wte: Table<T>,
    pub positions: Added<T>,
    pub d: usize,
}

impl<T: Float> Embedding<T> {
    pub fn load(layout: &Layout, src: &Source<'_, '_, T>) -> Result<Self> {
        Ok(Embedding {
            wte: src.table(&layout.wte)?,
            positions: match &layout.positions {
                PositionSpec::Learned(s) => Added::Learned(src.table(s)?),
                PositionSpec::Sinusoidal => Added::Sinusoidal,
                PositionSpec::Rotary(_) => Added::None,
            },
            d: layout.wte.shape[1],
        })
    }

    pub fn export(&self, layout: &Layout, out: &mut Exported<T>) {
        export(out, &layout.wte, self.wte.widened());
        if let (PositionSpec::Learned(s), Added::Learned(w)) = (&layout.positions, &self.positions)
        {
            export(out, s, w.widened());
        }
    }

    pub fn nbytes(&self) -> usize {
        self.wte.nbytes()
            + match &self.positions {
                Added::Learned(w) => w.nbytes(),
                _ => 0,
            }
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
            match &self.positions {
                Added::Learned(wpe) => {
                    let pe = wpe.row(pos, d);
                    for c in 0..d {
                        row[c] = e[c] + pe[c];
                    }
                }
                Added::Sinusoidal => {
                    ops::sinusoidal_row(pos, row);
                    for c in 0..d {
                        row[c] = e[c] + row[c];
                    }
                }
                Added::None => row.copy_from_slice(&e),
            }
        });
        Ok(x)
    }
}
