"""The ``gptcore`` command: ``info``, ``demo`` and ``bench``.

``gptcore info MODEL`` prints the accounting of a preset (parameters by component, FLOPs per
token, the attention share, the logits memory, the Chinchilla budget); ``gptcore demo`` runs
Lesson 14's toy model and prints the lesson's numbers; ``gptcore bench`` times a GPT-2-sized
matrix product against numpy.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import List, Optional, Sequence, Tuple

from .config import PRESETS, GPTConfig

__all__ = ["main"]


def _int(n: int) -> str:
    return f"{n:,}"


def _size(nbytes: int) -> str:
    """Decimal units, as the lessons quote sizes (1.6 GB = 1.6e9 bytes)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:,.2f} {unit}"
    return f"{nbytes} B"


def _table(sections: Sequence[Tuple[str, Sequence[Tuple[str, str]]]]) -> List[str]:
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


def _describe(cfg: GPTConfig) -> str:
    parts = [
        f"vocab {cfg.vocab_size:,}",
        f"context {cfg.n_ctx:,}",
        f"d_model {cfg.d_model}",
        f"heads {cfg.n_heads}",
        f"layers {cfg.n_layers}",
        f"d_ff {cfg.d_ff}",
        f"{cfg.pos} positions",
        "tied head" if cfg.tied else "separate head",
    ]
    if cfg.bias and cfg.attn_bias:
        parts.append("biases")
    elif cfg.bias:
        parts.append("MLP biases only")
    elif cfg.attn_bias:
        parts.append("attention biases only")
    else:
        parts.append("no biases")
    parts.append("LayerNorm affine" if cfg.ln_affine else "no LayerNorm affine")
    return ", ".join(parts)


def _info(args: argparse.Namespace) -> int:
    from .accounting import chinchilla, flops_per_token, lesson14_counting, logits_memory, param_count

    cfg = GPTConfig.preset(args.model)
    if args.lesson_counting:
        cfg = lesson14_counting(cfg)
    T = cfg.n_ctx if args.T is None else args.T
    counts = param_count(cfg, include_blocks=not args.no_blocks)
    flops = flops_per_token(cfg, T)
    mem = logits_memory(args.batch, T, cfg.vocab_size, bytes=args.bytes)
    budget = chinchilla(counts.total)
    head = "0 (tied)" if cfg.tied else _int(counts.lm_head)
    pos = _int(counts.position_embedding) + ("" if cfg.pos == "learned" else " (sinusoidal)")
    sections = [
        ("Parameters", [
            ("token embedding", _int(counts.token_embedding)),
            ("position embedding", pos),
            ("per block", _int(counts.per_block)),
            (f"blocks (x {counts.n_blocks})", _int(counts.blocks)),
            ("final LayerNorm", _int(counts.final_ln)),
            ("LM head", head),
            ("total", _int(counts.total)),
            ("blocks share", f"{counts.share('blocks') * 100:.2f} %"),
            ("float32 size", _size(counts.nbytes(4))),
        ]),
        (f"Compute per token (T = {T:,})", [
            ("forward (2 x weights)", _int(flops.forward)),
            ("training (3 x forward)", _int(flops.training)),
            ("attention scores (4 T d N)", _int(flops.attention)),
            ("attention share of forward", f"{flops.attention_percent:.2f} %"),
            ("crossover T* = d_ff", _int(flops.crossover_T)),
        ]),
        (f"Logits (B = {args.batch}, n = {T:,}, V = {cfg.vocab_size:,}, {args.bytes} bytes each)", [
            ("entries", _int(mem.entries)),
            ("memory", _size(mem.nbytes)),
        ]),
        ("Chinchilla budget", [
            ("tokens D = 20 P", _int(budget.tokens)),
            ("compute C = 6 P D", f"{budget.compute:.2e} FLOPs"),
        ]),
    ]
    out = [f"{args.model}: {_describe(cfg)}", ""] + _table(sections)
    print("\n".join(out))
    return 0


