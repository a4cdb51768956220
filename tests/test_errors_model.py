"""Hostile inputs for GPTConfig and Model construction (weights, dtype, branch_scale, n_heads)
and the smallest valid configurations.

The shared helpers and the rules are in ``hostile.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

import gptcore
import reference
from gptcore import GPTConfig, Model
from hostile import (
    IDS, TINY, TINY_M32, TINY_M64, TINY_W, assert_unchanged, random_weights, snapshot, structured_field, unaligned,
)


# ------------------------------------------------------------------------------------------
# configurations and Model construction
# ------------------------------------------------------------------------------------------

CONFIG_BAD = [
    (dict(d_model=15, n_heads=2), ValueError, "divisible by n_heads"),
    (dict(vocab_size=0), ValueError, "vocab_size"),
    (dict(vocab_size=-3), ValueError, "vocab_size"),
    (dict(n_ctx=0), ValueError, "n_ctx"),
    (dict(n_heads=0), ValueError, "n_heads"),
    (dict(n_layers=-1), ValueError, "n_layers"),
    (dict(d_ff=0), ValueError, "d_ff"),
    (dict(n_layers=2.0), TypeError, "n_layers"),
    (dict(vocab_size="13"), TypeError, "vocab_size"),
    (dict(pos="rotary"), ValueError, "pos"),
    (dict(tied=1), TypeError, "tied"),
    (dict(ln_eps=0.0), ValueError, "ln_eps"),
    (dict(ln_eps=float("nan")), ValueError, "ln_eps"),
    (dict(ln_eps=float("inf")), ValueError, "ln_eps"),
    (dict(ln_eps="1e-5"), ValueError, "ln_eps"),
]


@pytest.mark.parametrize("change,exc,words", CONFIG_BAD, ids=[str(c[0]) for c in CONFIG_BAD])
def test_config_rejects(change, exc, words):
    base = dict(vocab_size=13, n_ctx=16, d_model=16, n_heads=2, n_layers=2)
    with pytest.raises(exc, match=words):
        GPTConfig(**{**base, **change})


def _with(name, value, weights=TINY_W):
    w = dict(weights)
    w[name] = value
    return w


MODEL_BAD = [
    # (label, args, kwargs, exception, words)
    ("weights None", (None, TINY), {}, TypeError, "weights must be a mapping"),
    ("weights list", ([TINY_W["wte.weight"]], TINY), {}, TypeError, "weights must be a mapping"),
    ("empty mapping", ({}, None), {}, ValueError, "wte.weight"),
    ("config dict", (TINY_W, {"vocab_size": 13}), {}, TypeError, "config must be a GPTConfig"),
    ("int weight", (_with("wte.weight", TINY_W["wte.weight"].astype(np.int64)), TINY), {}, TypeError, "'wte.weight' has dtype int64"),
    ("bool weight", (_with("h.0.ln_1.weight", TINY_W["h.0.ln_1.weight"] > 0), TINY), {}, TypeError, "'h.0.ln_1.weight' has dtype bool"),
    ("complex weight", (_with("wte.weight", TINY_W["wte.weight"].astype(complex)), TINY), {}, TypeError, "complex128"),
    ("object weight", (_with("wte.weight", TINY_W["wte.weight"].astype(object)), TINY), {}, TypeError, "dtype object"),
    ("list weight", (_with("wte.weight", TINY_W["wte.weight"].tolist()), TINY), {}, TypeError, "'wte.weight' must be a numpy.ndarray"),
    ("wrong shape", (_with("wte.weight", TINY_W["wte.weight"][:5]), TINY), {}, ValueError, "'wte.weight' has shape (5, 16)"),
    ("transposed", (_with("h.1.mlp.c_fc.weight", TINY_W["h.1.mlp.c_fc.weight"].T), TINY), {}, ValueError, "h.1.mlp.c_fc.weight"),
    ("0-d weight", (_with("ln_f.bias", np.array(0.0)), TINY), {}, ValueError, "'ln_f.bias' has shape ()"),
    ("missing", ({k: v for k, v in TINY_W.items() if k != "ln_f.bias"}, TINY), {}, ValueError, "missing tensor 'ln_f.bias'"),
    ("extra", (_with("h.2.ln_1.weight", np.ones(16)), TINY), {}, ValueError, "unexpected tensor 'h.2.ln_1.weight'"),
    ("non-str key", (_with(3, np.ones(16)), TINY), {}, TypeError, "weight names must be str"),
    ("dtype float16", (TINY_W, TINY), {"dtype": "float16"}, ValueError, "dtype must be one of 'float32', 'float64', got 'float16'"),
    ("dtype bfloat16", (TINY_W, TINY), {"dtype": "bfloat16"}, ValueError, "dtype must be one of 'float32', 'float64', got 'bfloat16'"),
    ("dtype junk", (TINY_W, TINY), {"dtype": "junk"}, ValueError, "dtype must be one of"),
    ("dtype int", (TINY_W, TINY), {"dtype": 5}, TypeError, "dtype must be"),
    ("branch_scale nan", (TINY_W, TINY), {"branch_scale": float("nan")}, ValueError, "branch_scale"),
    ("branch_scale inf", (TINY_W, TINY), {"branch_scale": float("inf")}, ValueError, "branch_scale"),
    ("branch_scale str", (TINY_W, TINY), {"branch_scale": "0.5"}, TypeError, "branch_scale"),
    ("branch_scale bool", (TINY_W, TINY), {"branch_scale": True}, TypeError, "branch_scale"),
    ("n_heads not dividing", (TINY_W, None), {"n_heads": 3}, ValueError, "divisible by n_heads"),
    ("n_heads 0", (TINY_W, None), {"n_heads": 0}, ValueError, "n_heads"),
    ("n_heads float", (TINY_W, None), {"n_heads": 2.0}, TypeError, "n_heads"),
    ("n_heads against config", (TINY_W, TINY), {"n_heads": 4}, ValueError, "n_heads"),
    ("wte 1-D", ({"wte.weight": np.ones(64)}, None), {}, ValueError, "'wte.weight' must be 2-D"),
    ("wte empty", ({"wte.weight": np.ones((0, 64))}, None), {}, ValueError, "vocab_size"),
    ("block gap", ({k.replace("h.1.", "h.3."): v for k, v in TINY_W.items()}, None), {"n_heads": 2}, ValueError, "block(s) [1, 2]"),
]


@pytest.mark.parametrize("label,args,kw,exc,words", MODEL_BAD, ids=[c[0] for c in MODEL_BAD])
def test_model_rejects(label, args, kw, exc, words):
    snap = snapshot(args[0]) if isinstance(args[0], dict) else None
    with pytest.raises(exc) as info:
        Model(*args, **kw)
    assert words in str(info.value), str(info.value)
    if snap is not None:
        assert_unchanged(args[0], snap)


def test_branch_scale_accepts_numpy_scalars():
    ref = Model(TINY_W, TINY, dtype="float64", branch_scale=0.5).forward(IDS)
    for s in (np.float64(0.5), np.float32(0.5), 0.5):
        assert np.array_equal(Model(TINY_W, TINY, dtype="float64", branch_scale=s).forward(IDS), ref)


def _weight_layouts():
    """TINY_W with every tensor given in an unusual but valid layout."""
    out = {}
    ro = {}
    for k, v in TINY_W.items():
        r = v.copy()
        r.setflags(write=False)
        ro[k] = r
    out["read-only"] = ro
    out["fortran"] = {k: np.asfortranarray(v) for k, v in TINY_W.items()}
    out["strided"] = {k: np.repeat(v, 2, axis=-1)[..., ::2] for k, v in TINY_W.items()}
    out["negative strides"] = {k: np.ascontiguousarray(v[::-1])[::-1] for k, v in TINY_W.items()}
    out["structured field"] = {k: structured_field(v) for k, v in TINY_W.items()}
    out["unaligned"] = {k: unaligned(v) for k, v in TINY_W.items()}
    out["prefixed names"] = {"transformer." + k: v for k, v in TINY_W.items()}
    return out


@pytest.mark.parametrize("layout", list(_weight_layouts()))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_model_weight_layouts_give_the_same_result(layout, dtype):
    w = _weight_layouts()[layout]
    snap = snapshot(w)
    ref = (TINY_M64 if dtype == "float64" else TINY_M32).forward(IDS)
    got = Model(w, TINY, dtype=dtype).forward(IDS)
    assert np.array_equal(got, ref)
    got = Model(w, TINY, dtype=dtype, branch_scale=0.25).forward(IDS)
    assert np.array_equal(got, Model(TINY_W, TINY, dtype=dtype, branch_scale=0.25).forward(IDS))
    assert_unchanged(w, snap)


def test_model_float16_weights_are_converted_exactly():
    w16 = {k: v.astype(np.float16) for k, v in TINY_W.items()}
    w32 = {k: v.astype(np.float32) for k, v in w16.items()}
    snap = snapshot(w16)
    assert np.array_equal(Model(w16, TINY).forward(IDS), Model(w32, TINY).forward(IDS))
    assert_unchanged(w16, snap)


def test_model_is_independent_of_later_changes_to_the_weights():
    w = {k: v.copy() for k, v in TINY_W.items()}
    for dtype in ("float32", "float64"):
        m = Model(w, TINY, dtype=dtype)
        before = m.forward(IDS)
        for v in w.values():
            v *= 3.0
        assert np.array_equal(m.forward(IDS), before)
        for v in w.values():
            v /= 3.0


def test_save_writes_the_weights_the_model_computes_with(tmp_path):
    """The model is immutable: changing the caller's arrays afterwards changes neither its
    results nor what it saves."""
    w = {k: v.copy() for k, v in TINY_W.items()}
    m = Model(w, TINY, dtype="float64")
    before = m.forward(IDS)
    for v in w.values():
        v *= 2.0
    m.save(tmp_path / "m")
    assert np.array_equal(m.forward(IDS), before)
    assert np.array_equal(gptcore.load(tmp_path / "m", dtype="float64").forward(IDS), before)


@pytest.mark.parametrize("cfg", [
    GPTConfig(vocab_size=7, n_ctx=8, d_model=8, n_heads=2, n_layers=0),
    GPTConfig(vocab_size=7, n_ctx=8, d_model=8, n_heads=2, n_layers=0, pos="sinusoidal", tied=False, ln_affine=False),
    GPTConfig(vocab_size=1, n_ctx=4, d_model=4, n_heads=4, n_layers=1),
    GPTConfig(vocab_size=3, n_ctx=1, d_model=2, n_heads=1, n_layers=1, d_ff=1),
], ids=["0 layers", "0 layers sinusoidal", "vocab 1 and d_head 1", "n_ctx 1 and d_ff 1"])
def test_degenerate_but_valid_configs_match_the_reference(cfg):
    w = random_weights(cfg, seed=2)
    m = Model(w, cfg, dtype="float64")
    ids = np.arange(min(cfg.n_ctx, 5)) % cfg.vocab_size
    np.testing.assert_allclose(m.forward(ids), reference.forward(ids, w, cfg), rtol=1e-9, atol=1e-9)
    out = m.generate(ids[:1], 3, greedy=True)
    assert out.shape == (3,) and ((0 <= out) & (out < cfg.vocab_size)).all()
    if ids.size >= 2:
        lp = m.token_logprobs(ids)
        assert lp.shape == (ids.size - 1,) and np.all(lp <= 0)
