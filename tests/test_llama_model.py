"""Llama-family folders (Llama, Qwen2, SmolLM2's shape, llama3 rope, Mistral) loaded with
``gptcore.load`` against transformers' float64 logits and greedy tokens
(``tests/fixtures/*/expected.npz``) and against an independent numpy float64 Llama
(``tests/llama_reference.py``); and every exactness promise for them.

Bounds. ``logits`` in the fixtures come from transformers' model made to compute in float64
throughout; gptcore's float64 path agrees with them, and with the numpy reference, to 1e-10
relative to the largest |logit| (measured: a few 1e-15). Stock transformers' float64 model
(``logits_hf``) normalises in float32 (its RMSNorm casts to float32) and builds its rotary
cosines and sines in float32 even in a float64 model, so against it the bound is float32
precision: 5e-6 (measured up to 1.6e-6).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import gptcore
import llama_reference as ref
from gptcore.accounting import param_count
from gptcore.weights import checkpoint

FIXTURES = Path(__file__).parent / "fixtures"
FOLDERS = ["llama-tiny", "qwen2-tiny", "smollm2-tiny", "llama3-rope", "mistral-tiny"]


def expected(name):
    return np.load(FIXTURES / name / "expected.npz")


def rel(a, b):
    return float(np.abs(np.asarray(a, np.float64) - b).max() / np.abs(b).max())


@pytest.mark.parametrize("name", FOLDERS)
def test_float64_matches_transformers_and_the_numpy_reference(name):
    e = expected(name)
    m = gptcore.load(FIXTURES / name, dtype="float64")
    assert m.config.family == "llama" and m.weight_dtype is None
    z = m.forward(e["ids"])
    assert rel(z, e["logits"]) <= 1e-10
    w, cfg = ref.read_folder(FIXTURES / name)
    assert rel(z, ref.forward(w, cfg, e["ids"])) <= 1e-10
    # Stock transformers computes RMSNorm and the rotary tables in float32 (see the module).
    assert rel(z, e["logits_hf"].astype(np.float64)) <= 5e-6
    # Greedy decoding with the cache gives transformers' tokens.
    assert m.generate(e["prompt"], len(e["greedy"]), greedy=True).tolist() == e["greedy"].tolist()


@pytest.mark.parametrize("name", FOLDERS)
def test_float32_and_16_bit_storage_match_transformers(name):
    e = expected(name)
    m = gptcore.load(FIXTURES / name)
    # The bfloat16 checkpoint keeps bfloat16 storage; the others load in float32.
    assert m.weight_dtype == ("bfloat16" if name == "qwen2-tiny" else None)
    assert rel(m.forward(e["ids"]), e["logits"]) <= 2e-5
    assert m.generate(e["prompt"], len(e["greedy"]), greedy=True).tolist() == e["greedy"].tolist()


def test_bfloat16_checkpoint_equals_its_float32_model():
    e = expected("qwen2-tiny")
    half = gptcore.load(FIXTURES / "qwen2-tiny")
    wide = gptcore.load(FIXTURES / "qwen2-tiny", weight_dtype="float32")
    assert (half.weight_dtype, wide.weight_dtype) == ("bfloat16", None)
    assert half.nbytes < 0.7 * wide.nbytes
    assert np.array_equal(half.forward(e["ids"]), wide.forward(e["ids"]))


def test_16_bit_models_equal_their_rounded_float32_models():
    weights, config = gptcore.load_safetensors(FIXTURES / "llama-tiny")
    ids = expected("llama-tiny")["ids"]
    for fmt in ("bfloat16", "float16"):
        half = gptcore.Model(weights, config, weight_dtype=fmt)
        rounded = gptcore.Model(gptcore.round_weights(weights, fmt), config)
        assert np.array_equal(half.forward(ids), rounded.forward(ids)), fmt
        loaded = gptcore.load(FIXTURES / "llama-tiny", weight_dtype=fmt)
        assert np.array_equal(loaded.forward(ids), rounded.forward(ids)), fmt


def test_decode_prefix_batch_threads_and_kernels_are_bit_identical():
    m = gptcore.load(FIXTURES / "smollm2-tiny")
    rng = np.random.default_rng(7)
    ids = rng.integers(0, m.config.vocab_size, size=(3, 110))
    full = m.forward(ids)
    # Each row alone; a prefix; the last row of a decode with the cache.
    for b in range(3):
        assert np.array_equal(m.forward(ids[b]), full[b])
    assert np.array_equal(m.forward(ids[:, :37]), full[:, :37])
    cache = m.new_cache(3)
    m.step(cache, ids[:, :5])
    for t in range(5, 110):
        assert np.array_equal(m.step(cache, ids[:, t:t + 1]), full[:, t]), t
    before = (gptcore.get_num_threads(), gptcore.kernel())
    try:
        for k in gptcore.available_kernels():
            for threads in (1, 2, 3):
                gptcore.set_kernel(k)
                gptcore.set_num_threads(threads)
                assert np.array_equal(m.forward(ids), full), (k, threads)
    finally:
        gptcore.set_num_threads(before[0])
        gptcore.set_kernel(None)


def test_both_config_formats_and_shards_give_the_same_model(tmp_path):
    """llama-tiny's config in transformers 4's layout, qwen2-tiny's in transformers 5's, and
    qwen2-tiny's shards merged into one file: the same configuration and bits."""
    e = expected("llama-tiny")
    tf4 = tmp_path / "llama-tf4"
    shutil.copytree(FIXTURES / "llama-tiny", tf4)
    cfg = json.loads((tf4 / "config.json").read_text())
    rp = cfg.pop("rope_parameters")
    cfg.update(rope_theta=rp["rope_theta"], rope_scaling=None, torch_dtype=cfg.pop("dtype"))
    (tf4 / "config.json").write_text(json.dumps(cfg))
    a, b = gptcore.load(FIXTURES / "llama-tiny"), gptcore.load(tf4)
    assert a.config == b.config
    assert np.array_equal(a.forward(e["ids"]), b.forward(e["ids"]))

    q = tmp_path / "qwen-tf5"
    shutil.copytree(FIXTURES / "qwen2-tiny", q)
    cfg = json.loads((q / "config.json").read_text())
    cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": cfg.pop("rope_theta")}
    del cfg["rope_scaling"]
    cfg["dtype"] = cfg.pop("torch_dtype")
    (q / "config.json").write_text(json.dumps(cfg))
    weights, config = gptcore.load_safetensors(q)
    one = tmp_path / "qwen-one"
    gptcore.save_safetensors(weights, config, one, weight_dtype="bfloat16")
    eq = expected("qwen2-tiny")
    base = gptcore.load(FIXTURES / "qwen2-tiny").forward(eq["ids"])
    assert np.array_equal(gptcore.load(q).forward(eq["ids"]), base)
    assert np.array_equal(gptcore.load(one).forward(eq["ids"]), base)


