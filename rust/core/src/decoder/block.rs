//! One transformer block, pre-LN: `x += attn(LN1(x)); x += mlp(LN2(x))`.

use super::mlp::Mlp;
use super::norm::Norm;
use super::schema::{BlockSpec, Exported, Source};
use super::self_attention::{AttentionBuffers, SelfAttention};
use super::workspace::Workspace;
use super::{Float, Pass};
use crate::kv_cache::HeadKv;
use crate::profile::Phases;
use crate::Result;

pub struct Block<T: Float> {
    pub ln1: Norm<T>,
    pub attn: SelfAttention<T>,
    pub ln2: Norm<T>,
    pub mlp: Mlp<T>,
}

impl<T: Float> Block<T> {
    pub fn load(spec: &BlockSpec, n_heads: usize, src: &Source<'_, '_, T>) -> Result<Self> {
        Ok(Block {
            ln1: Norm::load(&spec.ln1, src)?,
            attn: SelfAttention::load(spec, n_heads, src)?,
            ln2: Norm::load(&spec.ln2, src)?,
            mlp: Mlp::load(spec, src)?,
        })
    }

    pub fn export(&self, spec: &BlockSpec, out: &mut Exported<T>) {
        self.ln1.export(&spec.ln1, out);
        self.attn.export(spec, out);
        self.ln2.export(&spec.ln2, out);
        self.mlp.export(spec, out);
    }

    /// The residual recipe on `x (B*T, d)`; the new positions' keys and values go to `heads`.
    pub fn forward(
        &self,
        x: &mut [T],
        heads: &mut [HeadKv<T>],
        pass: &Pass,
        ws: &mut Workspace<T>,
        ph: &mut Phases,
    ) {
        let (d, rows) = (pass.d, pass.rows());
        let Workspace {
            h, qkv, att, y, u, ..
        } = ws;
        self.ln1.forward(x, h, d, pass.eps::<T>());
        let buf = AttentionBuffers { qkv, att, y };
        self.attn.forward(h, x, heads, pass, buf);
        ph.mark("attention layer");
        self.ln2.forward(x, h, d, pass.eps::<T>());
        self.mlp.forward(h, x, rows, u, y);
        ph.mark("mlp");
    }
}
