"""Hostile inputs for generation and scoring: generate, stream, step and its cache,
token_logprobs, loss, perplexity, and softmax.

The shared helpers and the rules are in ``hostile.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import gptcore
import reference
from gptcore import Model
from hostile import IDS, IDS_BAD, TINY, TINY_M32, TINY_M64, TINY_W, assert_unchanged, random_weights, snapshot


# ------------------------------------------------------------------------------------------
# generate, stream, step, token_logprobs, loss, perplexity
# ------------------------------------------------------------------------------------------

GENERATE_BAD = [
    ({"max_new_tokens": -1}, ValueError, "max_new_tokens"),
    ({"max_new_tokens": 1.0}, TypeError, "max_new_tokens"),
    ({"max_new_tokens": None}, TypeError, "max_new_tokens"),
    ({"max_new_tokens": True}, TypeError, "max_new_tokens"),
    ({"temperature": -0.1}, ValueError, "temperature"),
    ({"temperature": float("nan")}, ValueError, "temperature"),
    ({"temperature": float("inf")}, ValueError, "temperature"),
    ({"temperature": "1"}, TypeError, "temperature"),
    ({"top_k": 0}, ValueError, "top_k"),
    ({"top_k": 1.5}, TypeError, "top_k"),
    ({"top_p": 0.0}, ValueError, "top_p"),
    ({"top_p": 1.5}, ValueError, "top_p"),
    ({"top_p": float("nan")}, ValueError, "top_p"),
    ({"top_p": "0.5"}, TypeError, "top_p"),
    ({"greedy": 1}, TypeError, "greedy"),
    ({"seed": -1}, ValueError, "seed"),
    ({"seed": 1.5}, TypeError, "seed"),
    ({"seed": "x"}, TypeError, "seed"),
    ({"stop_tokens": [13]}, ValueError, "stop_tokens"),
    ({"stop_tokens": [-1]}, ValueError, "stop_tokens"),
    ({"stop_tokens": [2**70]}, ValueError, "stop_tokens"),
    ({"stop_tokens": [1.5]}, TypeError, "stop_tokens"),
    ({"stop_tokens": ["a"]}, TypeError, "stop_tokens"),
    ({"stop_tokens": "3"}, TypeError, "stop_tokens"),
    ({"stop_tokens": 3}, TypeError, "stop_tokens"),
]


@pytest.mark.parametrize("kw,exc,words", GENERATE_BAD, ids=[f"{list(c[0].items())[0]}" for c in GENERATE_BAD])
def test_generate_and_stream_reject(kw, exc, words):
    kw = dict(kw)
    n = kw.pop("max_new_tokens", 3)
    with pytest.raises(exc) as info:
        TINY_M64.generate(IDS, n, **kw)
    assert words in str(info.value), str(info.value)
    with pytest.raises(exc):
        list(TINY_M64.stream(IDS, n, **kw))


@pytest.mark.parametrize("label,ids,exc,words", IDS_BAD, ids=[c[0] for c in IDS_BAD])
def test_generate_rejects_ids(label, ids, exc, words):
    if label.startswith(("T > n_ctx", "B, T > n_ctx")):
        # generation crops a long prompt to its last n_ctx tokens (documented)
        assert TINY_M64.generate(ids, 1, greedy=True).shape[-1] == 1
        return
    with pytest.raises(exc):
        TINY_M64.generate(ids, 2)


def test_generate_tiny_temperature_is_greedy():
    """A temperature so small that logits / temperature overflows must still pick the most
    likely token, not an arbitrary one."""
    greedy = TINY_M64.generate(IDS, 6, greedy=True)
    for t in (1e-12, 1e-300, 1e-310, 5e-324):
        got = TINY_M64.generate(IDS, 6, temperature=t, seed=0)
        assert np.array_equal(got, greedy), f"temperature={t}: {got} != greedy {greedy}"


def test_generate_huge_temperature_is_valid():
    toks = TINY_M64.generate(IDS, 20, temperature=1e308, seed=0)
    assert ((0 <= toks) & (toks < TINY.vocab_size)).all()


def test_generate_does_not_modify_inputs():
    ids = IDS.copy()
    ids.setflags(write=False)
    stops = np.array([5, 6])
    snap = snapshot([ids, stops])
    TINY_M64.generate(ids, 5, stop_tokens=stops, seed=3, top_k=5, top_p=0.9)
    list(TINY_M64.stream(ids, 5, stop_tokens=stops, seed=3))
    assert_unchanged([ids, stops], snap)


STEP_BAD = [
    ("not a cache", lambda: ("cache", IDS[None, :3]), TypeError, "cache"),
    ("None cache", lambda: (None, IDS[None, :3]), TypeError, "cache"),
    ("batch mismatch", lambda: (TINY_M64.new_cache(2), IDS[None, :3]), ValueError, "cache holds 2"),
    ("dtype mismatch", lambda: (TINY_M32.new_cache(1), IDS[None, :3]), TypeError, "dtype"),
    ("float ids", lambda: (TINY_M64.new_cache(1), IDS[None, :3] * 1.0), TypeError, "ids"),
    ("out of range", lambda: (TINY_M64.new_cache(1), np.array([[13]])), ValueError, "out of range"),
    ("beyond n_ctx", lambda: (TINY_M64.new_cache(1), np.zeros((1, 17), np.int64)), ValueError, "n_ctx"),
]


@pytest.mark.parametrize("label,make,exc,words", STEP_BAD, ids=[c[0] for c in STEP_BAD])
def test_step_rejects(label, make, exc, words):
    cache, ids = make()
    with pytest.raises(exc) as info:
        TINY_M64.step(cache, ids)
    assert words in str(info.value), str(info.value)


def _other(**change):
    cfg = TINY.replace(**change)
    return Model(random_weights(cfg, seed=5), cfg, dtype="float64")


@pytest.mark.parametrize("other", [
    dict(n_heads=4),          # more heads, narrower: same d_model
    dict(n_heads=1),          # fewer heads, wider
    dict(d_model=8),          # narrower heads
    dict(d_model=32),         # wider heads
    dict(n_layers=1),         # fewer layers
    dict(n_layers=3),         # more layers
], ids=lambda d: str(d))
def test_step_refuses_a_cache_made_by_another_model(other):
    """A cache holds one model's keys and values; another model must refuse it with a
    ValueError rather than compute with it (wrong numbers) or fail inside."""
    cache = _other(**other).new_cache(1)
    with pytest.raises(ValueError, match="cache"):
        TINY_M64.step(cache, IDS[None, :4])


def test_step_cache_after_an_error_is_unchanged():
    c = TINY_M64.new_cache(1)
    first = TINY_M64.step(c, IDS[None, :4])
    for bad in (np.array([[13]]), np.zeros((1, 13), np.int64), np.zeros((2, 1), np.int64)):
        with pytest.raises(ValueError):
            TINY_M64.step(c, bad)
        assert c.len == 4
    want = TINY_M64.forward(IDS[:6], logits="last")
    assert np.array_equal(TINY_M64.step(c, IDS[None, 4:6])[0], want)
    assert first.shape == (1, 13)


NEW_CACHE_BAD = [(0, ValueError), (-1, ValueError), (2.5, TypeError), ("3", TypeError), (None, TypeError), (True, TypeError)]


@pytest.mark.parametrize("batch,exc", NEW_CACHE_BAD, ids=[repr(c[0]) for c in NEW_CACHE_BAD])
def test_new_cache_rejects(batch, exc):
    with pytest.raises(exc, match="batch"):
        TINY_M64.new_cache(batch)


LOGPROB_BAD = [
    ({"ids": IDS[:1]}, ValueError, "at least 2 tokens"),
    ({"targets": IDS[:5]}, ValueError, "targets must have the shape of ids"),
    ({"targets": IDS + 13}, ValueError, "targets: token id"),
    ({"targets": IDS * 1.0}, TypeError, "targets"),
    ({"targets": IDS.astype(object)}, TypeError, "targets"),
    ({"chunk": 0}, ValueError, "chunk"),
    ({"chunk": -5}, ValueError, "chunk"),
    ({"chunk": 2.5}, TypeError, "chunk"),
    ({"chunk": True}, TypeError, "chunk"),
    ({"chunk": None}, TypeError, "chunk"),
    ({"ids": np.zeros(17, np.int64)}, ValueError, "n_ctx"),
    ({"ids": IDS.astype(float)}, TypeError, "ids"),
]


@pytest.mark.parametrize("kw,exc,words", LOGPROB_BAD, ids=[f"{list(c[0])[0]}{i}" for i, c in enumerate(LOGPROB_BAD)])
@pytest.mark.parametrize("fn", ["token_logprobs", "loss", "perplexity"])
def test_logprob_family_rejects(fn, kw, exc, words):
    kw = dict(kw)
    ids = kw.pop("ids", IDS)
    snap = snapshot([ids, kw.get("targets")])
    with pytest.raises(exc) as info:
        getattr(TINY_M64, fn)(ids, **kw)
    assert words in str(info.value), str(info.value)
    assert_unchanged([ids, kw.get("targets")], snap)


def test_logprobs_match_the_reference():
    lp = TINY_M64.token_logprobs(IDS)
    z = reference.forward(IDS, TINY_W, TINY)
    ref = z - (z.max(-1, keepdims=True) + np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True)))
    np.testing.assert_allclose(lp, ref[np.arange(IDS.size - 1), IDS[1:]], rtol=1e-9, atol=1e-9)
    assert math.isclose(TINY_M64.perplexity(IDS), math.exp(-lp.mean()), rel_tol=1e-12)


SOFTMAX_BAD = [
    (np.ones(3, object), TypeError, "softmax"),
    ("abc", TypeError, "softmax"),
    ([True, False], TypeError, "softmax"),
    (np.ones(3, complex), TypeError, "softmax"),
]


@pytest.mark.parametrize("x,exc,words", SOFTMAX_BAD, ids=[repr(c[0])[:20] for c in SOFTMAX_BAD])
def test_softmax_rejects(x, exc, words):
    with pytest.raises(exc, match=words):
        gptcore.softmax(x)


def test_softmax_edge_values():
    with pytest.raises(ValueError):
        gptcore.softmax(np.ones((2, 3)), axis=5)
    x = np.array([[1.0, 2.0, np.nan], [0.0, -np.inf, 1.0]])
    snap = snapshot(x)
    y = gptcore.softmax(x)
    assert np.isnan(y[0]).all() and np.isfinite(y[1]).all() and y[1, 1] == 0.0
    assert_unchanged(x, snap)
    ro = np.arange(4.0)
    ro.setflags(write=False)
    np.testing.assert_allclose(gptcore.softmax(ro).sum(), 1.0)
