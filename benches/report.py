"""The Performance page's headline tables (docs/performance.md), from one run on this machine.

Four questions, each a table: a GPT-2 small forward, greedy generation with float32, bfloat16
and float16 weights, matrix products at GPT-2 small's shapes, and memory. gptcore is timed
against numpy (OpenBLAS; the plain numpy forward ``gptcore.numpy_forward``), PyTorch (torch
and transformers' ``GPT2LMHeadModel``) and llama.cpp (llama-cpp-python on GGUF files of the
same weights), all in this process, alternating in rounds, every library pinned to the same
thread count. Each table also gives the machine's floor for the case (the FMA peak or the
read bandwidth, measured at start) and gptcore's share of it.

Each table is printed between the page's markers (``<!-- report:NAME -->``, see
benches/_page.py); ``--write docs/performance.md`` puts them into the page in place of the
previous run's, leaving the prose alone.

    pip install '.[bench,baselines]'      # gptcore itself, threadpoolctl, the baselines
    python benches/report.py              # a quarter of an hour or more on 2 cores; prints
    python benches/report.py --write docs/performance.md

Run it on an idle machine: the tables name the load average at start and end. A baseline
whose package is missing stops the run (say ``--baselines numpy`` to leave the others out).
The methods behind the numbers are benches/README.md's (the same helpers: _common.py,
_models.py, _llamacpp.py); bench_forward.py, bench_generate.py and bench_matmul.py time more
cases and thread counts.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime
import gc
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

from _common import (
    MACHINE,
    SETTLE_THREADED,
    add_machine_args,
    bandwidth,
    compare,
    gptcore,
    load_average,
    np,
    paired_speed,
    parse_str_list,
    peak_flops,
    set_threads,
    setup_machine,
    stream_bytes,
    threadpool_info,
)
from _cpu import cpu_flags, cpu_model
from _llamacpp import LlamaCppGreedy, import_llama_cpp, write_gguf
from _llamacpp import version as llama_cpp_version
from _models import forward_flops, gpt2_config, hf_model, random_weights
from _page import BLOCKS, block, replace_blocks
from bench_forward import _reset_peak, _status
from gptcore import numpy_forward

BASELINES = ("numpy", "pytorch", "llama.cpp")
FORMATS = ("float32", "bfloat16", "float16")
#: Each format's GGUF file type for llama.cpp and torch dtype name for PyTorch.
LLAMA_FTYPE = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}

FORWARD_CONFIGS = [(1, 8), (1, 64), (1, 256), (1, 1024), (8, 128)]
QUICK_FORWARD_CONFIGS = [(1, 8), (1, 256)]
PROMPT, NEW = 16, 128
MEMORY_T = 1024

D = 768
#: (dtype, M, K, N, b): the products of the matrix table. ``b`` "packed" is a PackedMatrix
#: built once (the weights case), "plain" an ndarray packed inside every call.
MATMUL_CASES = [
    ("float32", 1, D, 4 * D, "packed"), ("float32", 8, D, 4 * D, "packed"),
    ("float32", 64, D, 4 * D, "packed"), ("float32", 256, D, 4 * D, "packed"),
    ("float32", 1024, D, 4 * D, "packed"), ("float32", 1, D, 50257, "packed"),
    ("float32", 256, D, 50257, "packed"), ("float32", 2048, 2048, 2048, "packed"),
    ("float32", 256, D, 4 * D, "plain"), ("float64", 1, D, 4 * D, "packed"),
    ("float64", 256, D, 4 * D, "packed"), ("float64", 2048, 2048, 2048, "packed"),
]
QUICK_MATMUL_CASES = [MATMUL_CASES[i] for i in (0, 3, 8, 10)]
STREAM_ROWS = 8  # products of at most this many rows rotate their weights through memory

#: Largest |logit difference| to gptcore float32 accepted before timing: float32 rounding gives
#: ~1e-5; llama.cpp's GELU reads a float16 table (~1e-3). A layout error gives differences of
#: the size of the logits.
TOLERANCE = {"numpy": 1e-3, "pytorch": 1e-3, "llama.cpp": 0.05}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Cells


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 10 else f"{seconds:.2f} s"


def ours(value: str, share: float) -> str:
    """gptcore's cell: its figure and its share of the floor."""
    return f"**{value}** ({100 * share:.0f} %)"


