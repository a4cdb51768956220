"""The reference quantizers of ggml's Q8_0 and Q4_0 blocks, and their dequantization (numpy).

Both formats cut a row (the last axis; for a weight matrix the reduction dimension K) into
blocks of 32 consecutive values; a block holds one float16 scale ``d``:

* ``q8_0``: ``d = max|x| / 127`` and ``q = round(x / d)`` (ties away from zero), 32 signed
  bytes; a value is ``d * q``.
* ``q4_0``: ``d = m / -8`` where ``m`` is the value of largest magnitude, its sign kept (the
  first one when several tie), and ``q = min(15, trunc(x / d + 8.5))``, 4 bits; a value is
  ``d * (q - 8)``.

``quantize`` follows ggml's reference code (``quantize_row_q8_0_ref`` and
``quantize_row_q4_0_ref`` in ``ggml-quants.c``) operation for operation in float32: the
scale ``d`` and its inverse ``1 / d`` are computed in float32 and the values are multiplied
by the inverse (not divided by ``d``), then ``d`` is rounded to float16 (to nearest, ties to
even). The same float32 weights therefore give the same blocks, byte for byte, as llama.cpp
and the ``gguf`` package (the tests compare with ``gguf.quants.quantize``). Where ggml's
reference leaves the result to the machine, this module defines it:

* a block whose scale is so small that ``1 / d`` overflows float32 (every value below about
  ``3.7e-37``) multiplies by infinity; C on x86-64 then stores 0 for each value (the
  conversion of an infinite or NaN float to an integer gives ``0x80000000``, whose low byte
  is 0), and so does this module, on every machine. The block dequantizes to zeros either way
  (``d`` rounds to 0 in float16).
* an all-zero q4_0 block has ``m = +0.0`` (ggml starts its search at ``+0.0`` and keeps it
  unless a larger magnitude comes), so ``d = -0.0``: the ``gguf`` package takes the block's
  first value instead, which differs only when that value is ``-0.0``.

Refused with a ``ValueError``: NaN or infinite inputs (ggml's result for them depends on where
they are in the block and on the machine) and blocks whose scale overflows float16 (``max|x|
>= 127 * 65520`` for q8_0, ``|m| >= 8 * 65520`` for q4_0: ggml would store an infinite scale
and the block would dequantize to infinities and NaNs). Inputs are converted to float32 first
(float64 rounds to nearest even).

``dequantized(x, fmt)`` is ``dequantize(quantize(x, fmt), fmt)`` for any length of the last
axis: where it is not a multiple of 32 (what a GGUF file cannot hold, and a model in memory
can), the last block is short: quantized as if padded with zeros (zeros never change the
scale, which therefore comes from the values the block holds), the padding dropped again.

``dequantize`` is exact: ``d`` widens exactly from float16 and ``d * q`` (an 11-bit
significand times at most 8 bits) is exact in float32, so "the dequantized model" is the same
on every machine. ``gptcore.round_weights(w, "q8_0")`` is ``dequantize(quantize(w))``, and for a
model's weights applies ``gptcore.gguf.policy`` (which tensors are quantized, along which axis).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .format import BLOCK_DTYPES, Q4_0_BLOCK, Q8_0_BLOCK

__all__ = ["QK", "QUANT_FORMATS", "quantize", "dequantize", "dequantized", "quant_format"]

#: Values per block (QK8_0 = QK4_0 = 32).
QK = 32
#: The block formats, by their ``weight_dtype`` names.
QUANT_FORMATS = ("q8_0", "q4_0")

_F16_MAX_FINITE_LIMIT = 65520.0  # float16 rounds values >= this to infinity


def quant_format(what: str, fmt: Any) -> str:
    """``"Q8_0"`` or ``"Q4_0"`` (the GGUF type name) from ``"q8_0"`` / ``"Q8_0"`` / ``"q4_0"`` / ``"Q4_0"``."""
    if not isinstance(fmt, str):
        raise TypeError(f"{what} must be 'q8_0' or 'q4_0', got {type(fmt).__name__} {fmt!r}")
    if fmt.lower() not in QUANT_FORMATS:
        raise ValueError(f"{what} must be 'q8_0' or 'q4_0', got {fmt!r}")
    return fmt.upper()


def _blocks(fn: str, x: Any, name: str) -> np.ndarray:
    """``x`` as float32 rows of 32 values, checked."""
    a = np.asarray(x)
    if a.dtype.kind != "f" and a.dtype.name != "bfloat16":
        raise TypeError(f"{fn}: x must be a float array, got dtype {a.dtype}")
    a = np.asarray(a, dtype=np.float32)
    if a.ndim == 0:
        raise ValueError(f"{fn}: x must have at least one axis, got a scalar")
    k = a.shape[-1]
    if k % QK:
        raise ValueError(
            f"{fn}: the last axis of x (K = {k}) must be a multiple of {QK} for {name} blocks; GGUF keeps "
            "such a matrix in 16 or 32 bits")
    finite = np.isfinite(a)
    if not finite.all():
        where = tuple(int(i) for i in np.argwhere(~finite)[0])
        raise ValueError(f"{fn}: x holds a non-finite value ({a[where]} at index {where}); {name} blocks "
                         "hold finite values only")
    return a.reshape(-1, QK)


def _check_scale(fn: str, d: np.ndarray, name: str, what: str) -> np.ndarray:
    """``d`` rounded to float16; ``ValueError`` where it overflows."""
    with np.errstate(over="ignore"):
        d16 = d.astype(np.float16)
    bad = np.isinf(d16)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{fn}: block {i} is too large for {name}: its scale {what} = {float(d[i])!r} overflows "
                         f"float16 (largest {np.finfo(np.float16).max})")
    return d16


def _inverse(d: np.ndarray) -> np.ndarray:
    """``1 / d`` in float32, 0 where ``d`` is zero (ggml: ``d ? 1.0f/d : 0.0f``)."""
    inv = np.zeros_like(d)
    with np.errstate(over="ignore"):
        np.divide(np.float32(1), d, out=inv, where=d != 0)
    return inv


def _quantize_q8_0(b: np.ndarray, fn: str) -> np.ndarray:
    amax = np.max(np.abs(b), axis=1)
    d = amax / np.float32(127)
    d16 = _check_scale(fn, d, "q8_0", "max|x| / 127")
    with np.errstate(over="ignore", invalid="ignore"):
        v = b * _inverse(d)[:, None]
    # roundf: to nearest, ties away from zero. |v| <= 127 (to float32 rounding), so a - floor(a)
    # is exact and the comparison decides the tie exactly (adding 0.5 would round first).
    a = np.abs(v)
    f = np.floor(a)
    with np.errstate(invalid="ignore"):
        r = f + (a - f >= np.float32(0.5))
        q = np.where(np.isfinite(v), np.copysign(r, v), np.float32(0))
    out = np.empty(b.shape[0], dtype=Q8_0_BLOCK)
    out["d"] = d16
    out["qs"] = q.astype(np.int8)
    return out


def _quantize_q4_0(b: np.ndarray, fn: str) -> np.ndarray:
    mag = np.abs(b)
    first = np.argmax(mag, axis=1)  # the first value of largest magnitude (ggml's strict `<`)
    m = b[np.arange(b.shape[0]), first]
    m = np.where(mag[np.arange(b.shape[0]), first] == 0, np.float32(0), m)  # ggml starts at +0.0
    d = m / np.float32(-8)
    d16 = _check_scale(fn, d, "q4_0", "m / -8")
    with np.errstate(over="ignore", invalid="ignore"):
        v = b * _inverse(d)[:, None] + np.float32(8.5)
        t = np.where(np.isfinite(v), np.trunc(v), np.float32(0))
    q = np.minimum(t, np.float32(15)).astype(np.uint8)
    out = np.empty(b.shape[0], dtype=Q4_0_BLOCK)
    out["d"] = d16
    out["qs"] = q[:, :16] | (q[:, 16:] << np.uint8(4))
    return out


def quantize(x: Any, fmt: str) -> np.ndarray:
    """The blocks of ``x`` in ``fmt`` (``"q8_0"`` or ``"q4_0"``): a structured array of
    ``format.Q8_0_BLOCK`` / ``format.Q4_0_BLOCK`` of shape ``x.shape[:-1] + (K // 32,)``, ``K =
    x.shape[-1]`` a multiple of 32. ``blocks.tobytes()`` is the tensor's data in a GGUF file.

    Examples:
        >>> b = quantize(np.arange(32, dtype=np.float32), "q8_0")
        >>> float(b["d"][0]), b["qs"][0, :4].tolist(), b["qs"][0, -1].item()
        (0.244140625, [0, 4, 8, 12], 127)
    """
    name = quant_format("quantize: fmt", fmt)
    b = _blocks("quantize", x, name.lower())
    shape = np.shape(x)
    blocks = _quantize_q8_0(b, "quantize") if name == "Q8_0" else _quantize_q4_0(b, "quantize")
    return blocks.reshape(tuple(shape[:-1]) + (shape[-1] // QK,))


def dequantized(x: Any, fmt: str) -> np.ndarray:
    """The float32 values a block format stores for ``x``: ``dequantize(quantize(x, fmt),
    fmt)``, with a short last block where the last axis is not a multiple of 32 (see the module
    documentation).

    Examples:
        >>> dequantized(np.array([0.1, 0.25, -1.0], np.float32), "q4_0").tolist()
        [0.125, 0.25, -1.0]
    """
    a = np.asarray(x)
    if a.dtype.kind != "f" and a.dtype.name != "bfloat16":
        raise TypeError(f"dequantized: x must be a float array, got dtype {a.dtype}")
    if a.ndim == 0:
        raise ValueError("dequantized: x must have at least one axis, got a scalar")
    k = a.shape[-1]
    pad = -k % QK
    if pad:
        a = np.concatenate([np.asarray(a, np.float32), np.zeros(a.shape[:-1] + (pad,), np.float32)], axis=-1)
    return dequantize(quantize(a, fmt), fmt)[..., :k]


def dequantize(blocks: Any, fmt: str) -> np.ndarray:
    """The float32 values of Q8_0 / Q4_0 ``blocks`` (a structured array as ``quantize`` returns
    or ``GGUFReader.tensor`` hands out, or raw bytes: a ``uint8`` array whose last axis is a
    whole number of blocks), shape ``blocks.shape[:-1] + (32 * n_blocks,)``. Exact.

    Examples:
        >>> dequantize(quantize(np.linspace(-1, 1, 32, dtype=np.float32), "q4_0"), "q4_0")[:3]
        array([-1.   , -0.875, -0.875], dtype=float32)
    """
    name = quant_format("dequantize: fmt", fmt)
    dt = BLOCK_DTYPES[name]
    b = np.asarray(blocks)
    if b.dtype == np.uint8 and b.ndim >= 1:
        if b.shape[-1] % dt.itemsize:
            raise ValueError(f"dequantize: {b.shape[-1]} bytes per row is not a whole number of {name} blocks "
                             f"({dt.itemsize} bytes each)")
        b = np.ascontiguousarray(b).view(dt)
    elif b.dtype != dt:
        raise TypeError(f"dequantize: blocks must be {name} blocks (dtype {dt}) or uint8 bytes, got dtype {b.dtype}")
    if b.ndim == 0:
        raise ValueError("dequantize: blocks must have at least one axis")
    d = b["d"].astype(np.float32)[..., None]
    if name == "Q8_0":
        q = b["qs"].astype(np.float32)
    else:
        qs = b["qs"]
        q = np.concatenate([qs & np.uint8(0x0F), qs >> np.uint8(4)], axis=-1).astype(np.float32) - np.float32(8)
    with np.errstate(invalid="ignore", over="ignore"):  # a file's infinite or NaN scale: its values
        out = d * q
    return out.reshape(b.shape[:-1] + (b.shape[-1] * QK,))
