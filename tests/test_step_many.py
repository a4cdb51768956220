"""Model.step_many, the ragged step under continuous batching: every sequence's logits equal,
bit for bit, its run alone (prefill then decode with its own cache), however the step's other
rows are composed: decode rows and prompt chunks of any lengths at any positions, on every
kernel and thread count, for GPT-2 and a Llama-family fixture. Bad input names the argument."""

from pathlib import Path

import numpy as np
import pytest

import gptcore

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module", params=["tiny-bpe", "smollm2-tiny"])
def model(request):
    return gptcore.load(FIXTURES / request.param)


def alone(model, ids):
    """Every position's logits of ``ids`` run alone: prefill of the first token, then one
    decode step per token, each on the sequence's own cache."""
    cache = model.new_cache(1)
    rows = [model.step(cache, ids[None, :1])[0]]
    for t in range(1, ids.size):
        rows.append(model.step(cache, ids[None, t:t + 1])[0])
    return np.stack(rows)


def compose(model, rng, n_seqs=6, max_len=110):
    """Random sequences fed to step_many in random pieces and random company; each piece's
    logits against the sequence alone."""
    v = model.config.vocab_size
    seqs = [rng.integers(0, v, size=int(rng.integers(1, max_len + 1))) for _ in range(n_seqs)]
    want = [alone(model, s) for s in seqs]
    caches = [model.new_cache(1) for _ in seqs]
    done = [0] * n_seqs
    while any(d < s.size for d, s in zip(done, seqs)):
        plan = []
        for i in rng.permutation(n_seqs):
            left = seqs[i].size - done[i]
            if left == 0 or rng.random() < 0.25:
                continue
            n = 1 if rng.random() < 0.5 else int(rng.integers(1, left + 1))
            plan.append((int(i), n, "all" if rng.random() < 0.5 else "last"))
        if not plan:
            continue
        out = model.step_many([caches[i] for i, _, _ in plan], [seqs[i][done[i]:done[i] + n] for i, n, _ in plan],
                              logits=[m for _, _, m in plan])
        for (i, n, mode), got in zip(plan, out):
            exp = want[i][done[i]:done[i] + n] if mode == "all" else want[i][done[i] + n - 1]
            assert got.shape == exp.shape
            assert np.array_equal(got.view(np.uint32), exp.view(np.uint32)), (i, done[i], n, mode)
            done[i] += n
            assert caches[i].len == done[i]


def test_ragged_steps_equal_each_sequence_alone(model):
    for k, kernel in enumerate(gptcore.available_kernels()):
        gptcore.set_kernel(kernel)
        for threads in (1, 2, 3):
            gptcore.set_num_threads(threads)
            compose(model, np.random.default_rng(10 * k + threads))


def test_chunked_prefill_equals_whole_prefill(model):
    rng = np.random.default_rng(5)
    ids = rng.integers(0, model.config.vocab_size, size=120)
    whole = model.new_cache(1)
    full = model._native.step(whole, ids[None, :119], "all")
    nxt = model.step(whole, ids[None, 119:])
    for chunk in (1, 13, 96, 97):
        cache = model.new_cache(1)
        for at in range(0, 119, chunk):
            piece = ids[at:min(at + chunk, 119)]
            got = model.step_many([cache], [piece], logits="all")[0]
            assert np.array_equal(got, full[at:at + piece.size])
        assert np.array_equal(model.step_many([cache], [ids[119:]])[0], nxt[0])


def test_bad_input_names_the_argument_and_leaves_the_caches(model):
    a, b = model.new_cache(1), model.new_cache(1)
    model.step_many([a, b], [np.array([1, 2]), np.array([3])])
    v, n_ctx = model.config.vocab_size, model.config.n_ctx
    cases = [
        (([a, b], [np.array([1]), np.array([v])]), ValueError, r"ids\[1\]: token id"),
        (([a, b], [np.array([1]), np.array([], dtype=np.int64)]), ValueError, r"ids\[1\] is empty"),
        (([a, b], [np.array([1]), np.array([[1]])]), ValueError, r"ids\[1\] must be a 1-D"),
        (([a, b], [np.array([1.0]), np.array([1])]), TypeError, r"ids\[0\] must be an integer"),
        (([a, b], [np.array([1])]), ValueError, "one per sequence"),
        (([a, a], [np.array([1]), np.array([1])]), ValueError, r"caches\[1\] is the same cache as caches\[0\]"),
        (([a, model.new_cache(2)], [np.array([1]), np.array([1])]), ValueError, r"caches\[1\] holds 2"),
        (([a, "x"], [np.array([1]), np.array([1])]), TypeError, r"caches\[1\] must come from"),
        (([a, b], [np.array([1]), np.ones(n_ctx, dtype=np.int64)]), ValueError,
         rf"ids\[1\]: sequence length {n_ctx + 1} exceeds"),
    ]
    for args, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            model.step_many(*args)
        assert (a.len, b.len) == (2, 1)
    with pytest.raises(ValueError, match=r"logits\[1\] must be"):
        model.step_many([a, b], [np.array([1]), np.array([1])], logits=["all", "first"])
    other = gptcore.load(FIXTURES / "tiny-bpe") if model.config.family != "gpt2" else gptcore.load(
        FIXTURES / "smollm2-tiny")
    with pytest.raises(ValueError, match=r"caches\[0\] was made by another model"):
        model.step_many([other.new_cache(1)], [np.array([1])])
    assert model.step_many([], []) == []
