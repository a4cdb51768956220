"""Exact model accounting: parameters, FLOPs per token, logits memory, Chinchilla budget.

Every count is an exact integer computed from a ``gptcore.config.GPTConfig``; ratios are
computed with the same operations, in the same order, as the lessons, so they print the
lessons' digits.

Lesson 14 counts "weight matrices and FFN biases, LayerNorm affines listed, attention biases
omitted"; ``lesson14_counting`` turns any config into that convention:

Examples:
    >>> from gptcore.config import GPTConfig
    >>> param_count(lesson14_counting(GPTConfig.preset("lesson14"))).total
    205440
    >>> param_count(lesson14_counting(GPTConfig.preset("gpt2"))).total
    124402944
    >>> param_count(GPTConfig.preset("gpt2")).total  # with the attention biases: the published size
    124439808
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, Optional

from .config import GPTConfig

__all__ = [
    "ParamCount",
    "FlopCount",
    "LogitsMemory",
    "ChinchillaBudget",
    "param_count",
    "flops_per_token",
    "logits_memory",
    "chinchilla",
    "lesson14_counting",
]


def _check_config(fn: str, config: Any) -> GPTConfig:
    if not isinstance(config, GPTConfig):
        raise TypeError(f"{fn}: config must be a GPTConfig, got {type(config).__name__}")
    return config


def _check_int(fn: str, name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{fn}: {name} must be an int, got {type(value).__name__}")
    value = value.__index__()
    if value < minimum:
        raise ValueError(f"{fn}: {name} must be >= {minimum}, got {value}")
    return value


def lesson14_counting(config: GPTConfig) -> GPTConfig:
    """``config`` as Lesson 14 counts it: every projection weight, the FFN biases and the
    LayerNorm affines, but no attention biases (``bias=True, attn_bias=False,
    ln_affine=True``). Positions and tying are kept. GPT-2 family only."""
    _check_config("lesson14_counting", config)
    if config.family != "gpt2":
        raise ValueError(f"lesson14_counting: Lesson 14 counts GPT-2 models, not family {config.family!r}")
    return config.replace(bias=True, attn_bias=False, ln_affine=True)


@dataclass(frozen=True)
class ParamCount:
    """Parameters by component. ``per_block`` is one block; ``blocks`` all of them.

    ``attention``, ``mlp`` and ``layernorms`` split ``per_block`` (weights and biases of the
    attention projections, of the MLP, and the two norms' parameters: LayerNorm affines or
    RMSNorm weights). ``lm_head`` is 0 when the head is tied to the token embedding.
    """

    token_embedding: int
    position_embedding: int
    per_block: int
    n_blocks: int
    blocks: int
    final_ln: int
    lm_head: int
    total: int
    attention: int
    mlp: int
    layernorms: int

    def share(self, part: str) -> float:
        """``part / total`` for a component name (``"blocks"``, ``"token_embedding"``, ...)."""
        if part not in ("token_embedding", "position_embedding", "blocks", "final_ln", "lm_head"):
            raise ValueError(
                "ParamCount.share: part must be one of 'token_embedding', 'position_embedding', "
                f"'blocks', 'final_ln', 'lm_head'; got {part!r}"
            )
        return getattr(self, part) / self.total

    def nbytes(self, bytes_per_param: int = 4) -> int:
        """Storage of all parameters at ``bytes_per_param`` bytes each (4: float32)."""
        return self.total * _check_int("ParamCount.nbytes", "bytes_per_param", bytes_per_param)

    def megabytes(self, bytes_per_param: int = 4) -> float:
        """``total * bytes_per_param / 1e6``, as the lesson prints the model's size."""
        return self.total * _check_int("ParamCount.megabytes", "bytes_per_param", bytes_per_param) / 1e6

    def as_dict(self) -> Dict[str, int]:
        return dataclasses.asdict(self)


