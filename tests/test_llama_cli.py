"""The command line on Llama-family folders: ``gptcore generate``, ``chat``, ``perplexity``,
``score`` (the Dask path, in one process and on a one-worker cluster) and ``info``, against the
Python API on the same folder."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gptcore
from gptcore import distributed as gd
from gptcore.cli import main
from gptcore.scoring import score_ids

FIXTURES = Path(__file__).resolve().parent / "fixtures"
PKG = Path(gptcore.__file__).resolve().parent.parent
TEXT = (FIXTURES / "text" / "public-domain.txt").read_text(encoding="utf-8")


def cli(*argv, stdin=None, timeout=300):
    env = dict(os.environ, PYTHONPATH=str(PKG) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "gptcore", *map(str, argv)], capture_output=True, input=stdin,
                       env=env, timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8"), p.stderr.decode("utf-8")


def test_generate_continues_with_bos_and_stops_at_eos():
    folder = FIXTURES / "llama-tiny"
    m = gptcore.load(folder)
    rc, out, err = cli("generate", folder, "We hold these truths", "--greedy", "--max-new-tokens", "12")
    assert rc == 0, err
    assert out == m.generate_text("We hold these truths", 12, greedy=True) + "\n"
    assert "prefill" in err and "decode" in err


def test_chat_one_message_and_a_conversation_on_stdin():
    folder = FIXTURES / "qwen2-tiny"
    m = gptcore.load(folder)
    rc, out, err = cli("chat", folder, "--message", "Hello! Who wrote it?", "--greedy", "--max-new-tokens", "10")
    assert rc == 0, err
    first = m.chat([{"role": "user", "content": "Hello! Who wrote it?"}], 10, greedy=True)
    assert out == first + "\n" and "tok/s" in err
    # Not a terminal: each line is a turn, the replies join the conversation.
    rc, out, err = cli("chat", folder, "--system", "Be brief.", "--greedy", "--max-new-tokens", "6",
                       stdin=b"Hello\n\nAnd then?\n/exit\nnever read\n")
    assert rc == 0, err
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]
    r1 = m.chat(msgs, 6, greedy=True)
    msgs += [{"role": "assistant", "content": r1}, {"role": "user", "content": "And then?"}]
    r2 = m.chat(msgs, 6, greedy=True)
    assert out == f"{r1}\n{r2}\n"


def test_chat_without_a_template_or_tokenizer_is_a_one_line_error(tmp_path):
    rc, out, err = cli("chat", FIXTURES / "mistral-tiny", "--message", "Hi")
    assert rc == 1 and "no tokenizer" in err and len(err.strip().splitlines()) == 1
    plain = tmp_path / "plain"
    plain.mkdir()
    for f in ("config.json", "model.safetensors", "tokenizer.json"):
        (plain / f).write_bytes((FIXTURES / "llama-tiny" / f).read_bytes())
    rc, out, err = cli("chat", plain, "--message", "Hi")
    assert rc == 1 and "has no chat template" in err, err
    rc, out, err = cli("chat", FIXTURES / "qwen2-tiny", "--message", " ")
    assert rc == 2 and "the message is empty" in err


@pytest.mark.parametrize("name", ["smollm2-tiny", "llama-tiny"])  # without and with a BOS in front
def test_perplexity_and_score_agree_with_the_api(name, tmp_path, capsys):
    folder = FIXTURES / name
    m = gptcore.load(folder)
    text_file = tmp_path / "doc.txt"
    text_file.write_text(TEXT[:1500], encoding="utf-8")
    want = m.score_text(TEXT[:1500], context=64, stride=32)
    rc, out, err = cli("perplexity", folder, text_file, "--context", "64", "--stride", "32", "--no-progress")
    assert rc == 0, err
    row = next(line for line in out.splitlines() if line.startswith(str(text_file)))
    assert f"{want.mean:.6f}" in row
    # gptcore score: in this process, and the same bits through gptcore.distributed.
    assert main(["score", str(folder), str(text_file), "--context", "64", "--stride", "32", "--no-progress"]) == 0
    assert f"{want.mean:.6f}" in capsys.readouterr().out
    ids = m.tokenizer.encode(TEXT[:1500], add_special_tokens=True)
    df = gd.score([ids], folder, context=64, stride=32)
    one = score_ids(m, ids, context=64, stride=32)
    assert df["nll"][0] == one.nll and df["scored"][0] == len(ids) - 1
    assert math.isclose(one.mean, want.mean, rel_tol=0, abs_tol=0)
    gd.clear_model_cache()


def test_score_on_a_local_cluster(tmp_path, capsys):
    folder = FIXTURES / "llama-tiny"
    ids = np.random.default_rng(3).integers(0, 300, 90)
    np.save(tmp_path / "d.npy", ids)
    m = gptcore.load(folder)
    assert main(["score", str(folder), str(tmp_path / "d.npy"), "--local", "1", "--context", "48",
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert f"{score_ids(m, ids, context=48).mean:.6f}" in out


def test_info_on_presets_and_folders(capsys):
    assert main(["info", "qwen2.5-0.5b"]) == 0
    out = capsys.readouterr().out
    assert "494,032,768" in out and "key/value heads 2" in out and "q/k/v" in out
    assert main(["info", str(FIXTURES / "llama3-rope")]) == 0
    out = capsys.readouterr().out
    assert "llama3 x8" in out and "width 16" in out


@pytest.mark.parametrize("name", ["llama-tiny", "smollm2-tiny"])
def test_generate_with_16_bit_weights(name, tmp_path):
    m = gptcore.load(FIXTURES / name, weight_dtype="bfloat16")
    m.save(tmp_path / "bf16")
    for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        (tmp_path / "bf16" / f).write_bytes((FIXTURES / name / f).read_bytes())
    rc, out, err = cli("generate", tmp_path / "bf16", "Four score", "--greedy", "--max-new-tokens", "8")
    assert rc == 0, err
    again = gptcore.load(tmp_path / "bf16")
    assert again.weight_dtype == "bfloat16"
    assert out == again.generate_text("Four score", 8, greedy=True) + "\n"
