"""gptcore.weights: names, validation, config inference, initialisation, safetensors."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

from gptcore.config import GPTConfig
from gptcore.weights import (
    INIT_SCHEMES,
    expected_shapes,
    infer_config,
    init_weights,
    load_safetensors,
    normalize_names,
    save_safetensors,
    validate,
)

import reference
from fixture_weights import FIXTURES, case_config, case_names, fixture_weights, load_case

SMALL = [n for n in case_names() if n != "gpt2-small-seed124"]
HF = FIXTURES / "tiny-a-hf"

# Small configs covering every switch.
CONFIGS = {
    "gpt2-like": GPTConfig(vocab_size=23, n_ctx=9, d_model=16, n_heads=2, n_layers=2),
    "lesson14": GPTConfig.preset("lesson14"),
    "lm4-skeleton": GPTConfig.preset("lm4-skeleton"),
    "no-attn-bias": GPTConfig(vocab_size=11, n_ctx=5, d_model=8, n_heads=2, n_layers=1, attn_bias=False),
    "attn-bias-only": GPTConfig(vocab_size=11, n_ctx=5, d_model=8, n_heads=2, n_layers=1, bias=False, attn_bias=True),
    "sinusoidal-tied": GPTConfig(vocab_size=13, n_ctx=6, d_model=12, n_heads=3, n_layers=2, d_ff=20, pos="sinusoidal"),
    "no-layers": GPTConfig(vocab_size=5, n_ctx=4, d_model=8, n_heads=1, n_layers=0, tied=False),
}


def tiny_a():
    config, w = fixture_weights("tiny-a")
    return config, w


# ------------------------------------------------------------------------------------------
# expected_shapes / validate
# ------------------------------------------------------------------------------------------

def test_expected_shapes_gpt2_presets():
    for name, n_params in [("gpt2", 124439808), ("gpt2-medium", 354823168)]:
        shapes = expected_shapes(GPTConfig.preset(name))
        assert sum(math.prod(s) for s in shapes.values()) == n_params  # published counts
        assert "lm_head.weight" not in shapes
    shapes = expected_shapes(GPTConfig.preset("gpt2"))
    assert list(shapes)[:3] == ["wte.weight", "wpe.weight", "h.0.ln_1.weight"]
    assert list(shapes)[-2:] == ["ln_f.weight", "ln_f.bias"]
    assert shapes["h.11.mlp.c_proj.weight"] == (3072, 768)
    assert shapes["h.0.attn.c_attn.bias"] == (2304,)


def test_expected_shapes_lesson14():
    shapes = expected_shapes(GPTConfig.preset("lesson14"))
    # The tensors lesson 14's code uses (its printed count, 205440, also counts LayerNorm and
    # MLP-bias parameters the code leaves out): 50*64 + 4*(4*64*64 + 2*64*256) + 64*50.
    assert sum(math.prod(s) for s in shapes.values()) == 203008
    assert "wpe.weight" not in shapes and "ln_f.weight" not in shapes
    assert not any(k.endswith(".bias") for k in shapes)
    assert shapes["lm_head.weight"] == (50, 64)
    assert shapes["h.3.mlp.c_fc.weight"] == (64, 256)


def test_lm4_skeleton_count():
    # LM4-T1's skeleton has identity blocks: 1000*32 + 64*32 + 2*32 + 32*1000 = 66112.
    shapes = expected_shapes(GPTConfig.preset("lm4-skeleton").replace(n_layers=0))
    assert sum(math.prod(s) for s in shapes.values()) == 66112


def test_expected_shapes_bias_switches():
    s = expected_shapes(CONFIGS["no-attn-bias"])
    assert "h.0.attn.c_attn.bias" not in s and "h.0.attn.c_proj.bias" not in s
    assert s["h.0.mlp.c_fc.bias"] == (32,) and s["h.0.mlp.c_proj.bias"] == (8,)
    s = expected_shapes(CONFIGS["attn-bias-only"])
    assert s["h.0.attn.c_attn.bias"] == (24,) and "h.0.mlp.c_fc.bias" not in s
    with pytest.raises(TypeError, match="GPTConfig"):
        expected_shapes({"d_model": 8})


@pytest.mark.parametrize("name", SMALL)
def test_fixture_weights_validate(name):
    config, w = fixture_weights(name)
    out = validate(w, config)
    assert list(out) == list(expected_shapes(config))
    for k in out:
        assert out[k] is w[k]  # float64 passes through uncopied


def test_validate_missing_tensor():
    config, w = tiny_a()
    del w["h.1.mlp.c_fc.bias"]
    with pytest.raises(ValueError, match=r"missing tensor 'h\.1\.mlp\.c_fc\.bias' \(expected shape \(128,\)\)"):
        validate(w, config)


def test_validate_wrong_shape():
    config, w = tiny_a()
    w["h.0.attn.c_attn.weight"] = np.zeros((32, 95))
    with pytest.raises(ValueError, match=r"'h\.0\.attn\.c_attn\.weight' has shape \(32, 95\), expected \(32, 96\)"):
        validate(w, config)
    config, w = tiny_a()
    w["h.0.attn.c_attn.weight"] = np.zeros((96, 32))  # transposed (torch Linear orientation)
    with pytest.raises(ValueError, match=r"has shape \(96, 32\), expected \(32, 96\)"):
        validate(w, config)


def test_validate_extra_tensor():
    config, w = tiny_a()
    w["h.2.ln_1.weight"] = np.ones(32)
    with pytest.raises(ValueError, match=r"unexpected tensor 'h\.2\.ln_1\.weight' with shape \(32,\) \(config\.n_layers=2\)"):
        validate(w, config)
    config, w = tiny_a()
    w["lm_head.weight"] = w["wte.weight"] + 1.0
    with pytest.raises(ValueError, match=r"unexpected tensor 'lm_head\.weight'.*tied=True"):
        validate(w, config)
    with pytest.raises(ValueError, match=r"unexpected tensor 'h\.0\.mlp\.c_fc\.bias'.*bias=False"):
        validate(fixture_weights("tiny-a")[1], config.replace(bias=False))


def test_validate_reports_every_problem():
    config, w = tiny_a()
    del w["wte.weight"]
    w["wpe.weight"] = np.zeros((31, 32))
    w["foo"] = np.zeros(3)
    with pytest.raises(ValueError, match=r"3 problems") as e:
        validate(w, config)
    msg = str(e.value)
    assert "'wte.weight'" in msg and "(31, 32)" in msg and "'foo'" in msg


def test_validate_untied_needs_head_and_keeps_equal_head():
    config, w = tiny_a()
    untied = config.replace(tied=False)
    with pytest.raises(ValueError, match=r"missing tensor 'lm_head\.weight' \(expected shape \(61, 32\)\)"):
        validate(w, untied)
    w["lm_head.weight"] = w["wte.weight"].copy()  # untied but (for now) equal: kept
    assert "lm_head.weight" in validate(w, untied)
    assert "lm_head.weight" not in validate(w, config)  # tied: the duplicate is dropped


def test_validate_dtypes():
    config, w = tiny_a()
    w32 = {k: v.astype(np.float32) for k, v in w.items()}
    assert all(v.dtype == np.float32 for v in validate(w32, config).values())
    w16 = dict(w, **{"ln_f.bias": w["ln_f.bias"].astype(np.float16)})
    out = validate(w16, config)
    assert out["ln_f.bias"].dtype == np.float32
    np.testing.assert_array_equal(out["ln_f.bias"], w["ln_f.bias"].astype(np.float16).astype(np.float32))
    assert w16["ln_f.bias"].dtype == np.float16  # input untouched
    for bad in (np.int64, np.int32, np.bool_, np.complex128):
        wb = dict(w, **{"h.0.ln_2.weight": w["h.0.ln_2.weight"].astype(bad)})
        with pytest.raises(TypeError, match=r"'h\.0\.ln_2\.weight' has dtype"):
            validate(wb, config)


def test_validate_allows_nan():
    config, w = tiny_a()
    w["h.0.ln_1.bias"] = np.full(32, np.nan)
    assert np.isnan(validate(w, config)["h.0.ln_1.bias"]).all()


def test_validate_rejects_non_arrays():
    config, w = tiny_a()
    w["ln_f.weight"] = list(w["ln_f.weight"])
    with pytest.raises(TypeError, match=r"'ln_f\.weight' must be a numpy\.ndarray, got list"):
        validate(w, config)
    with pytest.raises(TypeError, match="mapping"):
        validate([1, 2], config)
    with pytest.raises(TypeError, match="GPTConfig"):
        validate(w, None)


# ------------------------------------------------------------------------------------------
# normalize_names
# ------------------------------------------------------------------------------------------

def test_normalize_strips_prefix_and_drops_buffers():
    config, w = tiny_a()
    hf = {("transformer." + k): v for k, v in w.items()}
    mask = np.tril(np.ones((32, 32), dtype=bool))[None, None]
    for i in range(config.n_layers):
        hf[f"transformer.h.{i}.attn.bias"] = mask
        hf[f"transformer.h.{i}.attn.masked_bias"] = np.array(-1e4)
    hf["h.0.attn.bias"] = mask.astype(np.float32)  # unprefixed too
    del hf["transformer.h.0.attn.bias"]
    hf["lm_head.weight"] = w["wte.weight"].copy()  # tied head stored twice
    before = dict(hf)
    out = normalize_names(hf)
    assert out.keys() == w.keys()
    for k in w:
        assert out[k] is w[k]
    assert hf == before  # not mutated
    # The parameter c_attn.bias is never mistaken for the mask buffer.
    assert out["h.0.attn.c_attn.bias"].shape == (96,)
    assert validate(hf, config).keys() == w.keys()


def test_normalize_keeps_attn_bias_that_is_not_a_mask():
    w = {"h.0.attn.bias": np.zeros(8), "h.0.attn.c_attn.bias": np.zeros(24)}
    assert set(normalize_names(w)) == {"h.0.attn.bias", "h.0.attn.c_attn.bias"}


def test_normalize_keeps_distinct_head_and_rejects_duplicates_and_non_arrays():
    w = {"wte.weight": np.ones((3, 2)), "lm_head.weight": np.zeros((3, 2))}
    assert set(normalize_names(w)) == {"wte.weight", "lm_head.weight"}
    nan = np.full((3, 2), np.nan)
    assert set(normalize_names({"wte.weight": nan, "lm_head.weight": nan.copy()})) == {"wte.weight"}
    with pytest.raises(ValueError, match="both name the tensor 'wte.weight'"):
        normalize_names({"wte.weight": np.ones(2), "transformer.wte.weight": np.ones(2)})
    with pytest.raises(TypeError, match=r"'h\.0\.ln_1\.weight'.*float"):
        normalize_names({"h.0.ln_1.weight": 1.0})
    with pytest.raises(TypeError, match="str"):
        normalize_names({3: np.ones(2)})


# ------------------------------------------------------------------------------------------
# infer_config
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", SMALL)
def test_infer_config_fixtures(name):
    config, w = fixture_weights(name)
    assert config == case_config(name)
    assert infer_config(w, n_heads=config.n_heads) == config
    if config.d_model % 64 == 0:
        assert infer_config(w).n_heads == config.d_model // 64
    else:
        with pytest.raises(ValueError, match=r"cannot infer the number of heads.*n_heads="):
            infer_config(w)


def test_infer_config_default_heads_and_prefixed_names():
    config, w = fixture_weights("tiny-c")  # d_model 64: default 1 head
    hf = {("transformer." + k): v for k, v in w.items()}
    assert infer_config(hf) == config.replace(n_heads=1)
    with pytest.raises(ValueError, match=r"d_model \(64\) must be divisible by n_heads \(5\)"):
        infer_config(w, n_heads=5)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_infer_config_switches(name):
    config = CONFIGS[name]
    w = init_weights(config, seed=1, scheme="lesson")
    inferred = infer_config(w, n_heads=config.n_heads, n_ctx=config.n_ctx)
    if config.n_layers == 0:  # no block tensors: bias switches cannot be seen
        inferred = inferred.replace(bias=config.bias, attn_bias=config.attn_bias)
    assert inferred == config


def test_infer_config_errors():
    with pytest.raises(ValueError, match="wte.weight"):
        infer_config({"wpe.weight": np.zeros((4, 8))}, n_heads=2)
    config = CONFIGS["gpt2-like"]
    w = init_weights(config)
    w = {k: v for k, v in w.items() if not k.startswith("h.0.")}
    with pytest.raises(ValueError, match=r"block\(s\) \[0\]"):
        infer_config(w, n_heads=2)
    w = init_weights(config)
    del w["h.1.attn.c_proj.weight"]
    with pytest.raises(ValueError, match=r"missing tensor 'h\.1\.attn\.c_proj\.weight'"):
        infer_config(w, n_heads=2)


# ------------------------------------------------------------------------------------------
# init_weights
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("scheme", INIT_SCHEMES)
@pytest.mark.parametrize("name", list(CONFIGS))
def test_init_shapes(name, scheme):
    config = CONFIGS[name]
    w = init_weights(config, seed=3, scheme=scheme)
    shapes = expected_shapes(config)
    assert list(w) == list(shapes)
    assert {k: v.shape for k, v in w.items()} == shapes
    assert all(v.dtype == np.float64 for v in w.values())
    assert validate(w, config).keys() == w.keys()
    for k, v in w.items():
        if k.endswith(".bias"):
            assert not v.any(), k
        elif ".ln_" in k or k.startswith("ln_f"):
            assert (v == 1).all(), k
        else:
            assert v.std() > 0, k
    w32 = init_weights(config, seed=3, scheme=scheme, dtype="float32")
    for k in w:
        assert w32[k].dtype == np.float32
        np.testing.assert_array_equal(w32[k], w[k].astype(np.float32))


def test_init_reproducible_and_seed_dependent():
    config = CONFIGS["gpt2-like"]
    a, b = init_weights(config, seed=7), init_weights(config, seed=7)
    c = init_weights(config, seed=8)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert not np.array_equal(a["wte.weight"], c["wte.weight"])
    assert not np.array_equal(a["h.1.mlp.c_fc.weight"], c["h.1.mlp.c_fc.weight"])
    # The first tensor is the seed's first draw, so the stream is documented and stable.
    np.testing.assert_array_equal(
        init_weights(config, seed=7, scheme="kaiming")["wte.weight"],
        np.random.default_rng(7).standard_normal((23, 16)) * math.sqrt(2 / 16),
    )


def _std_cases():
    # d = 256, d_ff = 1024, V = 300, N = 2: every matrix has enough entries for a 2% check.
    config = GPTConfig(vocab_size=300, n_ctx=128, d_model=256, n_heads=4, n_layers=2, tied=False)
    d, f, V, N, C = 256, 1024, 300, 2, 128
    expect = {
        "gpt2": {"wte": 0.02, "wpe": 0.02, "c_attn": 0.02, "attn_proj": 0.02 / math.sqrt(2 * N),
                 "c_fc": 0.02, "mlp_proj": 0.02 / math.sqrt(2 * N), "lm_head": 0.02},
        "lesson": {"wte": 0.1, "wpe": 0.1, "c_attn": 1 / math.sqrt(d), "attn_proj": 1 / math.sqrt(d),
                   "c_fc": math.sqrt(2 / d), "mlp_proj": math.sqrt(2 / f), "lm_head": 1 / math.sqrt(d)},
        "xavier": {"wte": math.sqrt(2 / (d + V)), "wpe": math.sqrt(2 / (d + C)), "c_attn": math.sqrt(1 / d),
                   "attn_proj": math.sqrt(1 / d), "c_fc": math.sqrt(2 / (d + f)),
                   "mlp_proj": math.sqrt(2 / (d + f)), "lm_head": math.sqrt(2 / (d + V))},
        "kaiming": {"wte": math.sqrt(2 / d), "wpe": math.sqrt(2 / d), "c_attn": math.sqrt(2 / d),
                    "attn_proj": math.sqrt(2 / d), "c_fc": math.sqrt(2 / d), "mlp_proj": math.sqrt(2 / f),
                    "lm_head": math.sqrt(2 / d)},
    }
    names = {"wte": "wte.weight", "wpe": "wpe.weight", "c_attn": "h.1.attn.c_attn.weight",
             "attn_proj": "h.1.attn.c_proj.weight", "c_fc": "h.1.mlp.c_fc.weight",
             "mlp_proj": "h.1.mlp.c_proj.weight", "lm_head": "lm_head.weight"}
    return config, expect, names


@pytest.mark.parametrize("scheme", INIT_SCHEMES)
def test_init_std(scheme):
    config, expect, names = _std_cases()
    w = init_weights(config, seed=11, scheme=scheme)
    for kind, std in expect[scheme].items():
        a = w[names[kind]]
        assert abs(a.mean()) < 4 * std / math.sqrt(a.size), (kind, a.mean())
        assert abs(a.std() / std - 1) < 0.02, (kind, a.std(), std)


def test_init_errors():
    config = CONFIGS["gpt2-like"]
    with pytest.raises(ValueError, match="scheme must be one of"):
        init_weights(config, scheme="orthogonal")
    with pytest.raises(ValueError, match="dtype must be one of 'float32', 'float64', got 'int32'"):
        init_weights(config, dtype="int32")
    with pytest.raises(ValueError, match="seed"):
        init_weights(config, seed=-1)
    with pytest.raises(TypeError, match="seed"):
        init_weights(config, seed=1.5)
    with pytest.raises(TypeError, match="GPTConfig"):
        init_weights("gpt2")


# ------------------------------------------------------------------------------------------
# safetensors
# ------------------------------------------------------------------------------------------

def test_load_hf_folder_matches_fixture():
    weights, config = load_safetensors(HF)
    ref_config, ref = fixture_weights("tiny-a")
    assert config == ref_config
    assert list(weights) == list(expected_shapes(config))
    for k, v in ref.items():
        assert weights[k].dtype == np.float32
        np.testing.assert_array_equal(weights[k], v.astype(np.float32))  # saved as float32
        np.testing.assert_allclose(weights[k], v, rtol=1e-7, atol=1e-8)
    # The float32 model's logits, stored by transformers, from the loaded weights.
    _, arrays = load_case("tiny-a")
    expected = np.load(HF / "expected_logits_f32_model.npy")
    logits = reference.forward(arrays["ids"], weights, config)
    assert expected.shape == logits.shape
    assert np.abs(logits - expected).max() <= 1e-5 * np.abs(expected).max()
    # A str path and an explicit, agreeing n_heads work too.
    w2, c2 = load_safetensors(str(HF), n_heads=4)
    assert c2 == config and w2.keys() == weights.keys()
    with pytest.raises(ValueError, match=r"n_heads=2 disagrees with n_head=4"):
        load_safetensors(HF, n_heads=2)


def test_load_bare_file(tmp_path):
    shutil.copy(HF / "model.safetensors", tmp_path / "m.safetensors")
    weights, config = load_safetensors(tmp_path / "m.safetensors")
    assert config is None  # no config.json, no gptcore metadata
    assert set(weights) == set(fixture_weights("tiny-a")[1])
    weights, config = load_safetensors(tmp_path / "m.safetensors", n_heads=4)
    assert config == fixture_weights("tiny-a")[0]


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("as_file", [False, True])
def test_round_trip(tmp_path, name, as_file):
    config = CONFIGS[name]
    w = init_weights(config, seed=2, scheme="kaiming")
    path = tmp_path / ("model.safetensors" if as_file else "folder")
    written = save_safetensors(w, config, path)
    assert written == path
    loaded, loaded_config = load_safetensors(path)
    assert loaded_config == config
    assert list(loaded) == list(w)
    for k in w:
        assert loaded[k].dtype == np.float64
        np.testing.assert_array_equal(loaded[k], w[k])
    if not as_file:
        cfg = json.loads((path / "config.json").read_text())
        assert (cfg["n_layer"], cfg["n_embd"], cfg["n_head"], cfg["vocab_size"]) == (
            config.n_layers, config.d_model, config.n_heads, config.vocab_size)
        assert cfg["tie_word_embeddings"] == config.tied


def test_round_trip_hf_layout_and_dtype(tmp_path):
    weights, config = load_safetensors(HF)
    save_safetensors(weights, config, tmp_path / "out", dtype="float64")
    from safetensors import safe_open

    with safe_open(str(tmp_path / "out" / "model.safetensors"), framework="numpy") as f:
        keys = set(f.keys())
        assert f.get_tensor("transformer.wte.weight").dtype == np.float64
    with safe_open(str(HF / "model.safetensors"), framework="numpy") as f:
        assert keys == set(f.keys())  # same names as transformers writes
    hf_cfg = json.loads((HF / "config.json").read_text())
    ours = json.loads((tmp_path / "out" / "config.json").read_text())
    for key in ("n_layer", "n_embd", "n_head", "n_positions", "vocab_size", "layer_norm_epsilon",
                "tie_word_embeddings", "activation_function", "model_type", "n_inner"):
        assert ours[key] == hf_cfg[key], key
    loaded, c2 = load_safetensors(tmp_path / "out")
    assert c2 == config
    for k in weights:
        np.testing.assert_array_equal(loaded[k], weights[k])
    # Untied: lm_head.weight is written without prefix, as transformers does.
    untied = config.replace(tied=False)
    w = dict(weights, **{"lm_head.weight": weights["wte.weight"] * 2})
    save_safetensors(w, untied, tmp_path / "untied", dtype="float32")
    with safe_open(str(tmp_path / "untied" / "model.safetensors"), framework="numpy") as f:
        assert "lm_head.weight" in f.keys()
    loaded, c3 = load_safetensors(tmp_path / "untied")
    assert c3 == untied
    np.testing.assert_array_equal(loaded["lm_head.weight"], w["lm_head.weight"])


def test_load_bf16_and_f16(tmp_path):
    """A BF16 tensor (numpy has no bfloat16) is read exactly into float32; F16 too."""
    from safetensors.numpy import save_file

    config = CONFIGS["gpt2-like"]
    w = init_weights(config, seed=4, dtype="float32")
    bits = w["wte.weight"].view(np.uint32) & np.uint32(0xFFFF0000)  # values that bf16 holds exactly
    wte_bf16_values = bits.view(np.float32)
    tensors = {"transformer." + k: v for k, v in w.items() if k != "wte.weight"}
    tensors["transformer.h.0.ln_1.bias"] = w["h.0.ln_1.bias"].astype(np.float16)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    # Rewrite the file with wte as BF16: header + data by hand (the format is documented).
    header_tensors = {"transformer.wte.weight": (bits >> 16).astype("<u2")}
    _append_bf16(tmp_path / "model.safetensors", header_tensors)
    loaded, cfg = load_safetensors(tmp_path / "model.safetensors", n_heads=2)
    assert cfg == config
    assert loaded["wte.weight"].dtype == np.float32
    np.testing.assert_array_equal(loaded["wte.weight"], wte_bf16_values)
    assert loaded["h.0.ln_1.bias"].dtype == np.float32


def _append_bf16(path, extra):
    """Re-write a safetensors file adding tensors given as uint16 arrays, declared BF16."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    data = bytearray(raw[8 + n:])
    for name, arr in extra.items():
        start = len(data)
        data += arr.tobytes()
        header[name] = {"dtype": "BF16", "shape": list(arr.shape), "data_offsets": [start, len(data)]}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(len(text).to_bytes(8, "little") + text + bytes(data))


