"""Greedy generation throughput, GPT-2 small, float32, random weights: a 16-token prompt and
128 new tokens for B = 1 and B = 8 sequences, on 1 and 2 threads.

gptcore:      model.generate(ids, 128, greedy=True)
transformers: GPT2LMHeadModel.generate(do_sample=False, use_cache=True, max_new_tokens=128,
              min_new_tokens=128) in torch.inference_mode, the same weights and thread count.

tokens/s = B * 128 / wall time of the whole call (prompt included).

Bounds:
- "BW bound": every decode step must read all weights once, so at most
  B * read bandwidth / weight bytes tokens/s (bandwidth measured at start or given with
  --bandwidth; weight bytes = every float32 array except wpe, ~495 MB).
- "floor": the prompt's forward floor plus, for each of the 127 decode steps,
  max(FLOPs / peak, (weight bytes + K/V cache bytes read) / bandwidth), where a step over a
  cache of c positions reads 2 * n_layers * B * c * d * 4 bytes of K/V and costs
  2 * P_mm * B + 4 * n_layers * B * c * d FLOPs (benches/_models.py).

The agreement column counts the leading new tokens that gptcore and transformers share (worst
sequence): with float32 rounding, a near-tie between two logits can flip a greedy choice.

--weight-dtype bfloat16,float16 adds gptcore models with 16-bit weights (float32 arithmetic),
timed in the same alternating rounds as the float32 one, and prints a second table: their
tokens/s, the ratio to gptcore float32, their share of the bandwidth bound for 2-byte weights,
how many leading tokens agree with float32, then a prefill table (forward over 1 x 128 tokens,
alternating) and the models' resident weight bytes.

Run:  python3 benches/bench_generate.py       (after `pip install .`; the transformers columns
      need torch and transformers installed, and are skipped with a note otherwise)
"""

from __future__ import annotations

import argparse
import time

from _common import (
    add_machine_args,
    setup_machine,
    SETTLE_THREADED,
    closing_line,
    bandwidth,
    compare,
    environment_report,
    fmt,
    fmt_bytes,
    import_torch,
    markdown_table,
    np,
    parse_int_list,
    set_threads,
    gptcore,
)
from _models import decode_step_floor, forward_floor, gpt2_config, hf_model, random_weights, weight_bytes_read

PROMPT = 16
NEW = 128


def gptcore_runner(model, B):
    def run(ids):
        try:
            out = model.generate(ids, NEW, greedy=True)
        except (ValueError, TypeError):
            if ids.shape[0] != 1:
                raise
            out = model.generate(ids[0], NEW, greedy=True)
        out = np.asarray(out)
        if out.ndim == 1:
            out = out[None, :]
        if out.shape[-1] == PROMPT + NEW:
            out = out[:, PROMPT:]
        assert out.shape == (B, NEW), f"gptcore generate returned shape {out.shape}, expected ({B}, {NEW}) new tokens"
        return out
    return run


def torch_runner(hf, torch, B, pad):
    def run(ids):
        t = torch.from_numpy(ids)
        with torch.inference_mode():
            out = hf.generate(input_ids=t, attention_mask=torch.ones_like(t), do_sample=False, use_cache=True,
                              max_new_tokens=NEW, min_new_tokens=NEW, pad_token_id=pad)
        out = out.numpy()[:, PROMPT:]
        assert out.shape == (B, NEW), f"transformers generate returned {out.shape}, expected ({B}, {NEW})"
        return out
    return run


