"""``gptcore quantize IN OUT --weight-dtype q8_0``: a model (folder, safetensors file, GGUF
file or Hub name) written as a GGUF file whose weight matrices, token embedding and head are
stored in ggml's q8_0 / q4_0 blocks (or 16-bit, or float32), as ``gptcore.load(IN,
weight_dtype=...)`` holds them: llama.cpp's reference quantizers, llama.cpp's choice of tensors
(``gptcore.gguf.policy``), a GGUF file's own blocks of that format kept byte for byte. The file
computes, bit for bit, what the loaded model computes."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Dict, Tuple

from ..model import load
from ..weights.formats import WEIGHT_DTYPES
from ._common import Fail, apply_threads, file_error, fmt_size, positive, resolve_model

__all__ = ["add_parser", "run"]


def add_parser(sub) -> argparse.ArgumentParser:
    q = sub.add_parser("quantize", help="write a model as a GGUF file with q8_0 / q4_0 (or 16-bit) weights")
    q.add_argument("model", metavar="IN", help="a model folder, .safetensors file, .gguf file or Hub name")
    q.add_argument("out", metavar="OUT", help="the GGUF file to write (a path ending in .gguf)")
    q.add_argument("--weight-dtype", choices=("float32",) + WEIGHT_DTYPES, required=True,
                   help="the format of the weight matrices, token embedding and head")
    q.add_argument("--tokenizer", metavar="FOLDER", default=None,
                   help="folder with tokenizer.json or vocab.json + merges.txt (default: IN's)")
    q.add_argument("--threads", type=positive, default=None, help="threads (default: all cores)")
    q.set_defaults(func=run)
    return q


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if out.suffix.lower() != ".gguf":
        raise Fail(f"OUT must be a path ending in .gguf (the only file format that holds {args.weight_dtype} "
                   f"weights here), got {args.out!r}", 2)
    if out.is_dir():
        raise Fail(f"OUT {args.out!r} is a folder", 2)
    apply_threads(args)
    local = resolve_model(args.model)
    if args.tokenizer is not None and not Path(args.tokenizer).is_dir():
        raise Fail(f"no such tokenizer folder: {args.tokenizer!r}")
    wd = None if args.weight_dtype == "float32" else args.weight_dtype
    try:
        model = load(local, tokenizer=args.tokenizer, weight_dtype=wd)
    except FileNotFoundError as e:
        raise Fail(file_error(e)) from None
    except (ValueError, TypeError) as e:
        raise Fail(str(e)) from None
    try:
        model.save(out, args.weight_dtype)
    except OSError as e:
        raise Fail(f"cannot write {args.out!r}: {e.strerror or e}") from None
    from ..gguf import GGUFReader

    with GGUFReader(out) as r:
        totals: Dict[str, Tuple[int, int]] = {}
        for t in r.tensors.values():
            c, b = totals.get(t.type, (0, 0))
            totals[t.type] = (c + 1, b + t.nbytes)
        size = r.size
    parts = ", ".join(f"{ty} {c} tensors {fmt_size(b)}" for ty, (c, b) in sorted(totals.items()))
    print(f"{out}: {fmt_size(size)} ({parts}); weights held in memory: {fmt_size(model.nbytes)}"
          + ("" if model.tokenizer is not None else "; no tokenizer"))
    return 0
