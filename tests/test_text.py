"""Text in, text out: the tokenizer, streaming decode, text generation and scoring, long
generation past the context.

The fixture ``tests/fixtures/tiny-bpe`` holds a real byte-level BPE (383 merges trained with
Hugging Face ``tokenizers`` on ``tests/fixtures/text/public-domain.txt``) and a random model
of matching vocabulary; ``tests/fixtures/make_tiny_bpe.py`` made it.
"""

from __future__ import annotations

import math
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gptcore
from gptcore.text import stream_pieces
from gptcore.tokenizer import StreamDecoder, Tokenizer

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FOLDER = FIXTURES / "tiny-bpe"
TEXT = (FIXTURES / "text" / "public-domain.txt").read_text(encoding="utf-8")

SAMPLES = [
    "We hold these truths to be self-evident",
    "naïve café, Grüße aus Köln, ½ € — “quotes”",
    "東京 und 北京; русский текст; ελληνικά; עברית; العربية",
    "emoji 🎉🚀 a family 👩‍👩‍👧 a flag 🇺🇦 a skin tone 👍🏽 and a keycap 1️⃣",
    "e\u0301 (combining accent), \t tabs,\n\nnew lines\r\n and   spaces  ",
    "a special token <|endoftext|> in the middle",
    "\x00\x1f control bytes \U0010ffff",
]


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.from_folder(FOLDER)


@pytest.fixture(scope="module")
def model():
    return gptcore.load(FOLDER)


def pair_folder(tmp_path):
    """A copy of the fixture's model with only vocab.json + merges.txt as its tokenizer."""
    for name in ("config.json", "model.safetensors", "vocab.json", "merges.txt"):
        shutil.copy(FOLDER / name, tmp_path / name)
    return tmp_path


# ------------------------------------------------------------------------------- tokenizer
def test_fixture_tokenizer_is_a_real_bpe(tok):
    raw = tok.backend
    merges = [l for l in (FOLDER / "merges.txt").read_text(encoding="utf-8").splitlines() if l and not l.startswith("#")]
    assert 300 <= len(merges) <= 500
    assert tok.vocab_size == 256 + 1 + len(merges) == gptcore.load(FOLDER).config.vocab_size
    assert tok.eos_id == raw.token_to_id("<|endoftext|>") is not None
    # frequent words of the training text became single tokens, unseen text falls back to bytes
    assert len(tok.encode(" the")) == 1 and len(tok.encode(" government")) <= 3
    assert len(tok.encode("🎉")) == 4  # four UTF-8 bytes, four byte tokens
    ids = tok.encode(TEXT)
    assert 1.5 < len(TEXT) / len(ids) < 5  # merged well below one token per byte
    assert ids.dtype == np.int64 and ids.ndim == 1


@pytest.mark.parametrize("text", SAMPLES + [TEXT, ""])
def test_round_trip(tok, text):
    ids = tok.encode(text)
    assert ids.dtype == np.int64 and ids.ndim == 1
    assert tok.decode(ids) == text
    assert tok.decode(ids.tolist()) == text


@given(st.text(max_size=60))
@settings(max_examples=200, deadline=None)
def test_round_trip_any_text(text):
    tok = Tokenizer.from_folder(FOLDER)
    assert tok.decode(tok.encode(text)) == text


def test_vocab_merges_pair_gives_the_same_ids(tmp_path, tok):
    pair = Tokenizer.from_folder(pair_folder(tmp_path))
    assert pair.vocab_size == tok.vocab_size and pair.eos_id == tok.eos_id
    for text in SAMPLES + [TEXT]:
        ids = tok.encode(text)
        assert np.array_equal(pair.encode(text), ids), text
        assert pair.decode(ids) == text


def test_special_token_is_one_id(tok):
    ids = tok.encode("a<|endoftext|>b")
    assert tok.eos_id in ids.tolist() and ids.tolist().count(tok.eos_id) == 1
    assert tok.decode(ids) == "a<|endoftext|>b"


def test_from_folder_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such folder"):
        Tokenizer.from_folder(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError) as e:
        Tokenizer.from_folder(tmp_path)
    assert all(name in str(e.value) for name in ("tokenizer.json", "vocab.json", "merges.txt"))
    shutil.copy(FOLDER / "vocab.json", tmp_path / "vocab.json")
    with pytest.raises(FileNotFoundError, match="merges.txt is missing"):
        Tokenizer.from_folder(tmp_path)
    (tmp_path / "vocab.json").unlink()
    shutil.copy(FOLDER / "merges.txt", tmp_path / "merges.txt")
    with pytest.raises(FileNotFoundError, match="vocab.json is missing"):
        Tokenizer.from_folder(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="not a valid tokenizer.json"):
        Tokenizer.from_folder(tmp_path)
    with pytest.raises(TypeError):
        Tokenizer.from_folder(3)


