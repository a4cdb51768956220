"""The sampling controls (``gptcore.sampling``), each against the definition of the tool it
comes from: transformers' ``RepetitionPenaltyLogitsProcessor`` and ``MinPLogitsWarper`` (the
outputs of transformers itself, made by ``tests/fixtures/make_sampling_fixtures.py``, and an
independent numpy transcription of their documented code), OpenAI's formula for the frequency
and presence penalties and its ``logit_bias``; the order in which they apply; reproducibility
under a seed; a batch row equal to its run alone; the former sampler's draws kept bit for bit.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gptcore
from gptcore.sampling import Sampler, SamplingParams, filter_logits, min_p_filter, top_logprobs
from fixture_weights import fixture_weights

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TRANSFORMERS = np.load(FIXTURES / "sampling" / "transformers_processors.npz")


@pytest.fixture(scope="module")
def tiny():
    config, w = fixture_weights("tiny-b")
    return gptcore.Model(w, config)


# ------------------------------------------------------------------------------ references
def repetition_reference(z, seen, penalty):
    """transformers' RepetitionPenaltyLogitsProcessor, transcribed: gather the logits of the
    ids seen, multiply the negative ones by the penalty and divide the others, scatter back."""
    z = np.array(z, dtype=np.float64)
    ids = np.unique(seen)
    s = z[ids]
    z[ids] = np.where(s < 0, s * penalty, s / penalty)
    return z


def min_p_reference(scores, min_p):
    """transformers' MinPLogitsWarper (min_tokens_to_keep=1), transcribed: softmax, the top
    probability, remove what is below min_p times it, but never the first in a descending
    argsort of the scores."""
    scores = np.asarray(scores, dtype=np.float64)
    e = np.exp(scores - scores.max())
    probs = e / e.sum()
    remove = probs < min_p * probs.max()
    order = np.argsort(-scores, kind="stable")
    remove_sorted = remove[order]
    remove_sorted[:1] = False
    out = np.zeros_like(remove)
    out[order] = remove_sorted
    return out


def openai_penalties(z, generated, frequency, presence):
    """OpenAI's definition: mu[j] - c[j] * alpha_frequency - float(c[j] > 0) * alpha_presence,
    c[j] the count of token j among the generated tokens (not the prompt)."""
    z = np.array(z, dtype=np.float64)
    c = np.bincount(np.asarray(generated, dtype=np.int64), minlength=z.size)
    for j in range(z.size):
        z[j] = z[j] - c[j] * frequency - float(c[j] > 0) * presence
    return z


# ------------------------------------------------------------------------------ the definitions
@pytest.mark.parametrize("i", range(len(TRANSFORMERS["penalties"])))
def test_repetition_penalty_is_transformers(i):
    logits, seen = TRANSFORMERS["logits"], TRANSFORMERS["seen"]
    penalty = float(TRANSFORMERS["penalties"][i])
    theirs = TRANSFORMERS[f"repetition_{i}"]
    for r in range(logits.shape[0]):
        s = Sampler(SamplingParams(repetition_penalty=penalty), logits.shape[1], prompt=seen[r])
        ours = s.process(logits[r])
        assert np.array_equal(ours, repetition_reference(logits[r], seen[r], penalty))  # the transcription
        # transformers computes in float32: the same to float32 rounding, and exactly where it multiplies
        np.testing.assert_allclose(ours, theirs[r], rtol=2e-7, atol=0)
        untouched = np.setdiff1d(np.arange(logits.shape[1]), seen[r])
        assert np.array_equal(ours[untouched], logits[r][untouched])


@pytest.mark.parametrize("i", range(len(TRANSFORMERS["min_ps"])))
@pytest.mark.parametrize("j", range(len(TRANSFORMERS["temperatures"])))
def test_min_p_is_transformers_after_temperature(i, j):
    logits = TRANSFORMERS["logits"]
    min_p, t = float(TRANSFORMERS["min_ps"][i]), float(TRANSFORMERS["temperatures"][j])
    theirs = TRANSFORMERS[f"min_p_{i}_{j}"]
    for r in range(logits.shape[0]):
        z = logits[r].astype(np.float64)
        removed = ~np.isfinite(min_p_filter(((z - z.max()) / t)[None, :], min_p)[0])
        assert np.array_equal(removed, theirs[r]), (i, j, r)
        assert np.array_equal(removed, min_p_reference(z / t, min_p))
        # what the sampler draws from: zero exactly there
        p = Sampler(SamplingParams(temperature=t, min_p=min_p), z.size).probabilities(logits[r])
        assert np.array_equal(p == 0, theirs[r]) and p.sum() == pytest.approx(1.0)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.floats(-2, 2), st.floats(-2, 2), st.integers(0, 30))
def test_frequency_and_presence_penalties_are_openai(seed, frequency, presence, steps):
    rng = np.random.default_rng(seed)
    v = 40
    prompt = rng.integers(0, v, size=10)
    s = Sampler(SamplingParams(frequency_penalty=frequency, presence_penalty=presence, seed=seed), v, prompt=prompt)
    generated = []
    for _ in range(steps):
        z = rng.standard_normal(v) * 4
        assert np.array_equal(s.process(z), openai_penalties(z, generated, frequency, presence))
        generated.append(s.choose(z)[0])
    # the prompt does not count: tokens seen only there are untouched
    z = rng.standard_normal(v)
    only_prompt = np.setdiff1d(prompt, generated)
    assert np.array_equal(s.process(z)[only_prompt], z[only_prompt])


def test_logit_bias_adds_to_the_logits_and_can_ban_or_force():
    rng = np.random.default_rng(1)
    z = rng.standard_normal(30)
    s = Sampler(SamplingParams(logit_bias={3: 2.5, 7: -100}), 30)
    want = z.copy()
    want[3] += 2.5
    want[7] -= 100
    assert np.array_equal(s.process(z), want)
    forced = Sampler(SamplingParams(logit_bias={11: 100}, seed=0), 30)
    assert all(forced.choose(rng.standard_normal(30))[0] == 11 for _ in range(20))
    banned = Sampler(SamplingParams(logit_bias={int(np.argmax(z)): -100}, greedy=True), 30)
    assert banned.choose(z)[0] == int(np.argsort(-z)[1])
    assert SamplingParams(logit_bias={"5": 1}).logit_bias == ((5, 1.0),)  # JSON's string keys


def test_order_of_application():
    """bias, then repetition penalty, then frequency/presence, then temperature, top-k, top-p,
    min-p: the distribution equals the pipeline written out by hand."""
    rng = np.random.default_rng(2)
    v = 50
    z = rng.standard_normal(v) * 3
    prompt = np.array([1, 2, 3, 3])
    params = SamplingParams(logit_bias={1: 1.0, 9: -2.0}, repetition_penalty=1.4, frequency_penalty=0.5,
                            presence_penalty=0.25, temperature=0.8, top_k=20, top_p=0.9, min_p=0.05, seed=3)
    s = Sampler(params, v, prompt=prompt)
    first, _ = s.choose(z)
    x = z.copy()
    x[[1, 9]] += [1.0, -2.0]
    x = repetition_reference(x, np.concatenate([prompt, [first]]), 1.4)
    x = openai_penalties(x, [first], 0.5, 0.25)
    f = filter_logits(((x - x.max()) / 0.8)[None, :], 20, 0.9)
    f = min_p_filter(f, 0.05)[0]
    p = np.exp(f - f.max())
    p /= p.sum()
    got = s.probabilities(z)
    np.testing.assert_allclose(got, p, rtol=1e-12, atol=1e-15)
    assert np.array_equal(got == 0, p == 0)


def test_greedy_takes_the_argmax_after_bias_and_penalties():
    z = np.array([1.0, 3.0, 2.9, -1.0])
    assert Sampler(SamplingParams(greedy=True), 4).choose(z)[0] == 1
    assert Sampler(SamplingParams(temperature=0), 4, prompt=[1]).choose(z)[0] == 1
    assert Sampler(SamplingParams(greedy=True, repetition_penalty=1.1), 4, prompt=[1]).choose(z)[0] == 2
    assert Sampler(SamplingParams(greedy=True, presence_penalty=0.5), 4).choose(z)[0] == 1


def test_logprob_is_the_models_own():
    z = np.random.default_rng(4).standard_normal(20) * 2
    lse = z.max() + np.log(np.exp(z - z.max()).sum())
    for params in (SamplingParams(seed=1, temperature=0.5, top_k=3, logit_bias={0: 5}), SamplingParams(greedy=True)):
        tok, lp = Sampler(params, 20).choose(z)
        assert lp == pytest.approx(z[tok] - lse, abs=1e-12)
    ids, lps = top_logprobs(z, 3)
    assert ids.tolist() == np.argsort(-z)[:3].tolist()
    np.testing.assert_allclose(lps, z[ids] - lse, atol=1e-12)


def test_choosing_without_the_logprob_changes_no_token_or_draw():
    """``choose(z, logprob=False)`` skips the normalisation only: the same tokens (the same
    draws from the generator, so the streams stay together), ties going to the first maximum
    as numpy's argmax does, and NaN for the log-probability; with it, the bits of the full
    log-softmax's element."""
    from gptcore.sampling import _log_softmax
    rng = np.random.default_rng(11)
    V = 50
    for params in (SamplingParams(greedy=True), SamplingParams(seed=3, temperature=0.7, top_p=0.9),
                   SamplingParams(greedy=True, repetition_penalty=1.3), SamplingParams(seed=5, logit_bias={7: 2.0})):
        full, lean = Sampler(params, V, prompt=[1, 2]), Sampler(params, V, prompt=[1, 2])
        for step in range(40):
            z = (rng.standard_normal(V) * 3).astype(np.float32)
            if step % 5 == 0:
                z[[4, 9]] = z.max() + 1  # a tie: the first of the two
            tok, lp = full.choose(z)
            tok2, lp2 = lean.choose(z, logprob=False)
            assert tok2 == tok and math.isnan(lp2)
            assert lp == float(_log_softmax(np.asarray(z, np.float64)[None, :])[0, tok])
            if params.is_greedy and params.repetition_penalty == 1.0 and step % 5 == 0:
                assert tok == 4


