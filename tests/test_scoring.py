"""Sliding-window scoring (gptcore.scoring): which tokens are scored with how much context, a
hand-computed window, and results that do not depend on how windows are batched."""

from __future__ import annotations

import math

import numpy as np
import pytest

import gptcore
from gptcore.scoring import ScoreResult, resolve_window, score_ids, score_many, sliding_windows

CONFIG = gptcore.GPTConfig(vocab_size=61, n_ctx=16, d_model=32, n_heads=2, n_layers=2)


@pytest.fixture(scope="module")
def model64():
    return gptcore.Model(gptcore.init_weights(CONFIG, seed=3, dtype="float64"), CONFIG, dtype="float64")


@pytest.fixture(scope="module")
def model32():
    return gptcore.Model(gptcore.init_weights(CONFIG, seed=4, dtype="float32"), CONFIG)


def _hf_recipe(n, context, stride):
    """Hugging Face's loop, written independently: for each window, the positions whose label
    is kept (not -100) after the shift, as absolute token indices."""
    scored = []
    prev_end = 0
    for begin in range(0, n, stride):
        end = min(begin + context, n)
        trg_len = end - prev_end
        labels = list(range(begin, end))
        kept = labels[len(labels) - trg_len:] if trg_len < len(labels) else labels
        kept = [p for p in kept if p > begin]  # the shift: a window's first label has no prediction
        scored.append((begin, end, kept))
        prev_end = end
        if end == n:
            break
    return scored


def test_sliding_windows_examples():
    assert sliding_windows(10, 4, 2) == [(0, 4, 1), (2, 6, 4), (4, 8, 6), (6, 10, 8)]
    assert sliding_windows(9, 4, 2) == [(0, 4, 1), (2, 6, 4), (4, 8, 6), (6, 9, 8)]
    assert sliding_windows(4, 8, 4) == [(0, 4, 1)]
    assert sliding_windows(8, 8, 3) == [(0, 8, 1)]
    assert sliding_windows(9, 8, 3) == [(0, 8, 1), (3, 9, 8)]
    assert sliding_windows(1, 8, 4) == []
    assert sliding_windows(0, 8, 4) == []


@pytest.mark.parametrize("context,stride", [(2, 1), (4, 1), (4, 3), (5, 2), (8, 4), (8, 7), (16, 5)])
def test_every_token_scored_once_with_enough_context(context, stride):
    for n in range(0, 40):
        wins = sliding_windows(n, context, stride)
        seen = []
        for begin, end, first in wins:
            assert 0 <= begin < first <= end <= n and end - begin <= context
            for p in range(first, end):
                # p's context inside its window: all earlier tokens, or at least context - stride
                assert p - begin == p or p - begin >= context - stride
            seen += list(range(first, end))
        assert seen == list(range(1, n)), (n, wins)
        if n >= 2:  # (the recipe runs one window that scores nothing on a 1-token document)
            assert [(b, e, list(range(f, e))) for b, e, f in wins] == _hf_recipe(n, context, stride)


def test_window_arguments_are_checked(model32):
    with pytest.raises(ValueError, match="stride must be smaller than context"):
        sliding_windows(10, 4, 4)
    with pytest.raises(ValueError, match="context must be >= 2"):
        sliding_windows(10, 1, 1)
    with pytest.raises(TypeError, match="stride must be an int"):
        sliding_windows(10, 4, 1.5)
    with pytest.raises(ValueError, match="n_ctx = 16"):
        score_ids(model32, np.arange(20), context=17, stride=4)
    assert resolve_window(model32) == (16, 8)
    assert resolve_window(model32, 10) == (10, 5)


