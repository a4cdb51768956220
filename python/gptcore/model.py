"""The decoder: ``Model``, ``forward``, ``load``, and ``softmax``."""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Optional, Tuple, Union

import numpy as np

from . import _native
from ._checks import check_token_range, dtype_name, token_ids
from ._memory import check_alloc
from .config import GPTConfig
from .sampling import check_sampling_args, choose
from .scoring import ScoreResult
from .chat import chat, stream_chat
from .text import generate_text, score_text, stream_text
from .tokenizer import Tokenizer, missing_tokenizer_message
from .weights import gguf_checkpoint, infer_config, load_safetensors, save_safetensors, validate
from .weights.checkpoint import inspect_checkpoint, open_lazy
from .weights.formats import weight_dtype_name
from .weights.schema import _tensor_kinds

__all__ = ["Model", "forward", "load", "softmax"]

_DTYPES = {"float32": np.float32, "float64": np.float64}


def _dtype_name(dtype: Any, fn: str = "Model") -> str:
    return dtype_name(fn, dtype, tuple(_DTYPES))


def _weight_dtype(weight_dtype: Any, dtype_name: str) -> Optional[str]:
    """None, or "bfloat16" / "float16" (which needs dtype float32). ``"float32"`` is None:
    the weights in the compute dtype."""
    if weight_dtype is None or (isinstance(weight_dtype, str) and weight_dtype == "float32"):
        return None
    wd = weight_dtype_name("weight_dtype", weight_dtype)
    if dtype_name != "float32":
        raise ValueError(
            f"weight_dtype={wd!r} needs dtype='float32' (16-bit weights, float32 arithmetic), got dtype={dtype_name!r}"
        )
    return wd


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
    "16-bit weights" page). ``weight_dtype="float32"`` (or None) keeps them in ``dtype``.
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
        self._weight_dtype = wd
        self._native = _native.NativeModel(native_weights, config, name, wd)

    @classmethod
    def _from_checkpoint_lazily(cls, path: Any, weight_dtype: str, n_heads: Optional[int]) -> "Model":
        """A model with ``weight_dtype`` weights read one tensor at a time (no float32 copy of
        the weights)."""
        small, config, fetch = open_lazy(path, weight_dtype, n_heads)
        return cls._from_parts(small, config, weight_dtype, fetch)

    @classmethod
    def _from_parts(cls, small: Mapping[str, np.ndarray], config: GPTConfig, weight_dtype: str,
                    fetch: Any) -> "Model":
        """A ``weight_dtype`` model from its float32 biases and LayerNorm parameters ``small`` and
        ``fetch(name)``, which returns one weight matrix or embedding as its uint16 patterns."""
        m = cls.__new__(cls)
        m._config = config
        m._dtype = "float32"
        m._branch_scale = 1.0
        m._weight_dtype = weight_dtype
        m._tokenizer = None
        m._tokenizer_missing = None
        m._native = _native.NativeModel(small, config, "float32", weight_dtype, fetch)
        return m

    @property
    def weight_dtype(self) -> Optional[str]:
        """How the weight matrices and embedding tables are stored: ``"bfloat16"``,
        ``"float16"``, or None (in ``dtype``). Biases and LayerNorm parameters are always in
        ``dtype``."""
        return self._weight_dtype

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

    def stream(
        self,
        ids: Any,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_k: Optional[int] = None,
        top_p: Optional[float] = None,
        greedy: bool = False,
        seed: Optional[int] = None,
        stop_tokens: Optional[Iterable[int]] = None,
        context_shift: int = 1,
    ) -> Iterator[Union[int, np.ndarray]]:
        """Yield new tokens one step at a time (an ``int`` for a ``(T,)`` prompt, a ``(B,)``
        array for a ``(B, T)`` prompt). Arguments as in ``generate``."""
        for tok, _ in self._generate_iter(ids, max_new_tokens, temperature, top_k, top_p, greedy, seed, stop_tokens,
                                          context_shift):
            yield tok

    def generate(
        self,
        ids: Any,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_k: Optional[int] = None,
        top_p: Optional[float] = None,
        greedy: bool = False,
        seed: Optional[int] = None,
        stop_tokens: Optional[Iterable[int]] = None,
        return_logprobs: bool = False,
        context_shift: int = 1,
    ) -> Union[np.ndarray, Tuple[np.ndarray, np.ndarray]]:
        """Generate up to ``max_new_tokens`` tokens after the prompt ``ids`` and return them,
        shape ``(n,)`` or ``(B, n)``.

        The prompt is processed once (prefill); each new token then costs one position
        through every layer (decode, with a key/value cache). ``greedy=True`` or
        ``temperature=0`` picks the argmax; otherwise tokens are sampled from
        ``softmax(logits / temperature)``, restricted to the ``top_k`` most likely tokens
        and/or the smallest set whose probability reaches ``top_p``, with a generator seeded
        by ``seed`` (same seed, same tokens). Generation stops early once every sequence has
        produced one of ``stop_tokens`` (a stopped sequence is padded with its stop token).
        ``return_logprobs=True`` also returns each chosen token's log-probability under the
        model (temperature 1, no filtering).

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
        toks, lps = [], []
        one_d = np.asarray(ids).ndim == 1
        for tok, lp in self._generate_iter(ids, max_new_tokens, temperature, top_k, top_p, greedy, seed, stop_tokens,
                                           context_shift):
            toks.append(np.atleast_1d(tok))
            lps.append(np.atleast_1d(lp))
        b = 1 if one_d else np.asarray(ids).shape[0]
        out = np.stack(toks, axis=1) if toks else np.zeros((b, 0), dtype=np.int64)
        lp_arr = np.stack(lps, axis=1) if lps else np.zeros((b, 0), dtype=np.float64)
        if one_d:
            out, lp_arr = out[0], lp_arr[0]
        return (out, lp_arr) if return_logprobs else out

    def _generate_iter(self, ids, max_new_tokens, temperature, top_k, top_p, greedy, seed, stop_tokens,
                       context_shift=1):
        arr, one_d = _check_ids(ids, self._config)
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)):
            raise TypeError(f"generate: max_new_tokens must be an int, got {type(max_new_tokens).__name__}")
        if max_new_tokens < 0:
            raise ValueError(f"generate: max_new_tokens must be >= 0, got {max_new_tokens}")
        temperature, top_k, top_p, greedy = check_sampling_args(temperature, top_k, top_p, greedy, self._config.vocab_size)
        stops = None
        if stop_tokens is not None:
            if isinstance(stop_tokens, (str, bytes)) or not isinstance(stop_tokens, Iterable):
                raise TypeError(f"generate: stop_tokens must be an iterable of int token ids, got {type(stop_tokens).__name__}")
            seen = set()
            for s in stop_tokens:
                if isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer)):
                    raise TypeError(f"generate: stop_tokens must hold int token ids, got {s!r}")
                if not 0 <= s < self._config.vocab_size:
                    raise ValueError(f"generate: stop_tokens must be ids in [0, {self._config.vocab_size}), got {s}")
                seen.add(int(s))
            stops = np.array(sorted(seen), dtype=np.int64)
        if seed is not None:
            if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
                raise TypeError(f"generate: seed must be a non-negative int or None, got {seed!r}")
            if seed < 0:
                raise ValueError(f"generate: seed must be a non-negative int or None, got {seed}")
        rng = np.random.default_rng(seed)
        # Learned and rotary positions stop at n_ctx (no table row; the rotary model's trained
        # range or sliding window): the same crop and shift for both.
        n_ctx, learned = self._config.n_ctx, self._config.pos != "sinusoidal"
        if isinstance(context_shift, (bool, np.bool_)) or not isinstance(context_shift, (int, np.integer)):
            raise TypeError(f"generate: context_shift must be an int, got {context_shift!r}")
        if not 1 <= context_shift <= n_ctx:
            raise ValueError(f"generate: context_shift must be in [1, n_ctx = {n_ctx}], got {context_shift}")
        shift, warned = int(context_shift), False
        b, t = arr.shape
        _check_run_alloc(self._config, self.dtype.itemsize, b, min(t, n_ctx) if learned else t, b,
                         f"generate on ids of shape {arr.shape}")
        seq = arr
        if learned and t > n_ctx:
            seq = seq[:, -n_ctx:]
        cache = self.new_cache(b)
        if max_new_tokens == 0:
            return
        logits = self._native.step(cache, np.ascontiguousarray(seq), "last")
        done = np.zeros(b, dtype=bool)
        last = np.zeros(b, dtype=np.int64)
        for i in range(int(max_new_tokens)):
            tok, lp = choose(logits, temperature, top_k, top_p, greedy, rng)
            tok = np.where(done, last, tok)
            if stops is not None:
                done |= np.isin(tok, stops)
            last = tok
            yield (int(tok[0]) if one_d else tok.copy()), (float(lp[0]) if one_d else lp)
            if (stops is not None and done.all()) or i == max_new_tokens - 1:
                return  # no step for logits nobody will read
            seq = np.concatenate([seq, tok[:, None]], axis=1)
            if learned and seq.shape[1] > n_ctx:
                # Drop the `shift` oldest tokens (shift 1: keep exactly the last n_ctx, the
                # lesson's crop) and rebuild the cache from the rest.
                if shift == 1 and not warned:
                    warned = True
                    fast = n_ctx // 4
                    hint = (f" context_shift={fast} would drop {fast} tokens at once and rebuild once per "
                            f"{fast} tokens." if fast > 1 else "")
                    warnings.warn(
                        f"generate: the sequence reached n_ctx = {n_ctx}; with context_shift=1 (the exact "
                        f"crop) every further token rebuilds the cache from the last {n_ctx} tokens, a full "
                        f"prefill per token.{hint}", UserWarning, stacklevel=3)
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
        own format; a float64 model must name one for a GGUF file (F32 would round it).
        """
        if isinstance(path, (str, os.PathLike)) and os.fspath(path).lower().endswith(".gguf"):
            wd = weight_dtype if weight_dtype is not None else self._weight_dtype
            if wd is None:
                if self._dtype == "float64":
                    raise ValueError("save: a float64 model's weights do not fit GGUF's F32 exactly; pass "
                                     "weight_dtype='float32' (rounding them to nearest) or another format")
                wd = "float32"
            gguf_checkpoint.write_model(self._native.export(), self._config, path, wd, self._tokenizer)
            return
        # In a 16-bit format, the stored values exactly: widened on export, rounded back.
        if weight_dtype is None:
            wd = self._weight_dtype
        else:
            wd = None if weight_dtype == "float32" else weight_dtype_name("save: weight_dtype", weight_dtype)
        save_safetensors(self._native.export(), self._config, path, weight_dtype=wd)


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
) -> Model:
    """Load a Hugging Face checkpoint folder (``config.json`` + ``model.safetensors``, or the
    shards ``model.safetensors.index.json`` names) or a ``.safetensors`` file into a
    ``Model``: GPT-2 (``model_type`` ``gpt2``) or the Llama family (``llama``, ``mistral``,
    ``qwen2``; both transformers 4's and 5's config layout). Pickle checkpoints are refused.

    ``model.tokenizer`` is the folder's tokenizer (``tokenizer.json``, or ``vocab.json`` +
    ``merges.txt``, with the special tokens, chat template and end-of-generation ids of
    ``tokenizer_config.json``, ``generation_config.json`` and ``config.json``) when it has
    one, else ``None``: ids work either way, text calls then raise an error naming the missing
    files. ``tokenizer`` (a folder, or a ``gptcore.Tokenizer``) takes the tokenizer from
    elsewhere.

    ``weight_dtype`` (``"bfloat16"`` or ``"float16"``) stores the weight matrices and
    embedding tables 16-bit: the tensors are read one at a time and packed (BF16/F16 tensors of
    that format bit for bit, others rounded to nearest even), so no float32 copy of the model
    is made. By default (``None``, with ``dtype="float32"``) a checkpoint whose weight
    matrices and embedding tables are all stored in one 16-bit format keeps it (the usual
    bfloat16 Llama folder computes in float32 from bfloat16 weights, at half the memory);
    ``weight_dtype="float32"`` widens them to float32.

    A GGUF file (architecture ``gpt2``; F32, F16, BF16 tensors) loads the same way, with its
    configuration and tokenizer from its metadata (see ``gptcore.weights.gguf_checkpoint``). A
    file with Q8_0 / Q4_0 tensors raises a ``ValueError`` until the core computes with those
    formats, unless ``weight_dtype="float32"`` asks for the float32 model of their dequantized
    values (``round_weights(w, "q8_0")`` of the original weights).
    """
    name = _dtype_name(dtype)
    if gguf_checkpoint.is_gguf(path):
        return _load_gguf(path, name, n_heads, tokenizer, weight_dtype)
    if weight_dtype is None and name == "float32":
        wd = inspect_checkpoint(path, n_heads).stored_format
    else:
        wd = _weight_dtype(weight_dtype, name)
    if wd is not None:
        model = Model._from_checkpoint_lazily(path, wd, n_heads)
    else:
        weights, config = load_safetensors(path, n_heads=n_heads)
        model = Model(weights, config, dtype=dtype, n_heads=n_heads)
    if tokenizer is not None:
        model.tokenizer = tokenizer if isinstance(tokenizer, Tokenizer) else Tokenizer.from_folder(tokenizer)
        return model
    p = Path(os.fspath(path))
    if p.is_dir():
        try:
            model.tokenizer = Tokenizer.from_folder(p)
        except FileNotFoundError as e:  # ids still work; text calls repeat why there is none
            model._tokenizer_missing = str(e).split(": ", 1)[-1]
    else:
        model._tokenizer_missing = (missing_tokenizer_message(None) + f" ({str(p)!r} is a single file; "
                                    "pass load(..., tokenizer=folder))")
    return model


