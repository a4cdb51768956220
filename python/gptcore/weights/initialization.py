"""Fresh random weights for a configuration."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._checks import dtype_name
from ..config import GPTConfig
from .schema import Weights, _check_config, _tensor_kinds

__all__ = ["INIT_SCHEMES", "init_weights"]

#: The schemes ``init_weights`` knows.
INIT_SCHEMES = ("gpt2", "lesson", "xavier", "kaiming")


def _init_std(kind: str, scheme: str, config: GPTConfig) -> float:
    d, f, V, N = config.d_model, config.d_ff, config.vocab_size, config.n_layers
    # (fan_in, fan_out) of each random tensor. c_attn counts as three d x d maps (Q, K, V);
    # embedding tables and the head use fan_in = d, fan_out = rows (as torch.nn.init does
    # for an embedding weight, and as the head maps d -> V).
    q, kv = config.q_width, config.kv_width
    fans = {
        "wte": (d, V), "lm_head": (d, V), "wpe": (d, config.n_ctx),
        "c_attn": (d, d), "attn_proj": (q, d), "c_fc": (d, f), "mlp_proj": (f, d),
        "q_proj": (d, q), "k_proj": (d, kv), "v_proj": (d, kv), "gate_proj": (d, f), "up_proj": (d, f),
    }
    if scheme == "gpt2":
        if kind in ("attn_proj", "mlp_proj"):
            return 0.02 / math.sqrt(2 * N)
        return 0.02
    if scheme == "lesson":
        return {
            "wte": 0.1, "wpe": 0.1, "c_attn": 1 / math.sqrt(d), "attn_proj": 1 / math.sqrt(q),
            "c_fc": math.sqrt(2 / d), "mlp_proj": math.sqrt(2 / f), "lm_head": 1 / math.sqrt(d),
            "q_proj": 1 / math.sqrt(d), "k_proj": 1 / math.sqrt(d), "v_proj": 1 / math.sqrt(d),
            "gate_proj": math.sqrt(2 / d), "up_proj": 1 / math.sqrt(d),
        }[kind]
    fan_in, fan_out = fans[kind]
    if scheme == "xavier":
        return math.sqrt(2 / (fan_in + fan_out))
    return math.sqrt(2 / fan_in)  # kaiming


def init_weights(
    config: GPTConfig,
    seed: int = 0,
    scheme: str = "gpt2",
    dtype: Any = "float64",
) -> Weights:
    """Fresh random weights for ``config``: exactly the tensors of ``expected_shapes``.

    Biases are 0, LayerNorm and RMSNorm weights 1 and LayerNorm biases 0 in every scheme. Random tensors are
    ``numpy.random.default_rng(seed).standard_normal(shape) * std``, drawn in canonical order
    in float64 (so a seed gives the same values in either ``dtype``, up to rounding), with
    ``std`` by scheme (``N = n_layers``; ``(in, out)`` = the matrix's fan-in and fan-out):

    - ``"gpt2"`` (GPT-2 / nanoGPT): 0.02 for the embeddings (``wte`` and ``wpe``, as nanoGPT
      and Hugging Face do, not the 0.01 of the original TensorFlow ``wpe``), ``c_attn``,
      ``c_fc`` and an untied head; ``0.02 / sqrt(2N)`` for the residual projections
      ``attn.c_proj.weight`` and ``mlp.c_proj.weight``. Llama's tensors likewise: 0.02, and
      ``0.02 / sqrt(2N)`` for ``o_proj`` and ``down_proj`` (the residual projections).
    - ``"lesson"`` (lesson 14's fan-in scales): embeddings 0.1; ``c_attn`` and
      ``attn.c_proj`` ``1/sqrt(d)``; ``c_fc`` ``sqrt(2/d)``; ``mlp.c_proj`` ``sqrt(2/d_ff)``;
      head ``1/sqrt(d)``. Llama: ``q_proj``, ``k_proj``, ``v_proj`` and ``up_proj``
      ``1/sqrt(d)``, ``gate_proj`` ``sqrt(2/d)``, ``o_proj`` ``1/sqrt(n_heads * d_head)``,
      ``down_proj`` ``sqrt(2/d_ff)``.
    - ``"xavier"``: ``sqrt(2 / (in + out))``; ``"kaiming"``: ``sqrt(2 / in)``. ``c_attn`` counts
      as three ``(d, d)`` maps; ``wte``, ``lm_head`` have ``in = d, out = V``; ``wpe`` has
      ``in = d, out = n_ctx``. Neither rescales the residual projections (the model's
      ``branch_scale`` does that).
    """
    _check_config("init_weights", config)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"init_weights: seed must be a non-negative int, got {type(seed).__name__} {seed!r}")
    if seed < 0:
        raise ValueError(f"init_weights: seed must be a non-negative int, got {seed!r}")
    if scheme not in INIT_SCHEMES:
        raise ValueError(f"init_weights: scheme must be one of {', '.join(map(repr, INIT_SCHEMES))}, got {scheme!r}")
    dt = np.dtype(dtype_name("init_weights", dtype))
    rng = np.random.default_rng(int(seed))
    out: Weights = {}
    for name, shape, kind in _tensor_kinds(config):
        if kind == "bias" or kind == "ln_bias":
            a = np.zeros(shape, dtype=dt)
        elif kind == "ln_weight":
            a = np.ones(shape, dtype=dt)
        else:
            a = rng.standard_normal(shape)
            a *= _init_std(kind, scheme, config)
            a = a.astype(dt, copy=False)
        out[name] = a
    return out