def table(headers, rows, right: bool = True) -> str:
    """A Markdown table: the first column left-aligned, the others right-aligned (``right``)
    or left-aligned, the cells padded so that the source reads as a table too."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(3, *(len(r[i]) for r in cells)) for i in range(len(headers))]

    def line(r, header=False):
        out = [r[0].ljust(widths[0])]
        out += [c.rjust(w) if right and not header else c.ljust(w) for c, w in zip(r[1:], widths[1:])]
        return "| " + " | ".join(out) + " |"

    sep = [":" + "-" * (widths[0] + 1)] + [("-" * (w + 1) + ":") if right else (":" + "-" * (w + 1))
                                           for w in widths[1:]]
    return "\n".join([line(cells[0], True), "|" + "|".join(sep) + "|"] + [line(r) for r in cells[1:]])


def theirs(value: str, speed: Optional[float]) -> str:
    """A baseline's cell: its figure and how many times as fast gptcore ran (paired rounds)."""
    return f"{value} ({speed:.2f} x)" if speed is not None else value


# ---------------------------------------------------------------------------------------------
# Accounting: what each case must read or compute at least


def matrix_bytes(weights, fmt: str) -> int:
    """Bytes a forward or a decode step reads at least: every array but the position table, the
    matrices (and the token table, read whole by the tied head) at the format's width, the
    vectors as float32."""
    width = 4 if fmt == "float32" else 2
    return int(sum(v.size * (width if v.ndim == 2 else 4) for k, v in weights.items() if k != "wpe.weight"))


def forward_floor(config, wbytes: int, B: int, T: int, threads: int, head_rows=None):
    """(seconds, what bounds it): max(FLOPs / FMA peak, weight bytes / read bandwidth)."""
    t_c = forward_flops(config, B, T, head_rows) / peak_flops("float32", threads)
    t_m = wbytes / bandwidth(threads)
    return (t_c, "arithmetic") if t_c >= t_m else (t_m, "memory")


def generation_floor(config, wbytes: int, B: int, threads: int) -> float:
    """Seconds for the prompt's forward (last logits only) and NEW - 1 decode steps, each step
    max(FLOPs / peak, (weights + K/V cache read) / bandwidth)."""
    d, f, L = config.d_model, config.d_ff, config.n_layers
    total, _ = forward_floor(config, wbytes, B, PROMPT, threads, head_rows=B)
    for j in range(1, NEW):
        ctx = PROMPT + j
        flops = 2.0 * (L * (4 * d * d + 2 * d * f) + config.vocab_size * d) * B + 4.0 * L * B * d * ctx
        kv = 2.0 * L * B * ctx * d * 4
        total += max(flops / peak_flops("float32", threads), (wbytes + kv) / bandwidth(threads))
    return total


# ---------------------------------------------------------------------------------------------
# llama.cpp


class LlamaCppForward:
    """A GGUF model in llama-cpp-python that returns the logits of every position of one
    sequence (``logits_all``), the prompt evaluated in one batch: what ``Model.forward`` does
    for B = 1."""

    def __init__(self, llama_cpp, path, threads: int, n_ctx: int):
        self.llm = llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx,
                                   n_threads=threads, n_threads_batch=threads, logits_all=True,
                                   use_mmap=False, verbose=False,
                                   type_k=0, type_v=0)  # float32 KV cache, as gptcore's
        self.n_vocab = int(self.llm.n_vocab())

    def forward(self, ids) -> np.ndarray:
        ids = [int(t) for t in np.asarray(ids).reshape(-1)]
        self.llm.reset()
        self.llm.eval(ids)
        return self.llm.scores[:len(ids)]

    def close(self) -> None:
        llm, self.llm = self.llm, None
        if llm is not None:
            llm.close()


