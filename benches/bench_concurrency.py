#!/usr/bin/env python3
"""Two Python threads running forward passes on one shared Model, against the same work done
in one thread. gptcore runs each native call single-threaded here (set_num_threads(1)), so any
speed-up comes from the two Python threads running native code at the same time: the GIL is
released during forward passes and decode steps.

    pip install .
    python3 benches/bench_concurrency.py [--calls 20] [--d-model 256] ...

It only measures and prints; it asserts nothing. Expect close to 2x on a machine with two idle
cores, less when the cores are shared.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

import numpy as np

import gptcore


def build(args):
    cfg = gptcore.GPTConfig(vocab_size=args.vocab, n_ctx=args.seq, d_model=args.d_model,
                            n_heads=max(1, args.d_model // 64), n_layers=args.layers)
    weights = gptcore.init_weights(cfg, seed=0, scheme="gpt2", dtype="float32")
    return gptcore.Model(weights, cfg), cfg


def run_calls(model, ids, calls, kind):
    for _ in range(calls):
        if kind == "forward":
            model.forward(ids, logits="last")
        else:
            model.generate(ids[0, :16], 16, greedy=True)


def sequential(model, batches, calls, kind):
    start = time.perf_counter()
    for ids in batches:
        run_calls(model, ids, calls, kind)
    return time.perf_counter() - start


def threaded(model, batches, calls, kind):
    barrier = threading.Barrier(len(batches) + 1)

    def work(ids):
        barrier.wait()
        run_calls(model, ids, calls, kind)

    threads = [threading.Thread(target=work, args=(ids,)) for ids in batches]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--calls", type=int, default=20, help="calls per thread")
    p.add_argument("--repeats", type=int, default=3, help="timings to take (the median is shown)")
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--threads", type=int, default=2, help="Python threads")
    args = p.parse_args()

    model, cfg = build(args)
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, cfg.vocab_size, size=(1, args.seq)) for _ in range(args.threads)]
    gptcore.set_num_threads(1)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"model: d_model={cfg.d_model}, {cfg.n_layers} layers, vocab {cfg.vocab_size}, T={args.seq}, "
          f"float32, kernel {gptcore.kernel()}, gptcore threads per call: {gptcore.get_num_threads()}, "
          f"CPUs available: {cpus}")
    for kind in ("forward", "generate"):
        run_calls(model, batches[0], 2, kind)  # warm-up
        seq = statistics.median(sequential(model, batches, args.calls, kind) for _ in range(args.repeats))
        par = statistics.median(threaded(model, batches, args.calls, kind) for _ in range(args.repeats))
        n = args.threads * args.calls
        print(f"{kind:9s}: {n} calls sequential {seq:7.3f} s ({1e3 * seq / n:6.1f} ms/call), "
              f"{args.threads} threads {par:7.3f} s  -> speed-up {seq / par:4.2f}x")


if __name__ == "__main__":
    main()