def generation_floor(config, weights, B, threads):
    total, _, _ = forward_floor(config, weights, B, PROMPT, threads, head_rows=B)
    for j in range(1, NEW):
        total += decode_step_floor(config, weights, B, PROMPT + j, threads)
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="B = 1 only, 2 samples")
    ap.add_argument("--threads", default="1,2", help="comma list (default 1,2)")
    ap.add_argument("--batch", default=None, help="comma list of B (default 1,8)")
    ap.add_argument("--reps", type=int, default=None, help="samples per implementation (default 3, quick 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--weight-dtype", default=None,
                    help="comma list of 16-bit weight storages (bfloat16,float16) to time against gptcore float32")
    add_machine_args(ap)
    args = ap.parse_args()
    half_dtypes = [s.strip() for s in args.weight_dtype.split(",")] if args.weight_dtype else []

    threads_list = parse_int_list(args.threads)
    batches = parse_int_list(args.batch) if args.batch else ([1] if args.quick else [1, 8])
    reps = args.reps or (2 if args.quick else 3)
    config = gpt2_config()

    notes = []
    t0 = time.perf_counter()
    tt, why = import_torch()
    torch = transformers = None
    if tt is None:
        notes.append(f"- transformers baseline skipped: {why}")
    else:
        torch, transformers = tt
        transformers.logging.set_verbosity_error()
        notes.append(f"- torch {torch.__version__}, transformers {transformers.__version__}")
    weights, source = random_weights(config, args.seed)
    wbytes = weight_bytes_read(weights)
    notes.append(f"- weights: GPT-2 small, {source}; {wbytes / 1e6:.0f} MB read per decode step")
    model = gptcore.Model(weights)
    half_models = {wd: gptcore.Model(weights, weight_dtype=wd) for wd in half_dtypes}
    half_rows = []
    hf = hf_model(weights, config, torch, transformers) if torch is not None else None
    pad = config.vocab_size - 1

    print(f"# GPT-2 small greedy generation: prompt {PROMPT}, {NEW} new tokens (float32)\n")
    setup_machine(args, threads_list)
    print(environment_report(notes))
    print(f"- {reps} samples each, median; tokens/s = B * {NEW} / time per call; speed = gptcore tok/s / "
          f"transformers tok/s; noise = (max - min) / median, worst side\n")

    headers = ["B", "thr", "gptcore tok/s", "transformers tok/s", "gptcore/transformers", "BW bound tok/s",
               "gptcore %BW bound", "floor tok/s", "gptcore %floor", "transformers %floor", "agree", "noise"]
    rows = []
    rng = np.random.default_rng(args.seed)
    for threads in threads_list:
        set_threads(threads, torch)
        for B in batches:
            ids = rng.integers(0, config.vocab_size - 1, size=(B, PROMPT), dtype=np.int64)
            fns, outs = {}, {}
            if model is not None:
                run_g = gptcore_runner(model, B)
                outs["gptcore"] = run_g(ids)
                fns["gptcore"] = lambda run=run_g: run(ids)
            for wd, hm in half_models.items():
                run_h = gptcore_runner(hm, B)
                outs["gptcore " + wd] = run_h(ids)
                fns["gptcore " + wd] = lambda run=run_h: run(ids)
            if hf is not None:
                run_t = torch_runner(hf, torch, B, pad)
                outs["transformers"] = run_t(ids)
                fns["transformers"] = lambda run=run_t: run(ids)
            if not fns:
                print("nothing to time: neither gptcore.Model nor transformers is available")
                return
            res = compare(fns, reps=reps, min_time=0.0, settle=SETTLE_THREADED if threads > 1 else 0.0)
            tok = {k: B * NEW / r.median for k, r in res.items()}
            bw_bound = B * bandwidth(threads) / wbytes
            floor = B * NEW / generation_floor(config, weights, B, threads)
            agree = "-"
            if len(outs) == 2:
                same = outs["gptcore"] == outs["transformers"]
                lead = [int(np.argmin(row)) if not row.all() else NEW for row in same]
                agree = f"{min(lead)}/{NEW}"
            g, t = tok.get("gptcore"), tok.get("transformers")
            rows.append([
                B, threads, fmt(g, 1), fmt(t, 1), fmt(g / t if g and t else None, 2), fmt(bw_bound, 1),
                f"{100 * g / bw_bound:.0f}%" if g else "-", fmt(floor, 1),
                f"{100 * g / floor:.0f}%" if g else "-", f"{100 * t / floor:.0f}%" if t else "-",
                agree, f"{100 * max(r.spread for r in res.values()):.0f}%",
            ])
            for wd in half_models:
                h = B * NEW / res["gptcore " + wd].median
                same = outs["gptcore " + wd] == outs["gptcore"]
                lead = min(int(np.argmin(row)) if not row.all() else NEW for row in same)
                half_rows.append([B, threads, wd, fmt(g, 1), fmt(h, 1), fmt(h / g if g else None, 2),
                                  f"{100 * h / (2 * bw_bound):.0f}%", f"{lead}/{NEW}"])
            print(f"  done threads={threads} B={B} ({time.perf_counter() - t0:.0f} s)", flush=True)
    print()
    print(markdown_table(headers, rows))
    if half_models:
        print("\n16-bit weights against gptcore float32 (same rounds; BW bound for 2-byte weights):\n")
        print(markdown_table(["B", "thr", "weights", "float32 tok/s", "16-bit tok/s", "x float32",
                              "%BW bound (2 B)", "agree with float32"], half_rows))
        prefill = []
        ids = rng.integers(0, config.vocab_size - 1, size=(1, 128), dtype=np.int64)
        for threads in threads_list:
            set_threads(threads, torch)
            fns = {"float32": lambda: model.forward(ids, logits="last")}
            for wd, hm in half_models.items():
                fns[wd] = lambda hm=hm: hm.forward(ids, logits="last")
            res = compare(fns, reps=max(reps, 5), min_time=0.2)
            for wd in half_models:
                prefill.append([threads, wd, fmt(128 / res["float32"].median, 0), fmt(128 / res[wd].median, 0),
                                fmt(res["float32"].median / res[wd].median, 2)])
        print("\nPrefill, forward over 1 x 128 tokens (tokens/s):\n")
        print(markdown_table(["thr", "weights", "float32", "16-bit", "x float32"], prefill))
        print("\nWeights held: float32 " + fmt_bytes(model.nbytes) + "; " + "; ".join(
            f"{wd} {fmt_bytes(hm.nbytes)} ({hm.nbytes / model.nbytes:.2f}x)" for wd, hm in half_models.items()))
    print("\n" + closing_line(t0))


if __name__ == "__main__":
    main()
