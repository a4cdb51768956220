"""Which tensors of a model are stored in which GGUF type, for each ``weight_dtype``.

The rule is llama.cpp's (``tensor_allows_quantization`` in ``src/llama-quant.cpp``, and the
same conditions in ``convert_hf_to_gguf.py``'s ``prepare_tensors``): a tensor takes the
model's weight type only when

* it has at least two dimensions,
* its name ends in ``weight`` but not in ``_norm.weight``, and
* it is not the learned position table (``position_embd.weight``).

So the matrices of the blocks, the token embedding and the head (``output.weight``) are
stored in the weight type; biases, LayerNorm / RMSNorm parameters and the position table stay
float32 (F32). A block type (Q8_0, Q4_0) needs rows (``ne[0]``, the reduction dimension K) of
a multiple of 32 values: a matrix whose K is not stays F32 here, holding its values exactly
(llama.cpp's converter falls back to F16 instead and ``llama-quantize`` refuses such a model
for Q8_0 / Q4_0).

What llama.cpp does beyond this rule, and gptcore does not: ``llama-quantize``'s default Q4_0
mix (not ``--pure``) stores the head, or the token embedding when it doubles as the head, as
Q6_K, a type gptcore does not have; gptcore's Q4_0 files are ``llama-quantize --pure`` files
(every eligible tensor Q4_0). For Q8_0 the two agree: llama.cpp keeps Q8_0 for the head and
the embedding.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Tuple

import numpy as np

from .names import GPT2, LLAMA, Architecture
from .quants import dequantize, quantize

__all__ = ["WEIGHT_DTYPES", "GGUF_TYPES", "takes_weight_type", "storage_type", "model_storage_type",
           "round_model_weights"]

#: gptcore's ``weight_dtype`` names and the GGUF type each stores eligible tensors in.
GGUF_TYPES = {"float32": "F32", "bfloat16": "BF16", "float16": "F16", "q8_0": "Q8_0", "q4_0": "Q4_0"}
WEIGHT_DTYPES = tuple(GGUF_TYPES)


def takes_weight_type(gguf_name: str, shape: Tuple[int, ...]) -> bool:
    """Whether the tensor ``gguf_name`` of numpy ``shape`` is stored in the model's weight type
    (llama.cpp's rule, see the module documentation)."""
    return (len(shape) >= 2 and gguf_name.endswith("weight") and not gguf_name.endswith("_norm.weight")
            and gguf_name != "position_embd.weight")


def storage_type(gguf_name: str, shape: Tuple[int, ...], weight_dtype: str) -> str:
    """The GGUF type (``"F32"``, ``"BF16"``, ``"F16"``, ``"Q8_0"``, ``"Q4_0"``) of the tensor
    ``gguf_name`` of numpy ``shape`` in a file whose weights are ``weight_dtype``."""
    try:
        target = GGUF_TYPES[weight_dtype]
    except (KeyError, TypeError):
        raise ValueError(f"weight_dtype must be one of {', '.join(WEIGHT_DTYPES)}, got {weight_dtype!r}") from None
    if not takes_weight_type(gguf_name, shape):
        return "F32"
    if target in ("Q8_0", "Q4_0") and shape[-1] % 32:
        return "F32"
    return target


def _names(family: str) -> Architecture:
    """The names table of a model family (``"gpt2"``; ``"llama"``, whose Hugging Face names
    Qwen2 and Mistral share)."""
    return GPT2 if family == "gpt2" else LLAMA


def model_storage_type(name: str, shape: Tuple[int, ...], weight_dtype: str, family: str = "gpt2") -> str:
    """``storage_type`` of a tensor known by gptcore's schema name and shape (GPT-2's names and
    ``Conv1D`` matrices ``(in, out)``, or the Llama family's Hugging Face names): the type a
    model with ``weight_dtype`` weights holds it in, the same in memory as in a GGUF file."""
    hit = _names(family).to_gguf(name)
    if hit is None:
        raise ValueError(f"unexpected tensor {name!r} (not a {family} weight name)")
    gguf_name, layout = hit
    gshape = tuple(reversed(shape)) if layout == "transposed" else tuple(shape)
    return storage_type(gguf_name, gshape, weight_dtype)


def round_model_weights(weights: Mapping[str, Any], gguf_type: str) -> Dict[str, np.ndarray]:
    """The float32 model whose weights are those a ``gguf_type`` (``"Q8_0"`` / ``"Q4_0"``) file
    holds: each tensor that ``storage_type`` puts in that type quantized and dequantized in
    GGUF's orientation (blocks along each matrix's reduction dimension K), the others as float32.
    ``weights`` has gptcore's schema names (``gptcore.weights.normalize_names`` gives them); the
    result is a new dict, the input is not modified. ``gptcore.round_weights`` calls this."""
    wd = gguf_type.lower()
    family = "gpt2" if all(GPT2.to_gguf(n) is not None for n in weights) else "llama"
    table = _names(family)
    out: Dict[str, np.ndarray] = {}
    for name, value in weights.items():
        a = np.asarray(value, dtype=np.float32)
        hit = table.to_gguf(name)
        if hit is None:
            raise ValueError(f"round_weights: unexpected tensor {name!r} (not a GPT-2 or Llama-family weight name)")
        gguf_name, layout = hit
        # Blocks run along each matrix's K, a row of its GGUF layout (a row permutation, as
        # llama.cpp's converter applies to Llama's queries and keys, moves whole rows).
        transposed = layout == "transposed"
        g = a.T if transposed else a
        if storage_type(gguf_name, g.shape, wd) == gguf_type:
            d = dequantize(quantize(g, wd), wd)
            a = np.ascontiguousarray(d.T if transposed else d)
        out[name] = a
    return out
