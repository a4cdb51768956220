"""The decoder: ``Model``, ``forward``, ``load``, and ``softmax``."""

from __future__ import annotations

import math
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _native
from ._checks import check_token_range, dtype_name, token_ids
from ._memory import check_alloc
from ._warnings import warn_at_caller
from .config import GPTConfig
from .generation_config import eos_token_ids
from .hub import resolve as resolve_hub
from .sampling import SamplingParams, samplers_for_batch
from .stop_strings import StopStringMatcher
from .scoring import ScoreResult
from .chat import chat, stream_chat
from .text import generate_text, score_text, stream_text
from .tokenizer import Tokenizer, missing_tokenizer_message
from .weights import gguf_checkpoint, infer_config, load_safetensors, save_safetensors, validate
from .gguf.format import BLOCK_DTYPES as BLOCK_DTYPES_BY_TYPE
from .gguf.policy import model_storage_type
from .weights.checkpoint import inspect_checkpoint, open_lazy
from .weights.formats import BLOCK_DTYPES, FORMATS, first_nonfinite, from_half_bits, weight_dtype_name
from .weights.schema import _tensor_kinds

__all__ = ["Model", "forward", "load", "softmax"]

_DTYPES = {"float32": np.float32, "float64": np.float64}


def _dtype_name(dtype: Any, fn: str = "Model") -> str:
    return dtype_name(fn, dtype, tuple(_DTYPES))


def _weight_dtype(weight_dtype: Any, dtype_name: str) -> Optional[str]:
    """None, or "bfloat16" / "float16" / "q8_0" / "q4_0" (which need dtype float32).
    ``"float32"`` is None: the weights in the compute dtype."""
    if weight_dtype is None or (isinstance(weight_dtype, str) and weight_dtype == "float32"):
        return None
    wd = weight_dtype_name("weight_dtype", weight_dtype)
    if dtype_name != "float32":
        what = "16-bit" if wd not in BLOCK_DTYPES else wd
        raise ValueError(
            f"weight_dtype={wd!r} needs dtype='float32' ({what} weights, float32 arithmetic), got dtype={dtype_name!r}"
        )
    return wd


def _check_quantizable(weights: Mapping[str, np.ndarray], fetch: Any, weight_dtype: str) -> None:
    """``ValueError`` naming the tensor and the index of the first value that is not finite in
    a tensor ``fetch`` quantizes (a block has no NaN or infinite weights)."""
    for name, a in weights.items():
        if a.ndim == 2 and fetch(name) is None:
            at = first_nonfinite(a, "F32")
            if at is not None:
                raise ValueError(f"Model: weights[{name!r}] holds {float(a[at])} at index {list(at)}; "
                                 f"{weight_dtype} blocks hold finite values only")


def _block_policy(weights: Mapping[str, np.ndarray], weight_dtype: str, family: str) -> Any:
    """The ``fetch`` of a model whose weights ``weight_dtype`` (a block format) stores as
    llama.cpp does (``gptcore.gguf.policy``): None (quantize) for a tensor it stores, else
    ``("float32", None)`` (kept as it is)."""
    code = weight_dtype.upper()

    def fetch(name: str) -> Any:
        a = weights.get(name)
        if a is not None and model_storage_type(name, a.shape, weight_dtype, family) == code:
            return None
        return ("float32", None)

    return fetch


def _check_ids(ids: Any, config: GPTConfig, what: str = "ids") -> Tuple[np.ndarray, bool]:
    """Return ids as a C-contiguous int64 (B, T) array and whether the input was 1-D."""
    arr = token_ids(what, ids)
    if arr.ndim not in (1, 2):
        raise ValueError(f"{what} must have shape (T,) or (B, T), got shape {arr.shape}")
    one_d = arr.ndim == 1
    arr2 = arr[None, :] if one_d else arr
    b, t = arr2.shape
    if b == 0 or t == 0:
        raise ValueError(f"{what} must hold at least one token per sequence, got shape {arr.shape}")
    check_token_range(what, arr2, config.vocab_size)
    return np.ascontiguousarray(arr2, dtype=np.int64), one_d


def _activation_width(c: GPTConfig) -> int:
    """Values per row of a pass's work buffers: norm output and projection (2 d), the
    Q/K/V product, the heads' outputs, and the MLP's hidden width (twice for SwiGLU's gate)."""
    return 2 * c.d_model + c.q_width + 2 * c.kv_width + c.q_width + c.d_ff * (2 if c.family == "llama" else 1)
#: generate's and stream's sampling and stopping options, with their defaults.
_GENERATE_OPTIONS = dict(temperature=1.0, top_k=None, top_p=None, min_p=None, repetition_penalty=1.0,
                         frequency_penalty=0.0, presence_penalty=0.0, logit_bias=None, greedy=False, seed=None,
                         stop_tokens=None, stop=None, stop_at_eos=False)


def _tokens_only(steps: Iterator[Tuple[Any, Any]]) -> Iterator[Any]:
    for tok, _ in steps:
        yield tok


def _check_run_alloc(config: GPTConfig, itemsize: int, b: int, t: int, logit_rows: int, what: str) -> None:
    """MemoryError before a run whose activations (and logits) cannot fit in memory."""
    need = logit_rows * config.vocab_size + b * t * _activation_width(config)
    check_alloc(need * itemsize, what)


