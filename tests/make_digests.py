"""Digests of gptcore results that must be the same bits on every architecture.

    python tests/make_digests.py            # on x86-64: (re)write tests/fixtures/digests.json
    python tests/make_digests.py --check    # anywhere: recompute for every kernel and thread
                                            # count and list what differs

Each digest is the SHA-256 of an array's raw little-endian bytes in C order, so two machines
agree on a digest exactly when they agree on every bit. The cases:

- ``matmul``: products of several shapes in float32 and float64. The inputs are integers
  from a fixed-seed PCG64 stream divided by a power of two, so they are exact on every machine
  (no floating-point rounding and no C library goes into making them); the products round at
  every step of each element's fused multiply-add chain.
- ``logits``: the forward pass of the fixture models (``tests/fixtures``) in float32 and
  float64. The small cases' weights are stored; ``gpt2-small-seed124``'s are rebuilt from the
  fixtures' recipe with numpy's normal sampler, so the digests of all weights are kept under
  ``inputs``: a machine where numpy draws other bits says so instead of blaming gptcore.
- ``greedy``: the tokens greedy decoding (prefill, then one cached step per token) appends to
  each fixture's prompt, in both precisions (for ``gpt2-small-seed124`` a shorter one).

float32 uses only IEEE arithmetic and gptcore's own ``exp``/``tanh``, so its digests are one
promise for every machine (section ``same``). float64's softmax and GELU call the C library's
``exp`` and ``tanh``, which another C library may round differently in the last bit: those
digests (section ``libm``) are checked where the C library is the one they were made with
(``libm_key``, e.g. ``glibc 2.36``). glibc builds the same ``exp``/``tanh`` code for x86-64
and aarch64; on glibc 2.36 the float64 digests agree across the two (checked under QEMU).

``tests/test_digests.py`` runs the same comparison as tests.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import gptcore  # noqa: E402
from fixture_weights import case_names, fixture_weights, load_case  # noqa: E402

DIGESTS = HERE / "fixtures" / "digests.json"
FORMAT = 1
DTYPES = ("float32", "float64")
THREADS = (1, 2)

# (M, K, N): tiny, odd edges around the tile sizes, one row (a decode step), wider blocks.
MATMUL_SHAPES: List[Tuple[int, int, int]] = [
    (1, 1, 1),
    (3, 5, 7),
    (7, 13, 5),
    (8, 64, 12),
    (17, 33, 29),
    (1, 257, 300),
    (6, 96, 130),
    (64, 64, 64),
    (65, 129, 47),
    (100, 300, 90),
    (2, 3072, 40),  # long k: several depth blocks, one chain across them
    (20, 1100, 33),
]
# The gpt2-small-size model is slow under emulation (seconds per position): its logits digest
# covers the first GPT2_T positions of the fixture's ids (more rows than the one-to-eight-row
# kernels take; the model is causal, so these are exactly the full forward's first rows) and
# its greedy digest GPT2_NEW tokens after the first GPT2_PROMPT of the fixture's prompt.
GPT2_T, GPT2_PROMPT, GPT2_NEW = 9, 4, 4


def sha256(a: np.ndarray) -> str:
    """SHA-256 of the array's little-endian bytes in C order."""
    a = np.ascontiguousarray(a)
    return hashlib.sha256(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()).hexdigest()


