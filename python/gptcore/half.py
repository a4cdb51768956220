"""16-bit weights: bfloat16 and float16 storage with float32 arithmetic.

numpy has no bfloat16, so the public functions speak float32 (values exactly representable in
the 16-bit format) or ``uint16`` (the raw bit patterns):

* ``round_weights`` rounds float32 values to the format (IEEE round to nearest, ties to
  even; NaN stays NaN, quiet; beyond the largest finite value, infinity as IEEE says) and
  returns them as float32. ``Model(round_weights(w), ...)`` is the float32 model a
  ``Model(w, weight_dtype=...)`` equals bit for bit.
* ``to_half_bits`` / ``from_half_bits`` convert between float32 values and the uint16
  bit patterns (widening is exact).

The rest of this module reads and writes BF16/F16 safetensors checkpoints one tensor at a time
(no float32 copy of the model), for ``gptcore.load`` and ``gptcore.Model.save``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from . import _native
from .config import GPTConfig

__all__ = ["HALF_DTYPES", "round_weights", "to_half_bits", "from_half_bits"]

#: The 16-bit storage formats.
HALF_DTYPES = ("bfloat16", "float16")

#: Tensor kinds kept in float32 in a 16-bit model (the others: matrices and embedding tables).
FLOAT32_KINDS = frozenset({"bias", "ln_weight", "ln_bias"})

_ST_CODE = {"bfloat16": "BF16", "float16": "F16"}
_ITEMSIZE = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8}


def half_dtype_name(what: str, dtype: Any) -> str:
    """``"bfloat16"`` or ``"float16"`` from a name or a numpy/ml_dtypes dtype."""
    if isinstance(dtype, str):
        name = dtype
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            raise TypeError(f"{what} must be 'bfloat16' or 'float16', got {dtype!r}") from None
    if name not in HALF_DTYPES:
        raise ValueError(f"{what} must be 'bfloat16' or 'float16', got {name!r}")
    return name


def _float32(what: str, x: Any) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind != "f" and a.dtype.name != "bfloat16":
        raise TypeError(f"{what}: x must be a float array, got dtype {a.dtype}")
    return np.asarray(a, dtype=np.float32, order="C")


def to_half_bits(x: Any, dtype: Any = "bfloat16") -> np.ndarray:
    """The ``uint16`` bit patterns of ``x`` (converted to float32 first) rounded to ``dtype``
    (``"bfloat16"`` or ``"float16"``; round to nearest even), same shape.

    Examples:
        >>> to_half_bits([1.0, -2.0, 1 + 2**-8], "bfloat16")
        array([16256, 49152, 16256], dtype=uint16)
    """
    return _native._to_half_bits(_float32("to_half_bits", x), half_dtype_name("to_half_bits: dtype", dtype))


def from_half_bits(bits: Any, dtype: Any = "bfloat16") -> np.ndarray:
    """The float32 values of ``uint16`` bit patterns of ``dtype`` (exact), same shape.

    Examples:
        >>> from_half_bits(np.array([0x3F80, 0x7F80], dtype=np.uint16), "bfloat16")
        array([ 1., inf], dtype=float32)
    """
    b = np.asarray(bits)
    if b.dtype != np.uint16:
        raise TypeError(f"from_half_bits: bits must be a uint16 array, got dtype {b.dtype}")
    return _native._from_half_bits(np.asarray(b, order="C"), half_dtype_name("from_half_bits: dtype", dtype))


def round_weights(x: Any, dtype: Any = "bfloat16") -> Any:
    """``x`` rounded to ``dtype`` (``"bfloat16"`` or ``"float16"``) and returned as float32.

    ``x`` is an array (converted to float32 first) or a mapping of arrays (every array rounded:
    pass a model's weights to get the float32 model that the 16-bit model equals; biases and
    LayerNorm parameters, which a 16-bit model keeps in float32, are then left as they are).

    Examples:
        >>> round_weights(np.array([1 + 2**-12, 1 + 2**-10, 65519.0, 65520.0], np.float32), "float16").tolist()
        [1.0, 1.0009765625, 65504.0, inf]
    """
    name = half_dtype_name("round_weights: dtype", dtype)
    if isinstance(x, dict):
        from .weights import normalize_names

        out = {}
        for k, v in normalize_names(x).items():
            out[k] = np.asarray(v, dtype=np.float32) if _kind_is_float32(k) else round_weights(v, name)
        return out
    return from_half_bits(to_half_bits(x, name), name)


def _kind_is_float32(name: str) -> bool:
    """Whether the tensor ``name`` (schema name) stays float32 in a 16-bit model."""
    return name.endswith((".bias", "ln_1.weight", "ln_2.weight", "ln_f.weight"))


# --------------------------------------------------------------------------------------------
# reading a checkpoint one tensor at a time
# --------------------------------------------------------------------------------------------

class _Entry:
    __slots__ = ("path", "key", "dtype", "shape", "offset", "nbytes")

    def __init__(self, path: Path, key: str, dtype: str, shape: Tuple[int, ...], offset: int, nbytes: int):
        self.path, self.key, self.dtype, self.shape, self.offset, self.nbytes = path, key, dtype, shape, offset, nbytes


def _header(path: Path) -> Tuple[List[_Entry], Dict[str, str]]:
    """The tensors of a safetensors file (name, dtype, shape, where their bytes are), every
    entry checked against the file: a clear ``ValueError`` names the tensor otherwise."""
    def bad(msg: str) -> ValueError:
        return ValueError(f"load: {str(path)!r} is not a valid safetensors file: {msg}")

    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise bad("shorter than its 8-byte header length")
        n = int.from_bytes(head, "little")
        if n > size - 8:
            raise bad(f"the header length {n} exceeds the file")
        try:
            header = json.loads(fh.read(n))
        except (ValueError, RecursionError) as e:
            raise bad(f"the header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise bad("the header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    data_len = size - 8 - n
    out = []
    for key, info in header.items():
        try:
            dtype = info["dtype"]
            shape = tuple(int(s) for s in info["shape"])
            start, end = (int(v) for v in info["data_offsets"])
        except (TypeError, KeyError, ValueError):
            raise bad(f"tensor {key!r} has a malformed entry {info!r}") from None
        if dtype not in _ITEMSIZE:
            raise TypeError(
                f"load: tensor {key!r} in {str(path)!r} has dtype {dtype}; expected F32, F64, F16 or BF16"
            )
        nbytes = end - start
        if not 0 <= start <= end <= data_len:
            raise bad(f"tensor {key!r} has byte range [{start}, {end}) outside the data ({data_len} bytes)")
        if nbytes % _ITEMSIZE[dtype]:
            raise bad(f"tensor {key!r} ({dtype}) has {nbytes} bytes, not a whole number of "
                      f"{_ITEMSIZE[dtype]}-byte values")
        want = int(np.prod(shape, dtype=np.int64)) * _ITEMSIZE[dtype]
        if nbytes != want:
            raise bad(f"tensor {key!r} holds {nbytes} bytes; shape {list(shape)} of {dtype} needs {want}")
        out.append(_Entry(path, key, dtype, shape, 8 + n + start, nbytes))
    return out, dict(metadata)


def _read(e: _Entry) -> np.ndarray:
    """The tensor's raw values: uint16 patterns for BF16/F16, float32/float64 otherwise."""
    dt = {"BF16": "<u2", "F16": "<u2", "F32": "<f4", "F64": "<f8"}[e.dtype]
    count = e.nbytes // _ITEMSIZE[e.dtype]
    with open(e.path, "rb") as fh:
        fh.seek(e.offset)
        a = np.fromfile(fh, dtype=dt, count=count)
    if a.size != count:
        raise ValueError(f"load: {str(e.path)!r} ended inside tensor {e.key!r}")
    return a.astype(a.dtype.newbyteorder("="), copy=False).reshape(e.shape)


