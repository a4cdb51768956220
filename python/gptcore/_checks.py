"""Argument checks shared by the public functions.

The rule, the same everywhere in gptcore: ``TypeError`` when an argument has the wrong type
(a number where a string or dtype is expected, an integer array where floats are needed),
``ValueError`` when it has the right type but a value outside what is supported (a dtype
name gptcore does not compute in, a negative size). The message names the function, the
argument, what is accepted and what was given.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

COMPUTE_DTYPES = ("float32", "float64")


def dtype_name(fn: str, dtype: Any, allowed: Sequence[str] = COMPUTE_DTYPES, *, arg: str = "dtype") -> str:
    """The numpy name of a ``dtype`` argument that must be one of ``allowed``.

    A string, a ``numpy.dtype`` or a type numpy maps to a dtype (``np.float32``, ``float``) is
    the right type; anything else is a ``TypeError``. A name or dtype outside ``allowed``
    (``"float16"``, ``"bfloat16"``, ``"int8"``, a misspelling) is a ``ValueError``.
    """
    accepted = ", ".join(repr(a) for a in allowed)
    if isinstance(dtype, str):
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = dtype  # not a numpy name ("bfloat16", a typo): reported as given
    elif isinstance(dtype, np.dtype) or isinstance(dtype, type):
        try:
            name = np.dtype(dtype).name
        except TypeError:
            raise TypeError(f"{fn}: {arg} must be a dtype name or a numpy dtype ({accepted}), got {dtype!r}") from None
    else:
        raise TypeError(
            f"{fn}: {arg} must be a dtype name or a numpy dtype ({accepted}), got {type(dtype).__name__} {dtype!r}"
        )
    if name not in allowed:
        raise ValueError(f"{fn}: {arg} must be one of {accepted}, got {name!r}")
    return name


def token_ids(what: str, ids: Any) -> np.ndarray:
    """``ids`` as a numpy array of an integer dtype (any shape), or a ``TypeError`` naming
    ``what``. An empty float list (``[]``) counts as integer."""
    if isinstance(ids, np.ndarray):
        arr = ids
    else:
        arr = np.asarray(ids)
        if arr.dtype == object:
            raise TypeError(f"{what} must be integer token ids, got an object array")
        if arr.size == 0 and arr.dtype.kind == "f":
            arr = arr.astype(np.int64)
    if arr.dtype == np.bool_ or arr.dtype.kind not in "iu":
        raise TypeError(f"{what} must be an integer array of token ids, got dtype {arr.dtype}")
    return arr


def check_token_range(what: str, arr: np.ndarray, vocab_size: int, *, position: bool = False) -> None:
    """A ``ValueError`` naming ``what`` and the first bad id (and, with ``position``, where it
    is in a 1-D ``arr``) unless every id is in ``[0, vocab_size)``."""
    if arr.size == 0:
        return
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= vocab_size:
        bad = lo if lo < 0 else hi
        at = f" at position {int(np.flatnonzero(arr == bad)[0])}" if position else ""
        raise ValueError(f"{what}: token id {bad}{at} is out of range [0, {vocab_size})")
