"""Text in, text out: generation and scoring of strings through the model's tokenizer.

These functions are also ``gptcore.Model`` methods (``model.generate_text(...)``,
``model.stream_text(...)``, ``model.score_text(...)``). The model needs a tokenizer
(``model.tokenizer``, set by ``gptcore.load`` from the folder's tokenizer files); without
one they raise ``ValueError`` naming the files that are missing. Ids still go through
``gptcore.Model.generate`` and ``gptcore.Model.token_logprobs`` as before.
"""

from __future__ import annotations

from typing import Any, Iterator, Optional, Protocol, Tuple

import numpy as np

from .config import GPTConfig
from .scoring import ScoreResult, score_ids
from .tokenizer import Tokenizer

__all__ = ["generate_text", "stream_text", "score_text", "encode_prompt"]


class _TextModel(Protocol):
    """What these functions use of a model: ``gptcore.Model`` is one. (A protocol, not the
    class, so that this module does not import ``gptcore.model``, which imports it to give
    ``Model`` its text methods.)"""

    @property
    def config(self) -> GPTConfig:
        """The model's configuration."""
        ...

    def _require_tokenizer(self, fn: str) -> Tokenizer:
        """The model's tokenizer, or a ``ValueError`` from ``fn`` saying why it has none."""
        ...

    def stream(self, ids: Any, max_new_tokens: int, **options: Any) -> Iterator[Any]:
        """``gptcore.Model.stream``: the generated token ids one at a time."""
        ...

    def token_logprobs(self, ids: Any, targets: Any = None, *, chunk: int = 256) -> np.ndarray:
        """``gptcore.Model.token_logprobs``."""
        ...


def encode_prompt(model: _TextModel, prompt: Any, fn: str) -> np.ndarray:
    """The prompt's ids, or a clear error for a model without tokenizer, a non-str or an
    empty prompt."""
    tok = model._require_tokenizer(fn)
    if not isinstance(prompt, str):
        raise TypeError(f"{fn}: prompt must be a str, got {type(prompt).__name__}")
    ids = tok.encode(prompt)
    if ids.size == 0:
        raise ValueError(f"{fn}: the prompt is empty (GPT-2 has no start token to generate from)")
    return ids


def stream_text(
    model: _TextModel,
    prompt: str,
    max_new_tokens: int,
    *,
    stop_at_eos: bool = True,
    **options: Any,
) -> Iterator[str]:
    """Yield the continuation of ``prompt`` as it is generated, in pieces of whole
    characters (a token that ends inside a UTF-8 character is held back until the character
    is complete; anything still incomplete at the end comes out as ``U+FFFD``). The pieces
    joined equal ``generate_text`` with the same arguments.

    ``options`` are those of ``gptcore.Model.generate`` (``temperature``, ``top_k``,
    ``top_p``, ``greedy``, ``seed``, ``stop_tokens``, ``context_shift``). With
    ``stop_at_eos`` (default) generation also stops at the tokenizer's end-of-text token
    (``<|endoftext|>``), which is not part of the text.
    """
    ids = encode_prompt(model, prompt, "stream_text")
    for _, piece in stream_pieces(model, ids, max_new_tokens, stop_at_eos=stop_at_eos, **options):
        if piece:
            yield piece


def stream_pieces(
    model: _TextModel, ids: np.ndarray, max_new_tokens: int, *, stop_at_eos: bool = True, **options: Any
) -> Iterator[Tuple[Optional[int], str]]:
    """``(token, text)`` for each generated token (the text it completes, often ``""``),
    then ``(None, rest)`` for what was held back; a stop token ends the stream unseen."""
    tok = model._require_tokenizer("stream_text")
    if not isinstance(stop_at_eos, bool):
        raise TypeError(f"stream_text: stop_at_eos must be a bool, got {stop_at_eos!r}")
    if "return_logprobs" in options:
        raise TypeError("stream_text: return_logprobs is not an option of text generation")
    stops = options.pop("stop_tokens", None)
    if stops is not None:
        if isinstance(stops, (str, bytes)) or not hasattr(stops, "__iter__"):
            raise TypeError(f"stream_text: stop_tokens must be an iterable of int token ids, got {type(stops).__name__}")
        stops = list(stops)
    if stop_at_eos and tok.eos_id is not None:
        stops = (stops or []) + [tok.eos_id]
    decoder = tok.stream()
    stop_set = None
    for t in model.stream(ids, max_new_tokens, stop_tokens=stops, **options):
        if stop_set is None:  # the stop tokens have been checked by now
            stop_set = set(int(s) for s in stops or ())
        if t in stop_set:
            break
        if t >= tok.vocab_size:  # a vocabulary padded past the tokenizer's (nanoGPT's 50,304)
            raise ValueError(f"stream_text: the model generated token {t}, which its tokenizer "
                             f"({tok.vocab_size} ids) has no text for")
        yield t, decoder.push(t)
    yield None, decoder.flush()


def generate_text(model: _TextModel, prompt: str, max_new_tokens: int, **options: Any) -> str:
    """The continuation of ``prompt`` (without the prompt) as a string; arguments as in
    ``stream_text``."""
    return "".join(stream_text(model, prompt, max_new_tokens, **options))


def score_text(
    model: _TextModel,
    text: str,
    *,
    context: Optional[int] = None,
    stride: Optional[int] = None,
    batch: int = 1,
) -> ScoreResult:
    """Log-likelihood and perplexity of ``text`` (a ``gptcore.scoring.ScoreResult``:
    ``tokens``, ``nll``, ``mean``, ``perplexity``, ``logprobs``).

    The text is encoded and scored with ``gptcore.scoring.score_ids``: every token but the
    first is scored once; a text longer than ``context`` (default ``n_ctx``) is cut into
    windows every ``stride`` tokens (default ``context // 2``), and each token after the first
    window is predicted from at least ``context - stride`` tokens before it.
    """
    tok = model._require_tokenizer("score_text")
    if not isinstance(text, str):
        raise TypeError(f"score_text: text must be a str, got {type(text).__name__}")
    ids = tok.encode(text)
    if ids.size < 2:
        raise ValueError(f"score_text: the text has {ids.size} token(s); scoring needs at least 2 "
                         "(the first token is never scored)")
    return score_ids(model, ids, context=context, stride=stride, batch=batch)
