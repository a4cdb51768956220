"""Bounded memory on any input: ``gptcore perplexity`` and ``gptcore score`` read text a piece
at a time (``gptcore.text_files``) and score it as it comes (``gptcore.scoring.score_pieces``),
with the same numbers as the whole text at once; ``/dev/zero`` and a 2 GB sparse file stop
with a clear error under a memory limit (``resource.setrlimit`` in a child process)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gptcore
from gptcore import text_files
from gptcore.scoring import ExactSum, score_ids, score_pieces
from gptcore.text_files import TextTooLongError, token_pieces

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FOLDER = FIXTURES / "tiny-bpe"
TEXT = (FIXTURES / "text" / "public-domain.txt").read_text(encoding="utf-8")
PKG = Path(gptcore.__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def model():
    return gptcore.load(FOLDER)


class RecordingTokenizer:
    """The fixture's tokenizer, recording the longest text it is asked to encode."""

    def __init__(self, tok):
        self.tok, self.longest = tok, 0

    def encode(self, text):
        self.longest = max(self.longest, len(text))
        return self.tok.encode(text)


# ------------------------------------------------------------------------------ pieces
def test_a_large_file_is_encoded_in_pieces_with_the_ids_of_the_whole(tmp_path, model):
    text = "".join(f"{i}: {TEXT[(i * 97) % 5000:(i * 97) % 5000 + 200]}\n" for i in range(2000)) + "the end"
    path = tmp_path / "big.txt"
    path.write_text(text, encoding="utf-8")
    rec = RecordingTokenizer(model.tokenizer)
    pieces = list(token_pieces(path, rec))
    assert len(pieces) > 3
    assert np.array_equal(np.concatenate(pieces), model.tokenizer.encode(text))
    assert rec.longest < 2 * text_files._TARGET + text_files._BLOCK < len(text)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(list("ab c\n\n  .,é🎉\t") + ["<|endoftext|>", "e\u0301"]), max_size=200).map("".join))
def test_pieces_equal_the_whole_encoding(text):
    tok = gptcore.Tokenizer.from_folder(FOLDER)
    old = text_files._TARGET, text_files._BLOCK, text_files._CHECK_CHARS
    text_files._TARGET, text_files._BLOCK, text_files._CHECK_CHARS = 8, 5, 6  # many cuts
    try:
        import io

        pieces = list(text_files._pieces(io.BytesIO(text.encode("utf-8")), tok, 10**6, "t"))
    finally:
        text_files._TARGET, text_files._BLOCK, text_files._CHECK_CHARS = old
    got = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    assert np.array_equal(got, tok.encode(text))


def test_a_tokenizer_that_cannot_be_cut_gets_the_whole_text(tmp_path):
    """SentencePiece's Metaspace marks the start of each text it is given: cut at a line, the
    next piece would begin with a word-start mark the whole text does not have there. The
    check around each cut sees it, and the text is encoded whole (up to the limit)."""
    from tokenizers import Tokenizer as HF, models, pre_tokenizers, trainers, decoders

    hf = HF(models.BPE(unk_token="<unk>"))
    hf.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first", split=False)
    hf.decoder = decoders.Metaspace(prepend_scheme="first", split=False)
    hf.train_from_iterator(TEXT.splitlines(), trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>"]))
    tok = gptcore.Tokenizer(hf)
    text = "\n".join(["Line one of it", "line two"] * 9000)
    path = tmp_path / "t.txt"
    path.write_text(text, encoding="utf-8")
    assert not np.array_equal(np.concatenate([tok.encode("Line one\n"), tok.encode("line two")]),
                              tok.encode("Line one\nline two"))  # cutting would change the ids
    assert np.array_equal(np.concatenate(list(token_pieces(path, tok))), tok.encode(text))
    with pytest.raises(TextTooLongError, match=r"longer than 100,000 bytes and its tokenizer must be given the "
                                               r"whole text at once"):
        list(token_pieces(path, tok, max_line_bytes=100_000))


def test_a_line_longer_than_the_limit_and_bad_utf8_are_clear_errors(tmp_path, model):
    path = tmp_path / "line.txt"
    path.write_text("x" * 300_000 + "\nmore", encoding="utf-8")
    with pytest.raises(TextTooLongError, match=r"more than 200,000 bytes of text without a line break"):
        list(token_pieces(path, model.tokenizer, max_line_bytes=200_000))
    bad = tmp_path / "bad.txt"
    bad.write_bytes(("ok\n" * 40_000).encode() + b"caf\xe9")
    with pytest.raises(ValueError, match=r"not UTF-8 text \(byte 0xe9 at offset 120,003\)"):
        list(token_pieces(bad, model.tokenizer))


# ------------------------------------------------------------------------------ scoring as it comes
@settings(max_examples=40, deadline=None)
@given(st.integers(0, 300), st.integers(2, 40), st.data())
def test_score_pieces_equals_score_ids_bit_for_bit(n, context, data):
    model = _MODEL()
    stride = data.draw(st.integers(1, context - 1))
    batch = data.draw(st.integers(1, 4))
    ids = model.tokenizer.encode(TEXT)[:n]
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=6)))
    pieces = [ids[a:b] for a, b in zip([0] + cuts, cuts + [n])]
    got = score_pieces(model, pieces, context=context, stride=stride, batch=batch)
    want = score_ids(model, ids, context=context, stride=stride)
    assert (got.tokens, got.nll) == (want.tokens, want.nll)
    assert got.tokens == 0 or (got.mean, got.perplexity) == (want.mean, want.perplexity)


