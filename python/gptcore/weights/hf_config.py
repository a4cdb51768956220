"""A Hugging Face GPT-2 ``config.json``, to and from a ``GPTConfig``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

from ..config import GPTConfig

__all__ = ["config_from_hf", "hf_config"]


def config_from_hf(cfg: Any, where: Path) -> GPTConfig:
    """The ``GPTConfig`` of the parsed ``config.json`` ``cfg`` (read from ``where``, which the
    errors name): GPT-2's keys (or their Hugging Face aliases) and a ``"gptcore"`` entry for
    what GPT-2's format cannot say. ``ValueError`` for anything gptcore cannot compute."""
    if not isinstance(cfg, dict):
        raise ValueError(
            f"load_safetensors: {str(where)!r} must hold a JSON object of GPT-2 settings, got a "
            f"{type(cfg).__name__}"
        )

    def get(*keys: str, default: Any = KeyError) -> Any:
        for k in keys:
            if k in cfg and cfg[k] is not None:
                return cfg[k]
        if default is KeyError:
            raise ValueError(f"load_safetensors: {str(where)!r} has no {keys[0]!r}")
        return default

    model_type = cfg.get("model_type", "gpt2")
    if model_type != "gpt2":
        raise ValueError(f"load_safetensors: {str(where)!r} describes model_type {model_type!r}; only 'gpt2' is supported")
    act = cfg.get("activation_function", "gelu_new")
    if act not in ("gelu_new", "gelu_pytorch_tanh"):
        raise ValueError(
            f"load_safetensors: {str(where)!r} asks for activation_function {act!r}; gptcore computes "
            "GPT-2's tanh GELU ('gelu_new')"
        )
    if cfg.get("scale_attn_weights", True) is not True or cfg.get("scale_attn_by_inverse_layer_idx", False):
        raise ValueError(
            f"load_safetensors: {str(where)!r} changes the attention scaling (scale_attn_weights / "
            "scale_attn_by_inverse_layer_idx); gptcore scales scores by 1/sqrt(d_head) only"
        )
    extra = cfg.get("gptcore")
    if extra is None:
        extra = {}
    if not isinstance(extra, dict):
        raise ValueError(
            f"load_safetensors: the 'gptcore' entry of {str(where)!r} must be an object, got a "
            f"{type(extra).__name__}"
        )
    tied = get("tie_word_embeddings", default=True)
    if not isinstance(tied, bool):
        raise ValueError(
            f"load_safetensors: 'tie_word_embeddings' in {str(where)!r} must be true or false, got {tied!r}"
        )
    d_model = get("n_embd", "hidden_size")
    try:
        return GPTConfig(
            vocab_size=get("vocab_size"),
            n_ctx=get("n_positions", "n_ctx", "max_position_embeddings"),
            d_model=d_model,
            n_heads=get("n_head", "num_attention_heads"),
            n_layers=get("n_layer", "num_hidden_layers"),
            d_ff=get("n_inner", default=None),
            pos=extra.get("pos", "learned"),
            tied=tied,
            bias=extra.get("bias", True),
            attn_bias=extra.get("attn_bias", None),
            ln_affine=extra.get("ln_affine", True),
            ln_eps=float(get("layer_norm_epsilon", default=1e-5)),
        )
    except (TypeError, ValueError, OverflowError) as e:
        raise ValueError(f"load_safetensors: {str(where)!r} does not give a valid configuration: {e}") from None


def hf_config(config: GPTConfig, dtype_name: str) -> Dict[str, Any]:
    """The ``config.json`` of ``config`` (``torch_dtype`` = ``dtype_name``), which
    ``config_from_hf`` reads back and transformers' ``GPT2LMHeadModel`` understands."""
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "activation_function": "gelu_new",
        "vocab_size": config.vocab_size,
        "n_positions": config.n_ctx,
        "n_embd": config.d_model,
        "n_head": config.n_heads,
        "n_layer": config.n_layers,
        "n_inner": None if config.d_ff == 4 * config.d_model else config.d_ff,
        "layer_norm_epsilon": config.ln_eps,
        "tie_word_embeddings": config.tied,
        "attn_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "resid_pdrop": 0.0,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "use_cache": True,
        "torch_dtype": dtype_name,
        # What GPT-2's format cannot say; transformers ignores unknown keys.
        "gptcore": {
            "pos": config.pos,
            "bias": config.bias,
            "attn_bias": config.attn_bias,
            "ln_affine": config.ln_affine,
            "d_ff": config.d_ff,
        },
    }
