"""Tensor names and layouts of each architecture in GGUF, one table per architecture.

Each entry pairs a checkpoint name (gptcore's schema name for ``gpt2``; Hugging Face's names
for ``llama`` and ``qwen2``, which the Llama family's schema takes over when it lands) with
its GGUF name (llama.cpp's ``LLM_TENSOR_*`` names, as ``convert_hf_to_gguf.py`` writes them)
and the *layout*: how the array in the checkpoint becomes the array in the file.

* ``"same"``: the same array (GGUF's numpy shape is the checkpoint's shape).
* ``"transposed"``: GPT-2's ``Conv1D`` matrices are stored ``(in, out)`` in the checkpoint and
  ``(out, in)`` in GGUF (``ne[0] = in``: rows along the reduction dimension K, the axis that
  Q8_0 / Q4_0 blocks run along).
* ``"rope_q"`` / ``"rope_k"``: Llama's query and key projections (weights and biases), whose
  rows llama.cpp's converter permutes from Hugging Face's rotate-half rotary layout (pairs
  ``(i, i + d/2)`` of a head) back to the interleaved layout its ``llama`` architecture
  rotates (pairs ``(2i, 2i + 1)``); ``rope_k`` uses the key/value head count. Reading such a
  file into the Hugging Face layout applies the inverse (``unpermute_rope``). Qwen2 is
  converted without the permutation (its rotary is the rotate-half one in llama.cpp too).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

__all__ = ["TensorName", "Architecture", "ARCHITECTURES", "GPT2", "LLAMA", "QWEN2", "permute_rope", "unpermute_rope",
           "to_gguf_layout", "from_gguf_layout"]

LAYOUTS = ("same", "transposed", "rope_q", "rope_k")


@dataclass(frozen=True)
class TensorName:
    """``source`` (checkpoint name) <-> ``gguf`` (file name) with ``layout``; ``{i}`` stands for
    the block number in a block's names."""

    source: str
    gguf: str
    layout: str = "same"


@dataclass(frozen=True)
class Architecture:
    """The tensor names of one GGUF architecture (``general.architecture``)."""

    name: str
    model_tensors: Tuple[TensorName, ...]
    block_tensors: Tuple[TensorName, ...]

    def _match(self, name: str, attr: str) -> Optional[Tuple[TensorName, Optional[int]]]:
        for t in self.model_tensors:
            if getattr(t, attr) == name:
                return t, None
        for t in self.block_tensors:
            pattern = "^" + re.escape(getattr(t, attr)).replace(r"\{i\}", "(0|[1-9][0-9]{0,8})") + "$"
            m = re.match(pattern, name)
            if m:
                return t, int(m.group(1))
        return None

    def to_gguf(self, source: str) -> Optional[Tuple[str, str]]:
        """``(gguf name, layout)`` of the checkpoint tensor ``source``, or None if the table has
        no such name."""
        hit = self._match(source, "source")
        if hit is None:
            return None
        t, i = hit
        return (t.gguf if i is None else t.gguf.format(i=i)), t.layout

    def from_gguf(self, gguf: str) -> Optional[Tuple[str, str]]:
        """``(checkpoint name, layout)`` of the file's tensor ``gguf``, or None."""
        hit = self._match(gguf, "gguf")
        if hit is None:
            return None
        t, i = hit
        return (t.source if i is None else t.source.format(i=i)), t.layout

    def names(self, n_layers: int) -> List[TensorName]:
        """Every name of a model with ``n_layers`` blocks (block numbers filled in)."""
        out = list(self.model_tensors)
        for i in range(n_layers):
            out += [TensorName(t.source.format(i=i), t.gguf.format(i=i), t.layout) for t in self.block_tensors]
        return out


def _block(prefix: str, pairs: List[Tuple[str, str, str]]) -> Tuple[TensorName, ...]:
    return tuple(TensorName(prefix + s, "blk.{i}." + g, layout) for s, g, layout in pairs)


#: GPT-2 (gptcore's schema names, ``h.{i}...`` without the ``transformer.`` prefix).
GPT2 = Architecture(
    "gpt2",
    (
        TensorName("wte.weight", "token_embd.weight"),
        TensorName("wpe.weight", "position_embd.weight"),
        TensorName("ln_f.weight", "output_norm.weight"),
        TensorName("ln_f.bias", "output_norm.bias"),
        TensorName("lm_head.weight", "output.weight"),
    ),
    _block("h.{i}.", [
        ("ln_1.weight", "attn_norm.weight", "same"),
        ("ln_1.bias", "attn_norm.bias", "same"),
        ("attn.c_attn.weight", "attn_qkv.weight", "transposed"),
        ("attn.c_attn.bias", "attn_qkv.bias", "same"),
        ("attn.c_proj.weight", "attn_output.weight", "transposed"),
        ("attn.c_proj.bias", "attn_output.bias", "same"),
        ("ln_2.weight", "ffn_norm.weight", "same"),
        ("ln_2.bias", "ffn_norm.bias", "same"),
        ("mlp.c_fc.weight", "ffn_up.weight", "transposed"),
        ("mlp.c_fc.bias", "ffn_up.bias", "same"),
        ("mlp.c_proj.weight", "ffn_down.weight", "transposed"),
        ("mlp.c_proj.bias", "ffn_down.bias", "same"),
    ]),
)


