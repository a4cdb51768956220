"""gpt2 GGUF files as gptcore models: files written as llama.cpp's converter writes them (with
the gguf package) load to the model of the same weights; gptcore's own files round-trip bit for
bit; 16-bit files equal the 16-bit models; Q8_0/Q4_0 files hold the reference blocks and, until
gptcore computes with them, load only as their dequantized float32 model."""

from __future__ import annotations

import json
from pathlib import Path

import gguf as ref
import numpy as np
import pytest
from safetensors.numpy import load_file

import gptcore
import gptcore.lessons
from gptcore.gguf import GGUFReader, Value, ValueType, WriterTensor, write_gguf
from gptcore.gguf.format import TENSOR_TYPES
from gptcore.weights.gguf_checkpoint import describe, write_model

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TINY = FIXTURES / "tiny-bpe"
IDS = np.array([[1, 2, 3, 4, 5, 100, 200, 300, 639], [7, 8, 9, 10, 11, 12, 13, 14, 15]])
CONV1D = ("c_attn.weight", "c_proj.weight", "c_fc.weight")


@pytest.fixture(scope="module")
def tiny():
    return gptcore.load(TINY)


@pytest.fixture(scope="module")
def weights(tiny):
    return tiny._native.export()


def _save(model, path, weight_dtype=None):
    """``model.save(path, weight_dtype)``, returning the path."""
    model.save(path, weight_dtype)
    return path


