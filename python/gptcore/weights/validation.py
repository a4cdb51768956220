"""Checking weights against a configuration, and the configuration that shapes imply."""

from __future__ import annotations

from typing import List, Mapping, Optional, Tuple

import numpy as np

from ..config import GPTConfig
from .schema import Weights, _block_index, _check_config, _normalize, expected_shapes

__all__ = ["infer_config", "validate"]

# validate() gives a summary instead of listing names when the configuration asks for this many
# more tensors than there are (every block has at least four).
_LAYER_SLACK = 4096


def _as_accepted_float(fn: str, name: str, a: np.ndarray) -> np.ndarray:
    dt = a.dtype
    if dt == np.float32 or dt == np.float64:
        return a
    if dt == np.float16 or dt.name == "bfloat16":
        return a.astype(np.float32)
    raise TypeError(
        f"{fn}: weight {name!r} has dtype {dt}; expected float32 or float64 "
        "(float16 and bfloat16 are converted to float32)"
    )


def _check_dtypes(fn: str, weights: Weights) -> Weights:
    return {k: _as_accepted_float(fn, k, v) for k, v in weights.items()}


def _hint(name: str, config: GPTConfig) -> str:
    i = _block_index(name)
    if i is not None and (i < 0 or i >= config.n_layers):
        return f" (config.n_layers={config.n_layers})"
    if name.startswith("model.") and config.family != "llama":
        return f" (a Llama-family name; config.family={config.family!r})"
    if name.startswith(("h.", "wte.", "wpe.", "ln_f.")) and config.family != "gpt2":
        return f" (a GPT-2 name; config.family={config.family!r})"
    if name.endswith(("q_proj.bias", "k_proj.bias", "v_proj.bias")):
        return " (config.attn_bias=False)"
    if name.endswith("o_proj.bias"):
        return " (config.attn_out_bias=False)"
    if name.endswith(("gate_proj.bias", "up_proj.bias", "down_proj.bias")):
        return " (config.bias=False)"
    if name == "wpe.weight":
        return f" (config.pos={config.pos!r})"
    if name == "lm_head.weight":
        return " (config.tied=True, but lm_head.weight is not equal to the token embedding)"
    if name.endswith(("ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias", "ln_f.weight", "ln_f.bias")):
        return " (config.ln_affine=False)"
    if name.endswith(("attn.c_attn.bias", "attn.c_proj.bias")):
        return " (config.attn_bias=False)"
    if name.endswith(("mlp.c_fc.bias", "mlp.c_proj.bias")):
        return " (config.bias=False)"
    return ""


def validate(weights: Mapping[str, np.ndarray], config: GPTConfig) -> Weights:
    """Check ``weights`` against ``config`` and return them normalized (see
    ``normalize_names``; float16/bfloat16 converted to float32, other arrays not copied).

    Raises ``ValueError`` listing every missing, unexpected or misshaped tensor with its
    expected and actual shape, and ``TypeError`` for a non-float dtype.
    """
    _check_config("validate", config)
    w = _normalize(weights, "validate", drop_tied_head=config.tied)
    if 4 * config.n_layers > len(w) + _LAYER_SLACK:
        # listing the missing names would take as long as the configuration is absurd
        raise ValueError(
            f"validate: the weights do not match the config: config.n_layers={config.n_layers} but "
            f"the weights hold {len(w)} tensors (each block has at least 4)"
        )
    expected = expected_shapes(config)
    problems: List[str] = []
    for name, shape in expected.items():
        if name not in w:
            extra = " (config.tied=False needs an LM head)" if name == "lm_head.weight" else ""
            problems.append(f"missing tensor {name!r} (expected shape {shape}){extra}")
        elif tuple(w[name].shape) != shape:
            problems.append(f"tensor {name!r} has shape {tuple(w[name].shape)}, expected {shape}")
    for name, a in w.items():
        if name not in expected:
            problems.append(f"unexpected tensor {name!r} with shape {tuple(a.shape)}{_hint(name, config)}")
    if problems:
        shown = problems[:12]
        more = f"; and {len(problems) - len(shown)} more" if len(problems) > len(shown) else ""
        raise ValueError(
            f"validate: the weights do not match the config ({len(problems)} problem"
            f"{'s' if len(problems) != 1 else ''}): " + "; ".join(shown) + more
        )
    return {name: _as_accepted_float("validate", name, w[name]) for name in expected}


def _layer_indices(names) -> List[int]:
    found = set()
    for name in names:
        i = _block_index(name)
        if i is not None and i >= 0:
            found.add(i)
    return sorted(found)


def _missing_indices(present: List[int], first: int = 10) -> Tuple[List[int], int]:
    """The first ``first`` numbers in ``0 .. max(present)`` absent from the sorted ``present``,
    and how many are absent in all (from the gaps; the full range is never built)."""
    shown: List[int] = []
    total = 0
    prev = -1
    for i in present:
        gap = i - prev - 1
        if gap > 0:
            total += gap
            if len(shown) < first:
                shown.extend(range(prev + 1, min(i, prev + 1 + first - len(shown))))
        prev = i
    return shown, total


