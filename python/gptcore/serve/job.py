"""One request in flight: its sequences (one per choice) in the engine, and what they have
produced so far, read on the request's event loop.

The engine's thread hands each event to the loop (``call_soon_threadsafe``); the request's
task reads them with ``next_event`` and the job keeps, per choice, the text, the tokens and
their log-probabilities, and how it ended (``ChoiceState``). ``cancel`` drops the sequences
(a client that went away): the engine frees them before its next step.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, List, Optional

from .engine import Engine
from .request_parsing import GenerationRequest, ModelInfo
from .sequence import ErrorEvent, FinishEvent, PromptLogprobs, Sequence, TokenEvent, Top

__all__ = ["Job", "ChoiceState"]


@dataclass
class ChoiceState:
    """What one choice has produced: ``text`` (the pieces released), the generated
    ``tokens`` with their ``logprobs`` and ``top`` alternatives, the prompt's (with echo),
    ``finish_reason`` and ``completion_tokens`` once finished, ``error`` if it failed."""

    text: List[str] = field(default_factory=list)
    tokens: List[int] = field(default_factory=list)
    logprobs: List[float] = field(default_factory=list)
    top: List[Optional[Top]] = field(default_factory=list)
    prompt: Optional[PromptLogprobs] = None
    finish_reason: Optional[str] = None
    completion_tokens: int = 0
    error: Optional[str] = None
    first_token_at: Optional[float] = None


class Job:
    """The sequences of ``request`` and their results (see the module). ``loop`` is the event
    loop of the request's task."""

    def __init__(self, request: GenerationRequest, info: ModelInfo, engine: Engine,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.request = request
        self.info = info
        self.engine = engine
        self.loop = loop
        self.queue: "asyncio.Queue[Any]" = asyncio.Queue()
        prefix = "cmpl" if request.kind == "completion" else "chatcmpl"
        self.id = f"{prefix}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.choices = [ChoiceState() for _ in range(request.n)]
        self.open = request.n
        self.sequences = [
            Sequence(i, request.prompt_ids, request.max_tokens, request.choice_params(i), request.stop,
                     request.stop_ids, info.tokenizer, info.vocab_size, request.logprobs, request.echo, self._sink)
            for i in range(request.n)]

    def _sink(self, event: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, event)
        except RuntimeError:  # the loop has closed: nobody is reading any more
            pass

    @property
    def finished(self) -> bool:
        return self.open == 0

    @property
    def failed(self) -> Optional[str]:
        """The first choice's error message, if any choice failed."""
        return next((c.error for c in self.choices if c.error is not None), None)

    @property
    def completion_tokens(self) -> int:
        return sum(c.completion_tokens for c in self.choices)

    def usage(self) -> dict:
        p, c = int(self.request.prompt_ids.size), self.completion_tokens
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}

    async def next_event(self) -> Any:
        """The next event of any choice, recorded in its ``ChoiceState``."""
        ev = await self.queue.get()
        c = self.choices[ev.index]
        if isinstance(ev, TokenEvent):
            c.tokens.append(ev.token)
            c.logprobs.append(ev.logprob)
            c.top.append(ev.top)
            c.text.append(ev.text)
            c.completion_tokens += 1
            if c.first_token_at is None:
                c.first_token_at = time.perf_counter()
        elif isinstance(ev, PromptLogprobs):
            c.prompt = ev
        elif isinstance(ev, FinishEvent):
            c.text.append(ev.text)
            c.finish_reason = ev.finish_reason
            c.completion_tokens = ev.completion_tokens
            self.open -= 1
        elif isinstance(ev, ErrorEvent):
            c.error = ev.message
            self.open -= 1
        return ev

    async def wait(self) -> None:
        """Until every choice has finished or failed."""
        while self.open:
            await self.next_event()

    def cancel(self) -> None:
        """Drop the sequences still running (their client has gone)."""
        live = [s for s in self.sequences if not s.done]
        if live:
            self.engine.cancel(live)
            if self.engine.metrics is not None:
                self.engine.metrics.cancelled.inc(len(live))