def _llama_like(name: str, q: str, k: str) -> Architecture:
    return Architecture(
        name,
        (
            TensorName("model.embed_tokens.weight", "token_embd.weight"),
            TensorName("model.norm.weight", "output_norm.weight"),
            TensorName("lm_head.weight", "output.weight"),
        ),
        _block("model.layers.{i}.", [
            ("input_layernorm.weight", "attn_norm.weight", "same"),
            ("self_attn.q_proj.weight", "attn_q.weight", q),
            ("self_attn.q_proj.bias", "attn_q.bias", q),
            ("self_attn.k_proj.weight", "attn_k.weight", k),
            ("self_attn.k_proj.bias", "attn_k.bias", k),
            ("self_attn.v_proj.weight", "attn_v.weight", "same"),
            ("self_attn.v_proj.bias", "attn_v.bias", "same"),
            ("self_attn.o_proj.weight", "attn_output.weight", "same"),
            ("self_attn.o_proj.bias", "attn_output.bias", "same"),
            ("post_attention_layernorm.weight", "ffn_norm.weight", "same"),
            ("mlp.gate_proj.weight", "ffn_gate.weight", "same"),
            ("mlp.gate_proj.bias", "ffn_gate.bias", "same"),
            ("mlp.up_proj.weight", "ffn_up.weight", "same"),
            ("mlp.up_proj.bias", "ffn_up.bias", "same"),
            ("mlp.down_proj.weight", "ffn_down.weight", "same"),
            ("mlp.down_proj.bias", "ffn_down.bias", "same"),
        ]),
    )


#: Llama and Mistral (llama.cpp's converter writes both as ``llama``), Hugging Face names.
LLAMA = _llama_like("llama", "rope_q", "rope_k")
#: Qwen2, Hugging Face names: no row permutation.
QWEN2 = _llama_like("qwen2", "same", "same")

ARCHITECTURES: Dict[str, Architecture] = {a.name: a for a in (GPT2, LLAMA, QWEN2)}


def permute_rope(w: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's converter's row permutation of a query (``n_heads`` = attention heads) or key
    (``n_heads`` = key/value heads) projection, weight ``(n_heads * d_head, in)`` or bias
    ``(n_heads * d_head,)``: within each head, row ``half * d_head/2 + i`` (Hugging Face's
    rotate-half layout) moves to row ``2 * i + half`` (interleaved pairs)."""
    rows = w.shape[0]
    if n_heads < 1 or rows % (2 * n_heads):
        raise ValueError(f"permute_rope: {rows} rows do not split into {n_heads} heads of an even width")
    return w.reshape(n_heads, 2, rows // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_rope(w: np.ndarray, n_heads: int) -> np.ndarray:
    """The inverse of ``permute_rope``: GGUF's interleaved rows back to Hugging Face's layout."""
    rows = w.shape[0]
    if n_heads < 1 or rows % (2 * n_heads):
        raise ValueError(f"unpermute_rope: {rows} rows do not split into {n_heads} heads of an even width")
    return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def to_gguf_layout(w: np.ndarray, layout: str, n_heads: Optional[int] = None,
                   n_kv_heads: Optional[int] = None) -> np.ndarray:
    """The checkpoint array ``w`` in GGUF's layout (a view where possible; see the module
    documentation). ``rope_q`` needs ``n_heads``, ``rope_k`` ``n_kv_heads``."""
    if layout == "same":
        return w
    if layout == "transposed":
        return w.T
    if layout == "rope_q":
        return permute_rope(w, _heads(n_heads, "n_heads", layout))
    if layout == "rope_k":
        return permute_rope(w, _heads(n_kv_heads, "n_kv_heads", layout))
    raise ValueError(f"unknown layout {layout!r}; one of {', '.join(LAYOUTS)}")


def from_gguf_layout(w: np.ndarray, layout: str, n_heads: Optional[int] = None,
                     n_kv_heads: Optional[int] = None) -> np.ndarray:
    """The inverse of ``to_gguf_layout``."""
    if layout == "same":
        return w
    if layout == "transposed":
        return w.T
    if layout == "rope_q":
        return unpermute_rope(w, _heads(n_heads, "n_heads", layout))
    if layout == "rope_k":
        return unpermute_rope(w, _heads(n_kv_heads, "n_kv_heads", layout))
    raise ValueError(f"unknown layout {layout!r}; one of {', '.join(LAYOUTS)}")


def _heads(n: Optional[int], what: str, layout: str) -> int:
    if n is None:
        raise ValueError(f"layout {layout!r} needs {what}")
    return n
