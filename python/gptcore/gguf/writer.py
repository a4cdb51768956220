"""Writing GGUF files (version 3, little endian), with numpy only.

``write_gguf(path, metadata, tensors)`` writes the header, the metadata in the order given, the
tensor infos, then each tensor's bytes at the next multiple of the alignment, in the order
given. That is the layout llama.cpp requires (each tensor's offset is the padded end of the one
before it) and the one ``GGUFReader`` and the ``gguf`` package read.

Metadata values are ``format.Value`` (type and value), or a plain ``str`` (STRING), ``bool``
(BOOL) or list of ``str`` (ARRAY of STRING): numbers must say their type, because readers such
as llama.cpp insist on it (``gpt2.block_count`` is a UINT32, ``...layer_norm_epsilon`` a
FLOAT32). Tensors are ``WriterTensor(name, type, shape, data)`` with ``shape`` in numpy's order
(``ne`` reversed) and ``data`` an array holding the tensor's bytes as stored (float32 values
for F32, float16 for F16, uint16 bit patterns for BF16, ``Q8_0_BLOCK`` / ``Q4_0_BLOCK``
structured arrays for the block types), or a callable that returns it when its turn comes, so
that a model is converted one tensor at a time. The file is written beside its final path and
moved there when complete; a failure leaves nothing behind.
"""

from __future__ import annotations

import os
import struct
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Callable, List, Mapping, NamedTuple, Sequence, Tuple, Union

import numpy as np

from .format import (
    BLOCK_DTYPES,
    DEFAULT_ALIGNMENT,
    MAGIC,
    MAX_DIMS,
    SCALAR_DTYPES,
    TENSOR_TYPES,
    VERSION,
    Value,
    ValueType,
    tensor_nbytes,
)

__all__ = ["WriterTensor", "write_gguf", "encode_metadata"]

PathLike = Union[str, "os.PathLike[str]"]

#: ggml's GGML_MAX_NAME: llama.cpp refuses tensor names of 64 bytes or more.
MAX_NAME_BYTES = 63

# The numpy dtypes a tensor's data may have, per type (the bytes written are the array's).
_DATA_DTYPES = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"), **BLOCK_DTYPES}


class WriterTensor(NamedTuple):
    """A tensor to write: ``name``, ``type`` (``"F32"``, ``"F16"``, ``"BF16"``, ``"Q8_0"``,
    ``"Q4_0"``), ``shape`` (numpy order) and ``data`` (an array, or a callable returning one;
    see the module documentation)."""

    name: str
    type: str
    shape: Tuple[int, ...]
    data: Union[np.ndarray, Callable[[], np.ndarray]]


def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _as_value(key: str, v: Any) -> Value:
    if isinstance(v, Value):
        return v
    if isinstance(v, bool):
        return Value(ValueType.BOOL, v)
    if isinstance(v, str):
        return Value(ValueType.STRING, v)
    if isinstance(v, (list, tuple)) and all(isinstance(s, str) for s in v):
        return Value(ValueType.ARRAY, list(v), ValueType.STRING)
    raise TypeError(f"write_gguf: metadata {key!r}: give a gguf.format.Value (with its type) for "
                    f"{type(v).__name__} values; only str, bool and lists of str are typed implicitly")


def _scalar(key: str, vtype: ValueType, x: Any) -> bytes:
    dt = SCALAR_DTYPES[vtype]
    if vtype == ValueType.BOOL:
        if not isinstance(x, (bool, np.bool_)):
            raise TypeError(f"write_gguf: metadata {key!r} is BOOL, got {x!r}")
        return b"\x01" if x else b"\x00"
    if dt.kind in "iu":
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
            raise TypeError(f"write_gguf: metadata {key!r} is {vtype.name}, got {type(x).__name__} {x!r}")
        info = np.iinfo(dt)
        if not info.min <= int(x) <= info.max:
            raise ValueError(f"write_gguf: metadata {key!r} = {x} does not fit {vtype.name}")
        return np.array(int(x), dtype=dt).tobytes()
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise TypeError(f"write_gguf: metadata {key!r} is {vtype.name}, got {type(x).__name__} {x!r}")
    return np.array(x, dtype=dt).tobytes()


def _value_bytes(key: str, v: Value) -> bytes:
    """The bytes of a value without its leading type code."""
    if v.type == ValueType.STRING:
        if not isinstance(v.value, str):
            raise TypeError(f"write_gguf: metadata {key!r} is STRING, got {type(v.value).__name__}")
        return _string(v.value)
    if v.type != ValueType.ARRAY:
        return _scalar(key, v.type, v.value)
    et = v.element_type
    assert et is not None
    items = v.value
    head = struct.pack("<IQ", int(et), len(items))
    if et == ValueType.STRING:
        if not all(isinstance(s, str) for s in items):
            raise TypeError(f"write_gguf: metadata {key!r} is ARRAY[STRING]; every element must be a str")
        return head + b"".join(_string(s) for s in items)
    if et == ValueType.ARRAY:
        # each element: its element type, its count, its elements (no type code of its own)
        parts = []
        for i, item in enumerate(items):
            if not isinstance(item, Value) or item.type != ValueType.ARRAY:
                raise TypeError(f"write_gguf: metadata {key!r}[{i}] must be an ARRAY Value")
            parts.append(_value_bytes(f"{key}[{i}]", item))
        return head + b"".join(parts)
    a = np.asarray(items)
    dt = SCALAR_DTYPES[et]
    if et == ValueType.BOOL:
        if a.size and a.dtype != np.bool_:
            raise TypeError(f"write_gguf: metadata {key!r} is ARRAY[BOOL]; give booleans")
        return head + a.astype(np.uint8).tobytes()
    if a.size and dt.kind in "iu":
        if a.dtype.kind not in "iu":
            raise TypeError(f"write_gguf: metadata {key!r} is ARRAY[{et.name}]; give integers, got dtype {a.dtype}")
        info = np.iinfo(dt)
        if int(a.min()) < info.min or int(a.max()) > info.max:
            raise ValueError(f"write_gguf: metadata {key!r} holds values outside {et.name}")
    elif a.size and a.dtype.kind not in "iuf":
        raise TypeError(f"write_gguf: metadata {key!r} is ARRAY[{et.name}]; give numbers, got dtype {a.dtype}")
    return head + np.ascontiguousarray(a, dtype=dt).tobytes()


