"""Quantized weights: ggml's q8_0 and q4_0 blocks, float32 arithmetic.

The promise: a model with q8_0 / q4_0 weights computes, bit for bit, what the float32 model of
its dequantized weights (``round_weights(w, fmt)``) computes, on every kernel and thread count,
in the forward pass, in cached decoding and in ``token_logprobs``; a q8_0 ``PackedMatrix``
gives the reference loop's bits on the dequantized values. The blocks themselves are checked
against an independent reference, the ``gguf`` package's ``gguf.quants.quantize`` (llama.cpp's
reference quantizers), byte for byte; GGUF files are read as blocks and written back the same.
"""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gptcore
from gptcore import _native
from gptcore.gguf import GGUFReader, WriterTensor, write_gguf
from gptcore.gguf.format import BLOCK_DTYPES
from gptcore.gguf.quants import dequantize, quantize

ref = pytest.importorskip("gguf")

FIXTURES = Path(__file__).resolve().parent / "fixtures"
KERNELS = gptcore.available_kernels()
FORMATS = ["q8_0", "q4_0"]
TYPES = {"q8_0": ref.GGMLQuantizationType.Q8_0, "q4_0": ref.GGMLQuantizationType.Q4_0}


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint32 if a.dtype == np.float32 else np.uint64)


@st.composite
def values(draw, max_rows=6, max_k=200):
    """float32 rows of mixed magnitudes, with the cases the quantizers must get right: ties of
    x / d, zeros, all-zero blocks, tiny blocks whose inverse scale overflows, equal largest
    magnitudes of both signs."""
    r, k = draw(st.integers(1, max_rows)), draw(st.integers(1, max_k))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    x = rng.standard_normal((r, k)) * 2.0 ** rng.integers(-30, 8, (r, 1))
    kind = draw(st.sampled_from(["plain", "ties", "zeros", "tiny", "signs"]))
    if kind == "ties":  # x / d halfway between integers: d = 1 for q8_0 when max|x| = 127
        x = rng.integers(-254, 255, (r, k)) / 2.0
        x[:, 0] = 127.0
    elif kind == "zeros":
        x[:, : min(k, 40)] = 0.0
    elif kind == "tiny":
        x = x * 1e-38
    elif kind == "signs":
        x[:, 0], x[:, -1] = 3.0, -3.0
    return x.astype(np.float32)


# ---------------------------------------------------------------------------------- blocks

@settings(max_examples=120, deadline=None)
@given(values(), st.sampled_from(FORMATS))
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the gguf package's on tiny blocks
def test_the_core_quantizes_as_the_reference_byte_for_byte(x, fmt):
    """The Rust quantizer (which packs models and writes GGUF files) gives the gguf package's
    blocks and gptcore's numpy ones; a short last block is the zero-padded block's (its scale
    from the live values). Blocks whose inverse scale overflows float32 (all values below about
    3.7e-37) are left to the machine by ggml: gptcore stores 0 for each integer (see
    ``gptcore.gguf.quants``), the gguf package what numpy's casts give; their scale is 0 and
    their weights are zeros either way; so do all-zero blocks."""
    k = x.shape[1]
    pad = np.concatenate([x, np.zeros((x.shape[0], -k % 32), np.float32)], axis=1)
    want = ref.quants.quantize(pad, TYPES[fmt])
    got = _native._quantize_blocks(x, fmt)
    assert got.tobytes() == quantize(pad, fmt).tobytes()
    blocks = got.view(BLOCK_DTYPES[fmt.upper()])
    overflow = np.abs(pad).reshape(x.shape[0], -1, 32).max(axis=-1) < 3.7e-37 * (127 if fmt == "q8_0" else 8)
    ref_blocks = want.view(BLOCK_DTYPES[fmt.upper()])
    # the scales' values (an all-zero q4_0 block whose first value is -0.0 has d = -0.0 in
    # ggml and gptcore, +0.0 in the gguf package; see gptcore.gguf.quants)
    assert np.array_equal(blocks["d"], ref_blocks["d"])
    assert np.array_equal(blocks["qs"][~overflow], ref_blocks["qs"][~overflow])
    assert (blocks["d"][overflow] == 0).all()
    # the values of a short block: the padded block's values, cropped
    deq = ref.quants.dequantize(want, TYPES[fmt])[:, :k]
    assert np.array_equal(gptcore.round_weights(x, fmt), deq)
    assert np.array_equal(_native._widen_blocks(got, k, fmt), deq)


