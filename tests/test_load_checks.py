"""Broken models caught when they are loaded, not later: a NaN or an infinity in any tensor
(every storage format, both loading paths), a tokenizer with more ids than the model's
vocabulary, a tokenizer of a kind gptcore does not read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import gptcore
from gptcore.weights import safetensors_file
from gptcore.weights.formats import first_nonfinite, to_half_bits

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FOLDER = FIXTURES / "tiny-bpe"


def copy_folder(tmp_path, names=("config.json", "model.safetensors", "tokenizer.json")):
    for name in names:
        shutil.copy(FOLDER / name, tmp_path / name)
    return tmp_path


def rewrite_tensor(folder, name, index, value, code="F32"):
    """Rewrite model.safetensors with one value of one tensor changed (and every tensor in
    ``code``, for the 16-bit formats)."""
    entries, meta = safetensors_file.read_header(folder / "model.safetensors", "test")
    tensors = {}
    for e in entries:
        a = safetensors_file.read_tensor(e, "test").astype(np.float32)
        if e.name == name:
            a[index] = value
        if code == "F32" or a.ndim < 2:
            tensors[e.name] = ("F32", a)
        else:
            tensors[e.name] = (code, to_half_bits(a, {"BF16": "bfloat16", "F16": "float16"}[code]))
    safetensors_file.write_file(folder / "model.safetensors", tensors, meta)


@pytest.mark.parametrize("code", ["F32", "BF16", "F16"])
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("weight_dtype", [None, "bfloat16"])
def test_a_non_finite_weight_is_refused_naming_tensor_and_index(tmp_path, code, value, weight_dtype):
    folder = copy_folder(tmp_path)
    rewrite_tensor(folder, "transformer.h.1.mlp.c_fc.weight", (7, 33), value, code)
    with pytest.raises(ValueError, match=r"tensor 'transformer\.h\.1\.mlp\.c_fc\.weight' in .*model\.safetensors"
                                         r".* at index \[7, 33\].*allow_nonfinite=True"):
        gptcore.load(folder, weight_dtype=weight_dtype)
    model = gptcore.load(folder, weight_dtype=weight_dtype, allow_nonfinite=True)  # to debug it
    with pytest.raises(FloatingPointError, match="not finite"):
        model.generate(model.tokenizer.encode("We hold"), 3, greedy=True)


def test_a_non_finite_bias_and_the_reader_are_caught_too(tmp_path):
    folder = copy_folder(tmp_path)
    rewrite_tensor(folder, "transformer.ln_f.bias", (5,), np.nan)
    with pytest.raises(ValueError, match=r"'transformer\.ln_f\.bias'.*index \[5\]"):
        gptcore.load_safetensors(folder)
    with pytest.raises(ValueError, match=r"'transformer\.ln_f\.bias'.*index \[5\]"):
        gptcore.load(folder, weight_dtype="float16")  # the lazy path reads biases at once
    weights, _ = gptcore.load_safetensors(folder, allow_nonfinite=True)
    assert np.isnan(weights["ln_f.bias"][5])


def test_first_nonfinite_finds_the_first_in_one_pass():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((300, 7)).astype(np.float32)
    assert first_nonfinite(a, "F32") is None
    a[250, 3] = np.inf
    a[260, 0] = np.nan
    assert first_nonfinite(a, "F32") == (250, 3)
    big = np.full(10, 3e38, dtype=np.float32)  # finite values whose float32 sum overflows
    assert first_nonfinite(big, "F32") is None
    bits = to_half_bits(rng.standard_normal(100).astype(np.float32), "bfloat16")
    assert first_nonfinite(bits, "BF16") is None
    bits[42] = 0x7FC0  # a bfloat16 NaN
    assert first_nonfinite(bits, "BF16") == (42,)
    half = rng.standard_normal(50).astype(np.float16)
    half[9] = np.float16(np.inf)
    assert first_nonfinite(half, "F16") == (9,)
    assert first_nonfinite(np.arange(5), "I64") is None


def _with_vocab(tmp_path, extra_ids):
    """The fixture folder with a tokenizer.json whose vocabulary also holds ``extra_ids``
    (ids the model's vocab_size of 640 does not reach)."""
    folder = copy_folder(tmp_path)
    tj = json.loads((FOLDER / "tokenizer.json").read_text(encoding="utf-8"))
    for i in extra_ids:
        tj["model"]["vocab"][f"<extra{i}>"] = i
    (folder / "tokenizer.json").write_text(json.dumps(tj), encoding="utf-8")
    return folder


def test_a_tokenizer_larger_than_the_model_is_refused_at_load(tmp_path):
    folder = _with_vocab(tmp_path, [700])  # 641 entries, the largest id 700
    tok = gptcore.Tokenizer.from_folder(folder)
    assert tok.vocab_size == 701  # the ids, not the count of entries, bound it
    with pytest.raises(ValueError, match=r"has 701 ids \(added tokens included\) but the model in .* has "
                                         r"vocab_size = 640"):
        gptcore.load(folder)
    with pytest.raises(ValueError, match=r"has 701 ids"):
        gptcore.load(FOLDER, tokenizer=folder)
    # an added token beyond the model's vocabulary counts as well
    (tmp_path / "added").mkdir()
    folder2 = copy_folder(tmp_path / "added")
    tj = json.loads((FOLDER / "tokenizer.json").read_text(encoding="utf-8"))
    tj["added_tokens"].append({"id": 640, "content": "<|im_end|>", "single_word": False, "lstrip": False,
                               "rstrip": False, "normalized": False, "special": True})
    (folder2 / "tokenizer.json").write_text(json.dumps(tj), encoding="utf-8")
    with pytest.raises(ValueError, match=r"641 ids .* vocab_size = 640"):
        gptcore.load(folder2)


def test_a_wordpiece_tokenizer_is_named_as_such(tmp_path):
    folder = copy_folder(tmp_path, ("config.json", "model.safetensors"))
    wordpiece = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
                 "pre_tokenizer": None, "post_processor": None, "decoder": None,
                 "model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "a": 1}}}
    (folder / "tokenizer.json").write_text(json.dumps(wordpiece), encoding="utf-8")
    with pytest.raises(ValueError, match=r"holds a WordPiece tokenizer.*read BPE and Unigram"):
        gptcore.load(folder)
    broken = dict(wordpiece, model={"type": "BPE", "vocab": "not a vocabulary"})
    (folder / "tokenizer.json").write_text(json.dumps(broken), encoding="utf-8")
    with pytest.raises(ValueError, match=r"not a valid tokenizer.json: it holds a BPE tokenizer that the installed "
                                         r"tokenizers library"):
        gptcore.load(folder)


@pytest.mark.parametrize("weight_dtype", [None, "bfloat16"])
def test_a_non_finite_weight_in_a_gguf_file_is_refused(tmp_path, weight_dtype):
    weights, config = gptcore.load_safetensors(FOLDER)
    weights = {k: v.copy() for k, v in weights.items()}
    weights["h.0.attn.c_proj.weight"][3, 5] = np.inf
    path = tmp_path / "model.gguf"
    gptcore.Model(weights, config).save(path)  # in memory a model may hold it, to study it
    with pytest.raises(ValueError, match=r"'h\.0\.attn\.c_proj\.weight' in .*model\.gguf.* at index \[3, 5\]"):
        gptcore.load(path, weight_dtype=weight_dtype)
    model = gptcore.load(path, weight_dtype=weight_dtype, allow_nonfinite=True)
    assert model.config == config
