"""GGUF files and ggml's block formats, with numpy only.

* ``format``: the file format's constants and type tables;
* ``reader``: ``GGUFReader``, a checked, memory-mapped reader (tensors as zero-copy views);
* ``writer``: ``write_gguf``, a GGUF v3 writer;
* ``quants``: the reference Q8_0 / Q4_0 quantizers, ``dequantize`` and ``round_weights``;
* ``names``: each architecture's tensor names and layouts (``gpt2``, ``llama``, ``qwen2``);
* ``policy``: which tensors are stored in which type;
* ``tokenizer``: a byte-level BPE tokenizer to and from ``tokenizer.ggml.*`` metadata;
* ``checkpoint``: ``gpt2`` GGUF files as gptcore models (``load_gguf``, ``save_gguf``).

Nothing here needs the ``gguf`` package; the tests use it as an independent reference.
"""

from .checkpoint import describe, is_gguf, load_gguf, save_gguf, write_model
from .format import Value, ValueType
from .quants import QUANT_FORMATS, dequantize, quantize, round_weights
from .reader import GGUFReader, TensorInfo
from .writer import WriterTensor, write_gguf

__all__ = [
    "GGUFReader",
    "QUANT_FORMATS",
    "TensorInfo",
    "Value",
    "ValueType",
    "WriterTensor",
    "dequantize",
    "describe",
    "is_gguf",
    "load_gguf",
    "quantize",
    "round_weights",
    "save_gguf",
    "write_gguf",
    "write_model",
]
