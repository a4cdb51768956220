"""gptcore: GPT-style decoders on the CPU, exact and fast.

A Rust core (blocked SIMD matmuls, causal attention, the full decoder) behind a numpy API.
"""

from __future__ import annotations

from .linalg import (
    PackedMatrix,
    available_kernels,
    get_num_threads,
    kernel,
    matmul,
    matmul_reference,
    set_kernel,
    set_num_threads,
)

__version__ = "0.1.0"

__all__ = [
    "PackedMatrix",
    "available_kernels",
    "get_num_threads",
    "kernel",
    "matmul",
    "matmul_reference",
    "set_kernel",
    "set_num_threads",
]
