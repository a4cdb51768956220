"""A plain, vectorised float32 GPT-2 forward in numpy: the baseline that gptcore's forward is
compared with. Matrix products go to numpy's BLAS; pin its threads with threadpoolctl.

Weights use the Hugging Face GPT-2 names without the "transformer." prefix (see
docs of gptcore.Model); projections are applied as x @ W + b.
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
    positions. Causal attention is computed as a full masked T x T score matrix per head."""
    ids = np.asarray(ids)
    squeeze = ids.ndim == 1
    if squeeze:
        ids = ids[None, :]
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
