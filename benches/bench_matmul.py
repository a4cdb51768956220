"""GFLOP/s of gptcore.matmul against numpy's ``@`` (OpenBLAS) at GPT-2 small shapes.

For each dtype and thread count: (T x K) @ (K x N) for the four projection shapes of a GPT-2
small block and the LM head, T in {1, 8, 64, 256, 1024}, plus a square 2048 product. The
right-hand side is a pre-built gptcore.PackedMatrix (the weights case); one shape is also timed
with a plain ndarray right-hand side ("unpacked", packing included in every call).

For T = 1 and 8 the products rotate through enough distinct weight matrices (more than twice
the last-level cache in all) that the weights come from memory, as they do in a real decode
step; the table then also shows the achieved read bandwidth.

The FMA peak per core and the read bandwidth are measured at start (see _common.py) or given
with --peak-gflops / --bandwidth.

Run:  python3 benches/bench_matmul.py [--quick]          (after `pip install .`)
      GPTCORE_KERNEL=avx2 OPENBLAS_CORETYPE=Haswell python3 benches/bench_matmul.py
          (the AVX2 paths of both libraries on a CPU that has AVX-512)
"""

from __future__ import annotations

import argparse
import math
import time

from _common import (
    SETTLE_THREADED,
    add_machine_args,
    bandwidth,
    closing_line,
    compare,
    paired_speed,
    environment_report,
    fmt,
    gptcore,
    markdown_table,
    np,
    parse_int_list,
    parse_str_list,
    peak_flops,
    set_threads,
    setup_machine,
    stream_bytes,
)

D = 768
# (K, N) of GPT-2 small's products: c_attn, attn c_proj, mlp c_fc, mlp c_proj, LM head.
GPT2_SHAPES = [(D, 3 * D), (D, D), (D, 4 * D), (4 * D, D), (D, 50257)]
T_VALUES = [1, 8, 64, 256, 1024]
QUICK_SHAPES = [(D, 3 * D), (4 * D, D), (D, 50257)]
QUICK_T = [1, 8, 256]
UNPACKED_SHAPE = (D, 3 * D)
STREAM_T = 8  # rotate weights for T <= this


def make_weights(rng, k, n, dtype, count):
    base = (rng.standard_normal((k, n), dtype=np.float64) * 0.05).astype(dtype)
    mats = [base]
    for i in range(1, count):
        mats.append(base * dtype(1.0 + 1e-3 * i))  # distinct memory, same magnitudes
    return mats


def check(a, w, packed, dtype):
    got = gptcore.matmul(a, packed)
    ref = a.astype(np.float64) @ w.astype(np.float64)
    err = float(np.max(np.abs(got - ref)))
    tol = (2e-4 if dtype == np.float32 else 1e-12) * max(1.0, float(np.max(np.abs(ref))))
    assert err <= tol, f"gptcore.matmul disagrees with float64 numpy: max |diff| {err:.3g} > {tol:.3g}"


