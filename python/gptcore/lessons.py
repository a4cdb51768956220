"""The lessons' models and numbers, reproduced exactly.

Lessons 13 and 14 ran in rustlab (f64 arithmetic, 1-based token ids). This module rebuilds
their weights from the same random stream (``RustlabRng``) and recomputes their forward
passes with the same order of operations (``textbook_forward``), so every printed value can
be checked: bit for bit for Lesson 13's block, to 1e-12 relative for Lesson 14 (the lesson was
printed on a machine whose libm ``tanh`` differs from glibc's in the last ulp).

The arithmetic of the textbook path, exactly as the lessons do it:

* matrix products: one accumulator per output element, starting at 0 and running over
  k = 0, 1, ..., K-1 with fused multiply-add (``gptcore.matmul_reference``, or the pure
  Python ``fma_matmul``);
* every other sum (LayerNorm mean and variance, softmax denominators, norms): plain
  left-to-right;
* ``exp``, ``tanh``, ``sin``, ``cos``, ``pow``: the C library's (Python's ``math``), one
  element at a time.

Lesson 14's counting convention for parameters, ``lesson14_counting``, is defined in
``gptcore.accounting`` and is importable from here too.

Examples:
    >>> ids = to_zero_based(LESSON14_IDS_1BASED)
    >>> ids.tolist()
    [6, 12, 6, 20, 12, 4, 8, 6]
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Callable, Dict, Mapping, Optional

import numpy as np

from ._native import RustlabRng
from .accounting import lesson14_counting
from .config import GPTConfig
from .linalg import matmul_reference

__all__ = [
    "RustlabRng",
    "LESSON14_IDS_1BASED",
    "to_zero_based",
    "lesson14_config",
    "lesson14_draws",
    "lesson14_weights",
    "lesson14_counting",
    "lesson13_block",
    "fma_matmul",
    "frobenius_norm",
    "textbook_layernorm",
    "textbook_softmax",
    "textbook_gelu",
    "sinusoidal_pe",
    "textbook_block",
    "textbook_forward",
]

#: Lesson 14's input sequence, as the lesson writes it (1-based vocabulary indices).
LESSON14_IDS_1BASED = [7, 13, 7, 21, 13, 5, 9, 7]


def to_zero_based(ids: Any) -> np.ndarray:
    """Convert the lessons' 1-based token ids to gptcore's 0-based ids (a new int64 array).

    Examples:
        >>> to_zero_based([1, 50]).tolist()
        [0, 49]
    """
    arr = np.asarray(ids)
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
        raise TypeError(f"to_zero_based: ids must be integers, got dtype {arr.dtype}")
    if arr.size and arr.min() < 1:
        raise ValueError(f"to_zero_based: 1-based ids must be >= 1, got {arr.min()}")
    return arr.astype(np.int64) - 1


# --------------------------------------------------------------------------------------------
# The lessons' weights


def lesson14_config() -> GPTConfig:
    """Lesson 14's toy model: V = 50, T = 8, d = 64, 4 heads, d_ff = 256, 4 blocks, sinusoidal
    positions, untied head, no biases, no LayerNorm affine."""
    return GPTConfig.preset("lesson14")


def lesson14_draws(seed: int = 14) -> Dict[str, Any]:
    """Lesson 14's matrices under the lesson's names, drawn in the lesson's order.

    ``E_tok`` (50, 64); ``W_Q``, ``W_K``, ``W_V``, ``W_O``, ``W_ff1``, ``W_ff2``: lists of four
    (one per block); ``W_U`` (64, 50). The scaling is the lesson's own arithmetic:
    ``randn * 0.1``, ``randn * (1.0 / sqrt(64))``, ``randn * sqrt(2.0 / 64)``,
    ``randn * sqrt(2.0 / 256)``.
    """
    vocab, d_model, d_ff, n_blocks = 50, 64, 256, 4
    rng = RustlabRng(seed)
    out: Dict[str, Any] = {"E_tok": rng.randn(vocab, d_model) * 0.1}
    for name in ("W_Q", "W_K", "W_V", "W_O", "W_ff1", "W_ff2"):
        out[name] = []
    for _ in range(n_blocks):
        out["W_Q"].append(rng.randn(d_model, d_model) * (1.0 / math.sqrt(d_model)))
        out["W_K"].append(rng.randn(d_model, d_model) * (1.0 / math.sqrt(d_model)))
        out["W_V"].append(rng.randn(d_model, d_model) * (1.0 / math.sqrt(d_model)))
        out["W_O"].append(rng.randn(d_model, d_model) * (1.0 / math.sqrt(d_model)))
        out["W_ff1"].append(rng.randn(d_model, d_ff) * math.sqrt(2.0 / d_model))
        out["W_ff2"].append(rng.randn(d_ff, d_model) * math.sqrt(2.0 / d_ff))
    out["W_U"] = rng.randn(d_model, vocab) * (1.0 / math.sqrt(d_model))
    return out


def lesson14_weights(seed: int = 14) -> Dict[str, np.ndarray]:
    """Lesson 14's model as a gptcore weight mapping (float64, Hugging Face names).

    ``wte.weight`` = ``E_tok`` (already scaled by 0.1); per block ``attn.c_attn.weight`` =
    ``[W_Q | W_K | W_V]``, ``attn.c_proj.weight`` = ``W_O``, ``mlp.c_fc.weight`` = ``W_ff1``,
    ``mlp.c_proj.weight`` = ``W_ff2``; ``lm_head.weight`` = ``W_U.T`` (V, d). No biases, no
    LayerNorm parameters, no ``wpe`` (the positions are sinusoidal); use it with
    ``lesson14_config``.

    Examples:
        >>> w = lesson14_weights()
        >>> w["h.0.attn.c_attn.weight"].shape, w["lm_head.weight"].shape
        ((64, 192), (50, 64))
    """
    draws = lesson14_draws(seed)
    w: Dict[str, np.ndarray] = {"wte.weight": draws["E_tok"]}
    for i in range(len(draws["W_Q"])):
        w[f"h.{i}.attn.c_attn.weight"] = np.ascontiguousarray(
            np.concatenate([draws["W_Q"][i], draws["W_K"][i], draws["W_V"][i]], axis=1)
        )
        w[f"h.{i}.attn.c_proj.weight"] = draws["W_O"][i]
        w[f"h.{i}.mlp.c_fc.weight"] = draws["W_ff1"][i]
        w[f"h.{i}.mlp.c_proj.weight"] = draws["W_ff2"][i]
    w["lm_head.weight"] = np.ascontiguousarray(draws["W_U"].T)
    return w


def _lesson13_weights(rng: RustlabRng, d: int = 8, d_ff: int = 32) -> Dict[str, np.ndarray]:
    # As in Lesson 14's code, "/ sqrt(d)" is written "* (1.0 / sqrt(d))": for d = 8 the two
    # differ in the last bit, and only the multiplication reproduces Lesson 13's printout.
    return {
        "W_Q": rng.randn(d, d) * (1.0 / math.sqrt(d)),
        "W_K": rng.randn(d, d) * (1.0 / math.sqrt(d)),
        "W_V": rng.randn(d, d) * (1.0 / math.sqrt(d)),
        "W_O": rng.randn(d, d) * (1.0 / math.sqrt(d)),
        "W_ff1": rng.randn(d, d_ff) * math.sqrt(2.0 / d),
        "W_ff2": rng.randn(d_ff, d) * math.sqrt(2.0 / d_ff),
    }


def lesson13_block() -> Dict[str, Any]:
    """Lesson 13's single block: T = 4, d = 8, 2 heads, d_ff = 32.

    ``H_in`` = ``randn(4, 8)`` after ``seed(13)``, then ``block1`` (``W_Q``, ``W_K``, ``W_V``,
    ``W_O`` as ``randn(8, 8) * (1.0 / sqrt(8))``, ``W_ff1`` = ``randn(8, 32) * sqrt(2/8)``, ``W_ff2`` =
    ``randn(32, 8) * sqrt(2/32)``) from the same stream, and ``block2`` drawn the same way after
    ``seed(14)``. ``n_heads`` is 2.
    """
    rng = RustlabRng(13)
    h_in = rng.randn(4, 8)
    block1 = _lesson13_weights(rng)
    block2 = _lesson13_weights(RustlabRng(14))
    return {"H_in": h_in, "block1": block1, "block2": block2, "n_heads": 2}


# --------------------------------------------------------------------------------------------
# The lessons' arithmetic


def _fma(a: float, b: float, c: float) -> float:
    """a * b + c rounded once (exact rational arithmetic, then one correctly rounded division)."""
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(c)):
        return a * b + c
    r = Fraction(a) * Fraction(b) + Fraction(c)
    if r == 0:
        # An exact zero: IEEE gives -0 only for (-0) + (-0), i.e. a zero product and c = 0.
        return a * b + c if c == 0 else 0.0
    return float(r)


def fma_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` in pure Python: each element ``acc = fma(a[i, k], b[k, j], acc)`` for
    k = 0..K-1 from ``acc = 0``. Slow (exact rationals); an independent check of
    ``gptcore.matmul_reference`` on small matrices."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"fma_matmul: shapes {a.shape} and {b.shape} are not aligned 2-D matrices")
    m, k = a.shape
    n = b.shape[1]
    al, bl = a.tolist(), b.tolist()
    out = np.empty((m, n), dtype=np.float64)
    for i in range(m):
        row = al[i]
        for j in range(n):
            acc = 0.0
            for kk in range(k):
                acc = _fma(row[kk], bl[kk][j], acc)
            out[i, j] = acc
    return out


def _mm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return matmul_reference(np.ascontiguousarray(a, dtype=np.float64), np.ascontiguousarray(b, dtype=np.float64))


def frobenius_norm(x: np.ndarray) -> float:
    """rustlab's ``norm`` of a vector or matrix: the square root of a left-to-right sum of
    squares, row by row."""
    s = 0.0
    for v in np.asarray(x, dtype=np.float64).ravel(order="C").tolist():
        s += v * v
    return math.sqrt(s)


def textbook_layernorm(x: np.ndarray, eps: float = 1e-5, gamma=None, beta=None) -> np.ndarray:
    """Per row: ``mean = sum / n``, ``var = sum((x - mean)^2) / n``,
    ``(x - mean) / sqrt(var + eps)``, sums left to right; then ``* gamma + beta`` if given."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    n = x.shape[-1]
    g = None if gamma is None else np.asarray(gamma, dtype=np.float64).tolist()
    bt = None if beta is None else np.asarray(beta, dtype=np.float64).tolist()
    flat_in = x.reshape(-1, n)
    flat_out = out.reshape(-1, n)
    for r, row in enumerate(flat_in.tolist()):
        s = 0.0
        for v in row:
            s += v
        mean = s / n
        q = 0.0
        for v in row:
            dv = v - mean
            q += dv * dv
        var = q / n
        den = math.sqrt(var + eps)
        res = [(v - mean) / den for v in row]
        if g is not None:
            res = [res[i] * g[i] for i in range(n)]
        if bt is not None:
            res = [res[i] + bt[i] for i in range(n)]
        flat_out[r] = res
    return out