def test_encode_decode_bad_input(tok):
    with pytest.raises(TypeError, match="str"):
        tok.encode(b"bytes")
    with pytest.raises(ValueError, match="out of range"):
        tok.decode([1, tok.vocab_size])
    with pytest.raises(ValueError, match="out of range"):
        tok.decode([-1])
    with pytest.raises(ValueError, match="1-D"):
        tok.decode([[1, 2]])
    with pytest.raises(TypeError, match="integer"):
        tok.decode([1.5])
    assert tok.decode([]) == ""


# ------------------------------------------------------------------------------- streaming
def _splits_characters(tok, ids) -> bool:
    return any("\ufffd" in tok.decode(ids[:k]) for k in range(1, len(ids)))


@pytest.mark.parametrize("text", SAMPLES[1:4] + [TEXT[:400]])
def test_stream_decoder_never_emits_half_a_character(tok, text):
    ids = tok.encode(text)
    if text in SAMPLES:
        assert _splits_characters(tok, ids)  # the case the decoder exists for really occurs
    dec = tok.stream()
    emitted = ""
    for k, i in enumerate(ids, start=1):
        piece = dec.push(int(i))
        assert "\ufffd" not in piece
        emitted += piece
        # everything complete so far has come out, nothing more
        assert emitted == tok.decode(ids[:k]).rstrip("\ufffd")
    assert dec.flush() == ""
    assert emitted == text


