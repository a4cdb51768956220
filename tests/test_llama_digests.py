"""The same Llama-family bits on every architecture: results against digests made on x86-64
(``tests/fixtures/llama_digests.json``, written by ``tests/make_llama_digests.py``; see its
docstring), recomputed here for every kernel and one and two threads. They go through the C
library's ``pow``, ``sin``, ``cos`` (the rotary tables) and, in float64, ``exp``: checked where
the C library is the one they were made with."""

from __future__ import annotations

import platform

import pytest

import gptcore
import make_llama_digests as mld
from make_digests import libm_key

DOC = mld.load()


def test_the_digest_file_covers_every_folder():
    keys = set(DOC["libm"])
    for name in mld.FOLDERS:
        for label in ("float32", "float64", "bfloat16"):
            assert {f"logits {name} {label}", f"greedy {name} {label}"} <= keys


@pytest.mark.parametrize("kernel", gptcore.available_kernels())
@pytest.mark.parametrize("threads", mld.THREADS)
def test_llama_results_match_the_digests(kernel, threads):
    if libm_key() != DOC["libm_key"]:
        pytest.skip(f"the rotary tables call the C library's pow/sin/cos; the digests were made with "
                    f"{DOC['libm_key']}, this is {libm_key()} on {platform.machine()}")
    before = gptcore.get_num_threads()
    try:
        gptcore.set_kernel(kernel)
        gptcore.set_num_threads(threads)
        got = mld.all_digests()
    finally:
        gptcore.set_kernel(None)
        gptcore.set_num_threads(before)
    bad = [k for k, want in DOC["libm"].items() if got.get(k) != want]
    assert not bad, f"{kernel}, {threads} threads: {bad}"
