//! The MLP of a block: `x += GELU(h Wfc + bfc) Wproj + bproj`.

use super::linear::{After, Linear};
use super::schema::{BlockSpec, Exported, Source};
use super::Float;
use crate::Result;

pub struct Mlp<T: Float> {
    /// `(d, d_ff)`.
    pub fc: Linear<T>,
    /// `(d_ff, d)`.
    pub proj: Linear<T>,
}

impl<T: Float> Mlp<T> {
    pub fn load(spec: &BlockSpec, src: &Source<'_, '_, T>) -> Result<Self> {
        Ok(Mlp {
            fc: Linear::load(&spec.fc, src)?,
            proj: Linear::load(&spec.fc_proj, src)?,
        })
    }

    pub fn export(&self, spec: &BlockSpec, out: &mut Exported<T>) {
        self.fc.export(&spec.fc, out);
        self.proj.export(&spec.fc_proj, out);
    }

    /// `x (rows, d) += GELU(h (rows, d) Wfc + bfc) Wproj + bproj`, with `u (rows, d_ff)` and
    /// `y (rows, d)` as work buffers.
    pub fn forward(&self, h: &[T], x: &mut [T], rows: usize, u: &mut Vec<T>, y: &mut Vec<T>) {
        self.fc.forward(h, rows, u, After::Gelu);
        self.proj.forward(u, rows, y, After::AddInto(x));
    }
}
