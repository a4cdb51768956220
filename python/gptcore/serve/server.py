"""Running the application under uvicorn, with a graceful stop.

``serve_model`` loads nothing: it takes a loaded model, starts the engine's worker thread,
binds the socket (so the address printed is the one served, the real port when 0 was asked),
calls ``on_ready(url)`` and serves until SIGTERM or SIGINT. Then it stops accepting
connections, lets the requests in flight finish for up to ``grace`` seconds, cuts off those
still running after that, and stops the engine. It returns how many requests were cut off
(0: every request in flight was answered).

uvicorn's own handling re-raises the signal after its shutdown (the process would end
killed by SIGTERM); the server here catches SIGTERM and SIGINT itself and returns, so the
command exits with its own status.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from typing import Any, Callable, Optional

import uvicorn

from .app import build_app
from .engine import Engine
from .metrics import Metrics
from .request_parsing import ModelInfo

__all__ = ["serve_model", "model_info"]


def model_info(model: Any, name: str) -> ModelInfo:
    """The ``ModelInfo`` of a loaded model with a tokenizer, served as ``name``."""
    tok = model.tokenizer
    if tok is None:
        raise ValueError("serve: the model has no tokenizer")
    return ModelInfo(id=name, n_ctx=int(model.config.n_ctx), vocab_size=int(model.config.vocab_size), tokenizer=tok,
                     eos_ids=tuple(int(i) for i in model.eos_token_ids if i < model.config.vocab_size))


class _Server(uvicorn.Server):
    """uvicorn's server with signal handling that does not re-raise the signal at the end."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.signalled: Optional[int] = None

    @contextlib.contextmanager
    def capture_signals(self):
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handle(sig, frame):
            self.signalled = sig
            if self.should_exit and sig == signal.SIGINT:
                self.force_exit = True
            self.should_exit = True

        previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (IPv6 when ``host`` holds a colon)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def serve_model(model: Any, name: str, *, host: str = "127.0.0.1", port: int = 8000, max_batch: int = 8,
                max_queue: int = 64, prefill_chunk: int = 128, api_key: Optional[str] = None, grace: float = 30.0,
                on_ready: Callable[[str], None] = lambda url: None, log_level: str = "warning") -> int:
    """Serve ``model`` as ``name`` until SIGTERM/SIGINT (see the module). Returns the number
    of requests cut off at the end of the grace period."""
    metrics = Metrics()
    engine = Engine(model, max_batch=max_batch, max_queue=max_queue, prefill_chunk=prefill_chunk, metrics=metrics)
    app = build_app(engine, model_info(model, name), api_key=api_key, metrics=metrics)
    sock = bind(host, port)
    real_port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    config = uvicorn.Config(app, log_level=log_level, timeout_graceful_shutdown=max(0.0, float(grace)),
                            lifespan="off", access_log=False, timeout_keep_alive=5)
    server = _Server(config)
    engine.start()
    on_ready(f"http://{shown}:{real_port}")
    try:
        server.run(sockets=[sock])
    finally:
        engine.stop(timeout=5.0)
        sock.close()
    return int(app.state.cut_off)