def _as_float32(e: _Entry, raw: np.ndarray) -> np.ndarray:
    if e.dtype == "BF16":
        return from_half_bits(raw, "bfloat16")
    if e.dtype == "F16":
        return from_half_bits(raw, "float16")
    return np.ascontiguousarray(raw, dtype=np.float32)


def _as_bits(e: _Entry, raw: np.ndarray, weight_dtype: str) -> np.ndarray:
    """The tensor as uint16 patterns of ``weight_dtype`` (as stored when the file holds that
    format, else rounded from its float32 value)."""
    if e.dtype == _ST_CODE[weight_dtype]:
        return raw
    return to_half_bits(_as_float32(e, raw), weight_dtype)


def _same_bytes(a: _Entry, b: _Entry) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    chunk = 1 << 22
    with open(a.path, "rb") as fa, open(b.path, "rb") as fb:
        fa.seek(a.offset)
        fb.seek(b.offset)
        left = a.nbytes
        while left > 0:
            n = min(chunk, left)
            if fa.read(n) != fb.read(n):
                return False
            left -= n
    return True


def _files(p: Path) -> Tuple[List[Path], Optional[Path]]:
    from .weights import checkpoint, schema, validation  # noqa: F401

    if not p.exists():
        raise checkpoint._not_found("no such file or folder", p)
    if p.is_dir():
        index = p / "model.safetensors.index.json"
        if (p / "model.safetensors").is_file():
            files = [p / "model.safetensors"]
        elif index.is_file():
            files = checkpoint._shard_files(p, index)
        else:
            pickles = sorted(q.name for q in p.iterdir() if q.suffix in checkpoint._PICKLE_SUFFIXES)
            if pickles:
                raise checkpoint._pickle_error(p / pickles[0])
            raise checkpoint._not_found("the folder has no model.safetensors", p / "model.safetensors")
        cfg = p / "config.json"
        return files, (cfg if cfg.is_file() else None)
    if p.suffix in checkpoint._PICKLE_SUFFIXES:
        raise checkpoint._pickle_error(p)
    return [p], None


