"""A Hugging Face ``config.json``, to and from a ``GPTConfig``: GPT-2's (``model_type``
``gpt2``) and the Llama family's (``llama``, ``mistral``, ``qwen2``), in transformers 4's
layout (top-level ``rope_theta`` and ``rope_scaling``, ``torch_dtype``) or transformers 5's
(``rope_parameters``, ``dtype``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional

from ..config import GPTConfig, RopeScaling

__all__ = ["LLAMA_MODEL_TYPES", "MODEL_TYPES", "config_from_hf", "hf_config"]

#: The ``model_type`` values read as the Llama family (the same block and tensor names).
LLAMA_MODEL_TYPES = ("llama", "mistral", "qwen2")
#: Every ``model_type`` gptcore reads.
MODEL_TYPES = ("gpt2",) + LLAMA_MODEL_TYPES


def config_from_hf(cfg: Any, where: Path) -> GPTConfig:
    """The ``GPTConfig`` of the parsed ``config.json`` ``cfg`` (read from ``where``, which the
    errors name): GPT-2's keys (or their Hugging Face aliases) and a ``"gptcore"`` entry for
    what GPT-2's format cannot say, or a Llama-family config (see ``_llama_config``).
    ``ValueError`` naming the file and the field for anything gptcore cannot compute."""
    if not isinstance(cfg, dict):
        raise ValueError(
            f"load_safetensors: {str(where)!r} must hold a JSON object of model settings, got a "
            f"{type(cfg).__name__}"
        )
    model_type = cfg.get("model_type", "gpt2")
    if model_type in LLAMA_MODEL_TYPES:
        return _llama_config(cfg, where, model_type)

    def get(*keys: str, default: Any = KeyError) -> Any:
        for k in keys:
            if k in cfg and cfg[k] is not None:
                return cfg[k]
        if default is KeyError:
            raise ValueError(f"load_safetensors: {str(where)!r} has no {keys[0]!r}")
        return default

    if model_type != "gpt2":
        raise ValueError(f"load_safetensors: {str(where)!r} describes model_type {model_type!r}; gptcore runs "
                         + ", ".join(map(repr, MODEL_TYPES)))
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


def _rope(cfg: Dict[str, Any], where: str) -> tuple:
    """``(rope_theta, RopeScaling or None)`` from ``rope_parameters`` (transformers 5) or the
    top-level ``rope_theta`` and ``rope_scaling`` (transformers 4)."""
    params = cfg.get("rope_parameters")
    if params is not None:
        field = "rope_parameters"
        if not isinstance(params, dict):
            raise ValueError(f"load_safetensors: {where}: rope_parameters must be an object, got {params!r}")
        theta = params.get("rope_theta", cfg.get("rope_theta", 10000.0))
        scaling_dict: Optional[Dict[str, Any]] = params
    else:
        field = "rope_scaling"
        theta = cfg.get("rope_theta", 10000.0)
        scaling_dict = cfg.get("rope_scaling")
        if scaling_dict is not None and not isinstance(scaling_dict, dict):
            raise ValueError(f"load_safetensors: {where}: rope_scaling must be an object or null, got {scaling_dict!r}")
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0 or theta == float("inf"):
        raise ValueError(f"load_safetensors: {where}: rope_theta must be a positive number, got {theta!r}")
    if scaling_dict is None:
        return float(theta), None
    kind = scaling_dict.get("rope_type", scaling_dict.get("type", "default"))
    if not isinstance(kind, str) or kind not in ("default", "linear", "llama3"):
        raise ValueError(f"load_safetensors: {where}: rope type {kind!r} ({field}) is not supported; gptcore "
                         "computes 'default', 'linear' and 'llama3' rotary frequencies")
    partial = scaling_dict.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    if partial not in (None, 1, 1.0):
        raise ValueError(f"load_safetensors: {where}: partial_rotary_factor {partial!r} is not supported "
                         "(gptcore rotates whole heads)")
    return float(theta), RopeScaling.from_dict(scaling_dict, f"load_safetensors: {where} ({field})")


def _llama_config(cfg: Dict[str, Any], path: Path, model_type: str) -> GPTConfig:
    """A ``llama``, ``mistral`` or ``qwen2`` config: RMSNorm, rotary positions, SwiGLU,
    grouped-query attention. Qwen2 has q/k/v biases and no output bias; Llama's
    ``attention_bias`` switches all four, ``mlp_bias`` the MLP's. A sliding window
    (``sliding_window``: Mistral's, Qwen2's when ``use_sliding_window``) shorter than
    ``max_position_embeddings`` becomes the model's context: within it, sliding-window
    attention is full attention, so every result gptcore gives is exact, and a longer sequence
    is refused (generation drops the oldest tokens, as for GPT-2's context)."""
    where = f"{str(path)!r} (model_type {model_type!r})"

    def get(key: str, default: Any = KeyError) -> Any:
        v = cfg.get(key)
        if v is None:
            if default is KeyError:
                raise ValueError(f"load_safetensors: {where} has no {key!r}")
            return default
        return v

    act = get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"load_safetensors: {where} asks for hidden_act {act!r}; gptcore's SwiGLU computes 'silu'")
    theta, scaling = _rope(cfg, where)
    tied = get("tie_word_embeddings", False)
    if not isinstance(tied, bool):
        raise ValueError(f"load_safetensors: 'tie_word_embeddings' in {where} must be true or false, got {tied!r}")
    n_ctx = get("max_position_embeddings", 2048)
    window = cfg.get("sliding_window")
    if model_type == "qwen2" and not cfg.get("use_sliding_window", False):
        window = None
    if window is not None:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"load_safetensors: {where}: sliding_window must be a positive int or null, got {window!r}")
        if isinstance(n_ctx, int) and window < n_ctx:
            n_ctx = window
    if model_type == "qwen2":
        attn_bias, out_bias, mlp_bias = True, False, False
    else:
        attn_bias = out_bias = get("attention_bias", False)
        mlp_bias = get("mlp_bias", False)
    for name, flag in (("attention_bias", attn_bias), ("mlp_bias", mlp_bias)):
        if not isinstance(flag, bool):
            raise ValueError(f"load_safetensors: {name!r} in {where} must be true or false, got {flag!r}")
    try:
        eps = get("rms_norm_eps", 1e-6)
        return GPTConfig(
            family="llama",
            vocab_size=get("vocab_size"),
            n_ctx=n_ctx,
            d_model=get("hidden_size"),
            n_heads=get("num_attention_heads"),
            n_kv_heads=cfg.get("num_key_value_heads"),
            head_dim=cfg.get("head_dim"),
            n_layers=get("num_hidden_layers"),
            d_ff=get("intermediate_size"),
            tied=tied,
            bias=mlp_bias,
            attn_bias=attn_bias,
            attn_out_bias=out_bias,
            ln_eps=float(eps) if isinstance(eps, (int, float)) and not isinstance(eps, bool) else eps,
            rope_theta=theta,
            rope_scaling=scaling,
        )
    except (TypeError, ValueError, OverflowError) as e:
        raise ValueError(f"load_safetensors: {where} does not give a valid configuration: {e}") from None


