"""One kind of mistake, one exception type, everywhere (the rule in gptcore/_checks.py and on
the API page): TypeError for an argument of the wrong type, ValueError for the right type
with an unsupported value. And the environment variables the core reads are checked at
import, with a warning naming the variable, the value and what is used instead."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gptcore
from gptcore import _env

CFG = gptcore.GPTConfig(vocab_size=11, n_ctx=8, d_model=8, n_heads=2, n_layers=1)
W = gptcore.init_weights(CFG, seed=1)
IDS = np.array([1, 2, 3])


def _calls(tmp_path):
    return {
        "Model": lambda dt: gptcore.Model(W, CFG, dtype=dt),
        "forward": lambda dt: gptcore.forward(IDS, W, CFG, dtype=dt),
        "init_weights": lambda dt: gptcore.init_weights(CFG, dtype=dt),
        "save_safetensors": lambda dt: gptcore.save_safetensors(W, CFG, tmp_path / "m", dtype=dt),
    }


BAD_VALUES = ["bfloat16", "int8", "float128x", "f32", np.int8, np.dtype("int32"), np.complex64]
BAD_TYPES = [3, 2.5, ["float32"], object()]


@pytest.mark.parametrize("dtype", BAD_VALUES, ids=repr)
@pytest.mark.parametrize("fn", ["Model", "forward", "init_weights", "save_safetensors"])
def test_unsupported_dtype_is_a_value_error(tmp_path, fn, dtype):
    with pytest.raises(ValueError, match=r"dtype must be one of 'float"):
        _calls(tmp_path)[fn](dtype)


@pytest.mark.parametrize("fn", ["Model", "forward", "init_weights"])
def test_float16_and_bfloat16_alike(tmp_path, fn):
    """The two half-precision names fail the same way, naming themselves."""
    errors = []
    for dt in ("float16", "bfloat16"):
        with pytest.raises(Exception) as info:
            _calls(tmp_path)[fn](dt)
        errors.append(info.value)
    assert [type(e) for e in errors] == [ValueError, ValueError]
    assert "'float16'" in str(errors[0]) and "'bfloat16'" in str(errors[1])
    assert str(errors[0]).replace("float16", "X") == str(errors[1]).replace("bfloat16", "X")


@pytest.mark.parametrize("dtype", BAD_TYPES, ids=repr)
@pytest.mark.parametrize("fn", ["Model", "forward", "init_weights", "save_safetensors"])
def test_dtype_of_the_wrong_type_is_a_type_error(tmp_path, fn, dtype):
    with pytest.raises(TypeError, match="dtype must be a dtype name or a numpy dtype"):
        _calls(tmp_path)[fn](dtype)


def test_accepted_dtype_spellings(tmp_path):
    """Strings, numpy dtypes and numpy scalar types all name a dtype."""
    for dt in ("float32", np.float32, np.dtype("float32"), "f4"):
        assert gptcore.Model(W, CFG, dtype=dt).dtype == np.float32
    assert gptcore.init_weights(CFG, dtype=float)["wte.weight"].dtype == np.float64
    gptcore.save_safetensors(W, CFG, tmp_path / "h", dtype="float16")  # files may hold float16


def test_no_silent_fallback_for_unknown_dtype():
    """np.dtype(None) is float64: an unparseable dtype must not slip through as None."""
    with pytest.raises(ValueError, match="'junk'"):
        gptcore.init_weights(CFG, dtype="junk")


# ------------------------------------------------------------------------------------------
# Environment variables


class _FakeNative:
    """The extension's kernel and thread calls, on a CPU that runs only avx2 and portable."""

    def __init__(self, known=("avx512", "avx2", "portable"), available=("avx2", "portable"), threads=6):
        self.known, self.available, self.threads = known, list(available), threads
        self.active = available[0]

    def available_kernels(self):
        return list(self.available)

    def set_kernel(self, name):
        if name is None:
            self.active = self.available[0]
        elif name not in self.known:
            raise ValueError(f"kernel must be one of {self.known}; got {name!r}")
        elif name not in self.available:
            raise ValueError(f"kernel {name!r} is not supported on this CPU")
        else:
            self.active = name
        return self.active

    def get_num_threads(self):
        return self.threads


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"GPTCORE_KERNEL": "avx512"}, ["GPTCORE_KERNEL='avx512'", "not supported on this CPU", "using 'avx2'"]),
        ({"GPTCORE_KERNEL": "foo"}, ["GPTCORE_KERNEL='foo'", "must be one of", "using 'avx2'"]),
        ({"GPTCORE_NUM_THREADS": "abc"}, ["GPTCORE_NUM_THREADS='abc'", "not a whole number", "using 6 threads"]),
        ({"GPTCORE_NUM_THREADS": "0"}, ["GPTCORE_NUM_THREADS='0'", "below 1", "using 6 threads"]),
        ({"GPTCORE_NUM_THREADS": "-3"}, ["GPTCORE_NUM_THREADS='-3'", "below 1", "using 6 threads"]),
        ({"GPTCORE_NUM_THREADS": "-1"}, ["GPTCORE_NUM_THREADS='-1'", "below 1", "using 6 threads"]),
        ({"GPTCORE_NUM_THREADS": "2.5"}, ["GPTCORE_NUM_THREADS='2.5'", "not a whole number"]),
        ({"GPTCORE_NUM_THREADS": "5000"}, ["GPTCORE_NUM_THREADS='5000'", "using 1024 threads"]),
    ],
)
def test_bad_environment_warns(env, expected):
    native = _FakeNative()
    found = _env.problems(env, native)
    assert len(found) == 1, found
    for part in expected:
        assert part in found[0], (part, found[0])
    assert native.active == "avx2"  # the probe leaves the core's own fallback in place


