//! Model families: each folder is a recipe over the shared layers of `decoder/` and the one
//! tensor schema of the family (names and shapes as its Hugging Face checkpoints hold them).
//!
//! A new family (Phi-3, Gemma, Qwen3, ...) is a new folder with a `schema.rs` that builds a
//! [`Layout`] from the [`Config`] and a `mod.rs` that states its recipe and checks its
//! config, plus its arm in the two functions below.

mod gpt2;
mod llama;

use super::config::{Config, Family};
use super::schema::Layout;
use crate::Result;

/// The layers and tensors of `cfg`, as its family builds them.
pub fn layout(cfg: &Config) -> Layout {
    match cfg.family {
        Family::Gpt2 => gpt2::schema::layout(cfg),
        Family::Llama => llama::schema::layout(cfg),
    }
}

/// What the family asks of a config beyond the shared checks of [`Config::validate`].
pub fn validate(cfg: &Config) -> Result<()> {
    match cfg.family {
        Family::Gpt2 => gpt2::validate(cfg),
        Family::Llama => llama::validate(cfg),
    }
}
