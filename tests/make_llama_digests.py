"""Digests of Llama-family results that must be the same bits on every architecture.

    python tests/make_llama_digests.py            # on x86-64: (re)write tests/fixtures/llama_digests.json
    python tests/make_llama_digests.py --check    # anywhere: recompute for every kernel and thread
                                                  # count and list what differs

Each digest is the SHA-256 of an array's raw little-endian bytes in C order (as in
``make_digests.py``): the logits of each Llama-family fixture folder (``tests/fixtures``:
``llama-tiny``, ``qwen2-tiny``, ``smollm2-tiny``, ``llama3-rope``, ``mistral-tiny``) on its
``expected.npz`` ids in float32 and float64, the logits of its bfloat16-storage model, and the
tokens greedy decoding (prefill, then one cached step per token) appends to its prompt.

Every one of them depends on the C library: the rotary frequencies (``pow``) and the
cosines and sines of the positions (``cos``, ``sin``) are computed in float64 by it, and
float64's SiLU and softmax call its ``exp``. They are checked where the C library is the one
they were made with (``libm_key``); glibc builds the same code for x86-64 and aarch64, which
``.ci/arm64.sh`` checks under QEMU. ``tests/test_llama_digests.py`` runs the comparison as
tests.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path
from typing import Dict

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import gptcore  # noqa: E402
from make_digests import libm_key, sha256  # noqa: E402

DIGESTS = HERE / "fixtures" / "llama_digests.json"
FOLDERS = ("llama-tiny", "qwen2-tiny", "smollm2-tiny", "llama3-rope", "mistral-tiny")
THREADS = (1, 2)
GREEDY = 6  # tokens after each fixture's prompt (a few cached decode steps, quick under emulation)


def folder_digests(name: str) -> Dict[str, str]:
    """The digests of one folder with the current kernel and thread count."""
    folder = HERE / "fixtures" / name
    e = np.load(folder / "expected.npz")
    out = {}
    for label, kw in (("float32", dict(weight_dtype="float32")), ("float64", dict(dtype="float64")),
                      ("bfloat16", dict(weight_dtype="bfloat16"))):
        m = gptcore.load(folder, tokenizer=None, **kw)
        out[f"logits {name} {label}"] = sha256(m.forward(e["ids"]))
        out[f"greedy {name} {label}"] = sha256(m.generate(e["prompt"], GREEDY, greedy=True))
    return out


def all_digests() -> Dict[str, str]:
    out: Dict[str, str] = {}
    for name in FOLDERS:
        out.update(folder_digests(name))
    return out


def load() -> dict:
    return json.loads(DIGESTS.read_text(encoding="utf-8"))


def write() -> int:
    if platform.machine() not in ("x86_64", "AMD64"):
        print("the digests are made on x86-64; other machines check against them", file=sys.stderr)
        return 2
    doc = {
        "about": "SHA-256 of raw little-endian result bytes (C order); written by tests/make_llama_digests.py, "
                 "checked by tests/test_llama_digests.py",
        "made_on": {"machine": platform.machine(), "kernel": gptcore.kernel(), "numpy": np.__version__},
        "libm_key": libm_key(),
        "libm": all_digests(),
    }
    DIGESTS.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {DIGESTS}: {len(doc['libm'])} digests")
    return 0


def check() -> int:
    doc = load()
    print(f"{platform.machine()}, {libm_key()} (digests made with {doc['libm_key']}), "
          f"kernels {gptcore.available_kernels()}")
    bad, checked = [], 0
    for kernel in gptcore.available_kernels():
        gptcore.set_kernel(kernel)
        for threads in THREADS:
            gptcore.set_num_threads(threads)
            got = all_digests()
            for key, want in doc["libm"].items():
                checked += 1
                if got.get(key) != want:
                    bad.append(key)
                    print(f"DIFFERS kernel={kernel} threads={threads}: {key}")
    gptcore.set_kernel(None)
    print(f"{checked - len(bad)} of {checked} digests agree")
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed file instead of writing it")
    return check() if ap.parse_args(argv).check else write()


if __name__ == "__main__":
    sys.exit(main())
