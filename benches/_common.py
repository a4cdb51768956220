"""Shared pieces of the benchmark scripts: imports, thread pinning, timing, machine numbers.

Every script prints medians of several samples. Implementations under comparison are timed
alternately inside one process (A, B, B, A, ...) so that slow phases of a shared machine hit
both sides alike.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent

# Use the package of this checkout (python/gptcore with the built extension linked in) when it
# is there; otherwise whatever `import gptcore` finds.
if (ROOT / "python" / "gptcore").is_dir() and str(ROOT / "python") not in sys.path:
    sys.path.insert(0, str(ROOT / "python"))

import numpy as np  # noqa: E402
from threadpoolctl import ThreadpoolController, threadpool_info  # noqa: E402

import gptcore  # noqa: E402

# ---------------------------------------------------------------------------------------------
# The machine's numbers (Zen 4, 2 cores). Peak: two 256-bit FMA pipes per core at ~3.66 GHz,
# i.e. 32 f32 or 16 f64 FLOPs per cycle. Bandwidth: measured stream-read rates of this machine.
PEAK_PER_CORE = {"float32": 117e9, "float64": 58e9}
READ_BANDWIDTH = {1: 28e9, 2: 33e9}
L3_BYTES = 32 << 20
# Weight sets larger than this come from memory, not from the L3 (twice the L3 size).
STREAM_BYTES = 64 << 20


def peak_flops(dtype: str, threads: int) -> float:
    return PEAK_PER_CORE[dtype] * threads


def bandwidth(threads: int) -> float:
    return READ_BANDWIDTH.get(threads, READ_BANDWIDTH[max(READ_BANDWIDTH)])


# ---------------------------------------------------------------------------------------------
# Threads

_controller: Optional[ThreadpoolController] = None
_limits = None


def set_threads(n: int, torch_module=None) -> None:
    """Pin every library in the process to ``n`` threads: gptcore, the BLAS/OpenMP pools that
    threadpoolctl sees (numpy's OpenBLAS, torch's OpenMP) and torch's intra-op pool."""
    global _controller, _limits
    gptcore.set_num_threads(n)
    if _controller is None:
        _controller = ThreadpoolController()
    if _limits is not None:
        _limits.restore_original_limits()
    _limits = _controller.limit(limits=n)
    if torch_module is not None:
        torch_module.set_num_threads(n)