def test_the_core_quantizer_refuses_what_the_reference_refuses():
    x = np.zeros((2, 40), np.float32)
    x[1, 35] = np.inf
    with pytest.raises(ValueError, match="value at depth 35 of column 1 is inf; q8_0 blocks hold finite values only"):
        _native._quantize_blocks(x, "q8_0")
    with pytest.raises(ValueError, match="too large: its scale .* overflows float16"):
        _native._quantize_blocks(np.full((1, 32), -8 * 65520, np.float32), "q4_0")
    with pytest.raises(ValueError, match="no block format"):
        _native._quantize_blocks(x, "bfloat16")


# ---------------------------------------------------------------------------------- matmul

@st.composite
def block_problems(draw):
    m, k, n = draw(st.integers(1, 30)), draw(st.integers(1, 420)), draw(st.integers(1, 140))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = (rng.standard_normal((k, n)) * 2.0 ** rng.integers(-12, 4, (1, n))).astype(np.float32)
    if draw(st.booleans()):
        b = np.asfortranarray(b)
    return a, b


@settings(max_examples=80, deadline=None)
@given(block_problems(), st.sampled_from(FORMATS), st.sampled_from(KERNELS), st.sampled_from([1, 2, 3]))
def test_block_packed_matmul_equals_reference_on_dequantized_values(ab, fmt, kern, threads):
    """B (K x N) is quantized along K, down each column (K not a multiple of 32 included: a
    short last block)."""
    a, b = ab
    b0 = b.copy()
    gptcore.set_num_threads(threads)
    p = gptcore.PackedMatrix(b, dtype=fmt)
    assert p.dtype == fmt and p.shape == b.shape
    c = gptcore.matmul(a, p, kernel=kern)
    dequantized = np.ascontiguousarray(gptcore.round_weights(b.T, fmt).T)
    want = gptcore.matmul_reference(a, dequantized)
    assert c.dtype == np.float32 and c.shape == (a.shape[0], b.shape[1])
    assert np.array_equal(_bits(c), _bits(want))
    np.testing.assert_array_equal(b, b0)


@pytest.mark.parametrize("fmt", FORMATS)
def test_packed_matrix_from_gguf_blocks(fmt):
    """The blocks of a GGUF matrix (N, K) pack B = its transpose (K, N): as a GGUF reader hands
    them out (a structured array) or as raw bytes, the same matrix as packing the float32
    values."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal((70, 96)).astype(np.float32)  # GGUF's (N, K)
    blocks = quantize(w, fmt)
    a = rng.standard_normal((5, 96)).astype(np.float32)
    want = gptcore.matmul_reference(a, np.ascontiguousarray(dequantize(blocks, fmt).T))
    for b in (blocks, blocks.view(np.uint8).reshape(70, -1), np.ascontiguousarray(w.T)):
        p = gptcore.PackedMatrix(b, dtype=fmt)
        assert p.shape == (96, 70)
        assert np.array_equal(_bits(gptcore.matmul(a, p)), _bits(want))
    with pytest.raises(ValueError, match="no whole number of"):
        gptcore.PackedMatrix(np.zeros((3, 35), np.uint8), dtype=fmt)
    with pytest.raises(TypeError, match=f'with dtype="{fmt}", b must be'):
        gptcore.PackedMatrix(np.zeros((3, 32), np.float64), dtype=fmt)


def test_packed_matrix_bytes():
    b = np.ones((768, 2304), np.float32)
    full = gptcore.PackedMatrix(b)
    q8, q4 = gptcore.PackedMatrix(b, dtype="q8_0"), gptcore.PackedMatrix(b, dtype="q4_0")
    # a weight is a byte (a nibble) and 2/32 bytes of scale
    assert q8.nbytes == 768 * 2304 * 34 // 32 and q4.nbytes == 768 * 2304 * 18 // 32
    assert q8.nbytes <= 0.27 * full.nbytes and q4.nbytes <= 0.15 * full.nbytes
    assert "q4_0" in repr(q4)
    with pytest.raises(TypeError, match="float32"):
        gptcore.matmul(np.ones((2, 768)), q8)


# ---------------------------------------------------------------------------------- models

def _ids(config, b, t, seed):
    return np.random.default_rng(seed).integers(0, config.vocab_size, (b, t))


def _assert_same(m_q, m_ref, ids):
    """m_q's forward pass on every kernel at 1 to 3 threads, its cached decode (on every kernel,
    the thread count varying), each batch row alone and token_logprobs: m_ref's forward bits."""
    before = gptcore.get_num_threads()
    gptcore.set_num_threads(2)
    want = m_ref.forward(ids)
    b, t = ids.shape
    try:
        for k in KERNELS:
            for threads in (1, 2, 3):
                gptcore.set_kernel(k)
                gptcore.set_num_threads(threads)
                assert np.array_equal(_bits(m_q.forward(ids)), _bits(want)), (k, threads)
        for i, k in enumerate(KERNELS):
            gptcore.set_kernel(k)
            gptcore.set_num_threads(1 + i % 3)
            cache = m_q.new_cache(b)
            m_q.step(cache, ids[:, :2])
            for p in range(2, t):
                step = m_q.step(cache, ids[:, p:p + 1])
                assert np.array_equal(_bits(step), _bits(want[:, p])), (k, p)
    finally:
        gptcore.set_kernel(None)
        gptcore.set_num_threads(before)
    for row in range(b):
        assert np.array_equal(_bits(m_q.forward(ids[row])), _bits(want[row])), row
    assert np.array_equal(m_q.token_logprobs(ids, chunk=3), m_ref.token_logprobs(ids, chunk=3))


