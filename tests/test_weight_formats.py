"""16-bit weights (bfloat16 / float16 storage, float32 arithmetic).

The contract: a model with 16-bit weights computes, bit for bit, what the float32 model whose
weights were first rounded to that format computes (every kernel, every thread count; forward,
cached decode, token_logprobs); a half-size PackedMatrix gives the reference loop's bits on the
widened values. Rounding is checked against independent references (numpy's float16 cast, and
an exact float64 nearest-value search for bfloat16).
"""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gptcore
from fixture_weights import FIXTURES, case_names, fixture_weights, load_case

KERNELS = gptcore.available_kernels()
FORMATS = ["bfloat16", "float16"]
SMALL = [n for n in case_names() if n != "gpt2-small-seed124"]


@pytest.fixture(autouse=True)
def _restore():
    yield
    gptcore.set_kernel(None)
    gptcore.set_num_threads(2)


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint32 if a.dtype == np.float32 else np.uint64)


# ---------------------------------------------------------------------------------- rounding

@np.errstate(all="ignore")  # NaN patterns and the neighbour above the largest finite value
def _bf16_reference(x):
    """bfloat16 rounding from its definition: the two neighbours by truncation, the nearer in
    exact float64 arithmetic, ties to the even pattern; NaN stays NaN."""
    x = np.asarray(x, np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    lo = (u >> 16).astype(np.uint64)
    hi = lo + 1
    lo_v = (lo << 16).astype(np.uint32).view(np.float32).astype(np.float64)
    # hi's pattern wraps for the largest negative NaN patterns only; those are NaN inputs
    hi_v = ((hi << 16) & 0xFFFFFFFF).astype(np.uint32).view(np.float32).astype(np.float64)
    xv = x.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        d_lo, d_hi = np.abs(xv - lo_v), np.abs(hi_v - xv)
        # hi may be infinity (from the largest finite): the IEEE rule is the midpoint test.
        mid = (lo_v + (lo_v + 2.0 ** (np.floor(np.log2(np.abs(lo_v) + 1e-300)) - 7) * np.sign(lo_v))) / 2
    pick_hi = np.where(np.isinf(hi_v), np.abs(xv) >= np.abs(mid), (d_hi < d_lo) | ((d_hi == d_lo) & (lo % 2 == 1)))
    out = np.where(pick_hi, hi, lo).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), out)


def _special_values():
    f = np.float32
    vals = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, 65504.0, 65519.996, 65520.0, -65520.0, 1e6,
            np.finfo(f).max, -np.finfo(f).max, np.finfo(f).tiny, 2.0**-24, 2.0**-25, 3 * 2.0**-26,
            2.0**-25 + 2.0**-40, 2.0**-14, 2.0**-14 - 2.0**-25, 1 + 2.0**-8, 1 + 3 * 2.0**-8,
            1 + 2.0**-11, 1 + 3 * 2.0**-11, 1e-40, -1e-45]
    return np.array(vals, dtype=f)


def test_float16_rounding_matches_numpy_cast():
    rng = np.random.default_rng(0)
    x = np.concatenate([
        _special_values(),
        (rng.standard_normal(20000) * 2.0 ** rng.integers(-30, 20, 20000)).astype(np.float32),
        # exact ties between neighbouring float16 values, normal and subnormal
        ((np.arange(0, 0x7BFF, 7, dtype=np.uint16).view(np.float16).astype(np.float64)
          + np.arange(1, 0x7C00, 7, dtype=np.uint16).view(np.float16).astype(np.float64)) / 2).astype(np.float32),
    ])
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).view(np.uint16)
    got = gptcore.to_half_bits(x, "float16")
    assert got.dtype == np.uint16 and got.shape == x.shape
    assert np.array_equal(got, want)
    assert gptcore.to_half_bits(np.float32(65520.0), "float16") == 0x7C00  # overflow to inf
    assert gptcore.to_half_bits(np.float32(65519.99), "float16") == 0x7BFF


