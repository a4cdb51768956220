//! The shape of a model: its family, every dimension and switch, in one struct.

use super::rotary::Rope;
use crate::Result;

/// Which recipe builds the model from the shared layers (one folder each under
/// `decoder/families/`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// GPT-2: LayerNorm, learned or sinusoidal positions, GELU MLP, fused QKV.
    Gpt2,
    /// Llama, Mistral, Qwen2, SmolLM2: RMSNorm, rotary positions, SwiGLU MLP, grouped-query
    /// attention.
    Llama,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::Gpt2 => "gpt2",
            Family::Llama => "llama",
        }
    }

    /// The family of a name, or an error listing the known ones.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "gpt2" => Ok(Family::Gpt2),
            "llama" => Ok(Family::Llama),
            _ => crate::value_error!("config: unknown family {name:?}; expected 'gpt2' or 'llama'"),
        }
    }
}

/// How a position enters the model.
#[derive(Clone, Debug, PartialEq)]
pub enum Positions {
    /// A learned table `(n_ctx, d)` added to the token embedding.
    Learned,
    /// The fixed sinusoidal encoding added to the token embedding.
    Sinusoidal,
    /// Queries and keys rotated by their position inside attention.
    Rotary(Rope),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub family: Family,
    pub vocab_size: usize,
    /// The longest sequence the model runs (learned positions: the table's rows).
    pub n_ctx: usize,
    pub d_model: usize,
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads: query head `h` reads key/value head `h / (n_heads / n_kv_heads)`
    /// (`n_heads`: multi-head attention, 1: multi-query attention).
    pub n_kv_heads: usize,
    /// Width of one head (`d_model / n_heads` unless the family's config gives it).
    pub d_head: usize,
    pub n_layers: usize,
    pub d_ff: usize,
    pub positions: Positions,
    /// The LM head is the token embedding transposed (no `lm_head.weight`).
    pub tied: bool,
    /// Epsilon of every normalisation.
    pub ln_eps: f64,
    /// Biases on the query, key and value projections.
    pub attn_bias: bool,
    /// A bias on the attention's output projection.
    pub attn_out_bias: bool,
    /// Biases on the MLP's projections.
    pub mlp_bias: bool,
    /// LayerNorms with a learned scale and shift (GPT-2; RMSNorm always has its scale).
    pub ln_affine: bool,
}

impl Config {
    pub fn d_head(&self) -> usize {
        self.d_head
    }

    /// Columns of the queries (and of the attention's output), `n_heads * d_head`.
    pub fn q_width(&self) -> usize {
        self.n_heads * self.d_head
    }

    /// Columns of the keys (and of the values), `n_kv_heads * d_head`.
    pub fn kv_width(&self) -> usize {
        self.n_kv_heads * self.d_head
    }

    /// The checks every family shares (the family's own: [`super::validate`]).
    pub fn validate(&self) -> Result<()> {
        if self.vocab_size == 0
            || self.d_model == 0
            || self.n_heads == 0
            || self.n_kv_heads == 0
            || self.d_head == 0
            || self.d_ff == 0
            || self.n_ctx == 0
        {
            return crate::value_error!(
                "config: vocab_size, n_ctx, d_model, n_heads, n_kv_heads, d_head and d_ff must be >= 1"
            );
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return crate::value_error!(
                "config: n_heads ({}) must be a multiple of n_kv_heads ({})",
                self.n_heads,
                self.n_kv_heads
            );
        }
        Ok(())
    }
}
