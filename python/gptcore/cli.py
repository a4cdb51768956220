"""The ``gptcore`` command: ``info``, ``demo``, ``bench``, ``generate`` and ``perplexity``.

``gptcore info MODEL`` prints the accounting of a preset, a model folder or a safetensors file
(parameters by component, FLOPs per token, the attention share, the logits memory, the
Chinchilla budget); ``gptcore demo`` runs Lesson 14's toy model and prints the lesson's
numbers; ``gptcore bench`` times a GPT-2-sized matrix product against numpy;
``gptcore generate`` continues a prompt and ``gptcore perplexity`` scores text files, with a
model folder's tokenizer.

Errors are one line on stderr. Exit status: 0 success, 1 a file or folder that is missing or
cannot be used (no weights, no tokenizer, not UTF-8), 2 a bad command line (unknown option,
value out of range, empty prompt), 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path
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

    cfg, header = _info_config(args.model)
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
    out = [f"{args.model}: {_describe(cfg)}"] + header + [""] + _table(sections)
    print("\n".join(out))
    return 0


class _Fail(Exception):
    """An error the command reports in one line, with the exit status ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def _model_arg(text: str) -> str:
    """``info``'s MODEL: a preset name in any case, or an existing folder or file."""
    if text.lower() in PRESETS or Path(text).exists():
        return text
    raise argparse.ArgumentTypeError(
        f"invalid choice: {text!r} is neither a preset ({', '.join(sorted(PRESETS))}) "
        "nor an existing model folder or .safetensors file")


def _file_error(e: OSError) -> str:
    """A FileNotFoundError of the loaders as one sentence naming the path."""
    what = (e.strerror or str(e)).split(": ", 1)[-1]
    return f"{what}: {e.filename}" if e.filename else what


def _info_config(model: str) -> Tuple[GPTConfig, List[str]]:
    """The configuration ``info`` describes, and lines that say where it came from."""
    if model.lower() in PRESETS:
        return GPTConfig.preset(model.lower()), []
    from .tokenizer import Tokenizer
    from .weights import infer_config, load_safetensors

    p = Path(model)
    try:
        weights, cfg = load_safetensors(p)
    except FileNotFoundError as e:
        raise _Fail(_file_error(e)) from None
    except (ValueError, TypeError) as e:
        raise _Fail(str(e)) from None
    lines = []
    if cfg is None:
        cfg = infer_config(weights)
        lines.append(f"  (no stored configuration: sizes inferred from the tensors, {cfg.n_heads} heads of 64 assumed)")
    if p.is_dir():
        try:
            tok = Tokenizer.from_folder(p)
            lines.append(f"  tokenizer: {tok.vocab_size:,} ids")
        except (FileNotFoundError, ValueError) as e:
            lines.append(f"  tokenizer: none ({str(e).split(': ', 1)[-1]})")
    return cfg, lines


def _load_text_model(path: str, tokenizer: Optional[str], dtype: str):
    """``gptcore.load`` for the text commands, with every failure as a ``_Fail``."""
    from .model import load

    p = Path(path)
    if not p.exists():
        raise _Fail(f"no such model folder or file: {path!r}")
    if tokenizer is not None and not Path(tokenizer).is_dir():
        raise _Fail(f"no such tokenizer folder: {tokenizer!r}")
    try:
        model = load(p, dtype=dtype, tokenizer=tokenizer)
    except FileNotFoundError as e:
        raise _Fail(_file_error(e)) from None
    except (ValueError, TypeError) as e:  # a broken checkpoint or tokenizer file
        raise _Fail(str(e)) from None
    if model.tokenizer is None:
        raise _Fail(model._tokenizer_missing or "no tokenizer")
    return model


def _rate(n: int, seconds: float) -> str:
    return f"{n / seconds:,.1f} tok/s" if seconds > 0 and n > 0 else "- tok/s"


