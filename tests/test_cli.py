"""The ``gptcore`` command line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gptcore.cli import main
from gptcore.config import PRESETS


def run_main(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr().out
    return rc, out


def value(out: str, label: str) -> str:
    """The value printed on the row whose label starts with ``label``."""
    for line in out.splitlines():
        if line.strip().startswith(label):
            return line.strip()[len(label):].strip()
    raise AssertionError(f"no row {label!r} in:\n{out}")


def test_info_gpt2(capsys):
    rc, out = run_main(capsys, "info", "gpt2")
    assert rc == 0
    assert value(out, "token embedding") == "38,597,376"
    assert value(out, "position embedding") == "786,432"
    assert value(out, "blocks (x 12)") == "85,054,464"
    assert value(out, "LM head") == "0 (tied)"
    assert value(out, "total") == "124,439,808"
    assert value(out, "crossover T* = d_ff") == "3,072"
    assert "T = 1,024" in out
    assert value(out, "entries") == "51,463,168"  # B = 1, n = 1024, V = 50257
    assert value(out, "tokens D = 20 P") == "2,488,796,160"


def test_info_lesson_counting_reproduces_lesson14(capsys):
    rc, out = run_main(capsys, "info", "gpt2", "--lesson-counting")
    assert rc == 0
    assert value(out, "total") == "124,402,944"
    assert value(out, "forward (2 x weights)") == "247,229,952"
    assert value(out, "training (3 x forward)") == "741,689,856"
    assert value(out, "attention scores (4 T d N)") == "37,748,736"
    assert value(out, "attention share of forward") == "15.27 %"
    assert value(out, "compute C = 6 P D") == "1.86e+18 FLOPs"
    rc, out = run_main(capsys, "info", "lesson14", "--lesson-counting")
    assert value(out, "per block") == "49,728"
    assert value(out, "total") == "205,440"
    assert value(out, "forward (2 x weights)") == "404,224"
    assert value(out, "attention share of forward") == "2.03 %"
    assert value(out, "tokens D = 20 P") == "4,108,800"


def test_info_skeleton_and_logits_options(capsys):
    rc, out = run_main(capsys, "info", "lm4-skeleton", "--no-blocks")
    assert rc == 0 and value(out, "total") == "66,112"
    rc, out = run_main(capsys, "info", "gpt2", "--batch", "8")
    assert value(out, "entries") == "411,705,344"
    assert value(out, "memory") == "1.65 GB"


def test_info_table_is_aligned(capsys):
    _, out = run_main(capsys, "info", "gpt2-medium")
    rows = [line for line in out.splitlines() if line.startswith("  ")]
    assert len(rows) > 10
    assert len({len(line) for line in rows}) == 1  # every value ends in the same column
    # and every label starts in the same column, values separated by at least two spaces
    assert all(re.match(r"  \S.*\S {2,}\S.*$", line) for line in rows)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_info_every_preset(capsys, name):
    rc, out = run_main(capsys, "info", name)
    assert rc == 0 and out.startswith(name + ":")


def test_info_bad_arguments(capsys):
    with pytest.raises(SystemExit) as e:
        main(["info", "gpt5"])
    assert e.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["info", "gpt2", "--T", "0"])
    with pytest.raises(SystemExit):
        main([])


def test_demo_prints_lesson_numbers(capsys):
    rc, out = run_main(capsys, "demo", "--T", "4", "--repeat", "1")
    assert rc == 0
    assert "0.8519901832549279" in out
    assert "16.167976 39.454181 51.481187 62.771013 70.109992" in out
    assert "argmax next token (1-based): 17" in out
    assert "at positions 1..7 = 0.0," in out
    assert "speed-up" in out and "T =     4" in out


def test_bench_runs_small(capsys):
    rc, out = run_main(capsys, "bench", "--m", "8", "--k", "16", "--n", "8", "--repeat", "1")
    assert rc == 0
    assert "GFLOP/s" in value(out, "gptcore.matmul") and "GFLOP/s" in value(out, "numpy @")


def test_python_dash_m(tmp_path):
    pkg = Path(__import__("gptcore").__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=str(pkg) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "gptcore", "info", "lesson14"], capture_output=True, text=True,
                       env=env, cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    assert value(p.stdout, "total") == "203,008"  # the preset as configured: no biases, no affine


def test_one_module_per_command_and_the_docstring_names_every_command():
    """Each command of the parser is a module of gptcore.cli with ``add_parser`` and ``run``,
    and the package's docstring (what ``help(gptcore.cli)`` shows first) lists every one."""
    import argparse
    import importlib

    import gptcore.cli as cli

    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    commands = list(sub.choices)
    assert commands == [
        "info", "demo", "bench", "generate", "chat", "perplexity", "score", "quantize", "serve",
    ]
    summary = cli.__doc__.split("\n\n")[0]
    for name in commands:
        module = importlib.import_module(f"gptcore.cli.{name}")
        assert callable(module.add_parser) and callable(module.run), name
        assert sub.choices[name].get_default("func") is module.run, name
        assert f"``{name}``" in summary, f"the docstring's first paragraph omits {name!r}: {summary!r}"


def test_python_m_gptcore_cli_is_the_command():
    p = subprocess.run([sys.executable, "-m", "gptcore.cli", "--version"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.startswith("gptcore "), p.stderr
