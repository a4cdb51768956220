"""``gptcore bench``: a GPT-2-sized matrix product timed with ``gptcore.matmul`` and with
numpy."""

from __future__ import annotations

import argparse
import time

import numpy as np

from ..linalg import matmul
from ._common import positive, table

__all__ = ["add_parser", "run"]


def add_parser(sub) -> argparse.ArgumentParser:
    bench = sub.add_parser("bench", help="time a GPT-2-sized matmul against numpy")
    bench.add_argument("--m", type=positive, default=1024, help="rows of a (tokens; default 1024)")
    bench.add_argument("--k", type=positive, default=768, help="inner size (default 768)")
    bench.add_argument("--n", type=positive, default=3072, help="columns of b (default 3072)")
    bench.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    bench.add_argument("--repeat", type=positive, default=5, help="timed runs; the best is reported (default 5)")
    bench.set_defaults(func=run)
    return bench


def run(args: argparse.Namespace) -> int:
    """Time ``a @ b`` for a GPT-2-sized product with gptcore.matmul and with numpy."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((args.m, args.k)).astype(args.dtype)
    b = rng.standard_normal((args.k, args.n)).astype(args.dtype)
    flop = 2.0 * args.m * args.k * args.n

    def best(fn) -> float:
        fn()
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    t_core = best(lambda: matmul(a, b))
    t_np = best(lambda: a @ b)
    print("\n".join(table([(
        f"({args.m} x {args.k}) @ ({args.k} x {args.n}) {args.dtype}, best of {args.repeat}",
        [
            ("gptcore.matmul", f"{flop / t_core / 1e9:.1f} GFLOP/s"),
            ("numpy @", f"{flop / t_np / 1e9:.1f} GFLOP/s"),
            ("speed-up over numpy", f"{t_np / t_core:.2f} x"),
        ],
    )])))
    return 0
