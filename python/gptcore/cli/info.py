"""``gptcore info MODEL``: the accounting of a preset, a model folder, a safetensors file or a
GGUF file (parameters by component, FLOPs per token, the attention share, the logits memory,
the Chinchilla budget); for a GGUF file also its metadata and each tensor's type, shape and
bytes. A folder or safetensors file is described from its ``config.json`` and the headers
alone: no weight is read. Each large tensor as the loaded model holds it (its storage format
and the bytes held) is listed for a GGUF file, and for any model with ``--storage`` or
``--weight-dtype`` (which loads it, in that format)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import List, Tuple

from ..accounting import chinchilla, flops_per_token, logits_memory, param_count
from ..config import LLAMA_PRESETS, PRESETS, GPTConfig
from ..hub import resolve as resolve_hub
from ..model import load
from ..lessons import lesson14_counting
from ..tokenizer import Tokenizer
from ..weights import gguf_checkpoint
from ..weights.checkpoint import inspect_checkpoint
from ..weights.formats import WEIGHT_DTYPES
from ._common import Fail, file_error, fmt_int, fmt_size, positive, table

__all__ = ["add_parser", "run"]

_PRESET_NAMES = sorted(PRESETS) + sorted(LLAMA_PRESETS)


def add_parser(sub) -> argparse.ArgumentParser:
    info = sub.add_parser("info", help="parameters, FLOPs and memory of a preset model")
    info.add_argument("model", type=_model_arg, metavar="MODEL",
                      help="a preset (any case: " + ", ".join(_PRESET_NAMES) + "), a model folder, a .safetensors "
                           "file or a .gguf file")
    info.add_argument("--T", type=positive, default=None, help="context length for FLOPs and logits (default: n_ctx)")
    info.add_argument("--batch", type=positive, default=1, help="batch size for the logits memory (default 1)")
    info.add_argument("--bytes", type=positive, default=4, help="bytes per logit (default 4, float32)")
    info.add_argument("--lesson-counting", action="store_true",
                      help="count as Lesson 14 does: FFN biases and LayerNorm affines, no attention biases")
    info.add_argument("--no-blocks", action="store_true", help="leave the blocks out (placeholder skeleton, LM4-T1)")
    info.add_argument("--storage", action="store_true",
                      help="load the model and list each weight tensor as it holds it (always done for a .gguf file)")
    info.add_argument("--weight-dtype", choices=list(WEIGHT_DTYPES), default=None,
                      help="with the list of weights held: load the model with its weights in this format")
    info.set_defaults(func=run)
    return info


def run(args: argparse.Namespace) -> int:
    cfg, header = _info_config(args.model)
    if args.lesson_counting:
        cfg = lesson14_counting(cfg)
    T = cfg.n_ctx if args.T is None else args.T
    counts = param_count(cfg, include_blocks=not args.no_blocks)
    flops = flops_per_token(cfg, T)
    mem = logits_memory(args.batch, T, cfg.vocab_size, bytes=args.bytes)
    budget = chinchilla(counts.total)
    head = "0 (tied)" if cfg.tied else fmt_int(counts.lm_head)
    pos = fmt_int(counts.position_embedding) + ("" if cfg.pos == "learned" else f" ({cfg.pos})")
    norm = "final RMSNorm" if cfg.family == "llama" else "final LayerNorm"
    sections = [
        ("Parameters", [
            ("token embedding", fmt_int(counts.token_embedding)),
            ("position embedding", pos),
            ("per block", fmt_int(counts.per_block)),
            (f"blocks (x {counts.n_blocks})", fmt_int(counts.blocks)),
            (norm, fmt_int(counts.final_ln)),
            ("LM head", head),
            ("total", fmt_int(counts.total)),
            ("blocks share", f"{counts.share('blocks') * 100:.2f} %"),
            ("float32 size", fmt_size(counts.nbytes(4))),
        ]),
        (f"Compute per token (T = {T:,})", [
            ("forward (2 x weights)", fmt_int(flops.forward)),
            ("training (3 x forward)", fmt_int(flops.training)),
            ("attention scores (4 T d N)", fmt_int(flops.attention)),
            ("attention share of forward", f"{flops.attention_percent:.2f} %"),
            ("crossover T* = d_ff", fmt_int(flops.crossover_T)),
        ]),
        (f"Logits (B = {args.batch}, n = {T:,}, V = {cfg.vocab_size:,}, {args.bytes} bytes each)", [
            ("entries", fmt_int(mem.entries)),
            ("memory", fmt_size(mem.nbytes)),
        ]),
        ("Chinchilla budget", [
            ("tokens D = 20 P", fmt_int(budget.tokens)),
            ("compute C = 6 P D", f"{budget.compute:.2e} FLOPs"),
        ]),
    ]
    out = [f"{args.model}: {_describe(cfg)}"] + header + [""] + table(sections)
    preset = args.model.lower() in _PRESET_NAMES and not Path(args.model).exists()
    if preset and (args.weight_dtype or args.storage):
        raise Fail("--storage and --weight-dtype need a model's weights (a folder or file), not a preset", 2)
    if not preset and (args.storage or args.weight_dtype or gguf_checkpoint.is_gguf(Path(args.model))):
        out += [""] + _storage(args.model, args.weight_dtype, counts.nbytes(4))
    print("\n".join(out))
    return 0


def _storage(model: str, weight_dtype: "str | None", float32_bytes: int) -> List[str]:
    """Each large tensor as ``gptcore.load`` holds it (format, bytes), and the totals."""
    try:
        m = load(model, weight_dtype=weight_dtype, allow_nonfinite=True)
    except FileNotFoundError as e:
        raise Fail(file_error(e)) from None
    except (ValueError, TypeError) as e:
        raise Fail(str(e)) from None
    rows = m.weight_storage()
    title = f"Weights held ({m.weight_dtype or m.dtype.name}{'' if weight_dtype else ', as loaded'})"
    width = max(len(n) for n, _, _ in rows)
    lines = [title]
    totals: dict = {}
    for name, fmt, nbytes in rows:
        lines.append(f"  {name:<{width}}  {fmt:<8} {nbytes:>14,} bytes")
        c, b = totals.get(fmt, (0, 0))
        totals[fmt] = (c + 1, b + nbytes)
    for fmt, (c, b) in sorted(totals.items()):
        lines.append(f"  {fmt}: {c} tensors, {b:,} bytes")
    lines.append(f"  all weights held (biases and norms included): {m.nbytes:,} bytes, "
                 f"{m.nbytes / float32_bytes:.3f} x the parameters in float32")
    return lines


def _model_arg(text: str) -> str:
    """``info``'s MODEL: a preset name in any case, or an existing folder or file."""
    if text.lower() in _PRESET_NAMES or Path(text).exists():
        return text
    try:  # a Hugging Face Hub name already in the cache (info downloads nothing)
        folder, repo = resolve_hub(text, fn="info", download=False)
    except (FileNotFoundError, ImportError):
        repo = None
    if repo is not None:
        return str(folder)
    raise argparse.ArgumentTypeError(
        f"invalid choice: {text!r} is neither a preset ({', '.join(_PRESET_NAMES)}), an existing model folder, "
        ".safetensors file or .gguf file, nor a model in the Hugging Face cache")


