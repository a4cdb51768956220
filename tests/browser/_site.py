"""Helpers shared by the browser test's fixtures and tests (a plain module: pytest imports
every conftest.py under the name ``conftest``, so the tests cannot import from this folder's)."""

from __future__ import annotations

import base64
import os
import tempfile
from pathlib import Path
from typing import List

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
WIDTHS = (1280, 390)


def site_pages() -> List[str]:
    """The site's pages, as URL paths, discovered from the Markdown sources in docs/, and the
    benchmark journal (benches/JOURNAL.md, which docs/_hooks.py adds as ``journal/``)."""
    pages = []
    for md in sorted(DOCS.rglob("*.md")):
        rel = md.relative_to(DOCS).with_suffix("")
        if rel.name == "index":
            rel = rel.parent
        pages.append("" if str(rel) == "." else rel.as_posix() + "/")
    if (ROOT / "benches" / "JOURNAL.md").is_file():
        pages.append("journal/")
    return sorted(pages)


def set_width(drv, width: int, height: int = 900) -> None:
    drv.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600},
    )


def screenshot_all(drv, base: str) -> str:
    folder = Path(os.environ.get("GPTCORE_SCREENSHOTS") or tempfile.mkdtemp(prefix="gptcore-screenshots-"))
    folder.mkdir(parents=True, exist_ok=True)
    for page in site_pages():
        for width in WIDTHS:
            set_width(drv, width)
            drv.get(base + page)
            height = drv.execute_script("return document.documentElement.scrollHeight")
            shot = drv.execute_cdp_cmd(
                "Page.captureScreenshot",
                {"format": "png", "captureBeyondViewport": True, "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}},
            )
            name = (page.strip("/").replace("/", "-") or "index") + f"-{width}.png"
            (folder / name).write_bytes(base64.b64decode(shot["data"]))
    return str(folder)
