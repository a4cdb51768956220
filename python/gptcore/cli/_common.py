"""What the commands share: the exit-status contract, argument types, thread and model
options, the text model loader, and table formatting.

Exit status (the contract of every command): 0 success; 1 a file, folder or model that is
missing or cannot be used, or work that could not all be done (``Fail``'s default; a document
that could not be scored, logits that are not finite, memory that ran out); 2 a bad command
line (``Fail(..., 2)``, an argparse error, a ``ValueError`` that escapes a command, a request
too large for this machine's memory); 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from ..hub import resolve as resolve_hub
from ..linalg import set_num_threads
from ..model import Model, load
from ..weights.formats import WEIGHT_DTYPES

__all__ = [
    "Fail",
    "add_model_options",
    "apply_threads",
    "file_error",
    "fmt_int",
    "fmt_rate",
    "fmt_size",
    "load_text_model",
    "resolve_model",
    "nonnegative_float",
    "nonnegative_int",
    "positive",
    "probability",
    "table",
]


class Fail(Exception):
    """An error the command reports in one line, with the exit status ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


# ------------------------------------------------------------------------------ argument types

def positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v}")
    return v


def nonnegative_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {v}")
    return v


def nonnegative_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not (math.isfinite(v) and v >= 0):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text}")
    return v


def probability(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from None
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text}")
    return v


# ------------------------------------------------------------------------------ models, threads

def add_model_options(cmd: argparse.ArgumentParser) -> None:
    """``--tokenizer``, ``--threads``, ``--dtype`` and ``--weight-dtype`` of the text commands."""
    cmd.add_argument("--tokenizer", metavar="FOLDER", default=None,
                     help="folder with tokenizer.json or vocab.json + merges.txt (default: MODEL's)")
    cmd.add_argument("--threads", type=positive, default=None, help="threads (default: all cores)")
    cmd.add_argument("--dtype", choices=["float32", "float64"], default="float32", help="default float32")
    cmd.add_argument("--weight-dtype", choices=list(WEIGHT_DTYPES), default=None,
                     help="store the weight matrices 16-bit or in ggml's q8_0 / q4_0 blocks (computing in float32; "
                          "needs --dtype float32; a GGUF file's blocks are used as stored by default)")


def apply_threads(args: argparse.Namespace) -> None:
    """``--threads``, when given, sets gptcore's thread count."""
    if args.threads is not None:
        set_num_threads(args.threads)


def file_error(e: OSError) -> str:
    """A FileNotFoundError of the loaders as one sentence naming the path."""
    what = (e.strerror or str(e)).split(": ", 1)[-1]
    return f"{what}: {e.filename}" if e.filename else what


def resolve_model(path: str) -> str:
    """MODEL as a local path: a file or folder here, else a Hugging Face Hub name found in the
    cache or downloaded (``gptcore.hub``); a ``Fail`` (status 1) when it is neither."""
    try:
        p, _ = resolve_hub(path, fn="MODEL")
    except (FileNotFoundError, ImportError) as e:
        raise Fail(str(e).split(": ", 1)[-1] if str(e).startswith("MODEL: ") else str(e)) from None
    if not p.exists():
        raise Fail(f"no such model folder or file: {path!r}")
    return str(p)


def load_text_model(path: str, tokenizer: Optional[str], dtype: str, weight_dtype: Optional[str] = None) -> Model:
    """``gptcore.load`` for the text commands, with every failure as a ``Fail``: status 2 for
    options that do not go together, 1 for a model or tokenizer that cannot be used."""
    if weight_dtype is not None and dtype != "float32":
        raise Fail(f"--weight-dtype {weight_dtype} needs --dtype float32 ({weight_dtype} weights, float32 arithmetic)", 2)
    local = resolve_model(path)
    if tokenizer is not None and not Path(tokenizer).is_dir():
        raise Fail(f"no such tokenizer folder: {tokenizer!r}")
    try:
        model = load(local, dtype=dtype, tokenizer=tokenizer, weight_dtype=weight_dtype)
    except FileNotFoundError as e:
        raise Fail(file_error(e)) from None
    except (ValueError, TypeError) as e:  # a broken checkpoint or tokenizer file
        raise Fail(str(e)) from None
    if model.tokenizer is None:
        raise Fail(model._tokenizer_missing or "no tokenizer")
    return model


# ------------------------------------------------------------------------------ formatting

def fmt_int(n: int) -> str:
    return f"{n:,}"


def fmt_size(nbytes: int) -> str:
    """Decimal units, as the lessons quote sizes (1.6 GB = 1.6e9 bytes)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:,.2f} {unit}"
    return f"{nbytes} B"


def fmt_rate(n: int, seconds: float) -> str:
    return f"{n / seconds:,.1f} tok/s" if seconds > 0 and n > 0 else "- tok/s"


def table(sections: Sequence[Tuple[str, Sequence[Tuple[str, str]]]]) -> List[str]:
    """Sections of (label, value) rows in one aligned table: every label left-aligned in one
    column, every value right-aligned in the next, a heading line above each section."""
    rows = [r for _, rs in sections for r in rs]
    wl = max((len(a) for a, _ in rows), default=0)
    wv = max((len(b) for _, b in rows), default=0)
    out: List[str] = []
    for title, rs in sections:
        if out:
            out.append("")
        out.append(title)
        out += [f"  {a:<{wl}}  {b:>{wv}}" for a, b in rs]
    return out
