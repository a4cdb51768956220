"""``gptcore score MODEL FILES...``: log-likelihood and perplexity of documents (token-id
``.npy`` files or text files) with ``gptcore.distributed.score``, in this process, on a
LocalCluster or on a Dask scheduler.

Every document gets a row; one that cannot be scored (unreadable, not token ids, fewer than
two tokens, a text line longer than ``--max-line-bytes``) has its reason in the ``error``
column, and the command then exits 1 after writing the table (0 with ``--allow-errors``).
Memory: see ``gptcore.distributed.score`` (no document is held whole when it is long)."""

from __future__ import annotations

import argparse
import os
import sys

from ..distributed import score as score_documents
from ..text_files import MAX_LINE_BYTES
from ..weights.formats import WEIGHT_DTYPES
from ._common import positive, resolve_model

__all__ = ["add_parser", "run"]


def add_parser(sub) -> argparse.ArgumentParser:
    score = sub.add_parser("score", help="log-likelihood and perplexity of documents, on a Dask cluster or here")
    score.add_argument("model", metavar="MODEL", help="a Hugging Face folder or .safetensors file every worker can "
                       "read, or a Hub name (resolved here, in the Hugging Face cache)")
    score.add_argument("files", nargs="+", metavar="FILES", help=".npy files of token ids, or text files (UTF-8)")
    where = score.add_mutually_exclusive_group()
    where.add_argument("--scheduler", metavar="ADDRESS", default=None, help="a Dask scheduler, e.g. tcp://host:8786")
    where.add_argument("--local", type=positive, metavar="N", default=None,
                       help="start a LocalCluster of N worker processes on this machine (stopped at the end)")
    score.add_argument("--out", default=None, metavar="PATH",
                       help="write the table as Parquet part files in this new folder (e.g. scores.parquet)")
    score.add_argument("--context", type=positive, default=None, help="window length (default: the model's n_ctx)")
    score.add_argument("--stride", type=positive, default=None, help="window step (default: half the context)")
    score.add_argument("--batch-tokens", type=positive, default=16384, help="most tokens per task (default 16384)")
    score.add_argument("--weight-dtype", choices=list(WEIGHT_DTYPES), default=None,
                       help="store the weight matrices 16-bit or in q8_0 / q4_0 blocks (passed to gptcore.load)")
    score.add_argument("--max-line-bytes", type=positive, default=MAX_LINE_BYTES, metavar="N",
                       help=f"the most text encoded at once (default {MAX_LINE_BYTES:,}): a longer line is an error")
    score.add_argument("--allow-errors", action="store_true",
                       help="exit 0 even when some documents could not be scored (their error is in the table)")
    score.add_argument("--connect-timeout", type=float, default=5.0, help="seconds to reach the scheduler (default 5)")
    score.add_argument("--no-progress", action="store_true", help="no progress bar")
    score.set_defaults(func=run)
    return score


def run(args: argparse.Namespace) -> int:
    """Score documents (token-id ``.npy`` files or text files) with ``gptcore.distributed.score``:
    in this process, on a LocalCluster of ``--local N`` worker processes, or on the Dask
    scheduler at ``--scheduler ADDRESS``."""

    def score_with(client) -> int:
        kwargs = dict(client=client, context=args.context, stride=args.stride, batch_tokens=args.batch_tokens,
                      weight_dtype=args.weight_dtype, out=args.out, progress=not args.no_progress,
                      connect_timeout=args.connect_timeout, max_line_bytes=args.max_line_bytes)
        table = score_documents(args.files, model, **kwargs)
        if args.out is not None:
            errors = int(table["errors"].sum())
            print(f"{int(table['documents'].sum())} documents, {int(table['scored'].sum()):,} tokens scored, "
                  f"{len(table)} part files in {os.path.abspath(args.out)}")
        else:
            errors = int(table["error"].notna().sum())
            shown = table[["path", "scored", "nll", "mean", "perplexity", "error"]].copy()
            shown["error"] = shown["error"].fillna("")
            print(shown.to_string(index=False, float_format=lambda v: f"{v:.6f}"))
        if errors:
            print(f"gptcore score: {'warning' if args.allow_errors else 'error'}: {errors} document(s) could not "
                  "be scored (see the error column)", file=sys.stderr)
            return 0 if args.allow_errors else 1
        return 0

    model = resolve_model(args.model)
    try:
        if args.local is not None:
            from distributed import Client, LocalCluster

            threads = max(1, (os.cpu_count() or 1) // args.local)
            with LocalCluster(n_workers=args.local, threads_per_worker=threads, processes=True, host="127.0.0.1",
                              dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
                return score_with(client)
        return score_with(args.scheduler)
    except (ConnectionError, FileExistsError, TypeError, ValueError) as e:  # --scheduler, --out, options
        print(f"gptcore score: error: {e}", file=sys.stderr)
        return 2
    except (OSError, RuntimeError) as e:  # a model or file that cannot be used
        print(f"gptcore score: error: {e}", file=sys.stderr)
        return 1
