"""Choosing the next token from logits, one sequence at a time.

``SamplingParams`` holds the controls of one request, checked once; a ``Sampler`` applies them
to the logits of one sequence, step after step, with its own state (its random generator and
the counts of the tokens it has seen). ``Sampler.choose`` reads one row of logits and that
state and nothing else, so a sequence gets the same tokens whether its logits came from a
batch of one or of many: ``Model.generate``, ``Model.stream``, the text functions and the
command line all choose through it.

Order of application (that of transformers' ``generate``, whose processors come before its
warpers, and of llama.cpp's sampler chain for the penalties), on the float64 logits ``z`` of
one step:

1. ``logit_bias``: ``z[i] += bias[i]`` (OpenAI's ``logit_bias``, -100 to 100).
2. ``repetition_penalty`` (transformers' ``RepetitionPenaltyLogitsProcessor``): for every
   token that occurs in the prompt or among the tokens generated so far, ``z[i] *= penalty``
   where ``z[i] < 0``, else ``z[i] /= penalty``.
3. ``frequency_penalty`` and ``presence_penalty`` (OpenAI's definition):
   ``z[i] = z[i] - c[i] * frequency_penalty - (c[i] > 0) * presence_penalty``, ``c[i]`` the
   number of times token ``i`` was generated (the prompt is not counted).
4. Greedy (``greedy=True`` or ``temperature=0``): the first token of largest ``z``. Else:
5. ``temperature``: ``z / temperature`` (after subtracting the row's maximum, so that a tiny
   temperature gives ``-inf``, never NaN).
6. ``top_k``: only the ``top_k`` largest survive (ties at the k-th value all survive).
7. ``top_p``: the smallest set of most likely tokens whose probability reaches ``top_p``.
8. ``min_p`` (transformers' ``MinPLogitsWarper``): tokens whose probability (after the steps
   above) is below ``min_p`` times the largest probability are removed; the most likely token
   always stays.
9. One uniform number ``u`` from the sequence's generator picks the token whose cumulative
   probability first exceeds ``u`` (inverse transform sampling).

The log-probability ``choose`` returns with each token is the model's own, ``log_softmax`` of
the logits as they came (temperature 1, nothing applied): what the token cost the model, and
the number ``Model.token_logprobs`` gives for it.

Reproducibility: the same logits, parameters and seed give the same tokens bit for bit (all of
it is float64 numpy arithmetic in a fixed order; the generator is numpy's PCG64).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Optional, Sequence, Tuple

import numpy as np

__all__ = ["SamplingParams", "Sampler", "filter_logits", "min_p_filter", "top_logprobs"]

_Number = (int, float, np.integer, np.floating)

#: OpenAI's bounds on the controls that come from its API.
LOGIT_BIAS_RANGE = (-100.0, 100.0)
PENALTY_RANGE = (-2.0, 2.0)


def _is_number(x: Any) -> bool:
    return isinstance(x, _Number) and not isinstance(x, (bool, np.bool_))


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _finite(name: str, value: Any) -> float:
    if not _is_number(value):
        raise TypeError(f"{name} must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {v}")
    return v


@dataclass(frozen=True)
class SamplingParams:
    """The sampling controls of one request, checked when made (``TypeError`` for a wrong
    type, ``ValueError`` for a value out of range, each naming the field).

    ``temperature`` (>= 0; 0 means greedy), ``top_k`` (>= 1 or None), ``top_p`` (in (0, 1] or
    None), ``min_p`` (in [0, 1] or None), ``repetition_penalty`` (> 0; 1 is off),
    ``frequency_penalty`` and ``presence_penalty`` (-2 to 2; 0 is off), ``logit_bias``
    (token id -> bias in [-100, 100]; stored as sorted ``(id, bias)`` pairs), ``greedy``,
    ``seed`` (an int >= 0, or None for fresh entropy), ``stop`` (strings that end the text;
    stored as a tuple) and ``stop_token_ids`` (ids that end generation). See the module for
    the order in which they apply. Token ids are checked against a vocabulary by
    ``check_vocab`` (a ``Sampler`` does it).
    """

    temperature: float = 1.0
    top_k: Optional[int] = None
    top_p: Optional[float] = None
    min_p: Optional[float] = None
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    logit_bias: Any = field(default=())
    greedy: bool = False
    seed: Optional[int] = None
    stop: Any = field(default=())
    stop_token_ids: Any = field(default=())

    def __post_init__(self) -> None:
        put = object.__setattr__
        t = _finite("temperature", self.temperature)
        if t < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {t}")
        put(self, "temperature", t)
        if self.top_k is not None:
            if not _is_int(self.top_k):
                raise TypeError(f"top_k must be an int or None, got {self.top_k!r}")
            if self.top_k < 1:
                raise ValueError(f"top_k must be >= 1, got {self.top_k}")
            put(self, "top_k", int(self.top_k))
        if self.top_p is not None:
            if not _is_number(self.top_p):
                raise TypeError(f"top_p must be a number in (0, 1] or None, got {self.top_p!r}")
            p = float(self.top_p)
            if not 0.0 < p <= 1.0:
                raise ValueError(f"top_p must be in (0, 1], got {p}")
            put(self, "top_p", p)
        if self.min_p is not None:
            if not _is_number(self.min_p):
                raise TypeError(f"min_p must be a number in [0, 1] or None, got {self.min_p!r}")
            p = float(self.min_p)
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"min_p must be in [0, 1], got {p}")
            put(self, "min_p", p)
        r = _finite("repetition_penalty", self.repetition_penalty)
        if r <= 0:
            raise ValueError(f"repetition_penalty must be > 0 (1 is no penalty), got {r}")
        put(self, "repetition_penalty", r)
        for name in ("frequency_penalty", "presence_penalty"):
            v = _finite(name, getattr(self, name))
            if not PENALTY_RANGE[0] <= v <= PENALTY_RANGE[1]:
                raise ValueError(f"{name} must be in [{PENALTY_RANGE[0]:g}, {PENALTY_RANGE[1]:g}], got {v}")
            put(self, name, v)
        put(self, "logit_bias", _bias_pairs(self.logit_bias))
        if not isinstance(self.greedy, (bool, np.bool_)):
            raise TypeError(f"greedy must be a bool, got {self.greedy!r}")
        put(self, "greedy", bool(self.greedy))
        if self.seed is not None:
            if not _is_int(self.seed):
                raise TypeError(f"seed must be a non-negative int or None, got {self.seed!r}")
            if self.seed < 0:
                raise ValueError(f"seed must be a non-negative int or None, got {self.seed}")
            put(self, "seed", int(self.seed))
        put(self, "stop", _stop_strings(self.stop))
        put(self, "stop_token_ids", _token_list("stop_token_ids", self.stop_token_ids))

    @property
    def is_greedy(self) -> bool:
        """Whether the argmax is taken (``greedy`` or ``temperature == 0``): no random draws."""
        return self.greedy or self.temperature == 0.0

    def check_vocab(self, vocab_size: int) -> None:
        """``ValueError`` naming the field unless every token id given (``logit_bias``,
        ``stop_token_ids``) is in ``[0, vocab_size)``."""
        for name, ids in (("logit_bias", [i for i, _ in self.logit_bias]), ("stop_token_ids", self.stop_token_ids)):
            for i in ids:
                if not 0 <= i < vocab_size:
                    raise ValueError(f"{name}: token id {i} is out of range [0, {vocab_size})")


def _bias_pairs(bias: Any) -> Tuple[Tuple[int, float], ...]:
    if bias is None:
        return ()
    if isinstance(bias, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in bias):
        items: Iterable[Tuple[Any, Any]] = bias
    elif isinstance(bias, Mapping):
        items = bias.items()
    else:
        raise TypeError(f"logit_bias must be a mapping of token id -> bias, got {type(bias).__name__}")
    out = {}
    lo, hi = LOGIT_BIAS_RANGE
    for key, value in items:
        if isinstance(key, str) and key.strip().lstrip("+-").isdigit():  # JSON keys are strings
            key = int(key)
        if not _is_int(key):
            raise TypeError(f"logit_bias: keys must be int token ids, got {key!r}")
        if key < 0:
            raise ValueError(f"logit_bias: token id {key} is out of range (ids are >= 0)")
        v = _finite(f"logit_bias[{int(key)}]", value)
        if not lo <= v <= hi:
            raise ValueError(f"logit_bias[{int(key)}] must be in [{lo:g}, {hi:g}], got {v}")
        out[int(key)] = v
    return tuple(sorted(out.items()))


def _stop_strings(stop: Any) -> Tuple[str, ...]:
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = (stop,)
    if isinstance(stop, bytes) or not isinstance(stop, Iterable):
        raise TypeError(f"stop must be a str or a sequence of str, got {type(stop).__name__}")
    out = []
    for s in stop:
        if not isinstance(s, str):
            raise TypeError(f"stop must hold strings, got {s!r}")
        if s == "":
            raise ValueError("stop: an empty string would stop before the first token")
        if s not in out:
            out.append(s)
    return tuple(out)


def _token_list(name: str, ids: Any) -> Tuple[int, ...]:
    if ids is None:
        return ()
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise TypeError(f"{name} must be an iterable of int token ids, got {type(ids).__name__}")
    out = []
    for i in ids:
        if not _is_int(i):
            raise TypeError(f"{name} must hold int token ids, got {i!r}")
        if i < 0:
            raise ValueError(f"{name}: token id {i} is out of range (ids are >= 0)")
        if int(i) not in out:
            out.append(int(i))
    return tuple(out)


# ------------------------------------------------------------------------------ the warpers

def _log_normaliser(z: np.ndarray) -> np.ndarray:
    """``log(sum(exp(z)))`` over the last axis (kept), shifted by the maximum."""
    m = z.max(axis=-1, keepdims=True)
    return m + np.log(np.exp(z - m).sum(axis=-1, keepdims=True))


def _log_softmax(z: np.ndarray) -> np.ndarray:
    return z - _log_normaliser(z)


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


def min_p_filter(z: np.ndarray, min_p: float) -> np.ndarray:
    """transformers' ``MinPLogitsWarper`` (``min_tokens_to_keep=1``) on rows of ``z``
    (float64, any temperature already applied): a copy with ``-inf`` for every token whose
    probability is below ``min_p`` times the row's largest probability. The most likely token
    (the first, on a tie) always stays."""
    z = np.array(z, dtype=np.float64, copy=True)
    p = np.exp(_log_softmax(z))
    drop = p < min_p * p.max(axis=-1, keepdims=True)
    drop[np.arange(z.shape[0]), np.argmax(z, axis=-1)] = False
    z[drop] = -np.inf
    return z


def top_logprobs(logits: Any, k: int) -> Tuple[np.ndarray, np.ndarray]:
    """The ``k`` most likely tokens of one row of logits and their log-probabilities under the
    model (``log_softmax`` of the row), most likely first (ties: the lower id first)."""
    z = np.asarray(logits, dtype=np.float64)
    if z.ndim != 1:
        raise ValueError(f"top_logprobs: logits must be one row (V,), got shape {z.shape}")
    if not _is_int(k) or k < 0:
        raise ValueError(f"top_logprobs: k must be an int >= 0, got {k!r}")
    k = min(int(k), z.size)
    order = np.argsort(-z, kind="stable")[:k]
    return order.astype(np.int64), _log_softmax(z[None, :])[0][order]


# ------------------------------------------------------------------------------ one sequence

class Sampler:
    """Chooses the tokens of one sequence under ``params`` (a ``SamplingParams``).

    ``prompt`` (the sequence's token ids so far) seeds the repetition penalty's set of seen
    tokens. ``rng`` is the ``numpy.random.Generator`` to draw from; by default a new one seeded
    with ``params.seed``, owned by this sequence alone (then its tokens depend on nothing
    else). Several samplers may share one generator (``Model.generate`` on a batch with one
    seed does, drawing in row order), and then each draw depends on the draws before it.

    ``choose(logits)`` takes the sequence's next-token logits (one row, ``(V,)``), applies the
    controls in the order the module describes, picks a token, records it (for the penalties)
    and returns ``(token, logprob)``. It raises ``FloatingPointError`` when the logits are not
    all finite (a model whose arithmetic overflowed, or NaN weights): no token is chosen from
    such a row.
    """

    def __init__(self, params: SamplingParams, vocab_size: int, *, prompt: Any = None,
                 rng: Optional[np.random.Generator] = None) -> None:
        if not isinstance(params, SamplingParams):
            raise TypeError(f"Sampler: params must be a SamplingParams, got {type(params).__name__}")
        if not _is_int(vocab_size) or vocab_size < 1:
            raise ValueError(f"Sampler: vocab_size must be a positive int, got {vocab_size!r}")
        params.check_vocab(int(vocab_size))
        if rng is not None and not isinstance(rng, np.random.Generator):
            raise TypeError(f"Sampler: rng must be a numpy.random.Generator or None, got {type(rng).__name__}")
        self.params = params
        self.vocab_size = int(vocab_size)
        self.rng = rng if rng is not None else np.random.default_rng(params.seed)
        self.generated = 0  # tokens chosen so far
        self._seen: Optional[np.ndarray] = None
        if params.repetition_penalty != 1.0:
            self._seen = np.zeros(self.vocab_size, dtype=bool)
            if prompt is not None:
                ids = np.asarray(prompt, dtype=np.int64).ravel()
                if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
                    raise ValueError(f"Sampler: prompt holds ids outside [0, {self.vocab_size})")
                self._seen[ids] = True
        self._counts: Optional[np.ndarray] = None
        if params.frequency_penalty != 0.0 or params.presence_penalty != 0.0:
            self._counts = np.zeros(self.vocab_size, dtype=np.int64)
        self._bias_ids = np.array([i for i, _ in params.logit_bias], dtype=np.int64)
        self._bias = np.array([b for _, b in params.logit_bias], dtype=np.float64)

    def process(self, logits: Any) -> np.ndarray:
        """Steps 1-3 of the module (logit bias, repetition, frequency and presence penalties)
        on one row of logits: a new float64 array."""
        z = np.array(logits, dtype=np.float64, copy=True)
        if self._bias_ids.size:
            z[self._bias_ids] += self._bias
        if self._seen is not None:
            idx = np.flatnonzero(self._seen)
            s = z[idx]
            pen = self.params.repetition_penalty
            z[idx] = np.where(s < 0, s * pen, s / pen)
        if self._counts is not None:
            idx = np.flatnonzero(self._counts)
            c = self._counts[idx].astype(np.float64)
            z[idx] = z[idx] - c * self.params.frequency_penalty - self.params.presence_penalty
        return z

    def probabilities(self, logits: Any) -> np.ndarray:
        """The distribution a sampled token is drawn from (steps 1-8 of the module) for one row
        of logits: float64, zero outside the surviving tokens. For a greedy ``params``, all
        the mass on the argmax."""
        self._check_row(logits)
        z = self.process(logits)
        if self.params.is_greedy:
            p = np.zeros_like(z)
            p[int(np.argmax(z))] = 1.0
            return p
        return self._warped(z[None, :])[0]

    def _warped(self, z: np.ndarray) -> np.ndarray:
        """Steps 5-8 on one row held as a (1, V) array: the probabilities."""
        p = self.params
        with np.errstate(over="ignore"):  # a tiny temperature: -inf for all but the largest, as meant
            f = filter_logits((z - z.max(axis=-1, keepdims=True)) / p.temperature, p.top_k, p.top_p)
        if p.min_p is not None and p.min_p > 0.0:
            f = min_p_filter(f, p.min_p)
        return np.exp(_log_softmax(f))

    def _check_row(self, logits: Any) -> np.ndarray:
        z = np.asarray(logits)
        if z.shape != (self.vocab_size,):
            raise ValueError(f"Sampler: logits must have shape ({self.vocab_size},), got {z.shape}")
        if not np.isfinite(z).all():
            bad = int(np.flatnonzero(~np.isfinite(z))[0])
            raise FloatingPointError(
                f"the model's logits for new token {self.generated + 1} are not finite ({float(z[bad])} at "
                f"token id {bad}): the model's arithmetic overflowed or its weights hold NaN or infinity")
        return z

    def choose(self, logits: Any, logprob: bool = True) -> Tuple[int, float]:
        """Choose the next token from one row of logits ``(V,)``; record it; return
        ``(token, logprob)``: the model's log-probability of the token, or NaN with
        ``logprob=False`` (which skips the normalisation over the vocabulary: a greedy choice
        then costs a finiteness check and an argmax)."""
        raw = self._check_row(logits)
        if self.params.is_greedy and self._untouched() and not logprob:
            tok = int(np.argmax(raw))  # the argmax of the float64 row: the same first maximum
            self._record(tok)
            return tok, float("nan")
        # A (1, V) row: the same reductions, bit for bit, as a row of a (B, V) batch.
        z = np.asarray(raw, dtype=np.float64)[None, :]
        # z[tok] - norm is element tok of _log_softmax(z), without the rest of the row.
        norm = _log_normaliser(z) if logprob else None
        processed = z if self._untouched() else self.process(z[0])[None, :]
        if self.params.is_greedy:
            tok = int(np.argmax(processed[0]))
        else:
            p = self._warped(processed)
            u = self.rng.random()
            cdf = np.cumsum(p, axis=-1)
            tok = min(int((cdf[0] < u * cdf[0, -1]).sum()), self.vocab_size - 1)
            if p[0, tok] == 0:  # never land on a removed token through rounding at the cdf's end
                tok = int(np.argmax(p[0]))
        self._record(tok)
        return tok, (float(z[0, tok] - norm[0, 0]) if norm is not None else float("nan"))

    def _untouched(self) -> bool:
        return not self._bias_ids.size and self._seen is None and self._counts is None

    def _record(self, tok: int) -> None:
        self.generated += 1
        if self._seen is not None:
            self._seen[tok] = True
        if self._counts is not None:
            self._counts[tok] += 1


def samplers_for_batch(params: SamplingParams, vocab_size: int, prompts: np.ndarray,
                       seeds: Optional[Sequence[int]] = None) -> list:
    """One ``Sampler`` per row of ``prompts`` ``(B, T)``. With ``seeds`` (one seed per row),
    each row has its own generator, and a row's tokens equal its run alone with its seed.
    Without, the rows share one generator seeded with ``params.seed`` and draw from it in row
    order at each step (what ``Model.generate`` has always done with one seed)."""
    b = prompts.shape[0]
    if seeds is None:
        shared = np.random.default_rng(params.seed)
        return [Sampler(params, vocab_size, prompt=prompts[r], rng=shared) for r in range(b)]
    if len(seeds) != b:
        raise ValueError(f"seed: a sequence of seeds needs one per sequence ({b}), got {len(seeds)}")
    rows = []
    for r, s in enumerate(seeds):
        try:
            row_params = replace(params, seed=s)
        except (TypeError, ValueError) as e:
            raise type(e)(f"seed[{r}]: {e}") from None
        rows.append(Sampler(row_params, vocab_size, prompt=prompts[r]))
    return rows
