//! Llama (and Mistral, Qwen2, SmolLM2, TinyLlama: the same block):
//!
//! ```text
//! x = embed_tokens[ids]                         no position added             embedding.rs
//! for each block:  h = RMSNorm1(x)                                            norm.rs
//!                  q, k, v = h Wq + bq, h Wk + bk, h Wv + bv   (one product)  self_attention.rs
//!                  q, k = rotary(q, pos), rotary(k, pos)                      rotary.rs
//!                  x = x + Attn(q, k, v) Wo + bo     (query head h reads K/V head h / group)
//!                  x = x + down(silu(gate(RMSNorm2(x))) * up(RMSNorm2(x)))    mlp.rs
//! logits = RMSNorm_f(x) Whead                   Whead = embed_tokens^T when tied
//! ```
//!
//! Grouped-query attention (`n_kv_heads` divides `n_heads`; the K/V cache holds `n_kv_heads`
//! heads), `d_head` from the config (`d_model / n_heads` unless given), rotary positions
//! (default, linear or llama3 frequencies), optional q/k/v biases (Qwen2) and output and MLP
//! biases; every projection `torch.nn.Linear` `(out, in)`. Names and shapes: [`schema`].

pub mod schema;

use crate::decoder::config::{Config, Positions};
use crate::Result;

pub fn validate(cfg: &Config) -> Result<()> {
    match &cfg.positions {
        Positions::Rotary(rope) => rope.validate(cfg.d_head),
        _ => crate::value_error!("config: llama has rotary positions"),
    }
}