@contextlib.contextmanager
def quiet_stderr():
    """File descriptor 2 sent to /dev/null (C libraries write there directly)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def write_gguf_files(ll, weights, config, folder: Path, formats) -> Dict[str, Path]:
    """The weights as llama.cpp GGUF files: F32 and F16 written by _llamacpp.write_gguf, BF16
    made from the F32 file by llama.cpp's own quantizer (``llama_model_quantize``)."""
    llama_cpp, gguf = ll
    paths = {"float32": write_gguf(gguf, folder / "gpt2-F32.gguf", weights, config, "F32")}
    if "float16" in formats:
        paths["float16"] = write_gguf(gguf, folder / "gpt2-F16.gguf", weights, config, "F16")
    if "bfloat16" in formats:
        out = folder / "gpt2-BF16.gguf"
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_BF16
        params.nthread = 2
        with quiet_stderr():  # the quantizer lists every tensor
            rc = llama_cpp.llama_model_quantize(str(paths["float32"]).encode(), str(out).encode(),
                                                ctypes.byref(params))
        if rc != 0 or not out.exists():
            raise SystemExit(f"llama.cpp could not write the BF16 GGUF (llama_model_quantize returned {rc})")
        paths["bfloat16"] = out
    return paths


# ---------------------------------------------------------------------------------------------
# The tables


class Run:
    """What every table shares: the options, the weights, the baselines' modules."""

    def __init__(self, args):
        self.args = args
        self.threads: int = args.threads
        self.settle = SETTLE_THREADED if self.threads > 1 else 0.0
        self.config = gpt2_config()
        self.weights, _ = random_weights(self.config, args.seed)
        self.baselines = set(args.baselines)
        self.torch = self.transformers = None
        self.ll = None
        self.tmp = tempfile.TemporaryDirectory(prefix="gptcore-report-")
        self.gguf: Dict[str, Path] = {}
        if "pytorch" in self.baselines:
            try:
                import torch
                import transformers
            except Exception as exc:  # ImportError, or a broken install
                raise SystemExit(f"PyTorch baseline: cannot import torch and transformers ({exc}); install them "
                                 f"(pip install '.[baselines]') or leave it out with --baselines") from None
            transformers.logging.set_verbosity_error()
            self.torch, self.transformers = torch, transformers
        if "llama.cpp" in self.baselines:
            self.ll, why = import_llama_cpp()
            if self.ll is None:
                raise SystemExit(f"llama.cpp baseline: {why}; install llama-cpp-python and gguf "
                                 f"(pip install '.[baselines]') or leave it out with --baselines") from None

    def gguf_files(self) -> Dict[str, Path]:
        if self.ll is not None and not self.gguf:
            t0 = time.perf_counter()
            self.gguf = write_gguf_files(self.ll, self.weights, self.config, Path(self.tmp.name), FORMATS)
            log(f"GGUF files written in {time.perf_counter() - t0:.0f} s")
        return self.gguf

    def pin(self) -> None:
        set_threads(self.threads, self.torch)

    def hf(self, fmt: str = "float32"):
        m = hf_model(self.weights, self.config, self.torch, self.transformers)
        return m if fmt == "float32" else m.to(getattr(self.torch, fmt)).eval()


def check_logits(name: str, got, ref, tolerance: float, notes: List[str]) -> None:
    diff = float(np.max(np.abs(np.asarray(got, np.float64) - ref)))
    notes.append(f"{name} {diff:.0e}")
    if not diff < tolerance:
        raise SystemExit(f"{name}'s logits differ from gptcore's by {diff:.3g} (>= {tolerance}): "
                         f"the baseline does not compute the same model; nothing was timed")


