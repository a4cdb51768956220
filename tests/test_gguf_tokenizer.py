"""Tokenizers to and from GGUF metadata: written, read back through a GGUF file and rebuilt,
they encode and decode as the original tokenizer.json does."""

from __future__ import annotations

import json
from pathlib import Path

import gguf as ref
import numpy as np
import pytest
import tokenizers

import gptcore
from gptcore.gguf import GGUFReader, Value, ValueType, write_gguf
from gptcore.gguf.tokenizer import TOKEN_TYPES, tokenizer_from_metadata, tokenizer_metadata

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TINY = FIXTURES / "tiny-bpe"
TEXT = (FIXTURES / "text" / "public-domain.txt").read_text(encoding="utf-8")

SAMPLES = [
    "",
    "When in the Course of human events",
    TEXT,
    "héllo wörld — naïve café, Ærøskøbing, ĳ, ﬁ",
    "日本語のテキスト、中文文本，한국어 텍스트",
    "emoji 🎉👍🏽 family 👨‍👩‍👧 flags 🇫🇷",
    "e\u0301 combining, \u200b zero width, \u00a0 no-break, مرحبا بالعالم, שלום",
    "<|endoftext|>",
    "text<|endoftext|>more <|endoftext|><|endoftext|> end<|endoftext",
    "  leading and trailing spaces  \n\n\ttabs\r\nCRLF   multiple    spaces\n",
    "numbers 1234567890 3.14159 -42 1,000,000 and punctuation !?.,;:'\"()[]{}<>",
    "it's they're we'll I'd you've don't 'quoted' \"double\"",
    "\x00\x01\x7f control bytes \ufffd replacement",
]


def _through_gguf(tmp_path: Path, tok: gptcore.Tokenizer, vocab_size: int) -> gptcore.Tokenizer:
    p = write_gguf(tmp_path / "tok.gguf", tokenizer_metadata(tok, vocab_size), [])
    with GGUFReader(p) as r:
        out = tokenizer_from_metadata(r.metadata, str(p))
    assert out is not None
    return out


def _same_behaviour(a: gptcore.Tokenizer, b: gptcore.Tokenizer) -> None:
    for s in SAMPLES:
        ia, ib = a.encode(s), b.encode(s)
        assert np.array_equal(ia, ib), s[:40]
        assert a.decode(ia) == b.decode(ib)
    n = a.vocab_size
    for i in range(n):
        assert a.decode([i]) == b.decode([i]), i
    rng = np.random.default_rng(0)
    for _ in range(20):
        ids = rng.integers(0, n, 30)
        assert a.decode(ids) == b.decode(ids)


def test_the_fixture_tokenizer_survives_a_gguf_file(tmp_path):
    tok = gptcore.Tokenizer.from_file(TINY / "tokenizer.json")
    back = _through_gguf(tmp_path, tok, tok.vocab_size)
    assert back.vocab_size == tok.vocab_size
    assert back.eos_id == tok.eos_id == tok.backend.token_to_id("<|endoftext|>")
    _same_behaviour(tok, back)
    # the vocab.json + merges.txt pair gives the same tokenizer too
    pair = gptcore.Tokenizer._from_pair(TINY / "vocab.json", TINY / "merges.txt")
    _same_behaviour(pair, _through_gguf(tmp_path, pair, pair.vocab_size))


def test_metadata_has_llama_cpp_types_and_pads_to_the_model_vocabulary(tmp_path):
    tok = gptcore.Tokenizer.from_file(TINY / "tokenizer.json")
    meta = tokenizer_metadata(tok, 700)
    p = write_gguf(tmp_path / "tok.gguf", meta, [])
    g = ref.GGUFReader(p)
    types = {k: [t.name for t in f.types] for k, f in g.fields.items() if k.startswith("tokenizer.")}
    assert types["tokenizer.ggml.model"] == ["STRING"] and g.fields["tokenizer.ggml.model"].contents() == "gpt2"
    assert g.fields["tokenizer.ggml.pre"].contents() == "gpt-2"
    assert types["tokenizer.ggml.tokens"] == ["ARRAY", "STRING"]
    assert types["tokenizer.ggml.token_type"] == ["ARRAY", "INT32"]
    assert types["tokenizer.ggml.merges"] == ["ARRAY", "STRING"]
    assert types["tokenizer.ggml.eos_token_id"] == ["UINT32"]
    tokens = g.fields["tokenizer.ggml.tokens"].contents()
    tt = g.fields["tokenizer.ggml.token_type"].contents()
    assert len(tokens) == 700 and tokens[650] == "[PAD650]" and tt[650] == TOKEN_TYPES["unused"]
    assert tt[tok.eos_id] == TOKEN_TYPES["control"] and tt[300] == TOKEN_TYPES["normal"]
    merges = g.fields["tokenizer.ggml.merges"].contents()
    fixture_merges = json.loads((TINY / "tokenizer.json").read_text())["model"]["merges"]
    assert merges == [" ".join(m) if isinstance(m, list) else m for m in fixture_merges]
    back = _through_gguf(tmp_path, tok, 700)
    assert back.vocab_size == 700
    for s in SAMPLES:
        assert np.array_equal(tok.encode(s), back.encode(s))


