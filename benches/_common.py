"""Shared pieces of the benchmark scripts: imports, thread pinning, timing, machine numbers
(measured at start, or given as options).

Every script prints medians of several samples. Implementations under comparison are timed
alternately inside one process (A, B, B, A, ...) so that slow phases of a shared machine hit
both sides alike.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from threadpoolctl import ThreadpoolController, threadpool_info, threadpool_limits

import gptcore  # the installed package (`pip install .`)

from _cpu import cpu_flags, cpu_model

# ---------------------------------------------------------------------------------------------
# The machine's numbers: measured at start (or given on the command line), never constants of
# one machine.


class Machine:
    """FMA peak per core (FLOP/s, per dtype), read bandwidth (bytes/s, per thread count), the
    L3 size, and a line per number saying where it came from."""

    def __init__(self):
        self.peak_per_core: Dict[str, float] = {}
        self.read_bw: Dict[int, float] = {}
        self.l3_bytes: int = 32 << 20
        self.notes: List[str] = []


MACHINE = Machine()


def add_machine_args(ap) -> None:
    """The options that replace a measured machine number by a given one."""
    ap.add_argument("--peak-gflops", default=None,
                    help="FMA peak per core in GFLOP/s, 'F32' or 'F32,F64' (default: measured; "
                         "float64 defaults to half of float32 when only that is given)")
    ap.add_argument("--bandwidth", default=None,
                    help="read bandwidth in GB/s for 1, 2, ... threads, e.g. '14.5,24.5' (the last "
                         "value serves larger counts; default: measured)")


def l3_bytes() -> int:
    """The last-level cache size from sysfs (32 MiB when it cannot be read)."""
    best = 0
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    try:
        for idx in base.glob("index*"):
            size = (idx / "size").read_text().strip()
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
            value = int(size.rstrip("KMG")) * mult
            best = max(best, value)
    except (OSError, ValueError):
        pass
    return best or (32 << 20)


def stream_bytes() -> int:
    """Bytes of distinct data that must be touched between two uses of the same weights so that
    they come from memory, not from the last-level cache: twice its size (at least 64 MiB)."""
    return max(64 << 20, 2 * MACHINE.l3_bytes)


def _best_rate(fn, flops: float, samples: int = 9, min_time: float = 0.02) -> float:
    """Best FLOP/s of a single-threaded ``fn`` over the samples, timed by the calling thread's
    CPU time: time spent descheduled (other work on a shared machine) does not count."""
    inner = _calibrate(fn, min_time, 10000)
    best = 0.0
    for _ in range(samples):
        t0 = time.thread_time()
        for _ in range(inner):
            fn()
        best = max(best, flops * inner / max(time.thread_time() - t0, 1e-9))
    return best


def measure_peak(dtype: str) -> Tuple[float, str]:
    """FLOP/s of one core: the FMA probe of the active gptcore kernel (its widest vectors,
    independent multiply-add chains in registers, nothing else limiting them; see
    ``gptcore_core::kernels::peak``), or the best rate that gptcore or numpy's BLAS reaches on a
    product that stays in the cache (96 x 256 x 256, one thread, CPU time) if that is higher. The
    in-cache product alone is a lower bound of the peak only: on a Zen 4 EPYC, AVX2 kernels
    reach 104 GFLOP/s there against 115-117 from the probe."""
    dt = np.dtype(dtype).type
    m, k, n = 96, 256, 256
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(dt)
    b = rng.standard_normal((k, n)).astype(dt)
    packed = gptcore.PackedMatrix(b)
    out = np.empty((m, n), dt)
    flops = 2.0 * m * k * n
    before = gptcore.get_num_threads()
    gptcore.set_num_threads(1)
    try:
        with threadpool_limits(1):
            g = _best_rate(lambda: gptcore.matmul(a, packed), flops)
            o = _best_rate(lambda: np.matmul(a, b, out=out), flops)
    finally:
        gptcore.set_num_threads(before)
    probe = gptcore._native.fma_rate(np.dtype(dtype).name, None, 0.5)
    best, who = max((probe, "the FMA probe"), (g, "gptcore in cache"), (o, "numpy in cache"))
    return best, (f"{who}: FMA probe ({gptcore.kernel()} vectors) {probe / 1e9:.1f}, in-cache "
                  f"{m}x{k}x{n} product gptcore {g / 1e9:.1f} and numpy {o / 1e9:.1f}")


def measure_bandwidth(threads: int) -> Tuple[float, str]:
    """Bytes/s that ``threads`` threads read from memory, and how it was found: the higher of
    gptcore's read probe (``gptcore._native.read_rate``: the team of ``threads`` threads, each
    summing its own part of an array twice the last-level cache as integers with the active
    kernel's vectors, fetching 4 KiB ahead; see ``gptcore_core::kernels::bandwidth``) and
    numpy's BLAS ``dot`` over per-thread parts of such an array (one BLAS thread each, run from
    Python threads; the GIL is released inside the call), each the best of its passes. On the
    Zen 5 EPYC one thread of ``dot`` read 27-30 GB/s, held by its multiply-add chain, the probe
    40-41 and gptcore's one-row products 37-41: the dot alone made a bound that decode beat."""
    from concurrent.futures import ThreadPoolExecutor

    total = max(256 << 20, 2 * MACHINE.l3_bytes)
    before = gptcore.get_num_threads()
    gptcore.set_num_threads(threads)
    try:
        probe = gptcore._native.read_rate(total, None, 0.5)
    finally:
        gptcore.set_num_threads(before)
    n = total // 4 // threads
    parts = [np.full(n, 1.0, np.float32) for _ in range(threads)]
    dot = 0.0
    with threadpool_limits(1), ThreadPoolExecutor(threads) as pool:
        for _ in range(5):
            t0 = time.perf_counter()
            list(pool.map(lambda x: float(np.dot(x, x)), parts))
            dot = max(dot, n * 4 * threads / (time.perf_counter() - t0))
    del parts
    who = "the read probe" if probe >= dot else "numpy dot"
    return max(probe, dot), f"{who} (probe {probe / 1e9:.1f}, numpy dot {dot / 1e9:.1f})"


