"""Model configuration: ``GPTConfig`` and the presets of the lessons and of GPT-2."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, Optional

__all__ = ["GPTConfig", "PRESETS"]


def _positive_int(name: str, value: Any, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"GPTConfig: {name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"GPTConfig: {name} must be >= {minimum}, got {value}")


@dataclass(frozen=True)
class GPTConfig:
    """The sizes and switches of a GPT-style decoder.

    ``d_ff`` defaults to ``4 * d_model``. ``pos`` is ``"learned"`` (a ``wpe`` table, GPT-2)
    or ``"sinusoidal"`` (the lesson's fixed encoding, 1-based positions). ``bias`` switches the
    biases of every projection; ``attn_bias`` overrides it for the attention projections
    (``None``: same as ``bias``). ``ln_affine`` switches LayerNorm's gamma and beta.
    ``tied``: the LM head reuses the token embedding.

    Examples:
        >>> GPTConfig.preset("gpt2").d_head
        64
    """

    vocab_size: int
    n_ctx: int
    d_model: int
    n_heads: int
    n_layers: int
    d_ff: Optional[int] = None
    pos: str = "learned"
    tied: bool = True
    bias: bool = True
    attn_bias: Optional[bool] = None
    ln_affine: bool = True
    ln_eps: float = 1e-5

    def __post_init__(self) -> None:
        _positive_int("vocab_size", self.vocab_size)
        _positive_int("n_ctx", self.n_ctx)
        _positive_int("d_model", self.d_model)
        _positive_int("n_heads", self.n_heads)
        _positive_int("n_layers", self.n_layers, minimum=0)
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", 4 * self.d_model)
        _positive_int("d_ff", self.d_ff)
        if self.d_model % self.n_heads != 0:
            raise ValueError(
                f"GPTConfig: d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})"
            )
        if self.pos not in ("learned", "sinusoidal"):
            raise ValueError(f"GPTConfig: pos must be 'learned' or 'sinusoidal', got {self.pos!r}")
        for flag in ("tied", "bias", "ln_affine"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(f"GPTConfig: {flag} must be a bool, got {getattr(self, flag)!r}")
        if self.attn_bias is None:
            object.__setattr__(self, "attn_bias", self.bias)
        if not isinstance(self.attn_bias, bool):
            raise TypeError(f"GPTConfig: attn_bias must be a bool or None, got {self.attn_bias!r}")
        if (isinstance(self.ln_eps, bool) or not isinstance(self.ln_eps, (int, float)) or not self.ln_eps > 0
                or self.ln_eps == float("inf")):
            raise ValueError(f"GPTConfig: ln_eps must be a positive float, got {self.ln_eps!r}")
        object.__setattr__(self, "ln_eps", float(self.ln_eps))

    @property
    def d_head(self) -> int:
        """Width of one attention head, ``d_model // n_heads``."""
        return self.d_model // self.n_heads

    @property
    def mlp_bias(self) -> bool:
        return self.bias

    def replace(self, **changes: Any) -> "GPTConfig":
        """A copy with some fields changed (validated again)."""
        if "bias" in changes and "attn_bias" not in changes:
            changes["attn_bias"] = None
        if "d_model" in changes and "d_ff" not in changes:
            changes["d_ff"] = None
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def preset(cls, name: str) -> "GPTConfig":
        """One of ``PRESETS``: ``"gpt2"``, ``"gpt2-medium"``, ``"gpt2-large"``,
        ``"gpt2-xl"``, ``"lesson14"``, ``"lm4-skeleton"``."""
        if not isinstance(name, str):
            raise TypeError(f"GPTConfig.preset: name must be a str, got {type(name).__name__}")
        try:
            return cls(**PRESETS[name])
        except KeyError:
            raise ValueError(
                f"GPTConfig.preset: unknown preset {name!r}; choose one of {', '.join(sorted(PRESETS))}"
            ) from None


_GPT2 = dict(vocab_size=50257, n_ctx=1024, pos="learned", tied=True, bias=True, ln_affine=True)

#: Keyword arguments of every preset.
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
