"""``gptcore generate MODEL PROMPT``: continue a prompt with a model folder's tokenizer; the
text on stdout as it is generated, the prefill and decode speeds on stderr."""

from __future__ import annotations

import argparse
import sys
import time
import warnings

from ..linalg import get_num_threads
from ..text import stream_pieces
from ._common import (
    Fail,
    add_model_options,
    apply_threads,
    fmt_rate,
    load_text_model,
    nonnegative_float,
    nonnegative_int,
    positive,
    probability,
)

__all__ = ["add_parser", "run"]


def add_parser(sub) -> argparse.ArgumentParser:
    gen = sub.add_parser("generate", help="continue a prompt with a model folder (text in, text out)",
                         description="Print the continuation of PROMPT as it is generated (stdout), then the "
                         "prefill and decode speeds (stderr).")
    gen.add_argument("model", metavar="MODEL", help="model folder (config.json, model.safetensors, tokenizer files)")
    gen.add_argument("prompt", metavar="PROMPT", help="the text to continue")
    gen.add_argument("--max-new-tokens", type=positive, default=50, help="tokens to generate (default 50)")
    gen.add_argument("--temperature", type=nonnegative_float, default=1.0, help="default 1.0; 0 = greedy")
    gen.add_argument("--top-k", type=positive, default=None, help="sample among the K most likely tokens")
    gen.add_argument("--top-p", type=probability, default=None, help="sample within probability mass P (0 < P <= 1)")
    gen.add_argument("--seed", type=nonnegative_int, default=None, help="seed of the sampler (same seed, same text)")
    gen.add_argument("--greedy", action="store_true", help="always the most likely token")
    gen.add_argument("--ignore-eos", action="store_true", help="do not stop at <|endoftext|>")
    gen.add_argument("--context-shift", type=positive, default=None, metavar="N",
                     help="when the context is full, drop the N oldest tokens at once and rebuild the cache "
                     "(default n_ctx / 4; 1 = the lesson's exact crop, a full rebuild every token)")
    add_model_options(gen)
    gen.set_defaults(func=run)
    return gen


def run(args: argparse.Namespace) -> int:
    """Continue a prompt: the text as it comes on stdout, the timings on stderr."""
    if args.prompt == "":
        raise Fail("the prompt is empty (GPT-2 has no start token to generate from)", 2)
    apply_threads(args)
    model = load_text_model(args.model, args.tokenizer, args.dtype)
    n_ctx = model.config.n_ctx
    shift = max(1, n_ctx // 4) if args.context_shift is None else args.context_shift
    if shift > n_ctx:
        raise Fail(f"--context-shift must be at most n_ctx = {n_ctx}, got {shift}", 2)
    tok = model.tokenizer
    t0 = time.perf_counter()
    ids = tok.encode(args.prompt)
    t_encode = time.perf_counter() - t0
    learned = model.config.pos == "learned"
    prompt_len = min(len(ids), n_ctx) if learned else len(ids)
    if len(ids) > prompt_len:
        print(f"gptcore generate: the prompt's {len(ids):,} tokens are cropped to the last {n_ctx:,}",
              file=sys.stderr)
    out = sys.stdout
    n_new, t_first = 0, None
    t_start = time.perf_counter()
    with warnings.catch_warnings():  # the exact crop's warning, as one line when it starts
        warnings.showwarning = lambda message, *a, **k: print(
            f"\ngptcore generate: warning: {message}", file=sys.stderr, flush=True)
        for token, piece in stream_pieces(
            model, ids, args.max_new_tokens, stop_at_eos=not args.ignore_eos, temperature=args.temperature,
            top_k=args.top_k, top_p=args.top_p, greedy=args.greedy, seed=args.seed, context_shift=shift,
        ):
            if token is not None:
                n_new += 1
                if t_first is None:
                    t_first = time.perf_counter()
            if piece:
                out.write(piece)
                out.flush()
    t_end = time.perf_counter()
    out.write("\n")
    out.flush()
    t_prefill = (t_first if t_first is not None else t_end) - t_start
    t_decode = t_end - t_first if t_first is not None else 0.0
    share = f", {100 * t_encode / t_prefill:.1f} % of prefill" if n_new and t_prefill > 0 else ""
    line = (f"prompt {len(ids):,} tokens, encoded in {1e3 * t_encode:.2f} ms{share}; "
            f"prefill {prompt_len:,} tokens in {t_prefill:.3f} s ({fmt_rate(prompt_len, t_prefill)}); "
            f"decode {max(0, n_new - 1):,} tokens in {t_decode:.3f} s ({fmt_rate(n_new - 1, t_decode)}); "
            f"{get_num_threads()} threads")
    rebuilds = -(-(prompt_len + n_new - 1 - n_ctx) // shift) if learned and n_new else 0
    if rebuilds > 0:
        line += f"; context full: {rebuilds:,} cache rebuild(s), dropping {shift:,} tokens each"
    print(line, file=sys.stderr)
    return 0
