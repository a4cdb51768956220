"""A plain float64 Llama forward in numpy, written from the definitions, for the tests.

It shares no code with gptcore: the weights are read with ``safetensors`` (BF16 widened by
hand), the settings straight from ``config.json`` (either format), and every step is the
textbook one: RMSNorm ``x / sqrt(mean(x^2) + eps) * w``; q, k, v as ``x @ W.T + b``;
rotary positions in the rotate-half layout with float64 frequencies and float64 cosines and
sines; grouped-query attention as a full masked score matrix per head with a plain softmax;
SwiGLU ``down(silu(gate(x)) * up(x))``; the head ``x @ lm_head.T`` (the embedding when
tied).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Dict, Tuple

import numpy as np


def read_folder(folder) -> Tuple[Dict[str, np.ndarray], dict]:
    """Every tensor of a model folder (one file or shards) as float64, and config.json."""
    from safetensors import safe_open

    folder = Path(folder)
    cfg = json.loads((folder / "config.json").read_text())
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for name in files:
        path = folder / name
        header_len = int.from_bytes(path.read_bytes()[:8], "little")
        header = json.loads(path.read_bytes()[8:8 + header_len])
        with safe_open(str(path), framework="numpy") as f:
            for key in f.keys():
                if header[key]["dtype"] == "BF16":
                    start, end = header[key]["data_offsets"]
                    raw = np.frombuffer(path.read_bytes()[8 + header_len + start:8 + header_len + end], "<u2")
                    v = (raw.astype(np.uint32) << 16).view(np.float32).reshape(header[key]["shape"])
                else:
                    v = f.get_tensor(key)
                out[key] = v.astype(np.float64)
    return out, cfg


def rope_settings(cfg: dict) -> Tuple[float, dict]:
    """``(theta, scaling)`` from either config format (``rope_parameters``, or top-level
    ``rope_theta`` / ``rope_scaling``)."""
    rp = cfg.get("rope_parameters")
    if rp is not None:
        scaling = dict(rp)
        theta = scaling.pop("rope_theta")
    else:
        theta = cfg.get("rope_theta", 10000.0)
        scaling = dict(cfg.get("rope_scaling") or {})
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    scaling["rope_type"] = kind
    return float(theta), scaling


def inv_freq(theta: float, dh: int, scaling: dict) -> np.ndarray:
    f = 1.0 / theta ** (np.arange(0, dh, 2, dtype=np.float64) / dh)
    kind = scaling.get("rope_type", "default")
    if kind == "default":
        return f
    if kind == "linear":
        return f / scaling["factor"]
    if kind == "llama3":
        factor, lo, hi = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        L = scaling["original_max_position_embeddings"]
        w = 2 * math.pi / f
        s = (L / w - lo) / (hi - lo)
        blended = (1 - s) * f / factor + s * f
        return np.where(w > L / lo, f / factor, np.where(w < L / hi, f, blended))
    raise ValueError(f"rope type {kind!r}")


def rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """``x * cos + rotate_half(x) * sin`` over the last axis (cos, sin: the halves' values)."""
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def forward(weights: Dict[str, np.ndarray], cfg: dict, ids: np.ndarray) -> np.ndarray:
    """Logits ``(B, T, V)`` float64 of token ids ``(B, T)``."""
    ids = np.atleast_2d(ids)
    B, T = ids.shape
    d = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    dh = cfg.get("head_dim") or d // nh
    eps = cfg["rms_norm_eps"]
    theta, scaling = rope_settings(cfg)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv_freq(theta, dh, scaling)[None, :]  # (T, dh/2)
    cos, sin = np.cos(ang), np.sin(ang)
    W = weights

    def rms(x, w):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w

    def lin(x, name):
        y = x @ W[name + ".weight"].T
        b = W.get(name + ".bias")
        return y if b is None else y + b

    x = W["model.embed_tokens.weight"][ids]  # (B, T, d)
    mask = np.triu(np.full((T, T), -np.inf), k=1)
    group = nh // nkv
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms(x, W[p + "input_layernorm.weight"])
        q = lin(h, p + "self_attn.q_proj").reshape(B, T, nh, dh).transpose(0, 2, 1, 3)
        k = lin(h, p + "self_attn.k_proj").reshape(B, T, nkv, dh).transpose(0, 2, 1, 3)
        v = lin(h, p + "self_attn.v_proj").reshape(B, T, nkv, dh).transpose(0, 2, 1, 3)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        out = np.empty_like(q)
        for hh in range(nh):
            g = hh // group
            s = q[:, hh] @ k[:, g].transpose(0, 2, 1) / math.sqrt(dh) + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            out[:, hh] = s @ v[:, g]
        att = out.transpose(0, 2, 1, 3).reshape(B, T, nh * dh)
        x = x + lin(att, p + "self_attn.o_proj")
        h = rms(x, W[p + "post_attention_layernorm.weight"])
        gate = lin(h, p + "mlp.gate_proj")
        x = x + lin(gate / (1 + np.exp(-gate)) * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
    x = rms(x, W["model.norm.weight"])
    head = W.get("lm_head.weight", W["model.embed_tokens.weight"])
    return x @ head.T