def test_bfloat16_rounding_matches_definition():
    rng = np.random.default_rng(1)
    x = np.concatenate([
        _special_values(),
        rng.standard_normal(20000).astype(np.float32) * np.float32(2.0) ** rng.integers(-140, 120, 20000).astype(np.float32),
        # ties: a bfloat16 value plus exactly half its last place
        ((rng.integers(0, 0x7F7F, 5000).astype(np.uint32) << 16) | 0x8000).view(np.float32),
    ]).astype(np.float32)
    x = x[np.isfinite(x) | np.isinf(x)]
    got = gptcore.to_half_bits(x, "bfloat16")
    want = _bf16_reference(x)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("fmt", FORMATS)
def test_nan_stays_nan_and_widening_is_exact(fmt):
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF], np.uint32).view(np.float32)
    assert np.isnan(gptcore.round_weights(nans, fmt)).all()
    signs = np.signbit(gptcore.round_weights(nans, fmt))
    assert list(signs) == [False, True, False, False]
    every = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    wide = gptcore.from_half_bits(every, fmt)
    if fmt == "float16":
        want = every.view(np.float16).astype(np.float32)
    else:
        want = (every.astype(np.uint32) << 16).view(np.float32)
    finite = ~np.isnan(want)
    assert np.array_equal(wide[finite], want[finite])
    assert np.isnan(wide[~finite]).all()
    # widening then rounding gives every non-NaN pattern back
    assert np.array_equal(gptcore.to_half_bits(wide[finite], fmt), every[finite])


def test_round_weights_mapping_keeps_small_tensors():
    config, w = fixture_weights("tiny-a")
    r = gptcore.round_weights(w, "bfloat16")
    assert r["h.0.ln_1.weight"].dtype == np.float32
    assert np.array_equal(r["h.0.ln_1.weight"], w["h.0.ln_1.weight"].astype(np.float32))
    assert np.array_equal(r["h.0.attn.c_attn.bias"], w["h.0.attn.c_attn.bias"].astype(np.float32))
    assert np.array_equal(r["wte.weight"], gptcore.round_weights(w["wte.weight"], "bfloat16"))
    assert not np.array_equal(r["wte.weight"], w["wte.weight"].astype(np.float32))


def test_rounding_bad_input():
    with pytest.raises(ValueError, match="bfloat16"):
        gptcore.round_weights(np.ones(3, np.float32), "float8")
    with pytest.raises(TypeError, match="uint16"):
        gptcore.from_half_bits(np.ones(3, np.float32), "float16")
    with pytest.raises(TypeError, match="float"):
        gptcore.to_half_bits(np.array(["a"]), "float16")


# ---------------------------------------------------------------------------------- matmul

@st.composite
def half_problems(draw):
    m, k, n = draw(st.integers(0, 30)), draw(st.integers(0, 420)), draw(st.integers(0, 140))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = (rng.standard_normal((k, n)) * 2.0 ** rng.integers(-20, 4, (k, n))).astype(np.float32)
    if draw(st.booleans()):
        b = np.asfortranarray(b)
    return a, b


@settings(max_examples=80, deadline=None)
@given(half_problems(), st.sampled_from(FORMATS), st.sampled_from(KERNELS), st.sampled_from([1, 2, 3]))
def test_16bit_packed_matmul_equals_reference_on_widened_values(ab, fmt, kern, threads):
    a, b = ab
    b0 = b.copy()
    gptcore.set_num_threads(threads)
    p = gptcore.PackedMatrix(b, dtype=fmt)
    assert p.dtype == fmt and p.shape == b.shape
    c = gptcore.matmul(a, p, kernel=kern)
    want = gptcore.matmul_reference(a, gptcore.round_weights(b, fmt))
    assert c.dtype == np.float32 and c.shape == (a.shape[0], b.shape[1])
    assert np.array_equal(_bits(c), _bits(want))
    np.testing.assert_array_equal(b, b0)
    # packing the bit patterns gives the same matrix
    q = gptcore.PackedMatrix(gptcore.to_half_bits(b, fmt), dtype=fmt)
    assert np.array_equal(_bits(gptcore.matmul(a, q, kernel=kern)), _bits(want))


