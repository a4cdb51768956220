"""The Performance page's generated blocks (benches/_page.py): benches/report.py replaces the
tables between the page's markers and nothing else, refuses a page whose markers are missing
or doubled, and docs/performance.md holds every block, filled."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[1]
_PATH = _ROOT / "benches" / "_page.py"


@pytest.fixture(scope="module")
def page():
    spec = importlib.util.spec_from_file_location("bench_page", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _doc(page, bodies):
    parts = ["# Title\n\nProse before.\n"]
    for name, body in bodies.items():
        parts.append(f"## {name}\n\nText about {name}.\n\n{page.block(name, body)}\n\nText after {name}.\n")
    return "\n".join(parts)


def test_replace_changes_only_the_blocks(page):
    old = _doc(page, {"forward": "| a |\n|--:|\n| 1 |", "matmul": "old matmul"})
    new = page.replace_blocks(old, {"forward": "| a |\n|--:|\n| 2 |"})
    assert page.read_blocks(new, ["forward", "matmul"]) == {"forward": "| a |\n|--:|\n| 2 |", "matmul": "old matmul"}
    # every byte outside the replaced block is kept
    start = old.index(page.begin("forward"))
    assert new[:start] == old[:start]
    tail = old[old.index(page.end("forward")):]
    assert new.endswith(tail)
    # replacing with the same body gives the same text back
    assert page.replace_blocks(new, {"forward": "| a |\n|--:|\n| 2 |"}) == new


def test_block_is_set_off_by_blank_lines(page):
    # Markdown starts a table only after a blank line: the comment must not run into it.
    text = page.block("memory", "\n| x |\n|--:|\n| 1 |\n\n")
    assert text == "<!-- report:memory -->\n\n| x |\n|--:|\n| 1 |\n\n<!-- /report:memory -->"
    with pytest.raises(ValueError, match="name"):
        page.block("nonsense", "x")


@pytest.mark.parametrize("damage", ["missing", "doubled", "reversed"])
def test_bad_markers_are_refused(page, damage):
    good = _doc(page, {"forward": "f", "generate": "g"})
    if damage == "missing":
        text = good.replace(page.end("generate"), "")
    elif damage == "doubled":
        text = good + "\n" + page.block("generate", "again")
    else:
        text = good.replace(page.begin("generate"), "@@").replace(page.end("generate"), page.begin("generate"))
        text = text.replace("@@", page.end("generate"))
    with pytest.raises(ValueError, match="report:generate") as info:
        page.replace_blocks(text, {"forward": "new", "generate": "new"}, where="perf.md")
    assert "perf.md" in str(info.value)


def test_performance_page_holds_every_block_filled(page):
    text = (_ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    bodies = page.read_blocks(text, page.BLOCKS, where="docs/performance.md")
    assert set(bodies) == set(page.BLOCKS)
    for name, body in bodies.items():
        # a table written by report.py: a header, its rule and at least one row
        rows = [line for line in body.splitlines() if line.startswith("|")]
        assert len(rows) >= 3, f"docs/performance.md: the {name} block holds no table"