def test_generate_without_logprobs_gives_the_same_tokens(tiny):
    ids = np.random.default_rng(2).integers(0, tiny.config.vocab_size, (3, 5))
    for opts in (dict(greedy=True), dict(seed=[1, 2, 3], temperature=0.8, top_k=20)):
        toks, lps = tiny.generate(ids, 6, return_logprobs=True, **opts)
        assert np.array_equal(tiny.generate(ids, 6, **opts), toks)
        assert np.isfinite(lps).all() and (lps <= 0).all()


def test_non_finite_logits_are_an_error_not_a_token():
    z = np.zeros(10)
    z[4] = np.nan
    with pytest.raises(FloatingPointError, match=r"not finite \(nan at token id 4\)"):
        Sampler(SamplingParams(seed=0), 10).choose(z)
    z[4] = np.inf
    with pytest.raises(FloatingPointError, match="token id 4"):
        Sampler(SamplingParams(greedy=True), 10).choose(z)


@pytest.mark.parametrize("kwargs,exc,words", [
    (dict(temperature=-1), ValueError, "temperature"),
    (dict(temperature="hot"), TypeError, "temperature"),
    (dict(top_k=0), ValueError, "top_k"),
    (dict(top_p=0.0), ValueError, "top_p"),
    (dict(min_p=1.5), ValueError, "min_p"),
    (dict(min_p="x"), TypeError, "min_p"),
    (dict(repetition_penalty=0.0), ValueError, "repetition_penalty"),
    (dict(repetition_penalty=math.inf), ValueError, "repetition_penalty"),
    (dict(frequency_penalty=2.5), ValueError, "frequency_penalty"),
    (dict(presence_penalty=-3), ValueError, "presence_penalty"),
    (dict(logit_bias={1: 101}), ValueError, r"logit_bias\[1\]"),
    (dict(logit_bias={-1: 1}), ValueError, "logit_bias"),
    (dict(logit_bias={1.5: 1}), TypeError, "logit_bias"),
    (dict(logit_bias=[1, 2]), TypeError, "logit_bias"),
    (dict(stop=[""]), ValueError, "stop"),
    (dict(stop=[3]), TypeError, "stop"),
    (dict(stop_token_ids=[-2]), ValueError, "stop_token_ids"),
    (dict(seed=-1), ValueError, "seed"),
    (dict(greedy=1), TypeError, "greedy"),
])
def test_sampling_params_name_the_bad_field(kwargs, exc, words):
    with pytest.raises(exc, match=words):
        SamplingParams(**kwargs)


