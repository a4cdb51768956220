"""The benchmarks' report of the CPU they ran on (benches/_cpu.py): a name that tells the core
even where a virtual machine shows only the product line."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "benches" / "_cpu.py"


@pytest.fixture(scope="module")
def cpu():
    spec = importlib.util.spec_from_file_location("bench_cpu", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cpuinfo(tmp_path, text):
    p = tmp_path / "cpuinfo"
    p.write_text(text)
    return str(p)


def test_x86_name_carries_family_and_model(cpu, tmp_path):
    # Two logical CPUs; the first one's fields are the ones reported.
    text = (
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n"
        "model name\t: AMD EPYC\nflags\t\t: fpu avx2 fma avx512f\n\n"
        "processor\t: 1\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
        "model name\t: Other\n"
    )
    assert cpu.cpu_model(_cpuinfo(tmp_path, text)) == "AMD EPYC (family 26 model 2)"


def test_name_alone_where_the_numbers_are_missing(cpu, tmp_path):
    text = "processor\t: 0\nmodel name\t: Some CPU 3000\n"
    assert cpu.cpu_model(_cpuinfo(tmp_path, text)) == "Some CPU 3000"


def test_arm_without_a_model_name_names_implementer_and_part(cpu, tmp_path, monkeypatch):
    # No 'model name' and no lscpu to ask: the implementer and part numbers.
    def no_lscpu(*args, **kwargs):
        raise OSError("no lscpu")

    monkeypatch.setattr(cpu.subprocess, "run", no_lscpu)
    text = "processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\nFeatures\t: fp asimd\n"
    assert cpu.cpu_model(_cpuinfo(tmp_path, text)) == "implementer 0x41 part 0xd0c"


def test_this_machine_has_a_name(cpu):
    name = cpu.cpu_model()
    assert isinstance(name, str) and name.strip()
