"""Checkpoints: Hugging Face folders (GPT-2, Llama, Mistral, Qwen2) and safetensors files,
read and written.

A checkpoint is a folder (``model.safetensors``, or the shards that
``model.safetensors.index.json`` names, and usually ``config.json``) or a single
``.safetensors`` file whose metadata may carry the configuration. Pickle checkpoints are
refused, never opened. Three ways through it, all on the one safetensors reader and writer
(``safetensors_file``) and the storage formats (``formats``):

* ``load_safetensors``: every tensor as a numpy array (BF16 widened to float32);
* ``open_lazy``: for a model whose weights are stored in a 16-bit format, the small float32
  tensors now and each large tensor when the model packs it, so that no float32 copy of the
  model exists;
* ``inspect_checkpoint``: the configuration and the storage format, from ``config.json`` and
  the files' headers alone (no tensor is read);
* ``save_safetensors``: a folder or a file, in float32 / float64 or a 16-bit format.
"""

from __future__ import annotations

import errno
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from .._checks import dtype_name
from ..config import GPTConfig
from . import safetensors_file
from ..gguf.policy import model_storage_type
from .formats import (
    BLOCK_DTYPES,
    FORMATS,
    first_nonfinite,
    keeps_float32,
    stored_bits,
    to_half_bits,
    weight_dtype_name,
    widen,
)
from .hf_config import config_from_hf, hf_config
from .schema import _PREFIX, TOKEN_EMBEDDINGS, Weights, _check_config, _tensor_kinds, normalize_names
from .validation import _check_dtypes, infer_config, validate

__all__ = ["CheckpointInfo", "inspect_checkpoint", "load_safetensors", "open_lazy", "save_safetensors"]

PathLike = Union[str, "os.PathLike[str]"]

# The formats a safetensors checkpoint stores weight matrices in (16-bit values).
FORMATS_16 = ("bfloat16", "float16")
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
_CONFIG_METADATA_KEY = "gptcore_config"
# The safetensors dtype of each numpy dtype save_safetensors writes as it is.
_SAFETENSORS_DTYPE = {"float16": "F16", "float32": "F32", "float64": "F64"}


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


class MissingShardError(FileNotFoundError, ValueError):
    """A shard that ``model.safetensors.index.json`` names is not in the folder: a missing
    file (``FileNotFoundError``) and a checkpoint that contradicts its own index
    (``ValueError``) at once, so either ``except`` catches it."""


