//! GPT-2's tensors under their Hugging Face names (without `transformer.`), `d = d_model`,
//! `f = d_ff`, `V = vocab_size`, block `i`:
//!
//! ```text
//! wte.weight (V, d)            wpe.weight (n_ctx, d)       (learned positions)
//! h.{i}.ln_1.weight/.bias (d)  h.{i}.attn.c_attn.weight (d, 3d) .bias (3d)
//! h.{i}.attn.c_proj.weight (d, d) .bias (d)
//! h.{i}.ln_2.weight/.bias (d)  h.{i}.mlp.c_fc.weight (d, f) .bias (f)
//! h.{i}.mlp.c_proj.weight (f, d) .bias (d)
//! ln_f.weight/.bias (d)        lm_head.weight (V, d)       (untied head)
//! ```

use crate::decoder::config::{Config, Positions};
use crate::decoder::schema::{
    spec, AttentionSpec, BlockSpec, Layout, LinearSpec, MlpSpec, NormSpec, PositionSpec, QkvSpec,
};

fn block(i: usize, cfg: &Config) -> BlockSpec {
    let (d, f, eps) = (cfg.d_model, cfg.d_ff, cfg.ln_eps);
    let p = format!("h.{i}");
    let attn_bias = cfg.attn_bias;
    BlockSpec {
        norm1: NormSpec::layer_norm(&format!("{p}.ln_1"), d, cfg.ln_affine, eps),
        attn: AttentionSpec {
            qkv: QkvSpec::Fused(LinearSpec::conv1d(
                &format!("{p}.attn.c_attn"),
                d,
                3 * d,
                attn_bias,
                "c_attn",
            )),
            out: LinearSpec::conv1d(&format!("{p}.attn.c_proj"), d, d, attn_bias, "attn_proj"),
            n_heads: cfg.n_heads,
            n_kv_heads: cfg.n_heads,
            d_head: d / cfg.n_heads,
        },
        norm2: NormSpec::layer_norm(&format!("{p}.ln_2"), d, cfg.ln_affine, eps),
        mlp: MlpSpec::Gelu {
            fc: LinearSpec::conv1d(&format!("{p}.mlp.c_fc"), d, f, cfg.mlp_bias, "c_fc"),
            proj: LinearSpec::conv1d(&format!("{p}.mlp.c_proj"), f, d, cfg.mlp_bias, "mlp_proj"),
        },
    }
}

pub fn layout(cfg: &Config) -> Layout {
    let (d, v) = (cfg.d_model, cfg.vocab_size);
    Layout {
        wte: spec("wte.weight".into(), &[v, d], "wte"),
        positions: match cfg.positions {
            Positions::Sinusoidal => PositionSpec::Sinusoidal,
            // (rotary is refused by `validate`; a layout is still defined for it)
            _ => PositionSpec::Learned(spec("wpe.weight".into(), &[cfg.n_ctx, d], "wpe")),
        },
        blocks: (0..cfg.n_layers).map(|i| block(i, cfg)).collect(),
        norm_f: NormSpec::layer_norm("ln_f", d, cfg.ln_affine, cfg.ln_eps),
        lm_head: (!cfg.tied).then(|| spec("lm_head.weight".into(), &[v, d], "lm_head")),
    }
}
