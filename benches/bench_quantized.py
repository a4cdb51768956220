"""Quantized weights (q8_0, q4_0: ggml's blocks, float32 arithmetic) against gptcore bfloat16 /
float32 and llama.cpp on the same GGUF files: GPT-2 small and SmolLM2-135M's shape, random
weights (issue #48's table).

Files: the random float32 weights written by gptcore's writer (``gguf_checkpoint.write_model``)
as Q8_0 and Q4_0 GGUF files (llama.cpp's ``--pure`` choice of tensors: the matrices, the token
embedding and the head in blocks, the position table, biases and LayerNorms F32), with the
bench's synthetic byte-level vocabulary (``_llamacpp.byte_level_vocab``) so that llama.cpp
loads them. gptcore loads each file with ``gptcore.load`` (its blocks used as stored) and
llama.cpp with llama-cpp-python (weights read into memory, float32 KV cache, the same thread
count). Before any timing each file's logits after a 16-token prompt are compared: gptcore's
against the float32 model of the file's dequantized values (must be equal, bit for bit) and
llama.cpp's against gptcore's (llama.cpp quantizes the activations to 8 bits for its Q8_0 /
Q4_0 products, so its logits differ by about a percent of their spread; a wrong layout would
differ by the spread itself).

Timed (medians of alternating rounds in one process, A B B A ...):
- decode B = 1: a 16-token prompt and 64 greedy new tokens (tokens/s of the whole call):
  gptcore bfloat16, q8_0, q4_0, llama.cpp Q8_0, Q4_0; and the steps alone (seconds per
  single-token step after the prompt, as ``bench_llama.py`` times them: gptcore ``step``,
  llama.cpp ``eval`` of one token), against which the bandwidth bound is quoted too;
- decode B = 8 (the same, 8 sequences) and prefill (forward over 1 x 256 tokens): gptcore
  float32, q8_0, q4_0.
- "BW bound": read bandwidth / bytes a decode step reads (the packed matrices and the head, as
  each model holds them; the embedding tables are read a row a token).

Also printed: the weight bytes each model holds against float32's, and each format's
perplexity on the public-domain text fixture (tokenized with the tiny-bpe fixture's tokenizer,
whose ids fit GPT-2's vocabulary) against float32's. The weights are random: the perplexity
shows the size of each format's error, not the quality of a trained model quantized.

SmolLM2-135M's shape (``--model smollm2-135m``: Llama family, 30 blocks of width 576,
grouped-query attention, a tied head over 49,152 tokens) is written as a ``llama`` file (the
query and key rows permuted as llama.cpp's converter does), random weights from
``gptcore.init_weights(scheme="lesson")``.

Run:  python3 benches/bench_quantized.py [--model gpt2,smollm2-135m]    (after
      `pip install '.[bench]'`; llama.cpp needs llama-cpp-python, built as benches/README.md
      says; without it its columns are skipped)
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _common import (
    SETTLE_THREADED,
    GptcoreRunner,
    add_machine_args,
    bandwidth,
    closing_line,
    compare,
    environment_report,
    fmt,
    fmt_bytes,
    gptcore,
    markdown_table,
    np,
    paired_speed,
    set_threads,
    setup_machine,
    time_decode,
)
from _llamacpp import LlamaCppGreedy, byte_level_vocab, import_llama_cpp
from _llamacpp import version as llama_cpp_version
from _models import gpt2_config, random_weights

from gptcore.gguf.format import Value, ValueType
from gptcore.weights import gguf_checkpoint

PROMPT = 16
NEW = 64
PREFILL = 256
ROOT = Path(__file__).resolve().parent.parent
TEXT = ROOT / "tests" / "fixtures" / "text" / "public-domain.txt"
TOKENIZER = ROOT / "tests" / "fixtures" / "tiny-bpe"

#: Largest llama.cpp / gptcore logit difference accepted, as a share of the logits' spread:
#: llama.cpp's 8-bit activations move the logits by about 1 %, a wrong layout by 100 %.
LLAMA_TOLERANCE = 0.1


def vocab_metadata(n_vocab: int) -> dict:
    """The synthetic tokenizer llama.cpp needs (ids are all the bench feeds)."""
    tokens, types, merges = byte_level_vocab(n_vocab)
    return {
        "tokenizer.ggml.model": Value(ValueType.STRING, "gpt2"),
        "tokenizer.ggml.pre": Value(ValueType.STRING, "gpt-2"),
        "tokenizer.ggml.tokens": Value(ValueType.ARRAY, tokens, ValueType.STRING),
        "tokenizer.ggml.token_type": Value(ValueType.ARRAY, np.array(types, np.int32), ValueType.INT32),
        "tokenizer.ggml.merges": Value(ValueType.ARRAY, merges, ValueType.STRING),
        "tokenizer.ggml.bos_token_id": Value(ValueType.UINT32, n_vocab - 1),
        "tokenizer.ggml.eos_token_id": Value(ValueType.UINT32, n_vocab - 1),
        "tokenizer.ggml.add_bos_token": Value(ValueType.BOOL, False),
    }


def decode_runner(model, B):
    def run(ids):
        return model.generate(ids if B > 1 else ids[0], NEW, greedy=True)
    return run


def decode_bytes(model) -> int:
    """Bytes a decode step reads: every packed matrix and the head as held (the tables are
    read a row a token) and the biases and LayerNorms."""
    held = model.weight_storage()
    tables = sum(b for n, _, b in held if n in ("wte.weight", "wpe.weight", "model.embed_tokens.weight"))
    return model.nbytes - tables


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="gpt2", help="comma list: gpt2, smollm2-135m (default gpt2)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5, help="samples per implementation (default 5)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-llama", action="store_true", help="skip llama.cpp")
    add_machine_args(ap)
    args = ap.parse_args()
    for name in [m.strip() for m in args.model.split(",") if m.strip()]:
        bench(name, args)


def model_weights(name: str, seed: int):
    """(config, float32 weights, where they came from) of the bench's model ``name``."""
    if name == "gpt2":
        config = gpt2_config()
        weights, source = random_weights(config, seed)
        return config, weights, f"GPT-2 small, {source}"
    config = gptcore.GPTConfig.preset(name)
    weights = gptcore.init_weights(config, seed, "lesson", dtype="float32")
    return config, weights, f"{name}'s shape, gptcore.init_weights(scheme='lesson', dtype='float32')"