def exact_inputs(shape: Tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    """Values k / 2**bits for integers |k| < 2**bits drawn from PCG64(seed): exact in dtype."""
    bits = 23 if dtype == "float32" else 52
    k = np.random.default_rng(seed).integers(-(2**bits), 2**bits, size=shape, dtype=np.int64)
    return (k.astype(np.float64) / 2.0**bits).astype(dtype)


def libm_key() -> str:
    """Where float64's exp/tanh come from: the C library and its version (``glibc 2.36``)."""
    lib, ver = platform.libc_ver()
    return f"{lib} {ver}".strip() or "unknown"


def matmul_operands() -> Iterator[Tuple[str, np.ndarray, np.ndarray]]:
    """(key, a, b) for every matmul digest."""
    for i, (m, k, n) in enumerate(MATMUL_SHAPES):
        for dtype in DTYPES:
            yield f"matmul {dtype} {m}x{k}x{n}", exact_inputs((m, k), dtype, 2 * i), exact_inputs((k, n), dtype, 2 * i + 1)


def matmul_digests(kernel=None) -> Dict[str, str]:
    return {key: sha256(gptcore.matmul(a, b, kernel=kernel)) for key, a, b in matmul_operands()}


def fixture_model(name: str, dtype: str) -> gptcore.Model:
    config, w = fixture_weights(name)
    return gptcore.Model(w, config, dtype=dtype)


def fixture_digests(model: gptcore.Model, name: str, dtype: str) -> Dict[str, str]:
    """The logits and greedy digests of one fixture case with the current kernel and threads."""
    _, arr = load_case(name)
    if name == "gpt2-small-seed124":
        ids, prompt, new = arr["ids"][..., :GPT2_T], arr["prompt"][:GPT2_PROMPT], GPT2_NEW
    else:
        ids, prompt, new = arr["ids"], arr["prompt"], len(arr["greedy"])
    greedy = model.generate(prompt, new, greedy=True)
    return {
        f"logits {name} {dtype}": sha256(model.forward(ids)),
        f"greedy {name} {dtype}": sha256(greedy),
    }


def input_digests() -> Dict[str, str]:
    """Digests of every fixture's weights (names and float64 values, in name order)."""
    out = {}
    for name in case_names():
        _, w = fixture_weights(name)
        h = hashlib.sha256()
        for k in sorted(w):
            h.update(k.encode() + b"\0" + np.ascontiguousarray(w[k], dtype="<f8").tobytes())
        out[f"weights {name}"] = h.hexdigest()
    return out


def section(dtype: str, group: str) -> str:
    """matmul never calls the C library; float64 logits (and the tokens chosen from them) do."""
    return "libm" if dtype == "float64" and group != "matmul" else "same"


def all_digests() -> Dict[str, Dict[str, str]]:
    """Every digest with the current kernel and thread count, by section."""
    out: Dict[str, Dict[str, str]] = {"same": {}, "libm": {}}
    for key, d in matmul_digests().items():
        out["same"][key] = d
    for name in case_names():
        for dtype in DTYPES:
            for key, d in fixture_digests(fixture_model(name, dtype), name, dtype).items():
                out[section(dtype, "fixture")][key] = d
    return out


def load() -> dict:
    with open(DIGESTS, "r", encoding="utf-8") as fh:
        return json.load(fh)


def write() -> int:
    if platform.machine() not in ("x86_64", "AMD64"):
        print("the digests are made on x86-64; other machines check against them", file=sys.stderr)
        return 2
    got = all_digests()
    doc = {
        "format": FORMAT,
        "about": "SHA-256 of raw little-endian result bytes (C order); written by tests/make_digests.py, "
                 "checked by tests/test_digests.py",
        "made_on": {"machine": platform.machine(), "kernel": gptcore.kernel(), "numpy": np.__version__},
        "libm_key": libm_key(),
        "inputs": input_digests(),
        "same": got["same"],
        "libm": got["libm"],
    }
    DIGESTS.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {DIGESTS}: {len(got['same'])} + {len(got['libm'])} digests")
    return 0


def check() -> int:
    doc = load()
    same_libm = libm_key() == doc["libm_key"]
    print(f"{platform.machine()}, {libm_key()} (digests made with {doc['libm_key']}), "
          f"kernels {gptcore.available_kernels()}")
    bad = [key for key, d in input_digests().items() if doc["inputs"].get(key) != d]
    for key in bad:
        print(f"INPUT DIFFERS: {key} (numpy's sampler gives other bits here)")
    checked = 0
    for kernel in gptcore.available_kernels():
        gptcore.set_kernel(kernel)
        for threads in THREADS:
            gptcore.set_num_threads(threads)
            got = all_digests()
            for sec in ("same", "libm"):
                for key, want in doc[sec].items():
                    checked += 1
                    if got[sec].get(key) != want:
                        bad.append(key)
                        print(f"DIFFERS [{sec}] kernel={kernel} threads={threads}: {key}")
    gptcore.set_kernel(None)
    if not same_libm:
        print("(another C library: float64 digests through exp/tanh may differ in the last bit)")
    print(f"{checked - len(bad)} of {checked} digests agree")
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed file instead of writing it")
    return check() if ap.parse_args(argv).check else write()


if __name__ == "__main__":
    sys.exit(main())
