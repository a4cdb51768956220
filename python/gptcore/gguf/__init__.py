"""GGUF files and ggml's block formats, with numpy only.

* ``format``: the file format's constants and type tables;
* ``reader``: ``GGUFReader``, a checked, memory-mapped reader (tensors as zero-copy views);
* ``writer``: ``write_gguf``, a GGUF v3 writer;
* ``quants``: the reference Q8_0 / Q4_0 quantizers and ``dequantize``;
* ``names``: each architecture's tensor names and layouts (``gpt2``, ``llama``, ``qwen2``);
* ``policy``: which tensors are stored in which type;
* ``tokenizer``: a byte-level BPE tokenizer to and from ``tokenizer.ggml.*`` metadata.

Nothing here needs the ``gguf`` package (the tests use it as an independent reference), and
nothing here imports gptcore's weights or model: ``gptcore.weights.gguf_checkpoint`` turns
``gpt2`` files into weights, configuration and tokenizer, for ``gptcore.load`` and
``Model.save``. ``gptcore.round_weights(w, "q8_0")`` gives the dequantized model.
"""

from .format import Value, ValueType
from .quants import QUANT_FORMATS, dequantize, quantize
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
    "quantize",
    "write_gguf",
]