def bench(name, args):
    t0 = time.perf_counter()
    threads = args.threads
    config, weights, source = model_weights(name, args.seed)
    notes = [f"- weights: {source}"]
    work = tempfile.TemporaryDirectory(prefix="gptcore-bench-quant-")
    files = {}
    meta = vocab_metadata(config.vocab_size)
    for wd in ("q8_0", "q4_0"):
        t = time.perf_counter()
        files[wd] = gguf_checkpoint.write_model(weights, config, Path(work.name) / f"{name}-random-{wd}.gguf", wd,
                                                metadata=meta)
        notes.append(f"- {wd}: {files[wd].stat().st_size / 1e6:.1f} MB GGUF written by gptcore in "
                     f"{time.perf_counter() - t:.1f} s")
    set_threads(threads)
    f32 = gptcore.Model(weights, config)
    bf16 = gptcore.Model(weights, config, weight_dtype="bfloat16")
    models = {"float32": f32, "bfloat16": bf16}
    rng = np.random.default_rng(args.seed)
    ids = rng.integers(0, config.vocab_size - 1, size=(1, PROMPT), dtype=np.int64)
    for wd, path in files.items():
        t = time.perf_counter()
        m = gptcore.load(path)
        load_s = time.perf_counter() - t
        deq = gptcore.Model(gptcore.round_weights(weights, wd), config)
        same = np.array_equal(m.forward(ids, logits="last"), deq.forward(ids, logits="last"))
        notes.append(f"- gptcore.load({wd} file): {load_s:.1f} s, weight_dtype {m.weight_dtype}; logits after the "
                     f"prompt {'equal, bit for bit,' if same else 'DIFFERENT from'} the float32 model of the "
                     f"dequantized weights")
        if not same:
            raise SystemExit(f"gptcore's {wd} model differs from its dequantized float32 model")
        models[wd] = m
        del deq
    llamas = {}
    ll = None if args.no_llama else import_llama_cpp()[0]
    if ll is None:
        notes.append("- llama.cpp skipped" + ("" if args.no_llama else f": {import_llama_cpp()[1]}"))
    else:
        notes.append(f"- {llama_cpp_version(*ll)}; the build benches/README.md names (no AMX); weights in memory, "
                     "KV cache float32")
        for wd, path in files.items():
            lm = LlamaCppGreedy(ll[0], path, threads)
            got = lm.prompt_logits(ids[0]).astype(np.float64)
            ours = np.asarray(models[wd].forward(ids, logits="last"), np.float64).reshape(-1)
            span = float(ours.max() - ours.min())
            diff = float(np.max(np.abs(got - ours)))
            corr = float(np.corrcoef(got, ours)[0, 1])
            top = len(set(np.argsort(got)[-10:]) & set(np.argsort(ours)[-10:]))
            notes.append(f"- llama.cpp {wd.upper()} logits after the prompt vs gptcore {wd}: max |diff| {diff:.3g} "
                         f"({100 * diff / span:.1f} % of the spread {span:.2f}), correlation {corr:.5f}, top-10 "
                         f"overlap {top}/10, argmax {'same' if got.argmax() == ours.argmax() else 'different'}")
            if not diff < LLAMA_TOLERANCE * span:
                raise SystemExit(f"llama.cpp reads the {wd} file differently (max |diff| {diff:.3g})")
            llamas[wd] = lm

    print(f"# Quantized weights: {name}, random weights, {threads} threads\n")
    setup_machine(args, [threads])
    print(environment_report(notes))
    print(f"- {args.reps} samples each, alternating, median; x = the median of the per-round ratios\n")

    # ---- decode B = 1
    fns = {}
    for name in ("bfloat16", "q8_0", "q4_0"):
        run = decode_runner(models[name], 1)
        fns[name] = lambda run=run: run(ids)
    for wd, lm in llamas.items():
        fns[f"llama.cpp {wd.upper()}"] = lambda lm=lm: lm.generate(ids[0], NEW)
    res = compare(fns, reps=args.reps, min_time=0.0, settle=SETTLE_THREADED)
    tok = {k: NEW / r.median for k, r in res.items()}
    bw = bandwidth(threads)
    rows = []
    for wd in ("q8_0", "q4_0"):
        bound = bw / decode_bytes(models[wd])
        lname = f"llama.cpp {wd.upper()}"
        rows.append([wd, fmt(tok[wd], 1), fmt(tok["bfloat16"], 1), fmt(paired_speed(res, "bfloat16", wd), 2),
                     fmt(tok.get(lname), 1), fmt(paired_speed(res, lname, wd), 2) if lname in res else "-",
                     fmt(bound, 1), f"{100 * tok[wd] / bound:.0f}%",
                     f"{100 * max(res[wd].spread, res['bfloat16'].spread):.0f}%"])
    q4_over_q8 = paired_speed(res, "q8_0", "q4_0")
    print(f"Decode B = 1, whole calls ({PROMPT}-token prompt and {NEW} new tokens, the prompt's forward "
          "included; tokens/s):\n")
    print(markdown_table(["weights", "gptcore tok/s", "gptcore bfloat16 tok/s", "x bfloat16", "llama.cpp tok/s",
                          "x llama.cpp", "BW bound tok/s", "% BW bound", "noise"], rows))
    print(f"\ngptcore q4_0 / q8_0: {fmt(q4_over_q8, 2)}")

    # The steps alone: what the bandwidth bound describes (a step reads every weight once; the
    # prompt's forward is arithmetic over 16 rows, not a weight stream).
    runners = {name: GptcoreRunner(models[name]) for name in ("bfloat16", "q8_0", "q4_0")}
    runners.update({f"llama.cpp {wd.upper()}": lm for wd, lm in llamas.items()})
    step_s, samples = time_decode(runners, ids[0], args.reps, NEW - 1)

    def per_round(a, b):
        """The median over rounds of b's speed against a's (a's time / b's)."""
        return float(np.median(np.asarray(samples[a]) / np.asarray(samples[b])))

    rows = []
    for wd in ("q8_0", "q4_0"):
        bound = bw / decode_bytes(models[wd])
        lname = f"llama.cpp {wd.upper()}"
        rows.append([wd, fmt(1e3 * step_s[wd], 2), fmt(1 / step_s[wd], 1), fmt(per_round("bfloat16", wd), 2),
                     fmt(1e3 * step_s[lname], 2) if lname in step_s else "-",
                     fmt(per_round(lname, wd), 2) if lname in step_s else "-",
                     fmt(bound, 1), f"{100 / step_s[wd] / bound:.0f}%"])
    print(f"\nDecode B = 1, steps alone (seconds per single-token step after the {PROMPT}-token prompt, "
          f"{NEW - 1} steps a sample, median; gptcore `step`, llama.cpp `eval` of one token):\n")
    print(markdown_table(["weights", "gptcore ms/step", "tok/s", "x bfloat16", "llama.cpp ms/step", "x llama.cpp",
                          "BW bound tok/s", "% BW bound"], rows))
    print(f"\ngptcore q4_0 / q8_0 (steps): {fmt(per_round('q8_0', 'q4_0'), 2)}")
    print(f"  done decode B=1 ({time.perf_counter() - t0:.0f} s)", flush=True)

    # ---- decode B = 8 and prefill
    ids8 = rng.integers(0, config.vocab_size - 1, size=(8, PROMPT), dtype=np.int64)
    fns = {}
    for name in ("float32", "q8_0", "q4_0"):
        run = decode_runner(models[name], 8)
        fns[name] = lambda run=run: run(ids8)
    res8 = compare(fns, reps=args.reps, min_time=0.0, settle=SETTLE_THREADED)
    long_ids = rng.integers(0, config.vocab_size - 1, size=(1, PREFILL), dtype=np.int64)
    fns = {name: (lambda m=models[name]: m.forward(long_ids, logits="last")) for name in ("float32", "q8_0", "q4_0")}
    resp = compare(fns, reps=args.reps, min_time=0.3, settle=SETTLE_THREADED)
    rows = []
    for wd in ("q8_0", "q4_0"):
        rows.append([wd, fmt(8 * NEW / res8[wd].median, 1), fmt(8 * NEW / res8["float32"].median, 1),
                     fmt(paired_speed(res8, "float32", wd), 2), fmt(PREFILL / resp[wd].median, 0),
                     fmt(PREFILL / resp["float32"].median, 0), fmt(paired_speed(resp, "float32", wd), 2)])
    print(f"\nDecode B = 8 (tokens/s, all sequences) and prefill (forward over 1 x {PREFILL} tokens, tokens/s):\n")
    print(markdown_table(["weights", "B=8 tok/s", "float32 B=8 tok/s", "x float32", "prefill tok/s",
                          "float32 prefill tok/s", "x float32"], rows))
    print(f"  done B=8 and prefill ({time.perf_counter() - t0:.0f} s)", flush=True)

    # ---- bytes and perplexity
    full = f32.nbytes
    rows = []
    tok_ids = None
    try:
        tok_ids = gptcore.Tokenizer.from_folder(TOKENIZER).encode(TEXT.read_text(encoding="utf-8"))
    except Exception as e:  # noqa: BLE001 - a bench note, not a failure
        print(f"(perplexity skipped: {e})")
    ppl = {}
    ids_p = None
    if tok_ids is not None:
        width = min(config.n_ctx, 1024)
        windows = max(1, min(4, len(tok_ids) // width))
        ids_p = np.asarray(tok_ids[: windows * width], np.int64).reshape(windows, -1)
        for name, m in models.items():
            ppl[name] = m.perplexity(ids_p)
    for name, m in models.items():
        rows.append([name, fmt_bytes(m.nbytes), f"{m.nbytes / full:.3f}",
                     fmt(ppl.get(name), 4), f"{100 * (ppl[name] / ppl['float32'] - 1):+.3f} %" if ppl else "-"])
    shape = "x".join(map(str, ids_p.shape)) if ppl else "-"
    print(f"\nWeights held (model.nbytes) and perplexity on the public-domain text fixture ({shape} tokens, "
          "random weights: the size of each format's error, not a trained model's quality):\n")
    print(markdown_table(["weights", "bytes held", "x float32", "perplexity", "vs float32"], rows))
    for lm in llamas.values():
        lm.close()
    work.cleanup()
    print("\n" + closing_line(t0))


if __name__ == "__main__":
    main()
