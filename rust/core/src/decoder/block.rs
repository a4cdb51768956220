//! One transformer block, pre-norm: `x += attn(norm1(x)); x += mlp(norm2(x))`.

use super::mlp::Mlp;
use super::norm::Norm;
use super::rotary::RotaryTable;
use super::schema::{BlockSpec, Exported, Source};
use super::self_attention::{AttentionBuffers, SelfAttention};
use super::workspace::Workspace;
use super::{Float, Pass};
use crate::kv_cache::HeadKv;
use crate::profile::Phases;
use crate::Result;

pub struct Block<T: Float> {
    pub norm1: Norm<T>,
    pub attn: SelfAttention<T>,
    pub norm2: Norm<T>,
    pub mlp: Mlp<T>,
}

impl<T: Float> Block<T> {
    pub fn load(spec: &BlockSpec, src: &Source<'_, '_, T>) -> Result<Self> {
        Ok(Block {
            norm1: Norm::load(&spec.norm1, src)?,
            attn: SelfAttention::load(&spec.attn, src)?,
            norm2: Norm::load(&spec.norm2, src)?,
            mlp: Mlp::load(&spec.mlp, src)?,
        })
    }

    pub fn export(&self, spec: &BlockSpec, out: &mut Exported<T>) {
        self.norm1.export(&spec.norm1, out);
        self.attn.export(&spec.attn, out);
        self.norm2.export(&spec.norm2, out);
        self.mlp.export(&spec.mlp, out);
    }

    pub fn nbytes(&self) -> usize {
        self.attn.nbytes() + self.mlp.nbytes()
    }

    /// The residual recipe on `x (B*T, d)`; the new positions' keys and values go to `heads`.
    /// `rotary`: the cosines and sines of the pass's positions (rotary models only). With
    /// `keep` (see `SelfAttention::forward`) only the kept rows go on past the keys and
    /// values, moved to rows `0 ..` of `x`; the rows after them are left as they were.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        x: &mut [T],
        heads: &mut [HeadKv<T>],
        pass: &Pass,
        ws: &mut Workspace<T>,
        rotary: Option<&RotaryTable<T>>,
        ph: &mut Phases,
        keep: Option<(&Pass, &[usize])>,
    ) {
        let (d, rows) = (pass.d, pass.rows());
        let Workspace {
            h,
            qkv,
            att,
            y,
            u,
            g,
            ..
        } = ws;
        self.norm1.forward(x, h, d);
        let buf = AttentionBuffers { qkv, att, y };
        self.attn.forward(h, x, heads, pass, buf, rotary, keep);
        ph.mark("attention layer");
        let rows = keep.map_or(rows, |(kept, _)| kept.rows());
        let x = &mut x[..rows * d];
        self.norm2.forward(x, h, d);
        self.mlp.forward(h, x, rows, u, g, y);
        ph.mark("mlp");
    }
}
