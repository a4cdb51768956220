"""GGUF files mutated at random: reading or loading one gives a working model or a ValueError,
never another exception, a crash or a read past the file. The mutator and the target are shared
with the fuzzer (``fuzz/fuzz_loader.py --target gguf``, see fuzz/README.md); every input it found
is replayed here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FUZZ = Path(__file__).resolve().parent.parent / "fuzz"
sys.path.insert(0, str(FUZZ))
import gguf_target as gt  # noqa: E402

SEEDS = gt.seeds()
FINDINGS = sorted(p for p in (FUZZ / "corpus" / "gguf-crashers").glob("*") if p.is_file() and not p.name.startswith("."))
_WORK = None


def _work() -> "gt.Workdir":
    global _WORK
    if _WORK is None:
        _WORK = gt.Workdir()
    return _WORK


@pytest.fixture(scope="module", autouse=True)
def _cleanup_workdir():
    yield
    if _WORK is not None:
        _WORK.close()


def test_seeds_load():
    """The seeds are valid files: each loads all five ways (Q8_0 / Q4_0 files computing with
    their blocks by default)."""
    for name, data in SEEDS.items():
        assert gt.check_bytes(data, _work()) == 5, name


def test_the_header_walker_finds_every_field():
    data = SEEDS["tok-untied-f32"]
    kinds = [k for _, _, k in gt.fields(data)]
    assert kinds[:3] == ["version", "tensor count", "metadata count"]
    n_kv = int.from_bytes(data[16:24], "little")
    n_t = int.from_bytes(data[8:16], "little")
    assert kinds.count("key length") == n_kv and kinds.count("name length") == n_t == kinds.count("offset")


@settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.sampled_from(sorted(SEEDS)), rng=st.randoms(use_true_random=False), depth=st.integers(1, 3))
def test_mutated_gguf_files_load_or_raise_value_error(seed, rng, depth):
    data = SEEDS[seed]
    for _ in range(depth):
        data = gt.mutate(data, rng)
    gt.check_bytes(data, _work())  # raises anything outside gt.ALLOWED; a model that loads must run


@pytest.mark.parametrize("path", FINDINGS, ids=[p.name for p in FINDINGS])
def test_fuzzer_findings_stay_fixed(path):
    gt.check_bytes(path.read_bytes(), _work())


def test_there_are_findings_to_replay():
    assert len(FINDINGS) >= 3  # the three found while the reader was written (fuzz/README.md)