def _generate(args: argparse.Namespace) -> int:
    """Continue a prompt: the text as it comes on stdout, the timings on stderr."""
    from .linalg import get_num_threads, set_num_threads
    from .text import stream_pieces

    if args.prompt == "":
        raise _Fail("the prompt is empty (GPT-2 has no start token to generate from)", 2)
    if args.threads is not None:
        set_num_threads(args.threads)
    model = _load_text_model(args.model, args.tokenizer, args.dtype)
    n_ctx = model.config.n_ctx
    shift = max(1, n_ctx // 4) if args.context_shift is None else args.context_shift
    if shift > n_ctx:
        raise _Fail(f"--context-shift must be at most n_ctx = {n_ctx}, got {shift}", 2)
    tok = model.tokenizer
    t0 = time.perf_counter()
    ids = tok.encode(args.prompt)
    t_encode = time.perf_counter() - t0
    learned = model.config.pos == "learned"
    prompt_len = min(len(ids), n_ctx) if learned else len(ids)
    if len(ids) > prompt_len:
        print(f"gptcore generate: the prompt's {len(ids):,} tokens are cropped to the last {n_ctx:,}",
              file=sys.stderr)
    out = sys.stdout
    n_new, t_first = 0, None
    t_start = time.perf_counter()
    with warnings.catch_warnings():  # the exact crop's warning, as one line when it starts
        warnings.showwarning = lambda message, *a, **k: print(
            f"\ngptcore generate: warning: {message}", file=sys.stderr, flush=True)
        for token, piece in stream_pieces(
            model, ids, args.max_new_tokens, stop_at_eos=not args.ignore_eos, temperature=args.temperature,
            top_k=args.top_k, top_p=args.top_p, greedy=args.greedy, seed=args.seed, context_shift=shift,
        ):
            if token is not None:
                n_new += 1
                if t_first is None:
                    t_first = time.perf_counter()
            if piece:
                out.write(piece)
                out.flush()
    t_end = time.perf_counter()
    out.write("\n")
    out.flush()
    t_prefill = (t_first if t_first is not None else t_end) - t_start
    t_decode = t_end - t_first if t_first is not None else 0.0
    share = f", {100 * t_encode / t_prefill:.1f} % of prefill" if n_new and t_prefill > 0 else ""
    line = (f"prompt {len(ids):,} tokens, encoded in {1e3 * t_encode:.2f} ms{share}; "
            f"prefill {prompt_len:,} tokens in {t_prefill:.3f} s ({_rate(prompt_len, t_prefill)}); "
            f"decode {max(0, n_new - 1):,} tokens in {t_decode:.3f} s ({_rate(n_new - 1, t_decode)}); "
            f"{get_num_threads()} threads")
    rebuilds = -(-(prompt_len + n_new - 1 - n_ctx) // shift) if learned and n_new else 0
    if rebuilds > 0:
        line += f"; context full: {rebuilds:,} cache rebuild(s), dropping {shift:,} tokens each"
    print(line, file=sys.stderr)
    return 0


def _read_text(name: str) -> str:
    """A text file (``-``: standard input) as UTF-8, or a one-line error."""
    try:
        data = sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
    except FileNotFoundError:
        raise _Fail(f"no such file: {name!r}") from None
    except IsADirectoryError:
        raise _Fail(f"{name!r} is a folder, not a text file") from None
    except OSError as e:
        raise _Fail(f"cannot read {name!r}: {e.strerror or e}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _Fail(f"{name!r} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start:,})") from None


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


def _perplexity(args: argparse.Namespace) -> int:
    """Score text files: tokens, mean NLL (nats) and perplexity per file and in total."""
    import math

    from .linalg import get_num_threads, set_num_threads
    from .scoring import resolve_window, score_many, sliding_windows

    if args.threads is not None:
        set_num_threads(args.threads)
    model = _load_text_model(args.model, args.tokenizer, args.dtype)
    try:
        context, stride = resolve_window(model, args.context, args.stride)
    except (ValueError, TypeError) as e:
        raise _Fail(f"--context/--stride: {e}", 2) from None
    texts = [_read_text(f) for f in args.files]
    t0 = time.perf_counter()
    docs = [model.tokenizer.encode(t) for t in texts]
    t_encode = time.perf_counter() - t0
    for name, d in zip(args.files, docs):
        if d.size < 2:
            raise _Fail(f"{name!r} has {d.size} token(s): nothing to score (the first token is never scored)")
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
          f"({_rate(n_all, t_score)}, {len(docs)} file(s), batch {args.batch}, {get_num_threads()} threads)",
          file=sys.stderr)
    return 0


