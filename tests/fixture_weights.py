"""Access to the reference fixtures in ``tests/fixtures`` (see its README).

``fixture_weights(name)`` gives ``(config, weights)`` for a case of ``cases.json``: the stored
``w/`` arrays for the small cases, and for ``gpt2-small-seed124`` (whose weights were too big to
store) the weights rebuilt from the README's recipe. ``load_case(name)`` gives the case's
entry in ``cases.json`` and its ``.npz`` arrays. Returned arrays are read-only and cached:
copy before modifying.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Dict, Tuple

import numpy as np

from gptcore.config import GPTConfig

FIXTURES = Path(__file__).resolve().parent / "fixtures"

__all__ = ["FIXTURES", "case_names", "case_config", "load_case", "recipe_weights", "fixture_weights"]


@functools.lru_cache(maxsize=None)
def _cases() -> Dict[str, dict]:
    with open(FIXTURES / "cases.json", "r", encoding="utf-8") as fh:
        return {c["name"]: c for c in json.load(fh)}


def case_names():
    return list(_cases())


def case_config(name: str) -> GPTConfig:
    """The GPTConfig of a case: GPT-2 defaults (learned positions, tied, biases, eps 1e-5)."""
    return GPTConfig(**_cases()[name]["config"])


def load_case(name: str) -> Tuple[dict, Dict[str, np.ndarray]]:
    """(entry of cases.json, dict of the arrays in NAME.npz, weights included as 'w/...')."""
    case = _cases()[name]
    with np.load(FIXTURES / f"{name}.npz") as z:
        arrays = {k: z[k] for k in z.files}
    return case, arrays


def recipe_weights(config: GPTConfig, seed: int) -> Dict[str, np.ndarray]:
    """The fixtures' weight recipe: one default_rng(seed) stream, z = standard_normal(shape)
    per tensor in order; wte 0.5 z, wpe 0.1 z, LayerNorm weights 1 + 0.1 z, biases 0.05 z,
    projection matrices z / sqrt(rows). GPT-2 layout only (learned positions, biases, affine
    LayerNorms, tied head)."""
    rng = np.random.default_rng(seed)
    d, V, f = config.d_model, config.vocab_size, config.d_ff
    w: Dict[str, np.ndarray] = {}

    def draw(shape):
        return rng.standard_normal(shape)

    w["wte.weight"] = 0.5 * draw((V, d))
    w["wpe.weight"] = 0.1 * draw((config.n_ctx, d))

    def layer_norm(prefix):
        w[prefix + ".weight"] = 1 + 0.1 * draw((d,))
        w[prefix + ".bias"] = 0.05 * draw((d,))

    def projection(prefix, rows, cols):
        w[prefix + ".weight"] = draw((rows, cols)) / math.sqrt(rows)
        w[prefix + ".bias"] = 0.05 * draw((cols,))

    for i in range(config.n_layers):
        p = f"h.{i}."
        layer_norm(p + "ln_1")
        projection(p + "attn.c_attn", d, 3 * d)
        projection(p + "attn.c_proj", d, d)
        layer_norm(p + "ln_2")
        projection(p + "mlp.c_fc", d, f)
        projection(p + "mlp.c_proj", f, d)
    layer_norm("ln_f")
    return w


@functools.lru_cache(maxsize=2)
def _fixture_weights(name: str):
    case = _cases()[name]
    config = case_config(name)
    if case.get("store_weights", True):
        _, arrays = load_case(name)
        weights = {k[2:]: v for k, v in arrays.items() if k.startswith("w/")}
    else:
        weights = recipe_weights(config, case["seed"])
    for a in weights.values():
        a.setflags(write=False)
    return config, weights


def fixture_weights(case_name: str) -> Tuple[GPTConfig, Dict[str, np.ndarray]]:
    """(config, float64 weights) of a fixture case (read-only arrays, cached)."""
    config, weights = _fixture_weights(case_name)
    return config, dict(weights)
