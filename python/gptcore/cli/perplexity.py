"""``gptcore perplexity MODEL FILE...``: the mean negative log-likelihood and perplexity of
text files, scored with sliding windows (``gptcore.scoring``).

Each file is read, encoded and scored a piece at a time (``gptcore.text_files``,
``gptcore.scoring.score_pieces``): memory holds the model, at most ``--max-line-bytes`` of
text and its encoding, and the windows being scored, whatever the file's size. A file that
cannot be scored (missing, not UTF-8, a line longer than ``--max-line-bytes``, fewer than two
tokens) is named on standard error; the table still shows the others, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any, Iterator, List, Tuple

import numpy as np

from ..linalg import get_num_threads
from ..scoring import ExactSum, ScoreResult, resolve_window, score_pieces
from ..text_files import MAX_LINE_BYTES, token_pieces
from ._common import (
    Fail,
    add_model_options,
    apply_threads,
    fmt_rate,
    load_text_model,
    positive,
)

__all__ = ["add_parser", "run"]


def add_parser(sub) -> argparse.ArgumentParser:
    ppl = sub.add_parser("perplexity", help="mean NLL and perplexity of text files (sliding windows)",
                         description="Score each FILE (UTF-8; - for standard input) with windows of CONTEXT tokens "
                         "every STRIDE tokens; every token but a file's first is scored once. Files are read a piece "
                         "at a time: memory does not grow with their size.")
    ppl.add_argument("model", metavar="MODEL", help="model folder (config.json, model.safetensors, tokenizer files), "
                     "or a Hub name such as openai-community/gpt2")
    ppl.add_argument("files", metavar="FILE", nargs="+", help="text files to score")
    ppl.add_argument("--context", type=positive, default=None, help="window length (default n_ctx)")
    ppl.add_argument("--stride", type=positive, default=None, help="window step (default context / 2)")
    ppl.add_argument("--batch", type=positive, default=1, help="windows per forward pass (default 1)")
    ppl.add_argument("--max-line-bytes", type=positive, default=MAX_LINE_BYTES, metavar="N",
                     help=f"the most text encoded at once (default {MAX_LINE_BYTES:,}): a longer line is an error")
    ppl.add_argument("--json", action="store_true", help="print one JSON object (per file, total, errors, timings)")
    ppl.add_argument("--progress", action="store_true", default=None,
                     help="show the progress bar even when stderr is not a terminal")
    ppl.add_argument("--no-progress", dest="progress", action="store_false", help="never show the progress bar")
    add_model_options(ppl)
    ppl.set_defaults(func=run)
    return ppl


class _Timed:
    """An iterator of token pieces that counts the time spent producing them (reading and
    encoding) and the tokens, and tells the progress bar."""

    def __init__(self, pieces: Iterator[np.ndarray]) -> None:
        self._pieces = pieces
        self.seconds = 0.0
        self.tokens = 0

    def __iter__(self) -> "_Timed":
        return self

    def __next__(self) -> np.ndarray:
        t0 = time.perf_counter()
        try:
            piece = next(self._pieces)
        finally:
            self.seconds += time.perf_counter() - t0
        self.tokens += int(piece.size)
        return piece


def run(args: argparse.Namespace) -> int:
    """Score text files: tokens, mean NLL (nats) and perplexity per file and in total."""
    apply_threads(args)
    model = load_text_model(args.model, args.tokenizer, args.dtype, args.weight_dtype)
    try:
        context, stride = resolve_window(model, args.context, args.stride)
    except (ValueError, TypeError) as e:
        raise Fail(f"--context/--stride: {e}", 2) from None
    from tqdm import tqdm

    show = args.progress if args.progress is not None else sys.stderr.isatty()
    results: List[Tuple[str, ScoreResult, int]] = []
    errors: List[Tuple[str, str]] = []
    t_encode = t_score = 0.0
    n_tokens = 0
    with tqdm(total=None, unit="tok", unit_scale=True, desc="scoring", file=sys.stderr, disable=not show,
              leave=False, dynamic_ncols=True) as bar:
        scorer = _Progress(model, bar)
        for name in args.files:
            pieces = _Timed(token_pieces(name, model.tokenizer, max_line_bytes=args.max_line_bytes))
            t0 = time.perf_counter()
            try:
                r = score_pieces(scorer, pieces, context=context, stride=stride, batch=args.batch)
            except FileNotFoundError:
                errors.append((name, "no such file"))
                continue
            except IsADirectoryError:
                errors.append((name, "is a folder, not a text file"))
                continue
            except OSError as e:
                errors.append((name, f"cannot be read: {e.strerror or e}"))
                continue
            except ValueError as e:  # not UTF-8, a line too long
                errors.append((name, str(e).replace(f"{name!r} ", "", 1)))
                continue
            finally:
                t_encode += pieces.seconds
                t_score += time.perf_counter() - t0 - pieces.seconds
            n_tokens += pieces.tokens
            if r.tokens == 0:
                errors.append((name, f"has {pieces.tokens} token(s): nothing to score "
                                     "(the first token is never scored)"))
                continue
            results.append((name, r, pieces.tokens))
    for name, why in errors:
        print(f"gptcore perplexity: error: {name!r} {why}", file=sys.stderr)
    total = ExactSum()
    for _, r, _ in results:
        total.add([r.nll])
    n_all = sum(r.tokens for _, r, _ in results)
    nll_all = total.value
    mean_all = nll_all / n_all if n_all else math.nan
    ppl_all = math.exp(mean_all) if n_all and mean_all < 700 else (math.inf if n_all else math.nan)
    longest = max((n for _, _, n in results), default=0)
    if args.json:  # strict JSON: null where there is no number (nothing scored)
        def num(x: float) -> Any:
            return x if math.isfinite(x) else (None if math.isnan(x) else str(x))

        print(json.dumps({
            "context": context, "stride": stride,
            "files": [{"file": name, "tokens": r.tokens, "nll": num(r.nll), "mean": num(r.mean),
                       "perplexity": num(r.perplexity)} for name, r, _ in results],
            "total": {"tokens": n_all, "nll": num(nll_all) if n_all else None, "mean": num(mean_all),
                      "perplexity": num(ppl_all)},
            "errors": [{"file": name, "error": why} for name, why in errors],
            "timings": {"encode_s": t_encode, "score_s": t_score}, "batch": args.batch,
            "threads": get_num_threads(),
        }, allow_nan=False))
    elif results:
        if longest > context:
            print(f"windows of {context:,} tokens every {stride:,}: in each file, token i of the first {context:,} "
                  f"(i >= 2) is predicted from the i - 1 before it; every later token from the last "
                  f"{context - stride:,} to {context - 1:,} tokens before it. The first token is not scored.")
        else:
            print(f"each file fits one window of {context:,} tokens: every token from the second on is predicted "
                  "from all the tokens before it. The first token is not scored.")
        rows: List[Tuple[str, int, float, float]] = [(name, r.tokens, r.mean, r.perplexity) for name, r, _ in results]
        rows.append(("total", n_all, mean_all, ppl_all))
        wn = max(len("file"), max(len(r[0]) for r in rows))
        print(f"{'file':<{wn}}  {'tokens':>12}  {'mean NLL (nats)':>15}  {'perplexity':>14}")
        for name, n, mean, ppl in rows:
            print(f"{name:<{wn}}  {n:>12,}  {mean:>15.6f}  {ppl:>14.6g}")
    if results and not args.json:
        print(f"encoded {n_tokens:,} tokens in {t_encode:.3f} s; scored {n_all:,} tokens in {t_score:.3f} s "
              f"({fmt_rate(n_all, t_score)}, {len(results)} file(s), batch {args.batch}, {get_num_threads()} threads)",
              file=sys.stderr)
    return 1 if errors else 0


class _Progress:
    """The model as ``gptcore.scoring.score_pieces`` sees it, advancing a progress bar by the
    positions each ``token_logprobs`` call computes (windows overlap, so a little more than
    the tokens scored)."""

    def __init__(self, model: Any, bar: Any) -> None:
        self._model, self._bar = model, bar

    @property
    def config(self) -> Any:
        return self._model.config

    def token_logprobs(self, ids: Any, *a: Any, **k: Any) -> np.ndarray:
        out = self._model.token_logprobs(ids, *a, **k)
        self._bar.update(out.size)
        return out
