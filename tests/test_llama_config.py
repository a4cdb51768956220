"""The Llama family's configuration and accounting: presets, published parameter counts,
validation errors, the schema's shapes and ``infer_config``."""

from __future__ import annotations

import math

import numpy as np
import pytest

import gptcore
from gptcore.accounting import flops_per_token, param_count
from gptcore.config import LLAMA_PRESETS, GPTConfig, RopeScaling

# The parameter counts the models' publishers state (the sum of their safetensors' tensor
# sizes), for the presets' shapes.
PUBLISHED = {
    "smollm2-135m": 134_515_008,
    "smollm2-360m": 361_821_120,
    "smollm2-1.7b": 1_711_376_384,
    "qwen2.5-0.5b": 494_032_768,
    "qwen2.5-1.5b": 1_543_714_304,
    "llama-3.2-1b": 1_235_814_400,
    "tinyllama-1.1b": 1_100_048_384,
    "mistral-7b": 7_248_023_552,
}


def test_presets_count_the_published_parameters():
    assert set(PUBLISHED) == set(LLAMA_PRESETS)
    for name, total in PUBLISHED.items():
        assert param_count(GPTConfig.preset(name)).total == total, name


def test_counts_agree_with_the_schema_shapes():
    for name in LLAMA_PRESETS:
        base = GPTConfig.preset(name).replace(vocab_size=97, n_layers=2)  # small, same blocks
        for cfg in (base, base.replace(tied=not base.tied, bias=True, attn_bias=True, attn_out_bias=True)):
            shapes = gptcore.expected_shapes(cfg)
            assert sum(math.prod(s) for s in shapes.values()) == param_count(cfg).total, (name, cfg)


def test_flops_of_grouped_query_attention():
    c = GPTConfig.preset("qwen2.5-0.5b")
    f = flops_per_token(c, T=1000)
    p = param_count(c)
    assert f.forward == 2 * (p.blocks + c.d_model * c.vocab_size)
    # The score and mix products run for every query head: 4 T (n_heads d_head) per layer.
    assert f.attention == 4 * 1000 * c.n_heads * c.d_head * c.n_layers
    # At T*, the attention products match SwiGLU's three matrices (6 d d_ff per layer).
    g = flops_per_token(c, T=f.crossover_T)
    assert g.attention <= c.n_layers * 6 * c.d_model * c.d_ff < g.attention + 4 * c.q_width * c.n_layers


def test_llama_config_fields_and_defaults():
    c = GPTConfig(family="llama", vocab_size=10, n_ctx=16, d_model=32, n_heads=4, n_layers=1)
    assert (c.pos, c.n_kv_heads, c.head_dim, c.bias, c.attn_bias, c.attn_out_bias) == ("rotary", 4, 8, False, False, False)
    q = GPTConfig(family="llama", vocab_size=10, n_ctx=16, d_model=32, n_heads=4, n_kv_heads=1, head_dim=16,
                  n_layers=1, attn_bias=True, attn_out_bias=False)
    assert (q.q_width, q.kv_width, q.d_head) == (64, 16, 16)
    # A round trip through to_dict (the checkpoint metadata) keeps every field.
    r = GPTConfig.preset("llama-3.2-1b")
    assert GPTConfig(**r.to_dict()) == r
    assert r.rope_scaling == RopeScaling("llama3", 32.0, 1.0, 4.0, 8192)
    assert hash(r) == hash(GPTConfig(**r.to_dict()))


@pytest.mark.parametrize("changes, message", [
    (dict(n_kv_heads=3), "n_heads (4) must be a multiple of n_kv_heads (3)"),
    (dict(head_dim=7), "even head_dim"),
    (dict(d_model=30), "d_model (30) must be divisible by n_heads (4) (or give head_dim)"),
    (dict(pos="learned"), "pos must be 'rotary' for family 'llama'"),
    (dict(rope_scaling={"rope_type": "yarn", "factor": 4.0}), "rope type 'yarn' is not supported"),
    (dict(rope_scaling={"type": "dynamic", "factor": 4.0}), "rope type 'dynamic' is not supported"),
    (dict(rope_scaling={"rope_type": "llama3", "factor": 8.0}), "llama3 rope scaling needs low_freq_factor"),
    (dict(rope_scaling={"rope_type": "linear", "factor": -1.0}), "factor must be a positive number"),
    (dict(rope_theta=0.0), "rope_theta must be a positive number"),
    (dict(ln_affine=False), "RMSNorm always has its weight"),
    (dict(family="bert"), "family must be one of 'gpt2', 'llama'"),
])
def test_bad_llama_configs_name_the_field(changes, message):
    kw = dict(family="llama", vocab_size=10, n_ctx=16, d_model=32, n_heads=4, n_layers=1)
    kw.update(changes)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        GPTConfig(**kw)


