"""gptcore: GPT-style decoders on the CPU, exact and fast.

A Rust core (blocked SIMD matmuls, causal attention, the full decoder) behind a numpy API.
"""

from __future__ import annotations

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
from .accounting import (
    ChinchillaBudget,
    FlopCount,
    LogitsMemory,
    ParamCount,
    chinchilla,
    flops_per_token,
    lesson14_counting,
    logits_memory,
    param_count,
)
from .lessons import (
    LESSON14_IDS_1BASED,
    RustlabRng,
    lesson13_block,
    lesson14_config,
    lesson14_weights,
    textbook_block,
    textbook_forward,
    to_zero_based,
)
from .model import Model, forward, load, softmax
from .tokenizer import Tokenizer
from .half import from_half_bits, round_weights, to_half_bits
from .weights import expected_shapes, infer_config, init_weights, load_safetensors, save_safetensors, validate

__version__ = "0.1.0"

# GPTCORE_KERNEL and GPTCORE_NUM_THREADS: a value the core would silently ignore is warned
# about once, here (see gptcore/_env.py).
import os as _os

from . import _env, _native

_env.check(_os.environ, _native)
del _os

__all__ = [
    "round_weights",
    "to_half_bits",
    "from_half_bits",
    "ChinchillaBudget",
    "FlopCount",
    "LESSON14_IDS_1BASED",
    "LogitsMemory",
    "ParamCount",
    "RustlabRng",
    "chinchilla",
    "flops_per_token",
    "lesson13_block",
    "lesson14_config",
    "lesson14_counting",
    "lesson14_weights",
    "logits_memory",
    "param_count",
    "textbook_block",
    "textbook_forward",
    "to_zero_based",
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