@given(st.lists(st.integers(0, 639), max_size=40))
@settings(max_examples=200, deadline=None)
def test_stream_pieces_join_to_decode_for_any_ids(ids):
    """Any ids, valid UTF-8 or not: the pieces and the flush equal one decode of all ids."""
    tok = Tokenizer.from_folder(FOLDER)
    dec = StreamDecoder(tok)
    out = [dec.push(i) for i in ids[: len(ids) // 2]]
    out.append(dec.extend(ids[len(ids) // 2:]))
    out.append(dec.flush())
    assert "".join(out) == tok.decode(ids)
    assert dec.flush() == "" and dec.push(int(tok.encode("b")[0])) == "b"  # flushed: starts afresh


def test_stream_decoder_errors(tok):
    with pytest.raises(TypeError):
        StreamDecoder("not a tokenizer")
    with pytest.raises(ValueError, match="out of range"):
        tok.stream().push(10_000)


# ------------------------------------------------------------------------------- load
def test_load_picks_up_the_tokenizer(tmp_path, model, tok):
    assert isinstance(model.tokenizer, Tokenizer) and model.tokenizer.vocab_size == tok.vocab_size
    m2 = gptcore.load(pair_folder(tmp_path))
    assert np.array_equal(m2.tokenizer.encode(TEXT), tok.encode(TEXT))


def test_folder_without_tokenizer_works_for_ids_only(tmp_path, model):
    for name in ("config.json", "model.safetensors"):
        shutil.copy(FOLDER / name, tmp_path / name)
    m = gptcore.load(tmp_path)
    assert m.tokenizer is None
    ids = model.tokenizer.encode("We hold")
    assert np.array_equal(m.generate(ids, 5, greedy=True), model.generate(ids, 5, greedy=True))
    for call in (lambda: m.generate_text("We", 3), lambda: list(m.stream_text("We", 3)), lambda: m.score_text("We hold")):
        with pytest.raises(ValueError) as e:
            call()
        assert all(name in str(e.value) for name in ("tokenizer.json", "vocab.json", "merges.txt"))
        assert str(tmp_path) in str(e.value)
    # half a pair: ids still load, the text error names the missing file
    shutil.copy(FOLDER / "vocab.json", tmp_path / "vocab.json")
    with pytest.raises(ValueError, match="merges.txt is missing"):
        gptcore.load(tmp_path).generate_text("We", 3)
    # a tokenizer from elsewhere
    m3 = gptcore.load(tmp_path, tokenizer=FOLDER)
    assert m3.generate_text("We", 4, greedy=True) == model.generate_text("We", 4, greedy=True)


def test_single_file_and_model_without_tokenizer(tmp_path, model):
    path = tmp_path / "m.safetensors"
    model.save(path)
    m = gptcore.load(path)
    assert m.tokenizer is None
    with pytest.raises(ValueError, match="single file"):
        m.generate_text("We", 2)
    bare = gptcore.Model(*gptcore.load_safetensors(FOLDER))
    with pytest.raises(ValueError, match="model.tokenizer = "):
        bare.score_text("We hold")
    bare.tokenizer = model.tokenizer
    assert bare.generate_text("We", 3, greedy=True) == model.generate_text("We", 3, greedy=True)


def test_tokenizer_must_fit_the_vocabulary(model):
    small = gptcore.Model(gptcore.init_weights(model.config.replace(vocab_size=100), seed=0))
    with pytest.raises(ValueError, match="vocab_size = 100"):
        small.tokenizer = model.tokenizer
    with pytest.raises(TypeError):
        small.tokenizer = "gpt2"
    small.tokenizer = None
    assert small.tokenizer is None


# ------------------------------------------------------------------------------- generation
@pytest.mark.parametrize("options", [dict(greedy=True), dict(seed=3), dict(seed=5, temperature=0.7, top_k=20, top_p=0.9)])
def test_generate_text_is_decode_of_generate(model, options):
    tok = model.tokenizer
    prompt = "We hold these truths"
    ids = model.generate(tok.encode(prompt), 40, **options)
    assert model.generate_text(prompt, 40, stop_at_eos=False, **options) == tok.decode(ids)
    pieces = list(model.stream_text(prompt, 40, stop_at_eos=False, **options))
    assert "".join(pieces) == tok.decode(ids) and all(pieces)


def test_streamed_generation_emits_whole_characters(model):
    tok = model.tokenizer
    prompt = "emoji 🎉 and 東京"
    pairs = list(stream_pieces(model, tok.encode(prompt), 60, stop_at_eos=False, seed=11))
    ids = [t for t, _ in pairs if t is not None]
    assert len(ids) == 60 and pairs[-1][0] is None
    emitted = ""
    for k, (t, piece) in enumerate(pairs[:-1], start=1):
        emitted += piece
        assert emitted == tok.decode(ids[:k]).rstrip("\ufffd")
    assert emitted + pairs[-1][1] == tok.decode(ids)


def test_stop_tokens_and_end_of_text(model):
    tok = model.tokenizer
    prompt = "Four score"
    ids = model.generate(tok.encode(prompt), 12, greedy=True).tolist()
    k = next(i for i in range(2, len(ids)) if ids[i] not in ids[:i])
    assert model.generate_text(prompt, 12, greedy=True, stop_tokens=[ids[k]]) == tok.decode(ids[:k])
    # a model whose every next token is <|endoftext|> (untied head: one row of ones, LayerNorm
    # output constant): it stops at once, or writes the token when told to ignore it
    cfg = model.config.replace(tied=False)
    w = dict(gptcore.load_safetensors(FOLDER)[0])
    w["ln_f.weight"] = np.zeros_like(w["ln_f.weight"])
    w["ln_f.bias"] = np.ones_like(w["ln_f.bias"])
    head = np.zeros((cfg.vocab_size, cfg.d_model), dtype=np.float32)
    head[tok.eos_id] = 1.0
    w["lm_head.weight"] = head
    eos_model = gptcore.Model(w, cfg)
    eos_model.tokenizer = tok
    assert eos_model.generate_text(prompt, 5, greedy=True) == ""
    assert eos_model.generate_text(prompt, 3, greedy=True, stop_at_eos=False) == "<|endoftext|>" * 3


def test_text_generation_bad_input(model):
    with pytest.raises(ValueError, match="empty"):
        model.generate_text("", 3)
    with pytest.raises(TypeError, match="str"):
        model.generate_text(np.array([1, 2]), 3)
    with pytest.raises(TypeError, match="stop_at_eos"):
        model.generate_text("We", 3, stop_at_eos=1)
    with pytest.raises(TypeError, match="stop_tokens"):
        model.generate_text("We", 3, stop_tokens="x")
    with pytest.raises(ValueError, match="stop_tokens"):
        model.generate_text("We", 3, stop_tokens=[10_000])
    with pytest.raises(TypeError, match="return_logprobs"):
        model.generate_text("We", 3, return_logprobs=True)


# ------------------------------------------------------------------------------- scoring
def hf_recipe(model, ids, context, stride):
    """Hugging Face's perplexity loop, written out: (log-probabilities of the scored tokens in
    document order) from Model.token_logprobs on each window."""
    out, prev_end = [], 0
    for begin in range(0, len(ids), stride):
        end = min(begin + context, len(ids))
        lp = model.token_logprobs(ids[begin:end])  # lp[j] scores ids[begin + j + 1]
        first = max(prev_end, begin + 1)
        out.append(lp[first - begin - 1:])
        prev_end = end
        if end == len(ids):
            break
    return np.concatenate(out)


def test_score_text_short_equals_token_logprobs(model):
    text = TEXT[:300]
    ids = model.tokenizer.encode(text)
    assert len(ids) <= model.config.n_ctx
    r = model.score_text(text)
    lp = model.token_logprobs(ids)
    assert r.tokens == len(ids) - 1
    assert np.array_equal(r.logprobs, lp)
    assert r.nll == -math.fsum(lp.tolist())
    assert r.perplexity == pytest.approx(math.exp(-lp.mean()), rel=1e-12)


@pytest.mark.parametrize("context, stride, batch", [(None, None, 1), (128, 32, 3), (64, 63, 2), (16, 1, 8)])
def test_score_text_long_is_the_sliding_window_recipe(model, context, stride, batch):
    text = TEXT[:3000]
    ids = model.tokenizer.encode(text)
    c = context or model.config.n_ctx
    s = stride or c // 2
    ref = hf_recipe(model, ids, c, s)
    r = model.score_text(text, context=context, stride=stride, batch=batch)
    assert r.tokens == len(ids) - 1 == ref.size
    assert np.array_equal(r.logprobs, ref)
    assert r.mean == pytest.approx(-ref.mean(), rel=1e-12)


def test_score_text_bad_input(model):
    with pytest.raises(ValueError, match="at least 2"):
        model.score_text("W")
    with pytest.raises(TypeError):
        model.score_text(b"bytes")
    with pytest.raises(ValueError, match="n_ctx"):
        model.score_text(TEXT[:2000], context=129)
    with pytest.raises(ValueError, match="stride"):
        model.score_text(TEXT[:2000], context=64, stride=64)


# ------------------------------------------------------------------------------- past n_ctx
def reference_long_generation(model, prompt, n, shift):
    """Greedy generation past n_ctx as documented, with full forward passes: when the
    sequence would exceed n_ctx, the `shift` oldest tokens of the window are dropped."""
    n_ctx = model.config.n_ctx
    window = list(prompt[-n_ctx:])
    out = []
    for _ in range(n):
        tok = int(model.forward(np.array(window), logits="last").argmax())
        out.append(tok)
        window.append(tok)
        if len(window) > n_ctx:
            window = window[shift:]
    return out


@pytest.mark.parametrize("shift", [1, 2, 32, 128])
def test_context_shift_matches_the_documented_window(model, shift):
    prompt = model.tokenizer.encode(TEXT[:2000])[:120]
    n = 60  # runs 51 tokens past n_ctx = 128
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = model.generate(prompt, n, greedy=True, context_shift=shift)
        streamed = list(model.stream(prompt, n, greedy=True, context_shift=shift))
    assert got.tolist() == reference_long_generation(model, prompt, n, shift) == streamed


def test_context_shift_batch_and_long_prompt(model):
    ids = model.tokenizer.encode(TEXT[:3000])
    batch = np.stack([ids[:200], ids[300:500]])  # prompts longer than n_ctx: cropped first
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = model.generate(batch, 20, greedy=True, context_shift=8)
    for row in range(2):
        assert got[row].tolist() == reference_long_generation(model, batch[row], 20, 8)


def test_exact_crop_warns_once_when_it_starts(model):
    prompt = model.tokenizer.encode(TEXT[:2000])[:120]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.generate(prompt, 8, greedy=True)  # 120 + 8 = 128 tokens: never past n_ctx
        assert not caught
        model.generate(prompt, 30, greedy=True)  # default context_shift=1: crops 21 times
        model.generate(prompt, 30, greedy=True, context_shift=32)  # the fast mode: no warning
    assert len(caught) == 1
    assert issubclass(caught[0].category, UserWarning)
    assert "n_ctx = 128" in str(caught[0].message) and "context_shift=32" in str(caught[0].message)
    assert caught[0].filename == __file__  # points at the caller


def test_context_shift_bad_values(model):
    for bad, err in ((0, ValueError), (129, ValueError), (True, TypeError), (2.0, TypeError)):
        with pytest.raises(err, match="context_shift"):
            model.generate([1, 2], 3, context_shift=bad)


def test_generated_id_beyond_the_tokenizer_is_a_clear_error(model):
    """A model whose vocabulary is larger than its tokenizer's (padded) can generate an id
    that has no text: the text call says so instead of failing deep in the decoder."""
    cfg = model.config.replace(vocab_size=700, tied=False)
    w = dict(gptcore.load_safetensors(FOLDER)[0])
    w["wte.weight"] = np.concatenate([w["wte.weight"], np.zeros((60, cfg.d_model), np.float32)])
    w["ln_f.weight"] = np.zeros_like(w["ln_f.weight"])
    w["ln_f.bias"] = np.ones_like(w["ln_f.bias"])
    head = np.zeros((cfg.vocab_size, cfg.d_model), dtype=np.float32)
    head[650] = 1.0  # always the padded id 650
    w["lm_head.weight"] = head
    padded = gptcore.Model(w, cfg)
    padded.tokenizer = model.tokenizer
    with pytest.raises(ValueError, match="generated token 650, which its tokenizer \\(640 ids\\) has no text for"):
        padded.generate_text("We", 3, greedy=True)
