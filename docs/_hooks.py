"""MkDocs hooks for the gptcore site (configured in mkdocs.yml, not a page).

Figures. A figure block on a page is plain, complete matplotlib code ending in ``plt.show()``,
exactly what a reader copies from its "Source" tab and runs. markdown-exec runs the block when
the site is built; for the build, ``plt.show`` is replaced by ``show`` below, which prints every
open figure as inline SVG into the page (markdown-exec captures ``print`` per block). The SVG
is made theme-aware: transparent background, black drawn as ``currentColor`` and white as the
page background, so the figure reads in both the light and the dark scheme.

Copying sessions. A ``pycon`` block (a doctest: ``>>>`` prompts and output) or a ``console``
block (``$ command`` and output) is shown as a session, but its copy button should copy only
what a reader types. Material copies the ``data-copy`` attribute of the enclosing element when
there is one: it is set here to the prompted lines with the prompts removed.

The journal. ``benches/JOURNAL.md`` (the dated measurements, kept beside the benchmarks) is
added to the site as ``journal.md``: the Performance page links to it, the navigation does not
list it (``not_in_nav`` in mkdocs.yml). Links inside it name files, not pages, so that they read
the same in the repository.

Roles. Sphinx cross-reference roles (``:func:`x```) render literally in mkdocstrings; the
docstrings use plain ``x`` instead (tests/test_docs.py checks). A role that slips in is still
dropped here, keeping its code span.
"""

from __future__ import annotations

import html
import io
import re
import sys
from pathlib import Path

_ROLE = re.compile(r":(?:func|meth|class|mod|data|attr|exc|obj|const):(?=<code>)")
_BLACK = re.compile(r"#000000\b")
_WHITE = re.compile(r"#ffffff\b")


def figure_html(fig) -> str:
    """One matplotlib figure as a theme-aware inline SVG inside ``<div class="gc-figure">``."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", transparent=True, metadata={"Date": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    svg = _BLACK.sub("currentColor", svg)
    svg = _WHITE.sub("var(--md-default-bg-color)", svg)
    return f'<div class="gc-figure">\n{svg}\n</div>'


def show(*args, **kwargs) -> None:
    """``plt.show()`` for the build: print every open figure (then close it) as inline SVG.

    The SVG goes through the ``print`` of the calling block's namespace: markdown-exec puts a
    capturing ``print`` there, and the output becomes part of the page.
    """
    import matplotlib.pyplot as plt

    out = sys._getframe(1).f_globals.get("print", print)
    for num in plt.get_fignums():
        fig = plt.figure(num)
        out(figure_html(fig))
        plt.close(fig)


def install_figure_show() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "gptcore-docs", "font.size": 10})
    plt.show = show


def on_config(config, **kwargs):
    install_figure_show()
    return config


#: The journal's source, beside the benchmarks, and its page on the site.
JOURNAL_SOURCE = Path(__file__).resolve().parent.parent / "benches" / "JOURNAL.md"
JOURNAL_PAGE = "journal.md"


def on_files(files, config, **kwargs):
    from mkdocs.structure.files import File

    files.append(File.generated(config, JOURNAL_PAGE, abs_src_path=str(JOURNAL_SOURCE)))
    return files


def on_serve(server, config, builder, **kwargs):
    server.watch(str(JOURNAL_SOURCE))  # `mkdocs serve` rebuilds when the journal changes
    return server


_PROMPTS = {"pycon": (">>> ", "... "), "console": ("$ ",)}
_SESSION = re.compile(r'<div class="language-(pycon|console) highlight"(.*?<code>)(.*?)</code>', re.DOTALL)
_TAG = re.compile(r"<[^>]+>")


def session_code(lang: str, text: str) -> str:
    """The lines of a shown session a reader types, without prompts and output."""
    prompts = _PROMPTS[lang]
    lines = []
    for line in text.splitlines():
        for p in prompts:
            if line.startswith(p) or line == p.rstrip():
                lines.append(line[len(p):])
                break
    return "\n".join(lines).rstrip()


def _with_copy_text(m: "re.Match[str]") -> str:
    code = session_code(m.group(1), html.unescape(_TAG.sub("", m.group(3))))
    return (f'<div class="language-{m.group(1)} highlight" data-copy="{html.escape(code, quote=True)}"'
            f"{m.group(2)}{m.group(3)}</code>")


def on_page_content(html_text: str, **kwargs) -> str:
    html_text = _SESSION.sub(_with_copy_text, html_text)
    return _ROLE.sub("", html_text)