def test_each_tensor_is_read_once(monkeypatch):
    reads = []
    real = checkpoint.safetensors_file.read_tensor

    def counting(entry, fn):
        reads.append((entry.path.name, entry.name))
        return real(entry, fn)

    monkeypatch.setattr(checkpoint.safetensors_file, "read_tensor", counting)
    for kw in ({}, {"weight_dtype": "float32"}):
        reads.clear()
        gptcore.load(FIXTURES / "qwen2-tiny", **kw)
        assert len(reads) == len(set(reads)) > 0, kw
        assert {f for f, _ in reads} == {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}


def test_mistral_sliding_window_is_the_context():
    m = gptcore.load(FIXTURES / "mistral-tiny")
    assert m.config.n_ctx == 24  # sliding_window 24 < max_position_embeddings 64
    rng = np.random.default_rng(1)
    m.forward(rng.integers(0, 160, 24))
    with pytest.raises(ValueError, match="exceeds the model's context n_ctx = 24 .*sliding window"):
        m.forward(rng.integers(0, 160, 25))
    # Generation past the window drops the oldest tokens, as for GPT-2's context.
    out = m.generate(rng.integers(0, 160, 20), 10, greedy=True, context_shift=6)
    assert out.shape == (10,)


def test_every_surface_works(tmp_path):
    m = gptcore.load(FIXTURES / "llama-tiny")
    e = expected("llama-tiny")
    ids = e["ids"]
    z = m.forward(ids)
    assert np.array_equal(m.forward(ids, logits="last"), z[:, -1])
    lp = m.token_logprobs(ids)
    zz = z.astype(np.float64)
    want = zz - np.log(np.exp(zz - zz.max(-1, keepdims=True)).sum(-1, keepdims=True)) - zz.max(-1, keepdims=True)
    want = np.take_along_axis(want[:, :-1], ids[:, 1:, None], -1)[..., 0]
    assert np.abs(lp - want).max() < 1e-5
    toks = list(m.stream(e["prompt"], 6, greedy=True))
    assert toks == m.generate(e["prompt"], 6, greedy=True).tolist() == e["greedy"][:6].tolist()
    # The numpy reference forward (float32) of the same weights.
    from gptcore import numpy_forward

    weights, config = gptcore.load_safetensors(FIXTURES / "llama-tiny")
    assert rel(numpy_forward.forward(weights, ids, config), z.astype(np.float64)) < 1e-5
    # Parameters: the accounting equals the tensors' sizes.
    assert param_count(config).total == sum(v.size for v in weights.values())
    # Model.save round trips (float32 and bfloat16 storage), readable again by load.
    for kw in ({}, {"weight_dtype": "bfloat16"}):
        mm = gptcore.load(FIXTURES / "llama-tiny", **kw)
        out = tmp_path / f"saved{len(kw)}"
        mm.save(out)
        back = gptcore.load(out, tokenizer=FIXTURES / "llama-tiny")
        assert back.config == mm.config and back.weight_dtype == mm.weight_dtype
        assert np.array_equal(back.forward(ids), mm.forward(ids))
    # Text: the prompt gets the BOS Llama 3's post-processor adds; EOS ends generation.
    text = m.generate_text("We hold these truths", 8, greedy=True, stop_at_eos=False)
    prompt = m.tokenizer.encode("We hold these truths", add_special_tokens=True)
    assert prompt[0] == m.tokenizer.bos_id
    assert text == m.tokenizer.decode(m.generate(prompt, 8, greedy=True))
    s = m.score_text("We hold these truths to be self-evident")
    assert s.tokens == len(m.tokenizer.encode("We hold these truths to be self-evident", add_special_tokens=True)) - 1
    assert np.isfinite(s.perplexity)


