//! Model families: each folder is a recipe over the shared layers of `decoder/` and the one
//! tensor schema of the family (names and shapes as its Hugging Face checkpoints hold them).
//!
//! A new family (Phi-3, Gemma, Qwen3, ...) is a new folder with a `schema.rs` that builds a
//! [`Layout`] from the [`Config`] and a `mod.rs` that states its recipe and checks its
//! config, plus its arm in [`layout`] and [`validate`].

mod gpt2;
mod llama;

use super::config::{Config, Family};
use super::schema::{Layout, TensorSpec};
use crate::Result;

/// The layers and tensors of `cfg`, as its family builds them.
pub fn layout(cfg: &Config) -> Layout {
    match cfg.family {
        Family::Gpt2 => gpt2::schema::layout(cfg),
        Family::Llama => llama::schema::layout(cfg),
    }
}

/// The schema of `cfg`: every tensor's name, shape and kind in canonical order.
pub fn schema(cfg: &Config) -> Vec<TensorSpec> {
    layout(cfg).tensors().into_iter().cloned().collect()
}

/// Whether `cfg` describes a model: the shared checks of [`Config::validate`], then the
/// family's.
pub fn validate(cfg: &Config) -> Result<()> {
    cfg.validate()?;
    match cfg.family {
        Family::Gpt2 => gpt2::validate(cfg),
        Family::Llama => llama::validate(cfg),
    }
}