def test_ids_are_checked_against_the_vocabulary(tiny):
    with pytest.raises(ValueError, match=r"logit_bias: token id 500 is out of range \[0, 500\)"):
        Sampler(SamplingParams(logit_bias={500: 1.0}), 500)
    v = tiny.config.vocab_size
    with pytest.raises(ValueError, match=rf"generate: logit_bias: token id {v} is out of range \[0, {v}\)"):
        tiny.generate([1, 2], 3, logit_bias={v: 1.0})
    with pytest.raises(ValueError, match=r"generate: stop_tokens: token id 1000"):
        tiny.generate([1, 2], 3, stop_tokens=[1000])
    with pytest.raises(ValueError, match=r"stream: min_p must be in \[0, 1\]"):
        tiny.stream([1, 2], 3, min_p=2.0)  # checked when called, before any work


# ------------------------------------------------------------------------------ reproducibility
def _old_choose(logits, temperature, top_k, top_p, greedy, rng):
    """gptcore's sampler before SamplingParams (one generator for a whole batch), kept here
    verbatim as the reference its seeded results must still equal."""
    z = np.asarray(logits, dtype=np.float64)
    m = z.max(axis=-1, keepdims=True)
    logp = z - (m + np.log(np.exp(z - m).sum(axis=-1, keepdims=True)))
    if greedy:
        tok = np.argmax(z, axis=-1)
    else:
        f = filter_logits((z - z.max(axis=-1, keepdims=True)) / temperature, top_k, top_p)
        fm = f.max(axis=-1, keepdims=True)
        p = np.exp(f - (fm + np.log(np.exp(f - fm).sum(axis=-1, keepdims=True))))
        u = rng.random(z.shape[0])
        cdf = np.cumsum(p, axis=-1)
        tok = np.minimum((cdf < (u * cdf[:, -1])[:, None]).sum(axis=-1), z.shape[-1] - 1)
        bad = p[np.arange(z.shape[0]), tok] == 0
        if bad.any():
            tok[bad] = np.argmax(p[bad], axis=-1)
    tok = tok.astype(np.int64)
    return tok, logp[np.arange(z.shape[0]), tok]


