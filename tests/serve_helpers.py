"""Starting and stopping a real ``gptcore serve`` for the tests: the command in a subprocess on
127.0.0.1 and a free port (``--port 0``; the address is read from the line it prints), stopped
with SIGTERM. Clients are the real ``openai`` package and ``httpx``."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import List, Optional

import httpx

FIXTURES = Path(__file__).parent / "fixtures"
GPT2 = FIXTURES / "tiny-bpe"       # GPT-2 family, n_ctx 128, no chat template
LLAMA = FIXTURES / "smollm2-tiny"  # Llama family, with a chat template


class Server:
    """``gptcore serve MODEL --port 0 ARGS...`` in a subprocess (a context manager).
    ``url`` is the address it printed, ``base`` its OpenAI base URL."""

    def __init__(self, model: Path, *args: str, threads: int = 1) -> None:
        self.model = Path(model)
        self.args = [str(a) for a in args]
        self.threads = threads
        self.proc: Optional[subprocess.Popen] = None
        self.url = ""
        self.stderr_lines: List[str] = []
        self.stdout_lines: List[str] = []

    @property
    def base(self) -> str:
        return self.url + "/v1"

    @property
    def name(self) -> str:
        return self.model.name

    def start(self) -> "Server":
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        cmd = [sys.executable, "-m", "gptcore", "serve", str(self.model), "--port", "0",
               "--threads", str(self.threads), *self.args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline()
        m = re.search(r"at (http://\S+) ", line)
        if not m:
            self.proc.kill()
            raise RuntimeError(f"gptcore serve did not start: {line!r} {self.proc.stderr.read()}")
        self.url = m.group(1)
        self.stdout_lines.append(line)
        threading.Thread(target=self._drain, args=(self.proc.stderr, self.stderr_lines), daemon=True).start()
        threading.Thread(target=self._drain, args=(self.proc.stdout, self.stdout_lines), daemon=True).start()
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(self.url + "/health", timeout=5).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"gptcore serve is not answering: {''.join(self.stderr_lines)}")
            time.sleep(0.05)

    @staticmethod
    def _drain(stream, into: List[str]) -> None:
        for line in stream:
            into.append(line)

    def terminate(self, timeout: float = 30) -> int:
        """SIGTERM; the exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def client(self, **kw):
        import openai

        return openai.OpenAI(base_url=self.base, api_key=kw.pop("api_key", "none"), max_retries=0, **kw)

    def metric(self, name: str) -> float:
        """The value of an unlabelled metric on /metrics."""
        text = httpx.get(self.url + "/metrics", timeout=10).text
        m = re.search(rf"^{re.escape(name)} (\S+)$", text, flags=re.MULTILINE)
        assert m, f"no metric {name} in /metrics"
        return float(m.group(1))

    def post(self, path: str, body, **kw) -> httpx.Response:
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        headers = {"content-type": "application/json", **kw.pop("headers", {})}
        return httpx.post(self.base + path, content=data, headers=headers, timeout=kw.pop("timeout", 60), **kw)


def sse_events(text: str) -> List[str]:
    """The ``data:`` payloads of a server-sent event stream, in order."""
    return [line[len("data: "):] for line in text.split("\n") if line.startswith("data: ")]
