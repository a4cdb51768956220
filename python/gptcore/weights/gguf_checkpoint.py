"""GGUF files as gptcore weights: the configuration, tensors and tokenizer of the ``gpt2``,
``llama`` and ``qwen2`` architectures.

``gptcore.load`` and ``Model.save`` read and write ``.gguf`` files through this module; the file
format itself (reader, writer, names, block formats, tokenizer metadata) is ``gptcore.gguf``.

Reading (``open_model``): the configuration comes from the metadata (``gpt2.context_length``,
``.embedding_length``, ``.feed_forward_length``, ``.block_count``, ``.attention.head_count``,
``.attention.layer_norm_epsilon``; the vocabulary size from ``token_embd.weight``), the
tokenizer from ``tokenizer.ggml.*`` (see ``gptcore.gguf.tokenizer``), the weights from the
tensors (names and layouts from ``gptcore.gguf.names.GPT2``). The Llama family's files
(``llama``: Llama and Mistral; ``qwen2``) give the same from ``{arch}.*`` keys
(``.attention.head_count_kv``, ``.attention.key_length``, ``.rope.freq_base``,
``.rope.dimension_count``, which must be the head width, ``.attention.layer_norm_rms_epsilon``,
``.rope.scaling.type`` ``none`` or ``linear`` with ``.rope.scaling.factor``; frequency factors
in ``rope_freqs.weight``, llama3's scaling, are refused) and which biases the tensors hold;
their names come from ``gptcore.gguf.names.LLAMA`` / ``QWEN2``, and a ``llama`` file's query
and key rows are permuted back from llama.cpp's interleaved order to Hugging Face's
(``unpermute_rope``; whole runs of blocks for Q8_0 / Q4_0). The head is tied when the file
has no ``output.weight`` or one whose bytes equal ``token_embd.weight``'s (llama.cpp's converter
writes GPT-2's tied head out as a copy). F32, F16 and BF16 tensors are used as they are: for a
float32 / float64 model (16-bit values widen exactly), or with ``weight_dtype="bfloat16"`` /
``"float16"`` for a 16-bit model, one tensor at a time without a float32 copy of the model.
A file with Q8_0 or Q4_0 tensors gives a model of that block format (the one most of its
tensors have) that computes with the blocks as they lie in the file (copied into the kernels'
panels one tensor at a time, never widened to a float32 copy), every other tensor held as its
exact float32 value: the model equals, bit for bit, the float32 model of the file's values
(``weight_dtype="float32"``, which dequantizes). ``weight_dtype="q8_0"`` / ``"q4_0"`` asks for
that format: tensors of it are used as stored, the others quantized to it where
``gptcore.gguf.policy`` says so (a model with these weights built from the file's float32
values); ``"bfloat16"`` / ``"float16"`` round the file's values.

The layer-norm epsilon is stored as float32; it is read back as the shortest decimal that
rounds to that float32 (``1e-05`` for GPT-2's ``1e-5``), which is the value a configuration
written as a decimal started from.

Writing (``write_model``): every tensor in the type ``gptcore.gguf.policy`` gives it (for
``weight_dtype`` ``"float32"``, ``"bfloat16"``, ``"float16"``, ``"q8_0"``, ``"q4_0"``), the
configuration keys above, ``general.file_type`` and the tokenizer. llama.cpp's ``gpt2``
architecture needs every bias and LayerNorm parameter and a learned position table: a model
without biases (``bias=False``) or LayerNorm parameters (``ln_affine=False``) is written with
zero biases and unit / zero LayerNorm parameters, which compute the same values (adding 0 and
multiplying by 1 are exact), and is read back as a model with them; sinusoidal positions are
refused. A tied head is written once (``token_embd.weight``; llama.cpp uses it as the head).
A Llama-family model is written as ``qwen2`` when it has q/k/v biases, else as ``llama`` with
its query and key rows permuted (``permute_rope``), with the keys above; llama3 rope scaling
is refused.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple, Union

import numpy as np

from .. import _native
from ..config import GPTConfig, RopeScaling
from ..gguf.format import BLOCK_DTYPES as BLOCK_DTYPES_BY_TYPE
from ..gguf.format import FILE_TYPES, READABLE_TYPES, Value, ValueType
from ..gguf.names import ARCHITECTURES, from_gguf_layout, to_gguf_layout
from ..gguf.policy import GGUF_TYPES, WEIGHT_DTYPES, model_storage_type, storage_type
from ..gguf.quants import QK
from ..gguf.reader import GGUFReader
from ..gguf.tokenizer import tokenizer_from_metadata, tokenizer_metadata
from ..gguf.writer import WriterTensor, write_gguf
from . import schema, validation
from .formats import BLOCK_DTYPES, FLOAT32_KINDS, HALF_DTYPES, to_half_bits

__all__ = ["ModelParts", "config_from_metadata", "config_metadata", "read_weights", "open_model", "write_model",
           "is_gguf", "describe"]

PathLike = Union[str, "os.PathLike[str]"]

#: The architectures gptcore reads and writes: GPT-2 and the Llama family (``llama``, also
#: Mistral's; ``qwen2``).
_ARCHITECTURES = ARCHITECTURES
_QUANTIZED = ("Q8_0", "Q4_0")


def is_gguf(path: PathLike) -> bool:
    """Whether ``path`` names a GGUF file: its name ends in ``.gguf`` (whether or not it exists,
    so that the GGUF reader reports what is wrong with it), or it is a file that starts with
    GGUF's magic."""
    try:
        p = Path(os.fspath(path))
    except TypeError:
        return False  # the loader that handles other paths says what is wrong with this one
    if p.suffix.lower() == ".gguf":
        return True
    try:
        if p.is_file():
            with open(p, "rb") as fh:
                return fh.read(4) == b"GGUF"
    except OSError:
        pass
    return False


