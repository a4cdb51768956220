"""``gptcore demo``: Lesson 14's toy model on gptcore with the lesson's own numbers, then a
GPT-2-small-size forward timed against a plain numpy forward."""

from __future__ import annotations

import argparse
import time

import numpy as np

from ..accounting import param_count
from ..config import GPTConfig
from ..lessons import (
    LESSON14_IDS_1BASED,
    frobenius_norm,
    lesson14_config,
    lesson14_weights,
    to_zero_based,
)
from ..linalg import get_num_threads, kernel
from ..model import Model, softmax
from ..numpy_forward import forward as numpy_forward
from ..weights import init_weights
from ._common import positive

__all__ = ["add_parser", "run"]


def add_parser(sub) -> argparse.ArgumentParser:
    demo = sub.add_parser("demo", help="Lesson 14's toy model on gptcore, then a GPT-2-size forward against numpy")
    demo.add_argument("--T", type=positive, nargs="+", default=[64, 256], help="sequence lengths to time (default 64 256)")
    demo.add_argument("--repeat", type=positive, default=5, help="timed runs of each (median; default 5)")
    demo.set_defaults(func=run)
    return demo


def run(args: argparse.Namespace) -> int:
    """Lesson 14's toy model with the lesson's own weights on gptcore (float64), then a
    GPT-2-small-size forward (random weights, float32) timed against a plain numpy forward."""
    too_long = [t for t in args.T if t > 1024]
    if too_long:
        raise ValueError(f"--T {too_long[0]} exceeds GPT-2's context of 1024 tokens")
    cfg = lesson14_config()
    model = Model(lesson14_weights(), cfg, dtype="float64")
    ids = to_zero_based(LESSON14_IDS_1BASED)
    logits, hidden = model.forward(ids, return_hidden=True)
    probs = softmax(logits[-1])
    print("Lesson 14's toy GPT on gptcore (float64, the lesson's weights from seed(14))")
    print(f"  config: V = {cfg.vocab_size}, T = {len(ids)}, d_model = {cfg.d_model}, {cfg.n_heads} heads, "
          f"d_ff = {cfg.d_ff}, {cfg.n_layers} blocks, sinusoidal positions, untied head")
    print(f"  ids (1-based): {LESSON14_IDS_1BASED}")
    print(f"  ids -> H^(0) {hidden[0].shape} -> {cfg.n_layers} blocks -> logits {logits.shape}")
    print("  H^(0) row 1, first 6:", " ".join(repr(float(v)) for v in hidden[0][0, :6]))
    print(f"  |H^(N)| = {frobenius_norm(hidden[-1])!r}")
    print("  |H^(l)|, l = 0..N:", " ".join(f"{frobenius_norm(h):.6f}" for h in hidden))
    print(f"  argmax next token (1-based): {int(np.argmax(probs)) + 1}, "
          f"probability {float(probs.max()):.6f}, sum of probabilities {float(probs.sum())!r}")
    changed = ids.copy()
    changed[-1] = 41  # the lesson's causality test: the last id becomes 42 (1-based)
    other = model.forward(changed)
    before = float(np.abs(other[:-1] - logits[:-1]).max())
    last = float(np.abs(other[-1] - logits[-1]).max())
    print(f"  causality: change the last token -> max |dlogits| at positions 1..7 = {before!r}, "
          f"at position 8 = {last:.6f}")

    gpt2 = GPTConfig.preset("gpt2")
    print()
    print(f"GPT-2 small size ({param_count(gpt2).total:,} parameters, random weights, float32), "
          f"{get_num_threads()} threads, kernel {kernel()}")
    weights = init_weights(gpt2, seed=0, scheme="gpt2", dtype="float32")
    t0 = time.perf_counter()
    big = Model(weights, gpt2)
    print(f"  weights checked and packed in {time.perf_counter() - t0:.2f} s")
    rng = np.random.default_rng(0)
    settle = 0.25 if get_num_threads() > 1 else 0.0
    for t in args.T:
        x = rng.integers(0, gpt2.vocab_size, size=(1, t))
        times = {"gptcore": [], "numpy": []}
        # One untimed call of each first: the first forward at a new length grows the model's
        # workspace and touches fresh memory, which later calls reuse.
        big.forward(x)
        numpy_forward(weights, x, gpt2)
        for _ in range(args.repeat):  # alternate the two, keep the median
            # With several threads, let the other library's idle threads stop spinning first:
            # OpenBLAS's keep a core busy for tens of milliseconds after a call, which would
            # slow whichever forward runs next.
            time.sleep(settle)
            t0 = time.perf_counter()
            ours = big.forward(x)
            times["gptcore"].append(time.perf_counter() - t0)
            time.sleep(settle)
            t0 = time.perf_counter()
            ref = numpy_forward(weights, x, gpt2)
            times["numpy"].append(time.perf_counter() - t0)
        g, n = (float(np.median(v)) for v in times.values())
        err = float(np.abs(ours - ref).max() / np.abs(ref).max())
        print(f"  T = {t:5d}: gptcore {1e3 * g:8.1f} ms   numpy {1e3 * n:8.1f} ms   "
              f"speed-up {n / g:5.2f} x   max relative difference {err:.1e}")
    return 0