def open_lazy(
    path: Any, weight_dtype: str, n_heads: Optional[int] = None
) -> Tuple[Dict[str, np.ndarray], GPTConfig, Callable[[str], Optional[np.ndarray]]]:
    """Open a checkpoint for a 16-bit model without reading its large tensors.

    Returns ``(small, config, fetch)``: the float32 biases and LayerNorm parameters, the
    configuration (from ``config.json``, the file's metadata, or inferred from the shapes), and
    ``fetch(name)``, which reads one large tensor and returns its uint16 patterns in
    ``weight_dtype``. Names, shapes and byte counts are all checked first, exactly as
    ``gptcore.load_safetensors`` checks them.
    """
    from .weights import checkpoint, schema, validation  # noqa: F401

    try:
        p = Path(os.fspath(path))
    except TypeError:
        raise TypeError(f"load: path must be a str or os.PathLike, got {type(path).__name__}") from None
    files, config_file = _files(p)
    entries: List[_Entry] = []
    metadata: Dict[str, str] = {}
    for f in files:
        try:
            es, meta = _header(f)
        except OSError as e:
            raise checkpoint._unreadable(f, e) from None
        entries += es
        metadata.update(meta)
    # Shape-only stand-ins (no memory) let the usual checks run on names and shapes; each holds
    # its own value so that a stored lm_head counts as tied only when its bytes equal wte's.
    by_key = {e.key: e for e in entries}
    wte = next((by_key[k] for k in ("transformer.wte.weight", "wte.weight") if k in by_key), None)
    stand_ins: Dict[str, np.ndarray] = {}
    origin: Dict[int, _Entry] = {}
    for i, e in enumerate(entries):
        val = float(i)
        if e.key in ("lm_head.weight", "transformer.lm_head.weight") and wte is not None and _same_bytes(e, wte):
            val = float(entries.index(wte))
        a = np.lib.stride_tricks.as_strided(np.full(1, val, np.float32), shape=e.shape, strides=(0,) * len(e.shape),
                                            writeable=False)
        stand_ins[e.key] = a
        origin[id(a)] = e
    config: Optional[GPTConfig] = None
    if config_file is not None:
        config = checkpoint._config_from_hf(checkpoint._read_json(config_file, "the model configuration"), config_file)
    elif checkpoint._CONFIG_METADATA_KEY in metadata:
        try:
            config = GPTConfig(**json.loads(metadata[checkpoint._CONFIG_METADATA_KEY]))
        except (TypeError, ValueError, RecursionError) as e:
            raise ValueError(f"load: the configuration stored in {str(p)!r} is invalid: {e}") from None
    if config is not None and n_heads is not None and n_heads != config.n_heads:
        raise ValueError(f"load: n_heads={n_heads} disagrees with n_head={config.n_heads} stored with {str(p)!r}")
    if config is None:
        config = validation.infer_config(schema.normalize_names(stand_ins), n_heads=n_heads)
    try:
        checked = validation.validate(stand_ins, config)
    except ValueError as e:
        raise ValueError(f"load: the configuration disagrees with the tensors in {str(p)!r}: {e}") from None
    kinds = {name: kind for name, _, kind in schema._tensor_kinds(config)}
    small: Dict[str, np.ndarray] = {}
    large: Dict[str, _Entry] = {}
    for name, a in checked.items():
        e = origin[id(a)]
        if kinds[name] in FLOAT32_KINDS:
            small[name] = _as_float32(e, _read(e))
        else:
            large[name] = e

    def fetch(name: str) -> Optional[np.ndarray]:
        e = large.get(name)
        if e is None:
            return None
        return _as_bits(e, _read(e), weight_dtype)

    return small, config, fetch


