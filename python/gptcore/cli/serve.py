"""``gptcore serve MODEL``: serve a model folder (or file) through the OpenAI API
(``/v1/completions``, ``/v1/chat/completions``, ``/v1/models``) with continuous batching,
plus ``/health`` and ``/metrics``. Prints the address it serves; stops on SIGTERM or Ctrl-C,
letting the requests in flight finish for up to ``--grace`` seconds (exit 0 when all of them
did, 1 when some had to be cut off). See the Serving page of the docs."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ._common import (
    Fail,
    add_model_options,
    apply_threads,
    load_text_model,
    nonnegative_float,
    nonnegative_int,
    positive,
)

__all__ = ["add_parser", "run"]


def _port(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number (0-65535), got {text!r}") from None
    if not 0 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number (0-65535), got {v}")
    return v


def add_parser(sub) -> argparse.ArgumentParser:
    cmd = sub.add_parser("serve", help="serve a model through the OpenAI API (continuous batching)",
                         description="Serve MODEL (a folder or file gptcore.load reads, with a tokenizer) through "
                         "the OpenAI API: /v1/completions, /v1/chat/completions (with the folder's chat template), "
                         "/v1/models, /health and /metrics. Requests join the running batch at the next step; "
                         "each answer is, bit for bit, what the request gets alone.")
    cmd.add_argument("model", metavar="MODEL", help="model folder or file (with a tokenizer)")
    cmd.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    cmd.add_argument("--port", type=_port, default=8000, help="port (default 8000; 0 picks a free one)")
    cmd.add_argument("--max-batch", type=positive, default=8, help="most sequences in one step (default 8)")
    cmd.add_argument("--max-queue", type=nonnegative_int, default=64,
                     help="most sequences waiting for a place in the batch; beyond, 503 (default 64)")
    cmd.add_argument("--prefill-chunk", type=positive, default=128,
                     help="most prompt tokens fed in one step (default 128)")
    cmd.add_argument("--api-key", default=None,
                     help="require 'Authorization: Bearer KEY' on /v1 routes (default: the environment variable "
                     "GPTCORE_API_KEY when set, which, unlike an argument, other users cannot read in ps)")
    cmd.add_argument("--grace", type=nonnegative_float, default=30.0,
                     help="seconds the requests in flight may take to finish after SIGTERM (default 30)")
    cmd.add_argument("--model-name", default=None, help="the model id clients name (default: MODEL's base name)")
    add_model_options(cmd)
    cmd.set_defaults(func=run)
    return cmd


def run(args: argparse.Namespace) -> int:
    try:
        from ..serve.server import serve_model
    except ImportError as e:
        raise Fail(f"serving needs the serve extra (pip install 'gptcore[serve]'): {e}") from None
    if args.api_key is None and os.environ.get("GPTCORE_API_KEY"):
        args.api_key = os.environ["GPTCORE_API_KEY"]
    if args.api_key is not None and args.api_key.strip() == "":
        raise Fail("--api-key is empty", 2)
    apply_threads(args)
    model = load_text_model(args.model, args.tokenizer, args.dtype, args.weight_dtype)
    name = args.model_name or Path(args.model.rstrip("/")).name or args.model

    def ready(url: str) -> None:
        print(f"gptcore serve: serving {name} at {url} (OpenAI API at {url}/v1)", flush=True)

    try:
        cut = serve_model(model, name, host=args.host, port=args.port, max_batch=args.max_batch,
                          max_queue=args.max_queue, prefill_chunk=args.prefill_chunk, api_key=args.api_key,
                          grace=args.grace, on_ready=ready)
    except OSError as e:
        raise Fail(f"cannot serve on {args.host}:{args.port}: {e.strerror or e}") from None
    if cut:
        print(f"gptcore serve: {cut} request(s) were cut off after --grace {args.grace:g} s", file=sys.stderr)
        return 1
    print("gptcore serve: stopped", file=sys.stderr)
    return 0