def test_load_errors_missing_paths(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_safetensors(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="model.safetensors") as e:
        load_safetensors(tmp_path / "empty")
    assert str(tmp_path / "empty") in str(e.value)
    with pytest.raises(TypeError, match="path"):
        load_safetensors(3.5)


def test_load_errors_pickle(tmp_path):
    fake = tmp_path / "pytorch_model.bin"
    fake.write_bytes(b"\x80\x02not really a pickle")
    with pytest.raises(ValueError, match=r"pickle.*safetensors\.torch.*save_file.*safe_serialization=True"):
        load_safetensors(fake)
    for name in ("model.pt", "model.pth"):
        (tmp_path / name).write_bytes(b"\x80\x02")
        with pytest.raises(ValueError, match="pickle"):
            load_safetensors(tmp_path / name)
    folder = tmp_path / "hf"
    folder.mkdir()
    shutil.copy(fake, folder / "pytorch_model.bin")
    shutil.copy(HF / "config.json", folder / "config.json")
    with pytest.raises(ValueError, match=r"pytorch_model\.bin.*save_file"):
        load_safetensors(folder)


def test_load_sharded_folder(tmp_path):
    from safetensors.numpy import load_file, save_file

    folder = _hf_copy(tmp_path)
    (folder / "model.safetensors").unlink()
    tensors = load_file(str(HF / "model.safetensors"))
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    weight_map = {}
    for shard, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, str(folder / shard))
        weight_map.update({k: shard for k in keys})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    weights, config = load_safetensors(folder)
    ref_w, _ = load_safetensors(HF)
    assert config == fixture_weights("tiny-a")[0]
    for k in ref_w:
        np.testing.assert_array_equal(weights[k], ref_w[k])
    (folder / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model-00002-of-00002"):
        load_safetensors(folder)


def test_load_errors_not_safetensors(tmp_path):
    bad = tmp_path / "junk.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        load_safetensors(bad)


def _hf_copy(tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(HF, folder)
    for p in folder.iterdir():
        p.chmod(0o644)
    return folder


def test_load_errors_config_mismatch(tmp_path):
    folder = _hf_copy(tmp_path)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["n_layer"] = 3
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"config\.json disagrees with the tensors.*missing tensor 'h\.2\."):
        load_safetensors(folder)
    cfg["n_layer"], cfg["n_embd"] = 2, 48
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"config\.json disagrees.*'wte\.weight' has shape \(61, 32\), expected \(61, 48\)"):
        load_safetensors(folder)
    cfg["n_embd"], cfg["n_head"] = 32, 5
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"config\.json.*divisible"):
        load_safetensors(folder)
    cfg["n_head"], cfg["tie_word_embeddings"] = 4, False
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"missing tensor 'lm_head\.weight'"):
        load_safetensors(folder)
    cfg["tie_word_embeddings"], cfg["activation_function"] = True, "relu"
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="activation_function 'relu'"):
        load_safetensors(folder)


