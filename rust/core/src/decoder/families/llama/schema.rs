//! Llama's tensors under their Hugging Face names (`LlamaForCausalLM`, `Qwen2ForCausalLM`,
//! `MistralForCausalLM`), `d = d_model`, `f = d_ff`, `V = vocab_size`, `q = n_heads * d_head`,
//! `kv = n_kv_heads * d_head`, block `i` under `model.layers.{i}.`:
//!
//! ```text
//! model.embed_tokens.weight (V, d)
//! input_layernorm.weight (d)
//! self_attn.q_proj.weight (q, d)  .bias (q)      (biases: attn_bias)
//! self_attn.k_proj.weight (kv, d) .bias (kv)
//! self_attn.v_proj.weight (kv, d) .bias (kv)
//! self_attn.o_proj.weight (d, q)  .bias (d)      (attn_out_bias)
//! post_attention_layernorm.weight (d)
//! mlp.gate_proj.weight (f, d)  mlp.up_proj.weight (f, d)  mlp.down_proj.weight (d, f)
//!                                                (biases .bias: mlp_bias)
//! model.norm.weight (d)
//! lm_head.weight (V, d)                          (untied head)
//! ```

use crate::decoder::config::{Config, Positions};
use crate::decoder::rotary::{Rope, RopeScaling};
use crate::decoder::schema::{
    spec, AttentionSpec, BlockSpec, Layout, LinearSpec, MlpSpec, NormSpec, PositionSpec, QkvSpec,
};

fn block(i: usize, cfg: &Config) -> BlockSpec {
    let (d, f, eps) = (cfg.d_model, cfg.d_ff, cfg.ln_eps);
    let (q, kv) = (cfg.q_width(), cfg.kv_width());
    let p = format!("model.layers.{i}");
    let a = format!("{p}.self_attn");
    let m = format!("{p}.mlp");
    let bias = cfg.attn_bias;
    BlockSpec {
        norm1: NormSpec::rms_norm(&format!("{p}.input_layernorm"), d, eps),
        attn: AttentionSpec {
            qkv: QkvSpec::Stacked(vec![
                LinearSpec::linear(&format!("{a}.q_proj"), d, q, bias, "q_proj"),
                LinearSpec::linear(&format!("{a}.k_proj"), d, kv, bias, "k_proj"),
                LinearSpec::linear(&format!("{a}.v_proj"), d, kv, bias, "v_proj"),
            ]),
            out: LinearSpec::linear(&format!("{a}.o_proj"), q, d, cfg.attn_out_bias, "attn_proj"),
            n_heads: cfg.n_heads,
            n_kv_heads: cfg.n_kv_heads,
            d_head: cfg.d_head,
        },
        norm2: NormSpec::rms_norm(&format!("{p}.post_attention_layernorm"), d, eps),
        mlp: MlpSpec::SwiGlu {
            gate: LinearSpec::linear(&format!("{m}.gate_proj"), d, f, cfg.mlp_bias, "gate_proj"),
            up: LinearSpec::linear(&format!("{m}.up_proj"), d, f, cfg.mlp_bias, "up_proj"),
            down: LinearSpec::linear(&format!("{m}.down_proj"), f, d, cfg.mlp_bias, "mlp_proj"),
        },
    }
}

pub fn layout(cfg: &Config) -> Layout {
    let (d, v) = (cfg.d_model, cfg.vocab_size);
    let rope = match &cfg.positions {
        Positions::Rotary(r) => r.clone(),
        // (refused by `validate`; a layout is still defined)
        _ => Rope {
            theta: 10000.0,
            scaling: RopeScaling::Default,
        },
    };
    Layout {
        wte: spec("model.embed_tokens.weight".into(), &[v, d], "wte"),
        positions: PositionSpec::Rotary(rope),
        blocks: (0..cfg.n_layers).map(|i| block(i, cfg)).collect(),
        norm_f: NormSpec::rms_norm("model.norm", d, cfg.ln_eps),
        lm_head: (!cfg.tied).then(|| spec("lm_head.weight".into(), &[v, d], "lm_head")),
    }
}