# --------------------------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------------------------

def _write_file(path: Path, tensors: Dict[str, Tuple[str, Tuple[int, ...], np.ndarray]], metadata: Dict[str, str]) -> None:
    """A safetensors file: 8-byte header length, JSON header, the tensors' bytes (little
    endian, in the order given), the header padded with spaces to a multiple of 8 bytes."""
    header: Dict[str, Any] = {"__metadata__": metadata}
    offset = 0
    for name, (code, shape, data) in tensors.items():
        header[name] = {"dtype": code, "shape": list(shape), "data_offsets": [offset, offset + data.nbytes]}
        offset += data.nbytes
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as fh:
        fh.write(len(h).to_bytes(8, "little"))
        fh.write(h)
        for _, (_, _, data) in tensors.items():
            fh.write(np.ascontiguousarray(data).astype(data.dtype.newbyteorder("<"), copy=False).tobytes())


def save_half(weights: Dict[str, np.ndarray], config: GPTConfig, path: Any, weight_dtype: str) -> Path:
    """Write float32 ``weights`` with every weight matrix and embedding table as BF16/F16
    (rounded to nearest even: values already in the format are kept bit for bit) and biases
    and LayerNorm parameters as F32, in the layout of ``gptcore.save_safetensors``."""
    from .weights import checkpoint, schema, validation  # noqa: F401

    schema._check_config("save_safetensors", config)
    w = validation.validate(weights, config)
    kinds = {name: kind for name, _, kind in schema._tensor_kinds(config)}
    code = _ST_CODE[weight_dtype]
    tensors = {}
    for k, v in w.items():
        key = k if k == "lm_head.weight" else schema._PREFIX + k
        if kinds[k] in FLOAT32_KINDS:
            tensors[key] = ("F32", v.shape, np.ascontiguousarray(v, dtype=np.float32))
        else:
            tensors[key] = (code, v.shape, to_half_bits(v, weight_dtype))
    try:
        p = Path(os.fspath(path))
    except TypeError:
        raise TypeError(f"save_safetensors: path must be a str or os.PathLike, got {type(path).__name__}") from None
    metadata = {"format": "pt", checkpoint._CONFIG_METADATA_KEY: json.dumps(config.to_dict())}
    if p.suffix == ".safetensors":
        if p.is_dir():
            raise ValueError(f"save_safetensors: {str(p)!r} is a folder; give a file path or a folder without the .safetensors suffix")
        p.parent.mkdir(parents=True, exist_ok=True)
        _write_file(p, tensors, metadata)
        return p
    if p.exists() and not p.is_dir():
        raise ValueError(f"save_safetensors: {str(p)!r} exists and is not a folder")
    p.mkdir(parents=True, exist_ok=True)
    _write_file(p / "model.safetensors", tensors, metadata)
    with open(p / "config.json", "w", encoding="utf-8") as fh:
        json.dump(checkpoint._hf_config(config, weight_dtype), fh, indent=2)
        fh.write("\n")
    return p