_CACHE = {}


def _MODEL():
    if "m" not in _CACHE:
        _CACHE["m"] = gptcore.load(FOLDER)
    return _CACHE["m"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False, width=64), max_size=60), st.data())
def test_exact_sum_equals_fsum(values, data):
    cuts = sorted(data.draw(st.lists(st.integers(0, len(values)), max_size=4)))
    s = ExactSum()
    for a, b in zip([0] + cuts, cuts + [len(values)]):
        s.add(values[a:b])
    try:
        want = math.fsum(values)
    except OverflowError:
        return
    assert s.value == want


# ------------------------------------------------------------------------------ under a memory limit
_LIMITED = r"""
import os, resource, sys
sys.path.insert(0, {pkg!r})
from gptcore.cli import main
import gptcore
{warm}
# what this process has mapped now (libraries, thread stacks, the model) plus {head} MiB
size = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + {head} * 2**20, resource.RLIM_INFINITY))
sys.exit(main({argv!r}))
"""

_WARM_PERPLEXITY = ("m = gptcore.load({folder!r}); m.token_logprobs(m.tokenizer.encode('We hold these truths to be')); "
                    "from tqdm import tqdm")
_WARM_SCORE = ("import pandas, pyarrow; from gptcore import distributed; " + _WARM_PERPLEXITY)


def run_limited(argv, warm, head=384):
    code = _LIMITED.format(pkg=str(PKG), argv=[str(a) for a in argv], head=head,
                           warm=warm.format(folder=str(FOLDER)))
    env = dict(os.environ, MALLOC_ARENA_MAX="2", RAYON_NUM_THREADS="2", TOKENIZERS_PARALLELISM="false",
               GPTCORE_NUM_THREADS="2")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def sparse_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("sparse") / "zeros.txt"
    with open(path, "wb") as fh:
        fh.truncate(2 * 10**9)  # 2 GB of zero bytes (valid UTF-8), no disk used
    return path


@pytest.mark.skipif(not os.path.exists("/dev/zero") or sys.platform != "linux", reason="needs Linux's /dev/zero")
def test_perplexity_on_dev_zero_and_a_sparse_file_under_a_memory_limit(sparse_file, model):
    p = run_limited(["perplexity", FOLDER, "/dev/zero", sparse_file, FIXTURES / "text" / "public-domain.txt",
                     "--no-progress"], _WARM_PERPLEXITY)
    assert p.returncode == 1, p.stderr
    errors = [line for line in p.stderr.splitlines() if "error:" in line]
    assert len(errors) == 2, p.stderr
    for name, line in zip(("/dev/zero", str(sparse_file)), errors):
        assert line.startswith(f"gptcore perplexity: error: {name!r} has more than 1,048,576 bytes of text without "
                               "a line break"), line
        assert "--max-line-bytes" in line
    assert "Traceback" not in p.stderr and "MemoryError" not in p.stderr
    assert "public-domain.txt" in p.stdout and "total" in p.stdout  # the good file is scored all the same
    want = model.score_text(TEXT)
    row = [line for line in p.stdout.splitlines() if line.startswith("tests/") or "public-domain" in line][0]
    assert f"{want.mean:.6f}" in row


@pytest.mark.skipif(not os.path.exists("/dev/zero") or sys.platform != "linux", reason="needs Linux's /dev/zero")
def test_score_on_dev_zero_and_a_sparse_file_under_a_memory_limit(sparse_file, tmp_path):
    good = tmp_path / "good.txt"
    good.write_text(TEXT[:2000], encoding="utf-8")
    p = run_limited(["score", FOLDER, "/dev/zero", str(sparse_file), str(good), "--no-progress"], _WARM_SCORE)
    assert p.returncode == 1, p.stderr  # two documents could not be scored
    lines = p.stdout.splitlines()
    assert lines[0].split()[:5] == ["path", "scored", "nll", "mean", "perplexity"]
    assert "without a line break" in lines[1] and "without a line break" in lines[2]
    assert lines[3].split()[0] == str(good) and "error" not in lines[3].lower()
    assert "2 document(s) could not be scored" in p.stderr and "MemoryError" not in p.stderr


def test_the_memory_limit_is_real():
    """The same child reading /dev/zero whole fails under the limit: the tests above show
    bounded reading, not a generous limit."""
    code = textwrap.dedent(_LIMITED.format(pkg=str(PKG), argv=[], head=384, warm="")).replace(
        "sys.exit(main([]))", "open('/dev/zero', 'rb').read(2 * 10**9)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "MemoryError" in p.stderr