def _load_gguf(path: Any, dtype: str, n_heads: Optional[int], tokenizer: Any, weight_dtype: Any) -> Model:
    """``load`` of a GGUF file (``weight_dtype`` may also be ``"float32"``: dequantize)."""
    wd = weight_dtype
    if wd is not None:
        if not (isinstance(wd, str) and wd == "float32"):
            try:
                wd = weight_dtype_name("weight_dtype", wd)
            except (TypeError, ValueError):
                raise ValueError(f"load: weight_dtype for a GGUF file must be None, 'float32', 'bfloat16' or "
                                 f"'float16', got {weight_dtype!r}") from None
        if dtype != "float32":
            raise ValueError(f"load: weight_dtype={wd!r} needs dtype='float32', got dtype={dtype!r}")
    with gguf_checkpoint.open_model(path, n_heads=n_heads, weight_dtype=wd) as parts:
        if parts.fetch is not None:
            model = Model._from_parts(parts.small, parts.config, parts.weight_dtype, parts.fetch)
        else:
            model = Model(parts.weights, parts.config, dtype=dtype)
    if tokenizer is not None:
        model.tokenizer = tokenizer if isinstance(tokenizer, Tokenizer) else Tokenizer.from_folder(tokenizer)
    elif parts.tokenizer is not None:
        model.tokenizer = parts.tokenizer
    else:
        model._tokenizer_missing = parts.tokenizer_missing
    return model


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