def textbook_softmax(x: np.ndarray) -> np.ndarray:
    """Per row (last axis): subtract the row maximum, ``exp``, left-to-right sum, divide."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    n = x.shape[-1]
    flat_out = out.reshape(-1, n)
    for r, row in enumerate(x.reshape(-1, n).tolist()):
        m = max(row)
        e = [math.exp(v - m) for v in row]
        s = 0.0
        for v in e:
            s += v
        flat_out[r] = [v / s for v in e]
    return out


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def textbook_gelu(x: np.ndarray) -> np.ndarray:
    """``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x * (x * x))))``, elementwise."""
    x = np.asarray(x, dtype=np.float64)
    c = _SQRT_2_OVER_PI
    vals = [0.5 * v * (1.0 + math.tanh(c * (v + 0.044715 * v * (v * v)))) for v in x.ravel().tolist()]
    return np.array(vals, dtype=np.float64).reshape(x.shape)


def sinusoidal_pe(T: int, d: int) -> np.ndarray:
    """The lessons' sinusoidal table (T, d) with 1-based positions t and columns i:
    ``div = 10000 ** (2 * floor((i - 1) / 2) / d)``, ``sin(t / div)`` for odd i,
    ``cos(t / div)`` for even i."""
    pe = np.empty((T, d), dtype=np.float64)
    for t in range(1, T + 1):
        for i in range(1, d + 1):
            div = math.pow(10000.0, (2 * ((i - 1) // 2)) / d)
            pe[t - 1, i - 1] = math.sin(t / div) if i % 2 == 1 else math.cos(t / div)
    return pe


def _attention(x: np.ndarray, wq, wk, wv, n_heads: int, causal: bool, mm, bq=None, bk=None, bv=None) -> np.ndarray:
    T, d = x.shape
    q, k, v = mm(x, wq), mm(x, wk), mm(x, wv)
    if bq is not None:
        q, k, v = q + bq, k + bk, v + bv
    d_k = d // n_heads
    scale = 1.0 / math.sqrt(d_k)
    mask = np.zeros((T, T))
    if causal:
        mask[np.triu_indices(T, 1)] = -1.0e9
    heads = []
    for h in range(n_heads):
        cols = slice(h * d_k, (h + 1) * d_k)
        scores = mm(q[:, cols], k[:, cols].T) * scale + mask
        heads.append(mm(textbook_softmax(scores), v[:, cols]))
    return np.concatenate(heads, axis=1)


def textbook_block(
    H: np.ndarray,
    W_Q: np.ndarray,
    W_K: np.ndarray,
    W_V: np.ndarray,
    W_O: np.ndarray,
    W_ff1: np.ndarray,
    W_ff2: np.ndarray,
    n_heads: int,
    *,
    causal: bool = True,
    return_mid: bool = False,
    matmul: Optional[Callable[[np.ndarray, np.ndarray], np.ndarray]] = None,
):
    """The lessons' pre-LN block (no biases, no LayerNorm affine):
    ``H_mid = H + MHA(LN(H)) W_O``, ``H_out = H_mid + GELU(LN(H_mid) W_ff1) W_ff2``.

    Heads are consecutive column slices of ``Q``, ``K``, ``V``; scores are scaled by
    ``1 / sqrt(d_k)``, then the causal mask (-1e9 above the diagonal) is added. Returns
    ``H_out``, or ``(H_mid, H_out)`` with ``return_mid=True``. ``matmul`` replaces the
    products (default ``gptcore.matmul_reference``; ``fma_matmul`` is the pure Python
    equivalent).
    """
    H = np.asarray(H, dtype=np.float64)
    if H.ndim != 2:
        raise ValueError(f"textbook_block: H must be 2-D (T, d), got shape {H.shape}")
    d = H.shape[1]
    if isinstance(n_heads, bool) or not isinstance(n_heads, int) or n_heads < 1 or d % n_heads:
        raise ValueError(f"textbook_block: n_heads must be a positive divisor of d = {d}, got {n_heads!r}")
    mm = _mm if matmul is None else matmul
    attn = _attention(textbook_layernorm(H), W_Q, W_K, W_V, n_heads, causal, mm)
    h_mid = H + mm(attn, W_O)
    h_out = h_mid + mm(textbook_gelu(mm(textbook_layernorm(h_mid), W_ff1)), W_ff2)
    return (h_mid, h_out) if return_mid else h_out


class TextbookResult(dict):
    """The outputs of ``textbook_forward``: ``logits`` (T, V), ``hidden`` (N + 1, T, d)
    (the stream before block 0 and after each block), ``H_f`` (after the final LayerNorm) and
    ``norms`` (the Frobenius norm of each ``hidden[l]``). Keys are also attributes."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def textbook_forward(
    ids: Any,
    weights: Mapping[str, np.ndarray],
    config: Optional[GPTConfig] = None,
    *,
    branch_scale: float = 1.0,
    causal: bool = True,
) -> TextbookResult:
    """A slow, plain float64 forward pass with the lessons' order of operations.

    ``ids``: 0-based token ids, shape (T,) (see ``to_zero_based``). ``weights``: a gptcore
    weight mapping (Hugging Face names, as ``lesson14_weights`` returns); ``config``
    defaults to ``lesson14_config``. ``branch_scale`` multiplies the attention and MLP
    output projections (the lesson's ``1 / sqrt(2N)``).

    Biases (added after the product), LayerNorm affines (``xhat * gamma + beta``) and learned
    positions are supported, so the path also serves as a float64 reference for GPT-2-style
    weights; the bit-for-bit claims hold for the lesson's configuration.

    Examples:
        >>> r = textbook_forward(to_zero_based(LESSON14_IDS_1BASED), lesson14_weights())
        >>> r.logits.shape, r.hidden.shape
        ((8, 50), (5, 8, 64))
    """
    cfg = lesson14_config() if config is None else config
    if not isinstance(cfg, GPTConfig):
        raise TypeError(f"textbook_forward: config must be a GPTConfig or None, got {type(cfg).__name__}")
    ids_arr = np.asarray(ids)
    if ids_arr.dtype == bool or not np.issubdtype(ids_arr.dtype, np.integer):
        raise TypeError(f"textbook_forward: ids must be an integer array, got dtype {ids_arr.dtype}")
    if ids_arr.ndim != 1 or ids_arr.size == 0:
        raise ValueError(f"textbook_forward: ids must have shape (T,) with T >= 1, got {ids_arr.shape}")
    T = ids_arr.shape[0]
    if T > cfg.n_ctx:
        raise ValueError(f"textbook_forward: T = {T} exceeds the context length n_ctx = {cfg.n_ctx}")
    if ids_arr.min() < 0 or ids_arr.max() >= cfg.vocab_size:
        raise ValueError(
            f"textbook_forward: ids must be 0-based in [0, {cfg.vocab_size - 1}], got range "
            f"[{ids_arr.min()}, {ids_arr.max()}] (lesson ids are 1-based: use to_zero_based)"
        )

    def w(name: str) -> np.ndarray:
        try:
            return np.asarray(weights[name], dtype=np.float64)
        except KeyError:
            raise ValueError(f"textbook_forward: weights lack {name!r} required by the config") from None

    def opt(name: str, present: bool):
        return w(name) if present else None

    d = cfg.d_model
    wte = w("wte.weight")
    H = wte[ids_arr]
    if cfg.pos == "sinusoidal":
        H = H + sinusoidal_pe(T, d)
    else:
        H = H + w("wpe.weight")[:T]
    hidden = [H]
    for i in range(cfg.n_layers):
        p = f"h.{i}."
        x = textbook_layernorm(H, cfg.ln_eps, opt(p + "ln_1.weight", cfg.ln_affine), opt(p + "ln_1.bias", cfg.ln_affine))
        c_attn = w(p + "attn.c_attn.weight")
        b_attn = opt(p + "attn.c_attn.bias", cfg.attn_bias)
        bq = bk = bv = None
        if b_attn is not None:
            bq, bk, bv = b_attn[:d], b_attn[d : 2 * d], b_attn[2 * d :]
        a = _attention(x, c_attn[:, :d], c_attn[:, d : 2 * d], c_attn[:, 2 * d :], cfg.n_heads, causal, _mm, bq, bk, bv)
        proj = _mm(a, w(p + "attn.c_proj.weight") * branch_scale)
        if cfg.attn_bias:
            proj = proj + w(p + "attn.c_proj.bias")
        H = H + proj
        x = textbook_layernorm(H, cfg.ln_eps, opt(p + "ln_2.weight", cfg.ln_affine), opt(p + "ln_2.bias", cfg.ln_affine))
        f = _mm(x, w(p + "mlp.c_fc.weight"))
        if cfg.bias:
            f = f + w(p + "mlp.c_fc.bias")
        f = _mm(textbook_gelu(f), w(p + "mlp.c_proj.weight") * branch_scale)
        if cfg.bias:
            f = f + w(p + "mlp.c_proj.bias")
        H = H + f
        hidden.append(H)
    H_f = textbook_layernorm(H, cfg.ln_eps, opt("ln_f.weight", cfg.ln_affine), opt("ln_f.bias", cfg.ln_affine))
    head = wte if cfg.tied else w("lm_head.weight")
    logits = _mm(H_f, head.T)
    hid = np.stack(hidden)
    return TextbookResult(logits=logits, hidden=hid, H_f=H_f, norms=[frobenius_norm(h) for h in hid])
