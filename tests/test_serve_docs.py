"""The Serving page's client examples, run against a real server.

The page's Python blocks talk to a running server, so the page test (``test_docs``) skips
them (``<!-- skip: next -->``); here a server on the page's model is started on a free port,
each block is run with the page's address replaced by the server's, and the line the page
shows ``gptcore serve`` printing is compared with the line it prints."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from serve_helpers import LLAMA, Server

PAGE = Path(__file__).resolve().parent.parent / "docs" / "serving.md"
PAGE_URL = "http://127.0.0.1:8000"


def _client_blocks(text):
    return re.findall(r"<!-- skip: next -->\n```python\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def test_the_serving_page_examples_run_against_a_server():
    text = PAGE.read_text(encoding="utf-8")
    blocks = _client_blocks(text)
    assert len(blocks) >= 4 and all(PAGE_URL + "/v1" in b for b in blocks)
    with Server(LLAMA) as server:
        shown = re.search(r"^\$ gptcore serve (\S+)\n(.*)$", text, flags=re.MULTILINE)
        assert Path(shown.group(1)).name == LLAMA.name
        assert server.stdout_lines[0].rstrip("\n") == shown.group(2).replace(PAGE_URL, server.url)
        for i, block in enumerate(blocks):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(block.replace(PAGE_URL, server.url), f"serving.md[block {i + 1}]", "exec"), {})
            assert out.getvalue().strip(), f"block {i + 1} printed nothing"
