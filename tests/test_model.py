"""The decoder against the independent references: transformers' GPT-2 (fixtures, float64)
and the plain numpy forward in reference.py; causality, batching, threads, kernels, errors."""

import numpy as np
import pytest

import gptcore
import reference
from fixture_weights import FIXTURES, case_names, fixture_weights, load_case

SMALL = [n for n in case_names() if n != "gpt2-small-seed124"]


@pytest.fixture(autouse=True)
def _restore():
    yield
    gptcore.set_kernel(None)
    gptcore.set_num_threads(2)


def _compare(name, dtype, tol):
    config, w = fixture_weights(name)
    _, arr = load_case(name)
    model = gptcore.Model(w, config, dtype=dtype)
    logits = model.forward(arr["ids"])
    assert logits.dtype == np.dtype(dtype)
    assert logits.shape == arr["ids"].shape + (config.vocab_size,)
    if "logits" in arr:
        ref = arr["logits"]
        got = logits
    else:
        ref = arr["logits_cols"]
        got = logits[..., arr["cols"]]
    scale = np.abs(ref).max()
    assert np.abs(got - ref).max() <= tol * scale
    # logsumexp and argmax of the full logits
    z = logits.astype(np.float64)
    m = z.max(-1)
    lse = m + np.log(np.exp(z - m[..., None]).sum(-1))
    np.testing.assert_allclose(lse, arr["logsumexp"], rtol=0, atol=tol * 10 * scale)
    if dtype == "float64":
        assert np.array_equal(z.argmax(-1), arr["argmax"])


@pytest.mark.parametrize("name", SMALL)
@pytest.mark.parametrize("dtype,tol", [("float64", 1e-9), ("float32", 1e-4)])
def test_fixture_logits(name, dtype, tol):
    _compare(name, dtype, tol)


@pytest.mark.parametrize("dtype,tol", [("float64", 1e-9), ("float32", 1e-4)])
def test_fixture_gpt2_small_size(dtype, tol):
    _compare("gpt2-small-seed124", dtype, tol)


def test_load_hf_folder_gives_same_logits():
    model = gptcore.load(FIXTURES / "tiny-a-hf", dtype="float32")
    _, arr = load_case("tiny-a")
    expected = np.load(FIXTURES / "tiny-a-hf" / "expected_logits_f32_model.npy")
    got = model.forward(arr["ids"])
    assert np.abs(got - expected).max() <= 1e-4 * np.abs(expected).max()
    m64 = gptcore.load(FIXTURES / "tiny-a-hf", dtype="float64")
    assert np.abs(m64.forward(arr["ids"]) - arr["logits"]).max() <= 1e-4 * np.abs(arr["logits"]).max()


def _lesson_like(seed=0):
    cfg = gptcore.GPTConfig.preset("lesson14")
    return cfg, gptcore.init_weights(cfg, seed=seed, scheme="lesson")


@pytest.mark.parametrize("branch_scale", [1.0, 1 / np.sqrt(8)])
def test_lesson_style_model_matches_numpy_reference(branch_scale):
    cfg, w = _lesson_like(3)
    ids = np.array([6, 12, 6, 20, 12, 4, 8, 6])
    model = gptcore.Model(w, cfg, dtype="float64", branch_scale=branch_scale)
    logits, hidden = model.forward(ids, return_hidden=True)
    ref_logits, ref_hidden = reference.forward(ids, w, cfg, branch_scale=branch_scale, return_hidden=True)
    np.testing.assert_allclose(logits, ref_logits, rtol=1e-12, atol=1e-12 * np.abs(ref_logits).max())
    np.testing.assert_allclose(hidden, ref_hidden, rtol=1e-12, atol=1e-12 * np.abs(ref_hidden).max())
    assert hidden.shape == (cfg.n_layers + 1, 8, cfg.d_model)


def test_causal_false_matches_reference_and_differs():
    cfg, w = _lesson_like(4)
    ids = np.array([1, 2, 3, 4, 5, 6, 7, 8])
    model = gptcore.Model(w, cfg, dtype="float64")
    open_ = model.forward(ids, causal=False)
    np.testing.assert_allclose(open_, reference.forward(ids, w, cfg, causal=False), rtol=1e-12, atol=1e-12)
    assert not np.allclose(open_[0], model.forward(ids)[0])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_causality_bit_for_bit(dtype):
    config, w = fixture_weights("tiny-b")
    model = gptcore.Model(w, config, dtype=dtype)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, config.vocab_size, size=64)
    full = model.forward(ids)
    for t in (1, 5, 31, 63):
        assert np.array_equal(model.forward(ids[:t]), full[:t])
        changed = ids.copy()
        changed[t] = (changed[t] + 1) % config.vocab_size
        other = model.forward(changed)
        assert np.array_equal(other[:t], full[:t])
        assert not np.array_equal(other[t], full[t])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_batch_equals_rows_threads_and_kernels(dtype):
    config, w = fixture_weights("tiny-a")
    model = gptcore.Model(w, config, dtype=dtype)
    rng = np.random.default_rng(1)
    ids = rng.integers(0, config.vocab_size, size=(3, 32))
    gptcore.set_num_threads(2)
    batch = model.forward(ids)
    for r in range(3):
        assert np.array_equal(model.forward(ids[r]), batch[r])
    gptcore.set_num_threads(1)
    assert np.array_equal(model.forward(ids), batch)
    for k in gptcore.available_kernels():
        gptcore.set_kernel(k)
        assert np.array_equal(model.forward(ids), batch)


