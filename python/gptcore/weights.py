"""Weights: the schema, checking, initialisation, and safetensors files.

A model's weights are a plain mapping ``name -> numpy array``. The names are Hugging Face
GPT-2's, without the ``"transformer."`` prefix; this table is the one definition of them.
``d = d_model``, ``f = d_ff``, ``V = vocab_size``, ``i = 0 .. n_layers - 1``:

=================================  ===========  =================================================
name                               shape        present when / meaning
=================================  ===========  =================================================
``wte.weight``                     (V, d)       always: token embedding, row ``v`` is token ``v``
``wpe.weight``                     (n_ctx, d)   ``pos == "learned"``: row ``t`` is position ``t``
``h.{i}.ln_1.weight`` / ``.bias``  (d,)         ``ln_affine``: LayerNorm before attention
``h.{i}.attn.c_attn.weight``       (d, 3d)      always: columns ``[Q | K | V]``; head ``h`` uses
                                                columns ``h*d_head .. (h+1)*d_head - 1`` of each
``h.{i}.attn.c_attn.bias``         (3d,)        ``attn_bias``
``h.{i}.attn.c_proj.weight``       (d, d)       always: attention output projection
``h.{i}.attn.c_proj.bias``         (d,)         ``attn_bias``
``h.{i}.ln_2.weight`` / ``.bias``  (d,)         ``ln_affine``: LayerNorm before the MLP
``h.{i}.mlp.c_fc.weight``          (d, f)       always: MLP up-projection (then GELU, tanh form)
``h.{i}.mlp.c_fc.bias``            (f,)         ``bias``
``h.{i}.mlp.c_proj.weight``        (f, d)       always: MLP down-projection
``h.{i}.mlp.c_proj.bias``          (d,)         ``bias``
``ln_f.weight`` / ``ln_f.bias``    (d,)         ``ln_affine``: final LayerNorm
``lm_head.weight``                 (V, d)       ``not tied``: logits are ``h @ lm_head.weight.T``;
                                                when tied, ``wte.weight`` plays this role
=================================  ===========  =================================================

Orientation: every projection is applied as ``x @ W + b`` with ``W`` of shape
``(in, out)`` -- the layout of GPT-2's ``Conv1D`` and of its checkpoints, so Hugging Face
tensors are used without transposing. Only the embedding tables and the LM head are stored
``(rows, d)``.

Accepted dtypes: float32 and float64 are used as given (never copied by :func:`validate`);
float16 and bfloat16 (an ``ml_dtypes`` array, or a ``BF16`` tensor in a safetensors file) are
converted exactly to float32. Integer, boolean, complex and other types raise ``TypeError``.
NaN and infinite values are allowed; they propagate through the forward pass.

Real GPT-2 checkpoints also carry non-parameter buffers: ``h.{i}.attn.bias`` (the causal mask,
shape ``(1, 1, n, n)``; not to be confused with the parameter ``h.{i}.attn.c_attn.bias``) and
``h.{i}.attn.masked_bias``. :func:`normalize_names` drops them, strips the prefix, and drops a
``lm_head.weight`` equal to ``wte.weight`` (a tied head stored twice).
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from .config import GPTConfig

__all__ = [
    "INIT_SCHEMES",
    "expected_shapes",
    "infer_config",
    "init_weights",
    "load_safetensors",
    "normalize_names",
    "save_safetensors",
    "validate",
]

Weights = Dict[str, np.ndarray]
PathLike = Union[str, "os.PathLike[str]"]

#: The schemes :func:`init_weights` knows.
INIT_SCHEMES = ("gpt2", "lesson", "xavier", "kaiming")

_PREFIX = "transformer."
_MASK_BUFFER = re.compile(r"^h\.([0-9]+)\.attn\.bias$")
_MASKED_BIAS = re.compile(r"^h\.([0-9]+)\.attn\.masked_bias$")
_BLOCK_NAME = re.compile(r"^h\.([0-9]+)\.(.+)$")
# Longer block numbers are not converted (Python refuses int() of over 4300 digits); such a
# name is far beyond any model and is reported as unexpected.
_MAX_INDEX_DIGITS = 1000
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
_CONFIG_METADATA_KEY = "gptcore_config"
# safetensors dtypes read through numpy; F8_*, C64 and others are refused by name (integer and
# bool tensors are read, then refused by the dtype check with numpy's name for the type).
_NUMPY_DTYPES = frozenset({"F16", "F32", "F64", "I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64", "BOOL"})
# validate() gives a summary instead of listing names when the configuration asks for this many
# more tensors than there are (every block has at least four).
_LAYER_SLACK = 4096


# --------------------------------------------------------------------------------------------
# names and shapes
# --------------------------------------------------------------------------------------------

def _check_config(fn: str, config: Any) -> GPTConfig:
    if not isinstance(config, GPTConfig):
        raise TypeError(f"{fn}: config must be a GPTConfig, got {type(config).__name__}")
    return config


def _tensor_kinds(config: GPTConfig) -> List[Tuple[str, Tuple[int, ...], str]]:
    """Every tensor of ``config`` in canonical order, as ``(name, shape, kind)``."""
    d, f, V = config.d_model, config.d_ff, config.vocab_size
    out: List[Tuple[str, Tuple[int, ...], str]] = [("wte.weight", (V, d), "wte")]
    if config.pos == "learned":
        out.append(("wpe.weight", (config.n_ctx, d), "wpe"))
    for i in range(config.n_layers):
        p = f"h.{i}."
        if config.ln_affine:
            out += [(p + "ln_1.weight", (d,), "ln_weight"), (p + "ln_1.bias", (d,), "ln_bias")]
        out.append((p + "attn.c_attn.weight", (d, 3 * d), "c_attn"))
        if config.attn_bias:
            out.append((p + "attn.c_attn.bias", (3 * d,), "bias"))
        out.append((p + "attn.c_proj.weight", (d, d), "attn_proj"))
        if config.attn_bias:
            out.append((p + "attn.c_proj.bias", (d,), "bias"))
        if config.ln_affine:
            out += [(p + "ln_2.weight", (d,), "ln_weight"), (p + "ln_2.bias", (d,), "ln_bias")]
        out.append((p + "mlp.c_fc.weight", (d, f), "c_fc"))
        if config.bias:
            out.append((p + "mlp.c_fc.bias", (f,), "bias"))
        out.append((p + "mlp.c_proj.weight", (f, d), "mlp_proj"))
        if config.bias:
            out.append((p + "mlp.c_proj.bias", (d,), "bias"))
    if config.ln_affine:
        out += [("ln_f.weight", (d,), "ln_weight"), ("ln_f.bias", (d,), "ln_bias")]
    if not config.tied:
        out.append(("lm_head.weight", (V, d), "lm_head"))
    return out


def expected_shapes(config: GPTConfig) -> Dict[str, Tuple[int, ...]]:
    """The name and shape of every tensor a model with ``config`` needs, in canonical order
    (embeddings, blocks in order, final LayerNorm, head).

    >>> from gptcore.config import GPTConfig
    >>> shapes = expected_shapes(GPTConfig.preset("gpt2"))
    >>> len(shapes), shapes["h.0.attn.c_attn.weight"]
    (148, (768, 2304))
    """
    _check_config("expected_shapes", config)
    return {name: shape for name, shape, _ in _tensor_kinds(config)}


def _same_array(a: np.ndarray, b: np.ndarray) -> bool:
    if a is b:
        return True
    if a.shape != b.shape:
        return False
    try:
        return bool(np.array_equal(a, b, equal_nan=True))
    except TypeError:  # equal_nan on a non-float dtype
        return bool(np.array_equal(a, b))


def _normalize(weights: Any, fn: str, drop_tied_head: bool) -> Weights:
    if not isinstance(weights, Mapping):
        raise TypeError(f"{fn}: weights must be a mapping of name -> numpy array, got {type(weights).__name__}")
    out: Weights = {}
    origin: Dict[str, str] = {}
    for key, value in weights.items():
        if not isinstance(key, str):
            raise TypeError(f"{fn}: weight names must be str, got {key!r} ({type(key).__name__})")
        if not isinstance(value, np.ndarray):
            raise TypeError(
                f"{fn}: weight {key!r} must be a numpy.ndarray, got {type(value).__name__} "
                "(convert it with numpy.asarray)"
            )
        name = key[len(_PREFIX):] if key.startswith(_PREFIX) else key
        if _MASKED_BIAS.match(name):
            continue
        if _MASK_BUFFER.match(name) and value.ndim == 4 and value.shape[:2] == (1, 1) \
                and value.shape[2] == value.shape[3]:
            continue
        if name in out:
            raise ValueError(f"{fn}: weights {origin[name]!r} and {key!r} both name the tensor {name!r}")
        out[name] = value
        origin[name] = key
    if drop_tied_head and "lm_head.weight" in out and "wte.weight" in out \
            and _same_array(out["lm_head.weight"], out["wte.weight"]):
        del out["lm_head.weight"]
    return out


def normalize_names(weights: Mapping[str, np.ndarray]) -> Weights:
    """A new dict with the schema's names: the ``"transformer."`` prefix stripped, the causal-mask
    buffers (``h.{i}.attn.bias`` of shape ``(1, 1, n, n)``, ``h.{i}.attn.masked_bias``)
    dropped, and ``lm_head.weight`` dropped when it equals ``wte.weight``. The arrays are not
    copied; the input is not modified.

    Raises ``TypeError`` if ``weights`` is not a mapping or a value is not a numpy array
    (the message names the key), ``ValueError`` if two keys name the same tensor.
    """
    return _normalize(weights, "normalize_names", drop_tied_head=True)


# --------------------------------------------------------------------------------------------
# dtypes, validation, inference
# --------------------------------------------------------------------------------------------

def _as_accepted_float(fn: str, name: str, a: np.ndarray) -> np.ndarray:
    dt = a.dtype
    if dt == np.float32 or dt == np.float64:
        return a
    if dt == np.float16 or dt.name == "bfloat16":
        return a.astype(np.float32)
    raise TypeError(
        f"{fn}: weight {name!r} has dtype {dt}; expected float32 or float64 "
        "(float16 and bfloat16 are converted to float32)"
    )


def _block_index(name: str) -> Optional[int]:
    """The block number of ``h.{i}.…`` (``-1`` for a number too long to convert), else None."""
    m = _BLOCK_NAME.match(name)
    if not m:
        return None
    digits = m.group(1)
    return -1 if len(digits) > _MAX_INDEX_DIGITS else int(digits)


def _hint(name: str, config: GPTConfig) -> str:
    i = _block_index(name)
    if i is not None and (i < 0 or i >= config.n_layers):
        return f" (config.n_layers={config.n_layers})"
    if name == "wpe.weight":
        return f" (config.pos={config.pos!r})"
    if name == "lm_head.weight":
        return " (config.tied=True, but lm_head.weight is not equal to wte.weight)"
    if name.endswith(("ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias", "ln_f.weight", "ln_f.bias")):
        return " (config.ln_affine=False)"
    if name.endswith(("attn.c_attn.bias", "attn.c_proj.bias")):
        return " (config.attn_bias=False)"
    if name.endswith(("mlp.c_fc.bias", "mlp.c_proj.bias")):
        return " (config.bias=False)"
    return ""


def validate(weights: Mapping[str, np.ndarray], config: GPTConfig) -> Weights:
    """Check ``weights`` against ``config`` and return them normalized (see
    :func:`normalize_names`; float16/bfloat16 converted to float32, other arrays not copied).

    Raises ``ValueError`` listing every missing, unexpected or misshaped tensor with its
    expected and actual shape, and ``TypeError`` for a non-float dtype.
    """
    _check_config("validate", config)
    w = _normalize(weights, "validate", drop_tied_head=config.tied)
    if 4 * config.n_layers > len(w) + _LAYER_SLACK:
        # listing the missing names would take as long as the configuration is absurd
        raise ValueError(
            f"validate: the weights do not match the config: config.n_layers={config.n_layers} but "
            f"the weights hold {len(w)} tensors (each block has at least 4)"
        )
    expected = expected_shapes(config)
    problems: List[str] = []
    for name, shape in expected.items():
        if name not in w:
            extra = " (config.tied=False needs an LM head)" if name == "lm_head.weight" else ""
            problems.append(f"missing tensor {name!r} (expected shape {shape}){extra}")
        elif tuple(w[name].shape) != shape:
            problems.append(f"tensor {name!r} has shape {tuple(w[name].shape)}, expected {shape}")
    for name, a in w.items():
        if name not in expected:
            problems.append(f"unexpected tensor {name!r} with shape {tuple(a.shape)}{_hint(name, config)}")
    if problems:
        shown = problems[:12]
        more = f"; and {len(problems) - len(shown)} more" if len(problems) > len(shown) else ""
        raise ValueError(
            f"validate: the weights do not match the config ({len(problems)} problem"
            f"{'s' if len(problems) != 1 else ''}): " + "; ".join(shown) + more
        )
    return {name: _as_accepted_float("validate", name, w[name]) for name in expected}


def _layer_indices(names) -> List[int]:
    found = set()
    for name in names:
        i = _block_index(name)
        if i is not None and i >= 0:
            found.add(i)
    return sorted(found)


def _missing_indices(present: List[int], first: int = 10) -> Tuple[List[int], int]:
    """The first ``first`` numbers in ``0 .. max(present)`` absent from the sorted ``present``,
    and how many are absent in all (from the gaps; the full range is never built)."""
    shown: List[int] = []
    total = 0
    prev = -1
    for i in present:
        gap = i - prev - 1
        if gap > 0:
            total += gap
            if len(shown) < first:
                shown.extend(range(prev + 1, min(i, prev + 1 + first - len(shown))))
        prev = i
    return shown, total


def infer_config(
    weights: Mapping[str, np.ndarray],
    *,
    n_heads: Optional[int] = None,
    n_ctx: int = 1024,
    ln_eps: float = 1e-5,
) -> GPTConfig:
    """The :class:`GPTConfig` that the tensor shapes imply.

    Shapes give the vocabulary, widths, depth, the MLP width, whether positions are learned
    (``wpe.weight`` present; otherwise sinusoidal with context ``n_ctx``), whether the head is
    tied (no ``lm_head.weight``, or one equal to ``wte.weight``) and which biases and LayerNorm
    affines exist. They cannot give the number of heads: pass ``n_heads``; the default is
    ``d_model // 64`` (GPT-2's head width) when 64 divides ``d_model``. The result is checked
    with :func:`validate`.
    """
    w = _normalize(weights, "infer_config", drop_tied_head=True)
    if "wte.weight" not in w:
        raise ValueError("infer_config: the weights have no 'wte.weight' (token embedding), so the sizes are unknown")
    wte = w["wte.weight"]
    if wte.ndim != 2:
        raise ValueError(f"infer_config: 'wte.weight' must be 2-D (vocab_size, d_model), got shape {wte.shape}")
    vocab_size, d_model = (int(s) for s in wte.shape)
    layers = _layer_indices(w)
    if layers and layers[-1] != len(layers) - 1:
        missing, count = _missing_indices(layers)
        more = f" and {count - len(missing)} more (the highest block is {layers[-1]})" if count > len(missing) else ""
        raise ValueError(f"infer_config: blocks must be numbered 0..N-1; no tensors for block(s) {missing}{more}")
    n_layers = len(layers)
    if n_heads is None:
        if d_model % 64 != 0:
            raise ValueError(
                f"infer_config: cannot infer the number of heads for d_model={d_model} (not a multiple "
                "of 64); pass n_heads=..., or give a GPTConfig"
            )
        n_heads = d_model // 64
    d_ff = None
    if n_layers:
        fc = w.get("h.0.mlp.c_fc.weight")
        if fc is None:
            raise ValueError("infer_config: missing tensor 'h.0.mlp.c_fc.weight' (needed for d_ff)")
        if fc.ndim != 2:
            raise ValueError(f"infer_config: 'h.0.mlp.c_fc.weight' must be 2-D (d_model, d_ff), got shape {fc.shape}")
        d_ff = int(fc.shape[1])
    if "wpe.weight" in w:
        pos = "learned"
        wpe = w["wpe.weight"]
        if wpe.ndim != 2:
            raise ValueError(f"infer_config: 'wpe.weight' must be 2-D (n_ctx, d_model), got shape {wpe.shape}")
        n_ctx = int(wpe.shape[0])
    else:
        pos = "sinusoidal"
    bias = "h.0.mlp.c_fc.bias" in w if n_layers else True
    attn_bias = "h.0.attn.c_attn.bias" in w if n_layers else bias
    ln_affine = "ln_f.weight" in w or "ln_f.bias" in w
    config = GPTConfig(
        vocab_size=vocab_size, n_ctx=n_ctx, d_model=d_model, n_heads=n_heads, n_layers=n_layers,
        d_ff=d_ff, pos=pos, tied="lm_head.weight" not in w, bias=bias, attn_bias=attn_bias,
        ln_affine=ln_affine, ln_eps=ln_eps,
    )
    validate(w, config)
    return config


# --------------------------------------------------------------------------------------------
# initialisation
# --------------------------------------------------------------------------------------------

def _init_std(kind: str, scheme: str, config: GPTConfig) -> float:
    d, f, V, N = config.d_model, config.d_ff, config.vocab_size, config.n_layers
    # (fan_in, fan_out) of each random tensor. c_attn counts as three d x d maps (Q, K, V);
    # embedding tables and the head use fan_in = d, fan_out = rows (as torch.nn.init does
    # for an embedding weight, and as the head maps d -> V).
    fans = {
        "wte": (d, V), "lm_head": (d, V), "wpe": (d, config.n_ctx),
        "c_attn": (d, d), "attn_proj": (d, d), "c_fc": (d, f), "mlp_proj": (f, d),
    }
    if scheme == "gpt2":
        if kind in ("attn_proj", "mlp_proj"):
            return 0.02 / math.sqrt(2 * N)
        return 0.02
    if scheme == "lesson":
        return {
            "wte": 0.1, "wpe": 0.1, "c_attn": 1 / math.sqrt(d), "attn_proj": 1 / math.sqrt(d),
            "c_fc": math.sqrt(2 / d), "mlp_proj": math.sqrt(2 / f), "lm_head": 1 / math.sqrt(d),
        }[kind]
    fan_in, fan_out = fans[kind]
    if scheme == "xavier":
        return math.sqrt(2 / (fan_in + fan_out))
    return math.sqrt(2 / fan_in)  # kaiming


def init_weights(
    config: GPTConfig,
    seed: int = 0,
    scheme: str = "gpt2",
    dtype: Any = "float64",
) -> Weights:
    """Fresh random weights for ``config``: exactly the tensors of :func:`expected_shapes`.

    Biases are 0, LayerNorm weights 1 and biases 0 in every scheme. Random tensors are
    ``numpy.random.default_rng(seed).standard_normal(shape) * std``, drawn in canonical order
    in float64 (so a seed gives the same values in either ``dtype``, up to rounding), with
    ``std`` by scheme (``N = n_layers``; ``(in, out)`` = the matrix's fan-in and fan-out):

    - ``"gpt2"`` (GPT-2 / nanoGPT): 0.02 for the embeddings (``wte`` and ``wpe``, as nanoGPT
      and Hugging Face do, not the 0.01 of the original TensorFlow ``wpe``), ``c_attn``,
      ``c_fc`` and an untied head; ``0.02 / sqrt(2N)`` for the residual projections
      ``attn.c_proj.weight`` and ``mlp.c_proj.weight``.
    - ``"lesson"`` (lesson 14's fan-in scales): embeddings 0.1; ``c_attn`` and
      ``attn.c_proj`` ``1/sqrt(d)``; ``c_fc`` ``sqrt(2/d)``; ``mlp.c_proj`` ``sqrt(2/d_ff)``;
      head ``1/sqrt(d)``.
    - ``"xavier"``: ``sqrt(2 / (in + out))``; ``"kaiming"``: ``sqrt(2 / in)``. ``c_attn`` counts
      as three ``(d, d)`` maps; ``wte``, ``lm_head`` have ``in = d, out = V``; ``wpe`` has
      ``in = d, out = n_ctx``. Neither rescales the residual projections (the model's
      ``branch_scale`` does that).
    """
    _check_config("init_weights", config)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise TypeError(f"init_weights: seed must be a non-negative int, got {seed!r}")
    if scheme not in INIT_SCHEMES:
        raise ValueError(f"init_weights: scheme must be one of {', '.join(map(repr, INIT_SCHEMES))}, got {scheme!r}")
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"init_weights: dtype must be 'float32' or 'float64', got {dtype!r}")
    rng = np.random.default_rng(int(seed))
    out: Weights = {}
    for name, shape, kind in _tensor_kinds(config):
        if kind == "bias" or kind == "ln_bias":
            a = np.zeros(shape, dtype=dt)
        elif kind == "ln_weight":
            a = np.ones(shape, dtype=dt)
        else:
            a = rng.standard_normal(shape)
            a *= _init_std(kind, scheme, config)
            a = a.astype(dt, copy=False)
        out[name] = a
    return out


# --------------------------------------------------------------------------------------------
# safetensors
# --------------------------------------------------------------------------------------------

def _pickle_error(path: Path) -> ValueError:
    return ValueError(
        f"load_safetensors: {str(path)!r} is a pickle checkpoint (PyTorch .bin/.pt/.pth); gptcore "
        "reads only safetensors, which cannot run code when loaded. Convert it once with PyTorch: "
        "`import torch; from safetensors.torch import save_file; "
        "sd = torch.load(path, map_location='cpu', weights_only=True); "
        "save_file({k: v.contiguous() for k, v in sd.items()}, 'model.safetensors')`, or with "
        "transformers: `GPT2LMHeadModel.from_pretrained(folder).save_pretrained(out, "
        "safe_serialization=True)`"
    )


def _not_found(what: str, path: Path) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, f"load_safetensors: {what}", str(path))


def _read_bf16(path: Path, names: List[str]) -> Weights:
    """Read BF16 tensors (numpy has no bfloat16) straight from the file, as float32."""
    with open(path, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(n))
    out: Weights = {}
    for name in names:
        info = header[name]
        start, end = info["data_offsets"]
        shape = tuple(info["shape"])
        count = (end - start) // 2
        if count == 0:
            out[name] = np.zeros(shape, dtype=np.float32)
            continue
        raw = np.memmap(path, dtype="<u2", mode="r", offset=8 + n + start, shape=(count,))
        out[name] = (raw.astype(np.uint32) << 16).view(np.float32).reshape(shape)
    return out


def _unreadable(path: Path, e: OSError) -> ValueError:
    return ValueError(f"load_safetensors: {str(path)!r} cannot be read: {e.strerror or e}")


def _read_file(path: Path) -> Tuple[Weights, Dict[str, str]]:
    from safetensors import SafetensorError, safe_open

    def unsupported(key: str, dt: str, why: str = "") -> TypeError:
        return TypeError(
            f"load_safetensors: tensor {key!r} in {str(path)!r} has dtype {dt}, which numpy cannot "
            f"hold; expected F32, F64, F16 or BF16{why}"
        )

    out: Weights = {}
    bf16: List[str] = []
    try:
        with safe_open(str(path), framework="numpy") as f:
            metadata = dict(f.metadata() or {})
            for key in f.keys():
                dt = f.get_slice(key).get_dtype()
                if dt == "BF16":
                    bf16.append(key)
                    continue
                if dt not in _NUMPY_DTYPES:
                    # e.g. F8_E4M3 / F8_E5M2: safetensors' numpy reader fails on them with
                    # AttributeError, so they never reach get_tensor
                    raise unsupported(key, dt)
                try:
                    out[key] = f.get_tensor(key)
                except (TypeError, ValueError, AttributeError, SafetensorError) as e:
                    raise unsupported(key, dt, f" ({e})") from None
        if bf16:
            out.update(_read_bf16(path, bf16))
    except SafetensorError as e:
        raise ValueError(f"load_safetensors: {str(path)!r} is not a readable safetensors file: {e}") from None
    except FileNotFoundError:
        raise _not_found("the file disappeared while being read", path) from None
    except OSError as e:  # a device, a folder, no permission, an I/O error
        raise _unreadable(path, e) from None
    return out, metadata


def _read_json(path: Path, what: str) -> Any:
    """The parsed contents of the JSON file ``path``; ``ValueError`` naming it otherwise."""
    try:
        with open(path, "r", encoding="utf-8") as fh:
            return json.load(fh)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise ValueError(f"load_safetensors: {str(path)!r} is not valid JSON ({what}): {e}") from None
    except FileNotFoundError:
        raise _not_found(f"{what} disappeared while being read", path) from None
    except OSError as e:
        raise _unreadable(path, e) from None


def _shard_files(folder: Path, index: Path) -> List[Path]:
    """The shard files that ``model.safetensors.index.json`` names, checked: plain file names
    in ``folder`` (no paths, so that an index cannot point elsewhere), each present."""
    content = _read_json(index, "the shard index")
    if not isinstance(content, dict):
        raise ValueError(
            f"load_safetensors: {str(index)!r} must hold a JSON object with a 'weight_map', "
            f"got a {type(content).__name__}"
        )
    weight_map = content.get("weight_map", {})
    if not isinstance(weight_map, dict):
        raise ValueError(
            f"load_safetensors: the 'weight_map' in {str(index)!r} must be an object of tensor name -> "
            f"shard file name, got a {type(weight_map).__name__}"
        )
    names = set()
    for key, name in weight_map.items():
        if not isinstance(name, str):
            raise ValueError(
                f"load_safetensors: the 'weight_map' in {str(index)!r} gives {name!r} as the shard of "
                f"{key!r}; expected a file name (str)"
            )
        names.add(name)
    files = []
    for name in sorted(names):
        if name in ("", ".", "..") or "\0" in name or "\\" in name or Path(name).name != name:
            raise ValueError(
                f"load_safetensors: {str(index)!r} names the shard {name!r}; a shard must be a plain "
                "file name in the checkpoint's folder"
            )
        f = folder / name
        if not f.is_file():
            raise _not_found(f"shard named by {index.name} is missing", f)
        files.append(f)
    return files


def _config_from_hf(cfg: Any, where: Path) -> GPTConfig:
    if not isinstance(cfg, dict):
        raise ValueError(
            f"load_safetensors: {str(where)!r} must hold a JSON object of GPT-2 settings, got a "
            f"{type(cfg).__name__}"
        )

    def get(*keys: str, default: Any = KeyError) -> Any:
        for k in keys:
            if k in cfg and cfg[k] is not None:
                return cfg[k]
        if default is KeyError:
            raise ValueError(f"load_safetensors: {str(where)!r} has no {keys[0]!r}")
        return default

    model_type = cfg.get("model_type", "gpt2")
    if model_type != "gpt2":
        raise ValueError(f"load_safetensors: {str(where)!r} describes model_type {model_type!r}; only 'gpt2' is supported")
    act = cfg.get("activation_function", "gelu_new")
    if act not in ("gelu_new", "gelu_pytorch_tanh"):
        raise ValueError(
            f"load_safetensors: {str(where)!r} asks for activation_function {act!r}; gptcore computes "
            "GPT-2's tanh GELU ('gelu_new')"
        )
    if cfg.get("scale_attn_weights", True) is not True or cfg.get("scale_attn_by_inverse_layer_idx", False):
        raise ValueError(
            f"load_safetensors: {str(where)!r} changes the attention scaling (scale_attn_weights / "
            "scale_attn_by_inverse_layer_idx); gptcore scales scores by 1/sqrt(d_head) only"
        )
    extra = cfg.get("gptcore")
    if extra is None:
        extra = {}
    if not isinstance(extra, dict):
        raise ValueError(
            f"load_safetensors: the 'gptcore' entry of {str(where)!r} must be an object, got a "
            f"{type(extra).__name__}"
        )
    tied = get("tie_word_embeddings", default=True)
    if not isinstance(tied, bool):
        raise ValueError(
            f"load_safetensors: 'tie_word_embeddings' in {str(where)!r} must be true or false, got {tied!r}"
        )
    d_model = get("n_embd", "hidden_size")
    try:
        return GPTConfig(
            vocab_size=get("vocab_size"),
            n_ctx=get("n_positions", "n_ctx", "max_position_embeddings"),
            d_model=d_model,
            n_heads=get("n_head", "num_attention_heads"),
            n_layers=get("n_layer", "num_hidden_layers"),
            d_ff=get("n_inner", default=None),
            pos=extra.get("pos", "learned"),
            tied=tied,
            bias=extra.get("bias", True),
            attn_bias=extra.get("attn_bias", None),
            ln_affine=extra.get("ln_affine", True),
            ln_eps=float(get("layer_norm_epsilon", default=1e-5)),
        )
    except (TypeError, ValueError, OverflowError) as e:
        raise ValueError(f"load_safetensors: {str(where)!r} does not give a valid configuration: {e}") from None


def _hf_config(config: GPTConfig, dtype_name: str) -> Dict[str, Any]:
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "activation_function": "gelu_new",
        "vocab_size": config.vocab_size,
        "n_positions": config.n_ctx,
        "n_embd": config.d_model,
        "n_head": config.n_heads,
        "n_layer": config.n_layers,
        "n_inner": None if config.d_ff == 4 * config.d_model else config.d_ff,
        "layer_norm_epsilon": config.ln_eps,
        "tie_word_embeddings": config.tied,
        "attn_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "resid_pdrop": 0.0,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "use_cache": True,
        "torch_dtype": dtype_name,
        # What GPT-2's format cannot say; transformers ignores unknown keys.
        "gptcore": {
            "pos": config.pos,
            "bias": config.bias,
            "attn_bias": config.attn_bias,
            "ln_affine": config.ln_affine,
            "d_ff": config.d_ff,
        },
    }


def _check_dtypes(fn: str, weights: Weights) -> Weights:
    return {k: _as_accepted_float(fn, k, v) for k, v in weights.items()}


def load_safetensors(
    path: PathLike, *, n_heads: Optional[int] = None
) -> Tuple[Weights, Optional[GPTConfig]]:
    """Read weights from a Hugging Face GPT-2 folder or a ``.safetensors`` file.

    A folder holds ``model.safetensors`` (or the shards named by
    ``model.safetensors.index.json``) and usually ``config.json``, from which the
    :class:`GPTConfig` is read (``n_layer``, ``n_embd``, ``n_head``, ``n_positions``,
    ``vocab_size``, ``n_inner``, ``layer_norm_epsilon``, ``tie_word_embeddings``). A file
    written by :func:`save_safetensors` carries its configuration in the metadata. Without
    either, the configuration is inferred from the shapes when ``n_heads`` is given, else it is
    ``None``. ``n_heads`` must agree with a stored configuration.

    Returns ``(weights, config)``: the weights normalized (see :func:`normalize_names`) and,
    when ``config`` is known, validated against it. Files are read through
    ``safetensors.safe_open`` (memory-mapped; nothing is unpickled).

    Raises ``FileNotFoundError`` (with the path) if nothing is there or a shard is missing,
    ``ValueError`` (naming the file) for a pickle checkpoint (with how to convert it), a file
    that cannot be read or is not valid safetensors, a ``config.json`` or
    ``model.safetensors.index.json`` that is not valid JSON of the expected form, an index that
    names a shard outside the folder, or a configuration that disagrees with the tensors, and
    ``TypeError`` for a tensor whose dtype is not a float type numpy can hold (F8 types, for
    example) or not float at all.
    """
    try:
        p = Path(os.fspath(path))
    except TypeError:
        raise TypeError(f"load_safetensors: path must be a str or os.PathLike, got {type(path).__name__}") from None
    if n_heads is not None and (isinstance(n_heads, bool) or not isinstance(n_heads, int) or n_heads < 1):
        raise TypeError(f"load_safetensors: n_heads must be a positive int or None, got {n_heads!r}")
    if not p.exists():
        raise _not_found("no such file or folder", p)

    config_file: Optional[Path] = None
    if p.is_dir():
        index = p / "model.safetensors.index.json"
        if (p / "model.safetensors").is_file():
            files = [p / "model.safetensors"]
        elif index.is_file():
            files = _shard_files(p, index)
        else:
            try:
                pickles = sorted(q.name for q in p.iterdir() if q.suffix in _PICKLE_SUFFIXES)
            except OSError as e:
                raise _unreadable(p, e) from None
            if pickles:
                raise _pickle_error(p / pickles[0])
            raise _not_found("the folder has no model.safetensors", p / "model.safetensors")
        if (p / "config.json").is_file():
            config_file = p / "config.json"
    else:
        if p.suffix in _PICKLE_SUFFIXES:
            raise _pickle_error(p)
        files = [p]

    raw: Weights = {}
    metadata: Dict[str, str] = {}
    for f in files:
        tensors, meta = _read_file(f)
        raw.update(tensors)
        metadata.update(meta)

    config: Optional[GPTConfig] = None
    source = ""
    if config_file is not None:
        cfg = _read_json(config_file, "the model configuration")
        config = _config_from_hf(cfg, config_file)
        source = str(config_file)
    elif _CONFIG_METADATA_KEY in metadata:
        try:
            config = GPTConfig(**json.loads(metadata[_CONFIG_METADATA_KEY]))
        except (TypeError, ValueError, RecursionError) as e:
            raise ValueError(f"load_safetensors: the configuration stored in {str(p)!r} is invalid: {e}") from None
        source = f"the metadata of {str(p)!r}"

    if config is not None:
        if n_heads is not None and n_heads != config.n_heads:
            raise ValueError(f"load_safetensors: n_heads={n_heads} disagrees with n_head={config.n_heads} in {source}")
        try:
            weights = validate(raw, config)
        except ValueError as e:
            raise ValueError(f"load_safetensors: {source} disagrees with the tensors in {str(p)!r}: {e}") from None
        return weights, config

    weights = _check_dtypes("load_safetensors", normalize_names(raw))
    if n_heads is not None:
        config = infer_config(weights, n_heads=n_heads)
    return weights, config


def save_safetensors(
    weights: Mapping[str, np.ndarray],
    config: GPTConfig,
    path: PathLike,
    *,
    dtype: Any = None,
    weight_dtype: Any = None,
) -> Path:
    """Write ``weights`` (checked against ``config``) so that :func:`load_safetensors` reads
    them back, and return the path written.

    A path ending in ``.safetensors`` becomes one file whose metadata holds the configuration.
    Any other path becomes a folder (created if needed) in Hugging Face's layout:
    ``config.json`` with GPT-2's keys (plus a ``"gptcore"`` entry for what GPT-2's format
    cannot say: sinusoidal positions, missing biases or LayerNorm affines) and
    ``model.safetensors`` with the ``"transformer."`` prefix and, when tied, no ``lm_head``.
    ``dtype`` (``None``: each tensor's own, float32 or float64) converts every tensor.
    Existing files of those names are replaced. ``weight_dtype`` (``"bfloat16"`` or
    ``"float16"``) stores the weight matrices and embedding tables as BF16/F16 (rounded to
    nearest even) and the biases and LayerNorm parameters as F32, as a model with 16-bit
    weights holds them (``dtype`` must then be None).
    """
    from safetensors.numpy import save_file

    if weight_dtype is not None:
        from .half import half_dtype_name, save_half

        if dtype is not None:
            raise ValueError("save_safetensors: give dtype or weight_dtype, not both")
        return save_half(weights, config, path, half_dtype_name("save_safetensors: weight_dtype", weight_dtype))

    _check_config("save_safetensors", config)
    w = validate(weights, config)
    if dtype is not None:
        try:
            dt = np.dtype(dtype)
        except TypeError:
            dt = None
        if dt not in (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)):
            raise TypeError(f"save_safetensors: dtype must be None, 'float16', 'float32' or 'float64', got {dtype!r}")
        w = {k: v.astype(dt, copy=False) for k, v in w.items()}
    try:
        p = Path(os.fspath(path))
    except TypeError:
        raise TypeError(f"save_safetensors: path must be a str or os.PathLike, got {type(path).__name__}") from None
    tensors = {
        (k if k == "lm_head.weight" else _PREFIX + k): np.ascontiguousarray(v) for k, v in w.items()
    }
    metadata = {"format": "pt", _CONFIG_METADATA_KEY: json.dumps(config.to_dict())}
    dtypes = sorted({v.dtype.name for v in w.values()})
    if p.suffix == ".safetensors":
        if p.is_dir():
            raise ValueError(f"save_safetensors: {str(p)!r} is a folder; give a file path or a folder without the .safetensors suffix")
        p.parent.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(p), metadata=metadata)
        return p
    if p.exists() and not p.is_dir():
        raise ValueError(f"save_safetensors: {str(p)!r} exists and is not a folder")
    p.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(p / "model.safetensors"), metadata=metadata)
    with open(p / "config.json", "w", encoding="utf-8") as fh:
        json.dump(_hf_config(config, dtypes[0] if len(dtypes) == 1 else "float32"), fh, indent=2)
        fh.write("\n")
    return p