def _log_softmax(logits):
    m = logits.max(axis=-1, keepdims=True)
    z = logits - m
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def test_sliding_window_equals_a_hand_computed_window(model64):
    """A 13-token document, context 8, stride 3: windows ids[0:8] (scores 1..7), ids[3:11]
    (scores 8..10) and ids[6:13] (scores 11..12); each log-probability recomputed here from
    the model's logits with a numpy log-softmax."""
    rng = np.random.default_rng(0)
    ids = rng.integers(0, CONFIG.vocab_size, size=13)
    res = score_ids(model64, ids, context=8, stride=3)
    assert sliding_windows(13, 8, 3) == [(0, 8, 1), (3, 11, 8), (6, 13, 11)]
    expected = []
    for begin, end, first in [(0, 8, 1), (3, 11, 8), (6, 13, 11)]:
        lsm = _log_softmax(model64.forward(ids[begin:end]))
        for p in range(first, end):
            expected.append(lsm[p - begin - 1, ids[p]])  # row p-1 of the window predicts ids[p]
    expected = np.array(expected)
    assert res.tokens == 12 and res.logprobs.shape == (12,)
    np.testing.assert_allclose(res.logprobs, expected, rtol=1e-12, atol=1e-12)
    assert res.nll == pytest.approx(-expected.sum(), rel=1e-12)
    assert res.mean == pytest.approx(res.nll / 12, rel=1e-15)
    assert res.perplexity == pytest.approx(math.exp(res.nll / 12), rel=1e-15)
    # the token 11 is scored in the third window with 5 tokens of context, not 11: it differs
    # from what the full-context pass gives (the window really is cut)
    full = _log_softmax(model64.forward(ids))[10, ids[11]]
    assert full != res.logprobs[10]


def test_one_window_is_token_logprobs_bit_for_bit(model32):
    ids = np.random.default_rng(1).integers(0, CONFIG.vocab_size, size=16)
    res = score_ids(model32, ids)
    ref = model32.token_logprobs(ids)
    np.testing.assert_array_equal(res.logprobs, ref)
    assert res.nll == -math.fsum(ref.tolist())


@pytest.mark.parametrize("model_name", ["model32", "model64"])
def test_batch_does_not_change_a_bit(model_name, request):
    model = request.getfixturevalue(model_name)
    ids = np.random.default_rng(2).integers(0, CONFIG.vocab_size, size=57)
    results = [score_ids(model, ids, context=9, stride=4, batch=b) for b in (1, 2, 3, 5, 64)]
    for r in results[1:]:
        np.testing.assert_array_equal(r.logprobs, results[0].logprobs)
        assert (r.tokens, r.nll, r.mean, r.perplexity) == (results[0].tokens, results[0].nll, results[0].mean,
                                                           results[0].perplexity)
    assert results[0].tokens == 56


def test_score_many_equals_each_document_alone(model32):
    rng = np.random.default_rng(5)
    docs = [rng.integers(0, CONFIG.vocab_size, size=n) for n in (0, 1, 2, 7, 16, 16, 17, 40, 16, 3)]
    alone = [score_ids(model32, d, context=12, stride=5) for d in docs]
    for batch in (1, 4, 100):
        together = score_many(model32, docs, context=12, stride=5, batch=batch)
        for a, t in zip(alone, together):
            np.testing.assert_array_equal(a.logprobs, t.logprobs)
            assert a == t or (a.tokens == 0 and t.tokens == 0)
    assert [a.tokens for a in alone] == [0, 0, 1, 6, 15, 15, 16, 39, 15, 2]


def test_nothing_to_score():
    r = ScoreResult.from_logprobs(np.zeros(0))
    assert r.tokens == 0 and r.nll == 0.0 and math.isnan(r.mean) and math.isnan(r.perplexity)


def test_bad_documents_raise_clear_errors(model32):
    with pytest.raises(ValueError, match=r"token id 61 at position 2 is out of range \[0, 61\)"):
        score_ids(model32, np.array([1, 2, 61, 3]))
    with pytest.raises(ValueError, match="token id -1"):
        score_ids(model32, [1, -1])
    with pytest.raises(ValueError, match="1-D"):
        score_ids(model32, np.zeros((2, 3), dtype=np.int64))
    with pytest.raises(TypeError, match="integer"):
        score_ids(model32, np.zeros(3))
    with pytest.raises(ValueError, match="batch must be >= 1"):
        score_ids(model32, np.arange(5), batch=0)
    ids = np.arange(5)
    before = ids.copy()
    score_ids(model32, ids)
    np.testing.assert_array_equal(ids, before)
