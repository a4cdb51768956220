"""The HTTP side: a Starlette application with the OpenAI API's routes in front of an
``Engine``.

Routes: ``GET /health``, ``GET /metrics`` (Prometheus text), ``GET /v1/models``,
``POST /v1/completions``, ``POST /v1/chat/completions``. With an API key, the ``/v1`` routes
want ``Authorization: Bearer KEY`` (compared with ``hmac.compare_digest``, in constant time);
a missing or wrong one is a 401. ``/health`` and ``/metrics`` stay open (for the machine's
own probes).

A request is read (at most ``MAX_BODY`` bytes, else a 413) and checked (``request_parsing``;
a 400 naming the field), its sequences
are queued in the engine (a 503 with ``Retry-After`` when the queue is full), and the answer
is written as its tokens arrive: the whole answer, or server-sent events with ``stream``.
A client that disconnects has its sequences dropped before the engine's next step. A choice
that fails answers 500 (a streamed one ends with an error event), and nothing else is
touched.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from typing import Any, AsyncIterator, Dict, Optional

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .engine import Engine, EngineStopped, QueueFull
from .errors import APIError, error_body
from .event_stream import EventStreamResponse, wait_or_disconnect
from .job import Job
from .metrics import CONTENT_TYPE_LATEST, Metrics
from .openai_format import (
    chat_body,
    chat_chunk,
    completion_body,
    completion_chunk,
    usage_chunk,
)
from .request_parsing import GenerationRequest, ModelInfo, parse_chat, parse_completion
from .sequence import ErrorEvent, FinishEvent, TokenEvent

__all__ = ["build_app", "RETRY_AFTER"]

#: Seconds a refused client is asked to wait (``Retry-After`` of a 503).
RETRY_AFTER = 1
#: The largest request body read (a 413 beyond): a prompt at most a few hundred thousand
#: tokens long fits many times over.
MAX_BODY = 16 << 20


def _error(e: APIError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status, headers=e.headers)


def build_app(engine: Engine, info: ModelInfo, *, api_key: Optional[str] = None,
              metrics: Optional[Metrics] = None) -> Starlette:
    """The application serving ``engine``'s model as ``info.id``. ``app.state.cut_off``
    counts the requests cancelled by the server itself (its grace period at shutdown over)."""
    metrics = metrics if metrics is not None else (engine.metrics or Metrics())
    key = api_key.encode("utf-8") if api_key else None
    started = int(time.time())

    def cut_off() -> None:
        app.state.cut_off += 1

    def count(endpoint: str, status: int) -> None:
        metrics.requests.labels(endpoint=endpoint, status=str(status)).inc()

    def authorize(request: Request) -> None:
        if key is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        given = token.strip().encode("utf-8") if scheme.lower() == "bearer" else b""
        # compare_digest on bytes of any length: constant time in the key's content
        if not hmac.compare_digest(given, key):
            raise APIError(401, "Incorrect API key provided" if given else
                           "You didn't provide an API key (Authorization: Bearer KEY)",
                           code="invalid_api_key", type="invalid_request_error")

    async def health(request: Request) -> Response:
        count("/health", 200)
        return JSONResponse({"status": "ok", "model": info.id, "running": engine.running,
                             "waiting": engine.waiting})

    async def metrics_page(request: Request) -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    async def models(request: Request) -> Response:
        try:
            authorize(request)
        except APIError as e:
            count("/v1/models", e.status)
            return _error(e)
        count("/v1/models", 200)
        return JSONResponse({"object": "list", "data": [
            {"id": info.id, "object": "model", "created": started, "owned_by": "gptcore",
             "max_model_len": info.n_ctx}]})

    async def generate(request: Request, endpoint: str) -> Response:
        try:
            authorize(request)
            raw = await _read_body(request)
            try:
                body = json.loads(raw)
            except (ValueError, RecursionError) as e:
                raise APIError(400, f"The request body is not valid JSON: {e}", code="invalid_json") from None
            req = (parse_completion if endpoint == "/v1/completions" else parse_chat)(body, info)
            job = Job(req, info, engine, asyncio.get_running_loop())
            try:
                engine.submit(job.sequences)
            except QueueFull as e:
                raise APIError(503, f"The server is busy ({e}); retry after {RETRY_AFTER} s", code="overloaded",
                               headers={"Retry-After": str(RETRY_AFTER)}) from None
            except EngineStopped as e:
                raise APIError(503, f"The server is shutting down ({e})", code="shutting_down",
                               headers={"Retry-After": str(RETRY_AFTER)}) from None
        except APIError as e:
            count(endpoint, e.status)
            return _error(e)
        metrics.prompt_tokens.inc(int(req.prompt_ids.size))
        if req.stream:
            events = _completion_stream(job, info.id) if req.kind == "completion" else _chat_stream(job, info.id)
            count(endpoint, 200)
            return EventStreamResponse(events, on_disconnect=job.cancel, on_cut_off=cut_off)
        answered = await wait_or_disconnect(job.wait(), request.receive, job.cancel, cut_off)
        if not answered:
            count(endpoint, 499)  # the client closed the request (nginx's code): nobody to answer
            return Response(status_code=499)
        if job.failed is not None:
            e = APIError(500, f"The model failed on this request: {job.failed}", code="generation_failed")
            count(endpoint, 500)
            return _error(e)
        count(endpoint, 200)
        body = completion_body(job, info.id) if req.kind == "completion" else chat_body(job, info.id)
        return JSONResponse(body)

    async def completions(request: Request) -> Response:
        return await generate(request, "/v1/completions")

    async def chat_completions(request: Request) -> Response:
        return await generate(request, "/v1/chat/completions")

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics_page, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        msg = "Method not allowed" if status == 405 else f"Unknown route {request.method} {request.url.path}"
        return JSONResponse(error_body(msg, "invalid_request_error", None, "not_found" if status == 404 else None),
                            status_code=status)

    async def server_error(request: Request, exc: Exception) -> Response:
        return JSONResponse(error_body(f"Internal error: {type(exc).__name__}: {exc}", "server_error"), status_code=500)

    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: not_found, 500: server_error})
    app.state.cut_off = 0  # requests the server cut off at shutdown (grace period over)
    return app


async def _read_body(request: Request) -> bytes:
    """The request's body, refused (413) past ``MAX_BODY`` bytes before more is read."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
        raise APIError(413, f"The request body is {int(declared):,} bytes; at most {MAX_BODY:,} are accepted",
                       code="request_too_large")
    parts, size = [], 0
    async for part in request.stream():
        size += len(part)
        if size > MAX_BODY:
            raise APIError(413, f"The request body is over {MAX_BODY:,} bytes", code="request_too_large")
        parts.append(part)
    return b"".join(parts)