def test_added_tokens_special_and_plain(tmp_path):
    raw = tokenizers.Tokenizer.from_file(str(TINY / "tokenizer.json"))
    raw.add_special_tokens([tokenizers.AddedToken("<|im_start|>", special=True, normalized=False)])
    raw.add_tokens([tokenizers.AddedToken("<tool>", special=False, normalized=False)])
    tok = gptcore.Tokenizer(raw)
    meta = tokenizer_metadata(tok, tok.vocab_size)
    tt = meta["tokenizer.ggml.token_type"].value
    assert tt[raw.token_to_id("<|im_start|>")] == TOKEN_TYPES["control"]
    assert tt[raw.token_to_id("<tool>")] == TOKEN_TYPES["user_defined"]
    back = _through_gguf(tmp_path, tok, tok.vocab_size)
    extra = ["a<|im_start|>b<tool>c", "<tool><tool> <|im_start|>user\nhi<|endoftext|>"]
    for s in SAMPLES + extra:
        assert np.array_equal(tok.encode(s), back.encode(s)), s[:40]
    ids = tok.encode(extra[1])
    assert tok.decode(ids) == back.decode(ids) == extra[1]


def _meta(**change):
    tok = gptcore.Tokenizer.from_file(TINY / "tokenizer.json")
    m = {k: v.value for k, v in tokenizer_metadata(tok, tok.vocab_size).items()}
    m.update(change)
    return {k: v for k, v in m.items() if v is not None}


@pytest.mark.parametrize("change, words", [
    (dict(**{"tokenizer.ggml.model": "llama"}), "tokenizer model 'llama' (SentencePiece) is not supported"),
    (dict(**{"tokenizer.ggml.model": "bert"}), "tokenizer model 'bert' (WordPiece)"),
    (dict(**{"tokenizer.ggml.model": "mystery"}), "tokenizer model 'mystery' is not supported"),
    (dict(**{"tokenizer.ggml.pre": "deepseek-llm"}), "pre-tokenizer 'deepseek-llm' is not supported"),
    (dict(**{"tokenizer.ggml.pre": "starcoder"}), "pre-tokenizer 'starcoder'"),
    (dict(**{"tokenizer.ggml.tokens": None}), "has no 'tokenizer.ggml.tokens'"),
    (dict(**{"tokenizer.ggml.merges": None}), "has no 'tokenizer.ggml.merges'"),
    (dict(**{"tokenizer.ggml.merges": ["Ġ t", "nospace"]}), "merge 1 ('nospace') is not two tokens"),
    (dict(**{"tokenizer.ggml.merges": ["Ġ ZZZ"]}), "uses 'ZZZ', which is not a token"),
    (dict(**{"tokenizer.ggml.tokens": ["a", "b", "a"], "tokenizer.ggml.token_type": None}), "token 'a' appears twice"),
    (dict(**{"tokenizer.ggml.token_type": np.ones(3, np.int32)}), "one integer per token"),
    (dict(**{"tokenizer.ggml.eos_token_id": 10**6}), "is not a token id"),
    (dict(**{"tokenizer.ggml.tokens": "abc"}), "has the wrong type"),
])
def test_unsupported_or_broken_metadata_is_named(change, words):
    with pytest.raises(ValueError) as info:
        tokenizer_from_metadata(_meta(**change), "'x.gguf'")
    assert words in str(info.value) and str(info.value).startswith("'x.gguf'")


def test_no_tokenizer():
    assert tokenizer_from_metadata({}) is None
    assert tokenizer_from_metadata({"tokenizer.ggml.model": "none"}) is None


def test_tokenizers_gguf_cannot_describe_are_refused():
    raw = tokenizers.Tokenizer.from_file(str(TINY / "tokenizer.json"))
    raw.normalizer = tokenizers.normalizers.NFC()
    with pytest.raises(ValueError, match="it has a normalizer"):
        tokenizer_metadata(gptcore.Tokenizer(raw), 640)
    raw = tokenizers.Tokenizer.from_file(str(TINY / "tokenizer.json"))
    raw.pre_tokenizer = tokenizers.pre_tokenizers.Metaspace()
    with pytest.raises(ValueError, match="pre-tokenizer is"):
        tokenizer_metadata(gptcore.Tokenizer(raw), 640)
    wp = tokenizers.Tokenizer(tokenizers.models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    with pytest.raises(ValueError, match="its model is 'WordPiece'"):
        tokenizer_metadata(gptcore.Tokenizer(wp), 2)
    tok = gptcore.Tokenizer.from_file(TINY / "tokenizer.json")
    with pytest.raises(ValueError, match="beyond the model's vocab_size = 100"):
        tokenizer_metadata(tok, 100)
    with pytest.raises(TypeError, match="gptcore Tokenizer"):
        tokenizer_metadata(raw, 640)
    assert isinstance(tokenizer_metadata(tok, 640)["tokenizer.ggml.add_bos_token"], Value)
    assert tokenizer_metadata(tok, 640)["tokenizer.ggml.add_bos_token"].type == ValueType.BOOL
