"""The generated blocks of the Performance page (docs/performance.md).

``benches/report.py`` prints each headline table between two HTML comments,
``<!-- report:NAME -->`` and ``<!-- /report:NAME -->``, and with ``--write PAGE`` puts them in
place of the blocks of the same names in the page; the prose around the blocks is written by
hand and left alone. HTML comments are invisible on the rendered site.

Only the standard library, so that the tests can read it without the benchmarks' extras.
"""

from __future__ import annotations

import re
from typing import Dict, Iterable

#: The blocks that ``report.py`` writes, in page order.
BLOCKS = ("machine", "forward", "generate", "matmul", "memory")


def begin(name: str) -> str:
    return f"<!-- report:{name} -->"


def end(name: str) -> str:
    return f"<!-- /report:{name} -->"


def block(name: str, body: str) -> str:
    """``body`` between the two markers of ``name``, with blank lines around it (Markdown needs
    them to start a table after an HTML comment)."""
    if name not in BLOCKS:
        raise ValueError(f"name: expected one of {', '.join(BLOCKS)}, got {name!r}")
    return f"{begin(name)}\n\n{body.strip()}\n\n{end(name)}"


def _span(text: str, name: str, where: str):
    """(start, stop) of the block ``name`` in ``text``, markers included; ValueError naming the
    block and ``where`` when it is missing, repeated or its end comes first."""
    starts = [m.start() for m in re.finditer(re.escape(begin(name)), text)]
    stops = [m.end() for m in re.finditer(re.escape(end(name)), text)]
    if len(starts) != 1 or len(stops) != 1:
        raise ValueError(f"{where}: expected one '{begin(name)}' and one '{end(name)}', "
                         f"found {len(starts)} and {len(stops)}")
    if stops[0] < starts[0]:
        raise ValueError(f"{where}: '{end(name)}' comes before '{begin(name)}'")
    return starts[0], stops[0]


def replace_blocks(text: str, blocks: Dict[str, str], where: str = "the page") -> str:
    """``text`` with each block named in ``blocks`` (name -> body) replaced; every other byte
    is kept. Raises ValueError (naming ``where`` and the block) if a block's markers are not
    there exactly once, in order."""
    for name in blocks:
        _span(text, name, where)  # check them all before changing anything
    for name, body in blocks.items():
        start, stop = _span(text, name, where)
        text = text[:start] + block(name, body) + text[stop:]
    return text


def read_blocks(text: str, names: Iterable[str] = BLOCKS, where: str = "the page") -> Dict[str, str]:
    """The bodies of the named blocks in ``text`` (ValueError as in ``replace_blocks``)."""
    out = {}
    for name in names:
        start, stop = _span(text, name, where)
        out[name] = text[start + len(begin(name)):stop - len(end(name))].strip()
    return out