def _convert_like_llama_cpp(folder: Path, out: Path) -> Path:
    """A GPT-2 Hugging Face folder as convert_hf_to_gguf.py writes it (GPT2Model), F32, with
    the gguf package's writer: Conv1D matrices transposed, names from gguf's TensorNameMap,
    the tied head written out again as output.weight, the tokenizer's vocab and merges."""
    cfg = json.loads((folder / "config.json").read_text())
    tok = json.loads((folder / "tokenizer.json").read_text())
    w = ref.GGUFWriter(str(out), "gpt2")
    w.add_context_length(cfg["n_positions"])
    w.add_embedding_length(cfg["n_embd"])
    w.add_feed_forward_length(cfg.get("n_inner") or 4 * cfg["n_embd"])
    w.add_block_count(cfg["n_layer"])
    w.add_head_count(cfg["n_head"])
    w.add_layer_norm_eps(cfg["layer_norm_epsilon"])
    w.add_file_type(ref.LlamaFileType.ALL_F32)
    vocab = tok["model"]["vocab"]
    tokens = [None] * cfg["vocab_size"]
    for t, i in vocab.items():
        tokens[i] = t
    types = [ref.TokenType.NORMAL] * len(tokens)
    for a in tok["added_tokens"]:
        types[a["id"]] = ref.TokenType.CONTROL
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in tok["model"]["merges"]])
    w.add_bos_token_id(vocab["<|endoftext|>"])
    w.add_eos_token_id(vocab["<|endoftext|>"])
    names = ref.TensorNameMap(ref.MODEL_ARCH.GPT2, cfg["n_layer"])
    for name, data in load_file(folder / "model.safetensors").items():
        if name.endswith((".attn.bias", ".attn.masked_bias")):
            continue
        if name.endswith(CONV1D):
            data = np.ascontiguousarray(data.T)
        new = names.get_name(name, try_suffixes=(".weight", ".bias"))
        w.add_tensor(new, data)
        if new == "token_embd.weight":
            w.add_tensor("output.weight", data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def test_a_file_made_as_llama_cpp_converts_loads_to_the_same_model(tmp_path, tiny):
    p = _convert_like_llama_cpp(TINY, tmp_path / "converted.gguf")
    m = gptcore.load(p)
    assert m.config == tiny.config
    assert np.array_equal(m.forward(IDS), tiny.forward(IDS))
    text = "When in the Course of human events, 日本 🎉<|endoftext|>"
    assert np.array_equal(m.tokenizer.encode(text), tiny.tokenizer.encode(text))
    assert m.tokenizer.eos_id == tiny.tokenizer.eos_id


def test_float32_round_trip_is_bit_exact_and_readable_by_the_gguf_package(tmp_path, tiny, weights):
    p = _save(tiny, tmp_path / "m.gguf")
    m = gptcore.load(p)
    assert m.config == tiny.config and m.config.ln_eps == 1e-5
    for logits in ("all", "last"):
        assert np.array_equal(m.forward(IDS, logits=logits), tiny.forward(IDS, logits=logits))
    assert np.array_equal(m.token_logprobs(IDS), tiny.token_logprobs(IDS))
    assert np.array_equal(m.tokenizer.encode("Four score and seven"), tiny.tokenizer.encode("Four score and seven"))
    g = ref.GGUFReader(p)
    kv = {k: (f.types[0].name, f.contents()) for k, f in g.fields.items()}
    assert kv["general.architecture"] == ("STRING", "gpt2")
    assert kv["gpt2.block_count"] == ("UINT32", 2) and kv["gpt2.context_length"] == ("UINT32", 128)
    assert kv["gpt2.embedding_length"] == ("UINT32", 64) and kv["gpt2.feed_forward_length"] == ("UINT32", 256)
    assert kv["gpt2.attention.head_count"] == ("UINT32", 4)
    assert kv["gpt2.attention.layer_norm_epsilon"][0] == "FLOAT32"
    assert kv["general.file_type"] == ("UINT32", 0)
    by_name = {t.name: t for t in g.tensors}
    assert "output.weight" not in by_name  # tied: llama.cpp uses token_embd.weight as the head
    qkv = by_name["blk.1.attn_qkv.weight"]
    assert [int(x) for x in qkv.shape] == [64, 192]  # ne[0] = K = d_model
    assert np.array_equal(np.asarray(qkv.data).reshape(192, 64), weights["h.1.attn.c_attn.weight"].T)
    assert np.array_equal(np.asarray(by_name["token_embd.weight"].data).reshape(640, 64), weights["wte.weight"])
    assert all(t.tensor_type == ref.GGMLQuantizationType.F32 for t in g.tensors)


def test_untied_head_and_a_model_without_biases_or_layernorm_parameters(tmp_path):
    config = gptcore.GPTConfig(vocab_size=50, n_ctx=16, d_model=32, n_heads=4, n_layers=2, tied=False, bias=False,
                               ln_affine=False, ln_eps=1e-6)
    w = gptcore.init_weights(config, seed=9, dtype="float32")
    model = gptcore.Model(w, config)
    p = _save(model, tmp_path / "plain.gguf")
    with GGUFReader(p) as r:
        assert "output.weight" in r.tensors
        assert np.array_equal(r.tensor("blk.0.attn_qkv.bias"), np.zeros(96, np.float32))
        assert np.array_equal(r.tensor("blk.1.ffn_norm.weight"), np.ones(32, np.float32))
    back = gptcore.load(p)
    assert back.config == config.replace(bias=True, ln_affine=True)  # zero biases, unit LayerNorms
    ids = IDS % 50
    assert np.array_equal(back.forward(ids[:, :9]), model.forward(ids[:, :9]))


@pytest.mark.parametrize("wd", ["bfloat16", "float16"])
def test_16_bit_files_equal_the_16_bit_models(tmp_path, tiny, weights, wd):
    code = {"bfloat16": "BF16", "float16": "F16"}[wd]
    # a float32 model written as 16-bit: the weight matrices and embedding rounded, the
    # position table, biases and LayerNorm parameters kept as F32
    p = _save(tiny, tmp_path / f"{wd}.gguf", wd)
    with GGUFReader(p) as r:
        types = {n: t.type for n, t in r.tensors.items()}
        assert types["token_embd.weight"] == types["blk.0.ffn_up.weight"] == code
        assert types["position_embd.weight"] == types["blk.0.ffn_up.bias"] == types["output_norm.weight"] == "F32"
        bits = gptcore.to_half_bits(weights["h.0.mlp.c_fc.weight"].T, wd)
        assert r.raw("blk.0.ffn_up.weight").tobytes() == bits.tobytes()
    half = gptcore.load(p, weight_dtype=wd)
    assert half.weight_dtype == wd
    assert np.array_equal(half.forward(IDS), gptcore.Model(weights, tiny.config, weight_dtype=wd).forward(IDS))
    rounded = {k: (v if k == "wpe.weight" or v.ndim == 1 else gptcore.round_weights(v, wd)) for k, v in weights.items()}
    assert np.array_equal(gptcore.load(p).forward(IDS), gptcore.Model(rounded, tiny.config).forward(IDS))
    # a 16-bit model is written in its own format by default and comes back the same
    model16 = gptcore.Model(weights, tiny.config, weight_dtype=wd)
    q = _save(model16, tmp_path / f"{wd}-model.gguf")
    again = gptcore.load(q, weight_dtype=wd)
    assert np.array_equal(again.forward(IDS), model16.forward(IDS))
    assert np.array_equal(gptcore.load(q).forward(IDS),
                          gptcore.Model(gptcore.round_weights(weights, wd), tiny.config).forward(IDS))
    assert again.nbytes == model16.nbytes


@pytest.mark.parametrize("wd, t", [("q8_0", ref.GGMLQuantizationType.Q8_0), ("q4_0", ref.GGMLQuantizationType.Q4_0)])
def test_quantized_files_hold_the_reference_blocks(tmp_path, tiny, weights, wd, t):
    p = _save(tiny, tmp_path / f"{wd}.gguf", wd)
    g = {x.name: x for x in ref.GGUFReader(p).tensors}
    for name, src in (("blk.1.attn_output.weight", weights["h.1.attn.c_proj.weight"].T),
                      ("blk.0.ffn_down.weight", weights["h.0.mlp.c_proj.weight"].T),
                      ("token_embd.weight", weights["wte.weight"])):
        assert g[name].tensor_type == t
        assert np.asarray(g[name].data).tobytes() == ref.quants.quantize(np.ascontiguousarray(src), t).tobytes(), name
    assert g["position_embd.weight"].tensor_type == ref.GGMLQuantizationType.F32
    assert g["blk.0.attn_norm.weight"].tensor_type == ref.GGMLQuantizationType.F32
    deq = gptcore.load(p, weight_dtype="float32")
    want = gptcore.Model(gptcore.round_weights(weights, wd), tiny.config)
    assert np.array_equal(deq.forward(IDS), want.forward(IDS))
    assert not np.array_equal(deq.forward(IDS), tiny.forward(IDS))
    # the file computes with its blocks: the same bits as its dequantized float32 model
    blocks = gptcore.load(p)
    assert blocks.weight_dtype == wd and blocks.nbytes * 3 < deq.nbytes
    assert np.array_equal(blocks.forward(IDS), want.forward(IDS))
    assert np.array_equal(blocks.forward(IDS), gptcore.Model(weights, tiny.config, weight_dtype=wd).forward(IDS))
    # another 16-bit format rounds the file's values
    half = gptcore.load(p, weight_dtype="bfloat16")
    assert np.array_equal(half.forward(IDS), gptcore.Model(gptcore.round_weights(weights, wd), tiny.config,
                                                           weight_dtype="bfloat16").forward(IDS))


def test_saving_refuses_what_gguf_cannot_hold(tmp_path, weights, tiny):
    m64 = gptcore.Model(weights, tiny.config, dtype="float64")
    with pytest.raises(ValueError, match="float64 model's weights do not fit"):
        _save(m64, tmp_path / "x.gguf")
    p = _save(m64, tmp_path / "x.gguf", "float32")
    assert np.array_equal(gptcore.load(p).forward(IDS), tiny.forward(IDS))
    sin = gptcore.GPTConfig.preset("lesson14")
    with pytest.raises(ValueError, match="learned positions"):
        write_model(gptcore.lessons.lesson14_weights(), sin, tmp_path / "s.gguf")
    with pytest.raises(ValueError, match="weight_dtype for a GGUF file"):
        _save(tiny, tmp_path / "y.gguf", "int8")
    assert not (tmp_path / "y.gguf").exists()


def test_a_matrix_whose_k_is_not_a_multiple_of_32_stays_float32(tmp_path):
    config = gptcore.GPTConfig(vocab_size=40, n_ctx=8, d_model=48, n_heads=4, n_layers=1, d_ff=64)
    w = gptcore.init_weights(config, seed=2, dtype="float32")
    p = write_model(w, config, tmp_path / "k48.gguf", "q8_0")
    with GGUFReader(p) as r:
        types = {n: t.type for n, t in r.tensors.items()}
    assert types["blk.0.ffn_down.weight"] == "Q8_0"  # K = d_ff = 64
    for n in ("blk.0.attn_qkv.weight", "blk.0.attn_output.weight", "blk.0.ffn_up.weight", "token_embd.weight"):
        assert types[n] == "F32", n  # K = d_model = 48
    m = gptcore.load(p, weight_dtype="float32")
    ids = IDS[:, :8] % 40
    assert np.array_equal(m.forward(ids), gptcore.Model(gptcore.round_weights(w, "q8_0"), config).forward(ids))


def _rewrite(src: Path, dst: Path, meta_change=None, drop=(), tensors_extra=()):
    """src with metadata entries changed (None removes) and tensors dropped or added."""
    with GGUFReader(src) as r:
        meta = dict(r.fields)
        for k, v in (meta_change or {}).items():
            if v is None:
                meta.pop(k, None)
            else:
                meta[k] = v
        ts = [WriterTensor(n, t.type, t.shape, np.array(r.tensor(n))) for n, t in r.tensors.items() if n not in drop]
    return write_gguf(dst, meta, ts + list(tensors_extra))


@pytest.mark.parametrize("change, words", [
    (dict(meta_change={"general.architecture": Value(ValueType.STRING, "llama")}), "has no 'llama.attention.head_count'"),
    (dict(meta_change={"general.architecture": Value(ValueType.STRING, "falcon")}), "holds a 'falcon' model; gptcore reads 'gpt2', 'llama', 'qwen2'"),
    (dict(meta_change={"general.architecture": Value(ValueType.STRING, "bert")}), "holds a 'bert' model"),
    (dict(meta_change={"general.architecture": None}), "has no 'general.architecture'"),
    (dict(meta_change={"gpt2.block_count": None}), "has no 'gpt2.block_count'"),
    (dict(meta_change={"gpt2.block_count": Value(ValueType.STRING, "2")}), "'gpt2.block_count' must be an integer"),
    (dict(meta_change={"gpt2.block_count": Value(ValueType.UINT32, 3)}), "disagrees with its tensors"),
    (dict(meta_change={"gpt2.attention.head_count": Value(ValueType.UINT32, 5)}), "does not give a valid configuration"),
    (dict(meta_change={"gpt2.attention.head_count_kv": Value(ValueType.UINT32, 2)}), "no grouped-query attention"),
    (dict(meta_change={"gpt2.attention.layer_norm_epsilon": Value(ValueType.FLOAT32, -1.0)}), "ln_eps"),
    (dict(drop=("blk.1.ffn_up.bias",)), "missing tensor 'h.1.mlp.c_fc.bias'"),
    (dict(tensors_extra=(WriterTensor("rope_freqs.weight", "F32", (4,), np.ones(4, np.float32)),)), "unexpected tensor 'rope_freqs.weight'"),
    (dict(drop=("token_embd.weight",)), "no two-dimensional 'token_embd.weight'"),
])
@pytest.mark.parametrize("wd", [None, "bfloat16"])
def test_files_that_do_not_make_a_model(tmp_path, tiny, change, words, wd):
    src = _save(tiny, tmp_path / "ok.gguf")
    p = _rewrite(src, tmp_path / "bad.gguf", **change)
    with pytest.raises(ValueError) as info:
        gptcore.load(p, weight_dtype=wd)
    assert words in str(info.value) and str(p) in str(info.value)


def test_a_tensor_type_gptcore_lacks_is_named(tmp_path, tiny):
    src = _save(tiny, tmp_path / "ok.gguf")
    q6 = TENSOR_TYPES["Q6_K"]
    # the head as llama-quantize's default Q4_0 mix stores it: Q6_K. Written as an F32 tensor of
    # 4 * 210 bytes, then retyped in place to Q6_K with ne = (256, 4): the same byte count.
    extra = WriterTensor("output.weight", "F32", (2, 105), np.zeros((2, 105), np.float32))
    p = _rewrite(src, tmp_path / "q6k.gguf", tensors_extra=(extra,))
    data = bytearray(p.read_bytes())
    key = len(b"output.weight").to_bytes(8, "little") + b"output.weight"
    pos = data.index(key) + len(key)
    assert int.from_bytes(data[pos:pos + 4], "little") == 2
    data[pos + 4:pos + 24] = (256).to_bytes(8, "little") + (4).to_bytes(8, "little") + q6.id.to_bytes(4, "little")
    p.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="tensor 'output.weight' has type Q6_K; gptcore reads F32, F16, BF16, Q8_0 and Q4_0"):
        gptcore.load(p)