def _shortest_float32(x: float) -> float:
    """The shortest decimal that rounds to the float32 ``x``, as a Python float."""
    return float(np.format_float_positional(np.float32(x), unique=True, trim="-")) if np.isfinite(x) else x


def _where(reader: GGUFReader) -> str:
    return repr(str(reader.path))


def _integer(reader: GGUFReader, full: str, default: Optional[int] = None) -> int:
    """The integer metadata value ``full``; ``ValueError`` naming the file and the key when it
    is missing (and has no ``default``) or no integer."""
    f = reader.fields.get(full)
    if f is None:
        if default is not None:
            return default
        raise ValueError(f"{_where(reader)} has no {full!r}")
    if f.type not in (ValueType.UINT8, ValueType.UINT16, ValueType.UINT32, ValueType.UINT64,
                      ValueType.INT8, ValueType.INT16, ValueType.INT32, ValueType.INT64):
        raise ValueError(f"{_where(reader)}: {full!r} must be an integer, got {f.type_name}")
    return int(f.value)


def _float(reader: GGUFReader, full: str, default: Optional[float] = None) -> float:
    """The float metadata value ``full`` (a FLOAT32 read back as the shortest decimal that
    rounds to it); ``ValueError`` naming the file and the key when missing or no float."""
    f = reader.fields.get(full)
    if f is None:
        if default is not None:
            return default
        raise ValueError(f"{_where(reader)} has no {full!r}")
    if f.type not in (ValueType.FLOAT32, ValueType.FLOAT64):
        raise ValueError(f"{_where(reader)}: {full!r} must be a float, got {f.type_name}")
    return f.value if f.type == ValueType.FLOAT64 else _shortest_float32(f.value)


