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
how many leading tokens agree with float32, the 16-bit baselines of issue #14 (transformers
float32 and bfloat16, llama.cpp F16) with gptcore 16-bit / baseline ratios, then a prefill
table (forward over 1 x 128 tokens, alternating) and the models' resident weight bytes.

llama.cpp (B = 1 only): the same weights written as GGUF files (architecture gpt2, F32 and,
with --weight-dtype, F16; benches/_llamacpp.py), decoded in-process by llama-cpp-python:
one eval of the prompt, then argmax of the last logits and one eval per new token, float32 KV
cache, weights read into memory (no mmap), the same thread count. Before timing, its logits after the prompt are compared with
gptcore's (max |difference| in the notes) and the bench stops if the F32 file disagrees
beyond float32 rounding plus llama.cpp's float16 GELU table.

Run:  python3 benches/bench_generate.py       (after `pip install .`; the baselines need
      `pip install .[baselines]` (torch, transformers, llama-cpp-python, gguf); each one whose
      package is missing is skipped with a note)
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _common import (
    SETTLE_THREADED,
    add_machine_args,
    bandwidth,
    closing_line,
    compare,
    paired_speed,
    environment_report,
    fmt,
    fmt_bytes,
    gptcore,
    markdown_table,
    np,
    parse_int_list,
    parse_str_list,
    set_threads,
    setup_machine,
    torch_baseline,
)
from _llamacpp import LlamaCppGreedy, import_llama_cpp, write_gguf
from _llamacpp import version as llama_cpp_version
from _models import (
    decode_step_floor,
    forward_floor,
    gpt2_config,
    hf_model,
    random_weights,
    weight_bytes_read,
)

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


def leading_agreement(a, b) -> int:
    """Leading new tokens that two (B, NEW) outputs share, worst sequence."""
    same = np.asarray(a) == np.asarray(b)
    return min(int(np.argmin(row)) if not row.all() else NEW for row in same)


#: Largest |logit difference| accepted between llama.cpp's F32 file and gptcore float32 after
#: the prompt. Float32 rounding alone gives ~1e-5 here; llama.cpp's GELU reads a float16 table
#: (input rounded to float16), which moves the logits by ~1e-3. A wrong layout (a matrix not
#: transposed, a misnamed tensor) gives differences of the order of the logits themselves.
LLAMA_F32_TOLERANCE = 0.05


