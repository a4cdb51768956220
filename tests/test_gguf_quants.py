"""The Q8_0 / Q4_0 reference quantizers against the ``gguf`` package (which follows llama.cpp's
``quantize_row_q*_0_ref`` bit for bit), their edge cases, and which tensors are quantized."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import quants as ref

import gptcore
from gptcore import round_weights
from gptcore.gguf import dequantize, quantize
from gptcore.gguf.format import Q4_0_BLOCK, Q8_0_BLOCK
from gptcore.gguf.policy import storage_type

FORMATS = [("q8_0", T.Q8_0), ("q4_0", T.Q4_0)]


def _ref_quantize(x, t):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the gguf package's divisions by zero
        return ref.quantize(np.asarray(x, np.float32), t)


def _check_same_as_reference(x, fmt, t):
    mine = quantize(x, fmt)
    theirs = _ref_quantize(x, t)
    assert mine.tobytes() == theirs.tobytes(), "blocks differ from the gguf package's"
    assert np.array_equal(dequantize(mine, fmt), ref.dequantize(theirs, t))
    return mine


def _ties_q8(rng, n):
    """Blocks whose scale is exactly 1 (max |x| = 127) and whose values are halves: every
    value / d is a tie for round-half-away-from-zero."""
    x = rng.integers(-253, 254, size=(n, 32)).astype(np.float32) / 2
    x[np.arange(n), rng.integers(0, 32, n)] = rng.choice([-127.0, 127.0], n)
    return x * np.float32(2.0) ** rng.integers(-20, 16, size=(n, 1)).astype(np.float32)


def _ties_q4(rng, n):
    """Blocks with scale exactly 1 (largest magnitude -8) or -1 (+8): x / d + 8.5 is an exact
    half-integer for every value, and the largest magnitude often appears with both signs."""
    x = rng.integers(-16, 17, size=(n, 32)).astype(np.float32) / 2
    x[np.arange(n), rng.integers(0, 32, n)] = rng.choice([-8.0, 8.0], n)
    return x


@pytest.mark.parametrize("fmt, t", FORMATS)
@pytest.mark.parametrize("scale", [1e-6, 1e-3, 0.02, 1.0, 37.0, 500.0])
def test_random_weights_give_the_reference_blocks(fmt, t, scale):
    rng = np.random.default_rng(int(scale * 1e6) % 2**32)
    x = (rng.standard_normal((48, 256)) * scale).astype(np.float32)
    x[3, 64:96] *= 100  # one block far larger than the rest
    _check_same_as_reference(x, fmt, t)
    heavy = (rng.standard_t(2, size=(16, 128)) * scale).astype(np.float32)  # outliers in most blocks
    _check_same_as_reference(heavy, fmt, t)


@pytest.mark.parametrize("fmt, t", FORMATS)
def test_edge_cases_give_the_reference_blocks(fmt, t):
    rng = np.random.default_rng(7)
    blocks = [
        np.zeros(32, np.float32),                                    # all zero (+0.0)
        np.full(32, 3.0, np.float32), np.full(32, -3.0, np.float32),  # constant
        np.eye(1, 32, 5, dtype=np.float32)[0] * -2.5,                 # one nonzero value
        np.where(np.arange(32) % 2, 1.0, -1.0).astype(np.float32),   # the largest magnitude with both signs
        np.linspace(-1, 1, 32, dtype=np.float32),
        np.float32(2.0) ** rng.integers(-24, 17, 32).astype(np.float32) * rng.choice([-1, 1], 32).astype(np.float32),
        np.full(32, 1e-30, np.float32),  # scale rounds to zero in float16
        np.full(32, 6e-6, np.float32),   # scale a float16 subnormal
        np.array([65504.0 * 127 / (8 if fmt == "q4_0" else 1)] + [1.0] * 31, np.float32) * (8 / 127 if fmt == "q4_0" else 1),
    ]
    x = np.stack(blocks)
    _check_same_as_reference(x, fmt, t)
    ties = _ties_q8(rng, 256) if fmt == "q8_0" else _ties_q4(rng, 256)
    _check_same_as_reference(ties, fmt, t)


def test_ties_round_away_from_zero_in_q8_0():
    x = np.zeros(32, np.float32)
    x[:6] = [127.0, 2.5, -2.5, 0.5, -0.5, 1.5]
    b = quantize(x, "q8_0")[0]
    assert float(b["d"]) == 1.0
    assert b["qs"][:6].tolist() == [127, 3, -3, 1, -1, 2]


def test_q4_0_keeps_the_sign_of_the_first_largest_value_and_packs_nibbles():
    x = np.zeros(32, np.float32)
    x[0], x[1], x[16], x[17] = 4.0, -8.0, 8.0, 1.0  # -8 comes first among the magnitude-8 values
    b = quantize(x, "q4_0")[0]
    assert float(b["d"]) == 1.0  # d = -8 / -8
    q = np.concatenate([b["qs"] & 15, b["qs"] >> 4])
    assert q[[0, 1, 16, 17]].tolist() == [12, 0, 15, 9]  # trunc(x / d + 8.5), at most 15
    assert q[2] == 8
    assert dequantize(b[None], "q4_0")[[0, 1, 16, 17]].tolist() == [4.0, -8.0, 7.0, 1.0]


def test_defined_where_the_reference_leaves_it_to_the_machine():
    # an all-zero q4_0 block: ggml's search starts at +0.0, so d = +0.0 / -8 = -0.0 even when
    # the first value is -0.0 (the gguf package takes the first value: +0.0 there)
    for z in (0.0, -0.0):
        b = quantize(np.full(32, z, np.float32), "q4_0")[0]
        assert b["d"].view(np.uint16) == 0x8000 and b["qs"].tolist() == [0x88] * 16
    # 1 / d overflows float32: C on x86-64 stores 0 for each value; so do we, everywhere
    tiny = np.full((2, 32), 1e-38, np.float32)
    tiny[1] *= -1
    for fmt in ("q8_0", "q4_0"):
        b = quantize(tiny, fmt)
        assert (b["d"] == 0).all()
        assert (b["qs"] == 0).all()
        assert (dequantize(b, fmt) == 0).all()


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
def test_dequantize_is_the_exact_product(fmt):
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((8, 96)) * 3).astype(np.float32)
    b = quantize(x, fmt)
    d = b["d"].astype(np.float64)[..., None]
    if fmt == "q8_0":
        q = b["qs"].astype(np.float64)
    else:
        q = np.concatenate([b["qs"] & 15, b["qs"] >> 4], axis=-1).astype(np.float64) - 8
    exact = (d * q).reshape(8, 96)
    got = dequantize(b, fmt)
    assert got.dtype == np.float32 and np.array_equal(got.astype(np.float64), exact)
    # raw bytes, as a file holds them, give the same values
    assert np.array_equal(dequantize(b.view(np.uint8).reshape(8, -1), fmt), got)
    assert np.array_equal(round_weights(x, fmt), got)


def test_shapes_and_input_types():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 64))
    b = quantize(x, "Q8_0")
    assert b.shape == (2, 3, 2) and b.dtype == Q8_0_BLOCK
    assert quantize(x, "q8_0").tobytes() == quantize(x.astype(np.float32), "q8_0").tobytes()  # float64 rounds first
    assert quantize(x[0, 0], "q4_0").dtype == Q4_0_BLOCK
    assert dequantize(b, "q8_0").shape == (2, 3, 64)


@pytest.mark.parametrize("x, err, words", [
    (np.zeros(33, np.float32), ValueError, "K = 33"),
    (np.zeros((4, 48), np.float32), ValueError, "multiple of 32"),
    (np.float32(1), ValueError, "at least one axis"),
    (np.zeros(32, np.int32), TypeError, "float array"),
    (np.array([np.nan] + [0.0] * 31, np.float32), ValueError, "non-finite value (nan at index (0,))"),
    (np.array([0.0] * 33 + [np.inf] * 31, np.float32), ValueError, "non-finite value (inf at index (33,))"),
])
@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
def test_refused_inputs(x, err, words, fmt):
    with pytest.raises(err) as info:
        quantize(x, fmt)
    assert words in str(info.value)


def test_scales_that_overflow_float16_are_refused():
    largest = np.zeros((2, 32), np.float32)
    largest[0, 0] = np.nextafter(np.float32(127 * 65520), 0)  # d rounds to 65504
    largest[1, 0] = np.nextafter(np.float32(8 * 65520), 0)
    _check_same_as_reference(largest[:1], "q8_0", T.Q8_0)
    _check_same_as_reference(largest[1:], "q4_0", T.Q4_0)
    with pytest.raises(ValueError, match="block 0 is too large for q8_0"):
        quantize(np.full(32, 127 * 65520, np.float32), "q8_0")
    with pytest.raises(ValueError, match="block 1 is too large for q4_0"):
        quantize(np.concatenate([np.zeros(32), np.full(32, -8 * 65520.0)]).astype(np.float32), "q4_0")


@pytest.mark.parametrize("bad", ["q8", "Q5_0", "bfloat16", None, 8])
def test_unknown_formats(bad):
    with pytest.raises((TypeError, ValueError), match="'q8_0' or 'q4_0'"):
        quantize(np.zeros(32, np.float32), bad)


# ------------------------------------------------------------------------------------------
# which tensors are quantized
# ------------------------------------------------------------------------------------------

def test_storage_types_follow_llama_cpp():
    for wd, ty in (("float32", "F32"), ("bfloat16", "BF16"), ("float16", "F16"), ("q8_0", "Q8_0"), ("q4_0", "Q4_0")):
        for name, shape in (("token_embd.weight", (640, 64)), ("output.weight", (640, 64)),
                            ("blk.3.attn_qkv.weight", (192, 64)), ("blk.0.ffn_down.weight", (64, 256))):
            assert storage_type(name, shape, wd) == ty, (name, wd)
        for name, shape in (("position_embd.weight", (128, 64)), ("blk.0.attn_norm.weight", (64,)),
                            ("blk.0.attn_qkv.bias", (192,)), ("output_norm.weight", (64,)), ("output_norm.bias", (64,))):
            assert storage_type(name, shape, wd) == "F32", (name, wd)
        # rows (K) not a multiple of 32: block types cannot hold the matrix, it stays float32
        expect = "F32" if wd.startswith("q") else ty
        assert storage_type("blk.0.attn_qkv.weight", (120, 40), wd) == expect
    with pytest.raises(ValueError, match="weight_dtype must be one of"):
        storage_type("output.weight", (4, 32), "int8")


def test_round_weights_of_a_model_quantizes_along_k_and_keeps_the_rest():
    config = gptcore.GPTConfig(vocab_size=50, n_ctx=16, d_model=40, n_heads=4, n_layers=1, d_ff=64, tied=False)
    w = gptcore.init_weights(config, seed=5, dtype="float32")
    for fmt, t in FORMATS:
        r = round_weights(w, fmt)
        assert set(r) == set(w)
        # K = 64: the MLP's down projection, (in, out) = (64, 40), blocks along its first axis
        down = w["h.0.mlp.c_proj.weight"]
        want = ref.dequantize(_ref_quantize(down.T, t), t).T
        assert np.array_equal(r["h.0.mlp.c_proj.weight"], want)
        assert not np.array_equal(r["h.0.mlp.c_proj.weight"], down)
        # K = 40 (d_model): c_attn, c_fc, attn.c_proj, the embedding and the head stay as they are
        for name in ("h.0.attn.c_attn.weight", "h.0.mlp.c_fc.weight", "h.0.attn.c_proj.weight", "wte.weight",
                     "lm_head.weight", "wpe.weight", "h.0.ln_1.weight", "h.0.attn.c_attn.bias"):
            assert np.array_equal(r[name], w[name]) and r[name].dtype == np.float32, name
    config = config.replace(d_model=64, n_heads=4)
    w = gptcore.init_weights(config, seed=6, dtype="float32")
    r = round_weights(w, "q4_0")
    for name in ("h.0.attn.c_attn.weight", "h.0.mlp.c_fc.weight", "h.0.attn.c_proj.weight"):
        assert np.array_equal(r[name], ref.dequantize(_ref_quantize(w[name].T, T.Q4_0), T.Q4_0).T), name
    for name in ("wte.weight", "lm_head.weight"):  # rows of (V, d) are along K already
        assert np.array_equal(r[name], ref.dequantize(_ref_quantize(w[name], T.Q4_0), T.Q4_0)), name
    assert np.array_equal(r["wpe.weight"], w["wpe.weight"])


def test_docstring_examples():
    import doctest

    import gptcore.gguf.quants as module

    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted >= 3, result
