"""Weight storage formats: how a float32 model may store its weight matrices and embedding
tables, and the conversions between them.

A format is a name, the safetensors dtype that holds it in a checkpoint, and its bits per
value. ``float32`` is the format of the arithmetic; ``bfloat16`` and ``float16`` (the
``weight_dtype`` of ``gptcore.Model`` and ``gptcore.load``) store two bytes per weight and
are widened to float32, exactly, as the kernels load them. Whatever the format, the tensors of
the kinds in ``FLOAT32_KINDS`` (biases, LayerNorm weights and biases) stay float32.

ggml's block formats ``q8_0`` and ``q4_0`` (32 weights along K and one float16 scale a block;
see ``gptcore.gguf.quants``) are ``weight_dtype`` values too (``BLOCK_DTYPES``): the kernels
widen each block to its float32 weights ``d * q`` as they load it. They have no safetensors
dtype: such models are saved in GGUF files. Which tensors they store follows llama.cpp
(``gptcore.gguf.policy``): the weight matrices, the token embedding and the head, when their
reduction dimension K is a multiple of 32; the rest stays float32.

numpy has no bfloat16, so the public functions speak float32 (values exactly representable in
the format) or ``uint16`` (the raw bit patterns):

* ``round_weights`` rounds float32 values to the format (IEEE round to nearest, ties to
  even; NaN stays NaN, quiet; beyond the largest finite value, infinity as IEEE says) and
  returns them as float32. ``Model(round_weights(w), ...)`` is the float32 model a
  ``Model(w, weight_dtype=...)`` equals bit for bit.
* ``to_half_bits`` / ``from_half_bits`` convert between float32 values and the uint16
  bit patterns (widening is exact).

Checkpoints in these formats are read and written by ``gptcore.weights.checkpoint`` through
the one safetensors reader and writer, ``gptcore.weights.safetensors_file``, and in GGUF files
by ``gptcore.weights.gguf_checkpoint``.

"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np

from .. import _native
from ..gguf.policy import round_model_weights
from ..gguf.quants import QUANT_FORMATS, dequantized, quant_format
from .schema import normalize_names

__all__ = [
    "BLOCK_DTYPES",
    "FLOAT32_KINDS",
    "FORMATS",
    "HALF_DTYPES",
    "WEIGHT_DTYPES",
    "WeightFormat",
    "first_nonfinite",
    "from_half_bits",
    "keeps_float32",
    "round_weights",
    "to_half_bits",
    "weight_dtype_name",
]


@dataclass(frozen=True)
class WeightFormat:
    """A storage format: its ``name`` (as ``weight_dtype`` spells it), the ``safetensors``
    dtype that stores it in a checkpoint, and ``bits`` per stored value."""

    name: str
    safetensors: str
    bits: int


#: Every storage format, by name.
FORMATS: Dict[str, WeightFormat] = {
    f.name: f
    for f in (
        WeightFormat("float32", "F32", 32),
        WeightFormat("bfloat16", "BF16", 16),
        WeightFormat("float16", "F16", 16),
    )
}

#: The 16-bit formats (a value each, rounded to nearest even).
HALF_DTYPES = ("bfloat16", "float16")
#: The block formats (ggml's; 32 weights along K and a float16 scale a block).
BLOCK_DTYPES = QUANT_FORMATS
#: The formats a float32 model can store its weight matrices and embedding tables in
#: (``weight_dtype``); ``None`` there means float32 (the model's dtype).
WEIGHT_DTYPES = HALF_DTYPES + BLOCK_DTYPES

#: Tensor kinds (``gptcore.weights.schema``) kept in float32 whatever the format: they are a
#: small share of the bytes and go into sums, not matrix products.
FLOAT32_KINDS = frozenset({"bias", "ln_weight", "ln_bias"})

# The schema names of the FLOAT32_KINDS, for a mapping of weights without its configuration:
# GPT-2's LayerNorms and the Llama family's RMSNorms.
_FLOAT32_NAME_ENDINGS = (".bias", "ln_1.weight", "ln_2.weight", "ln_f.weight", "input_layernorm.weight",
                         "post_attention_layernorm.weight", "model.norm.weight")


def keeps_float32(kind: str) -> bool:
    """Whether tensors of this kind (``gptcore.weights.schema``'s) stay float32 in any format."""
    return kind in FLOAT32_KINDS


def _names(allowed: Tuple[str, ...]) -> str:
    quoted = [repr(a) for a in allowed]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


def weight_dtype_name(what: str, dtype: Any, allowed: Tuple[str, ...] = WEIGHT_DTYPES) -> str:
    """The name of a ``weight_dtype`` (one of ``allowed``: ``"bfloat16"``, ``"float16"``,
    ``"q8_0"``, ``"q4_0"``) from a name or a numpy / ml_dtypes dtype; ``TypeError`` or
    ``ValueError`` naming ``what`` otherwise."""
    if isinstance(dtype, str):
        name = dtype
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            raise TypeError(f"{what} must be {_names(allowed)}, got {dtype!r}") from None
    if name not in allowed:
        raise ValueError(f"{what} must be {_names(allowed)}, got {name!r}")
    return name


def _float32(what: str, x: Any) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind != "f" and a.dtype.name != "bfloat16":
        raise TypeError(f"{what}: x must be a float array, got dtype {a.dtype}")
    return np.asarray(a, dtype=np.float32, order="C")


def to_half_bits(x: Any, dtype: Any = "bfloat16") -> np.ndarray:
    """The ``uint16`` bit patterns of ``x`` (converted to float32 first) rounded to ``dtype``
    (``"bfloat16"`` or ``"float16"``; round to nearest even), same shape.

    Examples:
        >>> to_half_bits([1.0, -2.0, 1 + 2**-8], "bfloat16")
        array([16256, 49152, 16256], dtype=uint16)
    """
    return _native._to_half_bits(_float32("to_half_bits", x),
                                 weight_dtype_name("to_half_bits: dtype", dtype, HALF_DTYPES))


def from_half_bits(bits: Any, dtype: Any = "bfloat16") -> np.ndarray:
    """The float32 values of ``uint16`` bit patterns of ``dtype`` (exact), same shape.

    Examples:
        >>> from_half_bits(np.array([0x3F80, 0x7F80], dtype=np.uint16), "bfloat16")
        array([ 1., inf], dtype=float32)
    """
    b = np.asarray(bits)
    if b.dtype != np.uint16:
        raise TypeError(f"from_half_bits: bits must be a uint16 array, got dtype {b.dtype}")
    return _native._from_half_bits(np.asarray(b, order="C"),
                                   weight_dtype_name("from_half_bits: dtype", dtype, HALF_DTYPES))


def round_weights(x: Any, dtype: Any = "bfloat16") -> Any:
    """``x`` rounded to ``dtype`` and returned as float32: ``"bfloat16"`` or ``"float16"``, or
    ggml's block formats ``"q8_0"`` and ``"q4_0"`` (quantized with llama.cpp's reference rounding
    and dequantized; see ``gptcore.gguf.quants``).

    ``x`` is an array (converted to float32 first; for the block formats, blocks of 32 run along
    its last axis: where its length is not a multiple of 32 the last block is short, quantized
    as if padded with zeros, its scale from the values it holds) or a mapping of arrays: pass a
    model's weights to get the float32 model that a model stored in ``dtype`` equals. For the
    16-bit formats every array is rounded but the biases and LayerNorm parameters (kept in
    float32). For the block formats the rule is llama.cpp's (``gptcore.gguf.policy``): the
    weight matrices, the token embedding and the head are quantized along their reduction
    dimension K (a matrix whose K is not a multiple of 32 stays float32, as a GGUF file keeps
    it), the rest is left as it is.

    Examples:
        >>> round_weights(np.array([1 + 2**-12, 1 + 2**-10, 65519.0, 65520.0], np.float32), "float16").tolist()
        [1.0, 1.0009765625, 65504.0, inf]
        >>> round_weights(np.array([0.1] * 31 + [1.0], np.float32), "q8_0")[[0, -1]].tolist()
        [0.10235595703125, 0.99993896484375]
    """
    if isinstance(dtype, str) and dtype.lower() in QUANT_FORMATS:
        fmt = quant_format("round_weights: dtype", dtype)
        if isinstance(x, Mapping):
            return round_model_weights(normalize_names(x), fmt)
        return dequantized(x, fmt)
    name = weight_dtype_name("round_weights: dtype", dtype, HALF_DTYPES + BLOCK_DTYPES)
    if isinstance(x, Mapping):
        out = {}
        for k, v in normalize_names(x).items():
            out[k] = np.asarray(v, dtype=np.float32) if k.endswith(_FLOAT32_NAME_ENDINGS) else round_weights(v, name)
        return out
    return from_half_bits(to_half_bits(x, name), name)


def widen(raw: np.ndarray, stored: str) -> np.ndarray:
    """The float32 values of a tensor as a checkpoint stores it: ``raw`` is what
    ``safetensors_file.read_tensor`` returns for the safetensors dtype ``stored`` (uint16
    patterns for ``"BF16"``)."""
    if stored == "BF16":
        return from_half_bits(raw, "bfloat16")
    if stored == "F16":
        return from_half_bits(raw.view(np.uint16), "float16")
    return np.ascontiguousarray(raw, dtype=np.float32)


def stored_bits(raw: np.ndarray, stored: str, weight_dtype: str) -> np.ndarray:
    """A tensor as the ``uint16`` patterns of ``weight_dtype``: the stored patterns when the
    checkpoint holds that format, else its float32 value rounded to nearest even."""
    if stored == FORMATS[weight_dtype].safetensors:  # weight_dtype: a 16-bit format
        return raw.view(np.uint16)
    return to_half_bits(widen(raw, stored), weight_dtype)


# Values checked at a time when a tensor's sum says it holds a NaN or an infinity (or its sum
# overflowed): bounds the temporary arrays of the search.
_SEARCH_CHUNK = 1 << 20


def first_nonfinite(raw: np.ndarray, stored: str) -> Optional[Tuple[int, ...]]:
    """The index of the first NaN or infinity of a tensor as a checkpoint stores it (``raw``
    as ``safetensors_file.read_tensor`` returns it for the safetensors dtype ``stored``:
    ``uint16`` patterns for ``"BF16"``), or None when every value is finite (integer tensors
    always are).

    One pass, no copy of the tensor: its sum is finite exactly when no value is NaN or
    infinite, unless the sum of finite values overflows; only then (or when a value is not
    finite) is it searched, a chunk at a time, for the first bad index.
    """
    flat = raw.reshape(-1)
    if flat.size == 0:
        return None
    if stored == "BF16":
        def values(lo: int, hi: int) -> np.ndarray:
            return (flat[lo:hi].astype(np.uint32) << 16).view(np.float32)
    elif stored == "F16":
        def values(lo: int, hi: int) -> np.ndarray:
            return flat[lo:hi].view(np.float16)
    elif flat.dtype.kind == "f":
        def values(lo: int, hi: int) -> np.ndarray:
            return flat[lo:hi]
    else:
        return None
    with np.errstate(all="ignore"):
        if stored == "BF16":
            total = sum(float(values(lo, lo + _SEARCH_CHUNK).sum())
                        for lo in range(0, flat.size, _SEARCH_CHUNK))
        else:
            total = float(np.add.reduce(values(0, flat.size), dtype=np.float32 if stored == "F16" else None))
    if np.isfinite(total):
        return None
    for lo in range(0, flat.size, _SEARCH_CHUNK):
        bad = np.flatnonzero(~np.isfinite(values(lo, lo + _SEARCH_CHUNK)))
        if bad.size:
            return tuple(int(i) for i in np.unravel_index(lo + int(bad[0]), raw.shape))
    return None  # finite values whose sum overflowed
