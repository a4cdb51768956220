"""Shared pieces of the hostile-input tests (``tests/test_errors_*.py``).

Whatever a caller passes, gptcore must either compute the right answer or raise a clear
Python exception (TypeError, ValueError, MemoryError, FileNotFoundError) that names the
argument. It must never crash the interpreter, read outside an array, modify an input, or
return a silently wrong result. Cases that could kill the process (huge allocations) run in a
separate interpreter (:func:`expect_isolated`), so a crash shows up as a failed test rather
than a dead test run.
"""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

import gptcore
from gptcore import GPTConfig, Model

KERNELS = gptcore.available_kernels()
DOCUMENTED = (TypeError, ValueError, MemoryError)


def has_module(name):
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


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


# Token ids that every entry point taking ids must refuse (for TINY: vocab 13, n_ctx 16).
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
