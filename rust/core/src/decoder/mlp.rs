//! The MLP of a block: `x += GELU(h Wfc + bfc) Wproj + bproj` (GPT-2), or the gated
//! `x += down(silu(gate(h)) * up(h))` (SwiGLU, Llama).

use super::linear::{After, Linear};
use super::schema::{Exported, MlpSpec, Source};
use super::Float;
use crate::Result;

pub enum Mlp<T: Float> {
    Gelu {
        /// `(d, d_ff)`.
        fc: Linear<T>,
        /// `(d_ff, d)`.
        proj: Linear<T>,
    },
    SwiGlu {
        /// `(d, d_ff)` each.
        gate: Linear<T>,
        up: Linear<T>,
        /// `(d_ff, d)`.
        down: Linear<T>,
    },
}

impl<T: Float> Mlp<T> {
    pub fn load(spec: &MlpSpec, src: &Source<'_, '_, T>) -> Result<Self> {
        Ok(match spec {
            MlpSpec::Gelu { fc, proj } => Mlp::Gelu {
                fc: Linear::load(fc, src)?,
                proj: Linear::load(proj, src)?,
            },
            MlpSpec::SwiGlu { gate, up, down } => Mlp::SwiGlu {
                gate: Linear::load(gate, src)?,
                up: Linear::load(up, src)?,
                down: Linear::load(down, src)?,
            },
        })
    }

    pub fn export(&self, spec: &MlpSpec, out: &mut Exported<T>) {
        match (self, spec) {
            (Mlp::Gelu { fc, proj }, MlpSpec::Gelu { fc: sf, proj: sp }) => {
                fc.export(sf, out);
                proj.export(sp, out);
            }
            (
                Mlp::SwiGlu { gate, up, down },
                MlpSpec::SwiGlu {
                    gate: sg,
                    up: su,
                    down: sd,
                },
            ) => {
                gate.export(sg, out);
                up.export(su, out);
                down.export(sd, out);
            }
            _ => unreachable!("an MLP exports with the spec it was loaded from"),
        }
    }

    pub fn nbytes(&self) -> usize {
        match self {
            Mlp::Gelu { fc, proj } => fc.nbytes() + proj.nbytes(),
            Mlp::SwiGlu { gate, up, down } => gate.nbytes() + up.nbytes() + down.nbytes(),
        }
    }

    /// `x (rows, d) += mlp(h (rows, d))`, with `u`, `g (rows, d_ff)` and `y (rows, d)` as work
    /// buffers. SwiGLU: the gate's product lands in `g`; the up product's epilogue turns each
    /// of its tiles into `silu(g) * up` while the tile is in the cache.
    pub fn forward(
        &self,
        h: &[T],
        x: &mut [T],
        rows: usize,
        u: &mut Vec<T>,
        g: &mut Vec<T>,
        y: &mut Vec<T>,
    ) {
        match self {
            Mlp::Gelu { fc, proj } => {
                fc.forward(h, rows, u, After::Gelu);
                proj.forward(u, rows, y, After::AddInto(x));
            }
            Mlp::SwiGlu { gate, up, down } => {
                gate.forward(h, rows, g, After::Bias);
                up.forward(h, rows, u, After::SiluMul(g));
                down.forward(u, rows, y, After::AddInto(x));
            }
        }
    }
}
