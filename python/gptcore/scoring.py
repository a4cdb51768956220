"""Sliding-window scoring of a document: the log-likelihood and perplexity of token ids.

This is the one place the sliding-window recipe lives (Hugging Face's "perplexity of
fixed-length models"); ``gptcore.distributed`` and the command line build on it.

Which tokens are scored, with how much context
----------------------------------------------
A document of ``n`` tokens ``ids[0], ..., ids[n-1]`` is cut into windows of at most
``context`` tokens that start every ``stride`` tokens: window ``k`` holds
``ids[begin:end]`` with ``begin = k * stride`` and ``end = min(begin + context, n)``; the last
window is the first that reaches the end of the document (``end == n``).

* ``ids[0]`` is never scored: nothing comes before it to predict it.
* The first window scores ``ids[1:end]``; token ``p`` is predicted from all ``p`` tokens
  before it.
* Every later window scores only the tokens the windows before it did not:
  ``ids[prev_end:end]``, where ``prev_end`` is the previous window's end. Token ``p`` is
  predicted from the ``p - begin`` tokens of its window before it, which is at least
  ``context - stride`` tokens (``prev_end - begin = context - stride``).

So every token from the second on is scored exactly once. ``stride`` must be smaller than
``context`` (a window that overlaps its predecessor by nothing could not score its own first
token). A document of fewer than two tokens scores nothing.

The summed negative log-likelihood is the exactly rounded (``math.fsum``) sum of the scored
tokens' log-probabilities from ``gptcore.Model.token_logprobs``, so it does not depend on
how windows are grouped into batches; and since a batch row never depends on the other rows
of its batch, neither do the log-probabilities: the result is the same bit for bit whatever
``batch`` is, and whatever documents share a batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from ._checks import check_token_range, token_ids

__all__ = ["ExactSum", "ScoreResult", "Window", "check_document", "resolve_window", "score_ids", "score_many",
           "score_pieces", "sliding_windows"]

Window = Tuple[int, int, int]


def _positive_int(value: Any, name: str, minimum: int = 1) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _check_window(context: Any, stride: Any) -> Tuple[int, int]:
    context = _positive_int(context, "context", 2)
    stride = _positive_int(stride, "stride", 1)
    if stride >= context:
        raise ValueError(
            f"stride must be smaller than context (each window after the first needs at least one "
            f"token of context), got stride={stride}, context={context}"
        )
    return context, stride


def sliding_windows(n_tokens: int, context: int, stride: int) -> List[Window]:
    """The windows that score a document of ``n_tokens`` tokens: a list of
    ``(begin, end, first)`` where the window's input is ``ids[begin:end]`` and it scores the
    tokens ``ids[first:end]`` (see the module's description). Empty when ``n_tokens < 2``.

    Examples:
        >>> sliding_windows(10, 4, 2)
        [(0, 4, 1), (2, 6, 4), (4, 8, 6), (6, 10, 8)]
    """
    n = _positive_int(n_tokens, "n_tokens", 0)
    context, stride = _check_window(context, stride)
    windows: List[Window] = []
    if n < 2:
        return windows
    prev_end = 0
    begin = 0
    while True:
        end = min(begin + context, n)
        windows.append((begin, end, max(prev_end, begin + 1)))
        if end == n:
            return windows
        prev_end = end
        begin += stride


@dataclass(frozen=True)
class ScoreResult:
    """The score of one document.

    ``tokens``: tokens scored (every token but the first); ``nll``: their summed negative
    log-likelihood in nats (exactly rounded sum); ``mean``: ``nll / tokens``; ``perplexity``:
    ``exp(mean)`` (both NaN when nothing was scored); ``logprobs``: the scored tokens'
    log-probabilities in document order (``logprobs[i]`` belongs to ``ids[i + 1]``), or None
    from ``score_pieces``, which keeps only the sum.
    """

    tokens: int
    nll: float
    mean: float
    perplexity: float
    logprobs: Optional[np.ndarray] = field(repr=False, compare=False)

    @classmethod
    def from_logprobs(cls, logprobs: np.ndarray) -> "ScoreResult":
        lp = np.asarray(logprobs, dtype=np.float64)
        n = int(lp.size)
        nll = -math.fsum(lp.tolist()) if n else 0.0
        return cls.from_sum(n, nll, lp)

    @classmethod
    def from_sum(cls, tokens: int, nll: float, logprobs: Optional[np.ndarray] = None) -> "ScoreResult":
        mean = nll / tokens if tokens else math.nan
        try:
            ppl = math.exp(mean)
        except OverflowError:
            ppl = math.inf
        return cls(tokens=tokens, nll=nll, mean=mean, perplexity=ppl, logprobs=logprobs)


# Float64 values are m * 2**(e - 53) with integer |m| < 2**53 and e >= -1073; scaled by
# 2**_SCALE every value is an integer.
_SCALE = 1074 + 53


class ExactSum:
    """The exact sum of float64 values added in any order and grouping, rounded once:
    ``value`` equals ``math.fsum`` of all the values (correctly rounded), while holding one
    Python integer instead of the values. NaN and infinities give what ``math.fsum`` gives
    (an infinity; NaN for NaN or for both infinities, where ``fsum`` raises)."""

    def __init__(self) -> None:
        self._scaled = 0          # the sum of the finite values times 2**_SCALE, exactly
        self._special = 0.0       # the sum of the non-finite ones
        self.count = 0

    def add(self, values: Any) -> None:
        v = np.asarray(values, dtype=np.float64).reshape(-1)
        self.count += int(v.size)
        finite = np.isfinite(v)
        if not finite.all():
            with np.errstate(invalid="ignore"):
                self._special += float(np.sum(v[~finite]))
            v = v[finite]
        if not v.size:
            return
        m, e = np.frexp(v)                          # v = m * 2**e, 0.5 <= |m| < 1
        mant = (m * 2.0 ** 53).astype(np.int64)     # exact: 53 significant bits
        shift = e.astype(np.int64) - 53 + _SCALE    # >= 0
        # Group by exponent; per group, int64 sums of at most 512 values cannot overflow.
        order = np.argsort(shift, kind="stable")
        shift, mant = shift[order], mant[order]
        starts = np.flatnonzero(np.diff(shift, prepend=-1))
        ends = np.append(starts[1:], shift.size)
        total = 0
        for lo, hi in zip(starts.tolist(), ends.tolist()):
            group = 0
            for a in range(lo, hi, 512):
                group += int(mant[a:min(hi, a + 512)].sum())
            total += group << int(shift[lo])
        self._scaled += total

    @property
    def value(self) -> float:
        if self._special != 0.0 or math.isnan(self._special):
            return self._special
        return self._scaled / (1 << _SCALE)  # int / int is correctly rounded


def resolve_window(model: Any, context: Optional[int] = None, stride: Optional[int] = None) -> Tuple[int, int]:
    """``(context, stride)`` for ``model`` with the defaults filled in: ``context`` defaults to
    the model's ``n_ctx``, ``stride`` to half the context (as in Hugging Face's example);
    a context beyond ``n_ctx`` is refused for learned and rotary positions."""
    config = model.config
    if context is None:
        context = config.n_ctx
    context = _positive_int(context, "context", 2)
    if stride is None:
        stride = max(1, context // 2)
    context, stride = _check_window(context, stride)
    if config.pos != "sinusoidal" and context > config.n_ctx:
        raise ValueError(f"context must be <= the model's n_ctx = {config.n_ctx} ({config.pos} positions), got {context}")
    return context, stride


def check_document(ids: Any, vocab_size: int, what: str = "ids") -> np.ndarray:
    """``ids`` as a 1-D int64 array of token ids in ``[0, vocab_size)``, or a clear error."""
    arr = token_ids(what, ids)
    if arr.ndim != 1:
        raise ValueError(f"{what} must be a 1-D array of token ids, got shape {arr.shape}")
    check_token_range(what, arr, vocab_size, position=True)
    return np.ascontiguousarray(arr, dtype=np.int64)


def score_many(
    model: Any,
    documents: Sequence[Any],
    *,
    context: Optional[int] = None,
    stride: Optional[int] = None,
    batch: int = 1,
) -> List[ScoreResult]:
    """``score_ids`` for several documents at once: the windows of all documents are
    grouped by length and run ``batch`` windows per call of ``Model.token_logprobs``. Each
    result equals ``score_ids`` of its document alone, bit for bit."""
    batch = _positive_int(batch, "batch", 1)
    context, stride = resolve_window(model, context, stride)
    docs = [check_document(d, model.config.vocab_size, f"documents[{i}]") for i, d in enumerate(documents)]
    # every window of every document, grouped by window length (equal lengths batch together)
    groups: Dict[int, List[Tuple[int, int, Window]]] = {}
    pieces: List[List[Optional[np.ndarray]]] = []
    for d, ids in enumerate(docs):
        wins = sliding_windows(ids.size, context, stride)
        pieces.append([None] * len(wins))
        for w, win in enumerate(wins):
            groups.setdefault(win[1] - win[0], []).append((d, w, win))
    for length in sorted(groups, reverse=True):
        items = groups[length]
        for start in range(0, len(items), batch):
            chunk = items[start:start + batch]
            inputs = np.stack([docs[d][b:e] for d, _, (b, e, _f) in chunk])
            lp = model.token_logprobs(inputs)  # (rows, length - 1): lp[r, j] scores ids[b + j + 1]
            for row, (d, w, (b, _e, f)) in enumerate(chunk):
                pieces[d][w] = lp[row, f - b - 1:].copy()
    results = []
    for parts in pieces:
        lp = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float64)
        results.append(ScoreResult.from_logprobs(lp))
    return results


def score_ids(
    model: Any,
    ids: Any,
    *,
    context: Optional[int] = None,
    stride: Optional[int] = None,
    batch: int = 1,
) -> ScoreResult:
    """Score one document of token ids (1-D) with ``model`` (a ``gptcore.Model``).

    Windows of ``context`` tokens (default: the model's ``n_ctx``) every ``stride`` tokens
    (default: ``context // 2``) as described in ``gptcore.scoring``; ``batch`` windows of
    equal length go through ``gptcore.Model.token_logprobs`` together (the result does not
    depend on it). Returns a ``ScoreResult``.
    """
    arr = check_document(ids, model.config.vocab_size, "ids")
    return score_many(model, [arr], context=context, stride=stride, batch=batch)[0]


def score_pieces(
    model: Any,
    pieces: Iterable[Any],
    *,
    context: Optional[int] = None,
    stride: Optional[int] = None,
    batch: int = 1,
) -> ScoreResult:
    """``score_ids`` of the document whose token ids arrive in ``pieces`` (1-D arrays, in
    order, any sizes), holding only what the next windows need: about
    ``(batch - 1) * stride + context`` tokens and the latest piece, never the document.

    The windows, the tokens they score and the log-probabilities are those of ``score_ids``
    on the whole document, and the sum is exact (``ExactSum``), so ``tokens``, ``nll``,
    ``mean`` and ``perplexity`` are the same bit for bit; ``logprobs`` is None.
    """
    batch = _positive_int(batch, "batch", 1)
    context, stride = resolve_window(model, context, stride)
    vocab = model.config.vocab_size
    buf = np.zeros(0, dtype=np.int64)   # the document's ids from position `base` on
    base = 0                            # document position of buf[0]
    begin = 0                           # the next window's first position
    prev_end = 0                        # where the previous window ended
    total = ExactSum()

    def run(windows: List[Tuple[int, int, int]]) -> None:
        inputs = np.stack([buf[b - base:e - base] for b, e, _ in windows])
        lp = model.token_logprobs(inputs)
        for row, (b, _e, f) in enumerate(windows):
            total.add(lp[row, f - b - 1:])

    have = 0
    for i, piece in enumerate(pieces):
        ids = check_document(piece, vocab, f"pieces[{i}]")
        if not ids.size:
            continue
        buf = np.concatenate([buf, ids]) if buf.size else ids
        have += int(ids.size)
        # Every window that ends before the last id known is a full window, and not the last.
        ready: List[Tuple[int, int, int]] = []
        while begin + context < have:
            ready.append((begin, begin + context, max(prev_end, begin + 1)))
            prev_end = begin + context
            begin += stride
            if len(ready) == batch:
                run(ready)
                ready = []
        if ready:
            run(ready)
        buf, base = buf[begin - base:], begin
    if have >= 2:
        end = have  # the last window: begin + context >= have
        run([(begin, end, max(prev_end, begin + 1))])
    scored = max(0, have - 1)
    assert total.count == scored, (total.count, scored)
    return ScoreResult.from_sum(scored, -total.value if scored else 0.0)
