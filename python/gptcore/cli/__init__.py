"""The ``gptcore`` command: ``info``, ``demo``, ``bench``, ``generate``, ``perplexity`` and
``score``.

``gptcore info MODEL`` prints the accounting of a preset, a model folder or a safetensors file
(parameters by component, FLOPs per token, the attention share, the logits memory, the
Chinchilla budget); ``gptcore demo`` runs Lesson 14's toy model and prints the lesson's
numbers; ``gptcore bench`` times a GPT-2-sized matrix product against numpy;
``gptcore generate`` continues a prompt and ``gptcore perplexity`` scores text files, with a
model folder's tokenizer; ``gptcore score`` scores documents (token ids or text) in this
process or on a Dask cluster.

One module per command (``gptcore.cli.info``, ``.demo``, ``.bench``, ``.generate``,
``.perplexity``, ``.score``), each with ``add_parser(subparsers)`` and ``run(args) -> int``;
what they share (argument types, the thread and model options, the loader, the exit-status
contract) is in ``gptcore.cli._common``.

Errors are one line on stderr. Exit status: 0 success, 1 a file or folder that is missing or
cannot be used (no weights, no tokenizer, not UTF-8), 2 a bad command line (unknown option,
value out of range, empty prompt), 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from .. import __version__
from . import bench, demo, generate, info, perplexity, score
from ._common import Fail

__all__ = ["main"]

#: The commands in the order ``gptcore --help`` lists them.
COMMANDS = (info, demo, bench, generate, perplexity, score)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gptcore", description="GPT-style decoders on the CPU, exact and fast.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    p.add_argument("--version", action="version", version=f"gptcore {__version__}")
    for command in COMMANDS:
        command.add_parser(sub)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``gptcore`` console script; returns the exit status."""
    args = build_parser().parse_args(None if argv is None else list(argv))
    try:
        return args.func(args)
    except BrokenPipeError:  # output piped into a reader that stopped early (head)
        return 0
    except Fail as e:  # a missing or unusable file (1), a bad argument (2)
        print(f"gptcore {args.command}: error: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        print(f"gptcore {args.command}: interrupted", file=sys.stderr)
        return 130
    except (ValueError, MemoryError) as e:  # sizes the machine cannot hold, or out of range
        print(f"gptcore {args.command}: error: {e}", file=sys.stderr)
        return 2