def _demo(args: argparse.Namespace) -> int:
    """Lesson 14's toy model, run through the textbook float64 path: the lesson's printout."""
    import numpy as np

    from .lessons import (
        LESSON14_IDS_1BASED,
        frobenius_norm,
        lesson14_weights,
        textbook_forward,
        textbook_softmax,
        to_zero_based,
    )

    weights = lesson14_weights()
    ids = to_zero_based(LESSON14_IDS_1BASED)
    r = textbook_forward(ids, weights)
    probs = textbook_softmax(r.logits[-1])
    print("Lesson 14: V = 50, T = 8, d_model = 64, 4 heads, d_ff = 256, 4 blocks (seed 14)")
    print("ids (1-based):", LESSON14_IDS_1BASED)
    print("H^(0) first row (first 6 values):", " ".join(repr(float(v)) for v in r.hidden[0][0, :6]))
    print("|H^(N)|:", repr(frobenius_norm(r.hidden[-1])))
    print("|H^(l)| for l = 0..N:", " ".join(f"{v:.6f}" for v in r.norms))
    print("logits shape:", tuple(r.logits.shape))
    print("argmax next token (1-based):", int(np.argmax(probs)) + 1, "  probability", repr(float(probs.max())))
    return 0


def _bench(args: argparse.Namespace) -> int:
    """Time ``a @ b`` for a GPT-2-sized product with gptcore.matmul and with numpy."""
    import numpy as np

    from .linalg import matmul

    rng = np.random.default_rng(0)
    a = rng.standard_normal((args.m, args.k)).astype(args.dtype)
    b = rng.standard_normal((args.k, args.n)).astype(args.dtype)
    flop = 2.0 * args.m * args.k * args.n

    def best(fn) -> float:
        fn()
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    t_core = best(lambda: matmul(a, b))
    t_np = best(lambda: a @ b)
    print("\n".join(_table([(
        f"({args.m} x {args.k}) @ ({args.k} x {args.n}) {args.dtype}, best of {args.repeat}",
        [
            ("gptcore.matmul", f"{flop / t_core / 1e9:.1f} GFLOP/s"),
            ("numpy @", f"{flop / t_np / 1e9:.1f} GFLOP/s"),
            ("speed-up over numpy", f"{t_np / t_core:.2f} x"),
        ],
    )])))
    return 0


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v}")
    return v


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gptcore", description="GPT-style decoders on the CPU, exact and fast.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    info = sub.add_parser("info", help="parameters, FLOPs and memory of a preset model")
    info.add_argument("model", choices=sorted(PRESETS), metavar="MODEL", help="one of: " + ", ".join(sorted(PRESETS)))
    info.add_argument("--T", type=_positive, default=None, help="context length for FLOPs and logits (default: n_ctx)")
    info.add_argument("--batch", type=_positive, default=1, help="batch size for the logits memory (default 1)")
    info.add_argument("--bytes", type=_positive, default=4, help="bytes per logit (default 4, float32)")
    info.add_argument("--lesson-counting", action="store_true",
                      help="count as Lesson 14 does: FFN biases and LayerNorm affines, no attention biases")
    info.add_argument("--no-blocks", action="store_true", help="leave the blocks out (placeholder skeleton, LM4-T1)")
    info.set_defaults(func=_info)

    demo = sub.add_parser("demo", help="run Lesson 14's toy model and print the lesson's numbers")
    demo.set_defaults(func=_demo)

    bench = sub.add_parser("bench", help="time a GPT-2-sized matmul against numpy")
    bench.add_argument("--m", type=_positive, default=1024, help="rows of a (tokens; default 1024)")
    bench.add_argument("--k", type=_positive, default=768, help="inner size (default 768)")
    bench.add_argument("--n", type=_positive, default=3072, help="columns of b (default 3072)")
    bench.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    bench.add_argument("--repeat", type=_positive, default=5, help="timed runs; the best is reported (default 5)")
    bench.set_defaults(func=_bench)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``gptcore`` console script; returns the exit status."""
    args = _parser().parse_args(None if argv is None else list(argv))
    try:
        return args.func(args)
    except BrokenPipeError:  # output piped into a reader that stopped early (head)
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
