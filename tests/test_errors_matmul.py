"""Hostile inputs for matmul, PackedMatrix, matmul_reference and the kernel and thread
settings: a right answer or a clear exception, never a crash or a changed input.

The shared helpers and the rules are in ``hostile.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import gptcore
from hostile import (
    DOCUMENTED, IDS, KERNELS, TINY_M64, assert_unchanged, expect_isolated, snapshot, structured_field, unaligned,
)


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
# property tests
# ------------------------------------------------------------------------------------------

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


def test_fma_rate_of_every_kernel_and_its_bad_arguments():
    # The benches' peak: a positive, finite rate for every kernel this CPU runs, both dtypes;
    # bad arguments are ValueErrors naming the argument.
    from gptcore import _native

    for kern in gptcore.available_kernels():
        for dtype in ("float32", "float64"):
            r = _native.fma_rate(dtype, kern, 0.01)
            assert np.isfinite(r) and r > 0, (kern, dtype, r)
    with pytest.raises(ValueError, match="dtype must be"):
        _native.fma_rate("float16")
    for bad in (0.0, -1.0, float("nan"), 1e9):
        with pytest.raises(ValueError, match="seconds must be"):
            _native.fma_rate("float32", None, bad)
    with pytest.raises(ValueError, match="kernel must be one of"):
        _native.fma_rate("float32", "sse9")
    missing = [k for k in ("avx512", "avx2", "neon") if k not in gptcore.available_kernels()]
    for k in missing:
        with pytest.raises(ValueError, match="not supported"):
            _native.fma_rate("float32", k, 0.01)


def test_read_rate_of_every_kernel_and_thread_count_and_its_bad_arguments():
    # The benches' read bandwidth: a positive, finite rate for every kernel this CPU runs, on
    # one thread and on two, the thread count left as it was; bad arguments are ValueErrors
    # naming the argument.
    from gptcore import _native

    before = gptcore.get_num_threads()
    try:
        for threads in (1, 2):
            gptcore.set_num_threads(threads)
            for kern in gptcore.available_kernels():
                for nbytes in (1, 4 << 20):
                    r = _native.read_rate(nbytes, kern, 0.01)
                    assert np.isfinite(r) and r > 0, (threads, kern, nbytes, r)
            assert gptcore.get_num_threads() == threads
    finally:
        gptcore.set_num_threads(before)
    for bad in (0, -1, (4 << 30) + 1):
        with pytest.raises(ValueError, match="nbytes must be"):
            _native.read_rate(bad)
    for bad in (0.0, -1.0, float("nan"), 1e9):
        with pytest.raises(ValueError, match="seconds must be"):
            _native.read_rate(1 << 20, None, bad)
    with pytest.raises(ValueError, match="kernel must be one of"):
        _native.read_rate(1 << 20, "sse9")
    missing = [k for k in ("avx512", "avx2", "neon") if k not in gptcore.available_kernels()]
    for k in missing:
        with pytest.raises(ValueError, match="not supported"):
            _native.read_rate(1 << 20, k, 0.01)


def test_matmul_with_a_kernel_this_cpu_cannot_run_is_a_value_error():
    # Forcing a kernel the CPU lacks is the caller's error: a ValueError naming it and the
    # kernels that run here, before any work, for every form of b (not an internal error).
    missing = [k for k in ("avx512", "avx2", "neon") if k not in gptcore.available_kernels()]
    assert missing  # x86-64 has no NEON, ARM no AVX
    rng = np.random.default_rng(5)
    b = rng.standard_normal((16, 40)).astype(np.float32)
    forms = [b, gptcore.PackedMatrix(b), gptcore.PackedMatrix(b, dtype="bfloat16")]
    for k in missing:
        for m in (1, 5, 100, 300):
            a = rng.standard_normal((m, 16)).astype(np.float32)
            for bb in forms + [b.astype(np.float64)]:
                aa = a.astype(np.float64) if getattr(bb, "dtype", None) == np.float64 else a
                with pytest.raises(ValueError, match="not supported on this CPU") as info:
                    gptcore.matmul(aa, bb, kernel=k)
                assert k in str(info.value) and gptcore.available_kernels()[0] in str(info.value)
