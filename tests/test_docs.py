"""The documentation's examples, run as tests.

Every ``pycon`` code block in ``docs/*.md`` (a doctest: ``>>>`` prompts and the expected
output, highlighted as a console session on the site) and every plain ``python`` block is
executed with Sybil, in page order, in one namespace per page. A doctest's printed output is
compared with what the page shows, so a changed number fails the test. The figure blocks
(``python exec="on"``, rendered by markdown-exec when the site is built) are run here too, each
on its own as a reader would run its "Source" tab, so a broken figure is caught without
building the site. The docstrings' examples are run as doctests, and every ``console`` block
(``$ gptcore ...`` and its output) is run and its output compared with the page.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import pkgutil
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

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


def _exec_blocks(name: str) -> List[Tuple[str, str]]:
    """The page's markdown-exec Python blocks: (info string, code)."""
    text = (DOCS / name).read_text(encoding="utf-8")
    return [(m.group("info"), m.group("body")) for m in _EXEC_BLOCK.finditer(text)]


def _hooks():
    spec = importlib.util.spec_from_file_location("gptcore_docs_hooks", DOCS / "_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FIGURE_PAGES = [p for p in PAGES if _exec_blocks(p)]


def test_figure_pages_found():
    assert {"lesson14.md", "exercises.md"} <= set(FIGURE_PAGES)


@pytest.mark.parametrize("page", FIGURE_PAGES)
def test_figure_sources_are_complete(page):
    """Every figure block is shown ("Source" tab) and is the whole program: no session shared
    with hidden blocks, no helper defined elsewhere; it ends by showing the figure."""
    for info, body in _exec_blocks(page):
        assert "session=" not in info, f"{page}: a figure block shares a session: {info}"
        assert re.search(r'source="[^"]+"', info), f"{page}: a figure block hides its source: {info}"
        assert body.rstrip().endswith("plt.show()"), f"{page}: a figure block does not end in plt.show()"


@pytest.mark.parametrize("page", FIGURE_PAGES)
def test_figure_blocks_run(page):
    """Each figure block runs on its own (a fresh namespace, as a reader would run it) and
    draws at least one figure, rendered as the site renders it: inline SVG with a transparent
    background and the theme's colours (no hard black or white)."""
    hooks = _hooks()
    hooks.install_figure_show()
    for i, (_, body) in enumerate(_exec_blocks(page)):
        printed: List[str] = []
        namespace: Dict[str, object] = {"__name__": "__main__", "print": lambda *a, **k: printed.append(" ".join(map(str, a)))}
        exec(compile(body, f"{page}[figure {i + 1}]", "exec"), namespace)
        out = "\n".join(printed)
        assert out.count("<svg") >= 1 and out.count("<svg") == out.count("</svg>"), f"{page}: figure {i + 1} drew nothing"
        assert "#000000" not in out and "#ffffff" not in out, f"{page}: figure {i + 1} has fixed black or white"
        assert "currentColor" in out


# ------------------------------------------------------------------------------------------
# Docstrings: their examples run, and they read well in help() and on the API page


def _modules():
    """gptcore and every module under it, subpackages' included (``__main__`` modules, which
    run the command when imported, left out)."""
    import gptcore

    names = sorted(m.name for m in pkgutil.walk_packages(gptcore.__path__, "gptcore.")
                   if not m.name.rsplit(".", 1)[-1].startswith("__"))
    return [gptcore] + [importlib.import_module(n) for n in names]


def test_docstring_modules_include_the_subpackages():
    names = {m.__name__ for m in _modules()}
    assert {"gptcore", "gptcore.weights.formats", "gptcore.weights.checkpoint", "gptcore.cli.generate"} <= names


def test_docstring_examples():
    """The ``>>>`` examples in the docstrings (rendered as code blocks on the API page) are
    doctests, and pass."""
    attempted = 0
    failures = []
    for module in _modules():
        finder = doctest.DocTestFinder()
        runner = doctest.DocTestRunner(optionflags=_FLAGS)
        for test in finder.find(module):
            result = runner.run(test, out=failures.append)
            attempted += result.attempted
    assert not failures, "".join(failures)
    assert attempted >= 20, attempted


def test_docstring_examples_sit_under_an_examples_heading():
    """A ``>>>`` line in a docstring comes after its ``Examples:`` heading: without it,
    mkdocstrings renders the lines as Markdown, and ``>>>`` becomes quotes nested in quotes
    (the browser test checks the rendered pages for that too)."""
    import ast

    offenders = []
    for path in sorted((DOCS.parent / "python" / "gptcore").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        nodes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        for node in nodes:
            lines = (ast.get_docstring(node) or "").splitlines()
            prompts = [i for i, line in enumerate(lines) if line.lstrip().startswith(">>>")]
            if prompts and not any(line.strip() in ("Examples:", "Example:") for line in lines[:prompts[0]]):
                offenders.append(f"{path.name}: {getattr(node, 'name', 'the module')}")
    assert not offenders, offenders


_SPHINX_ROLE = re.compile(r":(?:func|meth|class|mod|data|attr|exc|obj|const|ref|py:\w+):`")


def test_docstrings_have_no_sphinx_roles():
    """``help()`` shows a docstring as written: names are plain ``code``, not ``:class:`X```."""
    offenders = []
    for module in _modules():
        for obj in [module] + [getattr(module, n) for n in dir(module)]:
            doc = getattr(obj, "__doc__", None)
            ours = obj is module or str(getattr(obj, "__module__", "")).startswith("gptcore")
            if ours and isinstance(doc, str) and _SPHINX_ROLE.search(doc):
                offenders.append(getattr(obj, "__qualname__", getattr(obj, "__name__", repr(obj))))
    for path in (DOCS.parent / "python" / "gptcore").rglob("*.py"):
        if _SPHINX_ROLE.search(path.read_text(encoding="utf-8")):
            offenders.append(path.name)
    assert not offenders, offenders


# ------------------------------------------------------------------------------------------
# Shell sessions: ``console`` blocks show ``$ gptcore ...`` and its output; the output shown
# is the output the command prints.

_CONSOLE_BLOCK = re.compile(r"^```console\n(?P<body>.*?)^```\s*$", re.MULTILINE | re.DOTALL)


def _console_sessions():
    sessions = []
    for page in PAGES:
        text = (DOCS / page).read_text(encoding="utf-8")
        for m in _CONSOLE_BLOCK.finditer(text):
            line = text[: m.start()].count("\n") + 1
            command, shown = None, []
            for row in m.group("body").splitlines():
                if row.startswith("$ "):
                    if command is not None:
                        sessions.append((f"{page}:{line}", command, shown))
                    command, shown = row[2:], []
                else:
                    shown.append(row)
            assert command is not None, f"{page}:{line}: a console block without a $ command"
            sessions.append((f"{page}:{line}", command, shown))
    return sessions


CONSOLE_SESSIONS = _console_sessions()


def test_console_sessions_found():
    assert any(cmd.startswith("gptcore info") for _, cmd, _ in CONSOLE_SESSIONS)


@pytest.mark.parametrize("where,command,shown", CONSOLE_SESSIONS, ids=[s[0] for s in CONSOLE_SESSIONS])
def test_console_session_output(where, command, shown):
    argv = shlex.split(command)
    assert argv[0] == "gptcore", f"{where}: only gptcore commands are run here, not {argv[0]!r}"
    result = subprocess.run([sys.executable, "-m", "gptcore", *argv[1:]], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{where}: {command!r} failed:\n{result.stderr}"
    printed = [row.rstrip() for row in result.stdout.rstrip("\n").splitlines()]
    assert printed == [row.rstrip() for row in shown], f"{where}: the page shows a different output for {command!r}"


# ------------------------------------------------------------------------------------------
# The README's examples run as written, from a clone's root, on the fixture folder it ships.

README = DOCS.parent / "README.md"


def test_readme_examples_run_on_the_shipped_fixture():
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)
    assert blocks and any("tests/fixtures/tiny-bpe" in b for b in blocks)
    for block in blocks:
        result = subprocess.run([sys.executable, "-c", block], cwd=DOCS.parent, capture_output=True, text=True,
                                timeout=600)
        assert result.returncode == 0, f"README block failed:\n{block}\n{result.stderr}"
    commands = re.findall(r"`(gptcore (?:generate|perplexity) tests/fixtures/[^`]*)`", text)
    assert len(commands) >= 2, commands
    for command in commands:
        argv = shlex.split(command)
        result = subprocess.run([sys.executable, "-m", "gptcore", *argv[1:], "--max-new-tokens", "5"]
                                if argv[1] == "generate" else [sys.executable, "-m", "gptcore", *argv[1:]],
                                cwd=DOCS.parent, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, f"README: {command!r} failed:\n{result.stderr}"
