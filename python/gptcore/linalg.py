"""Matrix products on the Rust core: ``matmul``, ``PackedMatrix``, kernels and threads."""

from __future__ import annotations

from typing import Optional, Union

import numpy as np

from . import _native
from ._memory import check_alloc
from ._native import PackedMatrix

__all__ = [
    "PackedMatrix",
    "matmul",
    "matmul_reference",
    "set_kernel",
    "kernel",
    "available_kernels",
    "set_num_threads",
    "get_num_threads",
]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
# PackedMatrix.dtype is a name; numpy builds ``dtype.name`` anew at every call (~2 us).
_BY_NAME = {d.name: d for d in _FLOATS}
# A PackedMatrix stored in a format below float32 (bfloat16 / float16 / q8_0 / q4_0)
# multiplies float32 left sides.
_STORED = ("bfloat16", "float16", "q8_0", "q4_0")
_BY_NAME.update({name: np.dtype(np.float32) for name in _STORED})


def _check_operand(name: str, x: object) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise TypeError(f"matmul: {name} must be a numpy.ndarray, got {type(x).__name__}")
    if x.dtype not in _FLOATS:
        raise TypeError(f"matmul: {name} must have dtype float32 or float64, got {x.dtype}")
    if x.ndim != 2:
        raise ValueError(f"matmul: {name} must be 2-D, got shape {x.shape}")
    return x


def matmul(a: np.ndarray, b: Union[np.ndarray, PackedMatrix], *, kernel: Optional[str] = None) -> np.ndarray:
    """Return ``a @ b`` as a new C-contiguous array of the inputs' dtype.

    Every output element is one fused multiply-add chain over k = 0, 1, ..., K-1 in ascending
    order, so the result is bit-identical to ``matmul_reference`` whatever the kernel,
    the block sizes or the thread count. ``a`` may have any strides (transposed views
    included); ``b`` may be a ``PackedMatrix`` packed once and reused. A 16-bit
    ``PackedMatrix(b, dtype="bfloat16" | "float16")`` takes a float32 ``a`` and gives float32,
    bit-identical to ``matmul_reference`` on ``round_weights(b, dtype)``; a block-format
    ``PackedMatrix(b, dtype="q8_0" | "q4_0")`` (blocks of 32 along K, down each column of
    ``b``) the same on ``round_weights(b.T, dtype).T``.

    Examples:
        >>> import numpy as np, gptcore
        >>> a = np.arange(6, dtype=np.float32).reshape(2, 3)
        >>> gptcore.matmul(a, a.T)
        array([[ 5., 14.],
               [14., 50.]], dtype=float32)
    """
    _check_operand("a", a)
    if isinstance(b, PackedMatrix):
        if a.dtype != _BY_NAME[b.dtype]:
            raise TypeError(f"matmul: a has dtype {a.dtype} but the PackedMatrix b holds {b.dtype}"
                            + (f" ({b.dtype} matrices take a float32 a)" if b.dtype in _STORED else ""))
        if a.shape[1] != b.shape[0]:
            raise ValueError(f"matmul: shapes {a.shape} and {b.shape} are not aligned (a.shape[1] != b.shape[0])")
    else:
        _check_operand("b", b)
        if a.dtype != b.dtype:
            raise TypeError(f"matmul: a and b must have the same dtype, got {a.dtype} and {b.dtype}")
        if a.shape[1] != b.shape[0]:
            raise ValueError(f"matmul: shapes {a.shape} and {b.shape} are not aligned (a.shape[1] != b.shape[0])")
    check_alloc(a.shape[0] * (b.shape[1]) * a.dtype.itemsize, "matmul: the result")
    # the operands are packed into panels before the product
    packed = a.shape[0] * a.shape[1] + (0 if isinstance(b, PackedMatrix) else b.shape[0] * b.shape[1])
    check_alloc(packed * a.dtype.itemsize, "matmul: packing the operands")
    return _native.matmul(a, b, kernel)


def matmul_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The naive triple loop with fused multiply-add, in the order of the exactness contract."""
    _check_operand("a", a)
    _check_operand("b", b)
    if a.dtype != b.dtype:
        raise TypeError(f"matmul_reference: a and b must have the same dtype, got {a.dtype} and {b.dtype}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul_reference: shapes {a.shape} and {b.shape} are not aligned")
    check_alloc(a.shape[0] * b.shape[1] * a.dtype.itemsize, "matmul_reference: the result")
    return _native.matmul_reference(a, b)


def set_kernel(name: Optional[str] = None) -> str:
    """Force a micro-kernel (``"avx512"``, ``"avx2"``, ``"neon"``, ``"portable"``); ``None``
    restores the best one the CPU supports. Returns the kernel now active. ``GPTCORE_KERNEL``
    sets the initial choice."""
    if name is not None and not isinstance(name, str):
        raise TypeError(f"set_kernel: name must be a str or None, got {type(name).__name__}")
    return _native.set_kernel(name)


def kernel() -> str:
    """The name of the active micro-kernel."""
    return _native.kernel()


def available_kernels() -> list:
    """The micro-kernels this CPU can run, best first."""
    return list(_native.available_kernels())


def set_num_threads(n: int) -> None:
    """Use ``n`` threads for parallel work (``GPTCORE_NUM_THREADS`` sets the initial value,
    default: the number of cores). Results never depend on it."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"set_num_threads: n must be an int, got {type(n).__name__}")
    if not 1 <= n <= 1024:
        raise ValueError(f"set_num_threads: n must be between 1 and 1024, got {n}")
    _native.set_num_threads(int(n))


def get_num_threads() -> int:
    """The number of threads parallel work uses."""
    return _native.get_num_threads()