def setup_llama_cpp(ll, weights, config, model, half_models, threads, workdir, notes, rng):
    """Write the GGUF files, load them, check them against gptcore. Returns {label: model}."""
    llama_cpp, gguf = ll
    files = {"F32": "float32"}
    if "float16" in half_models or "bfloat16" in half_models:
        files["F16"] = "float16"
    ids = rng.integers(0, config.vocab_size - 1, size=(1, PROMPT), dtype=np.int64)
    ref32 = np.asarray(model.forward(ids, logits="last"), np.float64).reshape(-1)
    models = {}
    for ftype, like in files.items():
        t0 = time.perf_counter()
        path = write_gguf(gguf, Path(workdir) / f"gpt2-random-{ftype}.gguf", weights, config, ftype)
        t_write = time.perf_counter() - t0
        lm = LlamaCppGreedy(llama_cpp, path, threads)
        got = lm.prompt_logits(ids[0]).astype(np.float64)
        diff32 = float(np.max(np.abs(got - ref32)))
        line = (f"- llama.cpp {ftype}: {path.stat().st_size / (1 << 20):.0f} MiB GGUF written in {t_write:.1f} s; "
                f"logits after a {PROMPT}-token prompt vs gptcore float32: max |diff| {diff32:.2e} "
                f"(logits span {ref32.min():.2f}..{ref32.max():.2f}), argmax "
                f"{'same' if got.argmax() == ref32.argmax() else 'DIFFERENT'}")
        if like in half_models:
            ref16 = np.asarray(half_models[like].forward(ids, logits="last"), np.float64).reshape(-1)
            line += f"; vs gptcore {like}: {float(np.max(np.abs(got - ref16))):.2e}"
        notes.append(line)
        if ftype == "F32" and not diff32 < LLAMA_F32_TOLERANCE:
            raise SystemExit(f"llama.cpp's F32 GGUF disagrees with gptcore float32 (max |logit diff| "
                             f"{diff32:.3g} >= {LLAMA_F32_TOLERANCE}): the GGUF layout is wrong")
        models[f"llama.cpp {ftype}"] = lm
    return models


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="B = 1 only, 2 samples")
    ap.add_argument("--threads", default="1,2", help="comma list (default 1,2)")
    ap.add_argument("--batch", default=None, help="comma list of B (default 1,8)")
    ap.add_argument("--reps", type=int, default=None, help="samples per implementation (default 3, quick 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--weight-dtype", default=None,
                    help="comma list of 16-bit weight storages (bfloat16,float16) to time against gptcore float32")
    ap.add_argument("--baselines", default="transformers,llama.cpp",
                    help="comma list of baselines to time: transformers, llama.cpp, or none "
                         "(default both; each is skipped with a note when its package is missing)")
    add_machine_args(ap)
    args = ap.parse_args()
    half_dtypes = [s.strip() for s in args.weight_dtype.split(",")] if args.weight_dtype else []
    wanted = set(parse_str_list(args.baselines)) - {"none"}
    unknown = wanted - {"transformers", "llama.cpp"}
    if unknown:
        ap.error(f"--baselines: unknown {sorted(unknown)}; expected transformers, llama.cpp or none")

    threads_list = parse_int_list(args.threads)
    batches = parse_int_list(args.batch) if args.batch else ([1] if args.quick else [1, 8])
    reps = args.reps or (2 if args.quick else 3)
    config = gpt2_config()

    notes = []
    t0 = time.perf_counter()
    torch = transformers = None
    if "transformers" in wanted:
        torch, transformers = torch_baseline(notes, "transformers")
    ll = None
    if "llama.cpp" in wanted:
        ll, why = import_llama_cpp()
        if ll is None:
            notes.append(f"- llama.cpp baseline skipped: {why}")
        elif 1 not in batches:
            notes.append("- llama.cpp baseline skipped: it runs B = 1 only")
            ll = None
        else:
            notes.append(f"- {llama_cpp_version(*ll)}; B = 1 only (llama-cpp-python's Llama decodes one "
                         f"sequence); KV cache float32")
    weights, source = random_weights(config, args.seed)
    wbytes = weight_bytes_read(weights)
    notes.append(f"- weights: GPT-2 small, {source}; {wbytes / 1e6:.0f} MB read per decode step")
    model = gptcore.Model(weights)
    half_models = {wd: gptcore.Model(weights, weight_dtype=wd) for wd in half_dtypes}
    half_rows = []
    hf = hf_model(weights, config, torch, transformers) if torch is not None else None
    hf16 = None
    if hf is not None and half_models:
        hf16 = hf_model(weights, config, torch, transformers).to(torch.bfloat16)
        hf16.eval()
    pad = config.vocab_size - 1
    workdir = tempfile.TemporaryDirectory(prefix="gptcore-bench-gguf-")
    llamas = {}
    if ll is not None:
        llamas = setup_llama_cpp(ll, weights, config, model, half_models, threads_list[0], workdir.name, notes,
                                 np.random.default_rng(args.seed + 1000))

    print(f"# GPT-2 small greedy generation: prompt {PROMPT}, {NEW} new tokens (float32)\n")
    setup_machine(args, threads_list)
    print(environment_report(notes))
    print(f"- {reps} samples each, median; tokens/s = B * {NEW} / time per call; speed = gptcore tok/s / "
          f"baseline tok/s (the median of the per-round ratios); noise = (max - min) / median, worst side\n")

    headers = ["B", "thr", "gptcore tok/s", "transformers tok/s", "gptcore/transformers", "llama.cpp F32 tok/s",
               "gptcore/llama.cpp", "BW bound tok/s", "gptcore %BW bound", "floor tok/s", "gptcore %floor",
               "transformers %floor", "agree", "noise"]
    rows = []
    agree_rows = []
    agree_names = []
    rng = np.random.default_rng(args.seed)
    for threads in threads_list:
        set_threads(threads, torch)
        for lm in llamas.values():
            lm.set_threads(threads)
        for B in batches:
            ids = rng.integers(0, config.vocab_size - 1, size=(B, PROMPT), dtype=np.int64)
            fns, outs = {}, {}
            if model is not None:
                run_g = gptcore_runner(model, B)
                outs["gptcore"] = run_g(ids)
                fns["gptcore"] = lambda run=run_g, ids=ids: run(ids)
            for wd, hm in half_models.items():
                run_h = gptcore_runner(hm, B)
                outs["gptcore " + wd] = run_h(ids)
                fns["gptcore " + wd] = lambda run=run_h, ids=ids: run(ids)
            for name, m in (("transformers", hf), ("transformers bfloat16", hf16)):
                if m is not None:
                    run_t = torch_runner(m, torch, B, pad)
                    outs[name] = run_t(ids)
                    fns[name] = lambda run=run_t, ids=ids: run(ids)
            if B == 1:
                for name, lm in llamas.items():
                    outs[name] = lm.generate(ids[0], NEW)[None, :]
                    fns[name] = lambda lm=lm, ids=ids: lm.generate(ids[0], NEW)
            if not fns:
                print("nothing to time: neither gptcore.Model nor transformers is available")
                return
            res = compare(fns, reps=reps, min_time=0.0, settle=SETTLE_THREADED if threads > 1 else 0.0)
            tok = {k: B * NEW / r.median for k, r in res.items()}

            def speed(ours, base):
                return paired_speed(res, base, ours) if ours in res and base in res else None

            bw_bound = B * bandwidth(threads) / wbytes
            floor = B * NEW / generation_floor(config, weights, B, threads)
            agree = "-"
            if "gptcore" in outs and "transformers" in outs:
                agree = f"{leading_agreement(outs['gptcore'], outs['transformers'])}/{NEW}"
            g, t, l32 = tok.get("gptcore"), tok.get("transformers"), tok.get("llama.cpp F32")
            rows.append([
                B, threads, fmt(g, 1), fmt(t, 1), fmt(speed("gptcore", "transformers"), 2),
                fmt(l32, 1), fmt(speed("gptcore", "llama.cpp F32"), 2), fmt(bw_bound, 1),
                f"{100 * g / bw_bound:.0f}%" if g else "-", fmt(floor, 1),
                f"{100 * g / floor:.0f}%" if g else "-", f"{100 * t / floor:.0f}%" if t else "-",
                agree, f"{100 * max(r.spread for r in res.values()):.0f}%",
            ])
            others = [k for k in outs if k != "gptcore"]
            for k in others:
                if k not in agree_names:
                    agree_names.append(k)
            agree_rows.append((B, threads, {k: leading_agreement(outs["gptcore"], outs[k]) for k in others}))
            tb16, l16 = tok.get("transformers bfloat16"), tok.get("llama.cpp F16")
            for wd in half_models:
                hw = "gptcore " + wd
                h = tok[hw]
                lead = leading_agreement(outs[hw], outs["gptcore"])
                half_rows.append([B, threads, wd, fmt(g, 1), fmt(h, 1), fmt(speed(hw, "gptcore"), 2),
                                  f"{100 * h / (2 * bw_bound):.0f}%", f"{lead}/{NEW}",
                                  fmt(t, 1), fmt(tb16, 1), fmt(speed(hw, "transformers"), 2),
                                  fmt(speed(hw, "transformers bfloat16"), 2), fmt(l16, 1),
                                  fmt(speed(hw, "llama.cpp F16"), 2)])
            print(f"  done threads={threads} B={B} ({time.perf_counter() - t0:.0f} s)", flush=True)
    for lm in llamas.values():
        lm.close()
    workdir.cleanup()
    print()
    print(markdown_table(headers, rows))
    if half_models:
        print("\n16-bit weights against gptcore float32 and the baselines (same rounds; BW bound for 2-byte "
              "weights; x baseline = gptcore 16-bit tok/s / baseline tok/s):\n")
        print(markdown_table(["B", "thr", "weights", "float32 tok/s", "16-bit tok/s", "x float32",
                              "%BW bound (2 B)", "agree with float32", "transformers f32 tok/s",
                              "transformers bf16 tok/s", "x transformers f32", "x transformers bf16",
                              "llama.cpp F16 tok/s", "x llama.cpp F16"], half_rows))
    if agree_names:
        print(f"\nLeading new tokens equal to gptcore float32's (worst sequence, of {NEW}). A weak check: "
              f"random weights often settle on one repeated token, and near-ties may flip where the "
              f"arithmetic differs; the logits comparison in the notes is the strong one:\n")
        print(markdown_table(["B", "thr"] + agree_names,
                             [[B, thr] + [str(a[k]) if k in a else "-" for k in agree_names]
                              for B, thr, a in agree_rows]))
    if half_models:
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
                                fmt(paired_speed(res, "float32", wd), 2)])
        print("\nPrefill, forward over 1 x 128 tokens (tokens/s):\n")
        print(markdown_table(["thr", "weights", "float32", "16-bit", "x float32"], prefill))
        print("\nWeights held: float32 " + fmt_bytes(model.nbytes) + "; " + "; ".join(
            f"{wd} {fmt_bytes(hm.nbytes)} ({hm.nbytes / model.nbytes:.2f}x)" for wd, hm in half_models.items()))
    print("\n" + closing_line(t0))


if __name__ == "__main__":
    main()
