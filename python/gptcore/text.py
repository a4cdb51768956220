"""Text in, text out: generation and scoring of strings through the model's tokenizer.

These functions are also ``gptcore.Model`` methods (``model.generate_text(...)``,
``model.stream_text(...)``, ``model.score_text(...)``). The model needs a tokenizer
(``model.tokenizer``, set by ``gptcore.load`` from the folder's tokenizer files); without
one they raise ``ValueError`` naming the files that are missing. Ids still go through
``gptcore.Model.generate`` and ``gptcore.Model.token_logprobs`` as before.
"""

from __future__ import annotations

from typing import Any, Iterator, List, Optional, Protocol, Sequence, Tuple, Union

import numpy as np

from .config import GPTConfig
from .scoring import ScoreResult, score_ids
from .stop_strings import StopStringMatcher
from .tokenizer import Tokenizer

__all__ = ["generate_text", "stream_text", "score_text", "encode_prompt", "TextStream"]


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

    @property
    def eos_token_ids(self) -> Tuple[int, ...]:
        """``gptcore.Model.eos_token_ids``."""
        ...

    def _stream_tokens(self, ids: Any, max_new_tokens: int, fn: str, **options: Any) -> Iterator[Any]:
        """``gptcore.Model.stream`` (the generated token ids one at a time), its errors named
        after ``fn``."""
        ...

    def token_logprobs(self, ids: Any, targets: Any = None, *, chunk: int = 256) -> np.ndarray:
        """``gptcore.Model.token_logprobs``."""
        ...


def encode_prompt(model: _TextModel, prompt: Any, fn: str) -> np.ndarray:
    """The prompt's ids (with what the tokenizer's post-processor adds: Llama 3's BOS), or a
    clear error for a model without tokenizer, a non-str or an empty prompt."""
    tok = model._require_tokenizer(fn)
    if not isinstance(prompt, str):
        raise TypeError(f"{fn}: prompt must be a str, got {type(prompt).__name__}")
    ids = tok.encode(prompt, add_special_tokens=True)
    if ids.size == 0:
        raise ValueError(f"{fn}: prompt is empty (GPT-2 has no start token to generate from)")
    return ids


def stream_text(
    model: _TextModel,
    prompt: str,
    max_new_tokens: int,
    *,
    stop_at_eos: bool = True,
    stop: Union[None, str, Sequence[str]] = None,
    **options: Any,
) -> Iterator[str]:
    """Yield the continuation of ``prompt`` as it is generated, in pieces of whole
    characters (a token that ends inside a UTF-8 character is held back until the character
    is complete; anything still incomplete at the end comes out as ``U+FFFD``). The pieces
    joined equal ``generate_text`` with the same arguments.

    ``options`` are those of ``gptcore.Model.generate`` (``temperature``, ``top_k``,
    ``top_p``, ``min_p``, ``repetition_penalty``, ``frequency_penalty``,
    ``presence_penalty``, ``logit_bias``, ``greedy``, ``seed``, ``stop_tokens``,
    ``context_shift``). With ``stop_at_eos`` (default) generation also stops at the model's
    end-of-sequence ids (``Model.eos_token_ids``: the folder's ``generation_config.json``,
    else the tokenizer's ``<|endoftext|>``), which are not part of the text. ``stop``: strings
    that end the text where they first appear, even spread over several tokens; the stop
    string is not part of the text, and a tail that could be the start of one is held back
    until it is known not to be (``gptcore.stop_strings``).
    """
    ids = encode_prompt(model, prompt, "stream_text")  # checked when called, not at the first piece
    stream = TextStream(model, ids, max_new_tokens, stop_at_eos=stop_at_eos, stop=stop, fn="stream_text", **options)
    return (piece for _, piece in stream if piece)


