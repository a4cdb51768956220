"""Reading GGUF files: memory-mapped, checked, with numpy only.

``GGUFReader(path)`` parses the header, the metadata and the tensor infos and checks every
one of them against the file before anything is handed out; the tensors are then zero-copy
views of the memory map (read-only):

=========  ===========================================================================
type       ``reader.tensor(name)``
=========  ===========================================================================
F32        ``float32`` array of the tensor's shape
F16        ``float16`` array of the tensor's shape
BF16       ``uint16`` array of the bit patterns (numpy has no bfloat16)
Q8_0       structured array of ``format.Q8_0_BLOCK`` (fields ``d``, ``qs``), shape
           ``shape[:-1] + (shape[-1] // 32,)``: the blocks as they lie in the file
Q4_0       the same with ``format.Q4_0_BLOCK``
=========  ===========================================================================

``shape`` is numpy's order (``ne`` reversed: the last axis is ``ne[0]``, a row). Tensors of
any other type are listed (``reader.tensors``) and sized, but handing one out raises a
``ValueError`` that names the type and the tensor. ``reader.to_float32(name)`` makes a float32
copy (dequantizing Q8_0/Q4_0), ``reader.raw(name)`` is the tensor's bytes.

A malformed file raises ``ValueError("<path> is not a valid GGUF file: <what is wrong>")``
before any value is read past the end of the file: a wrong magic or version, a truncated
header, a count or string length larger than the file, a tensor past the end of the file or
overlapping another, a misaligned offset, an unknown type, dimensions that overflow. Nothing
else is raised for any content of the file (the fuzz tests hold this up).
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np

from .format import (
    BLOCK_DTYPES,
    DEFAULT_ALIGNMENT,
    MAGIC,
    MAX_DIMS,
    READABLE_TYPES,
    READABLE_VERSIONS,
    SCALAR_DTYPES,
    TYPE_IDS,
    TensorType,
    Value,
    ValueType,
    tensor_nbytes,
)

__all__ = ["GGUFReader", "TensorInfo"]

PathLike = Union[str, "os.PathLike[str]"]

_INT64_MAX = 2**63 - 1
# Nested arrays deeper than this are refused (a recursion bomb otherwise); real files nest 0.
_MAX_NESTING = 4
# The fewest bytes a metadata entry (key length, empty key, type, a one-byte value) and a tensor
# info (name length, empty name, n_dims, type, offset) can take: counts are checked against
# the file with these before anything is allocated for them.
_MIN_KV_BYTES = 8 + 4 + 1
_MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8
_MIN_ELEMENT_BYTES = {**{t: d.itemsize for t, d in SCALAR_DTYPES.items()}, ValueType.STRING: 8,
                      ValueType.ARRAY: 4 + 8}


class _Malformed(Exception):
    """What is wrong with the file (turned into a ValueError naming the file)."""


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a GGUF file: ``name``, ``type`` (``"F32"``, ``"Q8_0"``, ...), ``ne`` (ggml's
    dimensions, innermost first), ``offset`` (absolute, in bytes from the start of the file)
    and ``nbytes``."""

    name: str
    type: str
    ne: Tuple[int, ...]
    offset: int
    nbytes: int

    @property
    def shape(self) -> Tuple[int, ...]:
        """numpy's shape: ``ne`` reversed (a weight matrix is ``(rows, K)``)."""
        return tuple(reversed(self.ne))

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.ne:
            n *= d
        return n


class _Cursor:
    """Bounds-checked little-endian reads from a buffer."""

    def __init__(self, buf: Any, size: int) -> None:
        self.buf, self.size, self.pos = buf, size, 0

    def need(self, n: int, what: str) -> None:
        if n > self.size - self.pos:
            raise _Malformed(f"{what} at byte {self.pos} needs {n} bytes, but the file ends at byte {self.size}")

    def unpack(self, fmt: str, n: int, what: str) -> int:
        self.need(n, what)
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return v

    def u32(self, what: str) -> int:
        return self.unpack("<I", 4, what)

    def u64(self, what: str) -> int:
        return self.unpack("<Q", 8, what)

    def string(self, what: str) -> str:
        start = self.pos
        n = self.u64(f"the length of {what}")
        if n > self.size - self.pos:
            raise _Malformed(f"{what} at byte {start} has length {n}, larger than the rest of the file "
                             f"({self.size - self.pos} bytes)")
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise _Malformed(f"{what} at byte {start} is not UTF-8 ({e.reason} at byte {e.start})") from None

    def array(self, dtype: np.dtype, count: int, what: str) -> np.ndarray:
        self.need(count * dtype.itemsize, what)
        a = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.pos).copy()
        self.pos += count * dtype.itemsize
        return a.astype(dtype.newbyteorder("="), copy=False)


