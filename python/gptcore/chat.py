"""Conversations: a chat model's reply to a list of messages.

``chat`` and ``stream_chat`` (also ``gptcore.Model.chat`` and ``gptcore.Model.stream_chat``)
render the conversation with the tokenizer's chat template (``add_generation_prompt=True``:
the text ends where the assistant's turn begins), encode it as transformers does (the
template writes the special tokens itself, so none are added), and generate until one of the
tokenizer's ``eos_ids`` (``<|eot_id|>``, ``<|im_end|>``, ...) or ``max_new_tokens``. The reply
is the generated text without the end-of-turn token.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, Mapping, Optional, Protocol, Sequence

import numpy as np

from .text import stream_pieces
from .tokenizer import Tokenizer

__all__ = ["chat", "stream_chat", "chat_ids"]


class _ChatModel(Protocol):
    """What these functions use of a model: ``gptcore.Model`` is one. (A protocol, so that
    this module does not import ``gptcore.model``, which imports it.)"""

    def _require_tokenizer(self, fn: str) -> Tokenizer:
        """The model's tokenizer, or a ``ValueError`` from ``fn`` saying why it has none."""
        ...

    def stream(self, ids: Any, max_new_tokens: int, **options: Any) -> Iterator[Any]:
        """``gptcore.Model.stream``: the generated token ids one at a time."""
        ...


def chat_ids(model: _ChatModel, messages: Sequence[Mapping[str, Any]], fn: str = "chat",
             template_options: Optional[Dict[str, Any]] = None) -> np.ndarray:
    """The ids of ``messages`` rendered with the generation prompt (the prompt of the
    assistant's next turn)."""
    tok = model._require_tokenizer(fn)
    text = tok.apply_chat_template(messages, add_generation_prompt=True, **(template_options or {}))
    ids = tok.encode(text)
    if ids.size == 0:
        raise ValueError(f"{fn}: the chat template rendered the conversation as empty text")
    return ids


def stream_chat(
    model: _ChatModel,
    messages: Sequence[Mapping[str, Any]],
    max_new_tokens: int = 256,
    *,
    template_options: Optional[Dict[str, Any]] = None,
    **options: Any,
) -> Iterator[str]:
    """Yield the assistant's reply to ``messages`` (a list of ``{"role": ..., "content":
    ...}`` dicts) as it is generated, in pieces of whole characters.

    ``options`` are those of ``gptcore.Model.generate`` (``temperature``, ``top_k``,
    ``top_p``, ``greedy``, ``seed``, ``stop_tokens``, ``context_shift``); generation also
    stops at the tokenizer's ``eos_ids``. ``template_options`` are further variables of the
    template (``date_string``, ``tools``, ``template`` to pick a named one, ...).
    """
    ids = chat_ids(model, messages, "stream_chat", template_options)
    for _, piece in stream_pieces(model, ids, max_new_tokens, stop_at_eos=True, **options):
        if piece:
            yield piece


def chat(
    model: _ChatModel,
    messages: Sequence[Mapping[str, Any]],
    max_new_tokens: int = 256,
    **options: Any,
) -> str:
    """The assistant's reply to ``messages`` as one string; arguments as in
    ``stream_chat``."""
    return "".join(stream_chat(model, messages, max_new_tokens, **options))
