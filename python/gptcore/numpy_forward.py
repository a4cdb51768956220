"""A plain, vectorised float32 forward in numpy, for GPT-2 and the Llama family: the baseline
that gptcore's forward is compared with. Matrix products go to numpy's BLAS; pin its threads
with threadpoolctl.

Weights use the schema's names (``gptcore.expected_shapes``): GPT-2's without the
"transformer." prefix, applied as x @ W + b; Llama's ``model.*`` names, ``torch.nn.Linear``
weights applied as x @ W.T + b.
"""

from __future__ import annotations

import math
from typing import Dict

import numpy as np

_GELU_C = np.float32(math.sqrt(2.0 / math.pi))


def layer_norm(x: np.ndarray, g, b, eps: float) -> np.ndarray:
    mu = x.mean(axis=-1, keepdims=True)
    xc = x - mu
    var = np.mean(xc * xc, axis=-1, keepdims=True)
    y = xc * (1.0 / np.sqrt(var + np.float32(eps)))
    if g is not None:
        y *= g
    if b is not None:
        y += b
    return y


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), GPT-2's GELU, in place on a copy."""
    inner = x * x
    inner *= np.float32(0.044715)
    inner += np.float32(1.0)
    inner *= x
    inner *= _GELU_C
    np.tanh(inner, out=inner)
    inner += np.float32(1.0)
    inner *= x
    inner *= np.float32(0.5)
    return inner


def _linear(x, w, b):
    y = x @ w
    if b is not None:
        y += b
    return y


def forward(weights: Dict[str, np.ndarray], ids: np.ndarray, config) -> np.ndarray:
    """Logits (B, T, V) float32 (or (T, V) for 1-D ids) of a GPT-2 style decoder with learned
    positions or of a Llama-family decoder. Causal attention is computed as a full masked
    T x T score matrix per head."""
    ids = np.asarray(ids)
    squeeze = ids.ndim == 1
    if squeeze:
        ids = ids[None, :]
    if getattr(config, "family", "gpt2") == "llama":
        logits = _llama_forward(weights, ids, config)
        return logits[0] if squeeze else logits
    B, T = ids.shape
    if config.pos != "learned":
        raise NotImplementedError("numpy_forward.forward: learned positions only")
    d, H = config.d_model, config.n_heads
    dh = d // H
    eps = config.ln_eps
    get = weights.get
    x = weights["wte.weight"][ids] + weights["wpe.weight"][:T]          # (B, T, d)
    x = x.reshape(B * T, d)
    mask = np.triu(np.full((T, T), -np.inf, dtype=np.float32), k=1)
    scale = np.float32(1.0 / math.sqrt(dh))
    for i in range(config.n_layers):
        p = f"h.{i}."
        h = layer_norm(x, get(p + "ln_1.weight"), get(p + "ln_1.bias"), eps)
        qkv = _linear(h, weights[p + "attn.c_attn.weight"], get(p + "attn.c_attn.bias"))
        qkv = qkv.reshape(B, T, 3, H, dh).transpose(2, 0, 3, 1, 4)        # (3, B, H, T, dh)
        q, k, v = qkv[0] * scale, qkv[1], qkv[2]
        s = q @ k.transpose(0, 1, 3, 2)                                    # (B, H, T, T)
        s += mask
        s -= s.max(axis=-1, keepdims=True)
        np.exp(s, out=s)
        s /= s.sum(axis=-1, keepdims=True)
        a = (s @ v).transpose(0, 2, 1, 3).reshape(B * T, d)                # (B*T, d)
        x = x + _linear(a, weights[p + "attn.c_proj.weight"], get(p + "attn.c_proj.bias"))
        h = layer_norm(x, get(p + "ln_2.weight"), get(p + "ln_2.bias"), eps)
        h = gelu_tanh(_linear(h, weights[p + "mlp.c_fc.weight"], get(p + "mlp.c_fc.bias")))
        x = x + _linear(h, weights[p + "mlp.c_proj.weight"], get(p + "mlp.c_proj.bias"))
    x = layer_norm(x, get("ln_f.weight"), get("ln_f.bias"), eps)
    head = weights["lm_head.weight"] if "lm_head.weight" in weights else weights["wte.weight"]
    logits = (x @ head.T).reshape(B, T, -1)
    return logits[0] if squeeze else logits


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """``x / sqrt(mean(x^2) + eps) * w``."""
    ms = np.mean(x * x, axis=-1, keepdims=True)
    return x * (1.0 / np.sqrt(ms + np.float32(eps))) * w


