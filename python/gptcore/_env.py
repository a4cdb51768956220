"""The environment variables gptcore reads, checked once when the package is imported.

The Rust core reads ``GPTCORE_KERNEL`` (the micro-kernel to start with) and
``GPTCORE_NUM_THREADS`` (the initial thread count) and silently falls back to its default
on a value it cannot use. Here each value is checked against what the extension reports
(``available_kernels()``, the kernels this build can run on this CPU: no list is written
out in Python), and a value that will not be used gets a ``RuntimeWarning`` naming the
variable, the value and what is used instead. An empty value counts as unset.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from typing import Callable, List, Mapping, Optional, Sequence

#: Messages held back when the process is the ``gptcore`` command, which reports them after
#: reading its options (a variable that an option overrides is not worth a warning).
PENDING: List[str] = []

MAX_THREADS = 1024  # the Rust core's cap (threads::MAX_THREADS); set_num_threads checks the same
_INTEGER = re.compile(r"[+-]?[0-9]+")  # a whole number; the Rust core uses one >= 1


def kernel_problem(value: str, available: Sequence[str], probe: Callable[[str], Optional[str]]) -> Optional[str]:
    """Why ``GPTCORE_KERNEL=value`` will not be used, or ``None`` when it will.

    ``available`` lists the kernels this CPU can run, best first; ``probe(name)`` returns the
    extension's complaint about a name (unknown, or known but not supported by this CPU).
    """
    name = value.strip().lower()
    if not name or name in available:
        return None
    reason = probe(name) or "not available on this CPU"
    return f"GPTCORE_KERNEL={value!r} is ignored ({reason}); using {available[0]!r}, the best kernel this CPU runs"


def threads_problem(value: str, default: int) -> Optional[str]:
    """Why ``GPTCORE_NUM_THREADS=value`` will not be used as given, or ``None``."""
    text = value.strip()
    if not text:
        return None
    if not _INTEGER.fullmatch(text):
        return f"GPTCORE_NUM_THREADS={value!r} is not a whole number; using {default} threads (the cores available)"
    n = int(text)
    if n < 1:
        return f"GPTCORE_NUM_THREADS={value!r} is below 1; using {default} threads (the cores available)"
    if n > MAX_THREADS:
        return f"GPTCORE_NUM_THREADS={value!r} is above the maximum; using {MAX_THREADS} threads"
    return None


def problems(environ: Mapping[str, str], native) -> List[str]:
    """The warnings the environment deserves, given the extension module ``native``."""
    found = []
    if "GPTCORE_KERNEL" in environ:
        available = list(native.available_kernels())

        def probe(name: str) -> Optional[str]:
            # The extension's own verdict on the name, leaving the active kernel as the core
            # would choose it with this value ignored: the detected best.
            try:
                native.set_kernel(name)
            except ValueError as exc:
                return str(exc)
            finally:
                native.set_kernel(None)
            return None

        msg = kernel_problem(environ["GPTCORE_KERNEL"], available, probe)
        if msg:
            found.append(msg)
    if "GPTCORE_NUM_THREADS" in environ:
        value = environ["GPTCORE_NUM_THREADS"]
        if threads_problem(value, 1) is not None:  # ask the core its default only when needed
            msg = threads_problem(value, native.get_num_threads())
            if msg:
                found.append(msg)
    return found


def running_as_command() -> bool:
    """Whether this process is the ``gptcore`` command: its console script, or
    ``python -m gptcore`` / ``python -m gptcore.cli``."""
    if sys.argv and os.path.basename(sys.argv[0]) in ("gptcore", "gptcore.exe"):
        return True
    orig = list(getattr(sys, "orig_argv", ()) or ())
    return "-m" in orig[:-1] and orig[orig.index("-m") + 1] in ("gptcore", "gptcore.cli")


def check(environ: Mapping[str, str], native, *, defer: bool = False) -> None:
    """Warn about each problem (``RuntimeWarning``), or with ``defer`` keep the messages in
    ``PENDING`` for the command line to report (``take_pending``)."""
    for msg in problems(environ, native):
        if defer:
            PENDING.append(msg)
        else:
            warnings.warn(msg, RuntimeWarning, stacklevel=3)


def take_pending(threads_given: bool) -> List[str]:
    """The held-back messages, without the thread variable's when the command line sets the
    thread count itself (``--threads``); empties ``PENDING``."""
    out = [m for m in PENDING if not (threads_given and m.startswith("GPTCORE_NUM_THREADS="))]
    PENDING.clear()
    return out
