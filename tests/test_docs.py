"""The documentation's examples, run as tests.

Every ``pycon`` code block in ``docs/*.md`` (a doctest: ``>>>`` prompts and the expected
output, highlighted as a console session on the site) and every plain ``python`` block is
executed with Sybil, in page order, in one namespace per page. A doctest's printed output is
compared with what the page shows, so a changed number fails the test. The figure blocks
(``python exec="on"``, rendered by markdown-exec when the site is built) are run here too, with
matplotlib's Agg backend, so a broken figure is caught without building the site.
"""

from __future__ import annotations

import doctest
import re
from pathlib import Path
from typing import Dict, List

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGES = sorted(p.name for p in DOCS.glob("*.md"))

# sybil and matplotlib come with the test extra: a missing one is an error, not a skip.
from sybil import Sybil  # noqa: E402
from sybil.evaluators.python import PythonEvaluator  # noqa: E402
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser  # noqa: E402


class PyconParser(PythonCodeBlockParser):
    """``pycon`` fenced blocks, run as doctests (plain code if they hold no prompt)."""

    def __init__(self, doctest_optionflags: int = 0) -> None:
        super().__init__(doctest_optionflags=doctest_optionflags)
        self.codeblock_parser = CodeBlockParser("pycon", PythonEvaluator(()))


_FLAGS = doctest.ELLIPSIS
_SYBIL = Sybil(
    parsers=[PyconParser(_FLAGS), PythonCodeBlockParser(doctest_optionflags=_FLAGS), SkipParser()],
    patterns=["*.md"],
    path=str(DOCS),
)


def _run_page(name: str) -> List[str]:
    document = _SYBIL.parse(DOCS / name)
    failures = []
    for example in document.examples():
        try:
            example.evaluate()
        except Exception as exc:  # report every failing example of the page, not only the first
            failures.append(f"{name}, line {example.line}:\n{exc}")
    return failures


def test_pages_exist():
    expected = {"index.md", "lesson14.md", "lm4-t1.md", "exercises.md", "how-it-works.md", "performance.md", "api.md"}
    assert expected <= set(PAGES), f"missing pages: {sorted(expected - set(PAGES))}"


@pytest.mark.parametrize("page", PAGES)
def test_page_examples(page):
    failures = _run_page(page)
    assert not failures, "\n\n".join(failures)


def test_examples_are_checked():
    """The pages that print numbers really hold doctests (a page rewritten into plain code
    blocks would silently stop checking its output)."""
    counts = {}
    for page in ("index.md", "lesson14.md", "lm4-t1.md", "exercises.md", "how-it-works.md", "pretrained.md"):
        text = (DOCS / page).read_text(encoding="utf-8")
        counts[page] = len(re.findall(r"^>>> ", text, flags=re.MULTILINE))
        document = _SYBIL.parse(DOCS / page)
        doctests = sum(1 for e in document.examples() if type(e.region.parsed).__name__ == "Example")
        assert doctests == counts[page], (page, doctests, counts[page])
    assert all(n >= 3 for n in counts.values()), counts


# ------------------------------------------------------------------------------------------
# Figure blocks (markdown-exec)

_EXEC_BLOCK = re.compile(r"^```python (?P<info>[^\n]*exec=\"on\"[^\n]*)\n(?P<body>.*?)^```\s*$", re.MULTILINE | re.DOTALL)


def _exec_blocks(name: str) -> Dict[str, List[str]]:
    """The page's markdown-exec Python blocks, grouped by session (as markdown-exec runs them)."""
    text = (DOCS / name).read_text(encoding="utf-8")
    sessions: Dict[str, List[str]] = {}
    for i, m in enumerate(_EXEC_BLOCK.finditer(text)):
        s = re.search(r'session="([^"]+)"', m.group("info"))
        key = s.group(1) if s else f"__block{i}"
        sessions.setdefault(key, []).append(m.group("body"))
    return sessions


FIGURE_PAGES = [p for p in PAGES if _exec_blocks(p)]


@pytest.mark.parametrize("page", FIGURE_PAGES)
def test_figure_blocks_run(page, capsys):
    import matplotlib

    matplotlib.use("Agg")
    for session, blocks in _exec_blocks(page).items():
        namespace: Dict[str, object] = {"__name__": "__main__"}
        for body in blocks:
            exec(compile(body, f"{page}[{session}]", "exec"), namespace)
    out = capsys.readouterr().out
    if "<svg" in out:
        assert out.count("<svg") == out.count("</svg>")