def test_16bit_packed_matrix_is_half_the_bytes_and_checks_input():
    b = np.ones((256, 512), np.float32)
    full, half = gptcore.PackedMatrix(b), gptcore.PackedMatrix(b, dtype="bfloat16")
    assert half.nbytes * 2 == full.nbytes
    assert "bfloat16" in repr(half)
    with pytest.raises(ValueError, match="bfloat16"):
        gptcore.PackedMatrix(b, dtype="int8")
    with pytest.raises(TypeError, match="uint16"):
        gptcore.PackedMatrix(b.astype(np.float64), dtype="float16")
    with pytest.raises(TypeError, match="float32"):
        gptcore.matmul(np.ones((2, 256)), half)
    with pytest.raises(ValueError, match="aligned"):
        gptcore.matmul(np.ones((2, 255), np.float32), half)


# ---------------------------------------------------------------------------------- models

def _ids(config, b, t, seed):
    return np.random.default_rng(seed).integers(0, config.vocab_size, (b, t))


def _assert_same(m_half, m_ref, ids):
    gptcore.set_num_threads(2)
    want = m_ref.forward(ids)
    for k in KERNELS:
        for threads in (1, 2, 3):
            gptcore.set_kernel(k)
            gptcore.set_num_threads(threads)
            assert np.array_equal(_bits(m_half.forward(ids)), _bits(want)), (k, threads)
    gptcore.set_kernel(None)
    # cached decode: prefill 2 positions, then one at a time
    b, t = ids.shape
    cache = m_half.new_cache(b)
    m_half.step(cache, ids[:, :2])
    for p in range(2, t):
        step = m_half.step(cache, ids[:, p:p + 1])
        assert np.array_equal(_bits(step), _bits(want[:, p])), p
    assert np.array_equal(m_half.token_logprobs(ids, chunk=3), m_ref.token_logprobs(ids, chunk=3))


@settings(max_examples=12, deadline=None)
@given(st.sampled_from(FORMATS), st.integers(1, 3), st.sampled_from([32, 64, 96]), st.integers(1, 2),
       st.booleans(), st.booleans(), st.integers(0, 1000))
def test_16bit_model_equals_rounded_float32_model(fmt, layers, d, heads, tied, sinusoidal, seed):
    config = gptcore.GPTConfig(vocab_size=70 + seed % 50, n_ctx=40, d_model=d, n_heads=heads, n_layers=layers,
                               tied=tied, pos="sinusoidal" if sinusoidal else "learned")
    w = gptcore.init_weights(config, seed=seed)
    half = gptcore.Model(w, config, weight_dtype=fmt)
    ref = gptcore.Model(gptcore.round_weights(w, fmt), config)
    assert half.weight_dtype == fmt and ref.weight_dtype is None
    _assert_same(half, ref, _ids(config, 2, 9, seed))


@pytest.mark.parametrize("fmt", FORMATS)
def test_16bit_fixture_model_and_memory(fmt):
    config, w = fixture_weights("tiny-b")
    half = gptcore.Model(w, config, weight_dtype=fmt)
    ref = gptcore.Model(gptcore.round_weights(w, fmt), config)
    full = gptcore.Model(w, config)
    _, arr = load_case("tiny-b")
    _assert_same(half, ref, arr["ids"])
    assert half.nbytes < 0.55 * full.nbytes
    assert fmt in repr(half)
    # branch_scale is applied before rounding, as in the float32 model it is compared with
    hs = gptcore.Model(w, config, weight_dtype=fmt, branch_scale=0.5)
    w2 = {k: (v.astype(np.float32) * np.float32(0.5) if k.endswith("c_proj.weight") else v) for k, v in w.items()}
    rs = gptcore.Model(gptcore.round_weights(w2, fmt), config)
    assert np.array_equal(_bits(hs.forward(arr["ids"])), _bits(rs.forward(arr["ids"])))


def test_weight_dtype_errors():
    config, w = fixture_weights("tiny-a")
    with pytest.raises(ValueError, match="float32"):
        gptcore.Model(w, config, dtype="float64", weight_dtype="bfloat16")
    with pytest.raises(ValueError, match="weight_dtype"):
        gptcore.Model(w, config, weight_dtype="float8")
    with pytest.raises(ValueError, match="float32"):
        gptcore.load(FIXTURES / "tiny-a-hf", dtype="float64", weight_dtype="float16")


# ---------------------------------------------------------------------------------- files