def param_count(config: GPTConfig, *, include_blocks: bool = True) -> ParamCount:
    """Count the parameters of a model with ``config`` exactly.

    Per block, GPT-2: ``c_attn`` (d x 3d) and ``c_proj`` (d x d), plus their biases when
    ``config.attn_bias``; ``c_fc`` (d x d_ff) and the MLP ``c_proj`` (d_ff x d), plus their
    biases when ``config.bias``; two LayerNorms of 2d when ``config.ln_affine``. Llama:
    ``q_proj`` (d x q), ``k_proj`` and ``v_proj`` (d x kv each) with ``q = n_heads * d_head``,
    ``kv = n_kv_heads * d_head``, their biases (q + 2 kv) when ``config.attn_bias``,
    ``o_proj`` (q x d, bias d when ``config.attn_out_bias``); ``gate_proj``, ``up_proj`` and
    ``down_proj`` (d x d_ff each, biases when ``config.bias``); two RMSNorm weights of d.
    Around the blocks: ``wte`` (V x d), ``wpe`` (n_ctx x d) for learned positions (sinusoidal
    and rotary: 0), the final norm (LayerNorm 2d when affine, RMSNorm d), and the head (d x
    V, no bias) unless tied.

    ``include_blocks=False`` leaves the blocks out (placeholders, as in LM4-T1's skeleton:
    ``param_count(GPTConfig.preset("lm4-skeleton"), include_blocks=False).total == 66112``).

    Examples:
        >>> from gptcore.config import GPTConfig
        >>> c = param_count(GPTConfig.preset("gpt2"))
        >>> c.per_block, c.blocks, c.total
        (7087872, 85054464, 124439808)
    """
    cfg = _check_config("param_count", config)
    if not isinstance(include_blocks, bool):
        raise TypeError(f"param_count: include_blocks must be a bool, got {include_blocks!r}")
    d, f, V = cfg.d_model, cfg.d_ff, cfg.vocab_size
    q, kv = cfg.q_width, cfg.kv_width
    attention = d * q + 2 * d * kv + q * d + ((q + 2 * kv) if cfg.attn_bias else 0) + (d if cfg.attn_out_bias else 0)
    llama = cfg.family == "llama"
    n_mlp = 3 if llama else 2
    mlp = n_mlp * d * f + (((n_mlp - 1) * f + d) if cfg.bias else 0)
    norm = d if llama else (2 * d if cfg.ln_affine else 0)
    layernorms = 2 * norm
    per_block = attention + mlp + layernorms if include_blocks else 0
    if not include_blocks:
        attention = mlp = layernorms = 0
    blocks = cfg.n_layers * per_block
    token_embedding = V * d
    position_embedding = cfg.n_ctx * d if cfg.pos == "learned" else 0
    final_ln = norm
    lm_head = 0 if cfg.tied else d * V
    total = token_embedding + position_embedding + blocks + final_ln + lm_head
    return ParamCount(
        token_embedding=token_embedding,
        position_embedding=position_embedding,
        per_block=per_block,
        n_blocks=cfg.n_layers,
        blocks=blocks,
        final_ln=final_ln,
        lm_head=lm_head,
        total=total,
        attention=attention,
        mlp=mlp,
        layernorms=layernorms,
    )


@dataclass(frozen=True)
class FlopCount:
    """FLOPs per token, Lesson 14's way.

    ``forward`` = 2 x (block parameters + the head's d x V matrix): two FLOPs for each
    parameter that multiplies an activation (the embedding gather is free; the head costs
    ``2 d V`` whether or not it is tied). ``training`` = 3 x forward (the backward pass costs
    about twice the forward). ``attention`` = ``4 T q`` per layer, all layers, with ``q =
    n_heads * d_head`` (= d for GPT-2): the score product ``Q K^T`` and the mix ``A V``,
    which carry no weights (grouped-query attention shares keys and values between heads but
    not these products). ``attention_percent`` = ``attention / forward * 100``.
    ``crossover_T``: the context length where the attention term equals the MLP's weight
    FLOPs per layer (GPT-2: ``4 d d_ff``, so ``T* = d_ff``, = 4d for d_ff = 4d; SwiGLU's
    three matrices: ``6 d d_ff``, so ``T* = 6 d d_ff / (4 q)``, rounded down).
    """

    T: int
    forward: int
    training: int
    attention: int
    attention_percent: float
    crossover_T: int

    @property
    def forward_with_attention(self) -> int:
        """The forward FLOPs per token including the attention term."""
        return self.forward + self.attention

    def as_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def flops_per_token(config: GPTConfig, T: Optional[int] = None) -> FlopCount:
    """FLOPs per token at context length ``T`` (default ``config.n_ctx``).

    Uses the block parameters of ``param_count`` for ``config``, so pass
    ``lesson14_counting`` of a config to reproduce the lesson's numbers:

    Examples:
        >>> from gptcore.config import GPTConfig
        >>> f = flops_per_token(lesson14_counting(GPTConfig.preset("gpt2")), T=1024)
        >>> f.forward, f.training, f.attention, f.attention_percent, f.crossover_T
        (247229952, 741689856, 37748736, 15.268674242188906, 3072)
    """
    cfg = _check_config("flops_per_token", config)
    T = cfg.n_ctx if T is None else _check_int("flops_per_token", "T", T)
    counts = param_count(cfg)
    forward = 2 * (counts.blocks + cfg.d_model * cfg.vocab_size)
    attention = 4 * T * cfg.q_width * cfg.n_layers
    mlp_flops = 2 * (3 if cfg.family == "llama" else 2) * cfg.d_model * cfg.d_ff
    return FlopCount(
        T=T,
        forward=forward,
        training=3 * forward,
        attention=attention,
        attention_percent=attention / forward * 100,
        crossover_T=mlp_flops // (4 * cfg.q_width),
    )


