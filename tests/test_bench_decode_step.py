"""benches/bench_decode_step.py: its floor accounting against the generation benchmark's
(GPT-2) and a count by hand (a grouped-query Llama shape), and one short run of the script."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import gptcore
import numpy as np
import pytest

BENCHES = Path(__file__).resolve().parents[1] / "benches"


@pytest.fixture(scope="module")
def modules():
    mp = pytest.MonkeyPatch()
    mp.syspath_prepend(str(BENCHES))
    try:
        loaded = {}
        for name in ("bench_decode_step", "_models"):
            spec = importlib.util.spec_from_file_location(name, BENCHES / f"{name}.py")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            loaded[name] = module
        yield loaded
    finally:
        mp.undo()


def test_gpt2_accounting_matches_the_generation_benchmark(modules):
    bench, models = modules["bench_decode_step"], modules["_models"]
    config = gptcore.GPTConfig(vocab_size=300, n_ctx=64, d_model=48, n_heads=3, n_layers=2)
    weights = gptcore.init_weights(config, 0, "gpt2", dtype="float32")
    B, ctx = 5, 21
    flops, nbytes = bench.step_accounting(config, weights, B, ctx, "float32")
    d, f, L = config.d_model, config.d_ff, config.n_layers
    want_flops = 2.0 * (L * (4 * d * d + 2 * d * f) + config.vocab_size * d) * B + 2.0 * 2.0 * L * B * d * ctx
    want_bytes = models.weight_bytes_read(weights) + 2.0 * L * B * ctx * d * 4
    assert flops == pytest.approx(want_flops, rel=1e-12)
    assert nbytes == pytest.approx(want_bytes, rel=1e-12)
    # 16-bit storage halves the matrices' bytes only.
    _, half = bench.step_accounting(config, weights, B, ctx, "bfloat16")
    matrices = 4.0 * (L * (4 * d * d + 2 * d * f) + config.vocab_size * d)
    assert nbytes - half == pytest.approx(matrices / 2, rel=1e-12)


def test_grouped_query_accounting_counts_by_hand(modules):
    bench = modules["bench_decode_step"]
    base = gptcore.GPTConfig.preset("smollm2-135m").to_dict()
    config = gptcore.GPTConfig(**{**base, "n_layers": 2, "vocab_size": 500})
    weights = gptcore.init_weights(config, 0, "gpt2", dtype="float32")
    B, ctx = 3, 10
    d, f, L, V = config.d_model, config.d_ff, config.n_layers, config.vocab_size
    kv = config.n_kv_heads * (d // config.n_heads)
    per_layer = d * d + 2 * d * kv + d * d + 3 * d * f
    flops, nbytes = bench.step_accounting(config, weights, B, ctx, "q8_0")
    assert flops == pytest.approx(2.0 * B * (L * per_layer + V * d) + 4.0 * L * B * d * ctx, rel=1e-12)
    vectors = sum(v.size for v in weights.values() if v.ndim == 1)
    want = (L * per_layer + V * d) * 34 / 32 + 4.0 * vectors + 2.0 * L * B * ctx * kv * 4
    assert nbytes == pytest.approx(want, rel=1e-12)


def test_a_short_run_prints_each_cache_length(modules, tmp_path):
    # With the bandwidth and the peak given, each row's floor and its two legs follow from the
    # accounting alone (the read probe still runs and is reported).
    bench = modules["bench_decode_step"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run(
        [sys.executable, str(BENCHES / "bench_decode_step.py"), "--preset", "lm4-skeleton", "--batch", "3",
         "--positions", "4,9", "--rounds", "2", "--steps", "2", "--threads", "1", "--baselines", "none",
         "--bandwidth", "0.01", "--peak-gflops", "0.05"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = [line for line in p.stdout.splitlines() if line.startswith("|") and "%" in line and "positions" not in line]
    assert [int(r.split("|")[1]) for r in rows] == [4, 9], p.stdout
    config = gptcore.GPTConfig.preset("lm4-skeleton")
    weights = gptcore.init_weights(config, 0, "gpt2", dtype="float32")
    for r, P in zip(rows, [4, 9]):
        cells = [c.strip() for c in r.strip("|").split("|")]
        step, floor = float(cells[1]), float(cells[2])
        mem, math = (float(x) for x in cells[3].split("/"))
        flops, nbytes = bench.step_accounting(config, weights, 3, P + 2, "float32")
        assert mem == pytest.approx(1e3 * nbytes / 0.01e9, abs=0.006)
        assert math == pytest.approx(1e3 * flops / 0.05e9, abs=0.006)
        assert floor == max(mem, math)
        assert step > 0 and np.isfinite(step)
    assert "read probe per round" in p.stdout and "the floors use the given --bandwidth" in p.stdout


def test_bad_arguments_are_refused(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run(
        [sys.executable, str(BENCHES / "bench_decode_step.py"), "--preset", "lm4-skeleton", "--positions", "64"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "--positions" in p.stderr