def _describe(cfg: GPTConfig) -> str:
    if cfg.family == "llama":
        return _describe_llama(cfg)
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


def _describe_llama(cfg: GPTConfig) -> str:
    rope = f"rotary positions (theta {cfg.rope_theta:g}"
    rope += f", {cfg.rope_scaling.rope_type} x{cfg.rope_scaling.factor:g})" if cfg.rope_scaling else ")"
    biases = [name for name, on in (("q/k/v", cfg.attn_bias), ("output", cfg.attn_out_bias), ("MLP", cfg.bias)) if on]
    parts = [
        "Llama family",
        f"vocab {cfg.vocab_size:,}",
        f"context {cfg.n_ctx:,}",
        f"d_model {cfg.d_model}",
        f"heads {cfg.n_heads} (key/value heads {cfg.n_kv_heads}, width {cfg.head_dim})",
        f"layers {cfg.n_layers}",
        f"SwiGLU d_ff {cfg.d_ff}",
        rope,
        "tied head" if cfg.tied else "separate head",
        ("biases: " + ", ".join(biases)) if biases else "no biases",
        f"RMSNorm eps {cfg.ln_eps:g}",
    ]
    return ", ".join(parts)


def _info_config(model: str) -> Tuple[GPTConfig, List[str]]:
    """The configuration ``info`` describes, and lines that say where it came from."""
    if model.lower() in _PRESET_NAMES:
        return GPTConfig.preset(model.lower()), []
    p = Path(model)
    if gguf_checkpoint.is_gguf(p):
        return _gguf_config(p)
    try:
        found = inspect_checkpoint(p, fn="info")  # headers only: described, not run
    except FileNotFoundError as e:
        raise Fail(file_error(e)) from None
    except (ValueError, TypeError) as e:
        raise Fail(str(e)) from None
    cfg = found.config
    lines = []
    if found.source == "the configuration inferred from the shapes":
        lines.append(f"  (no stored configuration: sizes inferred from the tensors, {cfg.n_heads} heads of 64 assumed)")
    stored = sorted(set(found.dtypes.values()))
    lines.append(f"  stored as {', '.join(stored)}" + (
        f": gptcore.load keeps the {found.stored_format} weights (float32 arithmetic)" if found.stored_format else ""))
    if p.is_dir():
        try:
            tok = Tokenizer.from_folder(p)
            lines.append(f"  tokenizer: {tok.vocab_size:,} ids")
        except (FileNotFoundError, ValueError) as e:
            lines.append(f"  tokenizer: none ({str(e).split(': ', 1)[-1]})")
    return cfg, lines


def _gguf_config(p: Path) -> Tuple[GPTConfig, List[str]]:
    """A GGUF file's configuration and its description (metadata, tensors). A file that is no
    gpt2 model still has its description printed before the error."""
    from ..gguf import GGUFReader

    try:
        first, *rest = gguf_checkpoint.describe(p).splitlines()
        lines = ["  " + first.split(": ", 1)[-1]] + rest
        with GGUFReader(p) as reader:
            cfg = gguf_checkpoint.config_from_metadata(reader)
    except FileNotFoundError as e:
        raise Fail(file_error(e)) from None
    except ValueError as e:
        if "lines" in locals():
            print("\n".join([f"{p}:"] + lines))
        raise Fail(str(e)) from None
    return cfg, lines
