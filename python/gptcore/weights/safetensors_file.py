"""The safetensors file format: the one reader and the one writer of gptcore.

A file is ``u64 little-endian N | N bytes of JSON header | data``. The header maps each tensor
name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets into the data) and may
hold ``"__metadata__"``, an object of strings. The reader checks a header as the format
defines it (and as the ``safetensors`` library checks it): known dtypes, non-negative
dimensions, byte ranges that hold exactly ``shape`` values of ``dtype``, and together cover the
data from its first byte to the file's last, without gap or overlap. Anything else is a
``ValueError`` naming the file (and the tensor); nothing is read before the whole header is
checked.

Tensors are then read one at a time (``read_tensor``), so that a caller can convert and drop
each before the next: loading a 16-bit checkpoint never holds a float32 copy of the model.

The writer puts the tensors in the order the ``safetensors`` library does (by dtype, widest
first, then by name: every tensor starts at a multiple of its item size) and pads the header
with spaces to a multiple of 8 bytes, so a file it writes is byte for byte the file
``safetensors.numpy.save_file`` writes for the same tensors and metadata (up to the order of
the metadata's keys, which the library keeps in a hash map).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Tuple

import numpy as np

__all__ = ["TensorEntry", "numpy_dtype", "read_header", "read_tensor", "same_bytes", "write_file"]

# Every dtype the format defines, in the safetensors library's order (the writer sorts by it,
# latest first), with its bits per value.
_BITS: Dict[str, int] = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8,
    "F8_E8M0": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32,
    "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}
_ORDER = {code: i for i, code in enumerate(_BITS)}

# The dtypes read into numpy arrays: BF16 (which numpy lacks) as its uint16 bit patterns;
# integer and bool tensors as they are, for the caller to refuse by numpy's name for the type.
_NUMPY: Dict[str, str] = {
    "BOOL": "?", "U8": "u1", "I8": "i1", "I16": "<i2", "U16": "<u2", "F16": "<f2", "BF16": "<u2",
    "I32": "<i4", "U32": "<u4", "F32": "<f4", "I64": "<i8", "U64": "<u8", "F64": "<f8",
}
_WRITES = {"F64": "<f8", "F32": "<f4", "BF16": "<u2", "F16": "<f2"}

# The format's limit on the header (the safetensors library refuses longer ones).
_MAX_HEADER = 100_000_000


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a file: its name and safetensors dtype as the header gives them, its
    shape, and where its bytes are (``offset`` from the start of the file)."""

    path: Path
    name: str
    dtype: str
    shape: Tuple[int, ...]
    offset: int
    nbytes: int


def _bad(fn: str, path: Path, msg: str) -> ValueError:
    return ValueError(f"{fn}: {str(path)!r} is not a readable safetensors file: {msg}")