def hf_config(config: GPTConfig, dtype_name: str) -> Dict[str, Any]:
    """The ``config.json`` of ``config`` (``torch_dtype`` = ``dtype_name``), which
    ``config_from_hf`` reads back and transformers understands: ``GPT2LMHeadModel``'s, or for
    the Llama family ``LlamaForCausalLM``'s (``Qwen2ForCausalLM``'s when only the q/k/v
    projections have biases), rotary settings in transformers 4's top-level keys (which
    transformers 5 reads too)."""
    if config.family == "llama":
        return _llama_hf_config(config, dtype_name)
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


def _llama_hf_config(config: GPTConfig, dtype_name: str) -> Dict[str, Any]:
    qwen2 = config.attn_bias and not config.attn_out_bias and not config.bias
    if not qwen2 and config.attn_bias != config.attn_out_bias:
        raise ValueError(
            "save_safetensors: a Llama-family config with attn_bias != attn_out_bias is a Qwen2 model only "
            f"without MLP biases (attn_bias={config.attn_bias}, attn_out_bias={config.attn_out_bias}, "
            f"bias={config.bias}); neither LlamaForCausalLM nor Qwen2ForCausalLM can hold it")
    out: Dict[str, Any] = {
        "architectures": ["Qwen2ForCausalLM" if qwen2 else "LlamaForCausalLM"],
        "model_type": "qwen2" if qwen2 else "llama",
        "hidden_act": "silu",
        "vocab_size": config.vocab_size,
        "max_position_embeddings": config.n_ctx,
        "hidden_size": config.d_model,
        "intermediate_size": config.d_ff,
        "num_attention_heads": config.n_heads,
        "num_key_value_heads": config.n_kv_heads,
        "head_dim": config.head_dim,
        "num_hidden_layers": config.n_layers,
        "rms_norm_eps": config.ln_eps,
        "tie_word_embeddings": config.tied,
        "rope_theta": config.rope_theta,
        "rope_scaling": None if config.rope_scaling is None else config.rope_scaling.to_dict(),
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "use_cache": True,
        "torch_dtype": dtype_name,
    }
    if not qwen2:
        out["attention_bias"] = config.attn_bias
        out["mlp_bias"] = config.bias
    return out
