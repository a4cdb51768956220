"""Threads, signals and memory.

- Python threads sharing one Model get exactly the single-threaded results (the model is
  immutable; the GIL is released during native work).
- The thread count and the micro-kernel never change a bit of any result.
- Ctrl-C during a long native call raises KeyboardInterrupt within about a second (the decoder
  checks for signals between layers) and leaves the model, and a cache, usable.
- Repeated calls do not grow the process's memory.
"""

from __future__ import annotations

import gc
import math
import os
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import gptcore
from gptcore import GPTConfig, Model
from emulation import skip_if_emulated

KERNELS = gptcore.available_kernels()


def random_weights(config: GPTConfig, seed: int = 0):
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in gptcore.expected_shapes(config).items():
        z = rng.standard_normal(shape)
        if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            out[name] = 1 + 0.1 * z
        elif name.endswith(".bias"):
            out[name] = 0.1 * z
        elif name in ("wte.weight", "wpe.weight", "lm_head.weight"):
            out[name] = 0.5 * z
        else:
            out[name] = z / math.sqrt(shape[0])
    return out


# Big enough that every parallel path runs (row loops, attention items, gemm tiles).
MID = GPTConfig(vocab_size=97, n_ctx=160, d_model=64, n_heads=4, n_layers=3, tied=False)
MID_W = random_weights(MID, seed=1)
MODELS = {dt: Model(MID_W, MID, dtype=dt) for dt in ("float32", "float64")}
RNG = np.random.default_rng(2)
BATCHES = [RNG.integers(0, MID.vocab_size, size=(4, 128)) for _ in range(8)]


def _workload(model: Model, ids: np.ndarray):
    """Everything a caller might do with a model, on one batch of ids."""
    out = {
        "forward": model.forward(ids),
        "last": model.forward(ids, logits="last"),
        "hidden": model.forward(ids[:1, :40], return_hidden=True)[1],
        "logprobs": model.token_logprobs(ids, chunk=37),
        "greedy": model.generate(ids[:, :30], 8, greedy=True),
        "sampled": model.generate(ids[:2, :20], 8, seed=7, top_k=20, top_p=0.9, temperature=0.8),
    }
    cache = model.new_cache(ids.shape[0])
    model.step(cache, ids[:, :50])
    out["step"] = model.step(cache, ids[:, 50:53])
    return out


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_eight_threads_share_a_model_with_single_threaded_results(dtype):
    model = MODELS[dtype]
    expected = [_workload(model, ids) for ids in BATCHES]
    barrier = threading.Barrier(8)
    results, errors = [None] * 8, []

    def run(i):
        try:
            barrier.wait()
            results[i] = [_workload(model, BATCHES[(i + r) % 8]) for r in range(2)]
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in range(8):
        for r in range(2):
            assert _same(results[i][r], expected[(i + r) % 8]), f"thread {i}, round {r}"


def test_changing_threads_and_kernels_while_other_threads_compute():
    """set_num_threads and set_kernel take effect between products; they never change a bit,
    even when called while other threads are in the middle of a forward pass."""
    model = MODELS["float32"]
    expected = [_workload(model, ids) for ids in BATCHES[:4]]
    stop = threading.Event()
    errors = []

    def toggle():
        i = 0
        while not stop.is_set():
            gptcore.set_num_threads(1 + i % 3)
            gptcore.set_kernel(KERNELS[i % len(KERNELS)])
            i += 1
            time.sleep(0.001)

    def work(i):
        try:
            for r in range(3):
                got = _workload(model, BATCHES[i])
                if not _same(got, expected[i]):
                    errors.append(f"worker {i} round {r} differs")
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    toggler = threading.Thread(target=toggle)
    workers = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    toggler.start()
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    stop.set()
    toggler.join()
    assert not errors, errors


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_results_identical_for_every_thread_count_and_kernel(dtype):
    model = MODELS[dtype]
    ids = BATCHES[0]
    gptcore.set_kernel(None)
    gptcore.set_num_threads(2)
    ref = _workload(model, ids)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((300, 200)).astype(dtype)
    b = rng.standard_normal((200, 170)).astype(dtype)
    ref_mm = gptcore.matmul(a, b)
    for kern in KERNELS:
        for n in (1, 2, 3):
            gptcore.set_kernel(kern)
            gptcore.set_num_threads(n)
            assert _same(_workload(model, ids), ref), f"kernel {kern}, {n} threads"
            assert np.array_equal(gptcore.matmul(a, b), ref_mm), f"matmul: kernel {kern}, {n} threads"