def read_header(path: Path, fn: str) -> Tuple[List[TensorEntry], Dict[str, str]]:
    """The tensors of the file at ``path`` in header order, every entry checked against the
    file (see the module), and its metadata. ``ValueError`` prefixed with ``fn`` and naming
    the file (and the tensor) for anything the format does not allow; ``OSError`` as opening
    and reading the file raise it."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise _bad(fn, path, "shorter than its 8-byte header length")
        n = int.from_bytes(head, "little")
        if n > size - 8:
            raise _bad(fn, path, f"the header length {n} exceeds the file ({size} bytes)")
        if n > _MAX_HEADER:
            raise _bad(fn, path, f"the header length {n} exceeds the format's limit of {_MAX_HEADER} bytes")
        text = fh.read(n)
    if len(text) != n:
        raise _bad(fn, path, "the file ended inside its header")
    try:
        header = json.loads(text.decode("utf-8"))
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        raise _bad(fn, path, f"the header is not UTF-8 JSON ({e})") from None
    if not isinstance(header, dict):
        raise _bad(fn, path, "the header is not a JSON object")
    metadata = header.pop("__metadata__", None)
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise _bad(fn, path, "__metadata__ must be an object of strings")
    data_len = size - 8 - n
    entries = []
    for name, info in header.items():
        entries.append(_entry(fn, path, name, info, 8 + n, data_len))
    # The byte ranges, in order, must tile the data exactly.
    end = 0
    for e in sorted(entries, key=lambda e: (e.offset, e.offset + e.nbytes)):
        if e.offset - 8 - n != end:
            raise _bad(fn, path, f"tensor {e.name!r} starts at byte {e.offset - 8 - n} of the data, where "
                                 f"{'the data begins' if end == 0 else 'the previous tensor ends'} at {end}")
        end += e.nbytes
    if end != data_len:
        raise _bad(fn, path, f"the tensors hold {end} bytes of the {data_len} bytes of data after the header")
    return entries, dict(metadata)


def _entry(fn: str, path: Path, name: str, info: object, base: int, data_len: int) -> TensorEntry:
    def bad(msg: str) -> ValueError:
        return _bad(fn, path, f"tensor {name!r} {msg}")

    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
        raise bad(f"has a malformed entry {info!r}")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str) or dtype not in _BITS:
        raise bad(f"has an unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
        raise bad(f"has a malformed shape {shape!r} (a list of integers >= 0)")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(v) is int and v >= 0 for v in offsets)):
        raise bad(f"has malformed data_offsets {offsets!r} (two integers >= 0)")
    start, end = offsets
    if start > end:
        raise bad(f"has data_offsets {offsets} that run backwards")
    if end > data_len:
        raise bad(f"has byte range [{start}, {end}) outside the data ({data_len} bytes)")
    nbytes = end - start
    bits = _BITS[dtype]
    if (8 * nbytes) % bits:
        raise bad(f"({dtype}) has {nbytes} bytes, not a whole number of {bits}-bit values")
    want_bits = math.prod(shape) * bits
    if want_bits != 8 * nbytes:
        raise bad(f"holds {nbytes} bytes; shape {shape} of {dtype} needs {want_bits / 8:g}")
    return TensorEntry(path, name, dtype, tuple(shape), base + start, nbytes)


def numpy_dtype(entry: TensorEntry, fn: str) -> np.dtype:
    """The numpy dtype ``read_tensor`` gives the tensor (``uint16`` for ``BF16``);
    ``TypeError`` naming the tensor, the file and the dtype for a dtype numpy cannot hold
    (F8, F4, F6, C64)."""
    code = _NUMPY.get(entry.dtype)
    if code is None:
        raise TypeError(
            f"{fn}: tensor {entry.name!r} in {str(entry.path)!r} has dtype {entry.dtype}, which numpy cannot "
            "hold; expected F32, F64, F16 or BF16"
        )
    return np.dtype(code)


def read_tensor(entry: TensorEntry, fn: str) -> np.ndarray:
    """The tensor's values as stored, in a new array of native byte order: numpy's type for
    the safetensors dtype, ``uint16`` bit patterns for ``BF16`` (see ``numpy_dtype``)."""
    dt = numpy_dtype(entry, fn)
    count = entry.nbytes // dt.itemsize
    with open(entry.path, "rb") as fh:
        fh.seek(entry.offset)
        a = np.fromfile(fh, dtype=dt, count=count)
    if a.size != count:  # the file changed since its header was read
        raise ValueError(f"{fn}: {str(entry.path)!r} ended inside tensor {entry.name!r}")
    return a.astype(dt.newbyteorder("="), copy=False).reshape(entry.shape)


def same_bytes(a: TensorEntry, b: TensorEntry) -> bool:
    """Whether two tensors have the same dtype, shape and bytes (read in pieces)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    chunk = 1 << 22
    with open(a.path, "rb") as fa, open(b.path, "rb") as fb:
        fa.seek(a.offset)
        fb.seek(b.offset)
        left = a.nbytes
        while left > 0:
            k = min(chunk, left)
            if fa.read(k) != fb.read(k):
                return False
            left -= k
    return True


def write_file(path: Path, tensors: Mapping[str, Tuple[str, np.ndarray]], metadata: Mapping[str, str]) -> None:
    """Write ``tensors`` (name -> (safetensors dtype, array)) and ``metadata`` as a
    safetensors file at ``path`` (replaced if it exists). The dtypes written are F64, F32,
    F16 and BF16; a BF16 tensor is given as its ``uint16`` bit patterns, an F16 tensor as
    float16 values or its patterns, the others as values (converted to the dtype)."""
    order = sorted(tensors, key=lambda k: (-_ORDER[tensors[k][0]], k))
    header: Dict[str, object] = {"__metadata__": dict(metadata)}
    blobs = []
    offset = 0
    for name in order:
        code, array = tensors[name]
        if code in ("BF16", "F16") and array.dtype == np.uint16:  # bit patterns, as they are
            data = np.require(array, "<u2", ["C"])
        elif code == "BF16":
            raise TypeError(f"write_file: BF16 tensor {name!r} must be given as uint16 bit patterns, got {array.dtype}")
        else:
            data = np.require(array, _WRITES[code], ["C"])
        header[name] = {"dtype": code, "shape": list(data.shape), "data_offsets": [offset, offset + data.nbytes]}
        offset += data.nbytes
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as fh:
        fh.write(len(text).to_bytes(8, "little"))
        fh.write(text)
        for data in blobs:
            fh.write(data.tobytes())