def setup_machine(args, threads_list: Sequence[int], dtypes: Sequence[str] = ("float32",),
                  need_bandwidth: bool = True) -> None:
    """Fill MACHINE from the options, measuring what was not given."""
    MACHINE.l3_bytes = l3_bytes()
    MACHINE.notes = [f"- last-level cache {MACHINE.l3_bytes >> 20} MiB (sysfs); weights rotated over "
                     f"{stream_bytes() >> 20} MiB come from memory"]
    given = [float(v) for v in (args.peak_gflops or "").split(",") if v.strip()]
    if given:
        MACHINE.peak_per_core = {"float32": given[0] * 1e9,
                                 "float64": (given[1] if len(given) > 1 else given[0] / 2) * 1e9}
        MACHINE.notes.append(
            f"- peak per core (given): {MACHINE.peak_per_core['float32'] / 1e9:.1f} GFLOP/s float32, "
            f"{MACHINE.peak_per_core['float64'] / 1e9:.1f} float64; times the thread count")
    else:
        for d in dtypes:
            rate, how = measure_peak(d)
            MACHINE.peak_per_core[d] = rate
            MACHINE.notes.append(f"- peak per core {d} (measured): {rate / 1e9:.1f} GFLOP/s, {how}; "
                                 f"times the thread count; --peak-gflops gives the nominal peak")
    bws = [float(v) for v in (args.bandwidth or "").split(",") if v.strip()]
    if bws:
        MACHINE.read_bw = {i + 1: v * 1e9 for i, v in enumerate(bws)}
        MACHINE.notes.append("- read bandwidth (given): " + ", ".join(
            f"{t} thr {v / 1e9:.1f} GB/s" for t, v in MACHINE.read_bw.items()))
    elif need_bandwidth:
        how = {}
        for t in sorted(set(threads_list)):
            MACHINE.read_bw[t], how[t] = measure_bandwidth(t)
        MACHINE.notes.append("- read bandwidth (measured, the higher of gptcore's read probe and numpy dot): "
                             + ", ".join(f"{t} thr {v / 1e9:.1f} GB/s, {how[t]}"
                                         for t, v in sorted(MACHINE.read_bw.items())))


def peak_flops(dtype: str, threads: int) -> float:
    if dtype not in MACHINE.peak_per_core:
        MACHINE.peak_per_core[dtype], _ = measure_peak(dtype)
    return MACHINE.peak_per_core[dtype] * threads


