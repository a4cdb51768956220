"""Hostile inputs for Model.forward and gptcore.forward: token ids and options, NaN and
infinite weights, sizes that cannot fit in memory, and property tests against the reference.

The shared helpers and the rules are in ``hostile.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import gptcore
import reference
from gptcore import GPTConfig, Model
from hostile import (
    IDS, IDS_BAD, TINY, TINY_M32, TINY_M64, TINY_W, assert_unchanged, expect_isolated, random_weights, snapshot,
    structured_field, unaligned,
)


# ------------------------------------------------------------------------------------------
# forward: ids and options
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("label,ids,exc,words", IDS_BAD, ids=[c[0] for c in IDS_BAD])
def test_forward_rejects_ids(label, ids, exc, words):
    snap = snapshot(ids)
    for m in (TINY_M64, TINY_M32):
        with pytest.raises(exc) as info:
            m.forward(ids)
        assert words in str(info.value) and "ids" in str(info.value)
        with pytest.raises(exc):
            gptcore.forward(ids, TINY_W, TINY)
    assert_unchanged(ids, snap)


OPTIONS_BAD = [
    ({"logits": "first"}, ValueError, "logits must be 'all' or 'last'"),
    ({"logits": None}, ValueError, "logits"),
    ({"logits": np.array(["all", "last"])}, ValueError, "logits"),
    ({"causal": 1}, TypeError, "causal must be a bool"),
    ({"causal": "yes"}, TypeError, "causal"),
    ({"return_hidden": "yes"}, TypeError, "return_hidden"),
    ({"return_hidden": 1}, TypeError, "return_hidden"),
    ({"bogus": 1}, TypeError, "bogus"),
]


@pytest.mark.parametrize("kw,exc,words", OPTIONS_BAD, ids=[str(list(c[0])) + str(i) for i, c in enumerate(OPTIONS_BAD)])
def test_forward_rejects_options(kw, exc, words):
    with pytest.raises(exc) as info:
        TINY_M64.forward(IDS, **kw)
    assert words in str(info.value)


def test_module_forward_argument_checks():
    with pytest.raises(ValueError, match="only when weights is a mapping"):
        gptcore.forward(IDS, TINY_M64, TINY)
    with pytest.raises(ValueError, match="only when weights is a mapping"):
        gptcore.forward(IDS, TINY_M64, dtype="float64")
    with pytest.raises(TypeError, match="weights must be a mapping"):
        gptcore.forward(IDS, None)


def _ids_layouts():
    base = np.array([[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]])
    big = np.zeros((5, 24), np.int64)
    big[1::2, ::3] = base
    ro = base.copy()
    ro.setflags(write=False)
    return base, {
        "int8": base.astype(np.int8),
        "uint16": base.astype(np.uint16),
        "int32": base.astype(np.int32),
        "uint64": base.astype(np.uint64),
        "big-endian": base.astype(">i8"),
        "strided": big[1::2, ::3],
        "negative strides": np.ascontiguousarray(base[::-1, ::-1])[::-1, ::-1],
        "fortran": np.asfortranarray(base),
        "read-only": ro,
        "unaligned": unaligned(base),
        "structured field": structured_field(base),
        "list": base.tolist(),
        "tuple": tuple(map(tuple, base.tolist())),
    }


@pytest.mark.parametrize("layout", list(_ids_layouts()[1]))
def test_forward_ids_layouts_give_the_contiguous_result(layout):
    base, layouts = _ids_layouts()
    ids = layouts[layout]
    snap = snapshot(ids)
    for m in (TINY_M64, TINY_M32):
        want = m.forward(base)
        assert np.array_equal(m.forward(ids), want)
        assert np.array_equal(m.forward(ids, logits="last"), want[:, -1])
        assert np.array_equal(m.token_logprobs(ids), m.token_logprobs(base))
        assert np.array_equal(m.generate(ids, 3, greedy=True), m.generate(base, 3, greedy=True))
        arr = np.asarray(ids)
        assert np.array_equal(m.forward(arr[0]), want[0])
    assert_unchanged(ids, snap)


def test_forward_results_are_fresh_arrays():
    a = TINY_M64.forward(IDS)
    b = TINY_M64.forward(IDS)
    assert a.flags.writeable and a.flags.c_contiguous and not np.shares_memory(a, b)
    a[:] = 0
    assert np.array_equal(b, TINY_M64.forward(IDS))


# ------------------------------------------------------------------------------------------
# NaN and inf: they propagate, never crash
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_nan_in_an_embedding_row_propagates_causally(dtype):
    cfg = TINY.replace(tied=False)
    w = random_weights(cfg, seed=11)
    clean = Model(w, cfg, dtype=dtype)
    w_nan = dict(w)
    w_nan["wte.weight"] = w["wte.weight"].copy()
    w_nan["wte.weight"][9] = np.nan
    m = Model(w_nan, cfg, dtype=dtype)
    ids = np.array([3, 1, 4, 1, 5, 9, 2, 6])  # token 9 at position 5
    out, ref = m.forward(ids), clean.forward(ids)
    assert np.array_equal(out[:5], ref[:5]), "positions before the NaN token must not change"
    assert np.isnan(out[5:]).all(axis=-1).all(), "every logit at and after the NaN token is NaN"
    # generation stops with an error at NaN logits (never a token drawn from them); loss and
    # cached steps cope with them
    with pytest.raises(FloatingPointError, match="not finite"):
        m.generate(ids, 4, seed=0)
    with pytest.raises(FloatingPointError, match="not finite"):
        m.generate(ids, 4, greedy=True, top_k=3, top_p=0.5)
    assert math.isnan(m.loss(ids))
    c = m.new_cache(1)
    assert np.array_equal(m.step(c, ids[None, :4]), ref[None, 3])


@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan, 1e38])
def test_inf_and_nan_weights_never_crash(value):
    for name in ("h.0.mlp.c_fc.weight", "h.1.attn.c_attn.weight", "ln_f.weight", "wpe.weight", "h.0.attn.c_proj.bias"):
        w = dict(TINY_W)
        w[name] = np.full_like(TINY_W[name], value)
        for dtype in ("float32", "float64"):
            m = Model(w, TINY, dtype=dtype)
            out, hidden = m.forward(IDS, return_hidden=True)
            assert out.shape == (IDS.size, TINY.vocab_size) and hidden.shape == (3, IDS.size, 16)
            first = m.forward(IDS[:3], logits="last")
            try:
                toks = m.generate(IDS[:3], 3, seed=1, top_k=4)
            except FloatingPointError as e:  # logits that are not finite: an error, never a token
                assert "not finite" in str(e)
            else:
                assert np.isfinite(first).all() and ((0 <= toks) & (toks < TINY.vocab_size)).all()
            m.token_logprobs(IDS)


# ------------------------------------------------------------------------------------------
# huge sizes: MemoryError stating bytes, never an abort
# ------------------------------------------------------------------------------------------

def test_forward_huge_batch_is_a_memory_error_stating_bytes():
    cfg = GPTConfig(vocab_size=2**20, n_ctx=8, d_model=8, n_heads=2, n_layers=1, pos="sinusoidal")
    w = {k: np.zeros(s, np.float32) for k, s in gptcore.expected_shapes(cfg).items()}
    m = Model(w, cfg)
    ids = np.broadcast_to(np.int64(1), (64, 65536))
    with pytest.raises(MemoryError, match=r"bytes") as info:
        m.forward(ids)
    assert "(64, 65536)" in str(info.value)


_HUGE_MLP = """
from gptcore._memory import physical_memory
rows = 65536
d_ff = 1 << max(12, (2 * physical_memory() // (4 * rows)).bit_length())
cfg = GPTConfig(vocab_size=5, n_ctx=4, d_model=8, n_heads=1, n_layers=1, d_ff=d_ff, pos="sinusoidal")
m = Model(init_weights(cfg), cfg)
ids = np.zeros((rows, 1), dtype=np.int64)
"""


@pytest.mark.parametrize(
    "call",
    [
        "m.forward(ids, logits='last')",
        "m.token_logprobs(ids, targets=ids)",
        "m.loss(ids, targets=ids)",
        "m.step(m.new_cache(rows), ids)",
        "m.generate(ids, 1, greedy=True)",
    ],
)
def test_huge_intermediate_activations_are_a_memory_error_not_an_abort(call):
    # the MLP activations (rows x d_ff) exceed twice the machine's memory
    expect_isolated(_HUGE_MLP + call, "MemoryError", "bytes")


@pytest.mark.parametrize("batch", [10**13, 2**62])
def test_new_cache_huge_batch_is_a_memory_error_not_an_abort(batch):
    expect_isolated(f"""
        cfg = GPTConfig(vocab_size=5, n_ctx=4, d_model=8, n_heads=2, n_layers=2)
        Model(init_weights(cfg), cfg).new_cache({batch})
    """, "MemoryError", "bytes")


# ------------------------------------------------------------------------------------------
# property tests
# ------------------------------------------------------------------------------------------

@st.composite
def configs(draw):
    n_heads = draw(st.integers(1, 3))
    d_head = draw(st.integers(1, 6))
    return GPTConfig(
        vocab_size=draw(st.integers(1, 20)),
        n_ctx=draw(st.integers(1, 12)),
        d_model=n_heads * d_head,
        n_heads=n_heads,
        n_layers=draw(st.integers(0, 3)),
        d_ff=draw(st.integers(1, 24)),
        pos=draw(st.sampled_from(["learned", "sinusoidal"])),
        tied=draw(st.booleans()),
        bias=draw(st.booleans()),
        attn_bias=draw(st.sampled_from([None, True, False])),
        ln_affine=draw(st.booleans()),
        ln_eps=draw(st.sampled_from([1e-5, 1e-3, 0.5])),
    )


@st.composite
def id_views(draw, cfg):
    b = draw(st.integers(1, 3))
    t_max = cfg.n_ctx if cfg.pos == "learned" else cfg.n_ctx + 8
    t = draw(st.integers(1, t_max))
    ids = draw(hnp.arrays(np.int64, (b, t), elements=st.integers(0, cfg.vocab_size - 1)))
    kind = draw(st.sampled_from(["plain", "1-D", "int32", "fortran", "reversed", "strided"]))
    if kind == "1-D":
        return ids[0], ids[0]
    if kind == "int32":
        return ids.astype(np.int32), ids
    if kind == "fortran":
        return np.asfortranarray(ids), ids
    if kind == "reversed":
        r = np.ascontiguousarray(ids[::-1, ::-1])
        return r[::-1, ::-1], ids
    if kind == "strided":
        big = np.repeat(ids, 2, axis=1)
        return big[:, ::2], ids
    return ids, ids


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_property_forward_matches_reference(data):
    cfg = data.draw(configs())
    w = random_weights(cfg, seed=data.draw(st.integers(0, 2**31)))
    ids, plain = data.draw(id_views(cfg))
    snap = snapshot([ids, w])
    m = Model(w, cfg, dtype="float64", branch_scale=data.draw(st.sampled_from([1.0, 0.5])))
    causal = data.draw(st.booleans())
    out, hidden = m.forward(ids, causal=causal, return_hidden=True)
    ref, ref_hidden = reference.forward(plain, w, cfg, branch_scale=m.branch_scale, causal=causal, return_hidden=True)
    np.testing.assert_allclose(out, ref, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(hidden, ref_hidden, rtol=1e-9, atol=1e-9)
    assert np.array_equal(m.forward(ids, logits="last", causal=causal), out[..., -1, :])
    assert_unchanged([ids, w], snap)


def _invalid_ids(cfg, long_ok=False):
    v, n = cfg.vocab_size, cfg.n_ctx
    ints = st.integers(-(2**63), 2**63 - 1)
    return st.one_of(
        hnp.arrays(np.int64, st.tuples(st.integers(1, 2), st.integers(1, 4)), elements=ints).filter(
            lambda a: a.min() < 0 or a.max() >= v),
        hnp.arrays(st.sampled_from([np.float64, np.float32, np.bool_, np.complex64, np.float16]),
                   st.integers(1, 4), elements=None),
        hnp.arrays(np.int64, st.sampled_from([(0,), (0, 3), (2, 0), (), (1, 1, 2)]), elements=st.integers(0, v - 1)),
        st.lists(st.floats(allow_nan=True), min_size=1, max_size=4),
        st.lists(st.integers(v, 2**80), min_size=1, max_size=3),
        st.text(max_size=4),
        st.none(),
        st.just(np.zeros(n + 1, np.int64)) if cfg.pos == "learned" and not long_ok else st.just(np.array([-1])),
    )


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_property_forward_invalid_ids_raise_documented_errors(data):
    m = data.draw(st.sampled_from([TINY_M32, TINY_M64]))
    fn = data.draw(st.sampled_from(["forward", "token_logprobs", "generate", "step"]))
    # generation crops a prompt longer than n_ctx (documented), so that one is valid there
    bad = data.draw(_invalid_ids(TINY, long_ok=fn == "generate"))
    snap = snapshot(bad)
    with pytest.raises((TypeError, ValueError)):
        if fn == "forward":
            m.forward(bad)
        elif fn == "token_logprobs":
            m.token_logprobs(bad)
        elif fn == "generate":
            m.generate(bad, 2)
        else:
            m.step(m.new_cache(np.asarray(bad).shape[0] if np.asarray(bad).ndim == 2 and np.asarray(bad).shape[0] else 1), bad)
    assert_unchanged(bad, snap)
