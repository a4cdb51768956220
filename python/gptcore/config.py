"""Model configuration: ``GPTConfig``, its model families, and the presets of the lessons, of
GPT-2 and of the Llama-family models people run today."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional

__all__ = ["FAMILIES", "GPTConfig", "LLAMA_PRESETS", "PRESETS", "ROPE_TYPES", "RopeScaling"]

#: The model families: ``"gpt2"`` (LayerNorm, learned or sinusoidal positions, GELU MLP, one
#: key/value head per query head) and ``"llama"`` (RMSNorm, rotary positions, SwiGLU MLP,
#: grouped-query attention: Llama, Mistral, Qwen2, SmolLM2, TinyLlama).
FAMILIES = ("gpt2", "llama")

#: The rotary frequency schemes gptcore computes (Hugging Face's ``rope_type`` names).
ROPE_TYPES = ("default", "linear", "llama3")

_POSITIONS = {"gpt2": ("learned", "sinusoidal"), "llama": ("rotary",)}


def _positive_int(name: str, value: Any, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"GPTConfig: {name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"GPTConfig: {name} must be >= {minimum}, got {value}")


def _positive_float(what: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what}: {name} must be a positive number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class RopeScaling:
    """How rotary frequencies are scaled (``rope_scaling`` / ``rope_parameters`` of a Hugging
    Face config): ``"linear"`` divides every frequency by ``factor``; ``"llama3"`` divides the
    low frequencies by ``factor``, keeps the high ones and blends in between (``factor``,
    ``low_freq_factor``, ``high_freq_factor``, ``original_max_position_embeddings``).

    Examples:
        >>> RopeScaling.from_dict({"type": "linear", "factor": 2.0})
        RopeScaling(rope_type='linear', factor=2.0, low_freq_factor=None, high_freq_factor=None, original_max_position_embeddings=None)
    """

    rope_type: str
    factor: float
    low_freq_factor: Optional[float] = None
    high_freq_factor: Optional[float] = None
    original_max_position_embeddings: Optional[float] = None

    def __post_init__(self) -> None:
        what = "RopeScaling"
        if self.rope_type not in ("linear", "llama3"):
            raise ValueError(
                f"{what}: rope type {self.rope_type!r} is not supported; gptcore computes "
                + ", ".join(map(repr, ROPE_TYPES)))
        object.__setattr__(self, "factor", _positive_float(what, "factor", self.factor))
        if self.rope_type == "llama3":
            for name in ("low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
                object.__setattr__(self, name, _positive_float(what, name, getattr(self, name)))
            if self.high_freq_factor <= self.low_freq_factor:
                raise ValueError(f"{what}: llama3 needs high_freq_factor ({self.high_freq_factor}) > "
                                 f"low_freq_factor ({self.low_freq_factor})")
        else:
            for name in ("low_freq_factor", "high_freq_factor", "original_max_position_embeddings"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{what}: {name} belongs to llama3 scaling, not {self.rope_type!r}")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "RopeScaling") -> Optional["RopeScaling"]:
        """The scaling a Hugging Face dict describes (``"rope_type"``, or the older
        ``"type"``, and the type's parameters; other keys such as ``rope_theta`` are ignored),
        or None for the ``"default"`` type. An unsupported type is a ``ValueError`` naming it."""
        if not isinstance(d, Mapping):
            raise TypeError(f"{where}: rope scaling must be a mapping or None, got {type(d).__name__}")
        kind = d.get("rope_type", d.get("type", "default"))
        if kind == "default":
            return None
        if kind not in ROPE_TYPES:
            raise ValueError(f"{where}: rope type {kind!r} is not supported; gptcore computes "
                             + ", ".join(map(repr, ROPE_TYPES)))
        keys = ("factor",) if kind == "linear" else (
            "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
        missing = [k for k in keys if d.get(k) is None]
        if missing:
            raise ValueError(f"{where}: {kind} rope scaling needs {', '.join(missing)}")
        try:
            return cls(rope_type=kind, **{k: d[k] for k in keys})
        except (TypeError, ValueError) as e:
            raise ValueError(f"{where}: {str(e).split(': ', 1)[-1]}") from None

    def to_dict(self) -> Dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclass(frozen=True)
class GPTConfig:
    """The sizes and switches of a decoder of one of the ``FAMILIES``.

    Shared by every family: ``vocab_size``, ``n_ctx`` (the longest sequence; learned
    positions have one row per position), ``d_model``, ``n_heads``, ``n_layers``, ``d_ff``
    (default ``4 * d_model``), ``tied`` (the LM head reuses the token embedding) and
    ``ln_eps`` (the normalisation's epsilon; default 1e-5).

    ``family="gpt2"``: ``pos`` is ``"learned"`` (a ``wpe`` table, the default) or
    ``"sinusoidal"`` (the lesson's fixed encoding, 1-based positions); ``bias`` switches the
    biases of every projection (default True) and ``attn_bias`` overrides it for the attention
    projections (``None``: same as ``bias``); ``ln_affine`` switches LayerNorm's gamma and
    beta; GELU (tanh form) MLP.

    ``family="llama"``: RMSNorm, rotary positions (``pos="rotary"``, with ``rope_theta`` and
    ``rope_scaling``: None or a ``RopeScaling``, or its dict), a SwiGLU MLP of width ``d_ff``,
    ``n_kv_heads`` key/value heads (a divisor of ``n_heads``; default ``n_heads``) and heads
    of width ``head_dim`` (default ``d_model // n_heads``). ``attn_bias`` switches the q/k/v
    biases and ``attn_out_bias`` the output projection's (default: as ``attn_bias``; Qwen2 has
    the first and not the second), ``bias`` the MLP's (default False).

    Examples:
        >>> GPTConfig.preset("gpt2").d_head
        64
        >>> c = GPTConfig.preset("smollm2-135m")
        >>> c.family, c.n_heads, c.n_kv_heads, c.d_head, c.pos
        ('llama', 9, 3, 64, 'rotary')
    """

    vocab_size: int
    n_ctx: int
    d_model: int
    n_heads: int
    n_layers: int
    d_ff: Optional[int] = None
    pos: Optional[str] = None
    tied: bool = True
    bias: Optional[bool] = None
    attn_bias: Optional[bool] = None
    ln_affine: bool = True
    ln_eps: float = 1e-5
    family: str = "gpt2"
    n_kv_heads: Optional[int] = None
    head_dim: Optional[int] = None
    attn_out_bias: Optional[bool] = None
    rope_theta: float = 10000.0
    rope_scaling: Optional[RopeScaling] = None

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"GPTConfig: family must be one of {', '.join(map(repr, FAMILIES))}, got {self.family!r}")
        llama = self.family == "llama"
        _positive_int("vocab_size", self.vocab_size)
        _positive_int("n_ctx", self.n_ctx)
        _positive_int("d_model", self.d_model)
        _positive_int("n_heads", self.n_heads)
        _positive_int("n_layers", self.n_layers, minimum=0)
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", 4 * self.d_model)
        _positive_int("d_ff", self.d_ff)
        if self.n_kv_heads is None:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        _positive_int("n_kv_heads", self.n_kv_heads)
        if self.head_dim is None:
            if self.d_model % self.n_heads != 0:
                raise ValueError(
                    f"GPTConfig: d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})"
                    + (" (or give head_dim)" if llama else "")
                )
            object.__setattr__(self, "head_dim", self.d_model // self.n_heads)
        _positive_int("head_dim", self.head_dim)
        if self.pos is None:
            object.__setattr__(self, "pos", _POSITIONS[self.family][0])
        if self.pos not in _POSITIONS[self.family]:
            allowed = " or ".join(map(repr, _POSITIONS[self.family]))
            raise ValueError(f"GPTConfig: pos must be {allowed} for family {self.family!r}, got {self.pos!r}")
        if self.bias is None:
            object.__setattr__(self, "bias", not llama)
        for flag in ("tied", "bias", "ln_affine"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(f"GPTConfig: {flag} must be a bool, got {getattr(self, flag)!r}")
        if self.attn_bias is None:
            object.__setattr__(self, "attn_bias", self.bias)
        if not isinstance(self.attn_bias, bool):
            raise TypeError(f"GPTConfig: attn_bias must be a bool or None, got {self.attn_bias!r}")
        if self.attn_out_bias is None:
            object.__setattr__(self, "attn_out_bias", self.attn_bias)
        if not isinstance(self.attn_out_bias, bool):
            raise TypeError(f"GPTConfig: attn_out_bias must be a bool or None, got {self.attn_out_bias!r}")
        if (isinstance(self.ln_eps, bool) or not isinstance(self.ln_eps, (int, float)) or not self.ln_eps > 0
                or self.ln_eps == float("inf")):
            raise ValueError(f"GPTConfig: ln_eps must be a positive float, got {self.ln_eps!r}")
        object.__setattr__(self, "ln_eps", float(self.ln_eps))
        object.__setattr__(self, "rope_theta", _positive_float("GPTConfig", "rope_theta", self.rope_theta))
        if isinstance(self.rope_scaling, Mapping):
            object.__setattr__(self, "rope_scaling", RopeScaling.from_dict(self.rope_scaling, "GPTConfig"))
        if self.rope_scaling is not None and not isinstance(self.rope_scaling, RopeScaling):
            raise TypeError(f"GPTConfig: rope_scaling must be None, a RopeScaling or a dict, got "
                            f"{type(self.rope_scaling).__name__}")
        if llama:
            self._check_llama()
        else:
            self._check_gpt2()

    def _check_gpt2(self) -> None:
        if self.n_kv_heads != self.n_heads:
            raise ValueError(f"GPTConfig: gpt2 has one key/value head per query head; n_kv_heads "
                             f"({self.n_kv_heads}) must equal n_heads ({self.n_heads})")
        if self.head_dim * self.n_heads != self.d_model:
            raise ValueError(f"GPTConfig: gpt2's heads split d_model; head_dim ({self.head_dim}) x n_heads "
                             f"({self.n_heads}) must equal d_model ({self.d_model})")
        if self.attn_out_bias != self.attn_bias:
            raise ValueError("GPTConfig: gpt2's attention biases are all present or all absent "
                             f"(attn_bias={self.attn_bias}, attn_out_bias={self.attn_out_bias})")
        if self.rope_scaling is not None:
            raise ValueError("GPTConfig: rope_scaling applies to rotary positions (family 'llama')")

    def _check_llama(self) -> None:
        if self.n_heads % self.n_kv_heads != 0:
            raise ValueError(f"GPTConfig: n_heads ({self.n_heads}) must be a multiple of n_kv_heads "
                             f"({self.n_kv_heads})")
        if self.head_dim % 2 != 0:
            raise ValueError(f"GPTConfig: rotary positions need an even head_dim, got {self.head_dim}")
        if not self.ln_affine:
            raise ValueError("GPTConfig: llama's RMSNorm always has its weight (ln_affine must be True)")

    @property
    def d_head(self) -> int:
        """Width of one attention head: ``head_dim`` (``d_model // n_heads`` unless given)."""
        return self.head_dim

    @property
    def q_width(self) -> int:
        """Columns of the queries and of the attention's output, ``n_heads * d_head``."""
        return self.n_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Columns of the keys (and of the values), ``n_kv_heads * d_head``."""
        return self.n_kv_heads * self.head_dim

    @property
    def mlp_bias(self) -> bool:
        return self.bias

    def replace(self, **changes: Any) -> "GPTConfig":
        """A copy with some fields changed (validated again; fields derived from a changed
        one, such as ``d_ff`` from ``d_model``, are derived again)."""
        if "bias" in changes and "attn_bias" not in changes:
            changes["attn_bias"] = None
        if ("bias" in changes or "attn_bias" in changes) and "attn_out_bias" not in changes:
            changes["attn_out_bias"] = None
        if "d_model" in changes and "d_ff" not in changes:
            changes["d_ff"] = None
        if ("d_model" in changes or "n_heads" in changes) and "head_dim" not in changes:
            changes["head_dim"] = None
        if "n_heads" in changes and "n_kv_heads" not in changes and self.n_kv_heads == self.n_heads:
            changes["n_kv_heads"] = None
        if "family" in changes and "pos" not in changes:
            changes["pos"] = None
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> Dict[str, Any]:
        d = dataclasses.asdict(self)
        d["rope_scaling"] = None if self.rope_scaling is None else self.rope_scaling.to_dict()
        return d

    @classmethod
    def preset(cls, name: str) -> "GPTConfig":
        """One of ``PRESETS`` (GPT-2's sizes and the lessons' models: ``"gpt2"``,
        ``"gpt2-medium"``, ``"gpt2-large"``, ``"gpt2-xl"``, ``"lesson14"``,
        ``"lm4-skeleton"``) or ``LLAMA_PRESETS`` (the shapes of SmolLM2, Qwen2.5, Llama 3.2,
        TinyLlama and Mistral: ``"smollm2-135m"``, ``"qwen2.5-0.5b"``, ...)."""
        if not isinstance(name, str):
            raise TypeError(f"GPTConfig.preset: name must be a str, got {type(name).__name__}")
        kwargs = PRESETS.get(name, LLAMA_PRESETS.get(name))
        if kwargs is None:
            raise ValueError(
                f"GPTConfig.preset: unknown preset {name!r}; choose one of "
                f"{', '.join(sorted(PRESETS) + sorted(LLAMA_PRESETS))}"
            )
        return cls(**kwargs)


_GPT2 = dict(vocab_size=50257, n_ctx=1024, pos="learned", tied=True, bias=True, ln_affine=True)
_SMOLLM2 = dict(family="llama", vocab_size=49152, n_ctx=8192, tied=True, ln_eps=1e-5)
_QWEN25 = dict(family="llama", vocab_size=151936, n_ctx=32768, tied=True, attn_bias=True, attn_out_bias=False,
               rope_theta=1000000.0, ln_eps=1e-6)

#: Keyword arguments of the GPT-2 family's presets.
PRESETS: Dict[str, Dict[str, Any]] = {
    "gpt2": dict(_GPT2, d_model=768, n_heads=12, n_layers=12),
    "gpt2-medium": dict(_GPT2, d_model=1024, n_heads=16, n_layers=24),
    "gpt2-large": dict(_GPT2, d_model=1280, n_heads=20, n_layers=36),
    "gpt2-xl": dict(_GPT2, d_model=1600, n_heads=25, n_layers=48),
    # Lesson 14's toy model: no biases, no LayerNorm affine, untied head, sinusoidal positions.
    "lesson14": dict(
        vocab_size=50, n_ctx=8, d_model=64, n_heads=4, n_layers=4, d_ff=256,
        pos="sinusoidal", tied=False, bias=False, ln_affine=False,
    ),
    # LM4-T1's skeleton: vocab 1000, context 64, width 32, 2 layers (heads: 2), untied head.
    "lm4-skeleton": dict(
        vocab_size=1000, n_ctx=64, d_model=32, n_heads=2, n_layers=2,
        pos="learned", tied=False, bias=True, ln_affine=True,
    ),
}

#: Keyword arguments of the Llama family's presets: the shapes of the published models'
#: ``config.json`` (their weights are not part of gptcore).
LLAMA_PRESETS: Dict[str, Dict[str, Any]] = {
    "smollm2-135m": dict(_SMOLLM2, d_model=576, n_heads=9, n_kv_heads=3, n_layers=30, d_ff=1536,
                         rope_theta=100000.0),
    "smollm2-360m": dict(_SMOLLM2, d_model=960, n_heads=15, n_kv_heads=5, n_layers=32, d_ff=2560,
                         rope_theta=100000.0),
    "smollm2-1.7b": dict(_SMOLLM2, d_model=2048, n_heads=32, n_kv_heads=32, n_layers=24, d_ff=8192,
                         rope_theta=130000.0),
    "qwen2.5-0.5b": dict(_QWEN25, d_model=896, n_heads=14, n_kv_heads=2, n_layers=24, d_ff=4864),
    "qwen2.5-1.5b": dict(_QWEN25, d_model=1536, n_heads=12, n_kv_heads=2, n_layers=28, d_ff=8960),
    "llama-3.2-1b": dict(
        family="llama", vocab_size=128256, n_ctx=131072, d_model=2048, n_heads=32, n_kv_heads=8, n_layers=16,
        d_ff=8192, tied=True, rope_theta=500000.0, ln_eps=1e-5,
        rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                          original_max_position_embeddings=8192),
    ),
    "tinyllama-1.1b": dict(family="llama", vocab_size=32000, n_ctx=2048, d_model=2048, n_heads=32, n_kv_heads=4,
                           n_layers=22, d_ff=5632, tied=False, ln_eps=1e-5),
    # Mistral 7B v0.3 (v0.1 has vocab 32000, rope_theta 1e4 and a 4096-token sliding window).
    "mistral-7b": dict(family="llama", vocab_size=32768, n_ctx=32768, d_model=4096, n_heads=32, n_kv_heads=8,
                       n_layers=32, d_ff=14336, tied=False, rope_theta=1000000.0, ln_eps=1e-5),
}