@dataclass(frozen=True)
class LogitsMemory:
    """The (B, n, V) logits tensor: ``entries`` values of ``bytes_per_entry`` bytes."""

    entries: int
    bytes_per_entry: int

    @property
    def nbytes(self) -> int:
        return self.entries * self.bytes_per_entry

    @property
    def gigabytes(self) -> float:
        """``nbytes / 1e9``."""
        return self.nbytes / 1e9


def logits_memory(B: int, n: int, V: int, bytes: int = 4) -> LogitsMemory:
    """Size of the logits of a batch: ``B * n * V`` entries of ``bytes`` bytes (4: float32).

    Examples:
        >>> m = logits_memory(8, 1024, 50257)
        >>> m.entries, round(m.gigabytes, 1)
        (411705344, 1.6)
    """
    fn = "logits_memory"
    return LogitsMemory(
        entries=_check_int(fn, "B", B) * _check_int(fn, "n", n) * _check_int(fn, "V", V),
        bytes_per_entry=_check_int(fn, "bytes", bytes),
    )


@dataclass(frozen=True)
class ChinchillaBudget:
    """Compute-optimal training budget for ``params`` parameters (Hoffmann et al. 2022).

    ``tokens`` D = tokens_per_param x P; ``compute`` C = 6 P D FLOPs. In bits (Lesson 14's
    information lens): ``parameter_bits`` = 32 P (float32 storage), ``data_bits`` =
    ``bits_per_token`` x D, ``bits_ratio`` = data bits per bit of parameter storage.
    """

    params: int
    tokens: int
    compute: int
    parameter_bits: int
    data_bits: float
    bits_ratio: float


def chinchilla(params: int, *, tokens_per_param: int = 20, bits_per_token: float = 5,
               bits_per_param: int = 32) -> ChinchillaBudget:
    """D = 20 P tokens and C = 6 P D FLOPs (and the bits comparison of Lesson 14).

    Examples:
        >>> b = chinchilla(124402944)
        >>> b.tokens, f"{b.compute:.2e}", f"{b.parameter_bits:.2e}", f"{b.data_bits:.2e}", b.bits_ratio
        (2488058880, '1.86e+18', '3.98e+09', '1.24e+10', 3.125)
    """
    fn = "chinchilla"
    P = _check_int(fn, "params", params)
    k = _check_int(fn, "tokens_per_param", tokens_per_param)
    nbits = _check_int(fn, "bits_per_param", bits_per_param)
    if isinstance(bits_per_token, bool) or not isinstance(bits_per_token, (int, float)) or not bits_per_token > 0:
        raise ValueError(f"{fn}: bits_per_token must be a positive number, got {bits_per_token!r}")
    D = k * P
    data_bits = bits_per_token * D
    return ChinchillaBudget(
        params=P,
        tokens=D,
        compute=6 * P * D,
        parameter_bits=nbits * P,
        data_bits=data_bits,
        bits_ratio=data_bits / (nbits * P),
    )
