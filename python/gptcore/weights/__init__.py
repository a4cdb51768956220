"""Weights: the schema, checking, initialisation, and safetensors files.

A model's weights are a plain mapping ``name -> numpy array``. The names are Hugging Face
GPT-2's, without the ``"transformer."`` prefix; this table is the one definition of them.
``d = d_model``, ``f = d_ff``, ``V = vocab_size``, ``i = 0 .. n_layers - 1``:

=================================  ===========  =================================================
name                               shape        present when / meaning
=================================  ===========  =================================================
``wte.weight``                     (V, d)       always: token embedding, row ``v`` is token ``v``
``wpe.weight``                     (n_ctx, d)   ``pos == "learned"``: row ``t`` is position ``t``
``h.{i}.ln_1.weight`` / ``.bias``  (d,)         ``ln_affine``: LayerNorm before attention
``h.{i}.attn.c_attn.weight``       (d, 3d)      always: columns ``[Q | K | V]``; head ``h`` uses
                                                columns ``h*d_head .. (h+1)*d_head - 1`` of each
``h.{i}.attn.c_attn.bias``         (3d,)        ``attn_bias``
``h.{i}.attn.c_proj.weight``       (d, d)       always: attention output projection
``h.{i}.attn.c_proj.bias``         (d,)         ``attn_bias``
``h.{i}.ln_2.weight`` / ``.bias``  (d,)         ``ln_affine``: LayerNorm before the MLP
``h.{i}.mlp.c_fc.weight``          (d, f)       always: MLP up-projection (then GELU, tanh form)
``h.{i}.mlp.c_fc.bias``            (f,)         ``bias``
``h.{i}.mlp.c_proj.weight``        (f, d)       always: MLP down-projection
``h.{i}.mlp.c_proj.bias``          (d,)         ``bias``
``ln_f.weight`` / ``ln_f.bias``    (d,)         ``ln_affine``: final LayerNorm
``lm_head.weight``                 (V, d)       ``not tied``: logits are ``h @ lm_head.weight.T``;
                                                when tied, ``wte.weight`` plays this role
=================================  ===========  =================================================

Orientation: every projection is applied as ``x @ W + b`` with ``W`` of shape
``(in, out)`` -- the layout of GPT-2's ``Conv1D`` and of its checkpoints, so Hugging Face
tensors are used without transposing. Only the embedding tables and the LM head are stored
``(rows, d)``.

Accepted dtypes: float32 and float64 are used as given (never copied by ``validate``);
float16 and bfloat16 (an ``ml_dtypes`` array, or a ``BF16`` tensor in a safetensors file) are
converted exactly to float32. Integer, boolean, complex and other types raise ``TypeError``.
NaN and infinite values are allowed; they propagate through the forward pass.

Real GPT-2 checkpoints also carry non-parameter buffers: ``h.{i}.attn.bias`` (the causal mask,
shape ``(1, 1, n, n)``; not to be confused with the parameter ``h.{i}.attn.c_attn.bias``) and
``h.{i}.attn.masked_bias``. ``normalize_names`` drops them, strips the prefix, and drops a
``lm_head.weight`` equal to ``wte.weight`` (a tied head stored twice).

The package is split by concern: ``schema`` (this table as code, and name normalisation),
``validation`` (dtypes, ``validate``, ``infer_config``), ``initialization``
(``init_weights``), ``formats`` (the storage formats: float32, bfloat16, float16, which
tensors stay float32, rounding and bit patterns), ``safetensors_file`` (the one safetensors
reader and writer), ``hf_config`` (``config.json``) and ``checkpoint`` (Hugging Face folders
and files: ``load_safetensors``, the one-tensor-at-a-time reading of a 16-bit model,
``save_safetensors``).
"""

from .checkpoint import load_safetensors, save_safetensors
from .formats import WEIGHT_DTYPES, from_half_bits, round_weights, to_half_bits
from .initialization import INIT_SCHEMES, init_weights
from .schema import expected_shapes, normalize_names
from .validation import infer_config, validate

__all__ = [
    "INIT_SCHEMES",
    "WEIGHT_DTYPES",
    "expected_shapes",
    "from_half_bits",
    "infer_config",
    "init_weights",
    "load_safetensors",
    "normalize_names",
    "round_weights",
    "save_safetensors",
    "to_half_bits",
    "validate",
]