def forward_table(run: Run) -> str:
    config, weights, torch = run.config, run.weights, run.torch
    configs = QUICK_FORWARD_CONFIGS if run.args.quick else FORWARD_CONFIGS
    model = gptcore.Model(weights)
    fns = {"gptcore": model.forward,
           "numpy": lambda ids: numpy_forward.forward(weights, ids, config)}
    if torch is not None:
        hf = run.hf()

        def torch_forward(ids):
            with torch.inference_mode():
                return hf(input_ids=torch.from_numpy(ids), use_cache=False).logits
        fns["pytorch"] = torch_forward
    llama = None
    if run.ll is not None:
        llama = LlamaCppForward(run.ll[0], run.gguf_files()["float32"], run.threads,
                                max(T for B, T in configs if B == 1))
        fns["llama.cpp"] = lambda ids: llama.forward(ids)
    run.pin()
    ids = np.random.default_rng(run.args.seed + 7).integers(0, config.vocab_size - 1, (1, 40))
    ref = np.asarray(model.forward(ids), np.float64)[0]
    agree: List[str] = []
    for name in ("numpy", "pytorch", "llama.cpp"):
        if name in fns:
            out = fns[name](ids)
            out = out.detach().float().numpy() if hasattr(out, "detach") else np.asarray(out)
            check_logits({"pytorch": "PyTorch"}.get(name, name), out.reshape(ref.shape), ref, TOLERANCE[name], agree)
    rows = []
    rng = np.random.default_rng(run.args.seed)
    wbytes = matrix_bytes(weights, "float32")
    for B, T in configs:
        ids = rng.integers(0, config.vocab_size - 1, (B, T))
        timed = {k: (lambda f=f, ids=ids: f(ids)) for k, f in fns.items() if not (k == "llama.cpp" and B > 1)}
        res = compare(timed, reps=run.args.reps, min_time=0.2, settle=run.settle)
        floor, bound = forward_floor(config, wbytes, B, T, run.threads)
        g = res["gptcore"].median
        row = [f"{B} x {T}", f"{ms(floor)} ({bound})", ours(ms(g), floor / g)]
        for k in BASELINES:
            row.append(theirs(ms(res[k].median), paired_speed(res, k, "gptcore")) if k in res else "-")
        rows.append(row)
        log(f"forward {B} x {T} done")
    if llama is not None:
        llama.close()
    del model
    gc.collect()
    out = table(["B x T", "floor (limit)", "gptcore", "numpy", "PyTorch", "llama.cpp"], rows)
    return (out + f"\n\nBefore timing, each baseline's logits (1 x 40 tokens) were compared with gptcore's: "
            f"max |difference| {', '.join(agree)}.")