def encode_metadata(metadata: Mapping[str, Any]) -> Tuple[int, bytes]:
    """``(count, bytes)`` of the metadata section."""
    out = []
    for key, v in metadata.items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"write_gguf: metadata keys must be non-empty str, got {key!r}")
        val = _as_value(key, v)
        out.append(_string(key) + struct.pack("<I", int(val.type)) + _value_bytes(key, val))
    return len(out), b"".join(out)


def _check_tensor(t: WriterTensor) -> Tuple[str, Any, Tuple[int, ...]]:
    if not isinstance(t.name, str) or not t.name:
        raise TypeError(f"write_gguf: tensor names must be non-empty str, got {t.name!r}")
    if len(t.name.encode("utf-8")) > MAX_NAME_BYTES:
        raise ValueError(f"write_gguf: tensor name {t.name!r} is longer than {MAX_NAME_BYTES} bytes (llama.cpp's limit)")
    if t.type not in _DATA_DTYPES:
        raise ValueError(f"write_gguf: tensor {t.name!r} has type {t.type!r}; writable: {', '.join(_DATA_DTYPES)}")
    shape = tuple(int(s) for s in t.shape)
    if not 1 <= len(shape) <= MAX_DIMS or any(s < 0 for s in shape):
        raise ValueError(f"write_gguf: tensor {t.name!r} has shape {shape}; 1 to {MAX_DIMS} non-negative dimensions")
    ttype = TENSOR_TYPES[t.type]
    if shape[-1] % ttype.block_size:
        raise ValueError(f"write_gguf: tensor {t.name!r} ({t.type}) has rows of {shape[-1]} values, not a multiple "
                         f"of {ttype.block_size}")
    return t.name, ttype, shape


def write_gguf(path: PathLike, metadata: Mapping[str, Any], tensors: Sequence[WriterTensor], *,
               alignment: int = DEFAULT_ALIGNMENT) -> Path:
    """Write a GGUF v3 file (see the module documentation); returns its path.

    ``alignment`` other than 32 is recorded as ``general.alignment`` (it must be a power of
    two; a ``general.alignment`` in ``metadata`` must agree with it). Raises ``TypeError`` /
    ``ValueError`` naming the key or tensor for values that do not fit, before the file is
    created, and ``ValueError`` if a tensor's data does not match its type and shape.
    """
    try:
        p = Path(os.fspath(path))
    except TypeError:
        raise TypeError(f"write_gguf: path must be a str or os.PathLike, got {type(path).__name__}") from None
    if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment < 1 or alignment & (alignment - 1):
        raise ValueError(f"write_gguf: alignment must be a power of two, got {alignment!r}")
    meta = dict(metadata)
    given = meta.get("general.alignment")
    if given is not None:
        if not isinstance(given, Value) or given.type != ValueType.UINT32 or given.value != alignment:
            raise ValueError(f"write_gguf: metadata 'general.alignment' must be Value(UINT32, {alignment}) to match "
                             f"alignment={alignment}, got {given!r}")
    elif alignment != DEFAULT_ALIGNMENT:
        meta["general.alignment"] = Value(ValueType.UINT32, alignment)
    n_kv, kv_bytes = encode_metadata(meta)

    checked = []
    names = set()
    infos: List[bytes] = []
    offset = 0
    for t in tensors:
        name, ttype, shape = _check_tensor(t)
        if name in names:
            raise ValueError(f"write_gguf: tensor {name!r} is given twice")
        names.add(name)
        ne = tuple(reversed(shape))
        nbytes = tensor_nbytes(ttype, ne)
        infos.append(_string(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
                     + struct.pack("<IQ", ttype.id, offset))
        checked.append((t, ttype, shape, nbytes))
        offset += nbytes + (-nbytes % alignment)
    header = MAGIC + struct.pack("<IQQ", VERSION, len(checked), n_kv) + kv_bytes + b"".join(infos)

    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".partial", dir=str(p.parent))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(header)
            fh.write(b"\0" * (-len(header) % alignment))
            for t, _, shape, nbytes in checked:
                _write_data(fh, t, shape, nbytes)
                fh.write(b"\0" * (-nbytes % alignment))
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return p


def _write_data(fh: BinaryIO, t: WriterTensor, shape: Tuple[int, ...], nbytes: int) -> None:
    a = np.asarray(t.data() if callable(t.data) else t.data)
    want = _DATA_DTYPES[t.type]
    if a.dtype != want:
        if a.dtype.names is None and want.names is None and a.dtype.kind == want.kind \
                and a.dtype.itemsize == want.itemsize:
            a = a.astype(want)  # the same values in the other byte order
        else:
            raise ValueError(f"write_gguf: tensor {t.name!r} ({t.type}) needs data of dtype {want}, got {a.dtype}")
    if a.nbytes != nbytes:
        raise ValueError(f"write_gguf: tensor {t.name!r} ({t.type}, shape {shape}) needs {nbytes} bytes of data, "
                         f"got {a.nbytes} (array of shape {a.shape})")
    fh.write(memoryview(np.ascontiguousarray(a).reshape(-1).view(np.uint8)))