class Model:
    """A decoder (GPT-2 or the Llama family, ``config.family``) with its weights packed for
    the Rust kernels.

    ``weights`` is a mapping of numpy arrays named as in ``gptcore.weights`` (Hugging Face
    names: GPT-2's, where an optional ``"transformer."`` prefix is accepted, or Llama's
    ``model.*``; ``gptcore.expected_shapes(config)`` lists them). Without ``config`` the
    sizes are inferred from the shapes (``n_heads`` defaults to ``d_model // 64``). Every name,
    shape and dtype is checked once; the weights are converted to ``dtype`` (float32, the fast
    path, or float64, the reference path) and every matrix is packed once. The model is
    immutable and may be shared between threads. Between passes it keeps its work buffers and
    the memory of large logits arrays Python has let go of, for the next passes (see "Memory
    kept between passes" in the docs); they are freed with the model. ``branch_scale``
    multiplies the two residual projections (GPT-2's ``attn.c_proj.weight`` and
    ``mlp.c_proj.weight``, Llama's ``o_proj`` and ``down_proj``), the lesson's ``1/sqrt(2N)``
    experiment.

    ``weight_dtype="bfloat16"`` or ``"float16"`` (with ``dtype="float32"``) stores the weight
    matrices, the LM head and the embedding tables 16-bit (biases and norm parameters stay
    float32) and computes in float32: the model's outputs equal, bit for bit, those of the
    float32 model built from ``gptcore.round_weights(weights, weight_dtype)`` (see the
    "16-bit weights" page). ``weight_dtype="q8_0"`` or ``"q4_0"`` stores them in ggml's blocks
    (quantized with llama.cpp's reference rounding, which tensors as llama.cpp chooses: see
    ``gptcore.gguf.policy``), with the same promise against ``round_weights(weights,
    weight_dtype)`` (see the "Quantized weights and GGUF files" page). ``weight_dtype="float32"``
    (or None) keeps them in ``dtype``.
    """

    def __init__(
        self,
        weights: Mapping[str, np.ndarray],
        config: Optional[GPTConfig] = None,
        *,
        dtype: Any = "float32",
        branch_scale: float = 1.0,
        n_heads: Optional[int] = None,
        weight_dtype: Any = None,
    ) -> None:
        if not isinstance(weights, Mapping):
            raise TypeError(f"Model: weights must be a mapping name -> numpy array, got {type(weights).__name__}")
        if config is None:
            config = infer_config(weights, n_heads=n_heads)
        elif not isinstance(config, GPTConfig):
            raise TypeError(f"Model: config must be a GPTConfig or None, got {type(config).__name__}")
        elif n_heads is not None and n_heads != config.n_heads:
            raise ValueError(f"Model: n_heads={n_heads!r} disagrees with config.n_heads={config.n_heads}")
        if isinstance(branch_scale, (bool, np.bool_)) or not isinstance(branch_scale, (int, float, np.integer, np.floating)):
            raise TypeError(f"Model: branch_scale must be a number, got {type(branch_scale).__name__}")
        if not math.isfinite(branch_scale):
            raise ValueError(f"Model: branch_scale must be a finite number, got {branch_scale!r}")
        name = _dtype_name(dtype)
        wd = _weight_dtype(weight_dtype, name)
        checked = validate(weights, config)
        np_dtype = _DTYPES[name]
        residual = {n for n, _, kind in _tensor_kinds(config) if kind in ("attn_proj", "mlp_proj")}
        native_weights = {}
        for key, arr in checked.items():
            if branch_scale != 1.0 and key in residual:
                arr = np.asarray(arr, dtype=np_dtype) * np_dtype(branch_scale)
            native_weights[key] = np.require(arr, np_dtype, ["C", "A"])
        self._config = config
        self._dtype = name
        self._branch_scale = float(branch_scale)
        self._tokenizer = None
        self._tokenizer_missing: Optional[str] = None  # why there is none (for the error)
        self._eos_ids: Optional[Tuple[int, ...]] = None  # the folder's, set by load
        self._weight_dtype = wd
        fetch = None
        if wd in BLOCK_DTYPES:
            fetch = _block_policy(native_weights, wd, config.family)
            _check_quantizable(native_weights, fetch, wd)
        self._native = _native.NativeModel(native_weights, config, name, wd, fetch)

    @classmethod
    def _from_checkpoint_lazily(cls, path: Any, weight_dtype: str, n_heads: Optional[int],
                                allow_nonfinite: bool = False) -> "Model":
        """A model with ``weight_dtype`` weights read one tensor at a time (no float32 copy of
        the weights)."""
        small, config, fetch = open_lazy(path, weight_dtype, n_heads, allow_nonfinite)
        return cls._from_parts(small, config, weight_dtype, fetch)

    @classmethod
    def _from_parts(cls, small: Mapping[str, np.ndarray], config: GPTConfig, weight_dtype: str,
                    fetch: Any) -> "Model":
        """A ``weight_dtype`` model from its float32 biases and LayerNorm parameters ``small`` and
        ``fetch(name)``, which returns one weight matrix or embedding as its source stores it
        (uint16 patterns, file blocks, float32 values: see ``_native.NativeModel``)."""
        m = cls.__new__(cls)
        m._config = config
        m._dtype = "float32"
        m._branch_scale = 1.0
        m._weight_dtype = weight_dtype
        m._tokenizer = None
        m._tokenizer_missing = None
        m._eos_ids = None
        m._native = _native.NativeModel(small, config, "float32", weight_dtype, fetch)
        return m

    @property
    def weight_dtype(self) -> Optional[str]:
        """How the weight matrices and embedding tables are stored: ``"bfloat16"``,
        ``"float16"``, ``"q8_0"``, ``"q4_0"``, or None (in ``dtype``). Biases and LayerNorm
        parameters are always in ``dtype`` (and so are the tensors a block format keeps in
        float32; ``weight_storage`` lists each tensor's)."""
        return self._weight_dtype

    def weight_storage(self) -> List[Tuple[str, str, int]]:
        """Each weight matrix and embedding table as the model holds it: ``(name, format,
        bytes)``, the format ``"float32"`` / ``"float64"`` for ``dtype`` itself. The packed LM
        head is ``lm_head.weight``, also when it is the token embedding's transpose (then
        packed of its own). The bytes add up to ``nbytes`` less the biases and LayerNorm
        parameters."""
        return [(n, f, int(b)) for n, f, b in self._native.stored_tensors()]

    @property
    def config(self) -> GPTConfig:
        return self._config

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self._dtype)

    @property
    def branch_scale(self) -> float:
        return self._branch_scale

    @property
    def nbytes(self) -> int:
        """Bytes of weights the model holds (packed matrices included)."""
        return self._native.nbytes

    # ---------------------------------------------------------------- text (see gptcore.text)
    @property
    def tokenizer(self) -> Optional["Tokenizer"]:
        """The ``Tokenizer`` for text calls: set by ``load`` from
        the folder's ``tokenizer.json`` or ``vocab.json`` + ``merges.txt``, ``None`` when there
        is none. May be assigned (a Tokenizer whose ids fit the vocabulary, or ``None``)."""
        return self._tokenizer

    @tokenizer.setter
    def tokenizer(self, tokenizer: Optional["Tokenizer"]) -> None:
        if tokenizer is not None:
            if not isinstance(tokenizer, Tokenizer):
                raise TypeError(f"tokenizer must be a gptcore Tokenizer or None, got {type(tokenizer).__name__}")
            if tokenizer.vocab_size > self._config.vocab_size:
                raise ValueError(
                    f"tokenizer: its vocabulary ({tokenizer.vocab_size} ids) does not fit the model's "
                    f"vocab_size = {self._config.vocab_size}")
        self._tokenizer = tokenizer
        self._tokenizer_missing = None

    def _require_tokenizer(self, fn: str) -> "Tokenizer":
        if self._tokenizer is None:
            why = self._tokenizer_missing or (
                missing_tokenizer_message(None) + "; load such a folder with gptcore.load, or set "
                "model.tokenizer = gptcore.Tokenizer.from_folder(folder)")
            raise ValueError(f"{fn}: {why}")
        return self._tokenizer

    def generate_text(self, prompt: str, max_new_tokens: int, **options: Any) -> str:
        """The continuation of ``prompt`` as text; see ``gptcore.text.generate_text``."""
        return generate_text(self, prompt, max_new_tokens, **options)

    def stream_text(self, prompt: str, max_new_tokens: int, **options: Any) -> Iterator[str]:
        """Yield the continuation of ``prompt`` piece by piece, whole characters only; see
        ``gptcore.text.stream_text``."""
        return stream_text(self, prompt, max_new_tokens, **options)

    def score_text(self, text: str, **options: Any) -> "ScoreResult":
        """Log-likelihood and perplexity of ``text``; see ``gptcore.text.score_text``."""
        return score_text(self, text, **options)

    def chat(self, messages: Any, max_new_tokens: int = 256, **options: Any) -> str:
        """The assistant's reply to the conversation ``messages``, rendered by the tokenizer's
        chat template; see ``gptcore.chat.chat``."""
        return chat(self, messages, max_new_tokens, **options)

    def stream_chat(self, messages: Any, max_new_tokens: int = 256, **options: Any) -> Iterator[str]:
        """Yield the assistant's reply piece by piece, whole characters only; see
        ``gptcore.chat.stream_chat``."""
        return stream_chat(self, messages, max_new_tokens, **options)

    def __repr__(self) -> str:
        c = self._config
        family = f"family={c.family!r}, " if c.family != "gpt2" else ""
        heads = f", n_kv_heads={c.n_kv_heads}" if c.n_kv_heads != c.n_heads else ""
        return (
            f"Model({family}d_model={c.d_model}, n_layers={c.n_layers}, n_heads={c.n_heads}{heads}, "
            f"vocab_size={c.vocab_size}, n_ctx={c.n_ctx}, pos={c.pos!r}, dtype={self._dtype}"
            + (f", weight_dtype={self._weight_dtype}" if self._weight_dtype else "") + ")"
        )

    def _check_length(self, t: int, what: str = "ids") -> None:
        if self._config.pos != "sinusoidal" and t > self._config.n_ctx:
            why = ("learned positions have no row for it" if self._config.pos == "learned"
                   else "rotary positions: the model's max_position_embeddings or sliding window")
            raise ValueError(
                f"{what}: sequence length {t} exceeds the model's context n_ctx = {self._config.n_ctx} ({why})"
            )

    def forward(
        self,
        ids: Any,
        *,
        logits: str = "all",
        causal: bool = True,
        return_hidden: bool = False,
    ) -> Union[np.ndarray, Tuple[np.ndarray, np.ndarray]]:
        """Logits for token ids of shape ``(T,)`` or ``(B, T)`` (0-based).

        ``logits="all"`` returns ``(T, V)`` or ``(B, T, V)``; ``"last"`` computes the LM head
        for the last position only and returns ``(V,)`` or ``(B, V)``. ``causal=False`` drops
        the mask (only to show what the mask is for). With ``return_hidden=True`` the result is
        ``(logits, hidden)``, ``hidden`` of shape ``(n_layers + 1, [B,] T, d_model)``: the
        residual stream before the first block and after each block.
        """
        if not isinstance(logits, str) or logits not in ("all", "last"):
            raise ValueError(f"forward: logits must be 'all' or 'last', got {logits!r}")
        if not isinstance(causal, bool):
            raise TypeError(f"forward: causal must be a bool, got {causal!r}")
        if not isinstance(return_hidden, bool):
            raise TypeError(f"forward: return_hidden must be a bool, got {return_hidden!r}")
        arr, one_d = _check_ids(ids, self._config)
        b, t = arr.shape
        self._check_length(t)
        c = self._config
        rows = b * t if logits == "all" else b
        need = rows * c.vocab_size + b * t * _activation_width(c)
        if return_hidden:
            need += (c.n_layers + 1) * b * t * c.d_model
        check_alloc(need * self.dtype.itemsize, f"forward on ids of shape {arr.shape}")
        out, hidden = self._native.forward(arr, logits, causal, bool(return_hidden))
        v, d = self._config.vocab_size, self._config.d_model
        if logits == "all":
            out = out.reshape((t, v) if one_d else (b, t, v))
        else:
            out = out.reshape((v,) if one_d else (b, v))
        if not return_hidden:
            return out
        n = self._config.n_layers + 1
        hidden = hidden.reshape((n, t, d) if one_d else (n, b, t, d))
        return out, hidden

    __call__ = forward

    # ---------------------------------------------------------------- loss
    def token_logprobs(self, ids: Any, targets: Any = None, *, chunk: int = 256) -> np.ndarray:
        """Log-probability (nats) of each target token.

        Without ``targets`` the targets are the ids shifted by one: position ``t`` predicts
        ``ids[t + 1]``, giving ``(B, T - 1)`` values. With ``targets`` (same shape as ids),
        position ``t`` predicts ``targets[t]``. The logits are computed ``chunk`` positions at a
        time, so the full ``(B, T, V)`` tensor never exists.
        """
        arr, one_d = _check_ids(ids, self._config)
        b, t = arr.shape
        self._check_length(t)
        if targets is None:
            if t < 2:
                raise ValueError("token_logprobs: need at least 2 tokens per sequence when targets are the shifted ids")
            inputs, tgt = arr[:, :-1], arr[:, 1:]
        else:
            tgt, _ = _check_ids(targets, self._config, "targets")
            if tgt.shape != arr.shape:
                raise ValueError(f"token_logprobs: targets must have the shape of ids {arr.shape}, got {tgt.shape}")
            inputs = arr
        if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)):
            raise TypeError(f"token_logprobs: chunk must be a positive int, got {type(chunk).__name__} {chunk!r}")
        if chunk < 1:
            raise ValueError(f"token_logprobs: chunk must be a positive int, got {chunk!r}")
        rows = inputs.shape[0] * inputs.shape[1]
        _check_run_alloc(self._config, self.dtype.itemsize, inputs.shape[0], inputs.shape[1], min(int(chunk), rows),
                         f"token_logprobs on ids of shape {arr.shape}")
        out = self._native.token_logprobs(np.ascontiguousarray(inputs), np.ascontiguousarray(tgt), int(chunk))
        out = out.reshape(inputs.shape)
        return out[0] if one_d else out

    def loss(self, ids: Any, targets: Any = None, *, chunk: int = 256) -> float:
        """Mean cross-entropy in nats over all predicted positions (see ``token_logprobs``)."""
        return float(-np.mean(self.token_logprobs(ids, targets, chunk=chunk)))

    def perplexity(self, ids: Any, targets: Any = None, *, chunk: int = 256) -> float:
        """``exp(loss)``."""
        return math.exp(self.loss(ids, targets, chunk=chunk))

    # ---------------------------------------------------------------- generation
    def new_cache(self, batch: int = 1) -> "_native.NativeCache":
        """An empty key/value cache for ``batch`` sequences (for ``step``)."""
        if isinstance(batch, (bool, np.bool_)) or not isinstance(batch, (int, np.integer)):
            raise TypeError(f"new_cache: batch must be an int, got {type(batch).__name__}")
        if batch < 1:
            raise ValueError(f"new_cache: batch must be >= 1, got {batch}")
        c = self._config
        # one (keys, values) record per layer, sequence and head
        check_alloc(max(1, c.n_layers) * int(batch) * c.n_heads * 64, f"new_cache(batch={batch})")
        return self._native.new_cache(int(batch))

    def step(self, cache: "_native.NativeCache", ids: Any) -> np.ndarray:
        """Append ids ``(B, T_new)`` to the sequences held in ``cache`` and return the logits
        of the last new position, ``(B, V)``. The result is bit-identical to the last row of a
        full forward pass over the whole sequence."""
        if not isinstance(cache, _native.NativeCache):
            raise TypeError(f"step: cache must come from Model.new_cache(), got {type(cache).__name__}")
        arr, _ = _check_ids(ids, self._config)
        _check_run_alloc(self._config, self.dtype.itemsize, arr.shape[0], arr.shape[1], arr.shape[0],
                         f"step on ids of shape {arr.shape}")
        if arr.shape[0] != cache.batch:
            raise ValueError(f"step: ids has {arr.shape[0]} sequences, the cache holds {cache.batch}")
        self._check_length(cache.len + arr.shape[1])
        return self._native.step(cache, arr, "last")

    def step_many(self, caches: Sequence["_native.NativeCache"], ids: Sequence[Any],
                  *, logits: Union[str, Sequence[str]] = "last") -> List[np.ndarray]:
        """One step over several sequences, each with its own cache (``new_cache(1)``) and its
        own length: ``ids[i]`` (a 1-D array of one or more token ids: a decode token, or a
        chunk of a prompt) is appended to ``caches[i]``. All the new tokens go through each
        matrix product together, as the rows of one pass; each sequence's result is, bit for
        bit, what ``step`` gives for it alone, whatever the other sequences are (the rows never
        influence each other). This is the step a server's continuous batching runs.

        Returns one array per sequence: its last new position's logits ``(V,)``, or with
        ``logits="all"`` (one string for all, or one per sequence) every new position's,
        ``(T_i, V)``. Errors name the argument (``ids[2]``, ``caches[0]``); a step that fails
        leaves every cache as it was.
        """
        fn = "step_many"
        if isinstance(caches, _native.NativeCache) or not isinstance(caches, Sequence):
            raise TypeError(f"{fn}: caches must be a list of caches from Model.new_cache(1), "
                            f"got {type(caches).__name__}")
        if isinstance(ids, np.ndarray) or not isinstance(ids, Sequence):
            raise TypeError(f"{fn}: ids must be a list of 1-D token id arrays (one per cache), "
                            f"got {type(ids).__name__}")
        n = len(caches)
        if len(ids) != n:
            raise ValueError(f"{fn}: ids has {len(ids)} entries and caches {n}; give one per sequence")
        if isinstance(logits, str):
            modes = [logits] * n
        elif isinstance(logits, Sequence):
            modes = list(logits)
            if len(modes) != n:
                raise ValueError(f"{fn}: logits has {len(modes)} entries and caches {n}")
        else:
            raise TypeError(f"{fn}: logits must be 'last', 'all' or a list of them, got {type(logits).__name__}")
        for i, mode in enumerate(modes):
            if not isinstance(mode, str) or mode not in ("last", "all"):
                where = "logits" if isinstance(logits, str) else f"logits[{i}]"
                raise ValueError(f"{fn}: {where} must be 'last' or 'all', got {mode!r}")
        arrays = []
        for i, (cache, row) in enumerate(zip(caches, ids)):
            if not isinstance(cache, _native.NativeCache):
                raise TypeError(f"{fn}: caches[{i}] must come from Model.new_cache(1), got {type(cache).__name__}")
            if cache.batch != 1:
                raise ValueError(f"{fn}: caches[{i}] holds {cache.batch} sequences; step_many takes "
                                 "one-sequence caches (new_cache(1))")
            arr = token_ids(f"{fn}: ids[{i}]", row)
            if arr.ndim != 1:
                raise ValueError(f"{fn}: ids[{i}] must be a 1-D array of token ids, got shape {arr.shape}")
            if arr.size == 0:
                raise ValueError(f"{fn}: ids[{i}] is empty (a step needs at least one token per sequence)")
            check_token_range(f"{fn}: ids[{i}]", arr, self._config.vocab_size)
            self._check_length(cache.len + arr.size, f"{fn}: ids[{i}]")
            arrays.append(np.ascontiguousarray(arr, dtype=np.int64))
        if n == 0:
            return []
        rows = sum(a.size for a in arrays)
        logit_rows = sum(a.size if m == "all" else 1 for a, m in zip(arrays, modes))
        _check_run_alloc(self._config, self.dtype.itemsize, 1, rows, logit_rows, f"{fn} over {rows} new tokens")
        out, counts = self._native.step_many(list(caches), arrays, [m == "all" for m in modes])
        result, at = [], 0
        for k, mode in zip(counts, modes):
            result.append(out[at:at + k] if mode == "all" else out[at])
            at += k
        return result

    def stream(
        self,
        ids: Any,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_k: Optional[int] = None,
        top_p: Optional[float] = None,
        min_p: Optional[float] = None,
        repetition_penalty: float = 1.0,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        logit_bias: Optional[Mapping[int, float]] = None,
        greedy: bool = False,
        seed: Union[None, int, Sequence[int]] = None,
        stop_tokens: Optional[Iterable[int]] = None,
        stop: Union[None, str, Sequence[str]] = None,
        stop_at_eos: bool = False,
        context_shift: int = 1,
    ) -> Iterator[Union[int, np.ndarray]]:
        """Yield new tokens one step at a time (an ``int`` for a ``(T,)`` prompt, a ``(B,)``
        array for a ``(B, T)`` prompt). Arguments as in ``generate``; the tokens are not
        kept, so only the key/value cache must fit in memory."""
        return self._stream_tokens(
            ids, max_new_tokens, "stream", context_shift=context_shift, temperature=temperature, top_k=top_k,
            top_p=top_p, min_p=min_p, repetition_penalty=repetition_penalty, frequency_penalty=frequency_penalty,
            presence_penalty=presence_penalty, logit_bias=logit_bias, greedy=greedy, seed=seed,
            stop_tokens=stop_tokens, stop=stop, stop_at_eos=stop_at_eos)

    def _stream_tokens(self, ids: Any, max_new_tokens: int, fn: str, *, context_shift: int = 1,
                       **options: Any) -> Iterator[Union[int, np.ndarray]]:
        """``stream`` for the text functions: ``generate``'s keyword options, errors named
        after ``fn`` (the function the user called)."""
        unknown = sorted(set(options) - set(_GENERATE_OPTIONS))
        if unknown:
            raise TypeError(f"{fn}: unexpected keyword argument {unknown[0]!r}")
        opts = {**_GENERATE_OPTIONS, **options}
        return _tokens_only(self._generate_iter(ids, max_new_tokens, opts, context_shift, fn, hold=False))

    def generate(
        self,
        ids: Any,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_k: Optional[int] = None,
        top_p: Optional[float] = None,
        min_p: Optional[float] = None,
        repetition_penalty: float = 1.0,
        frequency_penalty: float = 0.0,
        presence_penalty: float = 0.0,
        logit_bias: Optional[Mapping[int, float]] = None,
        greedy: bool = False,
        seed: Union[None, int, Sequence[int]] = None,
        stop_tokens: Optional[Iterable[int]] = None,
        stop: Union[None, str, Sequence[str]] = None,
        stop_at_eos: bool = False,
        return_logprobs: bool = False,
        context_shift: int = 1,
    ) -> Union[np.ndarray, Tuple[np.ndarray, np.ndarray]]:
        """Generate up to ``max_new_tokens`` tokens after the prompt ``ids`` and return the new
        tokens only (not the prompt, unlike transformers' ``generate``), shape ``(n,)`` or
        ``(B, n)``.

        The prompt is processed once (prefill); each new token then costs one position
        through every layer (decode, with a key/value cache). ``greedy=True`` or
        ``temperature=0`` picks the most likely token; otherwise tokens are sampled from
        ``softmax(logits / temperature)``, restricted to the ``top_k`` most likely tokens,
        the smallest set whose probability reaches ``top_p`` and the tokens at least
        ``min_p`` times as likely as the most likely one, with a generator seeded by ``seed``
        (same seed, same tokens, bit for bit). Before that, ``logit_bias`` (token id -> bias)
        is added to the logits, ``repetition_penalty`` (transformers' definition, over the
        prompt and the tokens generated) and ``frequency_penalty`` / ``presence_penalty``
        (OpenAI's, over the tokens generated) are applied; ``gptcore.sampling`` defines each
        and the order in which they apply. With a ``(B, T)`` prompt, ``seed`` may be a list of
        ``B`` seeds: each row then draws from its own generator and gets the tokens it gets
        alone with its seed; one seed is one generator shared by the rows (drawn from in row
        order at each step).

        A sequence ends with one of ``stop_tokens``, with the model folder's end-of-sequence
        ids when ``stop_at_eos`` (``Model.eos_token_ids``), or with the token that completes
        one of the ``stop`` strings in its decoded text (which needs ``model.tokenizer``); the
        token that ends it is the last one returned, and with a batch, generation goes on until
        every sequence has ended (an ended sequence is padded with its last token).
        ``return_logprobs=True`` also returns each chosen token's log-probability under the
        model (temperature 1, nothing applied).

        Before it starts, a request whose tokens and key/value cache cannot fit in this
        machine's memory is refused with ``MemoryError`` stating the bytes. Logits that are
        not finite (NaN weights, or arithmetic that overflowed) stop generation with
        ``FloatingPointError``.

        With learned positions there is no position beyond ``n_ctx`` (with rotary positions,
        ``n_ctx`` is the model's trained context or sliding window). A longer prompt is
        cropped to its last ``n_ctx`` tokens. When the running sequence would exceed ``n_ctx``,
        the ``context_shift`` oldest tokens are dropped at once and the cache is rebuilt from
        the rest (a prefill of ``n_ctx + 1 - context_shift`` tokens); the next
        ``context_shift - 1`` tokens then decode with the cache as usual. The default,
        ``context_shift=1``, is the lesson's exact crop: every token sees exactly the last
        ``n_ctx`` tokens, and every token past ``n_ctx`` costs a full prefill (a
        ``UserWarning`` says so, once, when it starts). A larger shift, such as
        ``n_ctx // 4`` (what ``gptcore generate`` uses), rebuilds once per ``context_shift``
        tokens, at the price of a context that shrinks to ``n_ctx + 1 - context_shift``
        tokens right after each rebuild — what llama.cpp does when its context fills.
        """
        options = dict(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                       repetition_penalty=repetition_penalty, frequency_penalty=frequency_penalty,
                       presence_penalty=presence_penalty, logit_bias=logit_bias, greedy=greedy, seed=seed,
                       stop_tokens=stop_tokens, stop=stop, stop_at_eos=stop_at_eos)
        if not isinstance(return_logprobs, bool):
            raise TypeError(f"generate: return_logprobs must be a bool, got {return_logprobs!r}")
        toks, lps = [], []
        one_d = np.asarray(ids).ndim == 1
        for tok, lp in self._generate_iter(ids, max_new_tokens, options, context_shift, "generate", hold=True,
                                           logprobs=return_logprobs):
            toks.append(np.atleast_1d(tok))
            lps.append(np.atleast_1d(lp))
        b = 1 if one_d else np.asarray(ids).shape[0]
        out = np.stack(toks, axis=1) if toks else np.zeros((b, 0), dtype=np.int64)
        lp_arr = np.stack(lps, axis=1) if lps else np.zeros((b, 0), dtype=np.float64)
        if one_d:
            out, lp_arr = out[0], lp_arr[0]
        return (out, lp_arr) if return_logprobs else out

    @property
    def eos_token_ids(self) -> Tuple[int, ...]:
        """The ids that end generation with ``stop_at_eos``: the model folder's
        ``eos_token_id`` (``generation_config.json``, else ``config.json``; one id or several)
        when ``load`` found one, else the tokenizer's end-of-text token, else none."""
        if self._eos_ids is not None:
            return self._eos_ids
        tok = self._tokenizer
        return (tok.eos_id,) if tok is not None and tok.eos_id is not None else ()

    def _sampling(self, options: Mapping[str, Any], fn: str) -> Tuple[SamplingParams, Optional[List[int]], Any]:
        """The checked sampling parameters of a generate/stream call, the per-row seeds (or
        None) and the stop strings' tokenizer (or None); errors name ``fn`` and the argument."""
        opts = dict(options)
        seed = opts.pop("seed")
        seeds = None
        if seed is not None and not isinstance(seed, (int, np.integer)) and not isinstance(seed, (str, bytes)) \
                and isinstance(seed, Iterable):
            seeds, seed = list(seed), None
        stop_at_eos = opts.pop("stop_at_eos")
        if not isinstance(stop_at_eos, bool):
            raise TypeError(f"{fn}: stop_at_eos must be a bool, got {stop_at_eos!r}")
        stop_ids = opts.pop("stop_tokens")
        try:
            params = SamplingParams(seed=seed, stop_token_ids=stop_ids, **opts)
            params.check_vocab(self._config.vocab_size)
        except (TypeError, ValueError) as e:
            msg = str(e)
            if msg.startswith("stop_token_ids"):  # generate's name for the field
                msg = "stop_tokens" + msg[len("stop_token_ids"):]
            raise type(e)(f"{fn}: {msg}") from None
        for r, s in enumerate(seeds or ()):
            try:
                SamplingParams(seed=s)
            except (TypeError, ValueError) as e:
                raise type(e)(f"{fn}: seed[{r}]{str(e)[len('seed'):]}") from None
        if stop_at_eos and self.eos_token_ids:
            eos = [i for i in self.eos_token_ids if i < self._config.vocab_size]
            params = replace(params, stop_token_ids=tuple(params.stop_token_ids) + tuple(eos))
        tokenizer = None
        if params.stop:
            if self._tokenizer is None:
                why = self._tokenizer_missing or missing_tokenizer_message(None)
                raise ValueError(f"{fn}: stop strings are matched on the text of the tokens, which needs the "
                                 f"model's tokenizer; {why}")
            tokenizer = self._tokenizer
        return params, seeds, tokenizer

    def _check_generate_memory(self, b: int, t: int, n: int, hold: bool, fn: str) -> None:
        """MemoryError before a generation whose key/value cache (and, when the tokens are
        kept, the tokens and their log-probabilities) cannot fit in memory."""
        c = self._config
        positions = min(t + n, c.n_ctx) if c.pos != "sinusoidal" else t + n
        kv = b * c.n_layers * 2 * c.kv_width * positions * self.dtype.itemsize
        # int64 token + float64 log-probability per row and step, and two small arrays per step
        kept = n * (16 * b + 256) if hold else 0
        check_alloc(kv + kept, f"{fn}(max_new_tokens={n:,}) on {b} sequence(s) of {t:,} tokens "
                               f"(key/value cache {kv:,} bytes, tokens kept {kept:,} bytes)")

    def _generate_iter(self, ids, max_new_tokens, options, context_shift, fn, hold, logprobs=False):
        arr, one_d = _check_ids(ids, self._config, f"{fn}: ids")
        if isinstance(max_new_tokens, (bool, np.bool_)) or not isinstance(max_new_tokens, (int, np.integer)):
            raise TypeError(f"{fn}: max_new_tokens must be an int, got {type(max_new_tokens).__name__}")
        if max_new_tokens < 0:
            raise ValueError(f"{fn}: max_new_tokens must be >= 0, got {max_new_tokens}")
        params, seeds, tokenizer = self._sampling(options, fn)
        # Learned and rotary positions stop at n_ctx (no table row; the rotary model's trained
        # range or sliding window): the same crop and shift for both.
        n_ctx, learned = self._config.n_ctx, self._config.pos != "sinusoidal"
        if isinstance(context_shift, (bool, np.bool_)) or not isinstance(context_shift, (int, np.integer)):
            raise TypeError(f"{fn}: context_shift must be an int, got {context_shift!r}")
        if not 1 <= context_shift <= n_ctx:
            raise ValueError(f"{fn}: context_shift must be in [1, n_ctx = {n_ctx}], got {context_shift}")
        b, t = arr.shape
        seq = arr[:, -n_ctx:] if learned and t > n_ctx else arr
        _check_run_alloc(self._config, self.dtype.itemsize, b, seq.shape[1], b, f"{fn} on ids of shape {arr.shape}")
        self._check_generate_memory(b, seq.shape[1], int(max_new_tokens), hold, fn)
        if seeds is not None and len(seeds) != b:
            raise ValueError(f"{fn}: seed: a list of seeds needs one per sequence ({b}), got {len(seeds)}")
        samplers = samplers_for_batch(params, self._config.vocab_size, arr, seeds)
        # Everything is checked now, when called; the work starts at the first next().
        return self._generation_steps(arr, seq, int(max_new_tokens), one_d, samplers, params, tokenizer,
                                      int(context_shift), fn, bool(logprobs))

    def _generation_steps(self, arr, seq, max_new_tokens, one_d, samplers, params, tokenizer, shift, fn,
                          logprobs):
        """The generation loop of ``_generate_iter``, on checked arguments: ``(token, logprob)``
        per step (the log-probability NaN unless ``logprobs``)."""
        if max_new_tokens == 0:
            return
        n_ctx, learned = self._config.n_ctx, self._config.pos != "sinusoidal"
        warned = False
        b = arr.shape[0]
        stop_ids = np.array(params.stop_token_ids, dtype=np.int64) if params.stop_token_ids else None
        texts = [(tokenizer.stream(), StopStringMatcher(params.stop)) for _ in range(b)] if tokenizer else None
        cache = self.new_cache(b)
        logits = self._native.step(cache, np.ascontiguousarray(seq), "last")
        done = np.zeros(b, dtype=bool)
        last = np.zeros(b, dtype=np.int64)
        for i in range(int(max_new_tokens)):
            tok = np.empty(b, dtype=np.int64)
            lp = np.empty(b, dtype=np.float64)
            for r, sampler in enumerate(samplers):
                try:
                    tok[r], lp[r] = sampler.choose(logits[r], logprobs)
                except FloatingPointError as e:
                    raise FloatingPointError(f"{fn}: {'' if one_d else f'sequence {r}: '}{e}") from None
            tok = np.where(done, last, tok)
            if stop_ids is not None:
                done |= np.isin(tok, stop_ids)
            if texts is not None:
                for r in range(b):
                    if not done[r] and int(tok[r]) < tokenizer.vocab_size:
                        decoder, matcher = texts[r]
                        done[r] = matcher.push(decoder.push(int(tok[r])))[1]
            last = tok
            yield (int(tok[0]) if one_d else tok.copy()), (float(lp[0]) if one_d else lp)
            if done.all() or i == max_new_tokens - 1:
                return  # no step for logits nobody will read
            if learned:
                seq = np.concatenate([seq, tok[:, None]], axis=1)
            if learned and seq.shape[1] > n_ctx:
                # Drop the `shift` oldest tokens (shift 1: keep exactly the last n_ctx, the
                # lesson's crop) and rebuild the cache from the rest.
                if shift == 1 and not warned:
                    warned = True
                    fast = n_ctx // 4
                    hint = (f" context_shift={fast} would drop {fast} tokens at once and rebuild once per "
                            f"{fast} tokens." if fast > 1 else "")
                    warn_at_caller(
                        f"{fn}: the sequence reached n_ctx = {n_ctx}; with context_shift=1 (the exact "
                        f"crop) every further token rebuilds the cache from the last {n_ctx} tokens, a full "
                        f"prefill per token.{hint}", UserWarning)
                seq = seq[:, shift:]
                cache = self.new_cache(b)
                logits = self._native.step(cache, np.ascontiguousarray(seq), "last")
            else:
                logits = self._native.step(cache, np.ascontiguousarray(tok[:, None]), "last")

    # ---------------------------------------------------------------- files
    def save(self, path: Union[str, "os.PathLike[str]"], weight_dtype: Optional[str] = None) -> None:
        """Write the weights the model computes with (in its dtype, ``branch_scale`` applied) as
        a Hugging Face style folder (``config.json`` + ``model.safetensors``), a
        ``.safetensors`` file or, for a path ending in ``.gguf``, a GGUF file (architecture
        ``gpt2``, with the tokenizer), so that ``load`` gives back the same model.

        ``weight_dtype`` stores the weight matrices and embeddings in another format: for a
        safetensors checkpoint ``"float32"``, ``"bfloat16"`` or ``"float16"`` (rounded to nearest
        even); for a GGUF file also ``"q8_0"`` and ``"q4_0"`` (llama.cpp's reference
        quantizers; which tensors, see ``gptcore.gguf.policy``). By default it is the model's
        own format; a float64 model must name one for a GGUF file (F32 would round it). A model
        with ``q8_0`` / ``q4_0`` weights is written in its own format as it holds each tensor:
        its blocks byte for byte (as a GGUF file gave them, or as they were quantized), the
        rest F32; it has no safetensors form (``weight_dtype="float32"`` writes its values).
        """
        if isinstance(path, (str, os.PathLike)) and os.fspath(path).lower().endswith(".gguf"):
            wd = weight_dtype if weight_dtype is not None else self._weight_dtype
            if wd is None:
                if self._dtype == "float64":
                    raise ValueError("save: a float64 model's weights do not fit GGUF's F32 exactly; pass "
                                     "weight_dtype='float32' (rounding them to nearest) or another format")
                wd = "float32"
            held = None
            if self._weight_dtype in BLOCK_DTYPES and wd == self._weight_dtype:
                held = self._held_tensors()
            gguf_checkpoint.write_model(self._native.export(), self._config, path, wd, self._tokenizer, held=held)
            return
        # In a 16-bit format, the stored values exactly: widened on export, rounded back.
        if weight_dtype is None:
            wd = self._weight_dtype
        else:
            wd = None if weight_dtype == "float32" else weight_dtype_name("save: weight_dtype", weight_dtype)
        save_safetensors(self._native.export(), self._config, path, weight_dtype=wd)

    def _held_tensors(self) -> Dict[str, Any]:
        """Each large tensor of a block-format model as it is held: ``(GGUF type, blocks)`` for
        the tensors in a block format (the file blocks, a ``uint8`` array), ``("F32", None)``
        for the others."""
        held: Dict[str, Any] = {}
        for name, fmt, _ in self._native.stored_tensors():
            got = self._native.stored_blocks(name) if fmt in BLOCK_DTYPES else None
            held[name] = (fmt.upper(), got[1]) if got is not None else ("F32", None)
        return held


