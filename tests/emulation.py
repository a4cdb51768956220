"""Whether the tests run under an instruction-set emulator (QEMU's user mode, as in
``.ci/arm64.sh``), where everything runs ten to a hundred times slower than natively and the
emulator's own memory counts in the process's resident set.

A few tests guard against hangs or runaway memory with limits a native run meets easily;
under emulation those limits measure the emulator, not gptcore, so such tests skip there
(``pytest.skip`` with the reason, shown by ``-ra``). They are never loosened natively.

Emulation is recognised by ``GPTCORE_EMULATED=1`` (the CI script sets it inside its
emulated root filesystem) or, without it, by an aarch64 process seeing an x86 processor in
/proc/cpuinfo (QEMU's user mode passes the host's file through).
"""

from __future__ import annotations

import os
import platform

import pytest


def _x86_host_under_arm() -> bool:
    """QEMU's user mode reports the emulated machine (uname says aarch64) but passes the host's
    /proc/cpuinfo through, which names an x86 vendor no ARM processor has."""
    if platform.machine() not in ("aarch64", "arm64"):
        return False
    try:
        with open("/proc/cpuinfo", "r", encoding="ascii", errors="replace") as fh:
            info = fh.read(8192)
    except OSError:
        return False
    return "GenuineIntel" in info or "AuthenticAMD" in info


EMULATED: bool = os.environ.get("GPTCORE_EMULATED", "") == "1" or _x86_host_under_arm()


def skip_if_emulated(what: str) -> None:
    """Skip the running test under emulation, saying which guard emulation cannot meet."""
    if EMULATED:
        pytest.skip(f"under emulation ({platform.machine()} via QEMU): {what}")
