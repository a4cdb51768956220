"""The answers' JSON, shaped as the OpenAI API shapes them: whole answers
(``completion_body``, ``chat_body``) and the chunks of a stream (``completion_chunk``,
``chat_chunk``), with ``usage`` and log-probabilities.

Log-probabilities are the model's own (``log_softmax`` of its logits, temperature 1): the
chosen token's and, with ``logprobs`` (completions) or ``top_logprobs`` (chat), the most
likely alternatives, most likely first. A token's text is its decoding alone (a piece of a
character decodes to U+FFFD, as the API shows it); chat also gives its bytes. Completions'
``text_offset`` counts characters from the start of the prompt. A token that ended a choice
(an end-of-sequence id or one of ``stop_token_ids``) is counted in ``usage`` but has no text
and no log-probability entry.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from ..tokenizer import Tokenizer
from .job import ChoiceState, Job

__all__ = ["completion_body", "chat_body", "completion_chunk", "chat_chunk", "usage_chunk", "token_text",
           "token_bytes"]


def _byte_decoder() -> Dict[str, int]:
    """GPT-2's byte-level alphabet, character -> byte (the inverse of ``bytes_to_unicode``)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) \
        + list(range(ord("\u00ae"), ord("\u00ff") + 1))
    out = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in printable:
            out[chr(256 + extra)] = b
            extra += 1
    return out


_BYTES = _byte_decoder()


def token_text(tok: Tokenizer, token: int) -> str:
    """The token's text, decoded alone."""
    return tok.decode([token])


def token_bytes(tok: Tokenizer, token: int) -> List[int]:
    """The token's bytes: through the byte-level alphabet for a byte-level BPE token (a piece
    of a character keeps its real bytes), else the UTF-8 of its text."""
    piece = tok.backend.id_to_token(int(token))
    if piece is not None and piece and all(ch in _BYTES for ch in piece) \
            and type(tok.backend.decoder).__name__ == "ByteLevel":
        return [_BYTES[ch] for ch in piece]
    return list(token_text(tok, token).encode("utf-8"))


def _top_dict(tok: Tokenizer, top: Optional[Sequence]) -> Optional[Dict[str, float]]:
    out: Dict[str, float] = {}
    for i, lp in top or ():
        out.setdefault(token_text(tok, i), lp)  # two ids with one text: the more likely one's value
    return out


def completion_logprobs(tok: Tokenizer, tokens: Sequence[int], logprobs: Sequence[Optional[float]],
                        top: Sequence[Optional[Sequence]], offset: int) -> Dict[str, Any]:
    """``choices[i].logprobs`` of a completion: the lists of ``tokens``, ``token_logprobs``,
    ``top_logprobs`` and ``text_offset``, the first offset being ``offset``."""
    texts = [token_text(tok, t) for t in tokens]
    offsets, at = [], offset
    for t in texts:
        offsets.append(at)
        at += len(t)
    tops: List[Optional[Dict[str, float]]] = []
    for lp, tp in zip(logprobs, top):
        tops.append(None if lp is None else _top_dict(tok, tp))
    return {"tokens": texts, "token_logprobs": list(logprobs), "top_logprobs": tops, "text_offset": offsets}


def chat_logprobs(tok: Tokenizer, tokens: Sequence[int], logprobs: Sequence[float],
                  top: Sequence[Optional[Sequence]]) -> Dict[str, Any]:
    """``choices[i].logprobs`` of a chat answer: ``{"content": [{"token", "logprob",
    "bytes", "top_logprobs"}, ...]}``."""
    content = []
    for t, lp, tp in zip(tokens, logprobs, top):
        alts = [{"token": token_text(tok, i), "logprob": v, "bytes": token_bytes(tok, i)} for i, v in (tp or ())]
        content.append({"token": token_text(tok, t), "logprob": lp, "bytes": token_bytes(tok, t), "top_logprobs": alts})
    return {"content": content, "refusal": None}