def forward(ids: Any, weights: Union[Model, Mapping[str, np.ndarray]], config: Optional[GPTConfig] = None, **options: Any):
    """One-call forward pass: ``Model(weights, config).forward(ids, ...)``.

    ``weights`` may be a ``Model`` (then ``config`` must be None). Options for the model
    (``dtype``, ``branch_scale``, ``n_heads``) and for the pass (``logits``, ``causal``,
    ``return_hidden``) may be mixed.
    """
    model_keys = {"dtype", "branch_scale", "n_heads", "weight_dtype"}
    model_opts = {k: v for k, v in options.items() if k in model_keys}
    run_opts = {k: v for k, v in options.items() if k not in model_keys}
    if isinstance(weights, Model):
        if config is not None or model_opts:
            raise ValueError("forward: config, dtype, branch_scale and n_heads apply only when weights is a mapping")
        model = weights
    else:
        model = Model(weights, config, **model_opts)
    return model.forward(ids, **run_opts)


def load(
    path: Union[str, "os.PathLike[str]"],
    *,
    dtype: Any = "float32",
    n_heads: Optional[int] = None,
    tokenizer: Any = None,
    weight_dtype: Any = None,
    allow_nonfinite: bool = False,
) -> Model:
    """Load a Hugging Face checkpoint folder (``config.json`` + ``model.safetensors``, or the
    shards ``model.safetensors.index.json`` names) or a ``.safetensors`` file into a
    ``Model``: GPT-2 (``model_type`` ``gpt2``) or the Llama family (``llama``, ``mistral``,
    ``qwen2``; both transformers 4's and 5's config layout). Pickle checkpoints are refused.

    ``path`` may also be the name of a model on the Hugging Face Hub (``"openai-community/gpt2"``,
    ``"gpt2"``) when no file or folder of that name exists here: it is taken from the Hugging
    Face cache with no network access, or else downloaded (safetensors and tokenizer files
    only) unless ``HF_HUB_OFFLINE`` is set; see ``gptcore.hub``.

    ``model.tokenizer`` is the folder's tokenizer (``tokenizer.json``, or ``vocab.json`` +
    ``merges.txt``, with the special tokens and chat template of ``tokenizer_config.json``)
    when it has one, else ``None``: ids work either way, text calls then raise an error naming
    the missing files. ``tokenizer`` (a folder, or a ``gptcore.Tokenizer``) takes the
    tokenizer from elsewhere. A tokenizer with more ids (added tokens included) than the
    model's ``vocab_size`` is a ``ValueError`` naming both sizes: the two do not belong
    together. ``model.eos_token_ids`` are the folder's ``eos_token_id``
    (``generation_config.json``, else ``config.json``; Llama 3 Instruct lists several).

    A tensor holding a NaN or an infinity is a ``ValueError`` naming the tensor and the first
    such index (found as each tensor is read, no extra copy); ``allow_nonfinite=True`` loads
    it anyway, to debug it.

    ``weight_dtype`` (``"bfloat16"`` or ``"float16"``) stores the weight matrices and
    embedding tables 16-bit: the tensors are read one at a time and packed (BF16/F16 tensors of
    that format bit for bit, others rounded to nearest even), so no float32 copy of the model
    is made; ``"q8_0"`` / ``"q4_0"`` quantize them, one at a time, to ggml's blocks (which
    tensors: ``gptcore.gguf.policy``). By default (``None``, with ``dtype="float32"``) a
    checkpoint whose weight matrices and embedding tables are all stored in one 16-bit format
    keeps it (the usual bfloat16 Llama folder computes in float32 from bfloat16 weights, at half
    the memory); ``weight_dtype="float32"`` widens them to float32.

    A GGUF file (architectures ``gpt2``, ``llama``, ``qwen2``; F32, F16, BF16, Q8_0 and Q4_0
    tensors) loads the same way, with its configuration and tokenizer from its metadata (see
    ``gptcore.weights.gguf_checkpoint``). A file with Q8_0 / Q4_0 tensors computes with its
    blocks as they lie in the file (memory-mapped and packed one tensor at a time, no float32
    copy), every other tensor held as its float32 value: the model equals, bit for bit, the
    float32 model of the file's dequantized values (``weight_dtype="float32"``).
    """
    name = _dtype_name(dtype, "load")
    if not isinstance(allow_nonfinite, bool):
        raise TypeError(f"load: allow_nonfinite must be a bool, got {allow_nonfinite!r}")
    try:
        text = os.fspath(path)
    except TypeError:
        text = None
    if not isinstance(text, str):
        raise TypeError(f"load: path must be a str or os.PathLike, got {type(path).__name__}")
    p, _ = resolve_hub(text)
    if gguf_checkpoint.is_gguf(p):
        return _load_gguf(p, name, n_heads, tokenizer, weight_dtype, allow_nonfinite)
    if weight_dtype is None and name == "float32":
        wd = inspect_checkpoint(p, n_heads).stored_format
    else:
        wd = _weight_dtype(weight_dtype, name)
    if wd is not None:
        model = Model._from_checkpoint_lazily(p, wd, n_heads, allow_nonfinite)
    else:
        weights, config = load_safetensors(p, n_heads=n_heads, allow_nonfinite=allow_nonfinite)
        model = Model(weights, config, dtype=dtype, n_heads=n_heads)
    vocab = model.config.vocab_size
    if p.is_dir():
        model._eos_ids = eos_token_ids(p, vocab)
    if tokenizer is not None:
        tok = tokenizer if isinstance(tokenizer, Tokenizer) else Tokenizer.from_folder(tokenizer)
        _check_tokenizer_fits(tok, vocab, p)
        model.tokenizer = tok
        return model
    if p.is_dir():
        try:
            tok = Tokenizer.from_folder(p)
        except FileNotFoundError as e:  # ids still work; text calls repeat why there is none
            model._tokenizer_missing = str(e).split(": ", 1)[-1]
        else:
            _check_tokenizer_fits(tok, vocab, p)
            model.tokenizer = tok
    else:
        model._tokenizer_missing = (missing_tokenizer_message(None) + f" ({str(p)!r} is a single file; "
                                    "pass load(..., tokenizer=folder))")
    return model


