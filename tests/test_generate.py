"""Generation with the key/value cache, last-position logits, and the chunked loss."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gptcore
from gptcore.sampling import filter_logits
from fixture_weights import case_names, fixture_weights, load_case


@pytest.fixture(scope="module")
def tiny():
    config, w = fixture_weights("tiny-b")
    return config, w, gptcore.Model(w, config, dtype="float32"), gptcore.Model(w, config, dtype="float64")


@pytest.mark.parametrize("name", case_names())
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_greedy_tokens_match_fixtures(name, dtype):
    config, w = fixture_weights(name)
    _, arr = load_case(name)
    model = gptcore.Model(w, config, dtype=dtype)
    out = model.generate(arr["prompt"], len(arr["greedy"]), greedy=True)
    assert out.dtype == np.int64
    assert np.array_equal(out, arr["greedy"])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cached_decode_is_bit_identical_to_full_forward(tiny, dtype):
    config, _, m32, m64 = tiny
    model = m32 if dtype == "float32" else m64
    rng = np.random.default_rng(0)
    ids = rng.integers(0, config.vocab_size, size=(2, 64))
    full = model.forward(ids)
    cache = model.new_cache(2)
    first = model.step(cache, ids[:, :3])
    assert np.array_equal(first, full[:, 2])
    for t in range(3, 64):
        logits = model.step(cache, ids[:, t : t + 1])
        assert np.array_equal(logits, full[:, t]), t
    assert cache.len == 64
    with pytest.raises(ValueError, match="n_ctx"):
        model.step(cache, ids[:, :1])


def test_generate_logprobs_and_stream(tiny):
    config, _, model, _ = tiny
    prompt = np.array([5, 6, 7])
    toks, lps = model.generate(prompt, 6, greedy=True, return_logprobs=True)
    streamed = list(model.stream(prompt, 6, greedy=True))
    assert streamed == toks.tolist()
    seq = np.concatenate([prompt, toks])
    logits = model.forward(seq).astype(np.float64)
    for i, (tok, lp) in enumerate(zip(toks, lps)):
        z = logits[len(prompt) - 1 + i]
        assert tok == z.argmax()
        assert lp == pytest.approx(z[tok] - (z.max() + np.log(np.exp(z - z.max()).sum())), abs=1e-9)


def test_crop_at_n_ctx_rebuilds_from_last_tokens(tiny):
    config, _, model, _ = tiny  # n_ctx = 64
    rng = np.random.default_rng(3)
    prompt = rng.integers(0, config.vocab_size, size=60)
    with pytest.warns(UserWarning, match="context_shift=1"):  # the exact crop warns when it starts
        out = model.generate(prompt, 10, greedy=True)
    seq = list(prompt)
    for tok in out:
        window = np.array(seq[-config.n_ctx :])
        assert tok == model.forward(window, logits="last").argmax()
        seq.append(int(tok))
    # A prompt longer than the context is cropped first.
    long = rng.integers(0, config.vocab_size, size=80)
    with pytest.warns(UserWarning):
        assert np.array_equal(model.generate(long, 3, greedy=True), model.generate(long[-64:], 3, greedy=True))


def test_sampling_reproducible_and_seed_dependent(tiny):
    _, _, model, _ = tiny
    prompt = np.array([[1, 2, 3], [4, 5, 6]])
    a = model.generate(prompt, 20, temperature=1.5, seed=7)
    b = model.generate(prompt, 20, temperature=1.5, seed=7)
    c = model.generate(prompt, 20, temperature=1.5, seed=8)
    assert a.shape == (2, 20)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    assert np.array_equal(model.generate(prompt, 5, temperature=0.0), model.generate(prompt, 5, greedy=True))


def test_stop_tokens(tiny):
    _, _, model, _ = tiny
    prompt = np.array([5, 6, 7])
    free = model.generate(prompt, 12, greedy=True)
    stop = int(free[4])
    first = list(free).index(stop)
    out = model.generate(prompt, 12, greedy=True, stop_tokens=[stop])
    assert out.tolist() == free[: first + 1].tolist()


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**31),
    st.one_of(st.none(), st.integers(1, 20)),
    st.one_of(st.none(), st.floats(0.01, 1.0)),
)
def test_top_k_top_p_never_leave_the_allowed_set(seed, top_k, top_p):
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((3, 50)) * 3
    f = filter_logits(z, top_k, top_p)
    for r in range(3):
        allowed = np.isfinite(f[r])
        order = np.argsort(-z[r], kind="stable")
        assert allowed[order[0]]  # the best token always survives
        if top_k is not None:
            assert allowed.sum() <= top_k
            assert not allowed[order[top_k:]].any()
        if top_p is not None:
            p = np.exp(z[r] - z[r].max())
            p /= p.sum()
            kept = np.sort(p[allowed])[::-1]
            # removing the least likely kept token would fall below top_p (minimal set)
            if top_k is None:
                assert kept.sum() >= top_p - 1e-12
                assert kept[:-1].sum() < top_p + 1e-12


def test_sampled_tokens_stay_in_top_k(tiny):
    config, _, model, _ = tiny
    prompt = np.array([1, 2, 3, 4])
    for seed in range(5):
        out = model.generate(prompt, 8, top_k=3, temperature=2.0, seed=seed)
        seq = np.concatenate([prompt, out])
        logits = model.forward(seq)
        for i, tok in enumerate(out):
            z = logits[len(prompt) - 1 + i]
            assert tok in np.argsort(-z)[:3]


def test_chunked_loss_equals_full_logits_loss(tiny):
    config, _, m32, m64 = tiny
    rng = np.random.default_rng(4)
    ids = rng.integers(0, config.vocab_size, size=(2, 40))
    for model, tol in ((m64, 1e-12), (m32, 1e-5)):
        z = model.forward(ids).astype(np.float64)[:, :-1]
        lse = z.max(-1) + np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1))
        tgt = ids[:, 1:]
        want = np.take_along_axis(z, tgt[..., None], -1)[..., 0] - lse
        for chunk in (1, 7, 256):
            got = model.token_logprobs(ids, chunk=chunk)
            np.testing.assert_allclose(got, want, rtol=0, atol=tol)
        assert model.loss(ids) == pytest.approx(-want.mean(), abs=tol)
        assert model.perplexity(ids) == pytest.approx(np.exp(-want.mean()), rel=1e-6)
    explicit = m64.token_logprobs(ids, targets=np.roll(ids, -1, axis=1))
    assert explicit.shape == ids.shape


@pytest.mark.parametrize(
    "kwargs,exc,words",
    [
        (dict(max_new_tokens=-1), ValueError, "max_new_tokens"),
        (dict(max_new_tokens=2, temperature=-0.5), ValueError, "temperature"),
        (dict(max_new_tokens=2, top_p=0.0), ValueError, "top_p"),
        (dict(max_new_tokens=2, top_p=1.5), ValueError, "top_p"),
        (dict(max_new_tokens=2, top_k=0), ValueError, "top_k"),
        (dict(max_new_tokens=2.5), TypeError, "max_new_tokens"),
        (dict(max_new_tokens=2, stop_tokens=[1000]), ValueError, "stop_tokens"),
    ],
)
def test_bad_generate_arguments(tiny, kwargs, exc, words):
    _, _, model, _ = tiny
    with pytest.raises(exc, match=words):
        model.generate([1, 2], **kwargs)


def test_empty_prompt_is_an_error(tiny):
    _, _, model, _ = tiny
    with pytest.raises(ValueError, match="at least one token"):
        model.generate(np.array([], dtype=np.int64), 3)
    assert model.generate([1, 2], 0).shape == (0,)
