"""Two builds of gptcore against each other on the few-row block products alone.

One row (``--rows`` more) of A times packed ``q8_0`` and ``q4_0`` matrices of GPT-2 small's
768 x 3072 shape, rotated over about 256 MB of packed weights per format (``--mib``), so that B
comes from memory as in a decode step: the wide kernel (1-3 rows x 4 panels) of the kernel
family in use. Each build is an installed copy of the package in a directory of its own
(``pip install --no-deps --target DIR wheel``, as for ``ab_builds.py``), imported by a worker
process of its own; the driver hands each case to both workers in turn, the order swapped
every round, and prints the medians of each build's time per product (the fastest of three
passes over the matrices a sample), the read rate of B they mean, and the median of the
per-round ratios of speeds new / old (above 1: the new build is faster): the geometric mean of
two passes, one with each build's worker started first (``--passes``).
Before timing, the products of the two builds are compared (a hash of their bits): any
difference stops the run. ``--env-old`` / ``--env-new`` (``NAME=VALUE``) set a variable in one
worker only (a kernel family, ``GPTCORE_KERNEL=avx2``).

Run (after building the two wheels):

    pip install --no-deps --target /tmp/ab/old dist-old/gptcore-*.whl
    pip install --no-deps --target /tmp/ab/new dist-new/gptcore-*.whl
    python3 benches/ab_block_kernels.py --old /tmp/ab/old --new /tmp/ab/new [--rows 1,3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time

K, N = 768, 3072
FORMATS = ("q8_0", "q4_0")


def worker(mib: int) -> None:
    import gptcore
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, K)).astype(np.float32)
    bs = [rng.standard_normal((K, N)).astype(np.float32) for _ in range(4)]
    mats = {}
    for fmt in FORMATS:
        first = gptcore.PackedMatrix(bs[0], dtype=fmt)
        count = max(4, (mib << 20) // first.nbytes)
        mats[fmt] = [first] + [gptcore.PackedMatrix(bs[i % 4], dtype=fmt) for i in range(1, count)]

    def reply(obj) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    reply({"ready": gptcore.__file__})
    for line in sys.stdin:
        case = json.loads(line)
        gptcore.set_num_threads(case["threads"])
        ar = np.ascontiguousarray(a[: case["rows"]])
        ms = mats[case["fmt"]]
        bits = b"".join(gptcore.matmul(ar, m).tobytes() for m in ms[:4])
        for m in ms:
            gptcore.matmul(ar, m)
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            for m in ms:
                gptcore.matmul(ar, m)
            best = min(best, (time.perf_counter() - t) / len(ms))
        reply({"t": best, "hash": hashlib.sha256(bits).hexdigest(), "bytes": ms[0].nbytes})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old", required=True, help="directory of the old build")
    ap.add_argument("--new", required=True, help="directory of the new build")
    ap.add_argument("--rows", default="1", help="comma list of A's rows (1-3: the wide kernel)")
    ap.add_argument("--threads", default="1,2", help="comma list of thread counts")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--mib", type=int, default=256, help="packed weights per format, MiB")
    ap.add_argument("--env-old", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--env-new", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--passes", type=int, choices=(1, 2), default=2,
                    help="2: a pass with each build's worker started first (default); 1: old first")
    args = ap.parse_args()
    base = {
        k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
    }
    builds = {"old": (args.old, args.env_old), "new": (args.new, args.env_new)}

    def start(order) -> dict:
        workers = {}
        for name in order:
            path, extra = builds[name]
            # The worker imports the build installed in `path` (never the source tree).
            env = dict(base, **dict(kv.split("=", 1) for kv in extra), PYTHONPATH=os.path.abspath(path))
            workers[name] = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--worker", str(args.mib)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=env,
                cwd="/",
            )
            line = workers[name].stdout.readline()
            if not line:
                raise SystemExit(f"the worker for {path} stopped (see its error above)")
            imported = json.loads(line)["ready"]
            if not imported.startswith(os.path.abspath(path)):
                raise SystemExit(f"the worker for {path} imported gptcore from {imported}")
            print(f"{name}: {imported}")
        return workers

    def ask(workers: dict, name: str, case: dict) -> dict:
        w = workers[name]
        w.stdin.write(json.dumps(case) + "\n")
        w.stdin.flush()
        return json.loads(w.stdout.readline())

    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    cases = [
        {"fmt": fmt, "threads": threads, "rows": rows}
        for rows in [int(r) for r in args.rows.split(",")]
        for threads in [int(t) for t in args.threads.split(",")]
        for fmt in FORMATS
    ]
    # Per case: each pass's (old times, new times, old / new ratios). On this project's VMs the
    # second-started of two identical workers has run up to a tenth faster on some cases,
    # whichever build it held (benches/JOURNAL.md, 2026-12-06): a pass with each started first.
    results = {i: [] for i in range(len(cases))}
    failed = False
    for order in (("old", "new"), ("new", "old"))[: args.passes]:
        workers = start(order)
        for i, case in enumerate(cases):
            times = {"old": [], "new": []}
            ratios = []
            for r in range(args.rounds):
                res = {
                    n: ask(workers, n, case) for n in (("old", "new") if r % 2 == 0 else ("new", "old"))
                }
                if res["old"]["hash"] != res["new"]["hash"]:
                    print(f"{case}: the builds' products differ")
                    failed = True
                    break
                for n, ts in times.items():
                    ts.append(res[n]["t"])
                ratios.append(res["old"]["t"] / res["new"]["t"])
            results[i].append((times, ratios, res["old"]["bytes"]))
        for w in workers.values():
            w.stdin.close()
            w.wait()
    for i, case in enumerate(cases):
        runs = [r for r in results[i] if r[1]]
        if not runs:
            continue
        nb = runs[0][2]
        to = statistics.median([t for times, _, _ in runs for t in times["old"]])
        tn = statistics.median([t for times, _, _ in runs for t in times["new"]])
        meds = [statistics.median(ratios) for _, ratios, _ in runs]
        print(
            f"{case['fmt']} rows={case['rows']} threads={case['threads']}: old {to * 1e6:7.1f} us "
            f"({nb / to / 1e9:5.2f} GB/s), new {tn * 1e6:7.1f} us ({nb / tn / 1e9:5.2f} GB/s), "
            f"new / old x{statistics.geometric_mean(meds):.3f} (passes: "
            + ", ".join(f"{m:.3f}" for m in meds) + ")",
            flush=True,
        )
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]))
    else:
        main()
