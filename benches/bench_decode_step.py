"""One batched decode step against its floor, the memory's read rate measured in the same rounds.

A decode step of B sequences reads every weight once and does 2 B FLOPs per weight, so its
floor is max(FLOPs / FMA peak, bytes read / read bandwidth), bytes read being the weights and
the K/V cache. On a shared machine the read bandwidth moves from minute to minute (other
tenants share the memory), so this script measures it in every round, right before the steps
it prices, and quotes each round's step against its own floor (`--bandwidth` fixes it
instead):

    pip install .
    python3 benches/bench_decode_step.py [--preset gpt2] [--batch 8] [--positions 16,128]
                                         [--threads 2] [--rounds 7] [--baselines transformers]

Per round: gptcore's read probe (`read_rate`, the thread team over 256 MiB), an in-cache
product of the step's shape (B rows against a packed d x 4d matrix that stays in the last-level
cache: what the arithmetic runs at when memory does not limit it), then for each cache length,
in alternating order, a fresh cache filled with B random prompts and `--steps` decode steps
timed one by one (the median). transformers' cached step at the same B (GPT-2 presets only)
is the named baseline, timed in the same rounds; its logits after the first step are
compared with gptcore's.

Columns: the step's median over rounds; its floor (memory and arithmetic legs at the round's
read rate and the FMA peak); "% of floor", the median of the rounds' floor / step with the
quartiles; tokens/s = B / step. It only measures and prints; it asserts nothing.
"""

from __future__ import annotations

import argparse
import time

import gptcore
import numpy as np
from _common import (
    add_machine_args,
    bandwidth,
    closing_line,
    environment_report,
    fmt,
    hf_cache_keyword,
    hf_returned_cache,
    markdown_table,
    parse_int_list,
    peak_flops,
    set_threads,
    setup_machine,
    torch_baseline,
)
from _models import hf_model
from gptcore import _native

#: Bytes a value of each weight storage takes (block formats: 32 values and their scale).
STORAGE_BYTES = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}
#: The read probe's buffer: far beyond any last-level cache.
PROBE_BYTES = 256 << 20


def step_accounting(config, weights, B: int, ctx: int, storage: str):
    """(FLOPs, bytes read) of a decode step of B sequences whose caches then hold ``ctx``
    positions: products 2 B per matrix weight plus attention 2 x 2 B n_heads d_head ctx; bytes,
    the matrices at the storage's size, the one-dimensional parameters as float32 (the
    position table and an untied token table are only gathered, B rows) and the K/V cache."""
    tokens = "wte.weight" if "wte.weight" in weights else "model.embed_tokens.weight"
    skip = {"wpe.weight"} | (set() if config.tied else {tokens})
    matrix = sum(v.size for k, v in weights.items() if v.ndim == 2 and k not in skip)
    vectors = sum(v.size for k, v in weights.items() if v.ndim == 1)
    d_head = config.d_model // config.n_heads
    kv_heads = getattr(config, "n_kv_heads", None) or config.n_heads
    L = config.n_layers
    flops = 2.0 * B * matrix + 2.0 * 2.0 * L * B * config.n_heads * d_head * ctx
    nbytes = STORAGE_BYTES[storage] * matrix + 4.0 * vectors + 2.0 * L * B * ctx * kv_heads * d_head * 4
    return flops, nbytes


def gptcore_step_times(model, prompts, tok, steps):
    """Seconds of each of ``steps`` decode steps after a fresh prefill, and the first step's
    logits."""
    cache = model.new_cache(prompts.shape[0])
    model.step(cache, prompts)
    times, first = [], None
    for _ in range(steps):
        t0 = time.perf_counter()
        out = model.step(cache, tok)
        times.append(time.perf_counter() - t0)
        if first is None:
            first = np.asarray(out, np.float64)
    return times, first