class TextStream:
    """``(token, text)`` for each generated token (the text it releases, often ``""``), then
    ``(None, rest)`` for what was held back. A stop token (``stop_tokens``, or an
    end-of-sequence id with ``stop_at_eos``) ends the stream unseen; a stop string ends it
    with the text before it. After the end, ``finish_reason`` is ``"stop"`` (a stop token or
    string) or ``"length"`` (``max_new_tokens`` reached), ``stopped_by`` the stop token id or
    string (or None), and ``tokens`` the generated ids, the stop token included. Errors name
    ``fn``, the function the caller called.
    """

    def __init__(self, model: _TextModel, ids: np.ndarray, max_new_tokens: int, *, stop_at_eos: bool = True,
                 stop: Union[None, str, Sequence[str]] = None, fn: str = "stream_text", **options: Any) -> None:
        self._tok = model._require_tokenizer(fn)
        if not isinstance(stop_at_eos, bool):
            raise TypeError(f"{fn}: stop_at_eos must be a bool, got {stop_at_eos!r}")
        if "return_logprobs" in options:
            raise TypeError(f"{fn}: return_logprobs is not an option of text generation")
        if "stop_at_eos" in options:
            raise TypeError(f"{fn}: stop_at_eos given twice")
        try:
            self._matcher = StopStringMatcher(() if stop is None else stop)
        except (TypeError, ValueError) as e:
            raise type(e)(f"{fn}: {e}") from None
        stops = options.pop("stop_tokens", None)
        if stops is not None:
            if isinstance(stops, (str, bytes)) or not hasattr(stops, "__iter__"):
                raise TypeError(f"{fn}: stop_tokens must be an iterable of int token ids, got {type(stops).__name__}")
            stops = list(stops)
        if stop_at_eos:
            stops = (stops or []) + [i for i in model.eos_token_ids if i not in (stops or [])]
        self._stop_ids = stops
        self._tokens = model._stream_tokens(ids, max_new_tokens, fn, stop_tokens=stops, **options)
        self._fn = fn
        self.finish_reason: Optional[str] = None
        self.stopped_by: Union[None, int, str] = None
        self.tokens: List[int] = []
        self._iter = self._run()

    def __iter__(self) -> "TextStream":
        return self

    def __next__(self) -> Tuple[Optional[int], str]:
        return next(self._iter)

    def _run(self) -> Iterator[Tuple[Optional[int], str]]:
        tok, decoder, matcher = self._tok, self._tok.stream(), self._matcher
        stop_set = None
        for t in self._tokens:
            if stop_set is None:  # the stop tokens have been checked by now
                stop_set = set(int(s) for s in self._stop_ids or ())
            self.tokens.append(t)
            if t in stop_set:
                self.finish_reason, self.stopped_by = "stop", t
                break
            if t >= tok.vocab_size:  # a vocabulary padded past the tokenizer's (nanoGPT's 50,304)
                raise ValueError(f"{self._fn}: the model generated token {t}, which its tokenizer "
                                 f"({tok.vocab_size} ids) has no text for")
            piece, stopped = matcher.push(decoder.push(t))
            yield t, piece
            if stopped:
                self.finish_reason, self.stopped_by = "stop", matcher.found
                self._tokens.close()
                yield None, ""
                return
        else:
            self.finish_reason = "length"
        piece, stopped = matcher.push(decoder.flush())
        if stopped:
            self.finish_reason, self.stopped_by = "stop", matcher.found
        yield None, piece + matcher.flush()


def stream_pieces(model: _TextModel, ids: np.ndarray, max_new_tokens: int, **options: Any) -> "TextStream":
    """``TextStream(model, ids, max_new_tokens, **options)`` (its earlier name)."""
    return TextStream(model, ids, max_new_tokens, **options)


def generate_text(model: _TextModel, prompt: str, max_new_tokens: int, **options: Any) -> str:
    """The continuation of ``prompt`` (without the prompt) as a string; arguments as in
    ``stream_text``."""
    ids = encode_prompt(model, prompt, "generate_text")
    return "".join(piece for _, piece in TextStream(model, ids, max_new_tokens, fn="generate_text", **options))


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

    The text is encoded (with what the tokenizer's post-processor adds: Llama 3's BOS, which
    is then the unscored first token) and scored with ``gptcore.scoring.score_ids``: every
    token but the first is scored once; a text longer than ``context`` (default ``n_ctx``) is cut into
    windows every ``stride`` tokens (default ``context // 2``), and each token after the first
    window is predicted from at least ``context - stride`` tokens before it.
    """
    tok = model._require_tokenizer("score_text")
    if not isinstance(text, str):
        raise TypeError(f"score_text: text must be a str, got {type(text).__name__}")
    ids = tok.encode(text, add_special_tokens=True)
    if ids.size < 2:
        raise ValueError(f"score_text: the text has {ids.size} token(s); scoring needs at least 2 "
                         "(the first token is never scored)")
    return score_ids(model, ids, context=context, stride=stride, batch=batch)