def test_gpt2_configs_refuse_what_gpt2_cannot_compute():
    kw = dict(vocab_size=10, n_ctx=16, d_model=32, n_heads=4, n_layers=1)
    with pytest.raises(ValueError, match="one key/value head per query head"):
        GPTConfig(**kw, n_kv_heads=2)
    with pytest.raises(ValueError, match="pos must be 'learned' or 'sinusoidal'"):
        GPTConfig(**kw, pos="rotary")
    with pytest.raises(ValueError, match="rope_scaling applies to rotary positions"):
        GPTConfig(**kw, rope_scaling={"rope_type": "linear", "factor": 2.0})
    with pytest.raises(ValueError, match="Lesson 14 counts GPT-2 models"):
        gptcore.accounting.lesson14_counting(GPTConfig.preset("smollm2-135m"))


def test_schema_names_and_shapes():
    c = GPTConfig(family="llama", vocab_size=11, n_ctx=16, d_model=24, n_heads=4, n_kv_heads=2, head_dim=8,
                  n_layers=2, d_ff=40, tied=False, attn_bias=True, attn_out_bias=False)
    s = gptcore.expected_shapes(c)
    assert s["model.embed_tokens.weight"] == (11, 24)
    assert s["model.layers.1.self_attn.q_proj.weight"] == (32, 24)
    assert s["model.layers.1.self_attn.k_proj.weight"] == (16, 24)
    assert s["model.layers.1.self_attn.v_proj.bias"] == (16,)
    assert s["model.layers.1.self_attn.o_proj.weight"] == (24, 32)
    assert "model.layers.1.self_attn.o_proj.bias" not in s
    assert s["model.layers.0.mlp.gate_proj.weight"] == (40, 24)
    assert s["model.layers.0.mlp.down_proj.weight"] == (24, 40)
    assert s["model.norm.weight"] == (24,) and s["lm_head.weight"] == (11, 24)


def test_infer_config_reads_a_llama_model_from_its_shapes():
    c = GPTConfig(family="llama", vocab_size=50, n_ctx=1024, d_model=128, n_heads=4, n_kv_heads=2, head_dim=16,
                  n_layers=3, d_ff=96, tied=True, attn_bias=True, attn_out_bias=False)
    w = gptcore.init_weights(c, seed=1, dtype="float32")
    # Older transformers kept the rotary frequencies as a buffer: it is not a weight.
    w["model.layers.0.self_attn.rotary_emb.inv_freq"] = np.ones(8, np.float32)
    assert gptcore.infer_config(w, n_heads=4) == c
    # A stored tied head (equal to the embedding) is dropped.
    w["lm_head.weight"] = w["model.embed_tokens.weight"].copy()
    assert gptcore.infer_config(w, n_heads=4).tied
    with pytest.raises(ValueError, match="do not split into n_heads=5 heads"):
        gptcore.infer_config(w, n_heads=5)


def test_validate_hints_name_the_llama_switch():
    c = GPTConfig(family="llama", vocab_size=11, n_ctx=16, d_model=24, n_heads=4, n_layers=1, attn_bias=True,
                  attn_out_bias=False)
    w = gptcore.init_weights(c, dtype="float32")
    w["model.layers.0.self_attn.o_proj.bias"] = np.zeros(24, np.float32)
    with pytest.raises(ValueError, match=r"o_proj.bias' with shape \(24,\) \(config.attn_out_bias=False\)"):
        gptcore.validate(w, c)
    w = gptcore.init_weights(c, dtype="float32")
    w["model.layers.0.self_attn.k_proj.weight"] = np.zeros((12, 24), np.float32)
    with pytest.raises(ValueError, match=r"k_proj.weight' has shape \(12, 24\), expected \(24, 24\)"):
        gptcore.validate(w, c)
