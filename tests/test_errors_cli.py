"""Hostile arguments for the command line: a message and a failing status, never a traceback.

The shared helpers and the rules are in ``hostile.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import gptcore
from hostile import has_module


CLI_BAD = [
    [],
    ["--no-such-flag"],
    ["no-such-command"],
    ["info"],
    ["info", "gpt5"],
    ["info", "gpt2", "--T", "0"],
    ["info", "gpt2", "--T", "-3"],
    ["info", "gpt2", "--T", "1e3"],
    ["info", "gpt2", "--batch", "x"],
    ["info", "gpt2", "--bytes", "0"],
    ["bench", "--m", "0"],
    ["bench", "--dtype", "float16"],
    ["bench", "--m", "1000000", "--k", "1000000", "--n", "1000000", "--repeat", "1"],
    ["bench", "--m", "100000000000", "--k", "1", "--n", "1", "--repeat", "1"],
    ["demo", "--T", "2048", "--repeat", "1"],
    ["demo", "--T", "99999999999", "--repeat", "1"],
    ["demo", "--repeat", "0"],
]


@pytest.mark.skipif(not has_module("gptcore.cli"), reason="no command line yet")
@pytest.mark.parametrize("argv", CLI_BAD, ids=[" ".join(a) or "(none)" for a in CLI_BAD])
def test_cli_bad_arguments_give_a_message_not_a_traceback(argv, capsys):
    from gptcore.cli import main

    try:
        status = main(argv)
    except SystemExit as e:  # argparse: usage message, status 2
        status = e.code
    err = capsys.readouterr().err
    assert status not in (0, None), f"{argv} succeeded"
    assert "error" in err and "Traceback" not in err, err[-500:]


@pytest.mark.skipif(not has_module("gptcore.__main__"), reason="no command line yet")
@pytest.mark.parametrize("args", [["--no-such-flag"], ["bench", "--m", "100000000000", "--k", "1", "--n", "1"], ["--help"]])
def test_cli_process_exits_cleanly(args):
    root = str(Path(gptcore.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "gptcore", *args], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode >= 0, f"killed by signal {-p.returncode}"
    assert "Traceback" not in p.stderr, p.stderr[-1000:]
    assert (p.returncode == 0) == (args == ["--help"])
