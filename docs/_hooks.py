"""MkDocs hooks for the gptcore site (configured in mkdocs.yml, not a page).

The package's docstrings use Sphinx cross-reference roles (``:func:`x```); mkdocstrings renders
the role name literally in front of the code span. Drop it, keeping the code span.
"""

from __future__ import annotations

import re

_ROLE = re.compile(r":(?:func|meth|class|mod|data|attr|exc|obj|const):(?=<code>)")


def on_page_content(html: str, **kwargs) -> str:
    return _ROLE.sub("", html)
