"""Latency of a full GPT-2 small forward (logits for every position), float32, random weights:
gptcore.Model(weights).forward(ids) against transformers' GPT2LMHeadModel (eval,
torch.inference_mode, the same weights, the same thread count) and a plain numpy forward
(gptcore.numpy_forward), and against the machine's floor.

floor = max(FLOPs / peak, weight bytes / read bandwidth), with
  FLOPs = 2 * P_mm * B * T + 2 * 2 * n_layers * B * d * T (T + 1) / 2
  P_mm  = n_layers * (4 d^2 + 2 d d_ff) + V d   (the weights that enter matrix products,
          the LM head included; 85.0M + 38.6M for GPT-2 small)
  the second term is causal attention: Q K^T and P V, 2 * d_head FLOPs per (query, key) pair
  per head, T (T + 1) / 2 pairs. LayerNorm, GELU, softmax and adds are not counted.
  weight bytes = every float32 array except wpe (the tied wte counted once)
  peak = the float32 FMA peak per core times the threads, read bandwidth at that thread
  count: both measured at start (see _common.py) or given with --peak-gflops / --bandwidth.

Before timing, the numpy forward is checked against torch (and gptcore against numpy when
gptcore.Model exists): max |logit difference| must stay below 1e-3.

Peak memory: for each configuration a subprocess per implementation builds the weights, resets
the kernel's peak-RSS counter (/proc/self/clear_refs), builds the model, resets it again, runs
one forward and reads VmHWM. "fwd growth" is the peak RSS above the RSS just before the forward;
"build+fwd" is the peak above the RSS before the model was built (gptcore pre-packs a copy of
the weights, transformers copies them into its parameters; numpy builds nothing).

Run:  python3 benches/bench_forward.py        (after `pip install .`; the torch columns need
      torch and transformers installed, and are skipped with a note otherwise)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time

from _common import (
    add_machine_args,
    setup_machine,
    SETTLE_THREADED,
    closing_line,
    compare,
    paired_speed,
    environment_report,
    fmt,
    fmt_bytes,
    gptcore,
    import_torch,
    torch_baseline,
    markdown_table,
    np,
    parse_int_list,
    set_threads,
)
from _models import forward_flops, forward_floor, gpt2_config, hf_model, random_weights, weight_bytes_read
from gptcore import numpy_forward as numpy_gpt2

CONFIGS = [(1, 8), (1, 64), (1, 256), (1, 1024), (8, 128)]
QUICK_CONFIGS = [(1, 8), (1, 256), (8, 128)]
TOLERANCE = 1e-3


def parse_configs(text):
    out = []
    for item in text.split(","):
        b, t = item.lower().split("x")
        out.append((int(b), int(t)))
    return out


def make_runners(impls, weights, config, model, hf, torch):
    """name -> function(ids ndarray) -> logits ndarray."""
    runners = {}
    if "gptcore" in impls and model is not None:
        runners["gptcore"] = lambda ids: model.forward(ids)
    if "torch" in impls and hf is not None:
        def run_torch(ids, _t=torch):
            with _t.inference_mode():
                return hf(input_ids=_t.from_numpy(ids), use_cache=False).logits
        runners["torch"] = run_torch
    if "numpy" in impls:
        runners["numpy"] = lambda ids: numpy_gpt2.forward(weights, ids, config)
    return runners


def as_numpy(x):
    return x.detach().numpy() if hasattr(x, "detach") else np.asarray(x)


def sanity_check(runners, config, seed):
    """numpy vs torch and gptcore vs numpy on a (2, 32) batch, then one single sequence."""
    rng = np.random.default_rng(seed + 7)
    lines = []
    for shape in ((2, 32), (40,)):
        ids = rng.integers(0, config.vocab_size, size=shape, dtype=np.int64)
        outs = {}
        for name, run in runners.items():
            ids_in = ids if name != "torch" or ids.ndim == 2 else ids[None, :]
            out = as_numpy(run(ids_in))
            if name == "torch" and ids.ndim == 1:
                out = out[0]
            expected = tuple(shape) + (config.vocab_size,)
            assert out.shape == expected, f"{name} forward returned shape {out.shape}, expected {expected}"
            assert out.dtype == np.float32, f"{name} forward returned {out.dtype}, expected float32"
            outs[name] = out.astype(np.float64)
        for a, b in (("numpy", "torch"), ("gptcore", "numpy"), ("gptcore", "torch")):
            if a in outs and b in outs:
                diff = float(np.max(np.abs(outs[a] - outs[b])))
                lines.append(f"{a} vs {b} {shape}: max |logit diff| {diff:.2e} "
                             f"(logits up to {np.max(np.abs(outs[b])):.2f})")
                assert diff < TOLERANCE, f"{a} and {b} forwards disagree: max |logit diff| {diff:.3g} >= {TOLERANCE}"
    return lines


# ---------------------------------------------------------------------------------------------
# Peak memory, measured in a fresh process per (implementation, configuration)


def _status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def rss_child(impl, B, T, threads, seed):
    config = gpt2_config()
    torch = None
    if impl == "torch":
        tt, why = import_torch()
        if tt is None:
            print(json.dumps({"error": why}))
            return
        torch, transformers = tt
    weights, _ = random_weights(config, seed, perturb=False)
    set_threads(threads, torch)
    ids = np.random.default_rng(seed).integers(0, config.vocab_size, size=(B, T), dtype=np.int64)
    gc.collect()
    rss0 = _status("VmRSS")
    can_reset = _reset_peak()
    model = hf = None
    if impl == "gptcore":
        model = gptcore.Model(weights)
    elif impl == "torch":
        hf = hf_model(weights, config, torch, transformers)
    gc.collect()
    hwm_build = _status("VmHWM")
    rss1 = _status("VmRSS")
    _reset_peak()
    run = make_runners([impl], weights, config, model, hf, torch)[impl]
    out = run(ids)
    hwm_fwd = _status("VmHWM")
    logits_bytes = int(np.prod(out.shape)) * 4
    print(json.dumps(dict(rss0=rss0, rss1=rss1, hwm_build=hwm_build, hwm_fwd=hwm_fwd,
                          logits_bytes=logits_bytes, weights_bytes=int(sum(v.nbytes for v in weights.values())),
                          exact=can_reset)))


def measure_rss(impls, configs, threads, seed):
    results = {}
    for (B, T) in configs:
        for impl in impls:
            cmd = [sys.executable, os.path.abspath(__file__), "--rss-child", impl, str(B), str(T),
                   str(threads), "--seed", str(seed)]
            p = subprocess.run(cmd, capture_output=True, text=True)
            line = (p.stdout.strip().splitlines() or [""])[-1]
            try:
                results[(impl, B, T)] = json.loads(line)
            except json.JSONDecodeError:
                err = (p.stderr.strip().splitlines() or ["no output"])[-1]
                results[(impl, B, T)] = {"error": err}
    return results


def rss_table(results, impls, configs):
    headers = ["B x T", "logits", "weights"]
    for impl in impls:
        headers += [f"{impl} fwd growth", f"{impl} build+fwd"]
    rows = []
    for (B, T) in configs:
        any_ok = next((results[(i, B, T)] for i in impls if "error" not in results[(i, B, T)]), None)
        row = [f"{B} x {T}", fmt_bytes(any_ok and any_ok["logits_bytes"]), fmt_bytes(any_ok and any_ok["weights_bytes"])]
        for impl in impls:
            r = results[(impl, B, T)]
            if "error" in r:
                row += ["error", r["error"][:40]]
                continue
            fwd = r["hwm_fwd"] - r["rss1"]
            total = max(r["hwm_build"], r["hwm_fwd"]) - r["rss0"]
            row += [f"{fmt_bytes(fwd)} ({fwd / r['logits_bytes']:.2f}x logits)",
                    f"{fmt_bytes(total)} ({total / (r['weights_bytes'] + r['logits_bytes']):.2f}x w+l)"]
        rows.append(row)
    return markdown_table(headers, rows)


# ---------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer configurations and repetitions")
    ap.add_argument("--threads", default="1,2", help="comma list (default 1,2)")
    ap.add_argument("--configs", default=None, help="comma list of BxT (default 1x8,1x64,1x256,1x1024,8x128)")
    ap.add_argument("--reps", type=int, default=None, help="samples per implementation (default 5, quick 3)")
    ap.add_argument("--impls", default="gptcore,torch,numpy")
    ap.add_argument("--no-rss", action="store_true", help="skip the peak-memory subprocesses")
    ap.add_argument("--check-only", action="store_true", help="run the agreement checks and stop")
    ap.add_argument("--seed", type=int, default=0)
    add_machine_args(ap)
    ap.add_argument("--rss-child", nargs=4, metavar=("IMPL", "B", "T", "THREADS"), help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.rss_child:
        impl, B, T, thr = args.rss_child
        rss_child(impl, int(B), int(T), int(thr), args.seed)
        return

    configs = parse_configs(args.configs) if args.configs else (QUICK_CONFIGS if args.quick else CONFIGS)
    threads_list = parse_int_list(args.threads)
    reps = args.reps or (3 if args.quick else 5)
    impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    config = gpt2_config()

    notes = []
    torch = transformers = None
    if "torch" in impls:
        torch, transformers = torch_baseline(notes)
    t0 = time.perf_counter()
    weights, source = random_weights(config, args.seed)
    notes.append(f"- weights: GPT-2 small, {source}, biases/LN perturbed; "
                 f"{weight_bytes_read(weights) / 1e6:.0f} MB read per forward")
    model = hf = None
    if "gptcore" in impls:
        model = gptcore.Model(weights)
    if torch is not None:
        hf = hf_model(weights, config, torch, transformers)
        notes.append(f"- transformers attention: {hf.config._attn_implementation}")
    notes.append(f"- setup {time.perf_counter() - t0:.1f} s")
    runners = make_runners(impls, weights, config, model, hf, torch)

    print("# GPT-2 small forward latency (float32, logits for all positions)\n")
    setup_machine(args, threads_list)
    print(environment_report(notes))
    set_threads(max(threads_list), torch)
    for line in sanity_check(runners, config, args.seed):
        print(f"- check: {line}")
    if args.check_only:
        return
    print(f"- {reps} samples each, median; implementations alternate; 'speed' columns are "
          f"baseline time / gptcore time (> 1: gptcore faster), the median of the ratios of the "
          f"two samples of each round; noise = (max - min) / median, worst side\n")

    names = list(runners)
    headers = ["B x T", "thr"] + [f"{n} ms" for n in names]
    for base in ("torch", "numpy"):
        if "gptcore" in runners and base in runners:
            headers.append(f"gptcore/{base} speed")
    headers += ["floor ms", "bound"] + [f"{n} %floor" for n in names] + ["noise"]
    rows = []
    rng = np.random.default_rng(args.seed)
    for threads in threads_list:
        set_threads(threads, torch)
        settle = SETTLE_THREADED if threads > 1 else 0.0
        for (B, T) in configs:
            ids = rng.integers(0, config.vocab_size, size=(B, T), dtype=np.int64)
            fns = {n: (lambda run=runners[n]: run(ids)) for n in names}
            res = compare(fns, reps=reps, min_time=0.2, settle=settle)
            floor, t_c, t_m = forward_floor(config, weights, B, T, threads)
            row = [f"{B} x {T}", threads] + [fmt(res[n].median * 1e3, 1) for n in names]
            for base in ("torch", "numpy"):
                if "gptcore" in res and base in res:
                    row.append(fmt(paired_speed(res, base, "gptcore"), 2))
            row += [fmt(floor * 1e3, 1), "compute" if t_c >= t_m else "memory"]
            row += [f"{100 * floor / res[n].median:.0f}%" for n in names]
            row.append(f"{100 * max(r.spread for r in res.values()):.0f}%")
            rows.append(row)
            print(f"  done threads={threads} B={B} T={T} ({time.perf_counter() - t0:.0f} s)", flush=True)
    print()
    print(markdown_table(headers, rows))
    print("\nFLOPs per forward: " + ", ".join(
        f"{B}x{T}: {forward_flops(config, B, T) / 1e9:.1f} G" for (B, T) in configs))

    if not args.no_rss:
        rss_impls = [n for n in names]
        thr = max(threads_list)
        results = measure_rss(rss_impls, configs, thr, args.seed)
        print(f"\n## Peak RSS growth ({thr} threads, one fresh process per cell)\n")
        print(rss_table(results, rss_impls, configs))
        if not all(r.get("exact", True) for r in results.values() if "error" not in r):
            print("(/proc/self/clear_refs was not writable: peaks include earlier allocations)")
    print("\n" + closing_line(t0))


if __name__ == "__main__":
    main()