def rotary_tables(config, T: int):
    """float32 cosines and sines ``(T, d_head / 2)`` of positions ``0 .. T-1``, computed in
    float64 (with the config's rope scaling) and rounded once."""
    dh = config.d_head
    f = 1.0 / config.rope_theta ** (np.arange(0, dh, 2, dtype=np.float64) / dh)
    sc = config.rope_scaling
    if sc is not None and sc.rope_type == "linear":
        f = f / sc.factor
    elif sc is not None and sc.rope_type == "llama3":
        L, lo, hi = sc.original_max_position_embeddings, sc.low_freq_factor, sc.high_freq_factor
        w = 2 * math.pi / f
        s = (L / w - lo) / (hi - lo)
        f = np.where(w > L / lo, f / sc.factor, np.where(w < L / hi, f, (1 - s) * f / sc.factor + s * f))
    ang = np.arange(T, dtype=np.float64)[:, None] * f[None, :]
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def _rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def _llama_forward(weights: Dict[str, np.ndarray], ids: np.ndarray, config) -> np.ndarray:
    B, T = ids.shape
    d, H, Hkv, dh = config.d_model, config.n_heads, config.n_kv_heads, config.d_head
    eps = config.ln_eps
    get = weights.get
    cos, sin = rotary_tables(config, T)

    def lin(x, name):
        y = x @ weights[name + ".weight"].T
        b = get(name + ".bias")
        if b is not None:
            y += b
        return y

    x = weights["model.embed_tokens.weight"][ids].reshape(B * T, d)
    mask = np.triu(np.full((T, T), -np.inf, dtype=np.float32), k=1)
    scale = np.float32(1.0 / math.sqrt(dh))
    group = H // Hkv
    for i in range(config.n_layers):
        p = f"model.layers.{i}."
        h = rms_norm(x, weights[p + "input_layernorm.weight"], eps)
        q = lin(h, p + "self_attn.q_proj").reshape(B, T, H, dh).transpose(0, 2, 1, 3)
        k = lin(h, p + "self_attn.k_proj").reshape(B, T, Hkv, dh).transpose(0, 2, 1, 3)
        v = lin(h, p + "self_attn.v_proj").reshape(B, T, Hkv, dh).transpose(0, 2, 1, 3)
        q, k = _rotate(q, cos, sin) * scale, _rotate(k, cos, sin)
        if group > 1:  # each key/value head serves `group` query heads
            k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        s = q @ k.transpose(0, 1, 3, 2)                                   # (B, H, T, T)
        s += mask
        s -= s.max(axis=-1, keepdims=True)
        np.exp(s, out=s)
        s /= s.sum(axis=-1, keepdims=True)
        a = (s @ v).transpose(0, 2, 1, 3).reshape(B * T, H * dh)
        x = x + lin(a, p + "self_attn.o_proj")
        h = rms_norm(x, weights[p + "post_attention_layernorm.weight"], eps)
        g = lin(h, p + "mlp.gate_proj")
        g *= 1.0 / (1.0 + np.exp(-g))
        g *= lin(h, p + "mlp.up_proj")
        x = x + lin(g, p + "mlp.down_proj")
    x = rms_norm(x, weights["model.norm.weight"], eps)
    head = weights["lm_head.weight"] if "lm_head.weight" in weights else weights["model.embed_tokens.weight"]
    return (x @ head.T).reshape(B, T, -1)
