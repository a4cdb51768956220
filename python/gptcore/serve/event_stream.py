"""Server-sent events that notice a client going away.

``EventStreamResponse`` sends ``data: {json}`` events (each followed by a blank line) from an
async iterator of JSON-able objects, then ``data: [DONE]``. While it streams, it listens for
the client's disconnect; when the client goes (or a send fails), ``on_disconnect`` is called
at once, so the request's sequences leave the batch before the engine's next step rather than
when the next token would have been sent. ``wait_or_disconnect`` does the same for an answer
that is not streamed.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator, Awaitable, Callable

from starlette.types import Receive, Scope, Send

__all__ = ["EventStreamResponse", "sse_event", "wait_or_disconnect", "DONE"]

DONE = b"data: [DONE]\n\n"


def sse_event(obj: Any) -> bytes:
    """One ``data:`` event holding ``obj`` as JSON (no newline inside: JSON escapes them)."""
    return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n\n"


async def _until_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


class EventStreamResponse:
    """An ASGI response streaming ``events`` as server-sent events (see the module);
    ``on_disconnect()`` runs when the client goes before the end (or the server cuts the
    request off, when ``on_cut_off()`` runs too)."""

    def __init__(self, events: AsyncIterator[Any], on_disconnect: Callable[[], None],
                 on_cut_off: Callable[[], None] = lambda: None) -> None:
        self.events = events
        self.on_disconnect = on_disconnect
        self.on_cut_off = on_cut_off

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream; charset=utf-8"),
                                (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]})
        watcher = asyncio.ensure_future(_until_disconnect(receive))
        pump = asyncio.ensure_future(self._pump(send))
        try:
            done, _ = await asyncio.wait({watcher, pump}, return_when=asyncio.FIRST_COMPLETED)
            if pump in done:
                pump.result()  # an error while streaming propagates
            else:
                self.on_disconnect()
                pump.cancel()
                try:
                    await pump
                except (asyncio.CancelledError, OSError):
                    pass
        except OSError:  # a send to a client that has gone
            self.on_disconnect()
        except asyncio.CancelledError:  # the server cut the request off (grace period over)
            self.on_disconnect()
            self.on_cut_off()
            raise
        finally:
            watcher.cancel()
            pump.cancel()

    async def _pump(self, send: Send) -> None:
        async for obj in self.events:
            await send({"type": "http.response.body", "body": sse_event(obj), "more_body": True})
        await send({"type": "http.response.body", "body": DONE, "more_body": False})


async def wait_or_disconnect(work: Awaitable[Any], receive: Receive, on_disconnect: Callable[[], None],
                             on_cut_off: Callable[[], None] = lambda: None) -> bool:
    """Await ``work``; if the client disconnects first, call ``on_disconnect()`` and return
    False (there is nobody to answer). Cancelled (the server cut the request off), it calls
    both callbacks."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_until_disconnect(receive))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            task.result()
            return True
        on_disconnect()
        task.cancel()
        return False
    except asyncio.CancelledError:
        on_disconnect()
        on_cut_off()
        task.cancel()
        raise
    finally:
        watcher.cancel()