def _value_type(code: int, what: str) -> ValueType:
    try:
        return ValueType(code)
    except ValueError:
        raise _Malformed(f"{what} has unknown value type {code}") from None


def _read_value(cur: _Cursor, vtype: ValueType, what: str, depth: int = 0) -> Value:
    if vtype == ValueType.STRING:
        return Value(vtype, cur.string(what))
    if vtype == ValueType.ARRAY:
        if depth >= _MAX_NESTING:
            raise _Malformed(f"{what} nests arrays more than {_MAX_NESTING} deep")
        etype = _value_type(cur.u32(f"the element type of {what}"), f"{what}'s element")
        count = cur.u64(f"the length of {what}")
        if count * _MIN_ELEMENT_BYTES[etype] > cur.size - cur.pos:
            raise _Malformed(f"{what} claims {count} elements of type {etype.name}, more than the rest of the "
                             f"file ({cur.size - cur.pos} bytes) can hold")
        if etype == ValueType.STRING:
            items: Any = [cur.string(f"{what}[{i}]") for i in range(count)]
        elif etype == ValueType.ARRAY:
            items = [_read_value(cur, ValueType.ARRAY, f"{what}[{i}]", depth + 1) for i in range(count)]
        else:
            items = cur.array(SCALAR_DTYPES[etype], count, what)
            if etype == ValueType.BOOL:
                items = items != 0
        return Value(ValueType.ARRAY, items, etype)
    dt = SCALAR_DTYPES[vtype]
    raw = cur.array(dt, 1, what)[0]
    if vtype == ValueType.BOOL:
        return Value(vtype, bool(raw))
    return Value(vtype, float(raw) if dt.kind == "f" else int(raw))


def _plain(v: Value) -> Any:
    """A metadata value as plain Python: int, float, bool, str, a numpy array (numbers), a
    list of str, or a list of such (nested arrays)."""
    if v.type == ValueType.ARRAY and v.element_type == ValueType.ARRAY:
        return [_plain(x) for x in v.value]
    return v.value


