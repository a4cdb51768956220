#!/usr/bin/env python3
"""Scoring a corpus: one process against a LocalCluster of N worker processes, tokens/s.

GPT-2 small with random weights (float32), 64 documents of 512 random tokens (one window
each). The baseline is ``gptcore.distributed.score`` in this process with ``--threads``
gptcore threads (default: the largest N); each cluster has N worker processes x 1 thread
(gptcore runs one thread in each). Both use the same tasks (``--batch-tokens``) and batches
of equal-length windows (``--batch``). Samples alternate (one process, then each cluster, ...)
and the medians are reported; the model is loaded and packed before the timed runs
everywhere, so they time the scoring only. The per-document numbers are checked equal, bit
for bit, between the runs.

    pip install '.[cluster]'
    python3 benches/bench_score.py [--workers 2] [--repeat 3] ...

It only measures and prints; it asserts nothing but the equality of the tables. On a machine
with more cores, try ``--workers 1 2 4 8`` to see the scaling.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time

import numpy as np

import gptcore  # the installed package (`pip install .`), never the source tree
from gptcore import distributed as gd


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, nargs="+", default=[2], help="worker processes per cluster (default 2)")
    p.add_argument("--threads", type=int, default=None, help="gptcore threads of the one process (default max workers)")
    p.add_argument("--docs", type=int, default=64)
    p.add_argument("--tokens", type=int, default=512, help="tokens per document")
    p.add_argument("--batch-tokens", type=int, default=4096, help="most tokens per task (default 4096)")
    p.add_argument("--batch", type=int, default=8, help="windows per model call (default 8)")
    p.add_argument("--repeat", type=int, default=3, help="alternating samples of each (median; default 3)")
    p.add_argument("--preset", default="gpt2")
    args = p.parse_args()
    threads = args.threads or max(args.workers)

    from distributed import Client, LocalCluster

    cfg = gptcore.GPTConfig.preset(args.preset)
    tmp = tempfile.TemporaryDirectory(prefix="bench-score-")
    path = os.path.join(tmp.name, args.preset)
    t0 = time.perf_counter()
    gptcore.Model(gptcore.init_weights(cfg, seed=0, scheme="gpt2", dtype="float32"), cfg).save(path)
    print(f"{args.preset} (random weights, float32) saved in {time.perf_counter() - t0:.1f} s; "
          f"{args.docs} documents x {args.tokens} tokens; kernel {gptcore.kernel()}; {os.cpu_count()} cores")
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, cfg.vocab_size, size=args.tokens) for _ in range(args.docs)]
    opts = dict(batch_tokens=args.batch_tokens, batch=args.batch)

    gptcore.set_num_threads(threads)
    reference = gd.score(docs, path, **opts)  # loads and packs the model in this process
    scored = int(reference["scored"].sum())
    clusters = {}
    try:
        for n in args.workers:
            cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                                   dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR)
            client = Client(cluster, set_as_default=False)
            client.wait_for_workers(n, timeout=120)
            # warm every worker: each loads and packs the model once
            client.run(gd.preload, path)
            clusters[n] = (cluster, client)
        samples = {"one process": []}
        samples.update({n: [] for n in clusters})
        for r in range(args.repeat):
            gptcore.set_num_threads(threads)
            t0 = time.perf_counter()
            df = gd.score(docs, path, **opts)
            samples["one process"].append(time.perf_counter() - t0)
            assert df.equals(reference)
            for n, (_, client) in clusters.items():
                t0 = time.perf_counter()
                df = gd.score(docs, path, client=client, **opts)
                samples[n].append(time.perf_counter() - t0)
                assert df.equals(reference), "the cluster's table differs from one process"
            print(f"  sample {r + 1}/{args.repeat}: " + ", ".join(
                f"{k if isinstance(k, str) else f'{k} workers'} {v[-1]:.2f} s" for k, v in samples.items()), flush=True)
        for n, (_, client) in clusters.items():
            info = client.run(gd.model_cache_info)
            assert all(i["builds"] == 1 for i in info.values()), info
    finally:
        for cluster, client in clusters.values():
            client.close()
            cluster.close()
        tmp.cleanup()

    base = scored / statistics.median(samples["one process"])
    print()
    print(f"| run | tokens/s (median of {args.repeat}) | vs one process |")
    print("|---|---:|---:|")
    print(f"| one process, {threads} gptcore threads | {base:,.0f} | 1.00 |")
    for n in clusters:
        rate = scored / statistics.median(samples[n])
        print(f"| LocalCluster, {n} workers x 1 thread | {rate:,.0f} | {rate / base:.2f} |")


if __name__ == "__main__":
    main()
