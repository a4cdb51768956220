"""One choice being generated: its key/value cache, its sampler, its text, its stop conditions.

A ``Sequence`` is what the engine schedules. It is fed its prompt in chunks (``next_ids``),
then one token per step; after each step it reads its own logits (``take``): it chooses the
next token with its own ``Sampler`` (its own generator, so that what it draws depends on
nothing else in the batch), turns the token into text (``StreamDecoder``, then
``StopStringMatcher``), and reports what happened through ``sink`` as events:

- ``PromptLogprobs``: with echo and logprobs, the prompt tokens' log-probabilities (the first
  token has none), once the prompt is in;
- ``TokenEvent``: a generated token, its log-probability, its alternatives and the text it
  releases (often ``""``: a character still incomplete, or a possible stop string held back);
- ``FinishEvent``: the end (``finish_reason`` ``"stop"`` or ``"length"``) with the text held
  back until then;
- ``ErrorEvent``: the sequence failed; only it ends.

Everything a sequence computes depends on its prompt, its parameters and its own logits
(which ``Model.step_many`` gives bit for bit as for the sequence alone): its tokens, text and
log-probabilities are those of its solo run, whatever runs beside it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence as Seq, Tuple

import numpy as np

from ..sampling import Sampler, SamplingParams, top_logprobs
from ..stop_strings import StopStringMatcher
from ..tokenizer import Tokenizer

__all__ = ["Sequence", "TokenEvent", "FinishEvent", "ErrorEvent", "PromptLogprobs"]

Top = List[Tuple[int, float]]


@dataclass
class PromptLogprobs:
    index: int
    tokens: List[int]
    logprobs: List[Optional[float]]
    top: List[Optional[Top]]


@dataclass
class TokenEvent:
    index: int
    token: int
    logprob: float
    top: Optional[Top]
    text: str


@dataclass
class FinishEvent:
    index: int
    finish_reason: str
    text: str
    completion_tokens: int


@dataclass
class ErrorEvent:
    index: int
    message: str


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = np.asarray(z, dtype=np.float64)
    m = z.max(axis=-1, keepdims=True)
    return z - (m + np.log(np.exp(z - m).sum(axis=-1, keepdims=True)))


class Sequence:
    """One choice of a request (see the module). ``sink(event)`` is called on the engine's
    thread; it must not block."""

    def __init__(self, index: int, prompt_ids: np.ndarray, max_tokens: int, params: SamplingParams,
                 stop: Seq[str], stop_ids: Seq[int], tokenizer: Tokenizer, vocab_size: int,
                 logprobs: Optional[int], prompt_logprobs: bool, sink: Callable[[Any], None]) -> None:
        self.index = index
        self.prompt = np.ascontiguousarray(prompt_ids, dtype=np.int64)
        self.max_tokens = int(max_tokens)
        self.sampler = Sampler(params, vocab_size, prompt=self.prompt)
        self.stop_ids = frozenset(int(i) for i in stop_ids)
        self.tokenizer = tokenizer
        self.logprobs = logprobs
        self.prompt_logprobs = prompt_logprobs and logprobs is not None
        self.sink = sink
        self.decoder = tokenizer.stream()
        self.matcher = StopStringMatcher(stop)
        self.cache: Any = None
        self.fed = 0            # tokens in the cache
        self.last: Optional[int] = None  # the token chosen last, fed at the next step
        self.generated = 0
        self.done = False
        self.cancelled = threading.Event()
        self.submitted = time.perf_counter()
        self.last_time: Optional[float] = None
        self._prompt_lp: List[Optional[float]] = [None]
        self._prompt_top: List[Optional[Top]] = [None]
        self._carry: Optional[np.ndarray] = None  # the logits row that predicts the next prompt token

    @property
    def prefilling(self) -> bool:
        """Whether part of the prompt is still to be fed."""
        return self.fed < self.prompt.size

    @property
    def logits_mode(self) -> str:
        """``"all"`` while the prompt's log-probabilities are wanted, else ``"last"``."""
        return "all" if self.prefilling and self.prompt_logprobs else "last"

    def next_ids(self, budget: int) -> Optional[np.ndarray]:
        """The tokens to feed at the next step: up to ``budget`` prompt tokens while
        prefilling (None for a budget of 0), else the token chosen last."""
        if self.prefilling:
            if budget <= 0:
                return None
            return self.prompt[self.fed:self.fed + budget]
        return np.array([self.last], dtype=np.int64)

    def take(self, ids: np.ndarray, logits: np.ndarray, now: float) -> Optional[Tuple[bool, Optional[float]]]:
        """Read the step's logits for the ``ids`` fed (a ``(T, V)`` array with ``"all"``,
        else ``(V,)``). Returns None while the prompt is still being fed, else ``(finished,
        seconds since the previous token or since submission for the first)``."""
        was_prefilling = self.prefilling
        self.fed += ids.size
        if was_prefilling and self.prompt_logprobs:
            rows = logits if logits.ndim == 2 else logits[None, :]
            self._prompt_rows(ids, rows)
            last = rows[-1]
        else:
            last = logits
        if was_prefilling and self.prefilling:
            return None
        if was_prefilling and self.prompt_logprobs:
            self.sink(PromptLogprobs(self.index, [int(t) for t in self.prompt], self._prompt_lp, self._prompt_top))
        # The chosen token's log-probability is sent only when the request asked for logprobs.
        token, logprob = self.sampler.choose(last, self.logprobs is not None)
        top = None
        if self.logprobs:
            ids_k, lps_k = top_logprobs(last, self.logprobs)
            top = [(int(i), float(v)) for i, v in zip(ids_k, lps_k)]
        self.generated += 1
        self.last = token
        since = now - (self.last_time if self.last_time is not None else self.submitted)
        self.last_time = now
        if token in self.stop_ids:
            self._finish("stop", "")
            return True, since
        if token >= self.tokenizer.vocab_size:
            raise ValueError(f"the model generated token {token}, which its tokenizer "
                             f"({self.tokenizer.vocab_size} ids) has no text for")
        piece, stopped = self.matcher.push(self.decoder.push(token))
        self.sink(TokenEvent(self.index, token, logprob, top, piece))
        if stopped:
            self._finish("stop", "")
            return True, since
        if self.generated >= self.max_tokens:
            piece, stopped = self.matcher.push(self.decoder.flush())
            self._finish("stop" if stopped else "length", piece + self.matcher.flush())
            return True, since
        return False, since

    def _prompt_rows(self, ids: np.ndarray, rows: np.ndarray) -> None:
        """Log-probabilities of the prompt tokens ``ids`` (fed at positions ``fed - len(ids)``
        on): row ``j`` of the logits predicts the token after ``ids[j]``."""
        start = self.fed - ids.size
        k = self.logprobs or 0
        preds = rows if self._carry is None else np.concatenate([self._carry[None, :], rows], axis=0)
        first = start if self._carry is not None else start + 1  # the prompt position the first pred row predicts
        for j, pos in enumerate(range(first, self.fed)):
            row = preds[j]
            lp = _log_softmax(row[None, :])[0]
            tok = int(self.prompt[pos])
            self._prompt_lp.append(float(lp[tok]))
            if k:
                ids_k, lps_k = top_logprobs(row, k)
                self._prompt_top.append([(int(i), float(v)) for i, v in zip(ids_k, lps_k)])
            else:
                self._prompt_top.append(None)
        self._carry = np.array(rows[-1], copy=True)

    def _finish(self, reason: str, text: str) -> None:
        self.done = True
        self.cache = None
        self.sink(FinishEvent(self.index, reason, text, self.generated))

    def fail(self, message: str) -> None:
        """End the sequence with an error (its request answers 500); free its cache."""
        self.done = True
        self.cache = None
        self.sink(ErrorEvent(self.index, message))
