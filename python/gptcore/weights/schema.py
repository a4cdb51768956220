"""Names and shapes of the weight tensors (the table is in :mod:`gptcore.weights`).

``_tensor_kinds(config)`` is the one place that lists the tensors of a configuration, as
``(name, shape, kind)``; :func:`expected_shapes`, ``validate`` and ``init_weights`` are built
on it. Callers go through it (or :func:`expected_shapes`), so that the table can later come
from the Rust core by changing this one function.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from ..config import GPTConfig

__all__ = ["expected_shapes", "normalize_names"]

Weights = Dict[str, np.ndarray]

_PREFIX = "transformer."
_MASK_BUFFER = re.compile(r"^h\.([0-9]+)\.attn\.bias$")
_MASKED_BIAS = re.compile(r"^h\.([0-9]+)\.attn\.masked_bias$")
_BLOCK_NAME = re.compile(r"^h\.([0-9]+)\.(.+)$")
# Longer block numbers are not converted (Python refuses int() of over 4300 digits); such a
# name is far beyond any model and is reported as unexpected.
_MAX_INDEX_DIGITS = 1000


def _check_config(fn: str, config: Any) -> GPTConfig:
    if not isinstance(config, GPTConfig):
        raise TypeError(f"{fn}: config must be a GPTConfig, got {type(config).__name__}")
    return config


def _tensor_kinds(config: GPTConfig) -> List[Tuple[str, Tuple[int, ...], str]]:
    """Every tensor of ``config`` in canonical order, as ``(name, shape, kind)``.

    ``kind`` groups the tensors that are initialised alike: ``wte``, ``wpe``, ``c_attn``,
    ``attn_proj``, ``c_fc``, ``mlp_proj``, ``lm_head``, ``bias``, ``ln_weight``, ``ln_bias``.
    """
    d, f, V = config.d_model, config.d_ff, config.vocab_size
    out: List[Tuple[str, Tuple[int, ...], str]] = [("wte.weight", (V, d), "wte")]
    if config.pos == "learned":
        out.append(("wpe.weight", (config.n_ctx, d), "wpe"))
    for i in range(config.n_layers):
        p = f"h.{i}."
        if config.ln_affine:
            out += [(p + "ln_1.weight", (d,), "ln_weight"), (p + "ln_1.bias", (d,), "ln_bias")]
        out.append((p + "attn.c_attn.weight", (d, 3 * d), "c_attn"))
        if config.attn_bias:
            out.append((p + "attn.c_attn.bias", (3 * d,), "bias"))
        out.append((p + "attn.c_proj.weight", (d, d), "attn_proj"))
        if config.attn_bias:
            out.append((p + "attn.c_proj.bias", (d,), "bias"))
        if config.ln_affine:
            out += [(p + "ln_2.weight", (d,), "ln_weight"), (p + "ln_2.bias", (d,), "ln_bias")]
        out.append((p + "mlp.c_fc.weight", (d, f), "c_fc"))
        if config.bias:
            out.append((p + "mlp.c_fc.bias", (f,), "bias"))
        out.append((p + "mlp.c_proj.weight", (f, d), "mlp_proj"))
        if config.bias:
            out.append((p + "mlp.c_proj.bias", (d,), "bias"))
    if config.ln_affine:
        out += [("ln_f.weight", (d,), "ln_weight"), ("ln_f.bias", (d,), "ln_bias")]
    if not config.tied:
        out.append(("lm_head.weight", (V, d), "lm_head"))
    return out


def expected_shapes(config: GPTConfig) -> Dict[str, Tuple[int, ...]]:
    """The name and shape of every tensor a model with ``config`` needs, in canonical order
    (embeddings, blocks in order, final LayerNorm, head).

    >>> from gptcore.config import GPTConfig
    >>> shapes = expected_shapes(GPTConfig.preset("gpt2"))
    >>> len(shapes), shapes["h.0.attn.c_attn.weight"]
    (148, (768, 2304))
    """
    _check_config("expected_shapes", config)
    return {name: shape for name, shape, _ in _tensor_kinds(config)}


def _same_array(a: np.ndarray, b: np.ndarray) -> bool:
    if a is b:
        return True
    if a.shape != b.shape:
        return False
    try:
        return bool(np.array_equal(a, b, equal_nan=True))
    except TypeError:  # equal_nan on a non-float dtype
        return bool(np.array_equal(a, b))


def _normalize(weights: Any, fn: str, drop_tied_head: bool) -> Weights:
    if not isinstance(weights, Mapping):
        raise TypeError(f"{fn}: weights must be a mapping of name -> numpy array, got {type(weights).__name__}")
    out: Weights = {}
    origin: Dict[str, str] = {}
    for key, value in weights.items():
        if not isinstance(key, str):
            raise TypeError(f"{fn}: weight names must be str, got {key!r} ({type(key).__name__})")
        if not isinstance(value, np.ndarray):
            raise TypeError(
                f"{fn}: weight {key!r} must be a numpy.ndarray, got {type(value).__name__} "
                "(convert it with numpy.asarray)"
            )
        name = key[len(_PREFIX):] if key.startswith(_PREFIX) else key
        if _MASKED_BIAS.match(name):
            continue
        if _MASK_BUFFER.match(name) and value.ndim == 4 and value.shape[:2] == (1, 1) \
                and value.shape[2] == value.shape[3]:
            continue
        if name in out:
            raise ValueError(f"{fn}: weights {origin[name]!r} and {key!r} both name the tensor {name!r}")
        out[name] = value
        origin[name] = key
    if drop_tied_head and "lm_head.weight" in out and "wte.weight" in out \
            and _same_array(out["lm_head.weight"], out["wte.weight"]):
        del out["lm_head.weight"]
    return out


def normalize_names(weights: Mapping[str, np.ndarray]) -> Weights:
    """A new dict with the schema's names: the ``"transformer."`` prefix stripped, the causal-mask
    buffers (``h.{i}.attn.bias`` of shape ``(1, 1, n, n)``, ``h.{i}.attn.masked_bias``)
    dropped, and ``lm_head.weight`` dropped when it equals ``wte.weight``. The arrays are not
    copied; the input is not modified.

    Raises ``TypeError`` if ``weights`` is not a mapping or a value is not a numpy array
    (the message names the key), ``ValueError`` if two keys name the same tensor.
    """
    return _normalize(weights, "normalize_names", drop_tied_head=True)


def _block_index(name: str) -> Optional[int]:
    """The block number of ``h.{i}.…`` (``-1`` for a number too long to convert), else None."""
    m = _BLOCK_NAME.match(name)
    if not m:
        return None
    digits = m.group(1)
    return -1 if len(digits) > _MAX_INDEX_DIGITS else int(digits)
