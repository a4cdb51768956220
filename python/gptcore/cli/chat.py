"""``gptcore chat MODEL``: talk with a chat model folder. On a terminal, an interactive prompt
(each line a turn of the user's; ``/reset`` forgets the conversation, ``/exit`` or end of
input leaves); ``--message TEXT`` for one turn. Replies are streamed to stdout as they are
generated, each followed by its speed on stderr. With standard input not a terminal, each
line read is a turn (no prompt is shown)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Dict, List

from ..chat import stream_chat
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
    cmd = sub.add_parser("chat", help="talk with a chat model folder (interactive, or one --message)",
                         description="Chat with MODEL through its tokenizer's chat template: an interactive "
                         "prompt on a terminal, or one turn with --message. Replies stream to stdout.")
    cmd.add_argument("model", metavar="MODEL", help="model folder (config.json, weights, tokenizer.json, "
                     "tokenizer_config.json with a chat template)")
    cmd.add_argument("--message", "-m", default=None, help="one user message: print the reply and exit")
    cmd.add_argument("--system", default=None, help="a system message opening the conversation")
    cmd.add_argument("--max-new-tokens", type=positive, default=256, help="most tokens per reply (default 256)")
    cmd.add_argument("--temperature", type=nonnegative_float, default=0.7, help="default 0.7; 0 = greedy")
    cmd.add_argument("--top-k", type=positive, default=None, help="sample among the K most likely tokens")
    cmd.add_argument("--top-p", type=probability, default=0.9, help="sample within probability mass P (default 0.9)")
    cmd.add_argument("--seed", type=nonnegative_int, default=None, help="seed of the sampler (same seed, same replies)")
    cmd.add_argument("--greedy", action="store_true", help="always the most likely token")
    add_model_options(cmd)
    cmd.set_defaults(func=run)
    return cmd


def _reply(model, messages: List[Dict[str, Any]], args: argparse.Namespace, seed) -> str:
    out = sys.stdout
    pieces = []
    t0 = time.perf_counter()
    n = 0
    for piece in stream_chat(model, messages, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                             top_p=args.top_p, greedy=args.greedy, seed=seed, context_shift=max(1, model.config.n_ctx // 4)):
        pieces.append(piece)
        out.write(piece)
        out.flush()
        n += 1
    seconds = time.perf_counter() - t0
    out.write("\n")
    out.flush()
    text = "".join(pieces)
    tokens = len(model.tokenizer.encode(text)) if text else 0
    print(f"({tokens:,} tokens in {seconds:.2f} s, {fmt_rate(tokens, seconds)})", file=sys.stderr, flush=True)
    return text


def run(args: argparse.Namespace) -> int:
    if args.message is not None and args.message.strip() == "":
        raise Fail("the message is empty", 2)
    apply_threads(args)
    model = load_text_model(args.model, args.tokenizer, args.dtype, args.weight_dtype)
    if model.tokenizer.chat_template is None:
        raise Fail(f"{args.model!r} has no chat template (tokenizer_config.json's chat_template, or "
                   "chat_template.jinja); use gptcore generate for plain text")
    messages: List[Dict[str, Any]] = []
    if args.system is not None:
        messages.append({"role": "system", "content": args.system})
    if args.message is not None:
        messages.append({"role": "user", "content": args.message})
        _reply(model, messages, args, args.seed)
        return 0
    interactive = sys.stdin.isatty()
    if interactive:
        print(f"Chatting with {args.model} ({model.config.family}, {model.config.n_layers} layers). "
              "/reset forgets the conversation, /exit leaves.", file=sys.stderr)
    turn = 0
    while True:
        try:
            line = input("> " if interactive else "")
        except EOFError:
            if interactive:
                print(file=sys.stderr)
            return 0
        text = line.strip()
        if not text:
            continue
        if text in ("/exit", "/quit"):
            return 0
        if text == "/reset":
            messages = messages[:1] if args.system is not None else []
            continue
        messages.append({"role": "user", "content": line})
        seed = None if args.seed is None else args.seed + turn
        reply = _reply(model, messages, args, seed)
        messages.append({"role": "assistant", "content": reply})
        turn += 1