def test_generation_stops_at_every_eos_id(tmp_path):
    m = gptcore.load(FIXTURES / "llama-tiny")
    # generation_config.json lists <|end_of_text|> and <|eot_id|>.
    assert m.eos_token_ids == m.tokenizer.eos_ids and len(m.eos_token_ids) == 2
    prompt = "We hold these truths"
    ids = m.tokenizer.encode(prompt, add_special_tokens=True)
    first = int(m.generate(ids, 1, greedy=True)[0])
    other = next(i for i in range(m.tokenizer.vocab_size) if i != first)
    for eos, stops in (([other, first], True), ([first, other], True), ([other], False)):
        d = _copy(tmp_path, "llama-tiny")
        (d / "generation_config.json").write_text(json.dumps({"eos_token_id": eos}))
        text = gptcore.load(d).generate_text(prompt, 4, greedy=True)
        assert (text == "") == stops, (eos, text)


def test_chat_renders_generates_and_stops(tmp_path):
    m = gptcore.load(FIXTURES / "qwen2-tiny")
    messages = [{"role": "user", "content": "Hello! Who wrote the Declaration?"}]
    ids = m.tokenizer.encode(m.tokenizer.apply_chat_template(messages, add_generation_prompt=True))
    want = m.generate(ids, 12, greedy=True, stop_tokens=list(m.tokenizer.eos_ids))
    want = [int(t) for t in want if t not in m.tokenizer.eos_ids]
    reply = m.chat(messages, 12, greedy=True)
    assert reply == m.tokenizer.decode(want)
    assert "".join(m.stream_chat(messages, 12, greedy=True)) == reply
    with pytest.raises(ValueError, match="chat template .* failed"):
        gptcore.load(FIXTURES / "smollm2-tiny").chat([{"role": "assistant", "tool_calls": []}])
    no_template = gptcore.load(FIXTURES / "mistral-tiny", tokenizer=None)
    with pytest.raises(ValueError, match="no tokenizer"):
        no_template.chat(messages)


def _copy(tmp_path, name, edit_config=None):
    d = tmp_path / name
    while d.exists():
        d = d.with_name(d.name + "+")
    shutil.copytree(FIXTURES / name, d)
    if edit_config is not None:
        cfg = json.loads((d / "config.json").read_text())
        edit_config(cfg)
        (d / "config.json").write_text(json.dumps(cfg))
    return d