def parse_int_list(text: str) -> List[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def parse_str_list(text: str) -> List[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


# ---------------------------------------------------------------------------------------------
# Reports


def environment_report(extra: Sequence[str] = ()) -> str:
    """A few lines naming the CPU, the libraries, the BLAS kernels and suspicious settings."""
    lines = []
    cpu = "unknown CPU"
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and cpu == "unknown CPU":
                    cpu = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    isa = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16") if f in flags]
    lines.append(f"- CPU: {cpu}, {os.cpu_count()} logical cores, {' '.join(isa) or 'no AVX flags seen'}")
    lines.append(
        f"- Python {platform.python_version()}, numpy {np.__version__}, gptcore {gptcore.__version__} "
        f"({Path(gptcore.__file__).parent}), kernel {gptcore.kernel()} of {gptcore.available_kernels()}"
    )
    for info in threadpool_info():
        arch = info.get("architecture") or info.get("corename") or "-"
        lines.append(
            f"- threadpoolctl: {info.get('internal_api')} {info.get('version') or ''} "
            f"core type/kernel {arch}, threading {info.get('threading_layer', '-')}, "
            f"{Path(info.get('filepath', '')).name}"
        )
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                "MKL_NUM_THREADS", "GPTCORE_NUM_THREADS", "GPTCORE_KERNEL"):
        if var in os.environ:
            warn = " (unset it: run with env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)" if var.startswith("OPENBLAS_C") or var.startswith("OPENBLAS_L2") else ""
            lines.append(f"- WARNING: {var}={os.environ[var]} is set{warn}")
    load = load_average()
    if load is not None:
        busy = " (WARNING: the machine is busy; multi-threaded numbers will be unreliable)" if load > 0.5 else ""
        lines.append(f"- load average (1 min) at start: {load:.2f}{busy}")
    lines.extend(extra)
    return "\n".join(lines)


def closing_line(t0: float) -> str:
    load = load_average()
    return f"Total time {time.perf_counter() - t0:.0f} s; load average (1 min) at the end {load:.2f}" if load is not None \
        else f"Total time {time.perf_counter() - t0:.0f} s"


def load_average() -> Optional[float]:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    out = ["| " + " | ".join(c.ljust(w) for c, w in zip(cells[0], widths)) + " |"]
    out.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in cells[1:]:
        out.append("| " + " | ".join(c.rjust(w) for c, w in zip(r, widths)) + " |")
    return "\n".join(out)


def fmt(x: Optional[float], digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.{digits}f}"


def fmt_time(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.3f} s"


def fmt_bytes(n: Optional[float]) -> str:
    if n is None:
        return "-"
    return f"{n / (1 << 20):.1f} MiB"


# ---------------------------------------------------------------------------------------------
# Timing


class Result:
    """Per-call seconds of the samples of one implementation."""

    def __init__(self, samples: List[float]):
        self.samples = samples

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def spread(self) -> float:
        """(max - min) / median of the samples: how noisy this measurement was."""
        return (max(self.samples) - min(self.samples)) / self.median


def _calibrate(fn: Callable[[], object], min_time: float, max_inner: int) -> int:
    t0 = time.perf_counter()
    fn()  # warm up (page faults, packing caches, thread start)
    t = time.perf_counter() - t0
    if t >= min_time:
        return 1
    t0 = time.perf_counter()
    fn()
    t = time.perf_counter() - t0
    if t <= 0:
        return max_inner
    return int(max(1, min(max_inner, math.ceil(min_time / t))))


#: Seconds to sleep before each multi-threaded sample. OpenBLAS's worker threads spin for
#: about 2^28 cycles (~70 ms here) after a call and OpenMP runtimes spin too; a spinning
#: thread of the previous library would take a core from the next one. 0.05 s was too short:
#: gptcore's second thread then shared a core with OpenBLAS's spinner.
SETTLE_THREADED = 0.25


def compare(
    fns: Dict[str, Callable[[], object]],
    reps: int,
    min_time: float = 0.05,
    max_inner: int = 10000,
    settle: float = 0.0,
    budget: Optional[float] = None,
) -> Dict[str, Result]:
    """Time every callable ``reps`` times, alternating between them (order reversed every
    other round). Each sample repeats a callable enough times to last ``min_time`` seconds and
    records seconds per call. ``settle`` sleeps between implementations (lets the spinning
    worker threads of the previous library go idle). ``budget`` (seconds) stops early, after
    at least three rounds, when the rounds so far took longer."""
    names = list(fns)
    inner = {k: _calibrate(fns[k], min_time, max_inner) for k in names}
    samples: Dict[str, List[float]] = {k: [] for k in names}
    start = time.perf_counter()
    for r in range(reps):
        for k in (names if r % 2 == 0 else names[::-1]):
            if settle:
                time.sleep(settle)
            fn, n = fns[k], inner[k]
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            samples[k].append((time.perf_counter() - t0) / n)
        if budget is not None and r >= 2 and time.perf_counter() - start > budget:
            break
    return {k: Result(v) for k, v in samples.items()}


# ---------------------------------------------------------------------------------------------
# Optional baselines


def import_torch():
    """torch and transformers, or (None, reason)."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except Exception as exc:  # ImportError, or a broken CUDA-flavoured install
        return None, f"{type(exc).__name__}: {exc}".splitlines()[0]
    return (torch, transformers), None


def has_model() -> bool:
    return hasattr(gptcore, "Model")
