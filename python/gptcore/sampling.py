"""Choosing the next token from logits: greedy, temperature, top-k and top-p (nucleus)."""

from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

__all__ = ["check_sampling_args", "filter_logits", "choose"]


def check_sampling_args(temperature, top_k, top_p, greedy, vocab_size: int):
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float, np.floating, np.integer)):
        raise TypeError(f"generate: temperature must be a number, got {temperature!r}")
    temperature = float(temperature)
    if not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"generate: temperature must be a finite number >= 0, got {temperature}")
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)):
            raise TypeError(f"generate: top_k must be an int or None, got {top_k!r}")
        if top_k < 1:
            raise ValueError(f"generate: top_k must be >= 1, got {top_k}")
        top_k = min(int(top_k), vocab_size)
    if top_p is not None:
        if isinstance(top_p, bool) or not isinstance(top_p, (int, float, np.floating)):
            raise TypeError(f"generate: top_p must be a number in (0, 1] or None, got {top_p!r}")
        top_p = float(top_p)
        if not (0.0 < top_p <= 1.0):
            raise ValueError(f"generate: top_p must be in (0, 1], got {top_p}")
    if not isinstance(greedy, bool):
        raise TypeError(f"generate: greedy must be a bool, got {greedy!r}")
    return temperature, top_k, top_p, greedy or temperature == 0.0


def _log_softmax(z: np.ndarray) -> np.ndarray:
    m = z.max(axis=-1, keepdims=True)
    return z - (m + np.log(np.exp(z - m).sum(axis=-1, keepdims=True)))


def filter_logits(z: np.ndarray, top_k: Optional[int], top_p: Optional[float]) -> np.ndarray:
    """Set to -inf every logit outside the top-k and the top-p nucleus (rows of ``z``, float64).
    The most likely token always survives."""
    z = np.array(z, dtype=np.float64, copy=True)
    if top_k is not None and top_k < z.shape[-1]:
        kth = np.partition(z, -top_k, axis=-1)[:, -top_k][:, None]
        z[z < kth] = -np.inf
    if top_p is not None and top_p < 1.0:
        order = np.argsort(-z, axis=-1, kind="stable")
        zs = np.take_along_axis(z, order, axis=-1)
        p = np.exp(_log_softmax(zs))
        before = np.cumsum(p, axis=-1) - p  # mass strictly before each token in sorted order
        drop_sorted = before >= top_p
        drop_sorted[:, 0] = False
        drop = np.zeros_like(drop_sorted)
        np.put_along_axis(drop, order, drop_sorted, axis=-1)
        z[drop] = -np.inf
    return z


def choose(logits: np.ndarray, temperature: float, top_k, top_p, greedy: bool, rng) -> Tuple[np.ndarray, np.ndarray]:
    """One token per row of ``logits`` (B, V) and its log-probability under the model."""
    z = np.asarray(logits, dtype=np.float64)
    logp = _log_softmax(z)
    if greedy:
        tok = np.argmax(z, axis=-1)
    else:
        # Shift by the row max first: a tiny temperature then gives -inf, never NaN.
        f = filter_logits((z - z.max(axis=-1, keepdims=True)) / temperature, top_k, top_p)
        p = np.exp(_log_softmax(f))
        u = rng.random(z.shape[0])
        cdf = np.cumsum(p, axis=-1)
        tok = np.minimum((cdf < (u * cdf[:, -1])[:, None]).sum(axis=-1), z.shape[-1] - 1)
        # Never land on a filtered token through rounding at the end of the cdf.
        bad = p[np.arange(z.shape[0]), tok] == 0
        if bad.any():
            tok[bad] = np.argmax(p[bad], axis=-1)
    tok = tok.astype(np.int64)
    return tok, logp[np.arange(z.shape[0]), tok]