def bandwidth(threads: int) -> float:
    """Read bandwidth of ``threads`` threads: the measured or given value for the largest
    thread count not above it (measured now when nothing is known)."""
    if not MACHINE.read_bw:
        MACHINE.read_bw[threads], _ = measure_bandwidth(threads)
    known = sorted(MACHINE.read_bw)
    below = [t for t in known if t <= threads]
    return MACHINE.read_bw[below[-1] if below else known[0]]


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
    """Lines naming the CPU, the libraries, the kernels in use (gptcore's and numpy's BLAS),
    the machine numbers and settings that change what runs."""
    lines = []
    lines.append(f"- CPU: {cpu_model()}, {os.cpu_count()} logical cores, "
                 f"{' '.join(cpu_flags()) or 'no SIMD flags seen'}")
    lines.append(
        f"- Python {platform.python_version()}, numpy {np.__version__}, gptcore {gptcore.__version__} "
        f"({Path(gptcore.__file__).parent})"
    )
    lines.append(f"- gptcore kernel in use: {gptcore.kernel()} (this CPU has {', '.join(gptcore.available_kernels())})")
    for info in threadpool_info():
        arch = info.get("architecture") or info.get("corename") or "-"
        lines.append(
            f"- numpy's BLAS (threadpoolctl): {info.get('internal_api')} {info.get('version') or ''}, "
            f"kernel/core type {arch}, threading {info.get('threading_layer', '-')}, "
            f"{Path(info.get('filepath', '')).name}"
        )
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                "MKL_NUM_THREADS", "GPTCORE_NUM_THREADS", "GPTCORE_KERNEL"):
        if var in os.environ:
            why = {
                "OPENBLAS_CORETYPE": " (OpenBLAS runs that core type's kernels, not the best for this CPU: "
                                     "fair only against the gptcore kernel of the same instruction set)",
                "OPENBLAS_L2_SIZE": " (changes OpenBLAS's blocking)",
            }.get(var, "")
            lines.append(f"- NOTE: {var}={os.environ[var]} is set{why}")
    lines.extend(MACHINE.notes)
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


def paired_speed(res: Dict[str, Result], base: str, ours: str) -> float:
    """How many times faster ``ours`` ran than ``base``: the median over the rounds of
    ``compare`` of base's sample / ours's sample of the same round. The two samples of a round
    are taken one right after the other, so a slowdown of the machine that lasts seconds (other
    tenants of a shared host) touches both alike and cancels in their ratio, where it would
    shift the median of one side alone. On the shared 2-core Xeon (gptcore's AVX2 path against
    OpenBLAS's Haswell kernels, 256 x 768 x 2304 float32, one thread), two sets of eight runs
    of seven rounds gave ratios of the medians over 0.87-1.33 and 0.80-1.04, and medians of the
    per-round ratios over 0.92-1.04 and 0.84-1.04."""
    pairs = [b / o for b, o in zip(res[base].samples, res[ours].samples)]
    return statistics.median(pairs)


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


def torch_baseline(notes, what="torch"):
    """(torch, transformers) with a line on their versions in ``notes``, or (None, None) with a
    line saying why the ``what`` baseline is skipped."""
    tt, why = import_torch()
    if tt is None:
        notes.append(f"- {what} baseline skipped: {why}")
        return None, None
    torch, transformers = tt
    transformers.logging.set_verbosity_error()
    notes.append(f"- torch {torch.__version__} (CPU capability {torch.backends.cpu.get_cpu_capability()}), "
                 f"transformers {transformers.__version__}")
    return torch, transformers


# ---------------------------------------------------------------------------------------------
# Decode steps


def hf_cache_keyword(model) -> str:
    """The keyword a transformers model's forward takes its K/V cache by: ``cache`` in recent
    releases (5.25 warns that ``past_key_values`` is deprecated), ``past_key_values`` before."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def hf_returned_cache(out, keyword: str):
    """The cache a transformers forward returned, under the keyword it takes it by (or the
    older name)."""
    return out[keyword] if keyword in out else out["past_key_values"]


class GptcoreRunner:
    """A gptcore model as a decode runner: ``start(ids)`` runs a fresh prompt of one sequence
    into a new cache and returns its greedy next token, ``step(tok)`` one cached step."""

    def __init__(self, model):
        self.model = model
        self.cache = None

    def prefill_logits(self, ids):
        return self.model.forward(ids, logits="last")

    def start(self, ids):
        self.cache = self.model.new_cache(1)
        return int(np.argmax(self.model.step(self.cache, ids[None, :])[0]))

    def step(self, tok):
        return int(np.argmax(self.model.step(self.cache, np.array([[tok]]))[0]))


def decode_fn(runner, prompt, steps):
    """One sample: a fresh prompt, then ``steps`` single-token steps; returns the seconds per
    step."""
    def run():
        tok = runner.start(prompt)
        t0 = time.perf_counter()
        for _ in range(steps):
            tok = runner.step(tok)
        return (time.perf_counter() - t0) / steps
    return run


def time_decode(runners, prompt, reps, steps):
    """Seconds per decode step of each runner: alternating rounds, median."""
    samples = {k: [] for k in runners}
    names = list(runners)
    for r in range(reps):
        for k in (names if r % 2 == 0 else names[::-1]):
            time.sleep(SETTLE_THREADED)
            samples[k].append(decode_fn(runners[k], prompt, steps)())
    return {k: float(np.median(v)) for k, v in samples.items()}, samples
