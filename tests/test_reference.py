"""The numpy reference forward (tests/reference.py) against the transformers fixtures, and the
fixture weight recipe against the stored weights."""

from __future__ import annotations

import numpy as np
import pytest

import reference
from fixture_weights import case_names, fixture_weights, load_case, recipe_weights

SMALL = [n for n in case_names() if n != "gpt2-small-seed124"]
RTOL = 1e-12  # relative to the largest |logit| of the case


def _logsumexp(x):
    m = x.max(axis=-1, keepdims=True)
    return m[..., 0] + np.log(np.exp(x - m).sum(axis=-1))


def test_cases_present():
    assert "gpt2-small-seed124" in case_names()
    assert len(SMALL) >= 3


@pytest.mark.parametrize("name", SMALL)
def test_recipe_reproduces_stored_weights(name):
    case, arrays = load_case(name)
    config, stored = fixture_weights(name)
    rebuilt = recipe_weights(config, case["seed"])
    assert list(rebuilt) == list(stored)  # same names, same order as the file
    for k, v in stored.items():
        assert rebuilt[k].shape == v.shape, k
        assert np.array_equal(rebuilt[k], v), k


@pytest.mark.parametrize("name", SMALL)
def test_reference_matches_fixture_logits(name):
    case, arrays = load_case(name)
    config, weights = fixture_weights(name)
    ids = arrays["ids"]
    assert ids.shape == (case["batch"], case["T"])
    logits = reference.forward(ids, weights, config)
    expected = arrays["logits"]
    assert logits.shape == expected.shape == (case["batch"], case["T"], config.vocab_size)
    scale = np.abs(expected).max()
    assert np.abs(logits - expected).max() <= RTOL * scale
    assert np.abs(_logsumexp(logits) - arrays["logsumexp"]).max() <= RTOL * scale
    assert np.array_equal(logits.argmax(axis=-1), arrays["argmax"])
    # One sequence at a time gives the same rows as the batch.
    np.testing.assert_allclose(reference.forward(ids[-1], weights, config), logits[-1], rtol=0, atol=RTOL * scale)


@pytest.mark.parametrize("name", SMALL)
def test_reference_greedy_matches_fixture(name):
    case, arrays = load_case(name)
    config, weights = fixture_weights(name)
    seq = list(arrays["prompt"])
    assert len(seq) == case["prompt"]
    for _ in range(case["new_tokens"]):
        seq.append(int(reference.forward(np.array(seq), weights, config)[-1].argmax()))
    assert seq[case["prompt"]:] == list(arrays["greedy"])


def test_reference_gpt2_small_size():
    name = "gpt2-small-seed124"
    case, arrays = load_case(name)
    config, weights = fixture_weights(name)
    assert (config.d_model, config.n_layers, config.vocab_size) == (768, 12, 50257)
    assert weights["h.11.mlp.c_proj.weight"].shape == (3072, 768)
    ids = arrays["ids"]
    assert ids.shape == (case["batch"], case["T"])
    logits = reference.forward(ids, weights, config)
    assert logits.shape == (case["batch"], case["T"], 50257)
    expected = arrays["logits_cols"]
    scale = np.abs(expected).max()
    assert np.abs(logits[..., arrays["cols"]] - expected).max() <= RTOL * scale
    assert np.abs(_logsumexp(logits) - arrays["logsumexp"]).max() <= RTOL * scale
    assert np.array_equal(logits.argmax(axis=-1), arrays["argmax"])


def test_reference_is_causal_and_hidden_shapes():
    config, weights = fixture_weights("tiny-b")
    rng = np.random.default_rng(5)
    ids = rng.integers(0, config.vocab_size, size=20)
    changed = ids.copy()
    changed[-1] = (changed[-1] + 1) % config.vocab_size
    a, hidden = reference.forward(ids, weights, config, return_hidden=True)
    b = reference.forward(changed, weights, config)
    assert np.array_equal(a[:-1], b[:-1])
    assert not np.array_equal(a[-1], b[-1])
    assert hidden.shape == (config.n_layers + 1, 20, config.d_model)
    np.testing.assert_array_equal(hidden[0], weights["wte.weight"][ids] + weights["wpe.weight"][:20])


def test_reference_lesson_style_config():
    """Sinusoidal positions, no biases, no LayerNorm affine, untied head: the table and the
    forward on a hand-checked case."""
    pe = reference.sinusoidal_positions(3, 4)
    t = np.array([1.0, 2.0, 3.0])[:, None]
    div = np.array([1.0, 1.0, 100.0, 100.0])
    expected = np.where(np.arange(4) % 2 == 0, np.sin(t / div), np.cos(t / div))
    np.testing.assert_array_equal(pe, expected)
    assert pe[0, 0] == np.sin(1.0) and pe[0, 1] == np.cos(1.0)

    class Cfg:
        vocab_size, n_ctx, d_model, n_heads, n_layers = 7, 4, 4, 2, 0
        pos, tied, bias, attn_bias, ln_affine, ln_eps = "sinusoidal", False, False, False, False, 1e-5

    rng = np.random.default_rng(0)
    w = {"wte.weight": rng.standard_normal((7, 4)), "lm_head.weight": rng.standard_normal((7, 4))}
    ids = np.array([3, 0, 6])
    h = w["wte.weight"][ids] + pe
    x = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(reference.forward(ids, w, Cfg), x @ w["lm_head.weight"].T, rtol=1e-14)
