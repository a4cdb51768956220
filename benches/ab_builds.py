"""Two builds of gptcore against each other: old and new, alternating in one run.

Each build is an installed copy of the package in a directory of its own (``pip install
--no-deps --target DIR wheel``), imported by a worker process of its own; the driver hands the
same cases to both workers in turn, a sample each, the order swapped every round, and prints for
every case the median over rounds of the ratio of speeds new / old (above 1: the new build is
faster), with the spread of the ratios. Workers for a kernel family other than the default are
started with ``GPTCORE_KERNEL`` set (the packing layout follows the family, as in real use).

Cases, each with 1 and 2 threads:

- a GPT-2 small forward (random weights), float32: 1 x 256 and 8 x 128 tokens;
- greedy decoding (16 prompt tokens, 32 new) of one sequence and of a batch of eight (the
  batched decode step that continuous batching runs on), float32 and bfloat16 weights;
- the matrix products of ``bench_matmul.py --quick`` (GPT-2 small's 768 x 2304, 3072 x 768 and
  768 x 50257 packed right-hand sides, float32) for 1, 8, 64, 256 and 1024 rows; up to 8 rows
  the products rotate over copies of the weights (``--rotate-mib`` in all), so that they come
  from memory as in a decode step.

Before timing, each case's output is compared between the builds: any difference in any bit
stops the run (a refactoring must not change a result).

Two passes by default (``--passes``): the old build's worker started first, then the new
build's first. On this project's VMs the second-started of two identical workers has run up to
a tenth faster on some cases, whichever build it held (benches/JOURNAL.md, 2026-12-06); each
pass's median is printed and the ratio quoted is their geometric mean.

Run (after building the two wheels):

    pip install --no-deps --target /tmp/ab/old dist-old/gptcore-*.whl
    pip install --no-deps --target /tmp/ab/new dist-new/gptcore-*.whl
    python3 benches/ab_builds.py --old /tmp/ab/old --new /tmp/ab/new [--kernels default,avx2]
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

PROMPT = 16
NEW = 32
BATCH = 8
D = 768
MATMUL_SHAPES = [(D, 3 * D), (4 * D, D), (D, 50257)]
MATMUL_ROWS = [1, 8, 64, 256, 1024]


# ---------------------------------------------------------------------------------------------
# Worker: one build, driven over stdin / stdout (one JSON object a line).


def worker(rotate_mib: int) -> None:
    import numpy as np

    import gptcore

    def reply(obj) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    config = gptcore.GPTConfig.preset("gpt2")
    weights = gptcore.init_weights(config, 0, "gpt2", dtype="float32")
    weights = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in weights.items()}
    models = {
        "float32": gptcore.Model(weights),
        "bfloat16": gptcore.Model(weights, weight_dtype="bfloat16"),
    }
    rng = np.random.default_rng(1)
    ids = {(b, t): rng.integers(0, config.vocab_size, size=(b, t)) for b, t in [(1, 256), (8, 128)]}
    prompt = rng.integers(0, config.vocab_size, size=(1, PROMPT))
    # A generator of its own, so the other cases' inputs stay what they were.
    prompts = {1: prompt,
               BATCH: np.random.default_rng(2).integers(0, config.vocab_size, size=(BATCH, PROMPT))}
    # Products: per shape, the packed weights (copies to rotate over for few rows) and A.
    packed = {}
    for k, n in MATMUL_SHAPES:
        base = (rng.standard_normal((k, n)) * 0.05).astype(np.float32)
        count = max(1, (rotate_mib << 20) // base.nbytes)
        packed[(k, n)] = [gptcore.PackedMatrix(base * np.float32(1.0 + 1e-3 * i)) for i in range(count)]
    a = {(m, k): rng.standard_normal((m, k)).astype(np.float32)
         for m in MATMUL_ROWS for k in {k for k, _ in MATMUL_SHAPES}}
    turn = {"i": 0}

    def case_fn(case):
        kind = case["kind"]
        if kind == "forward":
            x = ids[(case["b"], case["t"])]
            return lambda: models["float32"].forward(x)
        if kind == "decode":
            m, p = models[case["weights"]], prompts[case.get("b", 1)]
            return lambda: np.asarray(m.generate(p, NEW, greedy=True))
        k, n, m = case["k"], case["n"], case["m"]
        mats = packed[(k, n)]
        rotate = m <= 8

        def product():
            i = turn["i"] % len(mats) if rotate else 0
            turn["i"] += 1
            return gptcore.matmul(a[(m, k)], mats[i])

        return product

    reply({"ready": True, "file": gptcore.__file__, "native": gptcore._native.__file__,
           "kernel": gptcore.kernel()})
    for line in sys.stdin:
        req = json.loads(line)
        gptcore.set_num_threads(req["threads"])
        fn = case_fn(req["case"])
        if req["op"] == "digest":
            turn["i"] = 0  # the first of the rotated matrices, in both builds
            out = np.ascontiguousarray(np.asarray(fn()))
            reply({"sha256": hashlib.sha256(out.tobytes()).hexdigest(), "shape": list(out.shape),
                   "dtype": str(out.dtype)})
            continue
        reps = req["reps"]
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        reply({"seconds": (time.perf_counter() - t0) / reps})


# ---------------------------------------------------------------------------------------------
# Driver


class Build:
    def __init__(self, site: str, kernel: str, rotate_mib: int):
        env = dict(os.environ)
        env["PYTHONPATH"] = site
        env.pop("GPTCORE_KERNEL", None)
        if kernel != "default":
            env["GPTCORE_KERNEL"] = kernel
        for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
            env.pop(var, None)
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", "--rotate-mib", str(rotate_mib)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd="/")
        self.info = self._read()
        if not self.info["file"].startswith(os.path.abspath(site)):
            raise SystemExit(f"the worker for {site} imported gptcore from {self.info['file']}")

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit("a worker stopped (see its error above)")
        return json.loads(line)

    def ask(self, **req):
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def cases():
    out = [{"kind": "forward", "b": 1, "t": 256, "name": "forward 1 x 256"},
           {"kind": "forward", "b": 8, "t": 128, "name": "forward 8 x 128"},
           {"kind": "decode", "weights": "float32", "name": f"decode B=1 float32 ({NEW} tok)"},
           {"kind": "decode", "weights": "bfloat16", "name": f"decode B=1 bfloat16 ({NEW} tok)"},
           {"kind": "decode", "weights": "float32", "b": BATCH, "name": f"decode B={BATCH} float32 ({NEW} tok)"},
           {"kind": "decode", "weights": "bfloat16", "b": BATCH, "name": f"decode B={BATCH} bfloat16 ({NEW} tok)"}]
    for k, n in MATMUL_SHAPES:
        for m in MATMUL_ROWS:
            out.append({"kind": "matmul", "k": k, "n": n, "m": m, "name": f"matmul {m} x {k} x {n}"})
    return out


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return "unknown CPU"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", help="directory holding the old build's installed package")
    ap.add_argument("--new", help="directory holding the new build's installed package")
    ap.add_argument("--kernels", default="default,avx2",
                    help="kernel families to run (comma-separated; 'default': the detected one)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--min-time", type=float, default=0.1, help="seconds of one sample at least")
    ap.add_argument("--rotate-mib", type=int, default=160)
    ap.add_argument("--passes", type=int, choices=(1, 2), default=2,
                    help="2: a pass with each build's worker started first (default); 1: old first")
    ap.add_argument("--only", default="",
                    help="run the cases whose name contains one of these (comma-separated)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.rotate_mib)
        return 0
    if not (args.old and args.new):
        ap.error("--old and --new are required")
    threads = [int(t) for t in args.threads.split(",")]
    print(f"# new / old speed, {cpu_name()}, {os.cpu_count()} CPUs; medians of {args.rounds} rounds "
          f"(each a sample of each build, the order swapped every round), min..max in brackets; "
          f"{args.passes} pass(es): old's worker started first, then new's")
    print()
    print("| kernel | case | threads | new / old | pass: old first | pass: new first |")
    print("|---|---|---|---|---|---|")
    ratios_all = []
    selected = [c for c in cases()
                if not args.only or any(o in c["name"] for o in args.only.split(","))]
    for kernel in args.kernels.split(","):
        # Per (case, threads): the pass medians and spreads, in pass order.
        passes = {}
        for first_old in (True, False)[:args.passes]:
            if first_old:
                old = Build(args.old, kernel, args.rotate_mib)
                new = Build(args.new, kernel, args.rotate_mib)
            else:
                new = Build(args.new, kernel, args.rotate_mib)
                old = Build(args.old, kernel, args.rotate_mib)
            if old.info["native"] == new.info["native"] and os.path.realpath(args.old) != os.path.realpath(args.new):
                raise SystemExit("both workers loaded the same extension")
            if old.info["kernel"] != new.info["kernel"]:
                raise SystemExit(f"kernels differ: {old.info['kernel']} / {new.info['kernel']}")
            label = old.info["kernel"]
            try:
                for case in selected:
                    for t in threads:
                        d_old = old.ask(op="digest", case=case, threads=t)
                        d_new = new.ask(op="digest", case=case, threads=t)
                        if d_old != d_new:
                            raise SystemExit(f"{case['name']}, {t} threads: the builds' results differ")
                        # Repetitions for a sample of at least --min-time (from a first timing).
                        once = old.ask(op="time", case=case, threads=t, reps=1)["seconds"]
                        reps = max(1, int(args.min_time / max(once, 1e-6) + 0.999))
                        ratios = []
                        for r in range(args.rounds):
                            pair = (old, new) if r % 2 == 0 else (new, old)
                            secs = {id(b): b.ask(op="time", case=case, threads=t, reps=reps)["seconds"]
                                    for b in pair}
                            ratios.append(secs[id(old)] / secs[id(new)])
                        passes.setdefault((case["name"], t), []).append(ratios)
            finally:
                old.close()
                new.close()
        for (name, t), runs in passes.items():
            meds = [statistics.median(r) for r in runs]
            mean = statistics.geometric_mean(meds)
            ratios_all.append(mean)
            cells = [f"{m:.3f} ({min(r):.2f}..{max(r):.2f})" for m, r in zip(meds, runs)]
            cells += ["-"] * (2 - len(cells))
            print(f"| {label} | {name} | {t} | {mean:.3f} | {cells[0]} | {cells[1]} |", flush=True)
    if ratios_all:
        print()
        print(f"median of the cases' medians: {statistics.median(ratios_all):.3f}; "
              f"lowest {min(ratios_all):.3f}, highest {max(ratios_all):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
