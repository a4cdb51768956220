"""Reading the body of an OpenAI request: every field checked, every problem a 400 naming it.

``parse_completion`` reads ``POST /v1/completions`` and ``parse_chat`` reads ``POST
/v1/chat/completions``; both return a ``GenerationRequest`` (the prompt as token ids, the
sampling parameters, the stop conditions and what the answer must hold) or raise
``APIError``.

The rules, as the OpenAI API applies them:

- A field the API does not know is a 400 ``Unrecognized request argument supplied: NAME``.
  Fields it knows that this server does not implement (``suffix``, ``tools``, a
  ``response_format`` other than text, ...) are a 400 naming the field when they ask for
  something; null or their default is accepted.
- Types are JSON's: an integer field refuses ``true`` and ``1.5``; a number field refuses a
  string.
- ``model`` is required and must be the served model's id (else a 404 ``model_not_found``).
- ``max_tokens`` (chat: also ``max_completion_tokens``) must be >= 1. A prompt that fills the
  context (``n_ctx`` tokens or more) is a 400 ``context_length_exceeded``; a ``max_tokens``
  that would run past the context is lowered to what fits (the answer's ``finish_reason``
  then says ``length`` when it is reached). Default: 16 for completions (OpenAI's), the rest
  of the context for chat.
- ``n`` (1 to 16) choices: choice ``i`` of a request with ``seed`` draws from its own
  generator seeded with ``seed + i``, so every choice is reproducible on its own.

Extensions beside OpenAI's fields (the names vLLM uses): ``top_k``, ``min_p``,
``repetition_penalty`` and ``stop_token_ids`` (ids that end a choice, beside the model's
end-of-sequence ids).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from ..sampling import SamplingParams
from ..tokenizer import Tokenizer
from .errors import APIError, invalid

__all__ = ["GenerationRequest", "ModelInfo", "parse_completion", "parse_chat", "MAX_N", "MAX_LOGPROBS", "MAX_STOP"]

#: Most choices per request (``n``).
MAX_N = 16
#: Most alternatives per token (``logprobs`` of completions, ``top_logprobs`` of chat).
MAX_LOGPROBS = 20
#: Most stop strings (OpenAI's limit).
MAX_STOP = 4

_SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty",
                    "repetition_penalty", "logit_bias", "seed", "stop", "stop_token_ids")
_COMMON = ("model", "max_tokens", "n", "stream", "stream_options", "user") + _SAMPLING_FIELDS
_COMPLETION_FIELDS = frozenset(_COMMON + ("prompt", "echo", "logprobs", "best_of", "suffix"))
_CHAT_FIELDS = frozenset(_COMMON + (
    "messages", "logprobs", "top_logprobs", "max_completion_tokens", "response_format", "tools", "tool_choice",
    "parallel_tool_calls", "functions", "function_call", "store", "metadata", "service_tier", "modalities",
    "audio", "prediction", "reasoning_effort", "web_search_options"))


@dataclass(frozen=True)
class ModelInfo:
    """What request checks need of the served model: its id, context, vocabulary, tokenizer
    and end-of-sequence ids."""

    id: str
    n_ctx: int
    vocab_size: int
    tokenizer: Tokenizer
    eos_ids: Tuple[int, ...]


@dataclass
class GenerationRequest:
    """A checked request. ``prompt_ids`` is the prompt as the model sees it; ``max_tokens``
    the most tokens per choice after the context clamp; ``params`` the sampling parameters
    of choice 0 (choice ``i`` has ``seed + i``); ``stop_ids`` every id that ends a choice (the
    model's end-of-sequence ids and ``stop_token_ids``); ``logprobs`` the number of
    alternatives per token, or None for no log-probabilities; ``echo`` (completions) puts
    the prompt before the text and its tokens before the logprobs."""

    kind: str  # "completion" or "chat"
    prompt_ids: np.ndarray
    prompt_text: str
    max_tokens: int
    params: SamplingParams
    stop: Tuple[str, ...]
    stop_ids: Tuple[int, ...]
    n: int = 1
    stream: bool = False
    include_usage: bool = False
    logprobs: Optional[int] = None
    echo: bool = False

    def choice_params(self, index: int) -> SamplingParams:
        """The sampling parameters of choice ``index``: its own seed ``seed + index``."""
        if self.params.seed is None or index == 0:
            return self.params
        return replace(self.params, seed=self.params.seed + index)


# ------------------------------------------------------------------------------ JSON types

def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _type_name(v: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null",
            int: "an integer", float: "a number"}.get(type(v), type(v).__name__)


def _int(body: Mapping[str, Any], name: str, default: Any, lo: Optional[int] = None,
         hi: Optional[int] = None) -> Any:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if not _is_int(v):
        raise invalid(f"{_type_name(v).capitalize()} is not a valid integer for '{name}': expected an integer, "
                      f"got {v!r}", name, "invalid_type")
    if lo is not None and v < lo:
        raise invalid(f"'{name}' must be at least {lo}, got {v}", name, "invalid_value")
    if hi is not None and v > hi:
        raise invalid(f"'{name}' must be at most {hi}, got {v}", name, "invalid_value")
    return v


def _number(body: Mapping[str, Any], name: str, default: Any, lo: float, hi: float,
            lo_open: bool = False) -> Any:
    v = body.get(name)
    if v is None:
        return default
    if not _is_number(v):
        raise invalid(f"'{name}' must be a number, got {_type_name(v)} ({v!r})", name, "invalid_type")
    v = float(v)
    if not math.isfinite(v) or v > hi or (v <= lo if lo_open else v < lo):
        bounds = f"({lo:g}, {hi:g}]" if lo_open else f"[{lo:g}, {hi:g}]"
        raise invalid(f"'{name}' must be in {bounds}, got {v:g}", name, "invalid_value")
    return v


def _bool(body: Mapping[str, Any], name: str, default: bool) -> bool:
    v = body.get(name)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise invalid(f"'{name}' must be a boolean, got {_type_name(v)} ({v!r})", name, "invalid_type")
    return v


def _not_supported(body: Mapping[str, Any], name: str, allowed: Tuple[Any, ...] = (None,), why: str = "") -> None:
    if name in body and body[name] not in allowed:
        raise invalid(f"'{name}' is not supported by this server{why}", name, "unsupported_parameter")


# ------------------------------------------------------------------------------ the fields

def _check_fields(body: Any, allowed: frozenset) -> Dict[str, Any]:
    if not isinstance(body, dict):
        raise invalid(f"The request body must be a JSON object, got {_type_name(body)}", None, "invalid_body")
    for name in body:
        if name not in allowed:
            raise invalid(f"Unrecognized request argument supplied: {name}", name, "unknown_parameter")
    return body


def _check_model(body: Mapping[str, Any], info: ModelInfo) -> None:
    model = body.get("model")
    if model is None:
        raise invalid("you must provide a model parameter", "model", "missing_required_parameter")
    if not isinstance(model, str):
        raise invalid(f"'model' must be a string, got {_type_name(model)}", "model", "invalid_type")
    if model != info.id:
        raise APIError(404, f"The model '{model}' does not exist; this server serves '{info.id}'", param="model",
                       code="model_not_found")


def _stop(body: Mapping[str, Any]) -> Tuple[str, ...]:
    v = body.get("stop")
    if v is None:
        return ()
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list):
        raise invalid(f"'stop' must be a string or an array of strings, got {_type_name(v)}", "stop", "invalid_type")
    if len(items) > MAX_STOP:
        raise invalid(f"'stop' holds {len(items)} strings; at most {MAX_STOP} are allowed", "stop", "invalid_value")
    out: List[str] = []
    for i, s in enumerate(items):
        where = "stop" if isinstance(v, str) else f"stop[{i}]"
        if not isinstance(s, str):
            raise invalid(f"'{where}' must be a string, got {_type_name(s)}", where, "invalid_type")
        if s == "":
            raise invalid(f"'{where}' is empty (it would stop before the first token)", where, "invalid_value")
        if s not in out:
            out.append(s)
    return tuple(out)


def _token_id_list(value: Any, name: str, vocab: int) -> List[int]:
    if not isinstance(value, list):
        raise invalid(f"'{name}' must be an array of token ids, got {_type_name(value)}", name, "invalid_type")
    for i, t in enumerate(value):
        if not _is_int(t):
            raise invalid(f"'{name}[{i}]' must be an integer token id, got {_type_name(t)} ({t!r})", f"{name}[{i}]",
                          "invalid_type")
        if not 0 <= t < vocab:
            raise invalid(f"'{name}[{i}]': token id {t} is out of range [0, {vocab})", f"{name}[{i}]",
                          "invalid_value")
    return [int(t) for t in value]


def _sampling(body: Mapping[str, Any], info: ModelInfo) -> SamplingParams:
    temperature = _number(body, "temperature", 1.0, 0.0, 2.0)
    top_p = _number(body, "top_p", 1.0, 0.0, 1.0, lo_open=True)
    top_k = _int(body, "top_k", None, 1)
    if top_k is not None and top_k >= info.vocab_size:
        top_k = None  # every token survives
    min_p = _number(body, "min_p", None, 0.0, 1.0)
    freq = _number(body, "frequency_penalty", 0.0, -2.0, 2.0)
    pres = _number(body, "presence_penalty", 0.0, -2.0, 2.0)
    rep = _number(body, "repetition_penalty", 1.0, 0.0, 10.0, lo_open=True)
    seed = _int(body, "seed", None, 0, 2 ** 63 - 1 - MAX_N)
    bias = body.get("logit_bias")
    if bias is not None:
        if not isinstance(bias, dict):
            raise invalid(f"'logit_bias' must be an object mapping token ids to biases, got {_type_name(bias)}",
                          "logit_bias", "invalid_type")
        for key, value in bias.items():
            where = f"logit_bias[{key}]"
            if not key.strip().lstrip("+-").isdigit():
                raise invalid(f"'logit_bias': key {key!r} is not a token id", "logit_bias", "invalid_value")
            if not 0 <= int(key) < info.vocab_size:
                raise invalid(f"'logit_bias': token id {int(key)} is out of range [0, {info.vocab_size})",
                              "logit_bias", "invalid_value")
            if not _is_number(value) or not -100 <= value <= 100:
                raise invalid(f"'{where}' must be a number in [-100, 100], got {value!r}", "logit_bias",
                              "invalid_value")
    try:
        return SamplingParams(temperature=temperature, top_p=None if top_p == 1.0 else top_p, top_k=top_k,
                              min_p=min_p, frequency_penalty=freq, presence_penalty=pres, repetition_penalty=rep,
                              logit_bias=bias, seed=seed)
    except (TypeError, ValueError) as e:  # the checks above should have caught it: name what SamplingParams says
        name = str(e).split(" ", 1)[0].split(":", 1)[0].split("[", 1)[0]
        raise invalid(str(e), name if name in _SAMPLING_FIELDS else None, "invalid_value") from None


def _max_tokens(body: Mapping[str, Any], names: Tuple[str, ...], default: int, prompt_len: int, info: ModelInfo,
                prompt_field: str) -> int:
    room = info.n_ctx - prompt_len
    if room < 1:
        raise invalid(f"The prompt is {prompt_len} tokens long; this model's context is {info.n_ctx} tokens, which "
                      "leaves no room for a completion. Shorten the prompt.", prompt_field, "context_length_exceeded")
    asked = None
    for name in names:
        v = _int(body, name, None, 1)
        if v is not None:
            asked = v
    return min(default if asked is None else asked, room)


def _common(body: Mapping[str, Any], info: ModelInfo, kind: str, prompt_ids: np.ndarray, prompt_text: str,
            prompt_field: str) -> GenerationRequest:
    params = _sampling(body, info)
    stop = _stop(body)
    extra_ids = _token_id_list(body["stop_token_ids"], "stop_token_ids", info.vocab_size) \
        if body.get("stop_token_ids") is not None else []
    stop_ids = tuple(dict.fromkeys(list(info.eos_ids) + extra_ids))
    n = _int(body, "n", 1, 1, MAX_N)
    stream = _bool(body, "stream", False)
    include_usage = False
    opts = body.get("stream_options")
    if opts is not None:
        if not stream:
            raise invalid("'stream_options' is only allowed when 'stream' is true", "stream_options", "invalid_value")
        if not isinstance(opts, dict):
            raise invalid(f"'stream_options' must be an object, got {_type_name(opts)}", "stream_options",
                          "invalid_type")
        for key in opts:
            if key not in ("include_usage", "continuous_usage_stats"):
                raise invalid(f"Unrecognized stream option: {key}", f"stream_options.{key}", "unknown_parameter")
        include_usage = _bool(opts, "include_usage", False)
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise invalid(f"'user' must be a string, got {_type_name(user)}", "user", "invalid_type")
    default = 16 if kind == "completion" else info.n_ctx
    names = ("max_tokens",) if kind == "completion" else ("max_tokens", "max_completion_tokens")
    max_tokens = _max_tokens(body, names, default, prompt_ids.size, info, prompt_field)
    return GenerationRequest(kind=kind, prompt_ids=prompt_ids, prompt_text=prompt_text, max_tokens=max_tokens,
                             params=params, stop=stop, stop_ids=stop_ids, n=n, stream=stream,
                             include_usage=include_usage)


# ------------------------------------------------------------------------------ the endpoints

def parse_completion(body: Any, info: ModelInfo) -> GenerationRequest:
    """``POST /v1/completions``: ``prompt`` is a string, an array of token ids, or an array
    holding one of those (one prompt per request)."""
    body = _check_fields(body, _COMPLETION_FIELDS)
    _check_model(body, info)
    _not_supported(body, "suffix", (None, ""))
    _not_supported(body, "best_of", (None, 1), " (only best_of = 1)")
    if "prompt" not in body or body["prompt"] is None:
        raise invalid("you must provide a prompt parameter", "prompt", "missing_required_parameter")
    prompt = body["prompt"]
    where = "prompt"
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
        if len(prompt) != 1:
            raise invalid(f"'prompt' holds {len(prompt)} prompts; this server takes one prompt per request "
                          "(send one request each)", "prompt", "unsupported_value")
        prompt, where = prompt[0], "prompt[0]"
    tok = info.tokenizer
    if isinstance(prompt, str):
        ids = tok.encode(prompt, add_special_tokens=True)
        text = prompt
    elif isinstance(prompt, list):
        ids = np.array(_token_id_list(prompt, where, info.vocab_size), dtype=np.int64)
        if ids.size and int(ids.max()) >= tok.vocab_size:
            bad = int(ids.max())
            raise invalid(f"'{where}': token id {bad} has no text in the tokenizer ({tok.vocab_size} ids)", where,
                          "invalid_value")
        text = tok.decode(ids)
    else:
        raise invalid(f"'prompt' must be a string, an array of token ids or an array of one of those, got "
                      f"{_type_name(prompt)}", "prompt", "invalid_type")
    if ids.size == 0:
        raise invalid("'prompt' is empty: there is nothing to continue", where, "invalid_value")
    req = _common(body, info, "completion", np.asarray(ids, dtype=np.int64), text, where)
    lp = body.get("logprobs")
    if isinstance(lp, bool):
        raise invalid("'logprobs' of a completion is the number of alternatives per token (an integer), not a "
                      "boolean", "logprobs", "invalid_type")
    req.logprobs = _int(body, "logprobs", None, 0, MAX_LOGPROBS)
    req.echo = _bool(body, "echo", False)
    return req


def _message_text(m: Mapping[str, Any], i: int) -> Optional[str]:
    content = m.get("content")
    where = f"messages[{i}].content"
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise invalid(f"'{where}[{j}]' must be a text part {{\"type\": \"text\", \"text\": ...}}; this "
                              "server reads text only", f"{where}[{j}]", "invalid_value")
            parts.append(part["text"])
        return "".join(parts)
    raise invalid(f"'{where}' must be a string or an array of text parts, got {_type_name(content)}", where,
                  "invalid_type")


def parse_chat(body: Any, info: ModelInfo) -> GenerationRequest:
    """``POST /v1/chat/completions``: ``messages`` rendered with the model's chat template
    (a 400 when the model has none) and the generation prompt of the assistant's turn."""
    body = _check_fields(body, _CHAT_FIELDS)
    _check_model(body, info)
    for name in ("tools", "functions", "tool_choice", "function_call", "audio", "prediction",
                 "web_search_options", "reasoning_effort", "service_tier"):
        _not_supported(body, name, (None, [], "none", "auto") if name in ("tools", "functions", "tool_choice",
                                                                          "function_call", "service_tier") else (None,))
    _not_supported(body, "modalities", (None, ["text"]))
    rf = body.get("response_format")
    if rf is not None and rf != {"type": "text"}:
        raise invalid("'response_format' is not supported by this server (only {\"type\": \"text\"})",
                      "response_format", "unsupported_parameter")
    for name in ("store", "parallel_tool_calls"):
        _bool(body, name, False)
    if body.get("metadata") is not None and not isinstance(body["metadata"], dict):
        raise invalid("'metadata' must be an object", "metadata", "invalid_type")
    messages = body.get("messages")
    if messages is None:
        raise invalid("you must provide a messages parameter", "messages", "missing_required_parameter")
    if not isinstance(messages, list):
        raise invalid(f"'messages' must be an array of messages, got {_type_name(messages)}", "messages",
                      "invalid_type")
    if not messages:
        raise invalid("'messages' is empty: the conversation needs at least one message", "messages", "invalid_value")
    plain = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise invalid(f"'messages[{i}]' must be an object, got {_type_name(m)}", f"messages[{i}]", "invalid_type")
        role = m.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            raise invalid(f"'messages[{i}].role' must be one of 'system', 'developer', 'user', 'assistant', 'tool'; "
                          f"got {role!r}", f"messages[{i}].role", "invalid_value")
        text = _message_text(m, i)
        if text is None and role != "assistant":
            raise invalid(f"'messages[{i}].content' is required for a {role} message", f"messages[{i}].content",
                          "missing_required_parameter")
        plain.append({"role": "system" if role == "developer" else role, "content": text or ""})
    tok = info.tokenizer
    if tok.chat_template is None:
        raise invalid(f"The model '{info.id}' has no chat template (tokenizer_config.json's chat_template, or "
                      "chat_template.jinja), so it cannot answer chat requests; use /v1/completions",
                      "messages", "chat_template_missing")
    try:
        text = tok.apply_chat_template(plain, add_generation_prompt=True)
    except ValueError as e:  # the template refused the conversation (raise_exception) or failed
        raise invalid(f"The chat template refused the conversation: {e}", "messages", "invalid_value") from None
    ids = tok.encode(text)
    if ids.size == 0:
        raise invalid("The chat template rendered the conversation as empty text", "messages", "invalid_value")
    req = _common(body, info, "chat", ids, text, "messages")
    want = _bool(body, "logprobs", False)
    top = _int(body, "top_logprobs", None, 0, MAX_LOGPROBS)
    if top is not None and not want:
        raise invalid("'top_logprobs' needs 'logprobs' set to true", "top_logprobs", "invalid_value")
    req.logprobs = (top or 0) if want else None
    return req
