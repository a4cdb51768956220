"""The CPU the benchmarks ran on, for their reports: its name and the SIMD flags that matter.

Only the standard library, so that the tests can read it without the benchmarks' extras.
"""

from __future__ import annotations

import platform
import subprocess
from typing import List


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's name from /proc/cpuinfo ('model name', or on arm64 the implementer and part),
    else from lscpu, else platform.processor(). On x86 the vendor's family and model numbers
    follow the name: a virtual machine may show only "AMD EPYC" or "Intel Xeon", which names no
    core (AMD's family 25 is Zen 3 or Zen 4, family 26 Zen 5)."""
    fields = {}
    try:
        with open(cpuinfo) as f:
            for line in f:
                if ":" in line:
                    key, value = (x.strip() for x in line.split(":", 1))
                    fields.setdefault(key, value)
    except OSError:
        pass
    if fields.get("model name"):
        name = fields["model name"]
        if fields.get("cpu family") and fields.get("model"):
            name += f" (family {fields['cpu family']} model {fields['model']})"
        return name
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    if "CPU part" in fields:
        return f"implementer {fields.get('CPU implementer', '?')} part {fields['CPU part']}"
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_flags() -> List[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    have = set(line.split(":", 1)[1].split())
                    return [x for x in ("avx2", "fma", "avx512f", "asimd", "sve") if x in have]
    except OSError:
        pass
    return []