@pytest.mark.parametrize(
    "env",
    [{}, {"GPTCORE_KERNEL": "avx2"}, {"GPTCORE_KERNEL": " Portable "}, {"GPTCORE_KERNEL": ""},
     {"GPTCORE_NUM_THREADS": "3"}, {"GPTCORE_NUM_THREADS": " 1 "}, {"GPTCORE_NUM_THREADS": "+2"}],
)
def test_good_environment_is_quiet(env):
    assert _env.problems(env, _FakeNative()) == []


def test_known_kernel_names_come_from_the_extension():
    """A kernel this build and CPU run (a new one included) is never warned about."""
    native = _FakeNative(known=("neon", "portable"), available=("neon", "portable"))
    assert _env.problems({"GPTCORE_KERNEL": "neon"}, native) == []
    real = [k for k in gptcore.available_kernels()]
    for k in real:
        assert _env.problems({"GPTCORE_KERNEL": k}, gptcore._native) == []


def _import_with(env):
    full = dict(os.environ, **env)
    full["PYTHONPATH"] = os.pathsep.join([str(Path(gptcore.__file__).parent.parent)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    code = "import gptcore; print(gptcore.kernel(), gptcore.get_num_threads())"
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=120)


def test_import_warns_once_naming_variable_value_and_fallback():
    r = _import_with({"GPTCORE_KERNEL": "foo", "GPTCORE_NUM_THREADS": "abc"})
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stderr.splitlines() if "RuntimeWarning" in l]
    assert len(lines) == 2, r.stderr
    best = gptcore.available_kernels()[0]
    assert any("GPTCORE_KERNEL='foo'" in l and repr(best) in l for l in lines), lines
    assert any("GPTCORE_NUM_THREADS='abc'" in l and "threads" in l for l in lines), lines
    kernel, threads = r.stdout.split()
    assert kernel == best and int(threads) >= 1


def test_import_is_quiet_with_good_values():
    k = gptcore.available_kernels()[-1]
    r = _import_with({"GPTCORE_KERNEL": k, "GPTCORE_NUM_THREADS": "1"})
    assert r.returncode == 0 and "Warning" not in r.stderr, r.stderr
    assert r.stdout.split() == [k, "1"]
