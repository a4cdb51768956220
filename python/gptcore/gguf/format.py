"""The GGUF file format: its constants, value types and tensor types.

A GGUF file (version 2 or 3, little endian) is laid out as::

    magic "GGUF" | u32 version | u64 tensor count | u64 metadata count
    metadata:     count x (string key | u32 value type | value)
    tensor infos: count x (string name | u32 n_dims | n_dims x u64 ne | u32 type | u64 offset)
    padding to the alignment (metadata ``general.alignment``, u32, a power of two; default 32)
    tensor data:  each tensor at data start + its offset (a multiple of the alignment)

A string is ``u64 byte length | UTF-8 bytes`` (no terminator); an array value is
``u32 element type | u64 count | elements``. ``ne`` lists the dimensions innermost first:
``ne[0]`` is the length of a row (for a weight matrix, the reduction dimension K), so the numpy
shape of a tensor is ``ne`` reversed. A block type (Q8_0, Q4_0, ...) packs ``block_size``
consecutive values of a row into ``type_size`` bytes, so ``ne[0]`` must be a multiple of the
block size.

This module is the one table of these facts that the reader and the writer share.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Dict, NamedTuple, Optional

import numpy as np

__all__ = [
    "MAGIC", "VERSION", "READABLE_VERSIONS", "DEFAULT_ALIGNMENT", "MAX_DIMS", "ValueType", "Value",
    "TensorType", "TENSOR_TYPES", "TYPE_IDS", "READABLE_TYPES", "Q8_0_BLOCK", "Q4_0_BLOCK", "BLOCK_DTYPES",
    "FILE_TYPES", "tensor_nbytes",
]

MAGIC = b"GGUF"
#: The version this package writes.
VERSION = 3
#: Versions this package reads (version 1 used 32-bit counts and is obsolete).
READABLE_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
#: ggml's GGML_MAX_DIMS: a tensor has at most four dimensions.
MAX_DIMS = 4


class ValueType(enum.IntEnum):
    """The type code of a metadata value (``gguf_type``)."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


#: numpy dtype of each fixed-size value type (BOOL: one byte, 0 or 1).
SCALAR_DTYPES: Dict[ValueType, np.dtype] = {
    ValueType.UINT8: np.dtype("<u1"), ValueType.INT8: np.dtype("<i1"),
    ValueType.UINT16: np.dtype("<u2"), ValueType.INT16: np.dtype("<i2"),
    ValueType.UINT32: np.dtype("<u4"), ValueType.INT32: np.dtype("<i4"),
    ValueType.UINT64: np.dtype("<u8"), ValueType.INT64: np.dtype("<i8"),
    ValueType.FLOAT32: np.dtype("<f4"), ValueType.FLOAT64: np.dtype("<f8"),
    ValueType.BOOL: np.dtype("<u1"),
}


@dataclass(frozen=True)
class Value:
    """A metadata value with its GGUF type.

    ``type`` is the value's type; for an ``ARRAY``, ``element_type`` is the type of its
    elements and ``value`` a sequence (a numpy array for numbers and booleans, a list of
    ``str`` for strings, a list of ``Value`` for nested arrays). Integers must fit their type.
    """

    type: ValueType
    value: Any
    element_type: Optional[ValueType] = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "type", ValueType(self.type))
        if self.type == ValueType.ARRAY:
            if self.element_type is None:
                raise TypeError("Value: an ARRAY needs its element_type")
            object.__setattr__(self, "element_type", ValueType(self.element_type))
        elif self.element_type is not None:
            raise TypeError(f"Value: element_type is for ARRAY values, not {self.type.name}")

    @property
    def type_name(self) -> str:
        """``"UINT32"``, ``"STRING"``, ``"ARRAY[STRING]"``, ..."""
        if self.type == ValueType.ARRAY:
            assert self.element_type is not None
            return f"ARRAY[{self.element_type.name}]"
        return self.type.name


class TensorType(NamedTuple):
    """A ggml tensor type: its name, its id, values per block and bytes per block."""

    name: str
    id: int
    block_size: int
    type_size: int