class GGUFReader:
    """A GGUF file, memory-mapped and checked (see the module documentation).

    Attributes: ``path``, ``version``, ``alignment``, ``data_offset`` (where the tensor data
    starts), ``fields`` (key -> ``Value``, in file order), ``metadata`` (key -> plain value),
    ``tensors`` (name -> ``TensorInfo``, in file order). Use it as a context manager or call
    ``close()``; views handed out keep the mapping alive until they are gone.
    """

    def __init__(self, path: PathLike) -> None:
        try:
            self.path = Path(os.fspath(path))
        except TypeError:
            raise TypeError(f"GGUFReader: path must be a str or os.PathLike, got {type(path).__name__}") from None
        self._mm: Optional[mmap.mmap] = None
        try:
            fh = open(self.path, "rb")
        except FileNotFoundError:
            raise
        except IsADirectoryError:
            raise ValueError(f"{str(self.path)!r} is a folder, not a GGUF file") from None
        except OSError as e:
            raise ValueError(f"{str(self.path)!r} cannot be read: {e.strerror or e}") from None
        with fh:
            try:
                size = os.fstat(fh.fileno()).st_size
                head = fh.read(4)
                if size >= 24 and head == MAGIC:
                    self._mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError) as e:
                raise ValueError(f"{str(self.path)!r} cannot be read: {getattr(e, 'strerror', None) or e}") from None
        if head != MAGIC[:len(head)]:
            raise self._error(f"it does not start with the magic {MAGIC!r} (found {head!r})")
        if self._mm is None:
            raise self._error(f"the file has {size} bytes, fewer than the 24-byte header")
        self.size = len(self._mm)
        try:
            self._parse()
        except _Malformed as e:
            self.close()
            raise self._error(str(e)) from None

    def _error(self, what: str) -> ValueError:
        return ValueError(f"{str(self.path)!r} is not a valid GGUF file: {what}")

    # ------------------------------------------------------------------ parsing
    def _parse(self) -> None:
        assert self._mm is not None
        cur = _Cursor(self._mm, self.size)
        magic = bytes(self._mm[:4])
        if magic != MAGIC:
            raise _Malformed(f"it does not start with the magic {MAGIC!r} (found {magic!r})")
        cur.pos = 4
        version = cur.u32("the version")
        if version & 0xFFFF == 0 and version != 0:
            raise _Malformed(f"the version reads as {version:#x}: a big-endian file (gptcore reads little-endian GGUF)")
        if version not in READABLE_VERSIONS:
            raise _Malformed(f"version {version} (readable: {', '.join(map(str, READABLE_VERSIONS))})")
        self.version = version
        n_tensors = cur.u64("the tensor count")
        n_kv = cur.u64("the metadata count")
        rest = self.size - cur.pos
        if n_kv * _MIN_KV_BYTES > rest:
            raise _Malformed(f"the metadata count {n_kv} is larger than the file ({rest} bytes after the header) can hold")
        if n_kv * _MIN_KV_BYTES + n_tensors * _MIN_TENSOR_INFO_BYTES > rest:
            raise _Malformed(f"the tensor count {n_tensors} is larger than the file ({rest} bytes after the header) can hold")

        fields: Dict[str, Value] = {}
        for i in range(n_kv):
            start = cur.pos
            key = cur.string(f"metadata key {i}")
            if not key:
                raise _Malformed(f"metadata key {i} (byte {start}) is empty")
            if key in fields:
                raise _Malformed(f"metadata key {key!r} appears twice")
            vtype = _value_type(cur.u32(f"the type of {key!r}"), f"metadata {key!r}")
            fields[key] = _read_value(cur, vtype, f"metadata {key!r}")
        self.fields = fields
        self.metadata: Dict[str, Any] = {k: _plain(v) for k, v in fields.items()}

        alignment = DEFAULT_ALIGNMENT
        if "general.alignment" in fields:
            a = fields["general.alignment"]
            if a.type != ValueType.UINT32:
                raise _Malformed(f"'general.alignment' must be a UINT32, got {a.type_name}")
            alignment = a.value
            if alignment == 0 or alignment & (alignment - 1):
                raise _Malformed(f"'general.alignment' is {alignment}, not a power of two")
        self.alignment = alignment

        infos: List[Tuple[str, TensorType, Tuple[int, ...], int]] = []
        seen = set()
        for i in range(n_tensors):
            name = cur.string(f"the name of tensor {i}")
            if name in seen:
                raise _Malformed(f"tensor name {name!r} appears twice")
            seen.add(name)
            n_dims = cur.u32(f"the number of dimensions of tensor {name!r}")
            if n_dims > MAX_DIMS:
                raise _Malformed(f"tensor {name!r} has {n_dims} dimensions (at most {MAX_DIMS})")
            ne = tuple(cur.u64(f"dimension {j} of tensor {name!r}") for j in range(n_dims))
            for j, d in enumerate(ne):
                if d > _INT64_MAX:
                    raise _Malformed(f"dimension {j} of tensor {name!r} is {d}, beyond a signed 64-bit integer")
            code = cur.u32(f"the type of tensor {name!r}")
            ttype = TYPE_IDS.get(code)
            if ttype is None:
                raise _Malformed(f"tensor {name!r} has unknown type {code}")
            # The bytes of the tensor and of its float32 (or wider) copies must fit a signed 64-bit
            # size, zero dimensions counted as one: numpy refuses an array of shape (0, 2**62) of
            # 2-byte values as too big even though it holds nothing.
            n = max(ttype.type_size, 8)
            for d in ne:
                n *= max(d, 1)
            if n > _INT64_MAX:
                raise _Malformed(f"the dimensions {list(ne)} of tensor {name!r} ({ttype.name}) overflow a 64-bit size")
            row = ne[0] if ne else 1  # ggml counts a missing dimension as 1
            if row % ttype.block_size:
                raise _Malformed(f"tensor {name!r} of type {ttype.name} has rows of {row} values, not a multiple "
                                 f"of its block size {ttype.block_size}")
            offset = cur.u64(f"the offset of tensor {name!r}")
            infos.append((name, ttype, ne, offset))

        data_offset = cur.pos + (-cur.pos % alignment)
        self.data_offset = data_offset
        tensors: Dict[str, TensorInfo] = {}
        for name, ttype, ne, offset in infos:
            nbytes = tensor_nbytes(ttype, ne)
            if offset % alignment:
                raise _Malformed(f"tensor {name!r} is misaligned: its offset {offset} is not a multiple of the "
                                 f"alignment {alignment}")
            if nbytes and (data_offset + offset > self.size or nbytes > self.size - data_offset - offset):
                raise _Malformed(f"tensor {name!r} ({ttype.name}, {nbytes} bytes at data offset {offset}) runs past "
                                 f"the end of the file ({self.size} bytes, data from byte {data_offset})")
            tensors[name] = TensorInfo(name, ttype.name, ne, data_offset + offset, nbytes)
        spans = sorted((t.offset, t.offset + t.nbytes, t.name) for t in tensors.values() if t.nbytes)
        for (_, end, a), (start, _, b) in zip(spans, spans[1:]):
            if start < end:
                raise _Malformed(f"tensors {a!r} and {b!r} overlap (bytes {start} to {end})")
        self.tensors = tensors

    # ------------------------------------------------------------------ access
    def info(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise KeyError(f"{str(self.path)!r} has no tensor {name!r}") from None

    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes: a read-only ``uint8`` view of the file."""
        t = self.info(name)
        if self._mm is None:
            raise ValueError(f"{str(self.path)!r} is closed")
        if t.nbytes == 0:
            empty = np.zeros(0, dtype=np.uint8)
            empty.flags.writeable = False
            return empty
        return np.frombuffer(self._mm, dtype=np.uint8, count=t.nbytes, offset=t.offset)

    def tensor(self, name: str) -> np.ndarray:
        """The tensor as a read-only view of the file (see the module documentation for the
        dtype of each type); ``ValueError`` naming the type and the tensor for any type
        outside F32, F16, BF16, Q8_0 and Q4_0."""
        t = self.info(name)
        if t.type not in READABLE_TYPES:
            raise ValueError(
                f"{str(self.path)!r}: tensor {name!r} has type {t.type}; gptcore reads "
                f"{', '.join(READABLE_TYPES[:-1])} and {READABLE_TYPES[-1]} tensors")
        raw = self.raw(name)
        shape = t.shape
        if t.type in BLOCK_DTYPES:
            return raw.view(BLOCK_DTYPES[t.type]).reshape(shape[:-1] + (shape[-1] // 32,))
        dt = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}[t.type]
        return raw.view(dt).reshape(shape)

    def to_float32(self, name: str) -> np.ndarray:
        """A float32 copy of the tensor (exact for every readable type: F16 and BF16 widen,
        Q8_0 and Q4_0 blocks are ``d * q`` and ``d * (q - 8)``, products exact in float32)."""
        from .quants import dequantize

        t = self.info(name)
        a = self.tensor(name)
        if t.type in BLOCK_DTYPES:
            return dequantize(a, t.type)
        if t.type == "BF16":
            return np.asarray(a.astype(np.uint32) << 16).view(np.float32)
        return np.asarray(a, dtype=np.float32).copy()

    def __iter__(self) -> Iterator[str]:
        return iter(self.tensors)

    def __repr__(self) -> str:
        return (f"GGUFReader({str(self.path)!r}, version={self.version}, {len(self.fields)} metadata keys, "
                f"{len(self.tensors)} tensors)")

    def close(self) -> None:
        """Drop this reader's mapping (views handed out keep it alive until they are gone)."""
        mm, self._mm = self._mm, None
        if mm is not None:
            try:
                mm.close()
            except BufferError:  # views still exist: the mapping goes with the last of them
                pass

    def __enter__(self) -> "GGUFReader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
