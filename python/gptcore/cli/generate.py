"""``gptcore generate MODEL PROMPT``: continue a prompt with a model folder's tokenizer; the
text on stdout as it is generated, the prefill and decode speeds on stderr (or, with
``--json``, one JSON object with the text, the ids and the timings).

The sampling options are ``gptcore.sampling.SamplingParams``' (the order in which they apply
is described there); they mean what ``Model.generate`` and ``generate_text`` mean by them.
Memory: the model, its key/value cache (at most ``n_ctx`` positions for learned positions)
and, with ``--json``, the generated ids; the text streams out as it comes.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings
from typing import Dict, List

from .._memory import check_alloc
from ..linalg import get_num_threads
from ..sampling import LOGIT_BIAS_RANGE, PENALTY_RANGE, SamplingParams
from ..text import TextStream
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

# Bytes kept per generated token with --json: a Python int in a list and its share of the text.
_KEPT_PER_TOKEN = 64


def _unit_interval(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0 <= v <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text}")
    return v


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text}")
    return v


def _penalty(text: str) -> float:
    lo, hi = PENALTY_RANGE
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [{lo:g}, {hi:g}], got {text!r}") from None
    if not lo <= v <= hi:
        raise argparse.ArgumentTypeError(f"expected a number in [{lo:g}, {hi:g}], got {text}")
    return v


def _bias(text: str) -> tuple:
    lo, hi = LOGIT_BIAS_RANGE
    tid, sep, value = text.partition("=")
    try:
        if not sep:
            raise ValueError
        i, v = int(tid), float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected TOKEN_ID=BIAS (e.g. 50256=-100), got {text!r}") from None
    if i < 0:
        raise argparse.ArgumentTypeError(f"expected a token id >= 0, got {i}")
    if not lo <= v <= hi:
        raise argparse.ArgumentTypeError(f"expected a bias in [{lo:g}, {hi:g}], got {value}")
    return i, v


def _stop_string(text: str) -> str:
    if text == "":
        raise argparse.ArgumentTypeError("a stop string must not be empty")
    return text.encode("utf-8").decode("unicode_escape") if "\\" in text else text


def add_parser(sub) -> argparse.ArgumentParser:
    gen = sub.add_parser("generate", help="continue a prompt with a model folder (text in, text out)",
                         description="Print the continuation of PROMPT as it is generated (stdout), then the "
                         "prefill and decode speeds (stderr). MODEL is a folder, a .safetensors file, or a Hugging "
                         "Face Hub name (taken from the Hugging Face cache, else downloaded unless HF_HUB_OFFLINE "
                         "is set).")
    gen.add_argument("model", metavar="MODEL", help="model folder (config.json, model.safetensors, tokenizer files), "
                     "or a Hub name such as openai-community/gpt2")
    gen.add_argument("prompt", metavar="PROMPT", nargs="?", default=None,
                     help="the text to continue (- reads it from standard input)")
    gen.add_argument("--prompt-file", metavar="FILE", default=None,
                     help="read the prompt from FILE (UTF-8; - for standard input) instead of PROMPT")
    gen.add_argument("--max-new-tokens", type=nonnegative_int, default=50,
                     help="most tokens to generate (default 50; 0 generates nothing)")
    samp = gen.add_argument_group("sampling (applied in this order; see gptcore.sampling)")
    samp.add_argument("--logit-bias", type=_bias, action="append", default=None, metavar="ID=BIAS",
                      help="add BIAS (-100 to 100) to token ID's logit; repeatable")
    samp.add_argument("--repetition-penalty", type=_positive_float, default=1.0, metavar="R",
                      help="transformers' repetition penalty over the prompt and the text (default 1: off)")
    samp.add_argument("--frequency-penalty", type=_penalty, default=0.0, metavar="F",
                      help="OpenAI's: minus F per earlier occurrence in the generated text (-2 to 2; default 0)")
    samp.add_argument("--presence-penalty", type=_penalty, default=0.0, metavar="P",
                      help="OpenAI's: minus P once a token occurs in the generated text (-2 to 2; default 0)")
    samp.add_argument("--temperature", type=nonnegative_float, default=1.0, help="default 1.0; 0 = greedy")
    samp.add_argument("--top-k", type=positive, default=None, help="sample among the K most likely tokens")
    samp.add_argument("--top-p", type=probability, default=None, help="sample within probability mass P (0 < P <= 1)")
    samp.add_argument("--min-p", type=_unit_interval, default=None, metavar="P",
                      help="drop tokens less likely than P times the most likely one (0 to 1)")
    samp.add_argument("--seed", type=nonnegative_int, default=None, help="seed of the sampler (same seed, same text)")
    samp.add_argument("--greedy", action="store_true", help="always the most likely token")
    stops = gen.add_argument_group("stopping")
    stops.add_argument("--stop", type=_stop_string, action="append", default=None, metavar="TEXT",
                       help="end the text where TEXT first appears (not printed; \\n and other escapes allowed); "
                       "repeatable")
    stops.add_argument("--stop-token", type=nonnegative_int, action="append", default=None, metavar="ID",
                       help="end generation at token ID (not printed); repeatable")
    stops.add_argument("--ignore-eos", action="store_true",
                       help="do not stop at the model's end-of-sequence tokens (generation_config.json)")
    gen.add_argument("--context-shift", type=positive, default=None, metavar="N",
                     help="when the context is full, drop the N oldest tokens at once and rebuild the cache "
                     "(default n_ctx / 4; 1 = the lesson's exact crop, a full rebuild every token)")
    gen.add_argument("--json", action="store_true",
                     help="print one JSON object (text, ids, finish reason, timings) instead of streaming the text")
    add_model_options(gen)
    gen.set_defaults(func=run)
    return gen


def _read_prompt(args: argparse.Namespace) -> str:
    """The prompt from PROMPT, - (standard input) or --prompt-file, as text; the errors name
    the argument."""
    if args.prompt is not None and args.prompt_file is not None:
        raise Fail("give the prompt as PROMPT or as --prompt-file, not both", 2)
    if args.prompt is None and args.prompt_file is None:
        raise Fail("the prompt is missing: give PROMPT, - (standard input) or --prompt-file FILE", 2)
    source = args.prompt_file if args.prompt_file is not None else ("-" if args.prompt == "-" else None)
    if source is None:
        text, what = args.prompt, "PROMPT"
    else:
        what = "the prompt on standard input" if source == "-" else f"--prompt-file {source!r}"
        try:
            data = sys.stdin.buffer.read() if source == "-" else open(source, "rb").read()
        except FileNotFoundError:
            raise Fail(f"--prompt-file: no such file: {source!r}") from None
        except IsADirectoryError:
            raise Fail(f"--prompt-file: {source!r} is a folder, not a text file") from None
        except OSError as e:
            raise Fail(f"--prompt-file: cannot read {source!r}: {e.strerror or e}") from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise Fail(f"{what} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start:,})") from None
    if text == "":
        raise Fail(f"{what} is empty (GPT-2 has no start token to generate from)", 2)
    return text


def _sampling(args: argparse.Namespace, vocab_size: int) -> Dict[str, object]:
    """generate's options from the command line, checked as SamplingParams checks them; the
    errors name the flag."""
    opts = dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                repetition_penalty=args.repetition_penalty, frequency_penalty=args.frequency_penalty,
                presence_penalty=args.presence_penalty, logit_bias=dict(args.logit_bias or ()),
                greedy=args.greedy, seed=args.seed)
    try:
        SamplingParams(stop_token_ids=args.stop_token or (), **opts).check_vocab(vocab_size)
    except (TypeError, ValueError) as e:
        flag = {"logit_bias": "--logit-bias", "stop_token_ids": "--stop-token"}
        msg = str(e)
        for field, name in flag.items():
            if msg.startswith(field):
                msg = name + msg[len(field):]
        raise Fail(msg, 2) from None
    return opts


def run(args: argparse.Namespace) -> int:
    """Continue a prompt: the text as it comes on stdout, the timings on stderr."""
    prompt = _read_prompt(args)
    apply_threads(args)
    model = load_text_model(args.model, args.tokenizer, args.dtype, args.weight_dtype)
    n_ctx = model.config.n_ctx
    shift = max(1, n_ctx // 4) if args.context_shift is None else args.context_shift
    if shift > n_ctx:
        raise Fail(f"--context-shift must be at most n_ctx = {n_ctx}, got {shift}", 2)
    opts = _sampling(args, model.config.vocab_size)
    tok = model.tokenizer
    t0 = time.perf_counter()
    ids = tok.encode(prompt, add_special_tokens=True)
    t_encode = time.perf_counter() - t0
    if ids.size == 0:
        raise Fail("the prompt encodes to no tokens (GPT-2 has no start token to generate from)", 2)
    learned = model.config.pos != "sinusoidal"  # learned and rotary positions stop at n_ctx
    prompt_len = min(len(ids), n_ctx) if learned else len(ids)
    if args.max_new_tokens == 0:
        prompt_len = 0  # nothing to generate: not even the prompt goes through the model
    if len(ids) > prompt_len and not args.json:
        print(f"gptcore generate: the prompt's {len(ids):,} tokens are cropped to the last {n_ctx:,}",
              file=sys.stderr)
    out = sys.stdout
    n_new, t_first = 0, None
    pieces: List[str] = []
    t_start = time.perf_counter()
    try:
        if args.json:  # the ids and the text are kept for the one object at the end
            check_alloc(args.max_new_tokens * _KEPT_PER_TOKEN, f"--json with --max-new-tokens {args.max_new_tokens:,}")
        stream = TextStream(model, ids, args.max_new_tokens, stop_at_eos=not args.ignore_eos, stop=args.stop,
                            stop_tokens=args.stop_token, context_shift=shift, fn="generate", **opts)
    except MemoryError as e:  # a request that cannot fit in this machine's memory
        raise Fail(str(e), 2) from None
    with warnings.catch_warnings():  # the exact crop's warning, as one line when it starts
        warnings.showwarning = lambda message, *a, **k: print(
            f"\ngptcore generate: warning: {message}", file=sys.stderr, flush=True)
        try:
            for token, piece in stream:
                if token is not None:
                    n_new += 1
                    if t_first is None:
                        t_first = time.perf_counter()
                if piece:
                    if args.json:
                        pieces.append(piece)
                    else:
                        out.write(piece)
                        out.flush()
        except FloatingPointError as e:  # NaN logits: the model cannot go on
            if not args.json:
                out.write("\n")
                out.flush()
            raise Fail(str(e)) from None
        except ValueError as e:  # a token the tokenizer has no text for
            raise Fail(str(e)) from None
    t_end = time.perf_counter()
    t_prefill = (t_first if t_first is not None else t_end) - t_start
    t_decode = t_end - t_first if t_first is not None else 0.0
    rebuilds = -(-(prompt_len + n_new - 1 - n_ctx) // shift) if learned and n_new else 0
    if args.json:
        result = {
            "text": "".join(pieces),
            "ids": stream.tokens,
            "finish_reason": stream.finish_reason,
            "stopped_by": stream.stopped_by,
            "prompt_tokens": int(len(ids)),
            "generated_tokens": len(stream.tokens),
            "timings": {"encode_s": t_encode, "prefill_s": t_prefill, "decode_s": t_decode,
                        "prefill_tokens": prompt_len, "decode_tokens": max(0, len(stream.tokens) - 1),
                        "cache_rebuilds": max(0, rebuilds)},
            "threads": get_num_threads(),
        }
        out.write(json.dumps(result, ensure_ascii=False) + "\n")
        out.flush()
        return 0
    out.write("\n")
    out.flush()
    share = f", {100 * t_encode / t_prefill:.1f} % of prefill" if n_new and t_prefill > 0 else ""
    line = (f"prompt {len(ids):,} tokens, encoded in {1e3 * t_encode:.2f} ms{share}; "
            f"prefill {prompt_len:,} tokens in {t_prefill:.3f} s ({fmt_rate(prompt_len, t_prefill)}); "
            f"decode {max(0, n_new - 1):,} tokens in {t_decode:.3f} s ({fmt_rate(n_new - 1, t_decode)}); "
            f"{get_num_threads()} threads")
    if rebuilds > 0:
        line += f"; context full: {rebuilds:,} cache rebuild(s), dropping {shift:,} tokens each"
    print(line, file=sys.stderr)
    return 0
