"""GPT-2 weights with random values, the same weights in transformers' GPT2LMHeadModel, and the
cost accounting (FLOPs, bytes) that the forward and generation benchmarks compare against."""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from _common import bandwidth, gptcore, np, peak_flops

Weights = Dict[str, np.ndarray]


def gpt2_config(name: str = "gpt2"):
    return gptcore.GPTConfig.preset(name)


def random_weights(config, seed: int = 0, perturb: bool = True) -> Tuple[Weights, str]:
    """Float32 weights from gptcore.init_weights (GPT-2's initialisation). ``perturb`` adds
    small random values to every bias and LayerNorm parameter (GPT-2's init leaves them at 0
    and 1), so that the agreement checks exercise them too. Returns (weights, where they came
    from)."""
    weights = gptcore.init_weights(config, seed, "gpt2", dtype="float32")
    weights = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in weights.items()}
    source = "gptcore.init_weights(scheme='gpt2', dtype='float32')"
    if perturb:
        rng = np.random.default_rng(seed + 1)
        for k, v in list(weights.items()):
            if v.ndim == 1:
                scale = 0.1 if k.endswith(".weight") else 0.02
                weights[k] = (v + rng.standard_normal(v.shape, dtype=np.float32) * np.float32(scale)).astype(np.float32)
    return weights, source


# ---------------------------------------------------------------------------------------------
# transformers


def hf_model(weights: Weights, config, torch, transformers):
    """A float32 GPT2LMHeadModel in eval mode holding a copy of ``weights``."""
    hf_cfg = transformers.GPT2Config(
        vocab_size=config.vocab_size, n_positions=config.n_ctx, n_embd=config.d_model,
        n_layer=config.n_layers, n_head=config.n_heads, n_inner=config.d_ff,
        activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        layer_norm_epsilon=config.ln_eps, tie_word_embeddings=config.tied,
        bos_token_id=config.vocab_size - 1, eos_token_id=config.vocab_size - 1,
        pad_token_id=config.vocab_size - 1,
    )
    if config.pos != "learned" or not config.bias or not config.ln_affine:
        raise ValueError("hf_model: only GPT-2 style configs (learned positions, biases, affine LN)")
    # Built on the meta device (skips the random init of 124M parameters), then given copies
    # of the arrays; the plain construction is the fallback.
    state = {("lm_head.weight" if k == "lm_head.weight" else "transformer." + k): torch.from_numpy(v).clone()
             for k, v in weights.items()}
    with torch.no_grad():
        try:
            with torch.device("meta"):
                model = transformers.GPT2LMHeadModel(hf_cfg)
            missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
            model.tie_weights()
            if any(t.is_meta for t in list(model.parameters()) + list(model.buffers())):
                raise RuntimeError("tensors left on the meta device")
        except Exception:
            model = transformers.GPT2LMHeadModel(hf_cfg).to(torch.float32)
            missing, unexpected = model.load_state_dict(state, strict=False)
        del state
    allowed_missing = {"lm_head.weight"} if config.tied else set()
    bad_missing = [k for k in missing if k not in allowed_missing and not k.endswith(".attn.bias")
                   and not k.endswith(".attn.masked_bias")]
    if bad_missing or unexpected:
        raise RuntimeError(f"hf_model: missing {bad_missing}, unexpected {list(unexpected)}")
    if config.tied:
        assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()
    model.eval()
    return model


# ---------------------------------------------------------------------------------------------
# Accounting


def matmul_params(config) -> int:
    """Weights that take part in matrix products per token: 12 d^2-ish per block (c_attn,
    attn c_proj, c_fc, mlp c_proj) plus the LM head (V x d)."""
    d, f = config.d_model, config.d_ff
    return config.n_layers * (3 * d * d + d * d + 2 * d * f) + config.vocab_size * d


def weight_bytes_read(weights: Weights) -> int:
    """Bytes a forward must read at least once: every array except the position table (only T
    rows of it are touched); the token table is counted once (read whole by the tied head)."""
    return int(sum(v.nbytes for k, v in weights.items() if k != "wpe.weight"))


def forward_flops(config, B: int, T: int, head_rows: Optional[int] = None) -> float:
    """FLOPs of a forward on (B, T) tokens, counting only multiply-adds of the matrix products
    (2 per multiply-add); LayerNorm, GELU, softmax and residual adds are left out.

    - projections: 2 * (n_layers * (4 d^2 + 2 d d_ff)) * B * T
    - LM head: 2 * V * d * head_rows (head_rows = B * T for logits of every position)
    - attention, causal: scores Q K^T and the weighted sum P V each cost 2 * d_head
      per (query, key) pair per head, with T (T + 1) / 2 pairs per sequence:
      2 * 2 * n_layers * B * d * T (T + 1) / 2
    """
    d, f, L = config.d_model, config.d_ff, config.n_layers
    rows = B * T
    head_rows = rows if head_rows is None else head_rows
    proj = 2.0 * L * (4 * d * d + 2 * d * f) * rows
    head = 2.0 * config.vocab_size * d * head_rows
    attn = 2.0 * 2.0 * L * B * d * T * (T + 1) / 2.0
    return proj + head + attn


def forward_floor(config, weights: Weights, B: int, T: int, threads: int,
                  head_rows: Optional[int] = None) -> Tuple[float, float, float]:
    """(floor seconds, compute seconds, memory seconds) of a float32 forward:
    floor = max(FLOPs / peak, weight bytes / read bandwidth)."""
    t_compute = forward_flops(config, B, T, head_rows) / peak_flops("float32", threads)
    t_memory = weight_bytes_read(weights) / bandwidth(threads)
    return max(t_compute, t_memory), t_compute, t_memory


def decode_step_floor(config, weights: Weights, B: int, ctx: int, threads: int) -> float:
    """Floor of one decode step that appends one token to each of B sequences whose cache then
    holds ``ctx`` positions: max(FLOPs / peak, (weights + K/V cache read) / bandwidth)."""
    d, f, L = config.d_model, config.d_ff, config.n_layers
    flops = 2.0 * (L * (4 * d * d + 2 * d * f) + config.vocab_size * d) * B + 2.0 * 2.0 * L * B * d * ctx
    kv_bytes = 2.0 * L * B * ctx * d * 4
    return max(flops / peak_flops("float32", threads),
               (weight_bytes_read(weights) + kv_bytes) / bandwidth(threads))