# ggml's type table (ggml.h / gguf's GGML_QUANT_SIZES). Every type is listed so that the sizes,
# offsets and overlaps of any file can be checked, also of tensors gptcore cannot use.
_K = 256
TENSOR_TYPES: Dict[str, TensorType] = {t.name: t for t in (
    TensorType("F32", 0, 1, 4),
    TensorType("F16", 1, 1, 2),
    TensorType("Q4_0", 2, 32, 2 + 16),
    TensorType("Q4_1", 3, 32, 2 + 2 + 16),
    TensorType("Q5_0", 6, 32, 2 + 4 + 16),
    TensorType("Q5_1", 7, 32, 2 + 2 + 4 + 16),
    TensorType("Q8_0", 8, 32, 2 + 32),
    TensorType("Q8_1", 9, 32, 4 + 4 + 32),
    TensorType("Q2_K", 10, _K, 2 + 2 + _K // 16 + _K // 4),
    TensorType("Q3_K", 11, _K, 2 + _K // 4 + _K // 8 + 12),
    TensorType("Q4_K", 12, _K, 2 + 2 + _K // 2 + 12),
    TensorType("Q5_K", 13, _K, 2 + 2 + _K // 2 + _K // 8 + 12),
    TensorType("Q6_K", 14, _K, 2 + _K // 2 + _K // 4 + _K // 16),
    TensorType("Q8_K", 15, _K, 4 + _K + _K // 8),
    TensorType("IQ2_XXS", 16, _K, 2 + _K // 4),
    TensorType("IQ2_XS", 17, _K, 2 + _K // 4 + _K // 32),
    TensorType("IQ3_XXS", 18, _K, 2 + _K // 4 + _K // 8),
    TensorType("IQ1_S", 19, _K, 2 + _K // 8 + _K // 16),
    TensorType("IQ4_NL", 20, 32, 2 + 16),
    TensorType("IQ3_S", 21, _K, 2 + _K // 4 + _K // 8 + _K // 32 + 4),
    TensorType("IQ2_S", 22, _K, 2 + _K // 4 + _K // 16),
    TensorType("IQ4_XS", 23, _K, 2 + 2 + _K // 2 + _K // 64),
    TensorType("I8", 24, 1, 1),
    TensorType("I16", 25, 1, 2),
    TensorType("I32", 26, 1, 4),
    TensorType("I64", 27, 1, 8),
    TensorType("F64", 28, 1, 8),
    TensorType("IQ1_M", 29, _K, _K // 8 + _K // 16 + _K // 32),
    TensorType("BF16", 30, 1, 2),
    TensorType("TQ1_0", 34, _K, 2 + 4 * 13),
    TensorType("TQ2_0", 35, _K, 2 + 64),
    TensorType("MXFP4", 39, 32, 1 + 16),
    TensorType("NVFP4", 40, 64, 4 + 32),
    TensorType("Q1_0", 41, 128, 2 + 16),
)}
TYPE_IDS: Dict[int, TensorType] = {t.id: t for t in TENSOR_TYPES.values()}

#: The tensor types gptcore hands out (the others are listed, sized and refused by name).
READABLE_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0")

#: A Q8_0 block: float16 scale ``d``, 32 signed bytes ``qs``; value ``j`` is ``d * qs[j]``.
Q8_0_BLOCK = np.dtype([("d", "<f2"), ("qs", "i1", (32,))])
#: A Q4_0 block: float16 scale ``d``, 16 bytes of nibbles ``qs``: value ``j`` (``j < 16``) is
#: the low nibble of ``qs[j]``, value ``j + 16`` its high nibble; a value is ``d * (q - 8)``.
Q4_0_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])
BLOCK_DTYPES = {"Q8_0": Q8_0_BLOCK, "Q4_0": Q4_0_BLOCK}
assert Q8_0_BLOCK.itemsize == TENSOR_TYPES["Q8_0"].type_size and Q4_0_BLOCK.itemsize == TENSOR_TYPES["Q4_0"].type_size

#: ``general.file_type`` (llama.cpp's ``llama_ftype``) of a file whose weight matrices are
#: stored in each type.
FILE_TYPES = {"F32": 0, "F16": 1, "Q4_0": 2, "Q8_0": 7, "BF16": 32}


def tensor_nbytes(ttype: TensorType, ne: "tuple[int, ...]") -> int:
    """Bytes of a tensor of type ``ttype`` and dimensions ``ne`` (``ne[0]`` a multiple of the
    block size; Python integers, so no overflow)."""
    n = 1
    for d in ne:
        n *= d
    return n // ttype.block_size * ttype.type_size
