"""GGUF tensor names per architecture (against the ``gguf`` package's name map) and llama.cpp's
query/key row permutation (against the rotary it exists for)."""

from __future__ import annotations

import gguf as ref
import numpy as np
import pytest

import gptcore
from gptcore.gguf.names import ARCHITECTURES, GPT2, LLAMA, QWEN2, from_gguf_layout, permute_rope, to_gguf_layout, unpermute_rope


def _ref_name(arch, source: str, n_blocks: int) -> str:
    """The gguf package's GGUF name of a Hugging Face tensor name."""
    m = ref.TensorNameMap(arch, n_blocks)
    base, _, suffix = source.rpartition(".")
    got = m.get_name(base)
    assert got is not None, source
    return f"{got}.{suffix}"


def test_gpt2_names_are_the_gguf_packages_and_cover_the_schema():
    config = gptcore.GPTConfig(vocab_size=50, n_ctx=8, d_model=32, n_heads=2, n_layers=3, tied=False)
    gguf_names = set()
    for name in gptcore.expected_shapes(config):
        g, layout = GPT2.to_gguf(name)
        hf = name if name == "lm_head.weight" else "transformer." + name
        assert g == _ref_name(ref.MODEL_ARCH.GPT2, hf, 3), name
        assert GPT2.from_gguf(g) == (name, layout)
        assert layout == ("transposed" if name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")) else "same")
        gguf_names.add(g.rsplit(".", 1)[0].replace(".1.", ".{bid}.").replace(".0.", ".{bid}.").replace(".2.", ".{bid}."))
    allowed = {ref.TENSOR_NAMES[t] for t in ref.MODEL_TENSORS[ref.MODEL_ARCH.GPT2]}
    assert gguf_names == allowed  # every tensor llama.cpp's gpt2 architecture has, and no other
    assert GPT2.to_gguf("h.0.attn.bias") is None and GPT2.from_gguf("blk.0.attn_q.weight") is None
    assert GPT2.from_gguf("blk.01.attn_qkv.weight") is None  # block numbers are written without leading zeros


@pytest.mark.parametrize("arch, ref_arch", [(LLAMA, ref.MODEL_ARCH.LLAMA), (QWEN2, ref.MODEL_ARCH.QWEN2)])
def test_llama_family_names_are_the_gguf_packages(arch, ref_arch):
    allowed = {ref.TENSOR_NAMES[t] for t in ref.MODEL_TENSORS[ref_arch]}
    for t in arch.names(2):
        assert t.gguf == _ref_name(ref_arch, t.source, 2), t
        assert t.gguf.rsplit(".", 1)[0].replace(".0.", ".{bid}.").replace(".1.", ".{bid}.") in allowed
        assert arch.from_gguf(t.gguf) == (t.source, t.layout)
    assert ARCHITECTURES["llama"].to_gguf("model.layers.7.self_attn.k_proj.weight") == ("blk.7.attn_k.weight", "rope_k")
    assert ARCHITECTURES["qwen2"].to_gguf("model.layers.7.self_attn.k_proj.bias") == ("blk.7.attn_k.bias", "same")


# ------------------------------------------------------------------------------------------
# llama.cpp's permutation of Llama's query and key rows
# ------------------------------------------------------------------------------------------

def _inv_freq(d_head: int, theta: float = 10000.0) -> np.ndarray:
    return theta ** (-np.arange(0, d_head, 2, dtype=np.float64) / d_head)


def _rope_rotate_half(x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Hugging Face's rotary: pairs (i, i + d/2) of each head; x is (T, heads, d)."""
    d = x.shape[-1]
    ang = pos[:, None] * _inv_freq(d)[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, axis=-1)[:, None, :]
    sin = np.concatenate([np.sin(ang)] * 2, axis=-1)[:, None, :]
    rot = np.concatenate([-x[..., d // 2:], x[..., :d // 2]], axis=-1)
    return x * cos + rot * sin


def _rope_pairs(x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """llama.cpp's 'normal' rotary (the llama architecture): pairs (2i, 2i + 1) of each head."""
    d = x.shape[-1]
    ang = pos[:, None] * _inv_freq(d)[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * cos - b * sin
    out[..., 1::2] = a * sin + b * cos
    return out


def _scores(q, k, rope, n_heads, n_kv, d_head, pos):
    qh = rope(q.reshape(len(pos), n_heads, d_head), pos)
    kh = rope(k.reshape(len(pos), n_kv, d_head), pos)
    kh = np.repeat(kh, n_heads // n_kv, axis=1)  # query head h reads key head h // (n_heads / n_kv)
    return np.einsum("thd,shd->hts", qh, kh)


@pytest.mark.parametrize("n_heads, n_kv, d_head", [(4, 4, 8), (4, 2, 16), (6, 1, 4)])
def test_permuted_rows_with_pair_rotary_equal_hugging_face_rows_with_rotate_half(n_heads, n_kv, d_head):
    rng = np.random.default_rng(n_heads * 100 + n_kv)
    d_model, t = 24, 7
    x = rng.standard_normal((t, d_model))
    wq = rng.standard_normal((n_heads * d_head, d_model))
    wk = rng.standard_normal((n_kv * d_head, d_model))
    bq, bk = rng.standard_normal(n_heads * d_head), rng.standard_normal(n_kv * d_head)
    pos = np.arange(3, 3 + t, dtype=np.float64)
    hf = _scores(x @ wq.T + bq, x @ wk.T + bk, _rope_rotate_half, n_heads, n_kv, d_head, pos)
    gq, gk = to_gguf_layout(wq, "rope_q", n_heads, n_kv), to_gguf_layout(wk, "rope_k", n_heads, n_kv)
    gbq, gbk = to_gguf_layout(bq, "rope_q", n_heads, n_kv), to_gguf_layout(bk, "rope_k", n_heads, n_kv)
    llama_cpp = _scores(x @ gq.T + gbq, x @ gk.T + gbk, _rope_pairs, n_heads, n_kv, d_head, pos)
    np.testing.assert_allclose(llama_cpp, hf, rtol=1e-12, atol=1e-12)
    # without the permutation the pair rotary gives other scores (the test can fail)
    wrong = _scores(x @ wq.T + bq, x @ wk.T + bk, _rope_pairs, n_heads, n_kv, d_head, pos)
    assert not np.allclose(wrong, hf, rtol=1e-6)
    # and reading the file back undoes it exactly
    assert np.array_equal(from_gguf_layout(gq, "rope_q", n_heads, n_kv), wq)
    assert np.array_equal(from_gguf_layout(gk, "rope_k", n_heads, n_kv), wk)
    assert np.array_equal(unpermute_rope(permute_rope(bk, n_kv), n_kv), bk)


def test_permutation_moves_rows_as_documented():
    w = np.arange(8)[:, None] * np.ones((1, 3))  # one head of width 8: rows 0..7
    assert permute_rope(w, 1)[:, 0].tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
    with pytest.raises(ValueError, match="do not split into 3 heads"):
        permute_rope(w, 3)
    with pytest.raises(ValueError, match="needs n_kv_heads"):
        to_gguf_layout(w, "rope_k", 1)