@settings(max_examples=14, deadline=None)
@given(st.sampled_from(FORMATS), st.integers(1, 2), st.sampled_from([32, 48, 64, 96]), st.integers(1, 2),
       st.sampled_from([None, 40, 64, 100]), st.booleans(), st.integers(0, 1000))
def test_block_model_equals_dequantized_float32_model(fmt, layers, d, heads, d_ff, tied, seed):
    """d_model or d_ff not a multiple of 32: those matrices stay float32 (llama.cpp's rule),
    the others are quantized; the two models agree whatever the mix."""
    config = gptcore.GPTConfig(vocab_size=70 + seed % 50, n_ctx=40, d_model=d, n_heads=heads * (d // 48 or 1),
                               n_layers=layers, d_ff=d_ff, tied=tied)
    w = gptcore.init_weights(config, seed=seed, scheme="gpt2")
    w = {k: (v * np.float32(8) if v.ndim == 2 else v) for k, v in w.items()}  # sharper logits
    q = gptcore.Model(w, config, weight_dtype=fmt)
    r = gptcore.Model(gptcore.round_weights(w, fmt), config)
    assert q.weight_dtype == fmt and r.weight_dtype is None
    _assert_same(q, r, _ids(config, 2, 9, seed))
    # each large tensor is held as the rule says
    for name, held, nbytes in q.weight_storage():
        k = w[name].shape[0] if name.startswith("h.") else config.d_model
        assert held == (fmt if k % 32 == 0 and name != "wpe.weight" else "float32"), (name, held)
        assert nbytes > 0


LLAMA_FOLDERS = ["llama-tiny", "qwen2-tiny", "smollm2-tiny", "mistral-tiny"]


@pytest.mark.parametrize("folder", LLAMA_FOLDERS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_llama_family_block_model_equals_dequantized_float32_model(folder, fmt):
    """The Llama family (RMSNorm, rotary positions, grouped K/V heads, the stacked Q/K/V
    product, SwiGLU): the same promise. smollm2-tiny's width 36 is no multiple of 32, so its
    matrices that reduce over it stay float32 and only the down projection (K = 96) is held in
    blocks: a model of both kinds."""
    w, config = gptcore.load_safetensors(FIXTURES / folder)
    q = gptcore.Model(w, config, weight_dtype=fmt)
    r = gptcore.Model(gptcore.round_weights(w, fmt), config)
    held = {name: f for name, f, _ in q.weight_storage()}
    assert fmt in held.values(), held
    assert all(f == (fmt if (w[name].shape[-1] % 32 == 0) else "float32") for name, f in held.items()
               if name in w and w[name].ndim == 2), held
    _assert_same(q, r, _ids(config, 2, 11, 5))


@pytest.mark.parametrize("fmt, ratio", [("q8_0", 0.29), ("q4_0", 0.16)])
def test_gpt2_small_weight_bytes(fmt, ratio):
    """The bytes a GPT-2-small-size model holds against float32 (packed matrices, the token
    embedding, the tied head's panels and the float32 position table, biases, LayerNorms)."""
    config = gptcore.GPTConfig.preset("gpt2").replace(n_layers=2)
    w = gptcore.init_weights(config, seed=0, scheme="gpt2")
    full = gptcore.Model(w, config).nbytes
    q = gptcore.Model(w, config, weight_dtype=fmt)
    assert q.nbytes <= ratio * full, q.nbytes / full
    assert sum(b for _, _, b in q.weight_storage()) < q.nbytes


def test_block_model_errors():
    config = gptcore.GPTConfig(vocab_size=50, n_ctx=8, d_model=32, n_heads=2, n_layers=1)
    w = gptcore.init_weights(config, seed=1)
    with pytest.raises(ValueError, match="weight_dtype='q8_0' needs dtype='float32'"):
        gptcore.Model(w, config, dtype="float64", weight_dtype="q8_0")
    bad = dict(w)
    bad["h.0.mlp.c_fc.weight"] = bad["h.0.mlp.c_fc.weight"].copy()
    bad["h.0.mlp.c_fc.weight"][3, 7] = np.nan
    with pytest.raises(ValueError, match=r"weights\['h\.0\.mlp\.c_fc\.weight'\] holds nan at index \[3, 7\]; "
                                         "q4_0 blocks hold finite values only"):
        gptcore.Model(bad, config, weight_dtype="q4_0")
    with pytest.raises(ValueError, match="'q8_0' or 'q4_0'"):
        gptcore.Model(w, config, weight_dtype="q5_0")


# ---------------------------------------------------------------------------------- GGUF

@pytest.fixture(scope="module")
def small():
    config = gptcore.GPTConfig(vocab_size=96, n_ctx=24, d_model=64, n_heads=4, n_layers=2, d_ff=128, tied=False)
    w = gptcore.init_weights(config, seed=3, scheme="gpt2")
    return config, {k: (v * np.float32(6) if v.ndim == 2 else v) for k, v in w.items()}


@pytest.mark.parametrize("fmt", FORMATS)
def test_gguf_blocks_are_used_as_stored_and_written_back(tmp_path, small, fmt):
    config, w = small
    ids = _ids(config, 2, 12, 1)
    p = gptcore.Model(w, config).save(tmp_path / "m.gguf", fmt) or tmp_path / "m.gguf"
    m = gptcore.load(p)
    assert m.weight_dtype == fmt
    assert np.array_equal(m.forward(ids), gptcore.load(p, weight_dtype="float32").forward(ids))
    assert np.array_equal(m.forward(ids), gptcore.Model(w, config, weight_dtype=fmt).forward(ids))
    # the blocks the model holds are the file's, byte for byte
    with GGUFReader(p) as r:
        for name, gname in (("h.1.mlp.c_proj.weight", "blk.1.ffn_down.weight"), ("wte.weight", "token_embd.weight"),
                            ("lm_head.weight", "output.weight")):
            held, blocks = m._native.stored_blocks(name)
            assert held == fmt and blocks.tobytes() == r.raw(gname).tobytes(), name
    # saved again: the same file content (tensors and their types), the same bits
    q = tmp_path / "again.gguf"
    m.save(q)
    with GGUFReader(p) as a, GGUFReader(q) as b:
        assert {n: t.type for n, t in a.tensors.items()} == {n: t.type for n, t in b.tensors.items()}
        for n in a.tensors:
            assert a.raw(n).tobytes() == b.raw(n).tobytes(), n
    assert np.array_equal(gptcore.load(q).forward(ids), m.forward(ids))


def _rewrite_gguf(src, dst, edit):
    """Writes ``dst``: ``src``'s metadata and tensors, each tensor's (type, blocks or values)
    replaced by ``edit(reader, name, type, data)`` (``data`` a writable copy)."""
    with GGUFReader(src) as r:
        meta = dict(r.fields)
        ts = []
        for n, t in r.tensors.items():
            t_, data = edit(r, n, t.type, np.array(r.tensor(n)))
            ts.append(WriterTensor(n, t_, t.shape, data))
    return write_gguf(dst, meta, ts)


def test_gguf_blocks_not_from_the_reference_quantizer_are_kept(tmp_path, small):
    """Blocks that gptcore's quantizer would not make (a largest integer below 127) load and
    save as they are: the model computes with the file's values, not a requantization."""
    config, w = small
    p = tmp_path / "m.gguf"
    gptcore.Model(w, config).save(p, "q8_0")

    def halve(r, n, t, data):
        if t == "Q8_0":
            data["qs"] = (data["qs"].astype(np.int16) // 2).astype(np.int8)  # max |q| 63
        return t, data

    odd = _rewrite_gguf(p, tmp_path / "odd.gguf", halve)
    m = gptcore.load(odd)
    ids = _ids(config, 1, 10, 2)
    assert np.array_equal(m.forward(ids), gptcore.load(odd, weight_dtype="float32").forward(ids))
    m.save(tmp_path / "odd2.gguf")
    with GGUFReader(odd) as a, GGUFReader(tmp_path / "odd2.gguf") as b:
        assert all(a.raw(n).tobytes() == b.raw(n).tobytes() for n in a.tensors)


def test_gguf_mixed_types_and_conversions(tmp_path, small):
    """A file of mixed types: by default each tensor computes as stored (Q4_0 blocks in a Q8_0
    model, F16 and F32 held as float32); explicit formats convert."""
    config, w = small
    p = tmp_path / "m.gguf"
    gptcore.Model(w, config).save(p, "q8_0")

    def mix(r, n, t, data):
        if n == "blk.0.ffn_up.weight":
            return "Q4_0", quantize(r.to_float32(n), "q4_0")
        if n == "blk.1.attn_qkv.weight":
            return "F16", r.to_float32(n).astype(np.float16)
        return t, data

    mixed = _rewrite_gguf(p, tmp_path / "mixed.gguf", mix)
    ids = _ids(config, 2, 10, 3)
    m = gptcore.load(mixed)
    deq = gptcore.load(mixed, weight_dtype="float32")
    assert m.weight_dtype == "q8_0"
    held = {n: f for n, f, _ in m.weight_storage()}
    assert held["h.0.mlp.c_fc.weight"] == "q4_0" and held["h.1.attn.c_attn.weight"] == "float32"
    assert held["h.0.attn.c_attn.weight"] == "q8_0" and held["wpe.weight"] == "float32"
    assert np.array_equal(m.forward(ids), deq.forward(ids))
    # as its own format: written as held, read back the same
    m.save(tmp_path / "mixed2.gguf")
    with GGUFReader(tmp_path / "mixed2.gguf") as r:
        assert r.tensors["blk.0.ffn_up.weight"].type == "Q4_0" and r.tensors["blk.1.attn_qkv.weight"].type == "F32"
    assert np.array_equal(gptcore.load(tmp_path / "mixed2.gguf").forward(ids), m.forward(ids))
    # explicit q4_0: Q4_0 blocks as stored, everything else quantized from its values
    q4 = gptcore.load(mixed, weight_dtype="q4_0")
    export = deq._native.export()
    assert np.array_equal(q4.forward(ids), gptcore.Model(export, config, weight_dtype="q4_0").forward(ids))


def test_gguf_nonfinite_scales_are_refused(tmp_path, small):
    config, w = small
    p = tmp_path / "m.gguf"
    gptcore.Model(w, config).save(p, "q4_0")

    def poison(r, n, t, data):
        if n == "blk.1.ffn_down.weight":
            data["d"][5, 2] = np.inf
        return t, data

    bad = _rewrite_gguf(p, tmp_path / "bad.gguf", poison)
    with pytest.raises(ValueError, match=r"'h\.1\.mlp\.c_proj\.weight'.* scale is inf \(block 2 of row 5\)"):
        gptcore.load(bad)
    m = gptcore.load(bad, allow_nonfinite=True)
    assert not np.isfinite(m.forward(_ids(config, 1, 4, 0))).all()


def test_block_dtypes_of_the_gguf_format_module():
    assert set(BLOCK_DTYPES) == {"Q8_0", "Q4_0"}


# ---------------------------------------------------------------------------------- fixtures

def test_the_fixture_files_are_what_their_script_writes(tmp_path):
    """tests/fixtures/gguf/*.gguf come from make_gguf_fixtures.py (the gguf package's writer
    and quantizers, not gptcore's), byte for byte."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_gguf_fixtures", FIXTURES / "make_gguf_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(tmp_path)
    for fmt in FORMATS:
        name = f"tiny-bpe-{fmt}.gguf"
        assert (tmp_path / name).read_bytes() == (FIXTURES / "gguf" / name).read_bytes(), name


@pytest.mark.parametrize("fmt", FORMATS)
def test_fixture_files_compute_with_their_blocks(fmt):
    path = FIXTURES / "gguf" / f"tiny-bpe-{fmt}.gguf"
    m = gptcore.load(path)
    assert m.weight_dtype == fmt and m.config.tied and m.tokenizer is not None
    w, config = gptcore.load_safetensors(FIXTURES / "tiny-bpe")
    ids = m.tokenizer.encode("We hold these truths to be self-evident")
    want = gptcore.Model(gptcore.round_weights(w, fmt), config)
    want.tokenizer = m.tokenizer
    _assert_same(m, want, np.stack([ids, ids[::-1]]))
    assert m.generate_text("We hold these truths", 6, greedy=True) == want.generate_text("We hold these truths", 6,
                                                                                         greedy=True)