@pytest.mark.parametrize("b", [1, 2, 3])
@pytest.mark.parametrize("opts", [dict(), dict(temperature=0.7, top_k=5), dict(top_p=0.8, temperature=1.3),
                                  dict(greedy=True), dict(temperature=1e-9)])
def test_seeded_draws_are_those_of_the_former_sampler(b, opts):
    rng = np.random.default_rng(b)
    old_rng, shared = np.random.default_rng(42), np.random.default_rng(42)
    params = SamplingParams(seed=42, **opts)
    samplers = [Sampler(params, 300, rng=shared) for _ in range(b)]
    for _ in range(30):
        z = (rng.standard_normal((b, 300)) * 3).astype(np.float32)
        want_tok, want_lp = _old_choose(z, params.temperature, params.top_k, params.top_p, params.is_greedy, old_rng)
        got = [s.choose(z[r]) for r, s in enumerate(samplers)]
        assert [t for t, _ in got] == want_tok.tolist()
        assert np.array_equal(np.array([lp for _, lp in got]), want_lp)  # bit for bit


@pytest.mark.parametrize("b", [1, 2])
def test_generate_keeps_its_former_seeded_tokens(tiny, b):
    """Model.generate on a seeded batch draws as before: its loop written out with the former
    sampler gives the same tokens and log-probabilities, bit for bit."""
    rng = np.random.default_rng(7)
    prompt = rng.integers(0, tiny.config.vocab_size, size=(b, 6))
    for opts in (dict(seed=3), dict(seed=4, temperature=0.7, top_k=5), dict(greedy=True)):
        toks, lps = tiny.generate(prompt if b > 1 else prompt[0], 20, return_logprobs=True, **opts)
        gen = np.random.default_rng(opts.get("seed"))
        cache = tiny.new_cache(b)
        logits = tiny.step(cache, prompt)
        want_t, want_l = [], []
        for _ in range(20):
            t, lp = _old_choose(logits, opts.get("temperature", 1.0), opts.get("top_k"), None,
                                opts.get("greedy", False), gen)
            want_t.append(t)
            want_l.append(lp)
            logits = tiny.step(cache, t[:, None])
        want_t, want_l = np.stack(want_t, axis=1), np.stack(want_l, axis=1)
        assert np.array_equal(np.atleast_2d(toks), want_t) and np.array_equal(np.atleast_2d(lps), want_l)