def config_from_metadata(reader: GGUFReader, n_heads: Optional[int] = None) -> GPTConfig:
    """The ``GPTConfig`` of a ``gpt2``, ``llama`` or ``qwen2`` GGUF file (see the module
    documentation); ``ValueError`` naming the file and the key for anything missing or wrong,
    or the architecture when it is another."""
    meta, where = reader.metadata, _where(reader)
    arch = meta.get("general.architecture")
    if arch not in _ARCHITECTURES:
        if arch is None:
            raise ValueError(f"{where} has no 'general.architecture'; gptcore reads "
                             f"{', '.join(map(repr, _ARCHITECTURES))} GGUF files")
        raise ValueError(f"{where} holds a {arch!r} model; gptcore reads "
                         f"{', '.join(map(repr, _ARCHITECTURES))} GGUF files")
    heads = _integer(reader, f"{arch}.attention.head_count")
    if n_heads is not None and n_heads != heads:
        raise ValueError(f"load: n_heads={n_heads} disagrees with '{arch}.attention.head_count' = {heads} in {where}")
    emb = reader.tensors.get("token_embd.weight")
    if emb is None or len(emb.shape) != 2:
        raise ValueError(f"{where} has no two-dimensional 'token_embd.weight' (the token embedding)")
    if arch == "gpt2":
        kv = reader.fields.get("gpt2.attention.head_count_kv")
        if kv is not None and kv.value != heads:
            raise ValueError(f"{where}: 'gpt2.attention.head_count_kv' = {kv.value!r} differs from the head count "
                             f"{heads}; GPT-2 has no grouped-query attention")
        kwargs = dict(pos="learned", bias=True, ln_affine=True,
                      ln_eps=_float(reader, "gpt2.attention.layer_norm_epsilon"))
    else:
        kwargs = _llama_kwargs(reader, arch, heads, emb.shape[1])
    try:
        return GPTConfig(
            vocab_size=emb.shape[0], n_ctx=_integer(reader, f"{arch}.context_length"),
            d_model=_integer(reader, f"{arch}.embedding_length"), n_heads=heads,
            n_layers=_integer(reader, f"{arch}.block_count"), d_ff=_integer(reader, f"{arch}.feed_forward_length"),
            tied=_tied(reader), **kwargs)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where} does not give a valid configuration: {e}") from None