def _check_tokenizer_fits(tok: Tokenizer, vocab_size: int, model_path: Path) -> None:
    if tok.vocab_size > vocab_size:
        src = f" ({tok.source})" if tok.source else ""
        raise ValueError(
            f"load: the tokenizer{src} has {tok.vocab_size:,} ids (added tokens included) but the model in "
            f"{str(model_path)!r} has vocab_size = {vocab_size:,}: they do not belong together (the tokenizer "
            "would produce ids the model has no embedding for)")


def _load_gguf(path: Any, dtype: str, n_heads: Optional[int], tokenizer: Any, weight_dtype: Any,
               allow_nonfinite: bool = False) -> Model:
    """``load`` of a GGUF file (``weight_dtype`` may also be ``"float32"``: dequantize)."""
    wd = weight_dtype
    if wd is not None:
        if not (isinstance(wd, str) and wd == "float32"):
            try:
                wd = weight_dtype_name("weight_dtype", wd)
            except (TypeError, ValueError):
                raise ValueError(f"load: weight_dtype for a GGUF file must be None, 'float32', 'bfloat16', "
                                 f"'float16', 'q8_0' or 'q4_0', got {weight_dtype!r}") from None
        if dtype != "float32":
            raise ValueError(f"load: weight_dtype={wd!r} needs dtype='float32', got dtype={dtype!r}")
    with gguf_checkpoint.open_model(path, n_heads=n_heads, weight_dtype=wd) as parts:
        if parts.fetch is not None:
            fetch = parts.fetch if allow_nonfinite else _finite_fetch(parts.fetch, parts.weight_dtype, path)
            if not allow_nonfinite:
                _check_finite(parts.small, path)
            model = Model._from_parts(parts.small, parts.config, parts.weight_dtype, fetch)
        else:
            if not allow_nonfinite:
                _check_finite(parts.weights, path)
            model = Model(parts.weights, parts.config, dtype=dtype)
    if tokenizer is not None:
        tok = tokenizer if isinstance(tokenizer, Tokenizer) else Tokenizer.from_folder(tokenizer)
        _check_tokenizer_fits(tok, model.config.vocab_size, Path(path))
        model.tokenizer = tok
    elif parts.tokenizer is not None:
        _check_tokenizer_fits(parts.tokenizer, model.config.vocab_size, Path(path))
        model.tokenizer = parts.tokenizer
    else:
        model._tokenizer_missing = parts.tokenizer_missing
    return model