def test_all_controls_reproducible_under_a_seed(tiny):
    opts = dict(temperature=0.9, top_k=40, top_p=0.95, min_p=0.02, repetition_penalty=1.2, frequency_penalty=0.3,
                presence_penalty=0.4, logit_bias={5: 2.0, 6: -1.0})
    a = tiny.generate([1, 2, 3], 40, seed=11, **opts)
    b = tiny.generate([1, 2, 3], 40, seed=11, **opts)
    c = tiny.generate([1, 2, 3], 40, seed=12, **opts)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert list(tiny.stream([1, 2, 3], 40, seed=11, **opts)) == a.tolist()


def test_a_row_with_its_own_seed_equals_its_run_alone(tiny):
    """seed as a list: each row draws from its own generator, so a row's tokens and
    log-probabilities do not depend on the other rows of the batch (what a server batching
    requests needs)."""
    rng = np.random.default_rng(8)
    prompts = rng.integers(0, tiny.config.vocab_size, size=(3, 5))
    opts = dict(temperature=1.1, top_p=0.9, repetition_penalty=1.3, presence_penalty=0.5)
    toks, lps = tiny.generate(prompts, 25, seed=[5, 6, 7], return_logprobs=True, **opts)
    for r, s in enumerate([5, 6, 7]):
        alone, alone_lp = tiny.generate(prompts[r], 25, seed=s, return_logprobs=True, **opts)
        assert np.array_equal(toks[r], alone) and np.array_equal(lps[r], alone_lp)
    other = tiny.generate(prompts[[2, 0]], 25, seed=[7, 5], **opts)
    assert np.array_equal(other, toks[[2, 0]])
    with pytest.raises(ValueError, match="one per sequence"):
        tiny.generate(prompts, 3, seed=[1, 2])
    with pytest.raises(ValueError, match=r"seed\[1\]"):
        tiny.generate(prompts, 3, seed=[1, -2, 3])


def test_repetition_penalty_changes_greedy_generation(tiny):
    """Greedy decoding of the tiny model repeats itself; a strong repetition penalty makes
    each step avoid every token seen so far (while any is left)."""
    prompt = np.array([1, 2, 3])
    free = tiny.generate(prompt, 30, greedy=True)
    assert len(set(free.tolist())) < 30
    out = tiny.generate(prompt, 30, greedy=True, repetition_penalty=1e6)
    assert len(set(out.tolist()) | {1, 2, 3}) == 33  # nothing seen is chosen again


# ------------------------------------------------------------------------------ memory, non-finite
def test_generate_refuses_what_cannot_fit_before_starting(tiny):
    with pytest.raises(MemoryError, match=r"generate\(max_new_tokens=1,000,000,000,000\).*bytes"):
        tiny.generate([1, 2, 3], 10**12)
    # streaming keeps no tokens, and learned positions bound the cache: it may run forever
    it = tiny.stream([1, 2, 3], 10**12, greedy=True, context_shift=16)
    assert len([next(it) for _ in range(5)]) == 5


def test_non_finite_logits_stop_generation(tiny):
    config, w = fixture_weights("tiny-b")
    w = {k: v.copy() for k, v in w.items()}
    w["ln_f.weight"][3] = np.nan
    model = gptcore.Model(w, config)  # in memory: allowed, to study it
    with pytest.raises(FloatingPointError, match=r"generate: the model's logits for new token 1 are not finite"):
        model.generate([1, 2], 5, seed=0)
    with pytest.raises(FloatingPointError, match="sequence 0"):
        model.generate([[1, 2], [3, 4]], 5, greedy=True)