@pytest.mark.parametrize("edit, words", [
    (lambda c: c.update(model_type="phi3"), "model_type 'phi3'; gptcore runs 'gpt2', 'llama', 'mistral', 'qwen2'"),
    (lambda c: c.update(hidden_act="gelu"), "hidden_act 'gelu'"),
    (lambda c: c.update(rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}),
     "rope type 'yarn' (rope_parameters) is not supported"),
    (lambda c: c.update(num_key_value_heads=3), "n_heads (4) must be a multiple of n_kv_heads (3)"),
    (lambda c: c.update(head_dim=16), "'model.layers.0.self_attn.q_proj.weight' has shape (32, 32), expected (64, 32)"),
    (lambda c: c.update(num_attention_heads=8), "'model.layers.0.self_attn.o_proj.weight' has shape (32, 32), expected (32, 64)"),
    (lambda c: c.pop("hidden_size"), "has no 'hidden_size'"),
    (lambda c: c.update(tie_word_embeddings="yes"), "'tie_word_embeddings'"),
])
def test_bad_configs_name_the_file_and_field(tmp_path, edit, words):
    d = _copy(tmp_path, "llama-tiny", edit)
    with pytest.raises(ValueError) as e:
        gptcore.load(d)
    msg = str(e.value)
    assert "config.json" in msg
    assert any(w in msg for w in words.split("|")), msg


def test_llama3_rope_needs_its_parameters(tmp_path):
    d = _copy(tmp_path, "llama3-rope", lambda c: c["rope_scaling"].pop("low_freq_factor"))
    with pytest.raises(ValueError, match=r"config.json.*llama3 rope scaling needs low_freq_factor"):
        gptcore.load(d)


def test_bad_shards_and_tensors_name_the_file(tmp_path):
    d = _copy(tmp_path, "qwen2-tiny")
    index = json.loads((d / "model.safetensors.index.json").read_text())
    name = next(iter(index["weight_map"]))
    index["weight_map"][name] = "model-00002-of-00002.safetensors"
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match=r"index.json.* places tensor .* in 'model-00002-of-00002.safetensors'"):
        gptcore.load(d)
    d2 = _copy(tmp_path, "qwen2-tiny")
    (d2 / "model-00002-of-00002.safetensors").unlink()
    # Both a missing file and a checkpoint contradicting its index: either except catches it.
    with pytest.raises(ValueError, match=r"shard named by model.safetensors.index.json \(weight_map\) is missing") as e:
        gptcore.load(d2)
    assert isinstance(e.value, FileNotFoundError) and e.value.filename.endswith("model-00002-of-00002.safetensors")
    # A tensor of the wrong shape, and of a dtype gptcore cannot use.
    from safetensors.numpy import load_file, save_file

    d3 = _copy(tmp_path, "llama3-rope")
    t = load_file(str(d3 / "model.safetensors"))
    t["model.layers.1.mlp.up_proj.weight"] = t["model.layers.1.mlp.up_proj.weight"].T.copy()
    save_file(t, str(d3 / "model.safetensors"))
    with pytest.raises(ValueError, match=r"'model.layers.1.mlp.up_proj.weight' has shape \(32, 48\), expected \(48, 32\)"):
        gptcore.load(d3)
    t["model.layers.1.mlp.up_proj.weight"] = np.zeros((48, 32), np.int32)
    save_file(t, str(d3 / "model.safetensors"))
    with pytest.raises(TypeError, match="'model.layers.1.mlp.up_proj.weight' has dtype int32"):
        gptcore.load(d3)


def test_info_reads_only_headers(monkeypatch, capsys):
    from gptcore.cli import main

    def refuse(entry, fn):
        raise AssertionError(f"info read tensor {entry.name}")

    monkeypatch.setattr(checkpoint.safetensors_file, "read_tensor", refuse)
    assert main(["info", str(FIXTURES / "qwen2-tiny")]) == 0
    out = capsys.readouterr().out
    assert "Llama family" in out and "key/value heads 1" in out and "BF16" in out
    total = param_count(checkpoint.inspect_checkpoint(FIXTURES / "qwen2-tiny").config).total
    assert f"{total:,}" in out
