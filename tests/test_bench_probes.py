"""The hand-written C probes in ``benches/`` build with the command their headers give and print
their tables.

They are x86-64 programs (AVX2 and FMA, AVX-512F where the CPU has it): elsewhere there is
nothing to build. Built with warnings as errors, so that a change that breaks a loop's code
(an unused accumulator, a mismatched type) fails here rather than in a reader's shell.
"""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import gptcore

BENCHES = Path(__file__).resolve().parent.parent / "benches"

pytestmark = pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64") or shutil.which("cc") is None,
    reason="the probes are x86-64 C programs and need a C compiler",
)


def build(name: str, tmp_path: Path) -> Path:
    source = BENCHES / f"{name}.c"
    header = source.read_text(encoding="utf-8").split("*/", 1)[0]
    # The header's build line, with warnings as errors.
    line = next(l for l in header.splitlines() if re.match(r"\s*\*\s+cc ", l))
    flags = [w for w in line.split() if w.startswith("-") and w != "-o"]
    exe = tmp_path / name
    p = subprocess.run(["cc", *flags, "-Wall", "-Wextra", "-Werror", "-o", str(exe), str(source)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    return exe


def has_avx2_fma() -> bool:
    """Whether this CPU runs AVX2 + FMA code: gptcore's avx2 kernels need the same."""
    return "avx2" in gptcore.available_kernels()


def test_the_stream_overlap_probe_prints_every_loop(tmp_path):
    exe = build("stream_overlap_probe", tmp_path)
    bad = subprocess.run([str(exe), "0", "1"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "usage:" in bad.stderr
    if not has_avx2_fma():
        pytest.skip("this CPU has no AVX2 + FMA to run the probe on")
    # One round over one chunk in L1: every loop runs, quickly.
    p = subprocess.run([str(exe), "1", "1", "l1"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = dict(re.findall(r"^\| (\w+) \| ([0-9.]+) \|", p.stdout, re.M))
    expected = {"read", "rows4", "rows6", "rows6ac", "rows8", "rows8p", "rows8r", "rows8x4", "rows8x1"}
    assert expected <= rows.keys(), p.stdout
    assert all(float(v) > 0 for v in rows.values()), p.stdout


def test_the_issue_rate_probe_prints_its_rounds(tmp_path):
    exe = build("issue_rate_probe", tmp_path)
    if not has_avx2_fma():
        pytest.skip("this CPU has no AVX2 + FMA to run the probe on")
    p = subprocess.run([str(exe), "2", "0.01"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = [l.split() for l in p.stdout.splitlines() if re.match(r"\s*[0-9]", l)]
    assert len(lines) == 2 and all(float(x) > 0 for x in lines[0] if x != "-"), p.stdout