def test_tokenizers_gptcore_cannot_build_leave_ids_working(tmp_path, tiny):
    src = _save(tiny, tmp_path / "ok.gguf")
    p = _rewrite(src, tmp_path / "spm.gguf", meta_change={"tokenizer.ggml.model": Value(ValueType.STRING, "llama")})
    m = gptcore.load(p)
    assert m.tokenizer is None
    assert np.array_equal(m.forward(IDS), tiny.forward(IDS))
    with pytest.raises(ValueError, match="tokenizer model 'llama' \\(SentencePiece\\) is not supported"):
        m.generate_text("hello", 3)
    none = gptcore.load(_save(gptcore.Model(tiny._native.export(), tiny.config), tmp_path / "none.gguf"))
    with pytest.raises(ValueError, match="has no tokenizer"):
        none.score_text("hello")
    given = gptcore.load(p, tokenizer=TINY)
    assert given.tokenizer is not None


def test_load_arguments(tmp_path, tiny):
    p = _save(tiny, tmp_path / "m.gguf")
    assert gptcore.load(p, n_heads=4).config.n_heads == 4
    with pytest.raises(ValueError, match="n_heads=2 disagrees"):
        gptcore.load(p, n_heads=2)
    with pytest.raises(ValueError, match="weight_dtype for a GGUF file"):
        gptcore.load(p, weight_dtype="q5_0")
    # an F32 file quantized on loading: the model of its values with q8_0 weights
    q = gptcore.load(p, weight_dtype="q8_0")
    assert q.weight_dtype == "q8_0"
    assert np.array_equal(q.forward(IDS), gptcore.Model(tiny._native.export(), tiny.config,
                                                        weight_dtype="q8_0").forward(IDS))
    with pytest.raises(ValueError, match="needs dtype='float32'"):
        gptcore.load(p, dtype="float64", weight_dtype="q4_0")
    with pytest.raises(ValueError, match="needs dtype='float32'"):
        gptcore.load(p, dtype="float64", weight_dtype="bfloat16")
    m64 = gptcore.load(p, dtype="float64")
    assert np.array_equal(m64.forward(IDS), gptcore.Model(tiny._native.export(), tiny.config, dtype="float64").forward(IDS))