def run_case(rng, m, k, n, dtype, threads, reps, min_time, settle, unpacked):
    """Returns a list of table rows for one (shape, dtype, threads)."""
    itemsize = np.dtype(dtype).itemsize
    wbytes = k * n * itemsize
    count = max(1, math.ceil((stream_bytes() + 1) / wbytes)) if m <= STREAM_T else 1
    mats = make_weights(rng, k, n, dtype, count)
    packed = [gptcore.PackedMatrix(w) for w in mats]
    a = (rng.standard_normal((m, k)) * 0.5).astype(dtype)
    check(a, mats[0], packed[0], dtype)

    def rotating(fn, items):
        state = {"i": 0}

        def call():
            i = state["i"]
            state["i"] = i + 1 if i + 1 < len(items) else 0
            return fn(a, items[i])

        return call

    fns = {
        "gptcore": rotating(gptcore.matmul, packed),
        "numpy": rotating(np.matmul, mats),
    }
    if unpacked:
        fns["gptcore unpacked"] = rotating(gptcore.matmul, mats)
    flops = 2.0 * m * k * n
    one_call = flops / (0.5 * peak_flops(np.dtype(dtype).name, threads))
    budget = 20.0 if one_call > 0.5 else None
    res = compare(fns, reps=reps, min_time=min_time, settle=settle, budget=budget)
    peak = peak_flops(np.dtype(dtype).name, threads)
    rows = []
    np_rate = flops / res["numpy"].median
    for name in ("gptcore", "gptcore unpacked"):
        if name not in res:
            continue
        r = res[name]
        rate = flops / r.median
        # Weights come from memory when rotated, or when one matrix is larger than the L3.
        bw = f"{wbytes / r.median / 1e9:.1f} GB/s" if m <= STREAM_T else "-"
        rows.append([
            np.dtype(dtype).name, threads, f"{m}x{k}x{n}",
            ("packed" if name == "gptcore" else "unpacked") + (f", {count} mats" if count > 1 else ""),
            fmt(rate / 1e9, 1), fmt(np_rate / 1e9, 1), fmt(paired_speed(res, "numpy", name), 2),
            f"{100 * rate / peak:.0f}%", f"{100 * np_rate / peak:.0f}%", bw,
            f"{100 * max(r.spread, res['numpy'].spread):.0f}%",
        ])
    del packed, mats
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer shapes and repetitions")
    ap.add_argument("--dtype", default="float32,float64", help="comma list (default float32,float64)")
    ap.add_argument("--threads", default="1,2", help="comma list (default 1,2)")
    ap.add_argument("--t", default=None, help="comma list of T values (default 1,8,64,256,1024)")
    ap.add_argument("--reps", type=int, default=None, help="samples per implementation (default 7, quick 3)")
    ap.add_argument("--no-square", action="store_true", help="skip the square 2048 product")
    ap.add_argument("--settle", type=float, default=None,
                    help="seconds to sleep between implementations when threads > 1 (default 0.25): "
                         "lets OpenBLAS's spinning workers go idle before gptcore runs")
    ap.add_argument("--seed", type=int, default=0)
    add_machine_args(ap)
    args = ap.parse_args()

    dtypes = [np.dtype(d).type for d in parse_str_list(args.dtype)]
    for d in dtypes:
        if d not in (np.float32, np.float64):
            ap.error(f"--dtype: float32 or float64, got {np.dtype(d).name}")
    threads_list = parse_int_list(args.threads)
    shapes = QUICK_SHAPES if args.quick else GPT2_SHAPES
    t_values = parse_int_list(args.t) if args.t else (QUICK_T if args.quick else T_VALUES)
    reps = args.reps or (3 if args.quick else 7)
    min_time = 0.02 if args.quick else 0.05
    square = not (args.no_square or args.quick)
    rng = np.random.default_rng(args.seed)

    setup_machine(args, threads_list, [np.dtype(d).name for d in dtypes],
                  need_bandwidth=min(t_values) <= STREAM_T)
    print("# gptcore.matmul vs numpy @\n")
    print(environment_report())
    print(f"- reps {reps} (median), min sample {min_time * 1e3:.0f} ms, weights rotated for T <= {STREAM_T} "
          f"(> {stream_bytes() >> 20} MiB distinct); gptcore/numpy = the median of the speed ratios of the "
          f"two samples of each round; %peak = against the peak per core above x threads; "
          f"noise = (max - min) / median of the samples, worse of the two sides")
    print()
    headers = ["dtype", "thr", "MxKxN", "b", "gptcore GF/s", "numpy GF/s", "gptcore/numpy",
               "gptcore %peak", "numpy %peak", "gptcore read BW", "noise"]
    rows = []
    t_start = time.perf_counter()
    for dtype in dtypes:
        for threads in threads_list:
            set_threads(threads)
            settle = (SETTLE_THREADED if args.settle is None else args.settle) if threads > 1 else 0.0
            cases = [(m, k, n) for (k, n) in shapes for m in t_values]
            if square:
                cases.append((2048, 2048, 2048))
            for (m, k, n) in cases:
                unpacked = (k, n) == UNPACKED_SHAPE
                rows.extend(run_case(rng, m, k, n, dtype, threads, reps, min_time, settle, unpacked))
                print(f"  done {np.dtype(dtype).name} threads={threads} {m}x{k}x{n} "
                      f"({time.perf_counter() - t_start:.0f} s)", flush=True)
    print()
    print(markdown_table(headers, rows))
    print("\n" + closing_line(t_start) + ".")
    if min(t_values) <= STREAM_T:
        print(f"Read BW: weight bytes per call / time (T <= {STREAM_T} only; the machine reads "
              + ", ".join(f"~{bandwidth(t) / 1e9:.1f} GB/s on {t} thread(s)" for t in threads_list) + ").")


if __name__ == "__main__":
    main()