def generate_table(run: Run) -> str:
    config, weights, torch = run.config, run.weights, run.torch
    batches = [1] if run.args.quick else [1, 8]
    rows = []
    rng = np.random.default_rng(run.args.seed + 1)
    prompt_check = rng.integers(0, config.vocab_size - 1, (1, PROMPT))
    agree: List[str] = []
    for fmt in FORMATS:
        model = gptcore.Model(weights, weight_dtype=None if fmt == "float32" else fmt)
        ref = np.asarray(model.forward(prompt_check, logits="last"), np.float64).reshape(-1)
        fns_b = {"gptcore": lambda ids, m=model: m.generate(ids, NEW, greedy=True)}
        hf = None
        if torch is not None:
            hf = run.hf(fmt)
            pad = config.vocab_size - 1

            def torch_generate(ids, hf=hf, pad=pad):
                t = torch.from_numpy(ids)
                with torch.inference_mode():
                    return hf.generate(input_ids=t, attention_mask=torch.ones_like(t), do_sample=False,
                                       use_cache=True, max_new_tokens=NEW, min_new_tokens=NEW, pad_token_id=pad)
            fns_b["pytorch"] = torch_generate
        llama = None
        if run.ll is not None:
            llama = LlamaCppGreedy(run.ll[0], run.gguf_files()[fmt], run.threads)
            check_logits(f"llama.cpp {LLAMA_FTYPE[fmt]}", llama.prompt_logits(prompt_check[0]), ref,
                         TOLERANCE["llama.cpp"], agree)
        run.pin()
        wbytes = matrix_bytes(weights, fmt)
        for B in batches:
            ids = rng.integers(0, config.vocab_size - 1, (B, PROMPT))
            timed = {k: (lambda f=f, ids=ids: f(ids)) for k, f in fns_b.items()}
            if llama is not None and B == 1:
                timed["llama.cpp"] = lambda llama=llama, ids=ids: llama.generate(ids[0], NEW)
            res = compare(timed, reps=run.args.gen_reps, min_time=0.0, settle=run.settle)
            tps = {k: B * NEW / r.median for k, r in res.items()}
            floor = B * NEW / generation_floor(config, wbytes, B, run.threads)
            row = [fmt, str(B), f"{floor:.1f} tok/s", ours(f"{tps['gptcore']:.1f} tok/s", tps["gptcore"] / floor)]
            for k in ("pytorch", "llama.cpp"):
                row.append(theirs(f"{tps[k]:.1f} tok/s", paired_speed(res, k, "gptcore")) if k in res else "-")
            rows.append(row)
            log(f"generation {fmt} B = {B} done")
        if llama is not None:
            llama.close()
        del model, hf
        gc.collect()
    out = table(["weights", "B", "floor", "gptcore", "PyTorch", "llama.cpp"], rows)
    note = (f"A {PROMPT}-token prompt and {NEW} new tokens per sequence, greedy; tokens/s = B x {NEW} / the "
            f"time of the whole call. PyTorch runs `generate` with the model cast to the format (float32, "
            f"bfloat16, float16); llama.cpp runs GGUF files F32, BF16 and F16 of the same weights, one "
            f"sequence at a time (llama-cpp-python's `Llama`), hence no B = 8.")
    if agree:
        note += (f" Before timing, llama.cpp's logits after a prompt were compared with gptcore's in the same "
                 f"format: max |difference| {', '.join(agree)} (llama.cpp rounds the activations to the "
                 f"weights' format in its 16-bit products, and its GELU reads a float16 table).")
    return out + "\n\n" + note


def matmul_table(run: Run) -> str:
    torch = run.torch
    cases = QUICK_MATMUL_CASES if run.args.quick else MATMUL_CASES
    rng = np.random.default_rng(run.args.seed + 2)
    rows = []
    run.pin()
    for dtype, m, k, n, kind in cases:
        dt = np.dtype(dtype)
        count = max(1, math.ceil((stream_bytes() + 1) / (k * n * dt.itemsize))) if m <= STREAM_ROWS else 1
        base = (rng.standard_normal((k, n)) * 0.05).astype(dt)
        mats = [base] + [base * dt.type(1.0 + 1e-3 * i) for i in range(1, count)]
        rhs = [gptcore.PackedMatrix(w) for w in mats] if kind == "packed" else mats
        a = (rng.standard_normal((m, k)) * 0.5).astype(dt)
        got, want = gptcore.matmul(a, rhs[0]), a.astype(np.float64) @ mats[0].astype(np.float64)
        tol = (2e-4 if dtype == "float32" else 1e-12) * max(1.0, float(np.max(np.abs(want))))
        if not float(np.max(np.abs(got - want))) <= tol:
            raise SystemExit(f"gptcore.matmul {m}x{k}x{n} {dtype} disagrees with float64 numpy")

        def rotating(fn, items, a=a):
            state = [0]

            def call():
                i = state[0]
                state[0] = (i + 1) % len(items)
                return fn(a, items[i])
            return call

        fns = {"gptcore": rotating(gptcore.matmul, rhs), "numpy": rotating(np.matmul, mats)}
        if torch is not None:
            ta, tmats = torch.from_numpy(a), [torch.from_numpy(w) for w in mats]
            fns["pytorch"] = rotating(lambda _, w, ta=ta: torch.matmul(ta, w), tmats)
        flops = 2.0 * m * k * n
        budget = 20.0 if flops / peak_flops(dtype, run.threads) > 0.25 else None
        res = compare(fns, reps=run.args.reps, min_time=0.05, settle=run.settle, budget=budget)
        peak = peak_flops(dtype, run.threads)
        ceiling, bound = peak, "arithmetic"
        if m <= STREAM_ROWS and flops / (k * n * dt.itemsize / bandwidth(run.threads)) < peak:
            ceiling, bound = flops * bandwidth(run.threads) / (k * n * dt.itemsize), "memory"
        rate = {key: flops / r.median / 1e9 for key, r in res.items()}
        row = [dtype, f"{m} x {k} x {n}", kind, f"{ceiling / 1e9:.0f} ({bound})",
               ours(f"{rate['gptcore']:.1f}", rate["gptcore"] * 1e9 / ceiling)]
        for key in ("numpy", "pytorch"):
            row.append(theirs(f"{rate[key]:.1f}", paired_speed(res, key, "gptcore")) if key in res else "-")
        rows.append(row)
        del fns, rhs, mats
        gc.collect()
        log(f"matmul {dtype} {m}x{k}x{n} {kind} done")
    out = table(["dtype", "M x K x N", "b", "floor GFLOP/s", "gptcore", "numpy", "PyTorch"], rows)
    return (out + f"\n\nGFLOP/s, `a @ b` with `a` M x K. `b` packed: a `PackedMatrix` built once, as a model's "
            f"weights are (numpy and PyTorch take the same `b` as an array); plain: an array, which gptcore "
            f"packs inside the call. Products of up to {STREAM_ROWS} rows rotate through {stream_bytes() >> 20} MiB "
            f"of copies of `b`, so that it comes from memory as in a decode step.")


