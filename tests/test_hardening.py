"""Hostile inputs for every public entry point.

Whatever a caller passes, gptcore must either compute the right answer or raise a clear
Python exception (TypeError, ValueError, MemoryError, FileNotFoundError) that names the
argument. It must never crash the interpreter, read outside an array, modify an input, or
return a silently wrong result. Cases that could kill the process (huge allocations) run in a
separate interpreter, so a crash shows up as a failed test rather than a dead test run.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import gptcore
import reference
from gptcore import GPTConfig, Model

KERNELS = gptcore.available_kernels()
DOCUMENTED = (TypeError, ValueError, MemoryError)


# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------

def run_isolated(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter that imports the same gptcore as this one."""
    root = str(Path(gptcore.__file__).resolve().parent.parent)
    env = dict(os.environ, RUST_BACKTRACE="0")
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    prelude = "import numpy as np, gptcore\nfrom gptcore import GPTConfig, Model, init_weights\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True, text=True, timeout=timeout, env=env,
    )


def expect_isolated(code: str, exc: str, words: str = "", timeout: float = 120) -> str:
    """``code`` must end by printing ``RAISED <name>: <message>`` for exception ``exc``, in a
    process that exits normally (not killed by a signal, not aborted)."""
    wrapped = (
        "try:\n" + textwrap.indent(textwrap.dedent(code), "    ") +
        "\n    print('RETURNED')\n"
        "except BaseException as e:\n"
        "    print('RAISED', type(e).__name__ + ':', e)\n"
    )
    p = run_isolated(wrapped, timeout=timeout)
    assert p.returncode == 0, (
        f"the interpreter died (exit status {p.returncode}"
        f"{', signal ' + str(-p.returncode) if p.returncode < 0 else ''}); stderr tail:\n{p.stderr[-800:]}"
    )
    out = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
    assert out.startswith(f"RAISED {exc}:"), f"expected {exc}, got {out!r}; stderr: {p.stderr[-500:]}"
    assert words in out, f"{words!r} not in {out!r}"
    return out


