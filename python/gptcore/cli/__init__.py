"""The ``gptcore`` command: ``info``, ``demo``, ``bench``, ``generate``, ``chat``,
``perplexity``, ``score``, ``quantize`` and ``serve``.

``gptcore info MODEL`` prints the accounting of a preset, a model folder or a safetensors file
(parameters by component, FLOPs per token, the attention share, the logits memory, the
Chinchilla budget); ``gptcore demo`` runs Lesson 14's toy model and prints the lesson's
numbers; ``gptcore bench`` times a GPT-2-sized matrix product against numpy;
``gptcore generate`` continues a prompt, ``gptcore chat`` talks with a chat model through its
chat template and ``gptcore perplexity`` scores text files, with a model folder's tokenizer;
``gptcore score`` scores documents (token ids or text) in this process or on a Dask cluster;
``gptcore quantize`` writes a model as a GGUF file with q8_0 / q4_0 (or 16-bit) weights;
``gptcore serve`` serves a model through the OpenAI API.

One module per command (``gptcore.cli.info``, ``.demo``, ``.bench``, ``.generate``,
``.chat``, ``.perplexity``, ``.score``, ``.quantize``, ``.serve``), each with
``add_parser(subparsers)`` and ``run(args) -> int``;
what they share (argument types, the thread and model options, the loader, the exit-status
contract) is in ``gptcore.cli._common``.

Errors are one line on stderr. Exit status: 0 success; 1 a file, folder or model that is
missing or cannot be used (no weights, NaN weights, no tokenizer, not UTF-8), or work that
could not all be done (a document that could not be scored, logits that turned non-finite,
memory that ran out); 2 a bad command line (unknown option, value out of range, empty prompt,
a request too large for this machine); 130 interrupted (Ctrl-C).

The problems of ``GPTCORE_KERNEL`` and ``GPTCORE_NUM_THREADS`` are reported after the options
are read (not when gptcore is imported), so that ``--threads`` silences the second.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from .. import __version__, _env
from . import bench, chat, demo, generate, info, perplexity, quantize, score, serve
from ._common import Fail

__all__ = ["main"]

#: The commands in the order ``gptcore --help`` lists them.
COMMANDS = (info, demo, bench, generate, chat, perplexity, score, quantize, serve)


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
    for msg in _env.take_pending(threads_given=getattr(args, "threads", None) is not None):
        print(f"gptcore: warning: {msg}", file=sys.stderr)
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
    except MemoryError as e:
        if str(e):  # gptcore's own check, before the work: a request too large for this machine
            print(f"gptcore {args.command}: error: {e}", file=sys.stderr)
            return 2
        print(f"gptcore {args.command}: error: out of memory (the system refused an allocation; a smaller "
              "--batch, --context or --max-line-bytes needs less)", file=sys.stderr)
        return 1
    except FloatingPointError as e:  # logits that are not finite: the model cannot go on
        print(f"gptcore {args.command}: error: {e}", file=sys.stderr)
        return 1
    except ValueError as e:  # a value out of range
        print(f"gptcore {args.command}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a file that cannot be read or written
        print(f"gptcore {args.command}: error: {e}", file=sys.stderr)
        return 1