def _header(path):
    with open(path, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        return json.loads(fh.read(n))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("as_file", [True, False])
def test_save_load_round_trip_keeps_every_bit(tmp_path, fmt, as_file):
    config, w = fixture_weights("tiny-c")
    m = gptcore.Model(w, config, weight_dtype=fmt)
    path = tmp_path / ("m.safetensors" if as_file else "m")
    m.save(path)
    st_file = path if as_file else path / "model.safetensors"
    header = _header(st_file)
    code = {"bfloat16": "BF16", "float16": "F16"}[fmt]
    assert header["transformer.h.0.mlp.c_fc.weight"]["dtype"] == code
    assert header["transformer.wte.weight"]["dtype"] == code
    assert header["transformer.h.0.mlp.c_fc.bias"]["dtype"] == "F32"
    assert header["transformer.h.0.ln_1.weight"]["dtype"] == "F32"
    back = gptcore.load(path, weight_dtype=fmt)
    assert back.weight_dtype == fmt
    _, arr = load_case("tiny-c")
    ids = arr["ids"]
    assert np.array_equal(_bits(back.forward(ids)), _bits(m.forward(ids)))
    e1, e2 = m._native.export(), back._native.export()
    assert all(np.array_equal(_bits(e1[k]), _bits(e2[k])) for k in e1)
    # read as float32, the file holds the rounded model exactly
    f32 = gptcore.load(path)
    ref = gptcore.Model(gptcore.round_weights(w, fmt), config)
    assert np.array_equal(_bits(f32.forward(ids)), _bits(ref.forward(ids)))
    # and save_safetensors writes the same tensors
    p2 = tmp_path / "again.safetensors"
    gptcore.save_safetensors(w, config, p2, weight_dtype=fmt)
    assert np.array_equal(_bits(gptcore.load(p2, weight_dtype=fmt).forward(ids)), _bits(m.forward(ids)))


@pytest.mark.parametrize("fmt", FORMATS)
def test_float32_checkpoint_loads_rounded(fmt):
    m = gptcore.load(FIXTURES / "tiny-a-hf", weight_dtype=fmt)
    w, config = gptcore.load_safetensors(FIXTURES / "tiny-a-hf")
    ref = gptcore.Model(gptcore.round_weights(w, fmt), config)
    _, arr = load_case("tiny-a")
    assert np.array_equal(_bits(m.forward(arr["ids"])), _bits(ref.forward(arr["ids"])))


def _write_raw(path, tensors, metadata=None):
    """A safetensors file written by hand: {name: (dtype code, shape, raw bytes, (start, end) or
    None)}; hostile entries may give byte ranges that disagree with the shape."""
    header = {"__metadata__": metadata or {}}
    blobs, off = [], 0
    for name, (code, shape, raw, rng) in tensors.items():
        header[name] = {"dtype": code, "shape": list(shape), "data_offsets": list(rng or (off, off + len(raw)))}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as fh:
        fh.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def _bf16_checkpoint(path, config, w, fmt="bfloat16", code="BF16", hostile=None):
    tensors = {}
    for name, v in w.items():
        small = name.endswith((".bias", "ln_1.weight", "ln_2.weight", "ln_f.weight"))
        if small:
            tensors["transformer." + name] = ("F32", v.shape, np.asarray(v, "<f4").tobytes(), None)
        else:
            tensors["transformer." + name] = (code, v.shape, gptcore.to_half_bits(v, fmt).astype("<u2").tobytes(), None)
    if hostile:
        hostile(tensors)
    _write_raw(path, tensors, {"gptcore_config": json.dumps(config.to_dict())})


@pytest.mark.parametrize("fmt,code", [("bfloat16", "BF16"), ("float16", "F16")])
def test_hand_written_checkpoint_loads_bit_for_bit(tmp_path, fmt, code):
    config, w = fixture_weights("tiny-a")
    p = tmp_path / "x.safetensors"
    _bf16_checkpoint(p, config, w, fmt, code)
    m = gptcore.load(p, weight_dtype=fmt)
    ref = gptcore.Model(gptcore.round_weights(w, fmt), config)
    _, arr = load_case("tiny-a")
    assert np.array_equal(_bits(m.forward(arr["ids"])), _bits(ref.forward(arr["ids"])))
    # the other 16-bit format: widened, then rounded
    other = "float16" if fmt == "bfloat16" else "bfloat16"
    m2 = gptcore.load(p, weight_dtype=other)
    ref2 = gptcore.Model(gptcore.round_weights(gptcore.round_weights(w, fmt), other), config)
    assert np.array_equal(_bits(m2.forward(arr["ids"])), _bits(ref2.forward(arr["ids"])))


def _short_by_two(t):
    code, shape, raw, _ = t["transformer.wte.weight"]
    t["transformer.wte.weight"] = (code, shape, raw[:-2], None)


def _odd_length(t):
    code, shape, raw, _ = t["transformer.wte.weight"]
    t["transformer.wte.weight"] = (code, shape, raw[:-1], None)


def _past_the_end(t):
    code, shape, raw, _ = t["transformer.wte.weight"]
    t["transformer.wte.weight"] = (code, shape, raw, (10**9, 10**9 + len(raw)))


@pytest.mark.parametrize("code", ["BF16", "F16"])
@pytest.mark.parametrize("hostile,words", [(_short_by_two, "bytes"), (_odd_length, "whole number"),
                                           (_past_the_end, "outside")])
def test_hostile_16bit_checkpoint_raises_clear_error(tmp_path, code, hostile, words):
    config, w = fixture_weights("tiny-a")
    p = tmp_path / "bad.safetensors"
    fmt = "bfloat16" if code == "BF16" else "float16"
    _bf16_checkpoint(p, config, w, fmt, code, hostile)
    with pytest.raises(ValueError, match=words) as e:
        gptcore.load(p, weight_dtype="bfloat16")
    assert "wte.weight" in str(e.value)
    with pytest.raises(ValueError):
        gptcore.load(p)


def test_16bit_checkpoint_loads_without_a_float32_copy(tmp_path):
    """Peak resident memory while loading a BF16 checkpoint into a bfloat16 model, measured in
    a child process: the packed 16-bit weights plus a few tensors, well under the float32
    model's size (a float32 copy on the way would alone take that)."""
    config = gptcore.GPTConfig(vocab_size=8192, n_ctx=64, d_model=512, n_heads=8, n_layers=12)
    rng = np.random.default_rng(0)
    tensors, largest = {}, 0
    for name, shape in gptcore.expected_shapes(config).items():
        count = int(np.prod(shape))
        if name.endswith((".bias", "ln_1.weight", "ln_2.weight", "ln_f.weight")):
            tensors["transformer." + name] = ("F32", shape, rng.standard_normal(count).astype("<f4").tobytes(), None)
        else:
            # random bfloat16 patterns of moderate magnitude, written without a float32 array
            bits = (rng.integers(0x3C00, 0x3E00, count, dtype=np.uint16) | (rng.integers(0, 2, count, dtype=np.uint16) << 15))
            tensors["transformer." + name] = ("BF16", shape, bits.astype("<u2").tobytes(), None)
            largest = max(largest, 2 * count)
        del count
    p = tmp_path / "big.safetensors"
    _write_raw(p, tensors, {"gptcore_config": json.dumps(config.to_dict())})
    del tensors
    # the float32 model holds every tensor plus the tied head packed apart from wte
    f32_bytes = 4 * sum(int(np.prod(s)) for s in gptcore.expected_shapes(config).values())
    f32_bytes += 4 * config.vocab_size * config.d_model
    script = textwrap.dedent(f"""
        import numpy as np, gptcore
        def status(key):  # VmRSS: now; VmHWM: the peak of this process image
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith(key + ":"):
                        return int(line.split()[1]) * 1024
        gptcore.set_num_threads(1)
        gptcore.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32))
        base, peak0 = status("VmRSS"), status("VmHWM")
        m = gptcore.load({str(p)!r}, weight_dtype="bfloat16")
        print(base, peak0, status("VmHWM"), m.nbytes)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    base, peak0, peak, nbytes = (int(x) for x in out.stdout.split())
    grew = peak - max(base, peak0)
    print("peak growth", grew, "packed", nbytes, "largest tensor", largest, "float32 model", f32_bytes)
    assert nbytes < 0.52 * f32_bytes
    assert grew <= nbytes + 4 * largest + (24 << 20), (grew, nbytes, largest)
    assert grew < 0.8 * f32_bytes, (grew, f32_bytes)


# ---------------------------------------------------------------------------------- accuracy

def _max_rel(got, ref):
    return float(np.abs(got.astype(np.float64) - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize("name", SMALL)
def test_16bit_accuracy_against_float64_reference(name):
    config, w = fixture_weights(name)
    _, arr = load_case(name)
    prompt = np.asarray(arr["prompt"])
    greedy32 = gptcore.Model(w, config).generate(prompt, 64, greedy=True)
    for fmt, tol in (("bfloat16", 1.5e-2), ("float16", 2e-3)):
        m = gptcore.Model(w, config, weight_dtype=fmt)
        err = _max_rel(m.forward(arr["ids"]), arr["logits"])
        assert err <= tol, (fmt, err)
        assert err > 1e-6  # the rounding is really there
        same = m.generate(prompt, 64, greedy=True) == greedy32
        lead = int(np.argmin(same)) if not same.all() else same.size
        assert lead >= 32, (fmt, lead)


@pytest.mark.parametrize("fmt", FORMATS)
def test_untied_model_round_trip_and_duplicate_head(tmp_path, fmt):
    config = gptcore.GPTConfig(vocab_size=90, n_ctx=24, d_model=32, n_heads=2, n_layers=2, tied=False)
    w = gptcore.init_weights(config, seed=3)
    m = gptcore.Model(w, config, weight_dtype=fmt)
    m.save(tmp_path / "u")
    back = gptcore.load(tmp_path / "u", weight_dtype=fmt)
    ids = _ids(config, 2, 10, 1)
    assert np.array_equal(_bits(back.forward(ids)), _bits(m.forward(ids)))
    assert back.config.tied is False
    # a tied checkpoint that also stores lm_head (equal bytes) loads as tied; a different
    # lm_head under a tied configuration is refused
    tied = gptcore.GPTConfig(vocab_size=90, n_ctx=24, d_model=32, n_heads=2, n_layers=2)
    wt = gptcore.init_weights(tied, seed=4)
    for same, ok in ((True, True), (False, False)):
        def add_head(t, same=same):
            code, shape, raw, _ = t["transformer.wte.weight"]
            t["lm_head.weight"] = (code, shape, raw if same else raw[::-1], None)
        p = tmp_path / f"tied-{same}.safetensors"
        _bf16_checkpoint(p, tied, wt, "bfloat16", "BF16", add_head)
        if ok:
            got = gptcore.load(p, weight_dtype=fmt)
            ref = gptcore.Model(gptcore.round_weights(gptcore.round_weights(wt, "bfloat16"), fmt), tied)
            assert np.array_equal(_bits(got.forward(ids)), _bits(ref.forward(ids)))
        else:
            with pytest.raises(ValueError, match="lm_head"):
                gptcore.load(p, weight_dtype=fmt)


def test_storage_formats_are_one_module_and_nothing_is_named_half():
    """The formats, their conversions and the float32 kinds live in gptcore.weights.formats
    (the top level re-exports the conversions); no module is named after "half"."""
    import importlib
    from pathlib import Path

    from gptcore.weights import formats

    assert gptcore.round_weights is formats.round_weights
    assert gptcore.to_half_bits is formats.to_half_bits and gptcore.from_half_bits is formats.from_half_bits
    assert formats.HALF_DTYPES == tuple(FORMATS) == tuple(formats.FORMATS)[1:]
    assert formats.WEIGHT_DTYPES == formats.HALF_DTYPES + formats.BLOCK_DTYPES == tuple(FORMATS) + ("q8_0", "q4_0")
    assert all(formats.FORMATS[f].bits == 16 for f in FORMATS)
    # the kinds kept float32 are the schema's bias and LayerNorm kinds, and only those
    config = gptcore.GPTConfig(vocab_size=11, n_ctx=8, d_model=8, n_heads=2, n_layers=1)
    kinds = {kind for _, _, kind in gptcore._native.tensor_schema(config)}
    assert formats.FLOAT32_KINDS == {k for k in kinds if k == "bias" or k.startswith("ln_")}
    package = Path(gptcore.__file__).parent
    assert not [p for p in package.rglob("*.py") if "half" in p.stem]
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("gptcore.half")