def test_describe(tmp_path, tiny):
    p = _save(tiny, tmp_path / "m.gguf", "q8_0")
    text = describe(p)
    assert "architecture 'gpt2'" in text and "GGUF version 3" in text
    assert "gpt2.block_count = 2" in text and "gpt2.attention.layer_norm_epsilon = 1e-05" in text
    assert "tokenizer: 'gpt2' (pre 'gpt-2'), 640 tokens, 383 merges" in text
    assert "blk.0.attn_qkv.weight" in text and "Q8_0  [192, 64]" in text and "13,056 bytes" in text
    assert "Q8_0: 9 tensors" in text and "F32: 19 tensors" in text


def test_cli_info_shows_a_gguf_files_tensors(tmp_path, tiny, capsys):
    from gptcore.cli import main

    p = _save(tiny, tmp_path / "m.gguf", "q4_0")
    assert main(["info", str(p)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{p}: vocab 640, context 128, d_model 64, heads 4, layers 2")
    assert "GGUF version 3, architecture 'gpt2', 28 tensors" in out
    assert "blk.1.ffn_down.weight     Q4_0  [64, 256]" in out and "Q4_0: 9 tensors, 78,336 bytes" in out
    assert "total                              149,248" in out  # the accounting follows
    llama = _rewrite(p, tmp_path / "llama.gguf", meta_change={"general.architecture": Value(ValueType.STRING, "llama")})
    assert main(["info", str(llama)]) == 1
    captured = capsys.readouterr()
    assert "blk.0.attn_qkv.weight" in captured.out  # the description comes before the error
    assert "has no 'llama.attention.head_count'" in captured.err
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x07\x00\x00\x00" + b"\x00" * 16)
    assert main(["info", str(bad)]) == 1
    assert "version 7" in capsys.readouterr().err


def test_load_and_save_pick_gguf_by_name_or_magic(tmp_path, tiny, weights):
    p = _save(tiny, tmp_path / "upper.GGUF")
    assert np.array_equal(gptcore.load(p).forward(IDS), tiny.forward(IDS))
    renamed = tmp_path / "model.bin.weights"
    renamed.write_bytes(p.read_bytes())  # no .gguf suffix: recognised by its magic
    assert np.array_equal(gptcore.load(renamed).forward(IDS), tiny.forward(IDS))
    fake = tmp_path / "fake.gguf"
    fake.write_bytes((TINY / "model.safetensors").read_bytes())
    with pytest.raises(ValueError, match="is not a valid GGUF file: it does not start with the magic"):
        gptcore.load(fake)
    with pytest.raises(FileNotFoundError):
        gptcore.load(tmp_path / "missing.gguf")
    # safetensors checkpoints take weight_dtype too now
    tiny.save(tmp_path / "bf16", "bfloat16")
    assert np.array_equal(gptcore.load(tmp_path / "bf16", weight_dtype="bfloat16").forward(IDS),
                          gptcore.Model(weights, tiny.config, weight_dtype="bfloat16").forward(IDS))
    with pytest.raises(ValueError, match="q8_0 weights have no safetensors dtype; save them in a GGUF file"):
        tiny.save(tmp_path / "q8", "q8_0")
    with pytest.raises(ValueError, match="no safetensors dtype"):
        gptcore.Model(weights, tiny.config, weight_dtype="q4_0").save(tmp_path / "q4")
    assert not (tmp_path / "q8").exists() and not (tmp_path / "q4").exists()