def _llama_kwargs(reader: GGUFReader, arch: str, heads: int, d_model: int) -> Dict[str, Any]:
    """The Llama family's settings of a ``llama`` / ``qwen2`` file: key/value heads, head
    width, rotary base and scaling, RMSNorm epsilon, which biases it has."""
    where = _where(reader)
    n_kv = _integer(reader, f"{arch}.attention.head_count_kv", heads)
    head_dim = _integer(reader, f"{arch}.attention.key_length", d_model // max(heads, 1))
    value_dim = _integer(reader, f"{arch}.attention.value_length", head_dim)
    rope_dim = _integer(reader, f"{arch}.rope.dimension_count", head_dim)
    if value_dim != head_dim or rope_dim != head_dim:
        raise ValueError(f"{where}: keys of width {head_dim}, values of width {value_dim} and rotary dimensions "
                         f"{rope_dim}: gptcore rotates whole heads of one width")
    scaling: Optional[RopeScaling] = None
    kind = reader.metadata.get(f"{arch}.rope.scaling.type", "none")
    if kind == "linear":
        scaling = RopeScaling("linear", _float(reader, f"{arch}.rope.scaling.factor"))
    elif kind != "none":
        raise ValueError(f"{where}: rope scaling {kind!r} ('{arch}.rope.scaling.type') is not supported; gptcore "
                         "reads 'none' and 'linear' from GGUF files")
    if "rope_freqs.weight" in reader.tensors:
        raise ValueError(f"{where}: rotary frequency factors ('rope_freqs.weight', llama3 scaling) are not "
                         "supported in GGUF files; load the model's Hugging Face folder instead")
    tensors = reader.tensors
    return dict(family="llama", pos="rotary", n_kv_heads=n_kv, head_dim=head_dim,
                rope_theta=_float(reader, f"{arch}.rope.freq_base", 10000.0), rope_scaling=scaling,
                ln_eps=_float(reader, f"{arch}.attention.layer_norm_rms_epsilon"),
                attn_bias="blk.0.attn_q.bias" in tensors, attn_out_bias="blk.0.attn_output.bias" in tensors,
                bias="blk.0.ffn_up.bias" in tensors)


def _tied(reader: GGUFReader) -> bool:
    out, emb = reader.tensors.get("output.weight"), reader.tensors["token_embd.weight"]
    if out is None:
        return True
    return (out.type == emb.type and out.ne == emb.ne
            and np.array_equal(reader.raw("output.weight"), reader.raw("token_embd.weight")))


def _arch(config: GPTConfig) -> str:
    """The GGUF architecture of a model: ``gpt2``, or ``qwen2`` for a Llama-family model with
    q/k/v biases (Qwen2's converter writes no row permutation), else ``llama``."""
    if config.family == "gpt2":
        return "gpt2"
    return "qwen2" if config.attn_bias else "llama"


def config_metadata(config: GPTConfig) -> Dict[str, Value]:
    """The ``gpt2.*`` keys of ``config`` (learned positions only), or the ``llama.*`` /
    ``qwen2.*`` keys of a Llama-family one."""
    u32 = lambda x: Value(ValueType.UINT32, int(x))  # noqa: E731
    f32 = lambda x: Value(ValueType.FLOAT32, float(x))  # noqa: E731
    arch = _arch(config)
    if arch == "gpt2" and config.pos != "learned":
        raise ValueError(f"GGUF's 'gpt2' architecture has learned positions; this model's are {config.pos!r}")
    meta = {
        f"{arch}.vocab_size": u32(config.vocab_size),
        f"{arch}.context_length": u32(config.n_ctx),
        f"{arch}.embedding_length": u32(config.d_model),
        f"{arch}.feed_forward_length": u32(config.d_ff),
        f"{arch}.block_count": u32(config.n_layers),
        f"{arch}.attention.head_count": u32(config.n_heads),
    }
    if arch == "gpt2":
        meta["gpt2.attention.layer_norm_epsilon"] = f32(config.ln_eps)
        return meta
    scaling = config.rope_scaling
    if scaling is not None and scaling.rope_type != "linear":
        raise ValueError(f"GGUF's metadata holds 'none' or 'linear' rope scaling; this model's is {scaling.rope_type!r}")
    meta.update({
        f"{arch}.attention.head_count_kv": u32(config.n_kv_heads),
        f"{arch}.attention.key_length": u32(config.d_head),
        f"{arch}.attention.value_length": u32(config.d_head),
        f"{arch}.rope.dimension_count": u32(config.d_head),
        f"{arch}.rope.freq_base": f32(config.rope_theta),
        f"{arch}.attention.layer_norm_rms_epsilon": f32(config.ln_eps),
    })
    if scaling is not None:
        meta[f"{arch}.rope.scaling.type"] = Value(ValueType.STRING, "linear")
        meta[f"{arch}.rope.scaling.factor"] = f32(scaling.factor)
    return meta


def _model_tensors(reader: GGUFReader, config: GPTConfig) -> Dict[str, Tuple[str, str]]:
    """gptcore name -> (GGUF name, layout) for every tensor of the file; ``ValueError`` for a
    name the architecture's table does not know or a type gptcore cannot read."""
    where = _where(reader)
    arch = reader.metadata["general.architecture"]
    table = _ARCHITECTURES[arch]
    out: Dict[str, Tuple[str, str]] = {}
    for gname, info in reader.tensors.items():
        hit = table.from_gguf(gname)
        if hit is None:
            raise ValueError(f"{where}: unexpected tensor {gname!r} for the {arch!r} architecture")
        if info.type not in READABLE_TYPES:
            raise ValueError(f"{where}: tensor {gname!r} has type {info.type}; gptcore reads "
                             f"{', '.join(READABLE_TYPES[:-1])} and {READABLE_TYPES[-1]} tensors")
        if gname == "output.weight" and config.tied:
            continue  # the copy of token_embd.weight
        out[hit[0]] = (gname, hit[1])
    return out


def _source_shape(gguf_shape: Tuple[int, ...], layout: str) -> Tuple[int, ...]:
    return tuple(reversed(gguf_shape)) if layout == "transposed" else tuple(gguf_shape)


def _from_gguf(a: np.ndarray, layout: str, config: GPTConfig) -> np.ndarray:
    """A file's array in gptcore's layout (``gptcore.gguf.names``; Llama's query and key rows
    permuted back, a block array's rows of blocks moved whole)."""
    return from_gguf_layout(a, layout, config.n_heads, config.n_kv_heads)


def read_weights(reader: GGUFReader, config: GPTConfig) -> Dict[str, np.ndarray]:
    """gptcore's weights from a gpt2 file as float32 (a float32 / float64 model): F32 tensors as
    read-only views of the file (in gptcore's orientation: transposed views of the ``Conv1D``
    matrices), F16 / BF16 widened, Q8_0 / Q4_0 dequantized (all exact)."""
    tensors = _model_tensors(reader, config)
    out: Dict[str, np.ndarray] = {}
    for name, (gname, layout) in tensors.items():
        t = reader.tensors[gname]
        a = reader.tensor(gname) if t.type == "F32" else reader.to_float32(gname)
        out[name] = _from_gguf(a, layout, config)
    return out


def _block_type(reader: GGUFReader, tensors: Mapping[str, Tuple[str, str]]) -> Optional[str]:
    """The block format (``"q8_0"`` / ``"q4_0"``) most of the file's tensors have (by count,
    then by bytes), or None when it has no Q8_0 / Q4_0 tensor."""
    seen: Dict[str, Tuple[int, int]] = {}
    for gname, _ in tensors.values():
        t = reader.tensors[gname]
        if t.type in _QUANTIZED:
            c, b = seen.get(t.type, (0, 0))
            seen[t.type] = (c + 1, b + t.nbytes)
    if not seen:
        return None
    return max(seen, key=lambda ty: seen[ty]).lower()


@dataclass
class ModelParts:
    """What a ``gpt2`` GGUF file gives a model: its ``config``; either ``weights`` (gptcore's
    names, float32 values in gptcore's orientation: read-only views of the file for F32
    tensors) or, for a 16-bit or block-format model (``weight_dtype``), ``small`` (the float32
    biases and LayerNorm parameters, and for a block format the tensors it holds in float32)
    and ``fetch`` (name -> one weight matrix or embedding as the model takes it, read when
    called: ``uint16`` patterns of a 16-bit format; ``(format, uint8 blocks)`` as the file
    holds them; a float32 array to quantize; ``("float32", None)`` for a tensor of ``small``);
    and its ``tokenizer``, or ``tokenizer_missing`` saying why there is none."""

    config: GPTConfig
    weight_dtype: Optional[str]
    weights: Optional[Dict[str, np.ndarray]] = None
    small: Optional[Dict[str, np.ndarray]] = None
    fetch: Optional[Callable[[str], Optional[np.ndarray]]] = None
    tokenizer: Any = None
    tokenizer_missing: Optional[str] = None


@contextmanager
def open_model(path: PathLike, *, n_heads: Optional[int] = None, weight_dtype: Any = None) -> Iterator[ModelParts]:
    """The ``ModelParts`` of a ``gpt2`` GGUF file, valid inside the ``with`` block (views and
    ``fetch`` read the file's mapping). ``weight_dtype``: None (a file with Q8_0 / Q4_0
    tensors: ``small`` and ``fetch`` for a model of its block format; any other file:
    ``weights``), ``"float32"`` (``weights``, Q8_0 / Q4_0 dequantized), ``"bfloat16"`` /
    ``"float16"`` (``small`` and ``fetch``; BF16 / F16 tensors of that format as stored, others
    rounded to nearest even), ``"q8_0"`` / ``"q4_0"`` (``small`` and ``fetch``; see the module
    documentation). Every name, shape and type is checked before anything is read."""
    wd = weight_dtype
    allowed = ("float32",) + HALF_DTYPES + BLOCK_DTYPES
    if wd is not None and (not isinstance(wd, str) or wd not in allowed):
        raise ValueError(f"load: weight_dtype for a GGUF file must be None, {', '.join(map(repr, allowed[:-1]))} "
                         f"or {allowed[-1]!r}, got {weight_dtype!r}")
    with GGUFReader(path) as reader:
        where = _where(reader)
        config = config_from_metadata(reader, n_heads)
        tensors = _model_tensors(reader, config)
        explicit = wd is not None
        if wd is None:
            wd = _block_type(reader, tensors)
        # shape-only stand-ins (no memory) let the usual checks run on names and shapes
        stand_ins = {k: np.broadcast_to(np.float32(0), _source_shape(reader.tensors[g].shape, layout))
                     for k, (g, layout) in tensors.items()}
        try:
            validation.validate(stand_ins, config)
        except ValueError as e:
            raise ValueError(f"load: the configuration in {where} disagrees with its tensors: {e}") from None
        parts = ModelParts(config, wd)
        if wd in HALF_DTYPES:
            kinds = {n: kind for n, _, kind in schema._tensor_kinds(config)}
            parts.small = {k: np.ascontiguousarray(reader.to_float32(g)) for k, (g, _) in tensors.items()
                           if kinds[k] in FLOAT32_KINDS}
            code = {"bfloat16": "BF16", "float16": "F16"}[wd]

            def fetch(n: str) -> Optional[np.ndarray]:
                hit = tensors.get(n)
                if hit is None or kinds[n] in FLOAT32_KINDS:
                    return None
                gname, layout = hit
                if reader.tensors[gname].type == code:
                    bits = reader.tensor(gname).view(np.uint16)
                else:
                    bits = to_half_bits(reader.to_float32(gname), wd)
                return np.ascontiguousarray(_from_gguf(bits, layout, config))

            parts.fetch = fetch
        elif wd in BLOCK_DTYPES:
            parts.small, parts.fetch = _block_parts(reader, tensors, config, wd, explicit)
        else:
            parts.weights = read_weights(reader, config)
        try:
            parts.tokenizer = tokenizer_from_metadata(reader.metadata, where)
        except ValueError as e:  # ids still work; text calls say why there is no tokenizer
            parts.tokenizer_missing = str(e)
        else:
            if parts.tokenizer is None:
                parts.tokenizer_missing = f"{where} has no tokenizer (no 'tokenizer.ggml.*' metadata)"
            elif parts.tokenizer.vocab_size > config.vocab_size:
                parts.tokenizer_missing = (f"the tokenizer in {where} has {parts.tokenizer.vocab_size} ids, more than "
                                           f"the model's vocab_size = {config.vocab_size}")
                parts.tokenizer = None
        yield parts


def _block_parts(reader: GGUFReader, tensors: Mapping[str, Tuple[str, str]], config: GPTConfig, wd: str,
                 explicit: bool) -> Tuple[Dict[str, np.ndarray], Callable[[str], Any]]:
    """``small`` and ``fetch`` of a model of block format ``wd`` from a file (see the module
    documentation): blocks of a block type used as stored (of ``wd`` only, when ``explicit``),
    tensors the model stores in ``wd`` quantized from their float32 values when the file holds
    them otherwise and ``explicit``, everything else held as float32."""
    code = wd.upper()
    kinds = {n: kind for n, _, kind in schema._tensor_kinds(config)}
    small: Dict[str, np.ndarray] = {}
    how: Dict[str, str] = {}  # name -> "blocks", "quantize" or "float32"
    for name, (gname, layout) in tensors.items():
        t = reader.tensors[gname]
        shape = _source_shape(t.shape, layout)
        stored = kinds[name] not in FLOAT32_KINDS and model_storage_type(name, shape, wd, config.family) == code
        if t.type in _QUANTIZED and stored and (t.type == code or not explicit):
            how[name] = "blocks"
        elif stored and explicit:
            how[name] = "quantize"
        else:
            how[name] = "float32"
            small[name] = np.ascontiguousarray(_from_gguf(reader.to_float32(gname), layout, config))

    def fetch(name: str) -> Any:
        hit = tensors.get(name)
        if hit is None:
            return None
        gname, layout = hit
        if how[name] == "blocks":
            t = reader.tensors[gname]
            rows = t.shape[0] if len(t.shape) == 2 else 1
            runs = reader.raw(gname).reshape(rows, -1)
            # a run of blocks for each output, whatever the checkpoint's orientation; Llama's
            # query and key rows permuted back as whole runs
            if layout != "transposed":
                runs = _from_gguf(runs, layout, config)
            return (t.type.lower(), np.ascontiguousarray(runs))
        if how[name] == "quantize":
            return np.ascontiguousarray(_from_gguf(reader.to_float32(gname), layout, config))
        return ("float32", None)

    return small, fetch


def _filled(weights: Mapping[str, np.ndarray], config: GPTConfig) -> Dict[str, np.ndarray]:
    """The weights with the zero biases and unit / zero LayerNorm parameters that llama.cpp's
    gpt2 architecture requires, where ``config`` has none."""
    full = config.replace(bias=True, attn_bias=True, ln_affine=True)
    out = dict(weights)
    for name, shape, kind in schema._tensor_kinds(full):
        if name not in out:
            out[name] = np.ones(shape, np.float32) if kind == "ln_weight" else np.zeros(shape, np.float32)
    return out


def write_model(weights: Mapping[str, np.ndarray], config: GPTConfig, path: PathLike, weight_dtype: str = "float32",
                tokenizer: Any = None, metadata: Optional[Mapping[str, Any]] = None,
                held: Optional[Mapping[str, Tuple[str, Optional[np.ndarray]]]] = None) -> Path:
    """Write gptcore ``weights`` (checked against ``config``) as a GGUF file (architecture
    ``gpt2``, or ``llama`` / ``qwen2`` for the Llama family, see ``_arch``) whose
    eligible tensors are ``weight_dtype`` (see ``gptcore.gguf.policy``), with ``tokenizer``'s
    metadata (or ``tokenizer.ggml.model = "none"``) and any extra ``metadata``. Tensors are
    converted one at a time while the file is written (Q8_0 / Q4_0 by gptcore's quantizer,
    which gives the reference blocks byte for byte).

    ``held`` (a block-format model's own tensors, ``Model._held_tensors``): name -> ``(GGUF
    type, blocks)``, each such tensor written in that type as those ``uint8`` blocks (a run
    along K for each row of the GGUF tensor), or ``("F32", None)``: written F32 from
    ``weights``, whatever the policy says."""
    if weight_dtype not in WEIGHT_DTYPES:
        raise ValueError(f"save: weight_dtype for a GGUF file must be one of {', '.join(WEIGHT_DTYPES)}, "
                         f"got {weight_dtype!r}")
    arch = _arch(config)
    meta: Dict[str, Any] = {"general.architecture": Value(ValueType.STRING, arch)}
    meta.update(config_metadata(config))
    target = GGUF_TYPES[weight_dtype]
    meta["general.file_type"] = Value(ValueType.UINT32, FILE_TYPES[target])
    meta["general.quantization_version"] = Value(ValueType.UINT32, 2)
    if tokenizer is not None:
        meta.update(tokenizer_metadata(tokenizer, config.vocab_size))
    else:
        meta["tokenizer.ggml.model"] = Value(ValueType.STRING, "none")
    meta.update(metadata or {})

    w = validation.validate(weights, config)
    full = config
    if arch == "gpt2":
        w = _filled(w, config)
        full = config.replace(bias=True, attn_bias=True, ln_affine=True)
    table = ARCHITECTURES[arch]
    heads = dict(n_heads=config.n_heads, n_kv_heads=config.n_kv_heads)
    tensors: List[WriterTensor] = []
    for name, _, _ in schema._tensor_kinds(full):
        hit = table.to_gguf(name)
        assert hit is not None, name
        gname, layout = hit
        src = w[name]
        shape = _source_shape(src.shape, layout)  # transposing is its own inverse
        ttype = storage_type(gname, shape, weight_dtype)
        blocks = None
        if held is not None and name in held:
            ttype, blocks = held[name]

        def data(src: np.ndarray = src, layout: str = layout, ttype: str = ttype, blocks: Any = blocks,
                 shape: Tuple[int, ...] = shape) -> np.ndarray:
            if blocks is not None:
                # a run of blocks a row: Llama's query and key rows permuted as whole runs
                rows = np.asarray(blocks, np.uint8).reshape(shape[0] if len(shape) == 2 else 1, -1)
                if layout != "transposed":  # the runs are the GGUF rows already
                    rows = to_gguf_layout(rows, layout, **heads)
                return np.ascontiguousarray(rows).view(
                    BLOCK_DTYPES_BY_TYPE[ttype]).reshape(shape[:-1] + (shape[-1] // 32,))
            g = np.asarray(to_gguf_layout(np.asarray(src, dtype=np.float32), layout, **heads))
            if ttype == "F32":
                return np.ascontiguousarray(g)
            if ttype == "BF16":
                return to_half_bits(g, "bfloat16")
            if ttype == "F16":
                return to_half_bits(g, "float16").view(np.float16)
            return quantize_blocks(g, ttype.lower())

        tensors.append(WriterTensor(gname, ttype, shape, data))
    return write_gguf(path, meta, tensors)


def quantize_blocks(x: np.ndarray, fmt: str) -> np.ndarray:
    """``gptcore.gguf.quants.quantize(x, fmt)`` (the same blocks, byte for byte: the tests hold
    them against the ``gguf`` package) by the core's quantizer, on every thread."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    k = x.shape[-1]
    if k % QK:
        raise ValueError(f"quantize_blocks: the last axis (K = {k}) must be a multiple of {QK}")
    raw = _native._quantize_blocks(x.reshape(-1, k), fmt)
    return raw.view(BLOCK_DTYPES_BY_TYPE[fmt.upper()]).reshape(x.shape[:-1] + (k // QK,))


def describe(path: PathLike) -> str:
    """A summary of a GGUF file: version, architecture, configuration keys, tokenizer, and each
    tensor's type, shape and bytes, with the totals per type."""
    with GGUFReader(path) as r:
        meta = r.metadata
        arch = meta.get("general.architecture", "?")
        lines = [f"{r.path}: GGUF version {r.version}, architecture {arch!r}, {len(r.tensors)} tensors, "
                 f"{r.size:,} bytes"]
        for k, v in r.fields.items():
            if k.startswith(f"{arch}.") or k in ("general.file_type", "general.alignment", "general.name"):
                shown = _shortest_float32(v.value) if v.type == ValueType.FLOAT32 else v.value
                lines.append(f"  {k} = {shown!r}")
        tok = meta.get("tokenizer.ggml.model")
        if tok is not None:
            n = len(meta.get("tokenizer.ggml.tokens", []))
            lines.append(f"  tokenizer: {tok!r} (pre {meta.get('tokenizer.ggml.pre', '-')!r}), {n} tokens, "
                         f"{len(meta.get('tokenizer.ggml.merges', []))} merges")
        totals: Dict[str, Tuple[int, int]] = {}
        width = max([len(n) for n in r.tensors] + [4])
        for name, t in r.tensors.items():
            lines.append(f"  {name:<{width}}  {t.type:<5} {str(list(t.shape)):<16} {t.nbytes:>14,} bytes")
            c, b = totals.get(t.type, (0, 0))
            totals[t.type] = (c + 1, b + t.nbytes)
        for ty, (c, b) in sorted(totals.items()):
            lines.append(f"  {ty}: {c} tensors, {b:,} bytes")
        lines.append(f"  total: {sum(b for _, b in totals.values()):,} bytes of tensor data")
    return "\n".join(lines)
