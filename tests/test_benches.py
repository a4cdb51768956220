"""The benchmark scripts run against the installed gptcore, never the source tree.

A script that puts ``python/`` on ``sys.path`` imports the checkout's gptcore, which has no
compiled ``_native`` in a fresh clone (``ImportError: cannot import name '_native' from
partially initialized module 'gptcore'``), or a stale one. Each script's ``--help`` is run
from a temporary folder with the environment's ``PYTHONPATH`` removed, and no script may touch
``sys.path`` or tell its reader to set ``PYTHONPATH``.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHES = Path(__file__).resolve().parent.parent / "benches"
SCRIPTS = sorted(p for p in BENCHES.glob("*.py") if not p.name.startswith("_"))
ALL = sorted(BENCHES.glob("*.py"))
#: Scripts whose worker processes get PYTHONPATH set to an installed build (``pip install
#: --target DIR wheel``), never to the source tree: the A/B of two builds.
INSTALLED_BUILDS_ON_PYTHONPATH = {"ab_builds.py", "ab_block_kernels.py"}


def test_the_scripts_are_found():
    assert {"bench_forward.py", "bench_generate.py", "bench_matmul.py", "bench_score.py"} <= {p.name for p in SCRIPTS}


@pytest.mark.parametrize("path", ALL, ids=[p.name for p in ALL])
def test_no_bench_touches_sys_path(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    touches = [
        node.lineno for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "path"
        and isinstance(node.value, ast.Name) and node.value.id == "sys"
    ]
    assert not touches, f"{path.name} uses sys.path on line(s) {touches}"
    if path.name in INSTALLED_BUILDS_ON_PYTHONPATH:
        # Its workers import installed wheel directories given on its command line, and it
        # stops unless each worker's gptcore came from the directory it was given.
        assert "imported gptcore from" in path.read_text(encoding="utf-8")
        return
    assert "PYTHONPATH" not in path.read_text(encoding="utf-8"), f"{path.name} mentions PYTHONPATH"


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_help_runs_against_the_installed_package(path, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run([sys.executable, str(path), "--help"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, f"{path.name} --help failed:\n{p.stderr[-2000:]}"
    assert p.stdout.startswith("usage: "), p.stdout[:200]