_SHARED_CACHE = r"""
import threading, numpy as np, gptcore
from gptcore import GPTConfig, Model
cfg = GPTConfig(vocab_size=97, n_ctx=160, d_model=64, n_heads=4, n_layers=3)
model = Model(gptcore.init_weights(cfg, seed=1, scheme="lesson"), cfg, dtype="float32")
ids = np.random.default_rng(0).integers(0, 97, size=(4, 120))
for rnd in range(30):
    cache = model.new_cache(4)
    outcomes = []
    def run():
        try:
            outcomes.append(model.step(cache, ids[:, :30]))
        except ValueError as e:
            outcomes.append(e)
    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok = [o for o in outcomes if isinstance(o, np.ndarray)]
    refused = [o for o in outcomes if isinstance(o, ValueError)]
    assert len(ok) + len(refused) == 4 and ok, outcomes
    assert all("in use by another thread" in str(e) for e in refused), refused
    assert cache.len == 30 * len(ok), (cache.len, len(ok))
    n = cache.len
    want = model.forward(np.concatenate([np.tile(ids[:, :30], (1, len(ok))), ids[:, 30:33]], axis=1), logits="last")
    assert np.array_equal(model.step(cache, ids[:, 30:33]), want)
print("OK")
"""


def test_a_cache_used_from_several_threads_at_once_is_refused_not_deadlocked():
    """A cache is one sequence's state: a second thread stepping it at the same time gets a
    ValueError ("in use by another thread"). It must not deadlock the process (the check runs
    in a child interpreter, so that a deadlock fails this test instead of hanging the run)."""
    skip_if_emulated("a child interpreter must finish within the 20 s deadlock guard")
    root = str(Path(gptcore.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        p = subprocess.run([sys.executable, "-c", _SHARED_CACHE], capture_output=True, text=True, timeout=20, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail("deadlock: threads stepping one cache hung the interpreter for 20 s")
    assert p.returncode == 0 and p.stdout.strip().endswith("OK"), p.stderr[-1500:]


# ------------------------------------------------------------------------------------------
# Ctrl-C
# ------------------------------------------------------------------------------------------

D, T = 128, 1024


def _long_model():
    """A model whose forward on T tokens takes several seconds: many copies of one layer
    (sinusoidal positions, small vocabulary), sized from a quick measurement."""
    base = GPTConfig(vocab_size=16, n_ctx=T, d_model=D, n_heads=2, n_layers=2, pos="sinusoidal")
    w2 = random_weights(base, seed=3)
    w2 = {k: (v * 0.5 if "c_proj.weight" in k else v).astype(np.float32) for k, v in w2.items()}
    ids = np.arange(T) % 16
    m2 = Model(w2, base)
    m2.forward(ids, logits="last")
    start = time.perf_counter()
    m2.forward(ids, logits="last")
    per_layer = (time.perf_counter() - start) / 2
    n = int(min(400, max(8, 4.0 / max(per_layer, 1e-4))))
    cfg = base.replace(n_layers=n)
    w = {}
    for k, v in w2.items():
        if k.startswith("h."):
            rest = k.split(".", 2)[2]
            for i in range(n):
                w[f"h.{i}.{rest}"] = w2[f"h.{i % 2}.{rest}"]
        else:
            w[k] = v
    return Model(w, cfg), per_layer


@pytest.fixture(scope="module")
def long_model():
    return _long_model()


class _Interrupter:
    """Send SIGINT to the main thread after ``delay`` seconds; the handler raises
    KeyboardInterrupt only while armed (a late signal is recorded, not raised)."""

    def __init__(self, delay: float):
        self.delay = delay
        self.armed = True
        self.sent_at = None
        self.late = False

    def _handler(self, signum, frame):
        if self.armed:
            raise KeyboardInterrupt
        self.late = True

    def _send(self):
        self.sent_at = time.perf_counter()
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    def __enter__(self):
        self.old = signal.signal(signal.SIGINT, self._handler)
        self.timer = threading.Timer(self.delay, self._send)
        self.timer.start()
        return self

    def __exit__(self, *exc):
        self.armed = False
        self.timer.join()
        time.sleep(0.05)  # let a late signal be handled while disarmed
        signal.signal(signal.SIGINT, self.old)
        return False


def _interrupt(call, delay=0.4):
    """Run ``call`` and interrupt it; return seconds from the signal to KeyboardInterrupt."""
    caught_at = None
    with _Interrupter(delay) as it:
        try:
            call()
        except KeyboardInterrupt:
            caught_at = time.perf_counter()
    assert caught_at is not None, "the call finished before the signal, or the signal was lost"
    assert not it.late
    return caught_at - it.sent_at


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals need the main thread")
def test_ctrl_c_interrupts_forward_and_the_model_still_works(long_model):
    model, per_layer = long_model
    short = np.arange(40) % 16
    before = model.forward(short)
    ids = np.arange(T) % 16
    for call in (lambda: model.forward(ids), lambda: model.forward(ids, logits="last"),
                 lambda: model.token_logprobs(ids), lambda: model.generate(ids, 2, greedy=True)):
        latency = _interrupt(call)
        assert latency <= 1.0 + 3 * per_layer, f"KeyboardInterrupt {latency:.2f} s after the signal"
        assert np.array_equal(model.forward(short), before)
    assert np.array_equal(model.generate(short, 3, greedy=True), model.generate(short.copy(), 3, greedy=True))


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals need the main thread")
def test_ctrl_c_during_a_step_leaves_the_cache_as_it_was(long_model):
    """An interrupted step must not leave the cache half-updated (some layers holding the new
    positions, others not): afterwards it holds what it held before, and stepping on gives the
    same numbers as a forward pass."""
    model, per_layer = long_model
    prompt = (np.arange(T - 8) % 16)[None]
    cache = model.new_cache(1)
    model.step(cache, prompt[:, :16])
    latency = _interrupt(lambda: model.step(cache, prompt[:, 16:]))
    assert latency <= 1.0 + 3 * per_layer
    assert cache.len == 16, f"the cache claims {cache.len} positions after an interrupted step"
    nxt = np.array([[3, 1, 4]])
    want = model.forward(np.concatenate([prompt[:, :16], nxt], axis=1), logits="last")
    assert np.array_equal(model.step(cache, nxt), want)


# ------------------------------------------------------------------------------------------
# memory
# ------------------------------------------------------------------------------------------

TINY = GPTConfig(vocab_size=31, n_ctx=32, d_model=16, n_heads=2, n_layers=2)
TINY_M = Model(random_weights(TINY, seed=4), TINY, dtype="float32")


def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _calls(n: int):
    ids = np.arange(24).reshape(2, 12) % 31
    a = np.ones((20, 30), np.float32)
    for i in range(n):
        TINY_M.forward(ids)
        TINY_M.forward(ids[0], logits="last", return_hidden=True)
        if i % 10 == 0:
            TINY_M.token_logprobs(ids)
            TINY_M.generate(ids[:, :4], 4, seed=i)
            c = TINY_M.new_cache(2)
            TINY_M.step(c, ids[:, :5])
            gptcore.matmul(a, gptcore.PackedMatrix(a.T.copy()))
            for bad in (np.array([99]), np.zeros((1, 40), np.int64)):
                try:
                    TINY_M.forward(bad)
                except ValueError:
                    pass
            try:
                TINY_M._native.forward(np.array([[99]]), "all", True, False)  # the Rust-side check
            except ValueError:
                pass


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
def test_repeated_calls_do_not_grow_rss():
    _calls(200)  # warm-up: thread pool, allocator arenas, caches
    gc.collect()
    before = _rss()
    _calls(1000)
    gc.collect()
    grown = _rss() - before
    assert grown < 4 << 20, f"RSS grew by {grown / 2**20:.1f} MiB over 1000 rounds of calls"


def test_repeated_calls_do_not_grow_python_memory():
    _calls(50)
    gc.collect()
    tracemalloc.start()
    try:
        _calls(20)
        gc.collect()
        first, _ = tracemalloc.get_traced_memory()
        _calls(300)
        gc.collect()
        second, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert second - first < 64 << 10, f"traced Python memory grew by {(second - first) / 1024:.0f} KiB"


def test_panics_do_not_leak():
    for _ in range(5):  # warm-up: the first panic may load symbols for its backtrace
        with pytest.raises(RuntimeError):
            gptcore._native._panic_for_tests()
    gc.collect()
    before = _rss() if os.path.exists("/proc/self/statm") else 0
    for _ in range(200):
        with pytest.raises(RuntimeError):
            gptcore._native._panic_for_tests()
    gc.collect()
    if before:
        assert _rss() - before < 4 << 20
    assert np.array_equal(TINY_M.forward(np.arange(5)), TINY_M.forward(np.arange(5)))
