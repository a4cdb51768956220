"""GGUF files of the Llama family (architectures ``llama`` and ``qwen2``): written by
``Model.save`` and read by ``gptcore.load`` back to the same bits, in float32 and in the block
formats; the configuration from the ``llama.*`` / ``qwen2.*`` keys; Llama's query and key rows
in llama.cpp's interleaved order in the file (checked against ``permute_rope`` on the
checkpoint's tensors), Qwen2's as they are; the tokenizers of the ``llama-bpe``, ``qwen2`` and
``smollm`` pre-tokenizers encoding as the folders' ``tokenizer.json``; what GGUF cannot hold
refused by name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import gptcore
from gptcore.gguf import GGUFReader, WriterTensor, write_gguf
from gptcore.gguf.format import Value, ValueType
from gptcore.gguf.names import permute_rope

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TEXT = (FIXTURES / "text" / "public-domain.txt").read_text(encoding="utf-8")[:3000] + " 1234 abc 2024!\n\n x"


def _ids(model, n=20):
    n = min(n, model.config.n_ctx)
    return (np.arange(2 * n).reshape(2, n) * 7 + 3) % model.config.vocab_size


@pytest.mark.parametrize("folder, arch", [("llama-tiny", "llama"), ("qwen2-tiny", "qwen2"),
                                          ("smollm2-tiny", "llama"), ("mistral-tiny", "llama")])
@pytest.mark.parametrize("wd", ["float32", "q8_0", "q4_0"])
def test_llama_family_gguf_round_trip(tmp_path, folder, arch, wd):
    src = gptcore.load(FIXTURES / folder, weight_dtype=None if wd == "float32" else wd)
    p = tmp_path / "m.gguf"
    src.save(p, wd)
    with GGUFReader(p) as r:
        assert r.metadata["general.architecture"] == arch
        assert r.metadata[f"{arch}.attention.head_count_kv"] == src.config.n_kv_heads
    back = gptcore.load(p)
    assert back.config.family == "llama" and back.config == src.config.replace(
        rope_theta=back.config.rope_theta, ln_eps=back.config.ln_eps)
    ids = _ids(src)
    assert np.array_equal(back.forward(ids), src.forward(ids))
    if src.tokenizer is not None:
        assert back.tokenizer is not None
        assert list(back.tokenizer.encode(TEXT)) == list(src.tokenizer.encode(TEXT))
        assert back.tokenizer.decode(back.tokenizer.encode(TEXT)) == TEXT


def test_llama_query_and_key_rows_are_permuted_in_the_file(tmp_path):
    w, config = gptcore.load_safetensors(FIXTURES / "llama-tiny")
    p = tmp_path / "m.gguf"
    gptcore.Model(w, config).save(p, "float32")
    q4 = tmp_path / "q4.gguf"
    gptcore.Model(w, config, weight_dtype="q4_0").save(q4)
    with GGUFReader(p) as r, GGUFReader(q4) as rq:
        for i in range(config.n_layers):
            pre = f"model.layers.{i}.self_attn."
            q = r.tensor(f"blk.{i}.attn_q.weight")
            k = r.tensor(f"blk.{i}.attn_k.weight")
            assert np.array_equal(q, permute_rope(w[pre + "q_proj.weight"], config.n_heads))
            assert np.array_equal(k, permute_rope(w[pre + "k_proj.weight"], config.n_kv_heads))
            assert np.array_equal(r.tensor(f"blk.{i}.attn_v.weight"), w[pre + "v_proj.weight"])
            # the blocks of the permuted rows are the permuted rows' blocks
            assert np.array_equal(rq.to_float32(f"blk.{i}.attn_q.weight"),
                                  gptcore.round_weights(permute_rope(w[pre + "q_proj.weight"], config.n_heads), "q4_0"))
    w2, c2 = gptcore.load_safetensors(FIXTURES / "qwen2-tiny")
    p2 = tmp_path / "q.gguf"
    gptcore.Model(w2, c2).save(p2, "float32")
    with GGUFReader(p2) as r:
        assert np.array_equal(r.tensor("blk.0.attn_q.weight"), w2["model.layers.0.self_attn.q_proj.weight"])
        assert np.array_equal(r.tensor("blk.0.attn_q.bias"), w2["model.layers.0.self_attn.q_proj.bias"])


def test_what_gguf_cannot_hold_is_refused(tmp_path):
    llama3 = gptcore.load(FIXTURES / "llama3-rope")
    with pytest.raises(ValueError, match="rope scaling; this model's is 'llama3'"):
        llama3.save(tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists()
    p = tmp_path / "m.gguf"
    gptcore.load(FIXTURES / "llama-tiny").save(p)

    def rewrite(dst, meta_change=None, extra=()):
        with GGUFReader(p) as r:
            meta = dict(r.fields)
            meta.update(meta_change or {})
            ts = [WriterTensor(n, t.type, t.shape, np.array(r.tensor(n))) for n, t in r.tensors.items()]
        return write_gguf(tmp_path / dst, meta, ts + list(extra))

    cases = [
        (dict(meta_change={"llama.rope.scaling.type": Value(ValueType.STRING, "yarn")}), "rope scaling 'yarn'"),
        (dict(extra=[WriterTensor("rope_freqs.weight", "F32", (8,), np.ones(8, np.float32))]), "rope_freqs.weight"),
        (dict(meta_change={"llama.rope.dimension_count": Value(ValueType.UINT32, 4)}), "rotary dimensions 4"),
    ]
    for i, (kw, words) in enumerate(cases):
        bad = rewrite(f"bad{i}.gguf", **kw)
        with pytest.raises(ValueError, match=words):
            gptcore.load(bad)
    linear = rewrite("linear.gguf", meta_change={"llama.rope.scaling.type": Value(ValueType.STRING, "linear"),
                                                 "llama.rope.scaling.factor": Value(ValueType.FLOAT32, 2.0)})
    m = gptcore.load(linear)
    assert m.config.rope_scaling.rope_type == "linear" and m.config.rope_scaling.factor == 2.0