def _stream_error(job: Job, index: int, message: str) -> Dict[str, Any]:
    return error_body(f"The model failed on this request (choice {index}): {message}", "server_error", None,
                      "generation_failed")


async def _completion_stream(job: Job, model: str) -> AsyncIterator[Dict[str, Any]]:
    """The chunks of a streamed completion: one per generated token with text or
    log-probabilities, the echoed prompt first, a last one per choice with its
    ``finish_reason`` (the last of all with ``usage``), and with ``include_usage`` a final
    chunk with no choices and the usage."""
    req: GenerationRequest = job.request
    first = [True] * req.n
    if req.echo and req.logprobs is None:
        for i in range(req.n):
            first[i] = False
            yield completion_chunk(job, model, i, req.prompt_text)
    while not job.finished:
        ev = await job.next_event()
        i = ev.index
        if isinstance(ev, TokenEvent):
            if ev.text or req.logprobs is not None:
                text = ev.text
                if first[i] and req.echo:
                    text = req.prompt_text + text
                yield completion_chunk(job, model, i, text, [ev.token], [ev.logprob], [ev.top], first=first[i])
                first[i] = False
        elif isinstance(ev, FinishEvent):
            chunk = completion_chunk(job, model, i, (req.prompt_text if first[i] and req.echo else "") + ev.text,
                                     finish_reason=ev.finish_reason)
            if job.finished and not req.include_usage:
                chunk["usage"] = job.usage()
            yield chunk
        elif isinstance(ev, ErrorEvent):
            yield _stream_error(job, i, ev.message)
    if req.include_usage:
        yield usage_chunk(job, model)


async def _chat_stream(job: Job, model: str) -> AsyncIterator[Dict[str, Any]]:
    """The chunks of a streamed chat answer: the role first, then one content delta per
    token with text or log-probabilities, a last chunk per choice with its ``finish_reason``
    (the last of all with ``usage``), and with ``include_usage`` a final chunk with no choices
    and the usage."""
    req: GenerationRequest = job.request
    for i in range(req.n):
        yield chat_chunk(job, model, i, {"role": "assistant", "content": ""})
    while not job.finished:
        ev = await job.next_event()
        i = ev.index
        if isinstance(ev, TokenEvent):
            if ev.text or req.logprobs is not None:
                yield chat_chunk(job, model, i, {"content": ev.text}, [ev.token], [ev.logprob], [ev.top])
        elif isinstance(ev, FinishEvent):
            chunk = chat_chunk(job, model, i, {"content": ev.text} if ev.text else {}, finish_reason=ev.finish_reason)
            if job.finished and not req.include_usage:
                chunk["usage"] = job.usage()
            yield chunk
        elif isinstance(ev, ErrorEvent):
            yield _stream_error(job, i, ev.message)
    if req.include_usage:
        yield usage_chunk(job, model)
