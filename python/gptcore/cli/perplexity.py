"""``gptcore perplexity MODEL FILE...``: the mean negative log-likelihood and perplexity of
text files, scored with sliding windows (``gptcore.scoring``)."""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from ..linalg import get_num_threads
from ..scoring import resolve_window, score_many, sliding_windows
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
                         "every STRIDE tokens; every token but a file's first is scored once.")
    ppl.add_argument("model", metavar="MODEL", help="model folder (config.json, model.safetensors, tokenizer files)")
    ppl.add_argument("files", metavar="FILE", nargs="+", help="text files to score")
    ppl.add_argument("--context", type=positive, default=None, help="window length (default n_ctx)")
    ppl.add_argument("--stride", type=positive, default=None, help="window step (default context / 2)")
    ppl.add_argument("--batch", type=positive, default=1, help="windows per forward pass (default 1)")
    ppl.add_argument("--progress", action="store_true", default=None,
                     help="show the progress bar even when stderr is not a terminal")
    ppl.add_argument("--no-progress", dest="progress", action="store_false", help="never show the progress bar")
    add_model_options(ppl)
    ppl.set_defaults(func=run)
    return ppl


def run(args: argparse.Namespace) -> int:
    """Score text files: tokens, mean NLL (nats) and perplexity per file and in total."""
    apply_threads(args)
    model = load_text_model(args.model, args.tokenizer, args.dtype)
    try:
        context, stride = resolve_window(model, args.context, args.stride)
    except (ValueError, TypeError) as e:
        raise Fail(f"--context/--stride: {e}", 2) from None
    texts = [_read_text(f) for f in args.files]
    t0 = time.perf_counter()
    docs = [model.tokenizer.encode(t) for t in texts]
    t_encode = time.perf_counter() - t0
    for name, d in zip(args.files, docs):
        if d.size < 2:
            raise Fail(f"{name!r} has {d.size} token(s): nothing to score (the first token is never scored)")
    windows = [sliding_windows(d.size, context, stride) for d in docs]
    work = sum(e - b - 1 for w in windows for b, e, _ in w)
    total = sum(d.size - 1 for d in docs)
    from tqdm import tqdm

    show = args.progress if args.progress is not None else sys.stderr.isatty()
    t0 = time.perf_counter()
    with tqdm(total=total, unit="tok", unit_scale=True, desc="scoring", file=sys.stderr, disable=not show,
              leave=False, dynamic_ncols=True) as bar:
        results = score_many(_Progress(model, bar, work, total), docs, context=context, stride=stride,
                             batch=args.batch)
    t_score = time.perf_counter() - t0
    n_all = sum(r.tokens for r in results)
    nll_all = math.fsum(r.nll for r in results)
    rows = [(name, r.tokens, r.mean, r.perplexity) for name, r in zip(args.files, results)]
    rows.append(("total", n_all, nll_all / n_all, math.exp(nll_all / n_all) if nll_all / n_all < 700 else math.inf))
    if max(d.size for d in docs) > context:
        print(f"windows of {context:,} tokens every {stride:,}: in each file, token i of the first {context:,} "
              f"(i >= 2) is predicted from the i - 1 before it; every later token from the last "
              f"{context - stride:,} to {context - 1:,} tokens before it. The first token is not scored.")
    else:
        print(f"each file fits one window of {context:,} tokens: every token from the second on is predicted "
              "from all the tokens before it. The first token is not scored.")
    wn = max(len("file"), max(len(r[0]) for r in rows))
    print(f"{'file':<{wn}}  {'tokens':>12}  {'mean NLL (nats)':>15}  {'perplexity':>14}")
    for name, n, mean, ppl in rows:
        print(f"{name:<{wn}}  {n:>12,}  {mean:>15.6f}  {ppl:>14.6g}")
    print(f"encoded {total + len(docs):,} tokens in {t_encode:.3f} s; scored {n_all:,} tokens in {t_score:.3f} s "
          f"({fmt_rate(n_all, t_score)}, {len(docs)} file(s), batch {args.batch}, {get_num_threads()} threads)",
          file=sys.stderr)
    return 0


def _read_text(name: str) -> str:
    """A text file (``-``: standard input) as UTF-8, or a one-line error."""
    try:
        data = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
    except FileNotFoundError:
        raise Fail(f"no such file: {name!r}") from None
    except IsADirectoryError:
        raise Fail(f"{name!r} is a folder, not a text file") from None
    except OSError as e:
        raise Fail(f"cannot read {name!r}: {e.strerror or e}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Fail(f"{name!r} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start:,})") from None


class _Progress:
    """The model as ``gptcore.scoring.score_many`` sees it, advancing a progress bar by
    the share of the work each ``token_logprobs`` call does (``done`` positions of ``work``,
    shown as scored tokens of ``total``)."""

    def __init__(self, model, bar, work: int, total: int) -> None:
        self._model, self._bar, self._work, self._total = model, bar, work, total
        self._done = 0

    @property
    def config(self):
        return self._model.config

    def token_logprobs(self, ids, *a, **k):
        out = self._model.token_logprobs(ids, *a, **k)
        self._done += out.size
        target = self._total if self._done >= self._work else self._done * self._total // self._work
        self._bar.update(target - self._bar.n)
        return out
