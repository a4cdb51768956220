"""A plain numpy float64 GPT forward pass, written from the equations.

It exists to check gptcore against something independent of it: it imports nothing from
gptcore, favours readability over speed, and computes everything in float64 with numpy.
``config`` may be any object with the attributes of ``gptcore.GPTConfig`` (vocab_size, n_ctx,
d_model, n_heads, n_layers, pos, tied, bias, attn_bias, ln_affine, ln_eps).

The model (GPT-2, pre-LayerNorm):

    h_0     = wte[ids] + P                      P = wpe[0..T-1] or the sinusoidal table
    a_l     = h_l + MHA(LN_1(h_l)) Wo_l (+ bo_l)
    h_{l+1} = a_l + GELU(LN_2(a_l) Wfc_l + bfc_l) Wpr_l (+ bpr_l)
    logits  = LN_f(h_N) U^T                     U = lm_head.weight, or wte.weight when tied

LayerNorm uses the population variance and ``eps`` inside the square root; GELU is the tanh
form; attention scores are ``q k^T / sqrt(d_head)`` with ``-inf`` above the diagonal, so masked
weights are exactly 0. The sinusoidal table follows lesson 14: 1-based positions t = 1..T and,
for 0-based column j, ``sin(t / 10000**(2*(j//2)/d))`` when j is even and ``cos(...)`` when odd.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["forward", "layer_norm", "gelu_tanh", "softmax", "sinusoidal_positions", "attention"]


def layer_norm(x, gamma, beta, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    if gamma is not None:
        y = y * gamma
    if beta is not None:
        y = y + beta
    return y


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def softmax(s, axis=-1):
    e = np.exp(s - s.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def sinusoidal_positions(T, d):
    t = np.arange(1, T + 1, dtype=np.float64)[:, None]
    j = np.arange(d)
    angle = t / 10000.0 ** (2.0 * (j // 2) / d)
    return np.where(j % 2 == 0, np.sin(angle), np.cos(angle))


def attention(x, w_qkv, b_qkv, w_out, b_out, n_heads, causal=True):
    """Multi-head self-attention of x (B, T, d); columns of w_qkv are [Q | K | V]."""
    B, T, d = x.shape
    dh = d // n_heads
    qkv = x @ w_qkv
    if b_qkv is not None:
        qkv = qkv + b_qkv
    q, k, v = qkv[..., :d], qkv[..., d:2 * d], qkv[..., 2 * d:]

    def heads(m):  # (B, T, d) -> (B, H, T, dh): head h is columns h*dh .. (h+1)*dh - 1
        return m.reshape(B, T, n_heads, dh).transpose(0, 2, 1, 3)

    q, k, v = heads(q), heads(k), heads(v)
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(dh)
    if causal:
        above = np.triu(np.ones((T, T), dtype=bool), k=1)
        scores = np.where(above, -np.inf, scores)
    out = softmax(scores) @ v  # (B, H, T, dh)
    out = out.transpose(0, 2, 1, 3).reshape(B, T, d)
    out = out @ w_out
    if b_out is not None:
        out = out + b_out
    return out


def forward(ids, weights, config, *, branch_scale=1.0, causal=True, return_hidden=False):
    """Logits (T, V) or (B, T, V) in float64 for 0-based ``ids`` of shape (T,) or (B, T).

    ``branch_scale`` multiplies the weights of both output projections (attn.c_proj and
    mlp.c_proj), as lesson 14 does with 1/sqrt(2N). With ``return_hidden`` also returns the
    residual stream before block 0 and after every block, shape (n_layers + 1, [B,] T, d).
    """
    ids = np.asarray(ids)
    single = ids.ndim == 1
    if single:
        ids = ids[None, :]
    B, T = ids.shape
    if config.pos == "learned" and T > config.n_ctx:
        raise ValueError(f"reference.forward: T={T} exceeds n_ctx={config.n_ctx}")
    if ids.min() < 0 or ids.max() >= config.vocab_size:
        raise ValueError("reference.forward: token id out of range")

    def W(name):
        return np.asarray(weights[name], dtype=np.float64)

    def opt(name, present):
        return W(name) if present else None

    eps = config.ln_eps
    affine = config.ln_affine
    wte = W("wte.weight")
    pos = W("wpe.weight")[:T] if config.pos == "learned" else sinusoidal_positions(T, config.d_model)
    h = wte[ids] + pos
    hidden = [h]
    for i in range(config.n_layers):
        p = f"h.{i}."
        x = layer_norm(h, opt(p + "ln_1.weight", affine), opt(p + "ln_1.bias", affine), eps)
        h = h + attention(
            x,
            W(p + "attn.c_attn.weight"), opt(p + "attn.c_attn.bias", config.attn_bias),
            W(p + "attn.c_proj.weight") * branch_scale, opt(p + "attn.c_proj.bias", config.attn_bias),
            config.n_heads, causal=causal,
        )
        x = layer_norm(h, opt(p + "ln_2.weight", affine), opt(p + "ln_2.bias", affine), eps)
        u = x @ W(p + "mlp.c_fc.weight")
        if config.bias:
            u = u + W(p + "mlp.c_fc.bias")
        m = gelu_tanh(u) @ (W(p + "mlp.c_proj.weight") * branch_scale)
        if config.bias:
            m = m + W(p + "mlp.c_proj.bias")
        h = h + m
        hidden.append(h)
    x = layer_norm(h, opt("ln_f.weight", affine), opt("ln_f.bias", affine), eps)
    head = wte if config.tied else W("lm_head.weight")
    logits = x @ head.T
    if single:
        logits = logits[0]
        hidden = [s[0] for s in hidden]
    if return_hidden:
        return logits, np.stack(hidden)
    return logits