def snapshot(obj):
    """A deep copy of the arrays in obj (array, mapping or sequence) with their flags."""
    if isinstance(obj, np.ndarray):
        return (obj.copy(), obj.flags.writeable, obj.shape, obj.strides)
    if isinstance(obj, dict):
        return {k: snapshot(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [snapshot(v) for v in obj]
    return obj


def assert_unchanged(obj, snap):
    if isinstance(obj, np.ndarray):
        data, writeable, shape, strides = snap
        assert obj.shape == shape and obj.strides == strides and obj.flags.writeable == writeable
        assert np.array_equal(obj, data, equal_nan=obj.dtype.kind in "fc"), "an input array was modified"
    elif isinstance(obj, dict):
        assert obj.keys() == snap.keys(), "keys of an input mapping were changed"
        for k in obj:
            assert_unchanged(obj[k], snap[k])
    elif isinstance(obj, (list, tuple)):
        for o, s in zip(obj, snap):
            assert_unchanged(o, s)


def random_weights(config: GPTConfig, seed: int = 0, dtype=np.float64):
    """Random weights for every tensor of ``config`` with no symmetry to hide mistakes: LayerNorm
    gains near 1, small random biases, projections scaled by 1/sqrt(fan-in)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in gptcore.expected_shapes(config).items():
        z = rng.standard_normal(shape)
        if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            a = 1 + 0.1 * z
        elif name.endswith(".bias"):
            a = 0.1 * z
        elif name in ("wte.weight", "wpe.weight", "lm_head.weight"):
            a = 0.5 * z
        else:
            a = z / math.sqrt(shape[0])
        out[name] = a.astype(dtype)
    return out


TINY = GPTConfig(vocab_size=13, n_ctx=16, d_model=16, n_heads=2, n_layers=2)
TINY_W = random_weights(TINY, seed=7)
TINY_M64 = Model(TINY_W, TINY, dtype="float64")
TINY_M32 = Model(TINY_W, TINY, dtype="float32")
IDS = np.array([3, 1, 4, 1, 5, 9, 2, 6])


def structured_field(a: np.ndarray) -> np.ndarray:
    """A view of ``a``'s values as one field of a structured array: valid numpy array whose
    strides are not multiples of the item size."""
    s = np.zeros(a.shape, dtype=[("x", a.dtype), ("pad", "<f4")])
    s["x"] = a
    return s["x"]


def unaligned(a: np.ndarray) -> np.ndarray:
    """A copy of ``a`` whose data pointer is not aligned to the item size."""
    buf = np.zeros(a.nbytes + 1, dtype=np.uint8)[1:]
    u = buf.view(a.dtype).reshape(a.shape)
    u[...] = a
    assert not u.flags.aligned
    return u


# ------------------------------------------------------------------------------------------
# matmul and PackedMatrix
# ------------------------------------------------------------------------------------------

F32 = np.ones((2, 3), np.float32)
F64 = np.ones((3, 2), np.float64)

MATMUL_BAD = [
    # (label, a, b, kwargs, exception, words in the message)
    ("object", np.ones((2, 3), object), np.ones((3, 2), object), {}, TypeError, "a must have dtype float32 or float64"),
    ("bool", np.ones((2, 3), bool), np.ones((3, 2), bool), {}, TypeError, "a must have dtype"),
    ("complex", np.ones((2, 3), complex), np.ones((3, 2), complex), {}, TypeError, "a must have dtype"),
    ("float16", np.ones((2, 3), np.float16), np.ones((3, 2), np.float16), {}, TypeError, "a must have dtype"),
    ("int", np.ones((2, 3), np.int64), np.ones((3, 2), np.int64), {}, TypeError, "a must have dtype"),
    ("b int", np.ones((2, 3)), np.ones((3, 2), np.int32), {}, TypeError, "b must have dtype"),
    ("mixed", np.ones((2, 3), np.float32), F64, {}, TypeError, "same dtype"),
    ("a 1-D", np.ones(3), F64, {}, ValueError, "a must be 2-D"),
    ("a 3-D", np.ones((1, 2, 3)), F64, {}, ValueError, "a must be 2-D"),
    ("a 0-D", np.float64(1.0), F64, {}, TypeError, "a must be a numpy.ndarray"),
    ("a 0-d array", np.array(1.0), F64, {}, ValueError, "a must be 2-D"),
    ("b 1-D", np.ones((2, 3)), np.ones(3), {}, ValueError, "b must be 2-D"),
    ("a list", [[1.0, 2.0]], np.ones((2, 1)), {}, TypeError, "numpy.ndarray"),
    ("b None", np.ones((2, 3)), None, {}, TypeError, "b must be a numpy.ndarray"),
    ("shapes", np.ones((2, 3)), np.ones((4, 2)), {}, ValueError, "not aligned"),
    ("empty shapes", np.ones((0, 3)), np.ones((0, 2)), {}, ValueError, "not aligned"),
    ("kernel name", np.ones((2, 3)), F64, {"kernel": "sse9"}, ValueError, "kernel must be one of"),
    ("kernel type", np.ones((2, 3)), F64, {"kernel": 3}, TypeError, ""),
    ("big-endian", np.ones((2, 3), ">f8"), F64, {}, TypeError, "a must have dtype"),
]


@pytest.mark.parametrize("label,a,b,kw,exc,words", MATMUL_BAD, ids=[c[0] for c in MATMUL_BAD])
def test_matmul_rejects(label, a, b, kw, exc, words):
    snap = snapshot([a, b])
    with pytest.raises(exc) as info:
        gptcore.matmul(a, b, **kw)
    assert words in str(info.value)
    assert_unchanged([a, b], snap)


PACKED_BAD = [
    ("list", [[1.0]], TypeError),
    ("int", np.ones((2, 2), np.int64), TypeError),
    ("float16", np.ones((2, 2), np.float16), TypeError),
    ("object", np.ones((2, 2), object), TypeError),
    ("1-D", np.ones(3), TypeError),
    ("3-D", np.ones((1, 2, 2)), TypeError),
    ("None", None, TypeError),
]


@pytest.mark.parametrize("label,b,exc", PACKED_BAD, ids=[c[0] for c in PACKED_BAD])
def test_packed_matrix_rejects(label, b, exc):
    with pytest.raises(exc, match="PackedMatrix"):
        gptcore.PackedMatrix(b)


def test_packed_matrix_operand_checks():
    pb = gptcore.PackedMatrix(np.ones((3, 2), np.float32))
    with pytest.raises(TypeError, match="float32"):
        gptcore.matmul(np.ones((2, 3), np.float64), pb)
    with pytest.raises(ValueError, match="not aligned"):
        gptcore.matmul(np.ones((2, 4), np.float32), pb)
    with pytest.raises(ValueError, match="a must be 2-D"):
        gptcore.matmul(np.ones(3, np.float32), pb)


def _layouts(a: np.ndarray):
    """Views equal in value to ``a`` but laid out differently in memory."""
    m, n = a.shape
    big = np.zeros((2 * m + 1, 3 * n + 2), a.dtype)
    big[1::2, 2::3] = a
    neg = np.ascontiguousarray(a[::-1, ::-1])[::-1, ::-1]
    ro = a.copy()
    ro.setflags(write=False)
    out = {
        "strided": big[1::2, 2::3],
        "negative strides": neg,
        "fortran": np.asfortranarray(a),
        "transposed view": np.ascontiguousarray(a.T).T,
        "read-only": ro,
        "unaligned": unaligned(a),
        "structured field": structured_field(a),
    }
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["strided", "negative strides", "fortran", "transposed view", "read-only", "unaligned", "structured field"])
def test_matmul_any_layout_gives_the_contiguous_result(dtype, layout):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((37, 29)).astype(dtype)
    b = rng.standard_normal((29, 23)).astype(dtype)
    want = gptcore.matmul(a, b)
    av, bv = _layouts(a)[layout], _layouts(b)[layout]
    snap = snapshot([av, bv])
    assert np.array_equal(gptcore.matmul(av, b), want), f"a {layout}"
    assert np.array_equal(gptcore.matmul(a, bv), want), f"b {layout}"
    assert np.array_equal(gptcore.matmul(av, bv), want), f"a and b {layout}"
    assert np.array_equal(gptcore.matmul(a, gptcore.PackedMatrix(bv)), want), f"PackedMatrix of {layout}"
    assert np.array_equal(gptcore.matmul_reference(av, bv), want), f"matmul_reference, {layout}"
    assert_unchanged([av, bv], snap)


def test_matmul_broadcast_operands():
    a = np.broadcast_to(np.float32(1.5), (5, 7))
    b = np.broadcast_to(np.arange(3, dtype=np.float32), (7, 3))
    want = gptcore.matmul(np.ascontiguousarray(a), np.ascontiguousarray(b))
    assert np.array_equal(gptcore.matmul(a, b), want)
    assert np.array_equal(want, np.ascontiguousarray(a) @ np.ascontiguousarray(b))


def test_matmul_output_is_a_new_array():
    a = np.ones((3, 3))
    c = gptcore.matmul(a, a)
    assert c.flags.c_contiguous and c.flags.writeable
    assert not np.shares_memory(c, a)


@pytest.mark.parametrize("m,k,n", [(0, 3, 4), (3, 0, 4), (3, 4, 0), (0, 0, 0), (1, 0, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmul_zero_sizes(m, k, n, dtype):
    a, b = np.ones((m, k), dtype), np.ones((k, n), dtype)
    for bb in (b, gptcore.PackedMatrix(b)):
        c = gptcore.matmul(a, bb)
        assert c.shape == (m, n) and c.dtype == dtype and not c.any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmul_nan_and_inf_propagate(dtype):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((20, 40)).astype(dtype)
    b = rng.standard_normal((40, 17)).astype(dtype)
    a[3, 7] = np.nan
    a[5, :] = np.inf
    b[11, 4] = -np.inf
    b[:, 9] = 0.0
    a[8, 2] = np.inf  # inf * 0 in column 9 -> NaN
    exact = a.astype(np.float64) @ b.astype(np.float64)
    for kern in KERNELS:
        c = gptcore.matmul(a, b, kernel=kern)
        assert np.array_equal(np.isnan(c), np.isnan(exact)), kern
        assert np.array_equal(np.isposinf(c), np.isposinf(exact)), kern
        assert np.array_equal(np.isneginf(c), np.isneginf(exact)), kern
        assert np.array_equal(c, gptcore.matmul_reference(a, b), equal_nan=True), kern


def test_matmul_huge_output_is_a_memory_error():
    a = np.broadcast_to(np.float32(1), (10**6, 1))
    b = np.broadcast_to(np.float32(1), (1, 10**6))
    with pytest.raises(MemoryError, match="bytes"):
        gptcore.matmul(a, b)
    with pytest.raises(MemoryError, match="bytes"):
        gptcore.matmul(a, gptcore.PackedMatrix(np.ones((1, 10**6), np.float32)))


@pytest.mark.parametrize(
    "code",
    [
        # output fits, but packing b (10^12 values) cannot
        "gptcore.matmul(np.ones((1, 10**6), np.float32), np.broadcast_to(np.float32(0), (10**6, 10**6)))",
        # output fits, but packing a cannot
        "gptcore.matmul(np.broadcast_to(np.float32(0), (10**6, 10**6)), np.ones((10**6, 1), np.float32))",
        "gptcore.PackedMatrix(np.broadcast_to(np.float32(0), (10**6, 10**6)))",
        "gptcore.matmul_reference(np.broadcast_to(np.float32(0), (10**6, 1)), np.ones((1, 10**6), np.float32))",
    ],
    ids=["pack b", "pack a", "PackedMatrix", "matmul_reference"],
)
def test_matmul_huge_operands_raise_memory_error_not_abort(code):
    expect_isolated(code, "MemoryError", "bytes")


def test_forced_panic_becomes_runtime_error_and_interpreter_survives():
    for _ in range(3):
        with pytest.raises(RuntimeError, match="internal error"):
            gptcore._native._panic_for_tests()
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    assert np.array_equal(gptcore.matmul(a, a.T), a @ a.T)
    assert np.array_equal(TINY_M64.forward(IDS), TINY_M64.forward(IDS.copy()))


def test_threads_and_kernel_setters():
    for bad, exc in [(0, ValueError), (-1, ValueError), (1025, ValueError), (2**70, ValueError),
                     (1.5, TypeError), ("2", TypeError), (True, TypeError), (None, TypeError)]:
        with pytest.raises(exc, match="set_num_threads"):
            gptcore.set_num_threads(bad)
    for bad, exc in [("sse9", ValueError), (3, TypeError), (b"avx2", TypeError)]:
        with pytest.raises(exc):
            gptcore.set_kernel(bad)
    assert gptcore.kernel() == KERNELS[0]


# ------------------------------------------------------------------------------------------
# configurations and Model construction
# ------------------------------------------------------------------------------------------

CONFIG_BAD = [
    (dict(d_model=15, n_heads=2), ValueError, "divisible by n_heads"),
    (dict(vocab_size=0), ValueError, "vocab_size"),
    (dict(vocab_size=-3), ValueError, "vocab_size"),
    (dict(n_ctx=0), ValueError, "n_ctx"),
    (dict(n_heads=0), ValueError, "n_heads"),
    (dict(n_layers=-1), ValueError, "n_layers"),
    (dict(d_ff=0), ValueError, "d_ff"),
    (dict(n_layers=2.0), TypeError, "n_layers"),
    (dict(vocab_size="13"), TypeError, "vocab_size"),
    (dict(pos="rotary"), ValueError, "pos"),
    (dict(tied=1), TypeError, "tied"),
    (dict(ln_eps=0.0), ValueError, "ln_eps"),
    (dict(ln_eps=float("nan")), ValueError, "ln_eps"),
    (dict(ln_eps=float("inf")), ValueError, "ln_eps"),
    (dict(ln_eps="1e-5"), ValueError, "ln_eps"),
]


@pytest.mark.parametrize("change,exc,words", CONFIG_BAD, ids=[str(c[0]) for c in CONFIG_BAD])
def test_config_rejects(change, exc, words):
    base = dict(vocab_size=13, n_ctx=16, d_model=16, n_heads=2, n_layers=2)
    with pytest.raises(exc, match=words):
        GPTConfig(**{**base, **change})


def _with(name, value, weights=TINY_W):
    w = dict(weights)
    w[name] = value
    return w


MODEL_BAD = [
    # (label, args, kwargs, exception, words)
    ("weights None", (None, TINY), {}, TypeError, "weights must be a mapping"),
    ("weights list", ([TINY_W["wte.weight"]], TINY), {}, TypeError, "weights must be a mapping"),
    ("empty mapping", ({}, None), {}, ValueError, "wte.weight"),
    ("config dict", (TINY_W, {"vocab_size": 13}), {}, TypeError, "config must be a GPTConfig"),
    ("int weight", (_with("wte.weight", TINY_W["wte.weight"].astype(np.int64)), TINY), {}, TypeError, "'wte.weight' has dtype int64"),
    ("bool weight", (_with("h.0.ln_1.weight", TINY_W["h.0.ln_1.weight"] > 0), TINY), {}, TypeError, "'h.0.ln_1.weight' has dtype bool"),
    ("complex weight", (_with("wte.weight", TINY_W["wte.weight"].astype(complex)), TINY), {}, TypeError, "complex128"),
    ("object weight", (_with("wte.weight", TINY_W["wte.weight"].astype(object)), TINY), {}, TypeError, "dtype object"),
    ("list weight", (_with("wte.weight", TINY_W["wte.weight"].tolist()), TINY), {}, TypeError, "'wte.weight' must be a numpy.ndarray"),
    ("wrong shape", (_with("wte.weight", TINY_W["wte.weight"][:5]), TINY), {}, ValueError, "'wte.weight' has shape (5, 16)"),
    ("transposed", (_with("h.1.mlp.c_fc.weight", TINY_W["h.1.mlp.c_fc.weight"].T), TINY), {}, ValueError, "h.1.mlp.c_fc.weight"),
    ("0-d weight", (_with("ln_f.bias", np.array(0.0)), TINY), {}, ValueError, "'ln_f.bias' has shape ()"),
    ("missing", ({k: v for k, v in TINY_W.items() if k != "ln_f.bias"}, TINY), {}, ValueError, "missing tensor 'ln_f.bias'"),
    ("extra", (_with("h.2.ln_1.weight", np.ones(16)), TINY), {}, ValueError, "unexpected tensor 'h.2.ln_1.weight'"),
    ("non-str key", (_with(3, np.ones(16)), TINY), {}, TypeError, "weight names must be str"),
    ("dtype float16", (TINY_W, TINY), {"dtype": "float16"}, ValueError, "dtype must be one of 'float32', 'float64', got 'float16'"),
    ("dtype bfloat16", (TINY_W, TINY), {"dtype": "bfloat16"}, ValueError, "dtype must be one of 'float32', 'float64', got 'bfloat16'"),
    ("dtype junk", (TINY_W, TINY), {"dtype": "junk"}, ValueError, "dtype must be one of"),
    ("dtype int", (TINY_W, TINY), {"dtype": 5}, TypeError, "dtype must be"),
    ("branch_scale nan", (TINY_W, TINY), {"branch_scale": float("nan")}, ValueError, "branch_scale"),
    ("branch_scale inf", (TINY_W, TINY), {"branch_scale": float("inf")}, ValueError, "branch_scale"),
    ("branch_scale str", (TINY_W, TINY), {"branch_scale": "0.5"}, TypeError, "branch_scale"),
    ("branch_scale bool", (TINY_W, TINY), {"branch_scale": True}, TypeError, "branch_scale"),
    ("n_heads not dividing", (TINY_W, None), {"n_heads": 3}, ValueError, "divisible by n_heads"),
    ("n_heads 0", (TINY_W, None), {"n_heads": 0}, ValueError, "n_heads"),
    ("n_heads float", (TINY_W, None), {"n_heads": 2.0}, TypeError, "n_heads"),
    ("n_heads against config", (TINY_W, TINY), {"n_heads": 4}, ValueError, "n_heads"),
    ("wte 1-D", ({"wte.weight": np.ones(64)}, None), {}, ValueError, "'wte.weight' must be 2-D"),
    ("wte empty", ({"wte.weight": np.ones((0, 64))}, None), {}, ValueError, "vocab_size"),
    ("block gap", ({k.replace("h.1.", "h.3."): v for k, v in TINY_W.items()}, None), {"n_heads": 2}, ValueError, "block(s) [1, 2]"),
]


@pytest.mark.parametrize("label,args,kw,exc,words", MODEL_BAD, ids=[c[0] for c in MODEL_BAD])
def test_model_rejects(label, args, kw, exc, words):
    snap = snapshot(args[0]) if isinstance(args[0], dict) else None
    with pytest.raises(exc) as info:
        Model(*args, **kw)
    assert words in str(info.value), str(info.value)
    if snap is not None:
        assert_unchanged(args[0], snap)


def test_branch_scale_accepts_numpy_scalars():
    ref = Model(TINY_W, TINY, dtype="float64", branch_scale=0.5).forward(IDS)
    for s in (np.float64(0.5), np.float32(0.5), 0.5):
        assert np.array_equal(Model(TINY_W, TINY, dtype="float64", branch_scale=s).forward(IDS), ref)


def _weight_layouts():
    """TINY_W with every tensor given in an unusual but valid layout."""
    out = {}
    ro = {}
    for k, v in TINY_W.items():
        r = v.copy()
        r.setflags(write=False)
        ro[k] = r
    out["read-only"] = ro
    out["fortran"] = {k: np.asfortranarray(v) for k, v in TINY_W.items()}
    out["strided"] = {k: np.repeat(v, 2, axis=-1)[..., ::2] for k, v in TINY_W.items()}
    out["negative strides"] = {k: np.ascontiguousarray(v[::-1])[::-1] for k, v in TINY_W.items()}
    out["structured field"] = {k: structured_field(v) for k, v in TINY_W.items()}
    out["unaligned"] = {k: unaligned(v) for k, v in TINY_W.items()}
    out["prefixed names"] = {"transformer." + k: v for k, v in TINY_W.items()}
    return out


@pytest.mark.parametrize("layout", list(_weight_layouts()))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_model_weight_layouts_give_the_same_result(layout, dtype):
    w = _weight_layouts()[layout]
    snap = snapshot(w)
    ref = (TINY_M64 if dtype == "float64" else TINY_M32).forward(IDS)
    got = Model(w, TINY, dtype=dtype).forward(IDS)
    assert np.array_equal(got, ref)
    got = Model(w, TINY, dtype=dtype, branch_scale=0.25).forward(IDS)
    assert np.array_equal(got, Model(TINY_W, TINY, dtype=dtype, branch_scale=0.25).forward(IDS))
    assert_unchanged(w, snap)


def test_model_float16_weights_are_converted_exactly():
    w16 = {k: v.astype(np.float16) for k, v in TINY_W.items()}
    w32 = {k: v.astype(np.float32) for k, v in w16.items()}
    snap = snapshot(w16)
    assert np.array_equal(Model(w16, TINY).forward(IDS), Model(w32, TINY).forward(IDS))
    assert_unchanged(w16, snap)


def test_model_is_independent_of_later_changes_to_the_weights():
    w = {k: v.copy() for k, v in TINY_W.items()}
    for dtype in ("float32", "float64"):
        m = Model(w, TINY, dtype=dtype)
        before = m.forward(IDS)
        for v in w.values():
            v *= 3.0
        assert np.array_equal(m.forward(IDS), before)
        for v in w.values():
            v /= 3.0


def test_save_writes_the_weights_the_model_computes_with(tmp_path):
    """The model is immutable: changing the caller's arrays afterwards changes neither its
    results nor what it saves."""
    w = {k: v.copy() for k, v in TINY_W.items()}
    m = Model(w, TINY, dtype="float64")
    before = m.forward(IDS)
    for v in w.values():
        v *= 2.0
    m.save(tmp_path / "m")
    assert np.array_equal(m.forward(IDS), before)
    assert np.array_equal(gptcore.load(tmp_path / "m", dtype="float64").forward(IDS), before)


@pytest.mark.parametrize("cfg", [
    GPTConfig(vocab_size=7, n_ctx=8, d_model=8, n_heads=2, n_layers=0),
    GPTConfig(vocab_size=7, n_ctx=8, d_model=8, n_heads=2, n_layers=0, pos="sinusoidal", tied=False, ln_affine=False),
    GPTConfig(vocab_size=1, n_ctx=4, d_model=4, n_heads=4, n_layers=1),
    GPTConfig(vocab_size=3, n_ctx=1, d_model=2, n_heads=1, n_layers=1, d_ff=1),
], ids=["0 layers", "0 layers sinusoidal", "vocab 1 and d_head 1", "n_ctx 1 and d_ff 1"])
def test_degenerate_but_valid_configs_match_the_reference(cfg):
    w = random_weights(cfg, seed=2)
    m = Model(w, cfg, dtype="float64")
    ids = np.arange(min(cfg.n_ctx, 5)) % cfg.vocab_size
    np.testing.assert_allclose(m.forward(ids), reference.forward(ids, w, cfg), rtol=1e-9, atol=1e-9)
    out = m.generate(ids[:1], 3, greedy=True)
    assert out.shape == (3,) and ((0 <= out) & (out < cfg.vocab_size)).all()
    if ids.size >= 2:
        lp = m.token_logprobs(ids)
        assert lp.shape == (ids.size - 1,) and np.all(lp <= 0)


# ------------------------------------------------------------------------------------------
# forward: ids and options
# ------------------------------------------------------------------------------------------

IDS_BAD = [
    ("float", IDS.astype(float), TypeError, "integer"),
    ("float list", [1.0, 2.0], TypeError, "integer"),
    ("bool", IDS > 2, TypeError, "integer"),
    ("complex", IDS.astype(complex), TypeError, "integer"),
    ("float16", IDS.astype(np.float16), TypeError, "integer"),
    ("object", IDS.astype(object), TypeError, "integer"),
    ("str", "abc", TypeError, "integer"),
    ("bytes", b"\x01\x02", TypeError, "integer"),
    ("None", None, TypeError, "integer"),
    ("huge python int", [2**70], TypeError, "integer"),
    ("datetime", np.array(["2020-01-01"], dtype="datetime64[D]"), TypeError, "integer"),
    ("0-D", np.int64(3), ValueError, "shape (T,) or (B, T)"),
    ("3-D", IDS[None, None], ValueError, "shape (T,) or (B, T)"),
    ("empty", np.array([], dtype=np.int64), ValueError, "at least one token"),
    ("empty list", [], ValueError, "at least one token"),
    ("zero rows", np.zeros((0, 4), np.int64), ValueError, "at least one token"),
    ("zero columns", np.zeros((2, 0), np.int64), ValueError, "at least one token"),
    ("negative", np.array([1, -1]), ValueError, "token id -1 is out of range [0, 13)"),
    ("equal to vocab", np.array([13]), ValueError, "token id 13 is out of range"),
    ("uint64 max", np.array([2**64 - 1], np.uint64), ValueError, "out of range"),
    ("int64 min", np.array([-(2**63)]), ValueError, "out of range"),
    ("T > n_ctx", np.zeros(17, np.int64), ValueError, "exceeds the model's context n_ctx = 16"),
    ("B, T > n_ctx", np.zeros((2, 17), np.int64), ValueError, "n_ctx = 16"),
]


@pytest.mark.parametrize("label,ids,exc,words", IDS_BAD, ids=[c[0] for c in IDS_BAD])
def test_forward_rejects_ids(label, ids, exc, words):
    snap = snapshot(ids)
    for m in (TINY_M64, TINY_M32):
        with pytest.raises(exc) as info:
            m.forward(ids)
        assert words in str(info.value) and "ids" in str(info.value)
        with pytest.raises(exc):
            gptcore.forward(ids, TINY_W, TINY)
    assert_unchanged(ids, snap)


OPTIONS_BAD = [
    ({"logits": "first"}, ValueError, "logits must be 'all' or 'last'"),
    ({"logits": None}, ValueError, "logits"),
    ({"logits": np.array(["all", "last"])}, ValueError, "logits"),
    ({"causal": 1}, TypeError, "causal must be a bool"),
    ({"causal": "yes"}, TypeError, "causal"),
    ({"return_hidden": "yes"}, TypeError, "return_hidden"),
    ({"return_hidden": 1}, TypeError, "return_hidden"),
    ({"bogus": 1}, TypeError, "bogus"),
]


@pytest.mark.parametrize("kw,exc,words", OPTIONS_BAD, ids=[str(list(c[0])) + str(i) for i, c in enumerate(OPTIONS_BAD)])
def test_forward_rejects_options(kw, exc, words):
    with pytest.raises(exc) as info:
        TINY_M64.forward(IDS, **kw)
    assert words in str(info.value)


def test_module_forward_argument_checks():
    with pytest.raises(ValueError, match="only when weights is a mapping"):
        gptcore.forward(IDS, TINY_M64, TINY)
    with pytest.raises(ValueError, match="only when weights is a mapping"):
        gptcore.forward(IDS, TINY_M64, dtype="float64")
    with pytest.raises(TypeError, match="weights must be a mapping"):
        gptcore.forward(IDS, None)


def _ids_layouts():
    base = np.array([[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]])
    big = np.zeros((5, 24), np.int64)
    big[1::2, ::3] = base
    ro = base.copy()
    ro.setflags(write=False)
    return base, {
        "int8": base.astype(np.int8),
        "uint16": base.astype(np.uint16),
        "int32": base.astype(np.int32),
        "uint64": base.astype(np.uint64),
        "big-endian": base.astype(">i8"),
        "strided": big[1::2, ::3],
        "negative strides": np.ascontiguousarray(base[::-1, ::-1])[::-1, ::-1],
        "fortran": np.asfortranarray(base),
        "read-only": ro,
        "unaligned": unaligned(base),
        "structured field": structured_field(base),
        "list": base.tolist(),
        "tuple": tuple(map(tuple, base.tolist())),
    }


@pytest.mark.parametrize("layout", list(_ids_layouts()[1]))
def test_forward_ids_layouts_give_the_contiguous_result(layout):
    base, layouts = _ids_layouts()
    ids = layouts[layout]
    snap = snapshot(ids)
    for m in (TINY_M64, TINY_M32):
        want = m.forward(base)
        assert np.array_equal(m.forward(ids), want)
        assert np.array_equal(m.forward(ids, logits="last"), want[:, -1])
        assert np.array_equal(m.token_logprobs(ids), m.token_logprobs(base))
        assert np.array_equal(m.generate(ids, 3, greedy=True), m.generate(base, 3, greedy=True))
        arr = np.asarray(ids)
        assert np.array_equal(m.forward(arr[0]), want[0])
    assert_unchanged(ids, snap)


def test_forward_results_are_fresh_arrays():
    a = TINY_M64.forward(IDS)
    b = TINY_M64.forward(IDS)
    assert a.flags.writeable and a.flags.c_contiguous and not np.shares_memory(a, b)
    a[:] = 0
    assert np.array_equal(b, TINY_M64.forward(IDS))


# ------------------------------------------------------------------------------------------
# NaN and inf: they propagate, never crash
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_nan_in_an_embedding_row_propagates_causally(dtype):
    cfg = TINY.replace(tied=False)
    w = random_weights(cfg, seed=11)
    clean = Model(w, cfg, dtype=dtype)
    w_nan = dict(w)
    w_nan["wte.weight"] = w["wte.weight"].copy()
    w_nan["wte.weight"][9] = np.nan
    m = Model(w_nan, cfg, dtype=dtype)
    ids = np.array([3, 1, 4, 1, 5, 9, 2, 6])  # token 9 at position 5
    out, ref = m.forward(ids), clean.forward(ids)
    assert np.array_equal(out[:5], ref[:5]), "positions before the NaN token must not change"
    assert np.isnan(out[5:]).all(axis=-1).all(), "every logit at and after the NaN token is NaN"
    # generation, loss and cached steps cope with NaN logits
    toks = m.generate(ids, 4, seed=0)
    assert ((0 <= toks) & (toks < cfg.vocab_size)).all()
    toks = m.generate(ids, 4, greedy=True, top_k=3, top_p=0.5)
    assert ((0 <= toks) & (toks < cfg.vocab_size)).all()
    assert math.isnan(m.loss(ids))
    c = m.new_cache(1)
    assert np.array_equal(m.step(c, ids[None, :4]), ref[None, 3])


@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan, 1e38])
def test_inf_and_nan_weights_never_crash(value):
    for name in ("h.0.mlp.c_fc.weight", "h.1.attn.c_attn.weight", "ln_f.weight", "wpe.weight", "h.0.attn.c_proj.bias"):
        w = dict(TINY_W)
        w[name] = np.full_like(TINY_W[name], value)
        for dtype in ("float32", "float64"):
            m = Model(w, TINY, dtype=dtype)
            out, hidden = m.forward(IDS, return_hidden=True)
            assert out.shape == (IDS.size, TINY.vocab_size) and hidden.shape == (3, IDS.size, 16)
            toks = m.generate(IDS[:3], 3, seed=1, top_k=4)
            assert ((0 <= toks) & (toks < TINY.vocab_size)).all()
            m.token_logprobs(IDS)


# ------------------------------------------------------------------------------------------
# huge sizes: MemoryError stating bytes, never an abort
# ------------------------------------------------------------------------------------------

def test_forward_huge_batch_is_a_memory_error_stating_bytes():
    cfg = GPTConfig(vocab_size=2**20, n_ctx=8, d_model=8, n_heads=2, n_layers=1, pos="sinusoidal")
    w = {k: np.zeros(s, np.float32) for k, s in gptcore.expected_shapes(cfg).items()}
    m = Model(w, cfg)
    ids = np.broadcast_to(np.int64(1), (64, 65536))
    with pytest.raises(MemoryError, match=r"bytes") as info:
        m.forward(ids)
    assert "(64, 65536)" in str(info.value)


_HUGE_MLP = """
from gptcore._memory import physical_memory
rows = 65536
d_ff = 1 << max(12, (2 * physical_memory() // (4 * rows)).bit_length())
cfg = GPTConfig(vocab_size=5, n_ctx=4, d_model=8, n_heads=1, n_layers=1, d_ff=d_ff, pos="sinusoidal")
m = Model(init_weights(cfg), cfg)
ids = np.zeros((rows, 1), dtype=np.int64)
"""


@pytest.mark.parametrize(
    "call",
    [
        "m.forward(ids, logits='last')",
        "m.token_logprobs(ids, targets=ids)",
        "m.loss(ids, targets=ids)",
        "m.step(m.new_cache(rows), ids)",
        "m.generate(ids, 1, greedy=True)",
    ],
)
def test_huge_intermediate_activations_are_a_memory_error_not_an_abort(call):
    # the MLP activations (rows x d_ff) exceed twice the machine's memory
    expect_isolated(_HUGE_MLP + call, "MemoryError", "bytes")


@pytest.mark.parametrize("batch", [10**13, 2**62])
def test_new_cache_huge_batch_is_a_memory_error_not_an_abort(batch):
    expect_isolated(f"""
        cfg = GPTConfig(vocab_size=5, n_ctx=4, d_model=8, n_heads=2, n_layers=2)
        Model(init_weights(cfg), cfg).new_cache({batch})
    """, "MemoryError", "bytes")


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


# ------------------------------------------------------------------------------------------
# the command line (when present) and accounting (when merged)
# ------------------------------------------------------------------------------------------

def _has_module(name):
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


CLI_BAD = [
    [],
    ["--no-such-flag"],
    ["no-such-command"],
    ["info"],
    ["info", "gpt5"],
    ["info", "gpt2", "--T", "0"],
    ["info", "gpt2", "--T", "-3"],
    ["info", "gpt2", "--T", "1e3"],
    ["info", "gpt2", "--batch", "x"],
    ["info", "gpt2", "--bytes", "0"],
    ["bench", "--m", "0"],
    ["bench", "--dtype", "float16"],
    ["bench", "--m", "1000000", "--k", "1000000", "--n", "1000000", "--repeat", "1"],
    ["bench", "--m", "100000000000", "--k", "1", "--n", "1", "--repeat", "1"],
    ["demo", "--T", "2048", "--repeat", "1"],
    ["demo", "--T", "99999999999", "--repeat", "1"],
    ["demo", "--repeat", "0"],
]


@pytest.mark.skipif(not _has_module("gptcore.cli"), reason="no command line yet")
@pytest.mark.parametrize("argv", CLI_BAD, ids=[" ".join(a) or "(none)" for a in CLI_BAD])
def test_cli_bad_arguments_give_a_message_not_a_traceback(argv, capsys):
    from gptcore.cli import main

    try:
        status = main(argv)
    except SystemExit as e:  # argparse: usage message, status 2
        status = e.code
    err = capsys.readouterr().err
    assert status not in (0, None), f"{argv} succeeded"
    assert "error" in err and "Traceback" not in err, err[-500:]


@pytest.mark.skipif(not _has_module("gptcore.__main__"), reason="no command line yet")
@pytest.mark.parametrize("args", [["--no-such-flag"], ["bench", "--m", "100000000000", "--k", "1", "--n", "1"], ["--help"]])
def test_cli_process_exits_cleanly(args):
    root = str(Path(gptcore.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "gptcore", *args], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode >= 0, f"killed by signal {-p.returncode}"
    assert "Traceback" not in p.stderr, p.stderr[-1000:]
    assert (p.returncode == 0) == (args == ["--help"])


def _accounting():
    import gptcore.accounting as acc

    return acc


ACCOUNTING_BAD = [
    ("param_count", (None,), {}, TypeError),
    ("param_count", ("gpt2",), {}, TypeError),
    ("param_count", ({"d_model": 4},), {}, TypeError),
    ("flops_per_token", (None,), {}, TypeError),
    ("flops_per_token", (GPTConfig.preset("gpt2"),), {"T": 0}, ValueError),
    ("flops_per_token", (GPTConfig.preset("gpt2"),), {"T": -1}, ValueError),
    ("flops_per_token", (GPTConfig.preset("gpt2"),), {"T": 1.5}, TypeError),
    ("flops_per_token", (GPTConfig.preset("gpt2"),), {"T": True}, TypeError),
    ("flops_per_token", (GPTConfig.preset("gpt2"),), {"T": "1024"}, TypeError),
    ("logits_memory", (0, 1, 1), {}, ValueError),
    ("logits_memory", (1, 1.0, 1), {}, TypeError),
    ("logits_memory", (1, 1, 1), {"bytes": 0}, ValueError),
    ("chinchilla", (0,), {}, ValueError),
    ("chinchilla", (1.5,), {}, TypeError),
    ("chinchilla", (10,), {"bits_per_token": float("nan")}, ValueError),
    ("chinchilla", (10,), {"bits_per_token": -1}, ValueError),
    ("lesson14_counting", (None,), {}, TypeError),
]


@pytest.mark.skipif(not _has_module("gptcore.accounting"), reason="gptcore.accounting not merged yet")
@pytest.mark.parametrize("fn,args,kw,exc", ACCOUNTING_BAD, ids=[f"{c[0]}{i}" for i, c in enumerate(ACCOUNTING_BAD)])
def test_accounting_rejects(fn, args, kw, exc):
    f = getattr(_accounting(), fn, None)
    if f is None:
        pytest.skip(f"no gptcore.accounting.{fn}")
    with pytest.raises(exc):
        f(*args, **kw)


@pytest.mark.skipif(not _has_module("gptcore.accounting"), reason="gptcore.accounting not merged yet")
def test_accounting_huge_sizes_are_exact_integers():
    acc = _accounting()
    cfg = GPTConfig(vocab_size=10**9, n_ctx=10**9, d_model=2**20, n_heads=2**10, n_layers=10**4)
    total = acc.param_count(cfg).total
    assert isinstance(total, int) and total > 10**16
    assert acc.logits_memory(10**9, 10**9, 10**9).nbytes == 4 * 10**27
    assert acc.flops_per_token(cfg, T=10**12).attention == 4 * 10**12 * 2**20 * 10**4


# ------------------------------------------------------------------------------------------
# property tests
# ------------------------------------------------------------------------------------------

@st.composite
def configs(draw):
    n_heads = draw(st.integers(1, 3))
    d_head = draw(st.integers(1, 6))
    return GPTConfig(
        vocab_size=draw(st.integers(1, 20)),
        n_ctx=draw(st.integers(1, 12)),
        d_model=n_heads * d_head,
        n_heads=n_heads,
        n_layers=draw(st.integers(0, 3)),
        d_ff=draw(st.integers(1, 24)),
        pos=draw(st.sampled_from(["learned", "sinusoidal"])),
        tied=draw(st.booleans()),
        bias=draw(st.booleans()),
        attn_bias=draw(st.sampled_from([None, True, False])),
        ln_affine=draw(st.booleans()),
        ln_eps=draw(st.sampled_from([1e-5, 1e-3, 0.5])),
    )


@st.composite
def id_views(draw, cfg):
    b = draw(st.integers(1, 3))
    t_max = cfg.n_ctx if cfg.pos == "learned" else cfg.n_ctx + 8
    t = draw(st.integers(1, t_max))
    ids = draw(hnp.arrays(np.int64, (b, t), elements=st.integers(0, cfg.vocab_size - 1)))
    kind = draw(st.sampled_from(["plain", "1-D", "int32", "fortran", "reversed", "strided"]))
    if kind == "1-D":
        return ids[0], ids[0]
    if kind == "int32":
        return ids.astype(np.int32), ids
    if kind == "fortran":
        return np.asfortranarray(ids), ids
    if kind == "reversed":
        r = np.ascontiguousarray(ids[::-1, ::-1])
        return r[::-1, ::-1], ids
    if kind == "strided":
        big = np.repeat(ids, 2, axis=1)
        return big[:, ::2], ids
    return ids, ids


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_property_forward_matches_reference(data):
    cfg = data.draw(configs())
    w = random_weights(cfg, seed=data.draw(st.integers(0, 2**31)))
    ids, plain = data.draw(id_views(cfg))
    snap = snapshot([ids, w])
    m = Model(w, cfg, dtype="float64", branch_scale=data.draw(st.sampled_from([1.0, 0.5])))
    causal = data.draw(st.booleans())
    out, hidden = m.forward(ids, causal=causal, return_hidden=True)
    ref, ref_hidden = reference.forward(plain, w, cfg, branch_scale=m.branch_scale, causal=causal, return_hidden=True)
    np.testing.assert_allclose(out, ref, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(hidden, ref_hidden, rtol=1e-9, atol=1e-9)
    assert np.array_equal(m.forward(ids, logits="last", causal=causal), out[..., -1, :])
    assert_unchanged([ids, w], snap)


def _invalid_ids(cfg, long_ok=False):
    v, n = cfg.vocab_size, cfg.n_ctx
    ints = st.integers(-(2**63), 2**63 - 1)
    return st.one_of(
        hnp.arrays(np.int64, st.tuples(st.integers(1, 2), st.integers(1, 4)), elements=ints).filter(
            lambda a: a.min() < 0 or a.max() >= v),
        hnp.arrays(st.sampled_from([np.float64, np.float32, np.bool_, np.complex64, np.float16]),
                   st.integers(1, 4), elements=None),
        hnp.arrays(np.int64, st.sampled_from([(0,), (0, 3), (2, 0), (), (1, 1, 2)]), elements=st.integers(0, v - 1)),
        st.lists(st.floats(allow_nan=True), min_size=1, max_size=4),
        st.lists(st.integers(v, 2**80), min_size=1, max_size=3),
        st.text(max_size=4),
        st.none(),
        st.just(np.zeros(n + 1, np.int64)) if cfg.pos == "learned" and not long_ok else st.just(np.array([-1])),
    )


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_property_forward_invalid_ids_raise_documented_errors(data):
    m = data.draw(st.sampled_from([TINY_M32, TINY_M64]))
    fn = data.draw(st.sampled_from(["forward", "token_logprobs", "generate", "step"]))
    # generation crops a prompt longer than n_ctx (documented), so that one is valid there
    bad = data.draw(_invalid_ids(TINY, long_ok=fn == "generate"))
    snap = snapshot(bad)
    with pytest.raises((TypeError, ValueError)):
        if fn == "forward":
            m.forward(bad)
        elif fn == "token_logprobs":
            m.token_logprobs(bad)
        elif fn == "generate":
            m.generate(bad, 2)
        else:
            m.step(m.new_cache(np.asarray(bad).shape[0] if np.asarray(bad).ndim == 2 and np.asarray(bad).shape[0] else 1), bad)
    assert_unchanged(bad, snap)


def _bound(a, b):
    """|c - exact| <= 2 (K + 1) eps sum_k |a_ik| |b_kj|, plus room for subnormal rounding."""
    k = a.shape[1]
    fi = np.finfo(a.dtype)
    with np.errstate(all="ignore"):
        s = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    return 2 * (k + 1) * fi.eps * s + (k + 1) * fi.smallest_subnormal, s


@st.composite
def operand(draw, dtype, rows, cols):
    x = draw(hnp.arrays(dtype, (rows, cols), elements=st.floats(-4, 4, width=32)))
    kind = draw(st.sampled_from(["plain", "fortran", "transposed", "reversed", "strided", "read-only"]))
    if kind == "fortran":
        return np.asfortranarray(x)
    if kind == "transposed":
        return np.ascontiguousarray(x.T).T
    if kind == "reversed":
        return np.ascontiguousarray(x[::-1, ::-1])[::-1, ::-1]
    if kind == "strided":
        return np.repeat(np.repeat(x, 2, axis=0), 3, axis=1)[::2, ::3]
    if kind == "read-only":
        x.setflags(write=False)
    return x


@settings(max_examples=1200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_property_matmul_matches_numpy(data):
    dtype = data.draw(st.sampled_from([np.float32, np.float64]))
    m, k, n = (data.draw(st.integers(0, 40)) for _ in range(3))
    a = data.draw(operand(dtype, m, k))
    b = data.draw(operand(dtype, k, n))
    snap = snapshot([a, b])
    packed = data.draw(st.booleans())
    kern = data.draw(st.sampled_from([None] + KERNELS))
    c = gptcore.matmul(a, gptcore.PackedMatrix(b) if packed else b, kernel=kern)
    assert c.shape == (m, n) and c.dtype == dtype
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert np.all(np.abs(c - exact) <= _bound(a, b)[0])
    assert np.array_equal(c, gptcore.matmul_reference(a, b))
    assert_unchanged([a, b], snap)


_ANY_ARRAY = st.one_of(
    hnp.arrays(
        st.sampled_from([np.float32, np.float64, np.float16, np.int32, np.bool_, np.complex128, np.uint8]),
        hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
        elements=None,
    ),
    st.lists(st.floats(), max_size=3),
    st.none(),
    st.integers(),
    st.text(max_size=3),
)


@settings(max_examples=600, deadline=None)
@given(a=_ANY_ARRAY, b=_ANY_ARRAY, packed=st.booleans())
def test_property_matmul_any_input_raises_or_is_right(a, b, packed):
    snap = snapshot([a, b])
    try:
        bb = gptcore.PackedMatrix(b) if packed else b
        c = gptcore.matmul(a, bb)
    except DOCUMENTED:
        assert_unchanged([a, b], snap)
        return
    assert_unchanged([a, b], snap)
    assert isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
    assert a.dtype == b.dtype and a.dtype in (np.float32, np.float64) and a.ndim == b.ndim == 2
    with np.errstate(all="ignore"):
        exact = a.astype(np.float64) @ b.astype(np.float64)
    bound, size = _bound(a, b)
    assert np.isnan(c)[np.isnan(exact)].all(), "a NaN of the exact product is lost"
    # where no partial sum can overflow the dtype, the result is within the error bound
    safe = np.isfinite(size) & (size < np.finfo(a.dtype).max / 4)
    with np.errstate(all="ignore"):
        assert np.all(np.abs(c - exact)[safe] <= bound[safe])