# ---------------------------------------------------------------------------------------------
# Memory: one fresh process per implementation


MEMORY_IMPLS = [("gptcore", "float32"), ("gptcore", "bfloat16"), ("gptcore", "float16"), ("numpy", "float32"),
                ("pytorch", "float32"), ("pytorch", "bfloat16"), ("llama.cpp", "float32"), ("llama.cpp", "float16")]


def memory_child(impl: str, fmt: str, threads: int, seed: int, gguf_path: str) -> None:
    """Build one implementation, run one forward over 1 x MEMORY_T tokens, print the resident
    set sizes (bytes) as JSON: before building, peak while building, after, peak in the
    forward. The weights arrays exist before the first reading (the caller's data)."""
    config = gpt2_config()
    torch = None
    weights = None
    if impl != "llama.cpp":
        weights, _ = random_weights(config, seed, perturb=False)
    if impl == "pytorch":
        import torch
        import transformers
        transformers.logging.set_verbosity_error()
    set_threads(threads, torch)
    ids = np.random.default_rng(seed).integers(0, config.vocab_size - 1, (1, MEMORY_T))
    gc.collect()
    rss0 = _status("VmRSS")
    exact = _reset_peak()
    if impl == "gptcore":
        model = gptcore.Model(weights, weight_dtype=None if fmt == "float32" else fmt)
        run = model.forward
    elif impl == "numpy":
        def run(x):
            return numpy_forward.forward(weights, x, config)
    elif impl == "pytorch":
        hf = hf_model(weights, config, torch, transformers)
        hf = hf if fmt == "float32" else hf.to(getattr(torch, fmt))
        hf.eval()

        def run(x):
            with torch.inference_mode():
                return hf(input_ids=torch.from_numpy(x), use_cache=False).logits
    else:
        ll, why = import_llama_cpp()
        if ll is None:
            raise SystemExit(why)
        llama = LlamaCppForward(ll[0], gguf_path, threads, MEMORY_T)
        run = llama.forward
    gc.collect()
    hwm_build, rss1 = _status("VmHWM"), _status("VmRSS")
    _reset_peak()
    run(ids)
    print(json.dumps({"rss0": rss0, "hwm_build": hwm_build, "rss1": rss1, "hwm_fwd": _status("VmHWM"),
                      "exact": exact}))