def _nonfinite_error(name: str, path: Any, at: Tuple[int, ...], value: float) -> ValueError:
    return ValueError(
        f"load: tensor {name!r} in {str(path)!r} holds {value} at index {list(at)}: a checkpoint with NaN or "
        "infinite weights gives NaN outputs (pass allow_nonfinite=True to load it anyway, to debug it)")


def _check_finite(weights: Mapping[str, np.ndarray], path: Any) -> None:
    """A GGUF file's float32 tensors, checked as ``load_safetensors`` checks its own."""
    for name, a in weights.items():
        at = first_nonfinite(a, "F64" if a.dtype == np.float64 else "F32")
        if at is not None:
            raise _nonfinite_error(name, path, at, float(a[at]))


def _finite_fetch(fetch: Any, weight_dtype: str, path: Any) -> Any:
    """``fetch`` whose 16-bit patterns, float32 values or blocks' scales are checked as they
    are read."""

    def checked(name: str) -> Any:
        got = fetch(name)
        arr = got[1] if isinstance(got, tuple) else got
        if arr is None:
            return got
        fmt = got[0] if isinstance(got, tuple) else weight_dtype
        if arr.dtype == np.uint16:
            at = first_nonfinite(arr, FORMATS[fmt].safetensors)
            if at is not None:
                value = float(from_half_bits(np.array([arr[at]], dtype=np.uint16), fmt)[0])
                raise _nonfinite_error(name, path, at, value)
        elif arr.dtype == np.float32:
            at = first_nonfinite(arr, "F32")
            if at is not None:
                raise _nonfinite_error(name, path, at, float(arr[at]))
        elif arr.dtype == np.uint8 and fmt in BLOCK_DTYPES:
            blocks = arr.view(BLOCK_DTYPES_BY_TYPE[fmt.upper()])
            bad = ~np.isfinite(blocks["d"])
            if bad.any():
                row, b = (int(i) for i in np.argwhere(bad)[0])
                raise ValueError(
                    f"load: tensor {name!r} in {str(path)!r} has a block whose scale is {float(blocks['d'][row, b])} "
                    f"(block {b} of row {row}): its weights are NaN or infinite (pass allow_nonfinite=True to load "
                    "it anyway, to debug it)")
        return got

    return checked


def softmax(x: Any, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax along ``axis`` (subtract the max, exponentiate, normalise)."""
    a = np.asarray(x)
    if a.dtype.kind not in "fiu" or a.dtype == np.bool_:
        raise TypeError(f"softmax: x must be a real numeric array, got dtype {a.dtype}")
    if a.dtype.kind != "f":
        a = a.astype(np.float64)
    m = np.max(a, axis=axis, keepdims=True)
    e = np.exp(a - m)
    return e / np.sum(e, axis=axis, keepdims=True)