def test_logits_last_and_forward_function():
    config, w = fixture_weights("tiny-c")
    model = gptcore.Model(w, config)
    ids = np.array([[1, 2, 3], [4, 5, 6]])
    full = model.forward(ids)
    assert np.array_equal(model.forward(ids, logits="last"), full[:, -1])
    assert np.array_equal(model.forward(ids[0], logits="last"), full[0, -1])
    assert np.array_equal(gptcore.forward(ids, w, config), full)
    assert np.array_equal(gptcore.forward(ids, model), full)
    # Weights with the "transformer." prefix and inferred config.
    prefixed = {"transformer." + k: v for k, v in w.items()}
    m2 = gptcore.Model(prefixed, n_heads=config.n_heads)
    assert m2.config == config
    assert np.array_equal(m2.forward(ids), full)


def test_sinusoidal_untied_no_bias_model_against_reference():
    cfg = gptcore.GPTConfig(vocab_size=41, n_ctx=16, d_model=24, n_heads=3, n_layers=2, pos="sinusoidal",
                            tied=False, bias=False, ln_affine=True)
    w = gptcore.init_weights(cfg, seed=5, scheme="xavier")
    rng = np.random.default_rng(2)
    for k in w:
        if k.endswith("ln_1.bias") or k.endswith("ln_2.bias") or k == "ln_f.bias":
            w[k] = rng.standard_normal(w[k].shape) * 0.1
    ids = rng.integers(0, 41, size=(2, 16))
    got = gptcore.Model(w, cfg, dtype="float64").forward(ids)
    ref = reference.forward(ids, w, cfg)
    np.testing.assert_allclose(got, ref, rtol=1e-11, atol=1e-11 * np.abs(ref).max())
    # Sinusoidal positions go beyond n_ctx (no table to run out of).
    long_ids = rng.integers(0, 41, size=40)
    np.testing.assert_allclose(gptcore.Model(w, cfg, dtype="float64").forward(long_ids), reference.forward(long_ids, w, cfg), rtol=1e-10, atol=1e-10)


def test_softmax():
    x = np.array([[1.0, 2.0, 3.0], [1000.0, 1000.0, -np.inf]])
    p = gptcore.softmax(x)
    np.testing.assert_allclose(p.sum(-1), 1.0)
    np.testing.assert_allclose(p[1], [0.5, 0.5, 0.0])
    np.testing.assert_allclose(gptcore.softmax(x[0], axis=0), np.exp(x[0]) / np.exp(x[0]).sum())


@pytest.fixture(scope="module")
def model():
    config, w = fixture_weights("tiny-a")
    return gptcore.Model(w, config)


class TestBadInput:
    @pytest.mark.parametrize(
        "ids,exc,words",
        [
            (np.array([1, 61]), ValueError, "out of range"),
            (np.array([-1, 2]), ValueError, "out of range"),
            (np.array([1.0, 2.0]), TypeError, "integer"),
            (np.array([True, False]), TypeError, "integer"),
            (np.zeros((1, 2, 3), dtype=np.int64), ValueError, "shape (T,) or (B, T)"),
            (np.zeros((0,), dtype=np.int64), ValueError, "at least one token"),
            (np.zeros(33, dtype=np.int64), ValueError, "n_ctx = 32"),
            ("abc", TypeError, "integer"),
        ],
    )
    def test_ids(self, model, ids, exc, words):
        with pytest.raises(exc) as info:
            model.forward(ids)
        assert words in str(info.value)

    def test_options(self, model):
        with pytest.raises(ValueError, match="logits"):
            model.forward([1, 2], logits="first")
        with pytest.raises(TypeError, match="causal"):
            model.forward([1, 2], causal=1)

    def test_weights(self):
        config, w = fixture_weights("tiny-a")
        bad = dict(w)
        del bad["h.1.mlp.c_fc.bias"]
        with pytest.raises(ValueError, match="h.1.mlp.c_fc.bias"):
            gptcore.Model(bad, config)
        bad = dict(w)
        bad["h.0.attn.c_attn.weight"] = np.zeros((32, 95))
        with pytest.raises(ValueError, match=r"\(32, 96\)"):
            gptcore.Model(bad, config)
        with pytest.raises(TypeError):
            gptcore.Model([1, 2, 3], config)
        with pytest.raises(ValueError, match="dtype"):
            gptcore.Model(w, config, dtype="float16")
        with pytest.raises(ValueError, match="branch_scale"):
            gptcore.Model(w, config, branch_scale=float("nan"))

    def test_inputs_not_modified(self, model):
        ids = np.array([[3, 4, 5]], dtype=np.int32)
        ids.setflags(write=False)
        model.forward(ids)
        assert ids.tolist() == [[3, 4, 5]]
        config, w = fixture_weights("tiny-a")
        copies = {k: v.copy() for k, v in w.items()}
        gptcore.Model(w, config, branch_scale=0.5).forward([1, 2, 3])
        for k in w:
            assert np.array_equal(w[k], copies[k])
