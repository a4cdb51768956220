"""Names and shapes of the weight tensors (the table is in ``gptcore.weights``).

``_tensor_kinds(config)`` is the one place that lists the tensors of a configuration, as
``(name, shape, kind)``; ``expected_shapes``, ``validate`` and ``init_weights`` are built
on it. Callers go through it (or ``expected_shapes``); the table itself comes from the
Rust core (``_native.tensor_schema``), where loading and exporting read it too.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from .. import _native
from ..config import GPTConfig

__all__ = ["expected_shapes", "normalize_names"]

Weights = Dict[str, np.ndarray]

_PREFIX = "transformer."
_MASK_BUFFER = re.compile(r"^h\.([0-9]+)\.attn\.bias$")
_MASKED_BIAS = re.compile(r"^h\.([0-9]+)\.attn\.masked_bias$")
# Llama checkpoints written by older transformers keep the rotary frequencies as a buffer;
# gptcore computes them from the configuration.
_INV_FREQ = re.compile(r"^model\.layers\.([0-9]+)\.self_attn\.rotary_emb\.inv_freq$")
_BLOCK_NAME = re.compile(r"^(?:h|model\.layers)\.([0-9]+)\.(.+)$")
#: The token embedding's name in each family (a tied head equal to it is dropped).
TOKEN_EMBEDDINGS = ("wte.weight", "model.embed_tokens.weight")
# Longer block numbers are not converted (Python refuses int() of over 4300 digits); such a
# name is far beyond any model and is reported as unexpected.
_MAX_INDEX_DIGITS = 1000


def _check_config(fn: str, config: Any) -> GPTConfig:
    if not isinstance(config, GPTConfig):
        raise TypeError(f"{fn}: config must be a GPTConfig, got {type(config).__name__}")
    return config


def _tensor_kinds(config: GPTConfig) -> List[Tuple[str, Tuple[int, ...], str]]:
    """Every tensor of ``config`` in canonical order, as ``(name, shape, kind)``: the Rust
    core's schema (``rust/core/src/decoder/schema.rs``), the one definition that loading,
    exporting, validation, initialisation and these docs all use."""
    return [(name, tuple(shape), kind) for name, shape, kind in _native.tensor_schema(config)]


def expected_shapes(config: GPTConfig) -> Dict[str, Tuple[int, ...]]:
    """The name and shape of every tensor a model with ``config`` needs, in canonical order
    (embeddings, blocks in order, final LayerNorm, head).

    Examples:
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
        if _MASKED_BIAS.match(name) or _INV_FREQ.match(name):
            continue
        if _MASK_BUFFER.match(name) and value.ndim == 4 and value.shape[:2] == (1, 1) \
                and value.shape[2] == value.shape[3]:
            continue
        if name in out:
            raise ValueError(f"{fn}: weights {origin[name]!r} and {key!r} both name the tensor {name!r}")
        out[name] = value
        origin[name] = key
    if drop_tied_head and "lm_head.weight" in out and any(
            e in out and _same_array(out["lm_head.weight"], out[e]) for e in TOKEN_EMBEDDINGS):
        del out["lm_head.weight"]
    return out


def normalize_names(weights: Mapping[str, np.ndarray]) -> Weights:
    """A new dict with the schema's names: the ``"transformer."`` prefix stripped, the causal-mask
    buffers (``h.{i}.attn.bias`` of shape ``(1, 1, n, n)``, ``h.{i}.attn.masked_bias``) and
    Llama's rotary frequency buffers (``model.layers.{i}.self_attn.rotary_emb.inv_freq``)
    dropped, and ``lm_head.weight`` dropped when it equals the token embedding
    (``wte.weight``, ``model.embed_tokens.weight``). The arrays are not copied; the input is
    not modified.

    Raises ``TypeError`` if ``weights`` is not a mapping or a value is not a numpy array
    (the message names the key), ``ValueError`` if two keys name the same tensor.
    """
    return _normalize(weights, "normalize_names", drop_tied_head=True)


def _block_index(name: str) -> Optional[int]:
    """The block number of ``h.{i}.…`` or ``model.layers.{i}.…`` (``-1`` for a number too
    long to convert), else None."""
    m = _BLOCK_NAME.match(name)
    if not m:
        return None
    digits = m.group(1)
    return -1 if len(digits) > _MAX_INDEX_DIGITS else int(digits)