def memory_table(run: Run) -> str:
    rows = []
    logits = MEMORY_T * run.config.vocab_size * 4
    exact = True
    for impl, fmt in MEMORY_IMPLS:
        if impl != "gptcore" and impl not in run.baselines:
            continue
        path = str(run.gguf_files().get(fmt, "")) if impl == "llama.cpp" else ""
        cmd = [sys.executable, os.path.abspath(__file__), "--memory-child", impl, fmt, path,
               "--threads", str(run.threads), "--seed", str(run.args.seed)]
        p = subprocess.run(cmd, check=False, capture_output=True, text=True)
        try:
            r = json.loads((p.stdout.strip().splitlines() or [""])[-1])
        except json.JSONDecodeError:
            raise SystemExit(f"memory of {impl} {fmt}: the child process failed:\n{p.stderr.strip()[-2000:]}") from None
        exact = exact and r["exact"]
        held, build, fwd = r["rss1"] - r["rss0"], r["hwm_build"] - r["rss0"], r["hwm_fwd"] - r["rss1"]
        name = {"pytorch": "PyTorch", "llama.cpp": f"llama.cpp {LLAMA_FTYPE[fmt]}"}.get(impl, impl)
        if impl in ("gptcore", "pytorch"):
            name += f" {fmt}"
        mib = 1 << 20
        rows.append([name, f"{held / mib:.0f} MiB", f"{build / mib:.0f} MiB",
                     f"{fwd / mib:.0f} MiB ({fwd / logits:.2f} x)"])
        log(f"memory {name} done")
    out = table(["implementation", "held, built", "peak while building", f"forward 1 x {MEMORY_T}"], rows)
    note = (f"Resident memory of one fresh process per row, above what it held before (the float32 weights "
            f"arrays, {sum(v.nbytes for v in run.weights.values()) / (1 << 20):.0f} MiB, which the caller "
            f"owns; llama.cpp reads its GGUF file instead). The forward column is the peak above the built "
            f"model during one forward with logits for every position, in brackets as a multiple of the "
            f"logits ({logits / (1 << 20):.0f} MiB float32): the output alone is 1 x. llama.cpp reserves its "
            f"buffers when it is built and fills them in the forward, and llama-cpp-python copies the logits "
            f"into an array of its own.")
    if not exact:
        note += " (/proc/self/clear_refs was not writable: peaks include earlier allocations.)"
    return out + "\n\n" + note


# ---------------------------------------------------------------------------------------------
# The machine


def machine_table(run: Run, started: datetime.datetime, seconds: float, load0, load1) -> str:
    blas = [f"{i.get('internal_api')} {i.get('version') or ''} ({i.get('architecture') or '-'} kernels)"
            for i in threadpool_info() if i.get("user_api") == "blas"]
    rows = [
        ["measured", f"{started:%Y-%m-%d}, `python benches/report.py --threads {run.threads}`, "
                     f"{seconds / 60:.0f} minutes"],
        ["CPU", f"{cpu_model()}, {os.cpu_count()} logical cores ({' '.join(cpu_flags())}), "
                f"last-level cache {MACHINE.l3_bytes >> 20} MiB"],
        ["threads", f"{run.threads} for every library"],
        ["FMA peak", f"{MACHINE.peak_per_core['float32'] / 1e9:.0f} GFLOP/s float32, "
                     f"{MACHINE.peak_per_core['float64'] / 1e9:.0f} float64 a core (measured)"],
        ["memory reads", f"{bandwidth(run.threads) / 1e9:.1f} GB/s on {run.threads} threads (measured)"],
        ["gptcore", f"{gptcore.__version__}, kernel `{gptcore.kernel()}`, {installed_where()}"],
        ["numpy", f"{np.__version__}, " + (", ".join(blas) or "BLAS not seen by threadpoolctl")],
    ]
    if run.torch is not None:
        rows.append(["PyTorch", f"torch {run.torch.__version__} (CPU capability "
                                f"{run.torch.backends.cpu.get_cpu_capability()}), transformers {run.transformers.__version__}"])
    if run.ll is not None:
        rows.append(["llama.cpp", llama_cpp_version(*run.ll)])
    busy = "" if max(load0, load1) <= 0.5 else " (other work shared the cores: a quiet rerun reads faster)"
    rows.append(["load average", f"{load0:.2f} at start, {load1:.2f} at the end{busy}"])
    return table(rows[0], rows[1:], right=False)


