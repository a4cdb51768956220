"""``gptcore generate``, ``gptcore perplexity``, ``gptcore info`` on files and ``--version``,
run as a user runs them (a subprocess), on the real-tokenizer fixture ``tests/fixtures/tiny-bpe``."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gptcore

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FOLDER = FIXTURES / "tiny-bpe"
TEXT_FILE = FIXTURES / "text" / "public-domain.txt"
TEXT = TEXT_FILE.read_text(encoding="utf-8")
PKG = Path(gptcore.__file__).resolve().parent.parent


def gptcore_cli(*argv, stdin=None, stderr=subprocess.PIPE, timeout=300):
    env = dict(os.environ, PYTHONPATH=str(PKG) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "gptcore", *map(str, argv)], stdout=subprocess.PIPE, stderr=stderr,
                          input=stdin, env=env, timeout=timeout)


def text_of(p):
    return p.stdout.decode("utf-8"), (p.stderr or b"").decode("utf-8")


@pytest.fixture(scope="module")
def model():
    return gptcore.load(FOLDER)


def assert_one_line_error(p, code, *words):
    out, err = text_of(p)
    assert p.returncode == code, (p.returncode, err)
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and re.match(r"gptcore \w+: error: ", lines[0]), err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


# ------------------------------------------------------------------------------- generate
@pytest.mark.parametrize("options", [["--greedy"], ["--seed", "4", "--temperature", "0.8", "--top-k", "50", "--top-p", "0.95"]])
def test_generate_prints_the_continuation(model, options):
    prompt = "We hold these truths"
    p = gptcore_cli("generate", FOLDER, prompt, "--max-new-tokens", "30", "--ignore-eos", *options)
    out, err = text_of(p)
    assert p.returncode == 0, err
    kw = dict(greedy=True) if "--greedy" in options else dict(seed=4, temperature=0.8, top_k=50, top_p=0.95)
    ids = model.generate(model.tokenizer.encode(prompt), 30, **kw)
    assert out == model.tokenizer.decode(ids) + "\n"
    line = err.strip()
    assert "\n" not in line
    m = re.search(r"prompt (\d+) tokens, encoded in [\d.]+ ms, [\d.]+ % of prefill; prefill (\d+) tokens in [\d.]+ s "
                  r"\(([\d,.]+) tok/s\); decode (\d+) tokens in [\d.]+ s \(([\d,.]+) tok/s\); \d+ threads$", line)
    assert m, line
    n_prompt = len(model.tokenizer.encode(prompt))
    assert int(m.group(1)) == int(m.group(2)) == n_prompt and int(m.group(4)) == 29
    assert float(m.group(3).replace(",", "")) > 0 and float(m.group(5).replace(",", "")) > 0


def test_generate_past_the_context_uses_the_fast_shift_by_default(model):
    prompt = TEXT[:400]
    n_prompt = len(model.tokenizer.encode(prompt))
    p = gptcore_cli("generate", FOLDER, prompt, "--max-new-tokens", "100", "--greedy", "--ignore-eos")
    out, err = text_of(p)
    assert p.returncode == 0, err
    ids = model.generate(model.tokenizer.encode(prompt), 100, greedy=True, context_shift=32)
    assert out == model.tokenizer.decode(ids) + "\n"
    rebuilds = math.ceil((n_prompt + 99 - 128) / 32)
    assert f"context full: {rebuilds} cache rebuild(s), dropping 32 tokens each" in err
    assert "warning" not in err
    # the lesson's exact crop on request: same tokens as the library's default, one warning line
    p = gptcore_cli("generate", FOLDER, prompt, "--max-new-tokens", "40", "--greedy", "--ignore-eos",
                    "--context-shift", "1", "--threads", "1")
    out, err = text_of(p)
    with pytest.warns(UserWarning, match="context_shift=1"):
        ids = model.generate(model.tokenizer.encode(prompt), 40, greedy=True)
    assert p.returncode == 0 and out == model.tokenizer.decode(ids) + "\n"
    warned = [l for l in err.splitlines() if "warning" in l]
    assert len(warned) == 1 and warned[0].startswith("gptcore generate: warning: ") and "context_shift=1" in warned[0]
    assert "1 threads" in err


def test_generate_streams_whole_characters_to_a_pipe(model):
    """The output is UTF-8 that decodes strictly: no half characters reach the pipe."""
    p = gptcore_cli("generate", FOLDER, "emoji 🎉 東京", "--max-new-tokens", "80", "--seed", "11", "--ignore-eos")
    assert p.returncode == 0
    out = p.stdout.decode("utf-8", errors="strict")
    ids = model.generate(model.tokenizer.encode("emoji 🎉 東京"), 80, seed=11)
    assert out == model.tokenizer.decode(ids) + "\n"


def test_generate_errors(tmp_path):
    assert_one_line_error(gptcore_cli("generate", tmp_path / "nowhere", "Hi"), 1, "no such model folder", "nowhere")
    assert_one_line_error(gptcore_cli("generate", tmp_path, "Hi"), 1, "model.safetensors")
    for name in ("config.json", "model.safetensors"):
        shutil.copy(FOLDER / name, tmp_path / name)
    assert_one_line_error(gptcore_cli("generate", tmp_path, "Hi"), 1, "tokenizer.json", "vocab.json", "merges.txt")
    assert_one_line_error(gptcore_cli("generate", FOLDER, ""), 2, "PROMPT is empty")
    assert_one_line_error(gptcore_cli("generate", FOLDER, "Hi", "--context-shift", "129"), 2, "n_ctx = 128")
    assert_one_line_error(gptcore_cli("generate", tmp_path, "Hi", "--tokenizer", tmp_path / "x"), 1, "no such tokenizer")
    (tmp_path / "model.safetensors").write_bytes(b"not safetensors at all")
    assert_one_line_error(gptcore_cli("generate", tmp_path, "Hi"), 1, "model.safetensors")
    ok = gptcore_cli("generate", FOLDER, "Hi", "--tokenizer", FOLDER, "--max-new-tokens", "2")
    assert ok.returncode == 0
    for bad in (["--top-p", "0"], ["--top-p", "1.5"], ["--temperature", "-1"], ["--max-new-tokens", "-1"],
                ["--seed", "-3"], ["--threads", "x"], ["--bogus"], ["--min-p", "1.5"], ["--repetition-penalty", "0"],
                ["--frequency-penalty", "3"], ["--presence-penalty", "-2.5"], ["--logit-bias", "5"],
                ["--logit-bias", "5=101"], ["--stop", ""], ["--stop-token", "-1"], ["--weight-dtype", "int8"]):
        p = gptcore_cli("generate", FOLDER, "Hi", *bad)
        assert p.returncode == 2 and "usage:" in text_of(p)[1] and "Traceback" not in text_of(p)[1], bad


# ------------------------------------------------------------------------------- perplexity
def table(out):
    rows = {}
    for line in out.splitlines():
        m = re.match(r"^(.*\S)\s+([\d,]+)\s+(-?[\d.]+)\s+(\S+)$", line)
        if m and not line.startswith("file"):
            rows[m.group(1)] = (int(m.group(2).replace(",", "")), float(m.group(3)), float(m.group(4)))
    return rows


def test_perplexity_equals_token_logprobs(tmp_path, model):
    short = tmp_path / "short.txt"
    short.write_text(TEXT[:200], encoding="utf-8")
    p = gptcore_cli("perplexity", FOLDER, short, TEXT_FILE, "--context", "96", "--stride", "40", "--batch", "3")
    out, err = text_of(p)
    assert p.returncode == 0, err
    rows = table(out)
    # independent of gptcore.scoring: the windows written out here, one token_logprobs call each
    docs = {str(short): model.tokenizer.encode(TEXT[:200]), str(TEXT_FILE): model.tokenizer.encode(TEXT)}
    all_lp = []
    for name, ids in docs.items():
        lps, prev_end, begin = [], 0, 0
        while True:
            end = min(begin + 96, len(ids))
            lp = model.token_logprobs(ids[begin:end])
            lps.append(lp[max(prev_end, begin + 1) - begin - 1:])
            if end == len(ids):
                break
            prev_end, begin = end, begin + 40
        lp = np.concatenate(lps)
        all_lp.append(lp)
        n, mean, ppl = rows[name]
        assert n == len(ids) - 1 == lp.size
        assert mean == pytest.approx(-lp.mean(), abs=1e-6)
        assert ppl == pytest.approx(math.exp(-lp.mean()), rel=1e-5)
    lp = np.concatenate(all_lp)
    assert rows["total"][0] == lp.size and rows["total"][1] == pytest.approx(-lp.mean(), abs=1e-6)
    assert "windows of 96 tokens every 40" in out and "last 56 to 95 tokens" in out
    assert re.search(r"scored [\d,]+ tokens in [\d.]+ s \([\d,.]+ tok/s", err)
    assert "\r" not in err and "scoring" not in err  # no progress bar: stderr is not a terminal


def test_perplexity_defaults_and_stdin(model):
    p = gptcore_cli("perplexity", FOLDER, "-", stdin=TEXT[:1500].encode("utf-8"))
    out, err = text_of(p)
    assert p.returncode == 0, err
    r = model.score_text(TEXT[:1500])  # defaults: context n_ctx, stride n_ctx / 2
    n, mean, ppl = table(out)["-"]
    assert n == r.tokens and mean == pytest.approx(r.mean, abs=1e-6)
    assert "windows of 128 tokens every 64" in out


def test_perplexity_progress_bar_on_a_terminal():
    import fcntl
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))  # an 80-column terminal
    try:
        p = gptcore_cli("perplexity", FOLDER, TEXT_FILE, stderr=follower)
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    err = b"".join(chunks).decode("utf-8", "replace")
    assert p.returncode == 0
    assert "scoring" in err and "tok" in err  # tqdm drew its bar on the terminal
    forced = gptcore_cli("perplexity", FOLDER, TEXT_FILE, "--progress")
    assert "scoring" in text_of(forced)[1]


def test_perplexity_errors(tmp_path):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\u00e9 au lait".encode("latin-1"))
    assert_one_line_error(gptcore_cli("perplexity", FOLDER, bad), 1, "not UTF-8", "0xe9", "offset 3")
    assert_one_line_error(gptcore_cli("perplexity", FOLDER, tmp_path / "missing.txt"), 1, "no such file")
    assert_one_line_error(gptcore_cli("perplexity", FOLDER, tmp_path), 1, "is a folder")
    (tmp_path / "one.txt").write_text("W", encoding="utf-8")
    assert_one_line_error(gptcore_cli("perplexity", FOLDER, tmp_path / "one.txt"), 1, "nothing to score")
    assert_one_line_error(gptcore_cli("perplexity", FOLDER, TEXT_FILE, "--context", "200"), 2, "n_ctx = 128")
    assert_one_line_error(gptcore_cli("perplexity", FOLDER, TEXT_FILE, "--context", "64", "--stride", "64"), 2, "stride")
    assert_one_line_error(gptcore_cli("perplexity", tmp_path / "nowhere", TEXT_FILE), 1, "no such model folder")


# ------------------------------------------------------------------------------- info, version
def test_info_on_a_folder_a_file_and_any_case(tmp_path, model):
    p = gptcore_cli("info", FOLDER)
    out, err = text_of(p)
    assert p.returncode == 0, err
    assert out.startswith(f"{FOLDER}: vocab 640, context 128, d_model 64, heads 4, layers 2")
    assert "tokenizer: 640 ids" in out
    total = gptcore.param_count(model.config).total
    assert re.search(rf"^  total\s+{total:,}$", out, flags=re.MULTILINE)
    p = gptcore_cli("info", FOLDER / "model.safetensors")
    assert p.returncode == 0 and "vocab 640, context 128" in text_of(p)[0]
    for name in ("GPT2", "Lesson14", "gpt2-MEDIUM"):
        p = gptcore_cli("info", name)
        assert p.returncode == 0 and text_of(p)[0] == text_of(gptcore_cli("info", name.lower()))[0].replace(
            name.lower(), name, 1)
    shutil.copy(FOLDER / "config.json", tmp_path / "config.json")
    assert_one_line_error(gptcore_cli("info", tmp_path), 1, "model.safetensors")
    p = gptcore_cli("info", "no-such-model")
    assert p.returncode == 2 and "neither a preset" in text_of(p)[1]


def test_version():
    p = gptcore_cli("--version")
    assert p.returncode == 0 and text_of(p)[0].strip() == f"gptcore {gptcore.__version__}"
