//! The shape of a model: every dimension and switch, in one struct.

use crate::Result;

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub vocab_size: usize,
    pub n_ctx: usize,
    pub d_model: usize,
    pub n_heads: usize,
    pub n_layers: usize,
    pub d_ff: usize,
    /// Sinusoidal position encoding (no `wpe` table) instead of a learned one.
    pub sinusoidal: bool,
    /// The LM head is `wte` transposed (no `lm_head.weight`).
    pub tied: bool,
    pub ln_eps: f64,
    /// Biases on the attention projections (QKV and output).
    pub attn_bias: bool,
    /// Biases on the two MLP projections.
    pub mlp_bias: bool,
    /// LayerNorms with a learned scale and shift.
    pub ln_affine: bool,
}

impl Config {
    pub fn d_head(&self) -> usize {
        self.d_model / self.n_heads
    }

    pub fn validate(&self) -> Result<()> {
        if self.vocab_size == 0
            || self.d_model == 0
            || self.n_heads == 0
            || self.d_ff == 0
            || self.n_ctx == 0
        {
            return crate::value_error!(
                "config: vocab_size, n_ctx, d_model, n_heads and d_ff must be >= 1"
            );
        }
        if self.d_model % self.n_heads != 0 {
            return crate::value_error!(
                "config: d_model ({}) must be divisible by n_heads ({})",
                self.d_model,
                self.n_heads
            );
        }
        Ok(())
    }
}