def installed_where() -> str:
    """Where the gptcore that ran was imported from: the page's numbers are an installed
    package's (``pip install .``), not a development build's."""
    folder = Path(gptcore.__file__).resolve().parent
    if folder.parent.name in ("site-packages", "dist-packages"):
        return "the installed package (`pip install .`)"
    return f"NOT an installed package: imported from {folder}"


# ---------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                    help="threads for every library (default: the CPUs this process may use)")
    ap.add_argument("--only", default=",".join(b for b in BLOCKS if b != "machine"),
                    help="comma list of tables: forward, generate, matmul, memory (default all)")
    ap.add_argument("--baselines", default=",".join(BASELINES),
                    help="comma list of numpy, pytorch, llama.cpp (default all; numpy is always timed)")
    ap.add_argument("--reps", type=int, default=5, help="alternating rounds of a forward or product (default 5)")
    ap.add_argument("--gen-reps", type=int, default=3, help="alternating rounds of a generation (default 3)")
    ap.add_argument("--quick", action="store_true", help="a few rows of each table, 2 rounds: a check that it runs")
    ap.add_argument("--write", metavar="PAGE", default=None,
                    help="replace the tables in PAGE (docs/performance.md); needs a full run")
    ap.add_argument("--seed", type=int, default=0)
    add_machine_args(ap)
    ap.add_argument("--memory-child", nargs=3, metavar=("IMPL", "FORMAT", "GGUF"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_child:
        memory_child(*args.memory_child[:2], args.threads, args.seed, args.memory_child[2])
        return 0
    only = parse_str_list(args.only)
    unknown = set(only) - set(BLOCKS) - {"machine"}
    if unknown:
        ap.error(f"--only: unknown {sorted(unknown)}; expected forward, generate, matmul, memory")
    args.baselines = parse_str_list(args.baselines)
    unknown = set(args.baselines) - set(BASELINES)
    if unknown:
        ap.error(f"--baselines: unknown {sorted(unknown)}; expected {', '.join(BASELINES)}")
    if args.threads < 1:
        ap.error(f"--threads: at least 1, got {args.threads}")
    if args.quick:
        args.reps = args.gen_reps = 2
    if args.write:
        if args.quick or set(only) != set(BLOCKS) - {"machine"} or set(args.baselines) != set(BASELINES):
            ap.error("--write: the page's tables come from one full run (no --quick, --only or --baselines)")
        page = Path(args.write)
        if not page.is_file():
            ap.error(f"--write: no such file: {page}")
        replace_blocks(page.read_text(encoding="utf-8"), {b: "" for b in BLOCKS}, str(page))  # markers there?

    started, t0, load0 = datetime.datetime.now(), time.perf_counter(), load_average() or 0.0
    run = Run(args)
    log(f"CPU: {cpu_model()}; measuring the machine's FMA peak and read bandwidth ...")
    setup_machine(args, [args.threads], ["float32", "float64"])
    for line in MACHINE.notes:
        log(line)
    makers = {"forward": forward_table, "generate": generate_table, "matmul": matmul_table, "memory": memory_table}
    blocks = {}
    for name in BLOCKS:
        if name in only:
            blocks[name] = makers[name](run)
    blocks = {"machine": machine_table(run, started, time.perf_counter() - t0, load0, load_average() or 0.0),
              **blocks}
    run.tmp.cleanup()
    print("\n\n".join(block(name, body) for name, body in blocks.items()))
    if args.write:
        page = Path(args.write)
        page.write_text(replace_blocks(page.read_text(encoding="utf-8"), blocks, str(page)), encoding="utf-8")
        log(f"wrote {len(blocks)} tables into {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
