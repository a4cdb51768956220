//! GPT-2:
//!
//! ```text
//! x = wte[ids] + pos(t)                         learned table or sinusoidal   embedding.rs
//! for each block:  x = x + Attn(LN1(x)) Wo + bo                               block.rs
//!                  x = x + GELU(LN2(x) Wfc + bfc) Wproj + bproj               mlp.rs
//! logits = LN_f(x) Whead                        Whead = wte^T when tied
//! ```
//!
//! LayerNorm (affine or not), one K/V head per query head, `d_head = d_model / n_heads`, the
//! fused `c_attn` product `[Q | K | V]`, GELU (tanh form); every projection `Conv1D` `(in,
//! out)`. Names and shapes: [`schema`].

pub mod schema;

use crate::decoder::config::{Config, Positions};
use crate::Result;

pub fn validate(cfg: &Config) -> Result<()> {
    if !cfg.d_model.is_multiple_of(cfg.n_heads) || cfg.d_head * cfg.n_heads != cfg.d_model {
        return crate::value_error!(
            "config: d_model ({}) must be divisible by n_heads ({}), with d_head = d_model / n_heads",
            cfg.d_model,
            cfg.n_heads
        );
    }
    if cfg.n_kv_heads != cfg.n_heads {
        return crate::value_error!(
            "config: gpt2 has one key/value head per query head (n_kv_heads = {} != n_heads = {})",
            cfg.n_kv_heads,
            cfg.n_heads
        );
    }
    if cfg.attn_out_bias != cfg.attn_bias {
        return crate::value_error!(
            "config: gpt2's attention biases are all present or all absent (attn_bias = {}, \
             attn_out_bias = {})",
            cfg.attn_bias,
            cfg.attn_out_bias
        );
    }
    if let Positions::Rotary(_) = cfg.positions {
        return crate::value_error!("config: gpt2 has learned or sinusoidal positions, not rotary");
    }
    Ok(())
}
