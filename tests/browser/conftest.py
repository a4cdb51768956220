"""Fixtures for the browser test: the built site, a loopback web server and a headless Chromium.

Run explicitly (``python -m pytest tests/browser``; ``.ci/run`` does): the default
``python -m pytest`` does not recurse into this folder (``norecursedirs`` in pyproject.toml)
because it needs Debian's ``chromium`` and ``chromium-driver``. Run explicitly, a missing
browser, driver or ``selenium`` is an error, never a skip.

Environment:

* ``GPTCORE_SITE_DIR``: test an already built site instead of building one (``mkdocs build
  --strict`` into a temporary folder).
* ``GPTCORE_SCREENSHOTS``: the folder for the screenshots (default: a new temporary folder).
  Screenshots of every page at every width are written there when a test fails, or always
  when ``GPTCORE_SCREENSHOTS_ALWAYS=1``; the folder is printed at the end of the run.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

from _site import ROOT, screenshot_all

_STATE = {"failed": False, "shots": None}


def _chromium_paths():
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not browser or not driver:
        pytest.fail("the browser test needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)")
    return browser, driver


@pytest.fixture(scope="session")
def site_dir(tmp_path_factory) -> Path:
    given = os.environ.get("GPTCORE_SITE_DIR")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT, check=True)
    return out


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def base_url(site_dir) -> Iterator[str]:
    """``python -m http.server`` on a free loopback port, serving the built site."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(site_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(url, timeout=1).close()
                break
            except OSError:
                if server.poll() is not None:
                    pytest.fail(f"the web server exited with status {server.returncode}")
                time.sleep(0.1)
        else:
            pytest.fail("the web server did not answer")
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture(scope="session")
def driver(base_url):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, chromedriver = _chromium_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--hide-scrollbars"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(chromedriver), options=options)
    drv.set_page_load_timeout(60)
    try:
        yield drv
    finally:
        try:
            if _STATE["failed"] or os.environ.get("GPTCORE_SCREENSHOTS_ALWAYS") == "1":
                _STATE["shots"] = screenshot_all(drv, base_url)
        finally:
            drv.quit()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        _STATE["failed"] = True


def pytest_terminal_summary(terminalreporter):
    if _STATE["shots"]:
        terminalreporter.write_line(f"browser test: screenshots of every page in {_STATE['shots']}")