def _demo(args: argparse.Namespace) -> int:
    """Lesson 14's toy model with the lesson's own weights on gptcore (float64), then a
    GPT-2-small-size forward (random weights, float32) timed against a plain numpy forward."""
    import numpy as np

    from .accounting import param_count
    from .lessons import LESSON14_IDS_1BASED, frobenius_norm, lesson14_config, lesson14_weights, to_zero_based
    from .linalg import get_num_threads, kernel
    from .model import Model, softmax
    from .numpy_forward import forward as numpy_forward
    from .weights import init_weights

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
            # OpenBLAS's keep a core busy for tens of ms after a call (on the 2-core Xeon, the
            # T = 64 gptcore forward took 125 ms right after numpy's, 73-94 ms after a pause).
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


def _score(args: argparse.Namespace) -> int:
    """Score documents (token-id ``.npy`` files or text files) with ``gptcore.distributed.score``:
    in this process, on a LocalCluster of ``--local N`` worker processes, or on the Dask
    scheduler at ``--scheduler ADDRESS``."""
    import os

    from .distributed import score

    def run(client) -> int:
        kwargs = dict(client=client, context=args.context, stride=args.stride, batch_tokens=args.batch_tokens,
                      weight_dtype=args.weight_dtype, out=args.out, progress=not args.no_progress,
                      connect_timeout=args.connect_timeout)
        table = score(args.files, args.model, **kwargs)
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
            print(f"gptcore score: {errors} document(s) could not be scored (see the error column)", file=sys.stderr)
        return 0

    try:
        if args.local is not None:
            from distributed import Client, LocalCluster

            threads = max(1, (os.cpu_count() or 1) // args.local)
            with LocalCluster(n_workers=args.local, threads_per_worker=threads, processes=True, host="127.0.0.1",
                              dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
                return run(client)
        return run(args.scheduler)
    except (OSError, TypeError) as e:  # unreachable scheduler, missing model, existing --out
        print(f"gptcore score: error: {e}", file=sys.stderr)
        return 2


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
    info.add_argument("model", type=_model_arg, metavar="MODEL",
                      help="a preset (any case: " + ", ".join(sorted(PRESETS)) + "), a model folder or a .safetensors file")
    info.add_argument("--T", type=_positive, default=None, help="context length for FLOPs and logits (default: n_ctx)")
    info.add_argument("--batch", type=_positive, default=1, help="batch size for the logits memory (default 1)")
    info.add_argument("--bytes", type=_positive, default=4, help="bytes per logit (default 4, float32)")
    info.add_argument("--lesson-counting", action="store_true",
                      help="count as Lesson 14 does: FFN biases and LayerNorm affines, no attention biases")
    info.add_argument("--no-blocks", action="store_true", help="leave the blocks out (placeholder skeleton, LM4-T1)")
    info.set_defaults(func=_info)

    demo = sub.add_parser("demo", help="Lesson 14's toy model on gptcore, then a GPT-2-size forward against numpy")
    demo.add_argument("--T", type=_positive, nargs="+", default=[64, 256], help="sequence lengths to time (default 64 256)")
    demo.add_argument("--repeat", type=_positive, default=5, help="timed runs of each (median; default 5)")
    demo.set_defaults(func=_demo)

    bench = sub.add_parser("bench", help="time a GPT-2-sized matmul against numpy")
    bench.add_argument("--m", type=_positive, default=1024, help="rows of a (tokens; default 1024)")
    bench.add_argument("--k", type=_positive, default=768, help="inner size (default 768)")
    bench.add_argument("--n", type=_positive, default=3072, help="columns of b (default 3072)")
    bench.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    bench.add_argument("--repeat", type=_positive, default=5, help="timed runs; the best is reported (default 5)")
    bench.set_defaults(func=_bench)
    _add_text_commands(p, sub)

    score = sub.add_parser("score", help="log-likelihood and perplexity of documents, on a Dask cluster or here")
    score.add_argument("model", metavar="MODEL", help="a Hugging Face folder or .safetensors file every worker can read")
    score.add_argument("files", nargs="+", metavar="FILES", help=".npy files of token ids, or text files (UTF-8)")
    where = score.add_mutually_exclusive_group()
    where.add_argument("--scheduler", metavar="ADDRESS", default=None, help="a Dask scheduler, e.g. tcp://host:8786")
    where.add_argument("--local", type=_positive, metavar="N", default=None,
                       help="start a LocalCluster of N worker processes on this machine (stopped at the end)")
    score.add_argument("--out", default=None, metavar="PATH",
                       help="write the table as Parquet part files in this new folder (e.g. scores.parquet)")
    score.add_argument("--context", type=_positive, default=None, help="window length (default: the model's n_ctx)")
    score.add_argument("--stride", type=_positive, default=None, help="window step (default: half the context)")
    score.add_argument("--batch-tokens", type=_positive, default=16384, help="most tokens per task (default 16384)")
    score.add_argument("--weight-dtype", default=None, help="weights' storage dtype, passed to gptcore.load")
    score.add_argument("--connect-timeout", type=float, default=5.0, help="seconds to reach the scheduler (default 5)")
    score.add_argument("--no-progress", action="store_true", help="no progress bar")
    score.set_defaults(func=_score)
    return p


def _add_text_commands(p: argparse.ArgumentParser, sub) -> None:
    """``--version``, ``generate`` and ``perplexity``."""
    from . import __version__

    p.add_argument("--version", action="version", version=f"gptcore {__version__}")

    def common(cmd: argparse.ArgumentParser) -> None:
        cmd.add_argument("--tokenizer", metavar="FOLDER", default=None,
                         help="folder with tokenizer.json or vocab.json + merges.txt (default: MODEL's)")
        cmd.add_argument("--threads", type=_positive, default=None, help="threads (default: all cores)")
        cmd.add_argument("--dtype", choices=["float32", "float64"], default="float32", help="default float32")

    gen = sub.add_parser("generate", help="continue a prompt with a model folder (text in, text out)",
                         description="Print the continuation of PROMPT as it is generated (stdout), then the "
                         "prefill and decode speeds (stderr).")
    gen.add_argument("model", metavar="MODEL", help="model folder (config.json, model.safetensors, tokenizer files)")
    gen.add_argument("prompt", metavar="PROMPT", help="the text to continue")
    gen.add_argument("--max-new-tokens", type=_positive, default=50, help="tokens to generate (default 50)")
    gen.add_argument("--temperature", type=_nonnegative_float, default=1.0, help="default 1.0; 0 = greedy")
    gen.add_argument("--top-k", type=_positive, default=None, help="sample among the K most likely tokens")
    gen.add_argument("--top-p", type=_probability, default=None, help="sample within probability mass P (0 < P <= 1)")
    gen.add_argument("--seed", type=_nonnegative_int, default=None, help="seed of the sampler (same seed, same text)")
    gen.add_argument("--greedy", action="store_true", help="always the most likely token")
    gen.add_argument("--ignore-eos", action="store_true", help="do not stop at <|endoftext|>")
    gen.add_argument("--context-shift", type=_positive, default=None, metavar="N",
                     help="when the context is full, drop the N oldest tokens at once and rebuild the cache "
                     "(default n_ctx / 4; 1 = the lesson's exact crop, a full rebuild every token)")
    common(gen)
    gen.set_defaults(func=_generate)

    ppl = sub.add_parser("perplexity", help="mean NLL and perplexity of text files (sliding windows)",
                         description="Score each FILE (UTF-8; - for standard input) with windows of CONTEXT tokens "
                         "every STRIDE tokens; every token but a file's first is scored once.")
    ppl.add_argument("model", metavar="MODEL", help="model folder (config.json, model.safetensors, tokenizer files)")
    ppl.add_argument("files", metavar="FILE", nargs="+", help="text files to score")
    ppl.add_argument("--context", type=_positive, default=None, help="window length (default n_ctx)")
    ppl.add_argument("--stride", type=_positive, default=None, help="window step (default context / 2)")
    ppl.add_argument("--batch", type=_positive, default=1, help="windows per forward pass (default 1)")
    ppl.add_argument("--progress", action="store_true", default=None,
                     help="show the progress bar even when stderr is not a terminal")
    ppl.add_argument("--no-progress", dest="progress", action="store_false", help="never show the progress bar")
    common(ppl)
    ppl.set_defaults(func=_perplexity)


def _nonnegative_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {v}")
    return v


def _nonnegative_float(text: str) -> float:
    import math

    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not (math.isfinite(v) and v >= 0):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text}")
    return v


def _probability(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from None
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text}")
    return v


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``gptcore`` console script; returns the exit status."""
    args = _parser().parse_args(None if argv is None else list(argv))
    try:
        return args.func(args)
    except BrokenPipeError:  # output piped into a reader that stopped early (head)
        return 0
    except _Fail as e:  # a missing or unusable file (1), a bad argument (2)
        print(f"gptcore {args.command}: error: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        print(f"gptcore {args.command}: interrupted", file=sys.stderr)
        return 130
    except (ValueError, MemoryError) as e:  # sizes the machine cannot hold, or out of range
        print(f"gptcore {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
