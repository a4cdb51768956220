"""Hostile arguments for gptcore.accounting: a clear exception, and exact integers at huge sizes.

The shared helpers and the rules are in ``hostile.py``.
"""

from __future__ import annotations

import pytest

from gptcore import GPTConfig
from hostile import has_module


def _accounting():
    import gptcore.accounting as acc

    return acc


ACCOUNTING_BAD = [
    ("param_count", (None,), {}, TypeError),
    ("param_count", ("gpt2",), {}, TypeError),
    ("param_count", ({"d_model": 4},), {}, TypeError),
    ("flops_per_token", (None,), {}, TypeError),
    ("flops_per_token", (GPTConfig.preset("gpt2"),), {"T": 0}, ValueError),
    ("flops_per_token", (GPTConfig.preset("gpt2"),), {"T": -1}, ValueError),
    ("flops_per_token", (GPTConfig.preset("gpt2"),), {"T": 1.5}, TypeError),
    ("flops_per_token", (GPTConfig.preset("gpt2"),), {"T": True}, TypeError),
    ("flops_per_token", (GPTConfig.preset("gpt2"),), {"T": "1024"}, TypeError),
    ("logits_memory", (0, 1, 1), {}, ValueError),
    ("logits_memory", (1, 1.0, 1), {}, TypeError),
    ("logits_memory", (1, 1, 1), {"bytes": 0}, ValueError),
    ("chinchilla", (0,), {}, ValueError),
    ("chinchilla", (1.5,), {}, TypeError),
    ("chinchilla", (10,), {"bits_per_token": float("nan")}, ValueError),
    ("chinchilla", (10,), {"bits_per_token": -1}, ValueError),
    ("lesson14_counting", (None,), {}, TypeError),
]


@pytest.mark.skipif(not has_module("gptcore.accounting"), reason="gptcore.accounting not merged yet")
@pytest.mark.parametrize("fn,args,kw,exc", ACCOUNTING_BAD, ids=[f"{c[0]}{i}" for i, c in enumerate(ACCOUNTING_BAD)])
def test_accounting_rejects(fn, args, kw, exc):
    f = getattr(_accounting(), fn, None)
    if f is None:
        pytest.skip(f"no gptcore.accounting.{fn}")
    with pytest.raises(exc):
        f(*args, **kw)


@pytest.mark.skipif(not has_module("gptcore.accounting"), reason="gptcore.accounting not merged yet")
def test_accounting_huge_sizes_are_exact_integers():
    acc = _accounting()
    cfg = GPTConfig(vocab_size=10**9, n_ctx=10**9, d_model=2**20, n_heads=2**10, n_layers=10**4)
    total = acc.param_count(cfg).total
    assert isinstance(total, int) and total > 10**16
    assert acc.logits_memory(10**9, 10**9, 10**9).nbytes == 4 * 10**27
    assert acc.flops_per_token(cfg, T=10**12).attention == 4 * 10**12 * 2**20 * 10**4
