"""The same bits on every architecture: results against digests made on x86-64.

``tests/fixtures/digests.json`` holds SHA-256 digests of matmul products, fixture logits and
greedy tokens computed on x86-64 by ``tests/make_digests.py`` (see its docstring for the
cases). Here they are recomputed on whatever machine runs the tests (natively, or aarch64
under QEMU in ``.ci/arm64.sh``) for every kernel it offers and one and two threads, and must
match bit for bit. float64 forwards go through the C library's ``exp``/``tanh``: their digests
are checked where the C library is the one they were made with, and skip elsewhere.
"""

from __future__ import annotations

import platform

import numpy as np
import pytest

import gptcore
import make_digests as md
from fixture_weights import case_names

DOC = md.load()
KERNELS = gptcore.available_kernels()


def _same_libm_or_skip(dtype: str) -> None:
    if md.section(dtype, "fixture") == "libm" and md.libm_key() != DOC["libm_key"]:
        pytest.skip(f"float64 forwards call the C library's exp/tanh; the digests were made with "
                    f"{DOC['libm_key']}, this is {md.libm_key()} on {platform.machine()}")


def test_the_digest_file_covers_every_case():
    keys = set(DOC["same"]) | set(DOC["libm"])
    assert {k for k, _, _ in md.matmul_operands()} <= keys
    for name in case_names():
        for dtype in md.DTYPES:
            assert {f"logits {name} {dtype}", f"greedy {name} {dtype}"} <= keys
            assert (f"logits {name} {dtype}" in DOC["libm"]) == (dtype == "float64")
    assert set(DOC["inputs"]) == {f"weights {n}" for n in case_names()}


def test_inputs_are_the_same_bits_here():
    """The weights the digests were made from (the gpt2-small-size ones come from numpy's
    sampler) are bit-identical here; otherwise the other digests could not be compared."""
    assert md.input_digests() == DOC["inputs"]


def test_exact_inputs_are_exact():
    for dtype in md.DTYPES:
        x = md.exact_inputs((1000,), dtype, 7)
        bits = 23 if dtype == "float32" else 52
        k = x.astype(np.float64) * 2.0**bits
        assert np.array_equal(k, np.round(k)) and np.abs(k).max() < 2.0**bits
        assert len(np.unique(x)) > 990  # spread, not a constant


def test_a_changed_bit_changes_the_digest():
    a = md.exact_inputs((4, 5), "float32", 1)
    b = a.copy()
    b.view(np.uint32)[2, 3] ^= 1
    assert md.sha256(a) != md.sha256(b)
    assert md.sha256(a) == md.sha256(a.copy(order="F"))  # C order whatever the layout


@pytest.mark.parametrize("threads", md.THREADS)
@pytest.mark.parametrize("kernel", KERNELS)
def test_matmul_digests(kernel, threads):
    gptcore.set_num_threads(threads)
    got = md.matmul_digests(kernel=kernel)
    differ = [k for k, d in got.items() if DOC["same"][k] != d]
    assert not differ, f"{kernel}, {threads} threads: {differ}"


@pytest.mark.parametrize("dtype", md.DTYPES)
@pytest.mark.parametrize("name", case_names())
def test_fixture_logits_and_greedy_digests(name, dtype):
    _same_libm_or_skip(dtype)
    want = DOC[md.section(dtype, "fixture")]
    model = md.fixture_model(name, dtype)  # built once; kernel and threads change under it
    differ = []
    for kernel in KERNELS:
        gptcore.set_kernel(kernel)
        for threads in md.THREADS:
            gptcore.set_num_threads(threads)
            got = md.fixture_digests(model, name, dtype)
            differ += [f"{k} ({kernel}, {threads} threads)" for k, d in got.items() if want[k] != d]
    assert not differ, differ