def infer_config(
    weights: Mapping[str, np.ndarray],
    *,
    n_heads: Optional[int] = None,
    n_ctx: int = 1024,
    ln_eps: float = 1e-5,
) -> GPTConfig:
    """The ``GPTConfig`` that the tensor shapes imply.

    Shapes give the family (GPT-2's names or Llama's ``model.*`` names), the vocabulary,
    widths, depth, the MLP width, whether positions are learned (GPT-2: ``wpe.weight``
    present; otherwise sinusoidal with context ``n_ctx``), whether the head is tied (no
    ``lm_head.weight``, or one equal to the token embedding) and which biases and LayerNorm
    affines exist. They cannot give the number of heads: pass ``n_heads``; the default is
    ``d_model // 64`` (GPT-2's head width) when 64 divides ``d_model``. For a Llama-family
    model the head width is then the query projection's width over ``n_heads`` and the
    key/value heads follow from the key projection's width; the rotary settings (not in the
    tensors) are the defaults (``rope_theta`` 10000, no scaling), and ``ln_eps`` is the
    given one. The result is checked with ``validate``.
    """
    w = _normalize(weights, "infer_config", drop_tied_head=True)
    if "model.embed_tokens.weight" in w:
        return _infer_llama(w, n_heads, n_ctx, ln_eps)
    if "wte.weight" not in w:
        raise ValueError("infer_config: the weights have no 'wte.weight' (token embedding), so the sizes are unknown")
    wte = w["wte.weight"]
    if wte.ndim != 2:
        raise ValueError(f"infer_config: 'wte.weight' must be 2-D (vocab_size, d_model), got shape {wte.shape}")
    vocab_size, d_model = (int(s) for s in wte.shape)
    layers = _layer_indices(w)
    if layers and layers[-1] != len(layers) - 1:
        missing, count = _missing_indices(layers)
        more = f" and {count - len(missing)} more (the highest block is {layers[-1]})" if count > len(missing) else ""
        raise ValueError(f"infer_config: blocks must be numbered 0..N-1; no tensors for block(s) {missing}{more}")
    n_layers = len(layers)
    if n_heads is None:
        if d_model % 64 != 0:
            raise ValueError(
                f"infer_config: cannot infer the number of heads for d_model={d_model} (not a multiple "
                "of 64); pass n_heads=..., or give a GPTConfig"
            )
        n_heads = d_model // 64
    d_ff = None
    if n_layers:
        fc = w.get("h.0.mlp.c_fc.weight")
        if fc is None:
            raise ValueError("infer_config: missing tensor 'h.0.mlp.c_fc.weight' (needed for d_ff)")
        if fc.ndim != 2:
            raise ValueError(f"infer_config: 'h.0.mlp.c_fc.weight' must be 2-D (d_model, d_ff), got shape {fc.shape}")
        d_ff = int(fc.shape[1])
    if "wpe.weight" in w:
        pos = "learned"
        wpe = w["wpe.weight"]
        if wpe.ndim != 2:
            raise ValueError(f"infer_config: 'wpe.weight' must be 2-D (n_ctx, d_model), got shape {wpe.shape}")
        n_ctx = int(wpe.shape[0])
    else:
        pos = "sinusoidal"
    bias = "h.0.mlp.c_fc.bias" in w if n_layers else True
    attn_bias = "h.0.attn.c_attn.bias" in w if n_layers else bias
    ln_affine = "ln_f.weight" in w or "ln_f.bias" in w
    config = GPTConfig(
        vocab_size=vocab_size, n_ctx=n_ctx, d_model=d_model, n_heads=n_heads, n_layers=n_layers,
        d_ff=d_ff, pos=pos, tied="lm_head.weight" not in w, bias=bias, attn_bias=attn_bias,
        ln_affine=ln_affine, ln_eps=ln_eps,
    )
    validate(w, config)
    return config


def _infer_llama(w, n_heads: Optional[int], n_ctx: int, ln_eps: float) -> GPTConfig:
    def matrix(name: str, what: str) -> np.ndarray:
        a = w.get(name)
        if a is None:
            raise ValueError(f"infer_config: missing tensor {name!r} (needed for {what})")
        if a.ndim != 2:
            raise ValueError(f"infer_config: {name!r} must be 2-D, got shape {a.shape}")
        return a

    vocab_size, d_model = (int(s) for s in matrix("model.embed_tokens.weight", "the sizes").shape)
    layers = _layer_indices(w)
    if layers and layers[-1] != len(layers) - 1:
        missing, count = _missing_indices(layers)
        more = f" and {count - len(missing)} more (the highest block is {layers[-1]})" if count > len(missing) else ""
        raise ValueError(f"infer_config: blocks must be numbered 0..N-1; no tensors for block(s) {missing}{more}")
    n_layers = len(layers)
    if n_heads is None:
        if d_model % 64 != 0:
            raise ValueError(
                f"infer_config: cannot infer the number of heads for d_model={d_model} (not a multiple "
                "of 64); pass n_heads=..., or give a GPTConfig"
            )
        n_heads = d_model // 64
    kw = {}
    if n_layers:
        a = "model.layers.0.self_attn."
        q = int(matrix(a + "q_proj.weight", "the head width").shape[0])
        kv = int(matrix(a + "k_proj.weight", "the key/value heads").shape[0])
        if q % n_heads:
            raise ValueError(f"infer_config: the query projection's {q} rows do not split into n_heads={n_heads} heads")
        head_dim = q // n_heads
        if kv % head_dim:
            raise ValueError(f"infer_config: the key projection's {kv} rows are not whole heads of width {head_dim}")
        kw = dict(
            head_dim=head_dim, n_kv_heads=kv // head_dim,
            d_ff=int(matrix("model.layers.0.mlp.gate_proj.weight", "d_ff").shape[0]),
            attn_bias=a + "q_proj.bias" in w, attn_out_bias=a + "o_proj.bias" in w,
            bias="model.layers.0.mlp.gate_proj.bias" in w,
        )
    config = GPTConfig(
        family="llama", vocab_size=vocab_size, n_ctx=n_ctx, d_model=d_model, n_heads=n_heads,
        n_layers=n_layers, tied="lm_head.weight" not in w, ln_eps=ln_eps, **kw,
    )
    validate(w, config)
    return config