def _unreadable(path: Path, e: OSError) -> ValueError:
    return ValueError(f"load_safetensors: {str(path)!r} cannot be read: {e.strerror or e}")


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
    in ``folder`` (no paths, so that an index cannot point elsewhere), each present. (That
    each tensor the index places in a shard is there: ``_check_index``, once the headers are
    read.)"""
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
            raise MissingShardError(errno.ENOENT, f"load_safetensors: shard named by {index.name} (weight_map) "
                                    "is missing", str(f))
        files.append(f)
    return files


def _check_index(fn: str, folder: Path, entries: List[safetensors_file.TensorEntry]) -> None:
    """``ValueError`` naming the index, the tensor and the shard when the index places a
    tensor in a shard that does not hold it."""
    index = folder / "model.safetensors.index.json"
    if (folder / "model.safetensors").is_file() or not index.is_file():
        return
    weight_map = _read_json(index, "the shard index").get("weight_map", {})
    held = {(e.path.name, e.name) for e in entries}
    for name, shard in weight_map.items():
        if (shard, name) not in held:
            raise ValueError(f"{fn}: {str(index)!r} places tensor {name!r} in {shard!r} (weight_map), "
                             "but that shard does not hold it")


# --------------------------------------------------------------------------------------------
# reading


def _path(fn: str, path: Any) -> Path:
    try:
        return Path(os.fspath(path))
    except TypeError:
        raise TypeError(f"{fn}: path must be a str or os.PathLike, got {type(path).__name__}") from None


def _check_n_heads(fn: str, n_heads: Any) -> None:
    if n_heads is not None and (isinstance(n_heads, bool) or not isinstance(n_heads, int) or n_heads < 1):
        raise TypeError(f"{fn}: n_heads must be a positive int or None, got {n_heads!r}")


def _check_flag(fn: str, name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{fn}: {name} must be a bool, got {value!r}")


def _checkpoint_files(p: Path) -> Tuple[List[Path], Optional[Path]]:
    """The safetensors files of the checkpoint at ``p`` and its ``config.json`` (or None)."""
    if not p.exists():
        raise _not_found("no such file or folder", p)
    if not p.is_dir():
        if p.suffix in _PICKLE_SUFFIXES:
            raise _pickle_error(p)
        return [p], None
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
    config_file = p / "config.json"
    return files, (config_file if config_file.is_file() else None)


def _read_headers(fn: str, files: List[Path], folder: Optional[Path]) -> Tuple[List[safetensors_file.TensorEntry], Dict[str, str]]:
    """Every file's header; ``folder``: the checkpoint's folder (its shard index is
    checked against the headers), None for a single file."""
    entries: List[safetensors_file.TensorEntry] = []
    metadata: Dict[str, str] = {}
    for f in files:
        try:
            found, meta = safetensors_file.read_header(f, fn)
        except FileNotFoundError:
            raise _not_found("the file disappeared while being read", f) from None
        except OSError as e:  # a device, a folder, no permission, an I/O error
            raise _unreadable(f, e) from None
        entries += found
        metadata.update(meta)
    if folder is not None:
        _check_index(fn, folder, entries)
    return entries, metadata


def _read(fn: str, entry: safetensors_file.TensorEntry, check_finite: bool = False) -> np.ndarray:
    try:
        a = safetensors_file.read_tensor(entry, fn)
    except FileNotFoundError:
        raise _not_found("the file disappeared while being read", entry.path) from None
    except OSError as e:
        raise _unreadable(entry.path, e) from None
    if check_finite:
        at = first_nonfinite(a, entry.dtype)
        if at is not None:
            flat = int(np.ravel_multi_index(at, a.shape)) if a.ndim else 0
            value = float(widen(a.reshape(-1)[flat:flat + 1], entry.dtype)[0])
            raise ValueError(
                f"{fn}: tensor {entry.name!r} in {str(entry.path)!r} holds {value} at index {list(at)}: a "
                "checkpoint with NaN or infinite weights gives NaN outputs (pass allow_nonfinite=True to "
                "load it anyway, to debug it)")
    return a


def _stored_config(fn: str, p: Path, config_file: Optional[Path], metadata: Dict[str, str],
                   n_heads: Optional[int]) -> Tuple[Optional[GPTConfig], str]:
    """The configuration stored with the checkpoint (``config.json``, else the file's
    metadata), or None; and where it came from, for the errors."""
    config: Optional[GPTConfig] = None
    source = ""
    if config_file is not None:
        config = config_from_hf(_read_json(config_file, "the model configuration"), config_file)
        source = str(config_file)
    elif _CONFIG_METADATA_KEY in metadata:
        try:
            config = GPTConfig(**json.loads(metadata[_CONFIG_METADATA_KEY]))
        except (TypeError, ValueError, RecursionError) as e:
            raise ValueError(f"{fn}: the configuration stored in {str(p)!r} is invalid: {e}") from None
        source = f"the metadata of {str(p)!r}"
    if config is not None and n_heads is not None and n_heads != config.n_heads:
        raise ValueError(f"{fn}: n_heads={n_heads} disagrees with n_head={config.n_heads} in {source}")
    return config, source


def load_safetensors(
    path: PathLike, *, n_heads: Optional[int] = None, allow_nonfinite: bool = False
) -> Tuple[Weights, Optional[GPTConfig]]:
    """Read weights from a Hugging Face GPT-2 folder or a ``.safetensors`` file.

    A folder holds ``model.safetensors`` (or the shards named by
    ``model.safetensors.index.json``) and usually ``config.json``, from which the
    ``GPTConfig`` is read (``n_layer``, ``n_embd``, ``n_head``, ``n_positions``,
    ``vocab_size``, ``n_inner``, ``layer_norm_epsilon``, ``tie_word_embeddings``). A file
    written by ``save_safetensors`` carries its configuration in the metadata. Without
    either, the configuration is inferred from the shapes when ``n_heads`` is given, else it is
    ``None``. ``n_heads`` must agree with a stored configuration.

    Returns ``(weights, config)``: the weights normalized (see ``normalize_names``) and,
    when ``config`` is known, validated against it. Files are read with gptcore's own
    safetensors reader (``gptcore.weights.safetensors_file``: the header checked whole, then
    one tensor at a time; nothing is unpickled).

    A tensor that holds a NaN or an infinity is a ``ValueError`` naming the tensor, the file
    and the first such index, unless ``allow_nonfinite`` (found in the same pass that reads
    the tensor: a sum per tensor, no copy).

    Raises ``FileNotFoundError`` (with the path) if nothing is there or a shard is missing (a
    missing shard is also a ``ValueError``: ``MissingShardError``),
    ``ValueError`` (naming the file) for a pickle checkpoint (with how to convert it), a file
    that cannot be read or is not valid safetensors, a ``config.json`` or
    ``model.safetensors.index.json`` that is not valid JSON of the expected form, an index that
    names a shard outside the folder, or a configuration that disagrees with the tensors, and
    ``TypeError`` for a tensor whose dtype is not a float type numpy can hold (F8 types, for
    example) or not float at all.
    """
    fn = "load_safetensors"
    p = _path(fn, path)
    _check_n_heads(fn, n_heads)
    _check_flag(fn, "allow_nonfinite", allow_nonfinite)
    files, config_file = _checkpoint_files(p)
    entries, metadata = _read_headers(fn, files, p if p.is_dir() else None)
    # Read the configuration first: a model_type or setting gptcore cannot compute is reported
    # before any tensor is read.
    config, source = _stored_config(fn, p, config_file, metadata, n_heads)
    raw: Weights = {}
    for e in entries:
        a = _read(fn, e, check_finite=not allow_nonfinite)
        raw[e.name] = widen(a, "BF16") if e.dtype == "BF16" else a  # numpy has no bfloat16

    if config is not None:
        try:
            weights = validate(raw, config)
        except ValueError as e:
            raise ValueError(f"{fn}: {source} disagrees with the tensors in {str(p)!r}: {e}") from None
        return weights, config

    weights = _check_dtypes(fn, normalize_names(raw))
    if n_heads is not None:
        config = infer_config(weights, n_heads=n_heads)
    return weights, config


def _checked_entries(fn: str, p: Path, n_heads: Optional[int]):
    """The configuration (stored or inferred), where it came from, and every tensor the
    configuration asks for as its file entry, checked by ``validate`` on shape-only
    stand-ins: names, shapes, dtypes and byte counts, and no tensor read."""
    _check_n_heads(fn, n_heads)
    files, config_file = _checkpoint_files(p)
    entries, metadata = _read_headers(fn, files, p if p.is_dir() else None)
    config, source = _stored_config(fn, p, config_file, metadata, n_heads)
    # Shape-only stand-ins (no memory) let the usual checks run on names, shapes and dtypes:
    # float32 for a float tensor, numpy's type otherwise (validate refuses it by that name).
    # Each holds its own value, so that a stored lm_head counts as tied only when its bytes
    # equal the token embedding's.
    by_name = {e.name: e for e in entries}
    wte = next((by_name[k] for k in ("transformer.wte.weight",) + TOKEN_EMBEDDINGS if k in by_name), None)
    stand_ins: Dict[str, np.ndarray] = {}
    origin: Dict[int, safetensors_file.TensorEntry] = {}
    for i, e in enumerate(entries):
        dt = safetensors_file.numpy_dtype(e, fn)
        is_float = dt.kind == "f" or e.dtype == "BF16"
        dt = np.dtype(np.float32) if is_float else dt
        val = i if is_float else 0
        if e.name in ("lm_head.weight", "transformer.lm_head.weight") and wte is not None \
                and safetensors_file.same_bytes(e, wte):
            val = entries.index(wte)
        a = np.lib.stride_tricks.as_strided(np.full(1, val, dt), shape=e.shape, strides=(0,) * len(e.shape),
                                            writeable=False)
        stand_ins[e.name] = a
        origin[id(a)] = e
    if config is None:
        config = infer_config(_check_dtypes(fn, normalize_names(stand_ins)), n_heads=n_heads)
        source = "the configuration inferred from the shapes"
    try:
        checked = validate(stand_ins, config)
    except ValueError as e:
        raise ValueError(f"{fn}: {source} disagrees with the tensors in {str(p)!r}: {e}") from None
    return config, source, {name: origin[id(a)] for name, a in checked.items()}


@dataclass(frozen=True)
class CheckpointInfo:
    """What a checkpoint's ``config.json`` and headers say: its configuration, where that
    came from, the safetensors dtype of each tensor (by schema name), and ``stored_format``:
    ``"bfloat16"`` or ``"float16"`` when every weight matrix and embedding table is stored in
    that 16-bit format, else None."""

    config: GPTConfig
    source: str
    dtypes: Dict[str, str]
    stored_format: Optional[str]


def inspect_checkpoint(path: Any, n_heads: Optional[int] = None, fn: str = "load") -> CheckpointInfo:
    """The configuration and storage of the checkpoint at ``path``, read from
    ``config.json`` (or the file's metadata, or inferred from the shapes) and the safetensors
    headers only; every tensor's name, shape and dtype checked as ``load_safetensors``
    checks them."""
    p = _path(fn, path)
    config, source, entries = _checked_entries(fn, p, n_heads)
    kinds = {name: kind for name, _, kind in _tensor_kinds(config)}
    large = {entries[n].dtype for n in entries if not keeps_float32(kinds[n])}
    stored = {"BF16": "bfloat16", "F16": "float16"}.get(large.pop()) if len(large) == 1 else None
    return CheckpointInfo(config, source, {n: e.dtype for n, e in entries.items()}, stored)


def open_lazy(
    path: Any, weight_dtype: str, n_heads: Optional[int] = None, allow_nonfinite: bool = False
) -> Tuple[Dict[str, np.ndarray], GPTConfig, Callable[[str], Any]]:
    """Open a checkpoint for a model whose weights are stored in ``weight_dtype`` (a 16-bit or
    block format) without reading its large tensors.

    Returns ``(small, config, fetch)``: the float32 tensors of the kinds that stay float32
    (biases, norm parameters; for a block format also the tensors it keeps in float32, see
    ``gptcore.gguf.policy``), the configuration (from ``config.json``, the file's metadata, or
    inferred from the shapes), and ``fetch(name)``, which reads one large tensor and returns
    its uint16 patterns in a 16-bit ``weight_dtype``, its float32 values for a block format to
    quantize, ``("float32", None)`` for a tensor of ``small`` kept as it is, or None for a name
    it does not hold. Names, shapes, dtypes and byte counts are all checked first, as
    ``load_safetensors`` checks them; the values as each tensor is read (a NaN or an infinity
    is a ``ValueError`` naming the tensor, unless ``allow_nonfinite``). Each tensor is read
    once.
    """
    fn = "load"
    p = _path(fn, path)
    _check_flag(fn, "allow_nonfinite", allow_nonfinite)
    check = not allow_nonfinite
    config, _, entries = _checked_entries(fn, p, n_heads)
    kinds = {name: kind for name, _, kind in _tensor_kinds(config)}
    blocks = weight_dtype in BLOCK_DTYPES
    small: Dict[str, np.ndarray] = {}
    large: Dict[str, safetensors_file.TensorEntry] = {}
    for name, e in entries.items():
        kept = blocks and model_storage_type(name, tuple(e.shape), weight_dtype,
                                             config.family) != weight_dtype.upper()
        if keeps_float32(kinds[name]) or kept:
            small[name] = np.ascontiguousarray(widen(_read(fn, e, check), e.dtype))
        else:
            large[name] = e

    def fetch(name: str) -> Any:
        e = large.get(name)
        if e is None:
            return ("float32", None) if blocks and name in small else None
        if blocks:
            return np.ascontiguousarray(widen(_read(fn, e, check), e.dtype))
        return stored_bits(_read(fn, e, check), e.dtype, weight_dtype)

    return small, config, fetch


# --------------------------------------------------------------------------------------------
# writing


def save_safetensors(
    weights: Mapping[str, np.ndarray],
    config: GPTConfig,
    path: PathLike,
    *,
    dtype: Any = None,
    weight_dtype: Any = None,
) -> Path:
    """Write ``weights`` (checked against ``config``) so that ``load_safetensors`` reads
    them back, and return the path written.

    A path ending in ``.safetensors`` becomes one file whose metadata holds the configuration.
    Any other path becomes a folder (created if needed) in Hugging Face's layout:
    ``config.json`` with GPT-2's keys (plus a ``"gptcore"`` entry for what GPT-2's format
    cannot say: sinusoidal positions, missing biases or LayerNorm affines) and
    ``model.safetensors`` with the ``"transformer."`` prefix and, when tied, no ``lm_head``;
    for the Llama family, ``LlamaForCausalLM``'s (or ``Qwen2ForCausalLM``'s) ``config.json``
    and the schema's names as they are.
    ``dtype`` (``None``: each tensor's own, float32 or float64) converts every tensor.
    Existing files of those names are replaced. ``weight_dtype`` (``"bfloat16"`` or
    ``"float16"``) stores the weight matrices and embedding tables as BF16/F16 (rounded to
    nearest even) and the biases and LayerNorm parameters as F32, as a model with 16-bit
    weights holds them (``dtype`` must then be None).
    """
    fn = "save_safetensors"
    if weight_dtype is not None:
        if dtype is not None:
            raise ValueError(f"{fn}: give dtype or weight_dtype, not both")
        if isinstance(weight_dtype, str) and weight_dtype in BLOCK_DTYPES:
            raise ValueError(f"{fn}: {weight_dtype} weights have no safetensors dtype; save them in a GGUF file "
                             "(a path ending in .gguf), or pass weight_dtype='float32' for their values as float32")
        weight_dtype = weight_dtype_name(f"{fn}: weight_dtype", weight_dtype, FORMATS_16)
    _check_config(fn, config)
    w = validate(weights, config)
    if weight_dtype is not None:
        kinds = {name: kind for name, _, kind in _tensor_kinds(config)}
        code = FORMATS[weight_dtype].safetensors
        stored = {k: ("F32", np.asarray(v, dtype=np.float32)) if keeps_float32(kinds[k])
                  else (code, to_half_bits(v, weight_dtype)) for k, v in w.items()}
        torch_dtype = weight_dtype
    else:
        if dtype is not None:
            dt = np.dtype(dtype_name(fn, dtype, ("float16", "float32", "float64")))
            w = {k: v.astype(dt, copy=False) for k, v in w.items()}
        stored = {k: (_SAFETENSORS_DTYPE[v.dtype.name], v) for k, v in w.items()}
        dtypes = sorted({v.dtype.name for v in w.values()})
        torch_dtype = dtypes[0] if len(dtypes) == 1 else "float32"
    p = _path(fn, path)
    prefix = _PREFIX if config.family == "gpt2" else ""  # Llama's schema names are the files' names
    tensors = {(k if k == "lm_head.weight" else prefix + k): v for k, v in stored.items()}
    metadata = {"format": "pt", _CONFIG_METADATA_KEY: json.dumps(config.to_dict())}
    if p.suffix == ".safetensors":
        if p.is_dir():
            raise ValueError(f"{fn}: {str(p)!r} is a folder; give a file path or a folder without the .safetensors suffix")
        p.parent.mkdir(parents=True, exist_ok=True)
        safetensors_file.write_file(p, tensors, metadata)
        return p
    if p.exists() and not p.is_dir():
        raise ValueError(f"{fn}: {str(p)!r} exists and is not a folder")
    p.mkdir(parents=True, exist_ok=True)
    safetensors_file.write_file(p / "model.safetensors", tensors, metadata)
    with open(p / "config.json", "w", encoding="utf-8") as fh:
        json.dump(hf_config(config, torch_dtype), fh, indent=2)
        fh.write("\n")
    return p