def test_load_errors_missing_and_extra_tensor(tmp_path):
    from safetensors.numpy import load_file, save_file

    folder = _hf_copy(tmp_path)
    tensors = load_file(str(HF / "model.safetensors"))
    fewer = {k: v for k, v in tensors.items() if k != "transformer.h.1.ln_2.bias"}
    save_file(fewer, str(folder / "model.safetensors"))
    with pytest.raises(ValueError, match=r"missing tensor 'h\.1\.ln_2\.bias' \(expected shape \(32,\)\)"):
        load_safetensors(folder)
    more = dict(tensors, **{"transformer.h.0.attn.extra": np.zeros((2, 2), np.float32)})
    save_file(more, str(folder / "model.safetensors"))
    with pytest.raises(ValueError, match=r"unexpected tensor 'h\.0\.attn\.extra' with shape \(2, 2\)"):
        load_safetensors(folder)


def test_load_skips_buffers(tmp_path):
    from safetensors.numpy import load_file, save_file

    folder = _hf_copy(tmp_path)
    tensors = load_file(str(HF / "model.safetensors"))
    for i in range(2):
        tensors[f"transformer.h.{i}.attn.bias"] = np.tril(np.ones((32, 32), np.float32))[None, None]
        tensors[f"transformer.h.{i}.attn.masked_bias"] = np.array(-1e4, dtype=np.float32)
    tensors["lm_head.weight"] = tensors["transformer.wte.weight"].copy()
    save_file(tensors, str(folder / "model.safetensors"))
    weights, config = load_safetensors(folder)
    assert set(weights) == set(fixture_weights("tiny-a")[1])
    assert weights["h.0.attn.c_attn.bias"].shape == (96,)


def test_save_errors(tmp_path):
    config, w = tiny_a()
    del w["ln_f.bias"]
    with pytest.raises(ValueError, match="missing tensor 'ln_f.bias'"):
        save_safetensors(w, config, tmp_path / "x")
    config, w = tiny_a()
    with pytest.raises(ValueError, match="dtype must be one of"):
        save_safetensors(w, config, tmp_path / "x", dtype="int8")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="not a folder"):
        save_safetensors(w, config, tmp_path / "file")