def torch_step_times(hf, torch, prompts, tok, steps):
    """The same for transformers: a prefill with ``use_cache``, then single-token forwards on
    its cache."""
    keyword = hf_cache_keyword(hf)
    ids = torch.from_numpy(prompts)
    t = torch.from_numpy(tok)
    times, first = [], None
    with torch.inference_mode():
        past = hf_returned_cache(hf(input_ids=ids, use_cache=True), keyword)
        for _ in range(steps):
            t0 = time.perf_counter()
            out = hf(input_ids=t, use_cache=True, **{keyword: past})
            past = hf_returned_cache(out, keyword)
            times.append(time.perf_counter() - t0)
            if first is None:
                first = out.logits[:, -1, :].double().numpy()
    return times, first


def in_cache_operands(B: int, d: int):
    """B rows and a packed d x 4d float32 matrix: 16 d^2 bytes, in the last-level cache for
    the models timed here."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((B, d)).astype(np.float32)
    return a, _native.PackedMatrix(rng.standard_normal((d, 4 * d)).astype(np.float32))


def in_cache_rate(a, b, seconds: float = 0.2) -> float:
    """FLOP/s of ``a @ b`` repeated for about ``seconds`` (after one untimed call)."""
    _native.matmul(a, b)
    calls, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        _native.matmul(a, b)
        calls += 1
    (B, d), n = a.shape, b.shape[1]
    return 2.0 * B * d * n * calls / (time.perf_counter() - t0)


def quartiles(x):
    q = np.quantile(np.asarray(x), [0.25, 0.5, 0.75])
    return float(q[0]), float(q[1]), float(q[2])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="gpt2", help="a GPTConfig preset (default gpt2); random weights")
    ap.add_argument("--layers", type=int, default=None, help="override the preset's layer count")
    ap.add_argument("--batch", type=int, default=8, help="sequences in the step, B (default 8)")
    ap.add_argument("--positions", default="16,128", help="comma list of prompt lengths before the steps")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=6, help="timed decode steps per round and cache length")
    ap.add_argument("--weight-dtype", default="float32", choices=sorted(STORAGE_BYTES))
    ap.add_argument("--baselines", default="transformers", help="transformers or none")
    ap.add_argument("--seed", type=int, default=0)
    add_machine_args(ap)
    args = ap.parse_args()
    if args.batch < 1 or args.rounds < 1 or args.steps < 1 or args.threads < 1:
        ap.error("--batch, --rounds, --steps and --threads must be at least 1")
    if args.baselines not in ("transformers", "none"):
        ap.error(f"--baselines: expected transformers or none, got {args.baselines!r}")
    positions = parse_int_list(args.positions)
    config = gptcore.GPTConfig.preset(args.preset)
    if args.layers is not None:
        config = gptcore.GPTConfig(**{**config.to_dict(), "n_layers": args.layers})
    if max(positions) + args.steps > config.n_ctx:
        ap.error(f"--positions: {max(positions)} + {args.steps} steps exceed the context ({config.n_ctx})")

    t_start = time.perf_counter()
    notes = []
    setup_machine(args, [args.threads], need_bandwidth=False)
    set_threads(args.threads)
    weights = gptcore.init_weights(config, args.seed, "gpt2", dtype="float32")
    storage = None if args.weight_dtype == "float32" else args.weight_dtype
    model = gptcore.Model(weights, config, weight_dtype=storage)
    torch = hf = None
    if args.baselines == "transformers":
        if config.family != "gpt2" or args.weight_dtype != "float32":
            notes.append("- transformers baseline skipped: GPT-2 presets with float32 weights only")
        else:
            torch, transformers = torch_baseline(notes, "transformers")
            if torch is not None:
                set_threads(args.threads, torch)
                hf = hf_model(weights, config, torch, transformers)
    B = args.batch
    rng = np.random.default_rng(args.seed)
    prompts = {P: rng.integers(0, config.vocab_size, (B, P)) for P in positions}
    tok = rng.integers(0, config.vocab_size, (B, 1))
    peak = peak_flops("float32", args.threads)
    operands = in_cache_operands(B, config.d_model)
    # (FLOPs, bytes) of each cache length's steps, priced at the middle step's cache.
    accounting = {P: step_accounting(config, weights, B, P + 1 + args.steps // 2, args.weight_dtype)
                  for P in positions}

    probe, cached = [], []
    rows = {P: {"gptcore": [], "transformers": [], "floor": [], "mem": [], "math": []} for P in positions}
    agree = {}
    for r in range(args.rounds):
        probe.append(_native.read_rate(PROBE_BYTES, None, 0.3))
        bw = bandwidth(args.threads) if args.bandwidth else probe[-1]
        cached.append(in_cache_rate(*operands))
        for P in (positions if r % 2 == 0 else positions[::-1]):
            times, first = gptcore_step_times(model, prompts[P], tok, args.steps)
            rows[P]["gptcore"].append(float(np.median(times)))
            flops, nbytes = accounting[P]
            rows[P]["mem"].append(nbytes / bw)
            rows[P]["math"].append(flops / peak)
            rows[P]["floor"].append(max(nbytes / bw, flops / peak))
            if hf is not None:
                ttimes, tfirst = torch_step_times(hf, torch, prompts[P], tok, args.steps)
                rows[P]["transformers"].append(float(np.median(ttimes)))
                agree[P] = float(np.max(np.abs(first - tfirst)))

    table = []
    for P in positions:
        x = rows[P]
        step = float(np.median(x["gptcore"]))
        q1, q2, q3 = quartiles(np.array(x["floor"]) / np.array(x["gptcore"]))
        line = [P, f"{1e3 * step:.2f}", f"{1e3 * np.median(x['floor']):.2f}",
                f"{1e3 * np.median(x['mem']):.2f} / {1e3 * np.median(x['math']):.2f}",
                f"{100 * q2:.0f} % ({100 * q1:.0f}-{100 * q3:.0f})", fmt(B / step, 1)]
        if hf is not None:
            t = float(np.median(x["transformers"]))
            ratio = float(np.median(np.array(x["transformers"]) / np.array(x["gptcore"])))
            line += [f"{1e3 * t:.2f}", fmt(ratio, 2), f"{agree[P]:.1e}"]
        table.append(line)
    headers = ["positions", "gptcore step ms", "floor ms", "memory / arithmetic ms", "% of floor (quartiles)",
               "tokens/s"]
    if hf is not None:
        headers += ["transformers step ms", "transformers / gptcore", "max |logit diff|"]

    flops0 = accounting[positions[0]][0]
    pq = quartiles(np.array(probe) / 1e9)
    cq = quartiles(np.array(cached) / peak)
    print(f"# Decode step, {args.preset} ({config.n_layers} layers, d {config.d_model}), B = {B}, "
          f"{args.weight_dtype} weights, {args.threads} threads, {args.rounds} rounds of {args.steps} steps\n")
    probe_line = (f"- read probe per round: {pq[1]:.1f} GB/s (quartiles {pq[0]:.1f}-{pq[2]:.1f}); "
                  + ("the floors use the given --bandwidth" if args.bandwidth
                     else "the round's floor uses its own reading"))
    cached_line = (f"- in-cache {B} x {config.d_model} x {4 * config.d_model} product per round: {100 * cq[1]:.0f} % "
                   f"of the FMA peak (quartiles {100 * cq[0]:.0f}-{100 * cq[2]:.0f}): the arithmetic of a step over "
                   f"{positions[0]} positions would take {1e3 * flops0 / (cq[1] * peak):.2f} ms at that rate (it "
                   f"moves with what else runs on the cores)")
    print(environment_report([*notes, probe_line, cached_line]))
    print()
    print(markdown_table(headers, table))
    print()
    print(closing_line(t_start))


if __name__ == "__main__":
    main()