def _completion_choice_logprobs(job: Job, c: ChoiceState, tokens, logprobs, top, first: bool) -> Optional[dict]:
    """A completion choice's (or chunk's) logprobs; with echo, the prompt's tokens lead the
    first one."""
    req = job.request
    if req.logprobs is None:
        return None
    tok = job.info.tokenizer
    if req.echo and first and c.prompt is not None:
        p = c.prompt
        tokens = list(p.tokens) + list(tokens)
        logprobs = list(p.logprobs) + list(logprobs)
        top = list(p.top) + list(top)
        return completion_logprobs(tok, tokens, logprobs, top, 0)
    done = "".join(c.text[:-len(tokens)] if tokens else c.text) if not first else ""
    return completion_logprobs(tok, tokens, logprobs, top, len(req.prompt_text) + len(done))


def completion_body(job: Job, model: str) -> Dict[str, Any]:
    """The whole answer of ``POST /v1/completions``."""
    req = job.request
    choices = []
    for i, c in enumerate(job.choices):
        text = "".join(c.text)
        if req.echo:
            text = req.prompt_text + text
        lp = _completion_choice_logprobs(job, c, c.tokens, c.logprobs, c.top, True)
        choices.append({"index": i, "text": text, "logprobs": lp, "finish_reason": c.finish_reason})
    return {"id": job.id, "object": "text_completion", "created": job.created, "model": model, "choices": choices,
            "usage": job.usage(), "system_fingerprint": None}


def chat_body(job: Job, model: str) -> Dict[str, Any]:
    """The whole answer of ``POST /v1/chat/completions``."""
    req = job.request
    tok = job.info.tokenizer
    choices = []
    for i, c in enumerate(job.choices):
        lp = chat_logprobs(tok, c.tokens, c.logprobs, c.top) if req.logprobs is not None else None
        choices.append({"index": i, "message": {"role": "assistant", "content": "".join(c.text), "refusal": None},
                        "logprobs": lp, "finish_reason": c.finish_reason})
    return {"id": job.id, "object": "chat.completion", "created": job.created, "model": model, "choices": choices,
            "usage": job.usage(), "system_fingerprint": None}


def completion_chunk(job: Job, model: str, index: int, text: str, tokens: Sequence[int] = (),
                     logprobs: Sequence[float] = (), top: Sequence = (), finish_reason: Optional[str] = None,
                     first: bool = False) -> Dict[str, Any]:
    """One chunk of a streamed completion: choice ``index``'s new ``text`` (and the logprobs
    of its new ``tokens``)."""
    c = job.choices[index]
    lp = None
    if job.request.logprobs is not None and (tokens or first):
        lp = _completion_choice_logprobs(job, c, tokens, logprobs, top, first)
    choice = {"index": index, "text": text, "logprobs": lp, "finish_reason": finish_reason}
    return {"id": job.id, "object": "text_completion", "created": job.created, "model": model, "choices": [choice]}


def chat_chunk(job: Job, model: str, index: int, delta: Dict[str, Any], tokens: Sequence[int] = (),
               logprobs: Sequence[float] = (), top: Sequence = (), finish_reason: Optional[str] = None
               ) -> Dict[str, Any]:
    """One chunk of a streamed chat answer: choice ``index``'s ``delta``."""
    lp = None
    if job.request.logprobs is not None and tokens:
        lp = chat_logprobs(job.info.tokenizer, tokens, logprobs, top)
    choice = {"index": index, "delta": delta, "logprobs": lp, "finish_reason": finish_reason}
    return {"id": job.id, "object": "chat.completion.chunk", "created": job.created, "model": model,
            "choices": [choice]}


def usage_chunk(job: Job, model: str) -> Dict[str, Any]:
    """The last chunk of a stream: no choices, the request's ``usage``."""
    obj = "text_completion" if job.request.kind == "completion" else "chat.completion.chunk"
    return {"id": job.id, "object": obj, "created": job.created, "model": model, "choices": [],
            "usage": job.usage()}
