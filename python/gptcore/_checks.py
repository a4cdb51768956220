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
