"""gptcore: GPT-style decoders on the CPU, exact and fast.

A Rust core (blocked SIMD matmuls, causal attention, the full decoder) behind a numpy API.

The top-level namespace is the product API (``__all__``). The lessons' models and arithmetic
(``textbook_forward``, ``lesson14_weights``, ``RustlabRng``, ...) live in ``gptcore.lessons``;
asking ``gptcore`` for one of them raises an ``AttributeError`` that names where it is.
"""

from __future__ import annotations

from .accounting import (
    ChinchillaBudget,
    FlopCount,
    LogitsMemory,
    ParamCount,
    chinchilla,
    flops_per_token,
    logits_memory,
    param_count,
)
from .config import PRESETS, GPTConfig
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
from .model import Model, forward, load, softmax
from .tokenizer import Tokenizer
from .weights import (
    expected_shapes,
    from_half_bits,
    infer_config,
    init_weights,
    load_safetensors,
    round_weights,
    save_safetensors,
    to_half_bits,
    validate,
)

__version__ = "0.1.0"

# GPTCORE_KERNEL and GPTCORE_NUM_THREADS: a value the core would silently ignore is warned
# about once, here (see gptcore/_env.py); the gptcore command reports it after reading its
# options instead (--threads makes GPTCORE_NUM_THREADS irrelevant).
import os as _os

from . import _env, _native, lessons

_env.check(_os.environ, _native, defer=_env.running_as_command())
del _os

__all__ = [
    "round_weights",
    "to_half_bits",
    "from_half_bits",
    "ChinchillaBudget",
    "FlopCount",
    "LogitsMemory",
    "ParamCount",
    "chinchilla",
    "flops_per_token",
    "logits_memory",
    "param_count",
    "Tokenizer",
    "GPTConfig",
    "Model",
    "PRESETS",
    "expected_shapes",
    "forward",
    "infer_config",
    "init_weights",
    "load",
    "load_safetensors",
    "save_safetensors",
    "softmax",
    "validate",
    "PackedMatrix",
    "available_kernels",
    "get_num_threads",
    "kernel",
    "matmul",
    "matmul_reference",
    "set_kernel",
    "set_num_threads",
]


def __getattr__(name: str):
    """A name of ``gptcore.lessons`` asked of the top level (where the lessons' names lived
    before it became the product API): an AttributeError that says where the name is."""
    if name in lessons.__all__:
        raise AttributeError(
            f"module 'gptcore' has no attribute {name!r}: the lessons' names live in gptcore.lessons "
            f"(gptcore.lessons.{name}, or: from gptcore.lessons import {name})")
    raise AttributeError(f"module 'gptcore' has no attribute {name!r}")
