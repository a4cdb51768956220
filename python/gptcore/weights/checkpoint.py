"""safetensors files and Hugging Face GPT-2 folders: reading, writing, refusing pickles."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from .._checks import dtype_name
from ..config import GPTConfig
from .schema import _PREFIX, Weights, _check_config, normalize_names
from .validation import _check_dtypes, infer_config, validate

__all__ = ["load_safetensors", "save_safetensors"]

PathLike = Union[str, "os.PathLike[str]"]

_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
_CONFIG_METADATA_KEY = "gptcore_config"
# safetensors dtypes read through numpy; F8_*, C64 and others are refused by name (integer and
# bool tensors are read, then refused by the dtype check with numpy's name for the type).
_NUMPY_DTYPES = frozenset({"F16", "F32", "F64", "I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64", "BOOL"})


def _pickle_error(path: Path) -> ValueError:
    return ValueError(
        f"load_safetensors: {str(path)!r} is a pickle checkpoint (PyTorch .bin/.pt/.pth); gptcore "
        "reads only safetensors, which cannot run code when loaded. Convert it once with PyTorch: "
        "`import torch; from safetensors.torch import save_file; "
        "sd = torch.load(path, map_location='cpu', weights_only=True); "
        "save_file({k: v.contiguous() for k, v in sd.items()}, 'model.safetensors')`, or with "
        "transformers: `GPT2LMHeadModel.from_pretrained(folder).save_pretrained(out, "
        "safe_serialization=True)`"
    )


def _not_found(what: str, path: Path) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, f"load_safetensors: {what}", str(path))


def _read_bf16(path: Path, names: List[str]) -> Weights:
    """Read BF16 tensors (numpy has no bfloat16) straight from the file, as float32."""
    with open(path, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(n))
    out: Weights = {}
    for name in names:
        info = header[name]
        start, end = info["data_offsets"]
        shape = tuple(info["shape"])
        count = (end - start) // 2
        if count == 0:
            out[name] = np.zeros(shape, dtype=np.float32)
            continue
        raw = np.memmap(path, dtype="<u2", mode="r", offset=8 + n + start, shape=(count,))
        out[name] = (raw.astype(np.uint32) << 16).view(np.float32).reshape(shape)
    return out


def _unreadable(path: Path, e: OSError) -> ValueError:
    return ValueError(f"load_safetensors: {str(path)!r} cannot be read: {e.strerror or e}")


def _read_file(path: Path) -> Tuple[Weights, Dict[str, str]]:
    from safetensors import SafetensorError, safe_open

    def unsupported(key: str, dt: str, why: str = "") -> TypeError:
        return TypeError(
            f"load_safetensors: tensor {key!r} in {str(path)!r} has dtype {dt}, which numpy cannot "
            f"hold; expected F32, F64, F16 or BF16{why}"
        )

    out: Weights = {}
    bf16: List[str] = []
    try:
        with safe_open(str(path), framework="numpy") as f:
            metadata = dict(f.metadata() or {})
            for key in f.keys():
                dt = f.get_slice(key).get_dtype()
                if dt == "BF16":
                    bf16.append(key)
                    continue
                if dt not in _NUMPY_DTYPES:
                    # e.g. F8_E4M3 / F8_E5M2: safetensors' numpy reader fails on them with
                    # AttributeError, so they never reach get_tensor
                    raise unsupported(key, dt)
                try:
                    out[key] = f.get_tensor(key)
                except (TypeError, ValueError, AttributeError, SafetensorError) as e:
                    raise unsupported(key, dt, f" ({e})") from None
        if bf16:
            out.update(_read_bf16(path, bf16))
    except SafetensorError as e:
        raise ValueError(f"load_safetensors: {str(path)!r} is not a readable safetensors file: {e}") from None
    except FileNotFoundError:
        raise _not_found("the file disappeared while being read", path) from None
    except OSError as e:  # a device, a folder, no permission, an I/O error
        raise _unreadable(path, e) from None
    return out, metadata


def _read_json(path: Path, what: str) -> Any:
    """The parsed contents of the JSON file ``path``; ``ValueError`` naming it otherwise."""
    try:
        with open(path, "r", encoding="utf-8") as fh:
            return json.load(fh)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise ValueError(f"load_safetensors: {str(path)!r} is not valid JSON ({what}): {e}") from None
    except FileNotFoundError:
        raise _not_found(f"{what} disappeared while being read", path) from None
    except OSError as e:
        raise _unreadable(path, e) from None


def _shard_files(folder: Path, index: Path) -> List[Path]:
    """The shard files that ``model.safetensors.index.json`` names, checked: plain file names
    in ``folder`` (no paths, so that an index cannot point elsewhere), each present."""
    content = _read_json(index, "the shard index")
    if not isinstance(content, dict):
        raise ValueError(
            f"load_safetensors: {str(index)!r} must hold a JSON object with a 'weight_map', "
            f"got a {type(content).__name__}"
        )
    weight_map = content.get("weight_map", {})
    if not isinstance(weight_map, dict):
        raise ValueError(
            f"load_safetensors: the 'weight_map' in {str(index)!r} must be an object of tensor name -> "
            f"shard file name, got a {type(weight_map).__name__}"
        )
    names = set()
    for key, name in weight_map.items():
        if not isinstance(name, str):
            raise ValueError(
                f"load_safetensors: the 'weight_map' in {str(index)!r} gives {name!r} as the shard of "
                f"{key!r}; expected a file name (str)"
            )
        names.add(name)
    files = []
    for name in sorted(names):
        if name in ("", ".", "..") or "\0" in name or "\\" in name or Path(name).name != name:
            raise ValueError(
                f"load_safetensors: {str(index)!r} names the shard {name!r}; a shard must be a plain "
                "file name in the checkpoint's folder"
            )
        f = folder / name
        if not f.is_file():
            raise _not_found(f"shard named by {index.name} is missing", f)
        files.append(f)
    return files


def _config_from_hf(cfg: Any, where: Path) -> GPTConfig:
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


def _hf_config(config: GPTConfig, dtype_name: str) -> Dict[str, Any]:
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


def load_safetensors(
    path: PathLike, *, n_heads: Optional[int] = None
) -> Tuple[Weights, Optional[GPTConfig]]:
    """Read weights from a Hugging Face GPT-2 folder or a ``.safetensors`` file.

    A folder holds ``model.safetensors`` (or the shards named by
    ``model.safetensors.index.json``) and usually ``config.json``, from which the
    ``GPTConfig`` is read (``n_layer``, ``n_embd``, ``n_head``, ``n_positions``,
    ``vocab_size``, ``n_inner``, ``layer_norm_epsilon``, ``tie_word_embeddings``). A file
    written by ``save_safetensors`` carries its configuration in the metadata. Without
    either, the configuration is inferred from the shapes when ``n_heads`` is given, else it is
    ``None``. ``n_heads`` must agree with a stored configuration.

    Returns ``(weights, config)``: the weights normalized (see ``normalize_names``) and,
    when ``config`` is known, validated against it. Files are read through
    ``safetensors.safe_open`` (memory-mapped; nothing is unpickled).

    Raises ``FileNotFoundError`` (with the path) if nothing is there or a shard is missing,
    ``ValueError`` (naming the file) for a pickle checkpoint (with how to convert it), a file
    that cannot be read or is not valid safetensors, a ``config.json`` or
    ``model.safetensors.index.json`` that is not valid JSON of the expected form, an index that
    names a shard outside the folder, or a configuration that disagrees with the tensors, and
    ``TypeError`` for a tensor whose dtype is not a float type numpy can hold (F8 types, for
    example) or not float at all.
    """
    try:
        p = Path(os.fspath(path))
    except TypeError:
        raise TypeError(f"load_safetensors: path must be a str or os.PathLike, got {type(path).__name__}") from None
    if n_heads is not None and (isinstance(n_heads, bool) or not isinstance(n_heads, int) or n_heads < 1):
        raise TypeError(f"load_safetensors: n_heads must be a positive int or None, got {n_heads!r}")
    if not p.exists():
        raise _not_found("no such file or folder", p)

    config_file: Optional[Path] = None
    if p.is_dir():
        index = p / "model.safetensors.index.json"
        if (p / "model.safetensors").is_file():
            files = [p / "model.safetensors"]
        elif index.is_file():
            files = _shard_files(p, index)
        else:
            try:
                pickles = sorted(q.name for q in p.iterdir() if q.suffix in _PICKLE_SUFFIXES)
            except OSError as e:
                raise _unreadable(p, e) from None
            if pickles:
                raise _pickle_error(p / pickles[0])
            raise _not_found("the folder has no model.safetensors", p / "model.safetensors")
        if (p / "config.json").is_file():
            config_file = p / "config.json"
    else:
        if p.suffix in _PICKLE_SUFFIXES:
            raise _pickle_error(p)
        files = [p]

    raw: Weights = {}
    metadata: Dict[str, str] = {}
    for f in files:
        tensors, meta = _read_file(f)
        raw.update(tensors)
        metadata.update(meta)

    config: Optional[GPTConfig] = None
    source = ""
    if config_file is not None:
        cfg = _read_json(config_file, "the model configuration")
        config = _config_from_hf(cfg, config_file)
        source = str(config_file)
    elif _CONFIG_METADATA_KEY in metadata:
        try:
            config = GPTConfig(**json.loads(metadata[_CONFIG_METADATA_KEY]))
        except (TypeError, ValueError, RecursionError) as e:
            raise ValueError(f"load_safetensors: the configuration stored in {str(p)!r} is invalid: {e}") from None
        source = f"the metadata of {str(p)!r}"

    if config is not None:
        if n_heads is not None and n_heads != config.n_heads:
            raise ValueError(f"load_safetensors: n_heads={n_heads} disagrees with n_head={config.n_heads} in {source}")
        try:
            weights = validate(raw, config)
        except ValueError as e:
            raise ValueError(f"load_safetensors: {source} disagrees with the tensors in {str(p)!r}: {e}") from None
        return weights, config

    weights = _check_dtypes("load_safetensors", normalize_names(raw))
    if n_heads is not None:
        config = infer_config(weights, n_heads=n_heads)
    return weights, config


def save_safetensors(
    weights: Mapping[str, np.ndarray],
    config: GPTConfig,
    path: PathLike,
    *,
    dtype: Any = None,
    weight_dtype: Any = None,
) -> Path:
    """Write ``weights`` (checked against ``config``) so that ``load_safetensors`` reads
    them back, and return the path written.

    A path ending in ``.safetensors`` becomes one file whose metadata holds the configuration.
    Any other path becomes a folder (created if needed) in Hugging Face's layout:
    ``config.json`` with GPT-2's keys (plus a ``"gptcore"`` entry for what GPT-2's format
    cannot say: sinusoidal positions, missing biases or LayerNorm affines) and
    ``model.safetensors`` with the ``"transformer."`` prefix and, when tied, no ``lm_head``.
    ``dtype`` (``None``: each tensor's own, float32 or float64) converts every tensor.
    Existing files of those names are replaced. ``weight_dtype`` (``"bfloat16"`` or
    ``"float16"``) stores the weight matrices and embedding tables as BF16/F16 (rounded to
    nearest even) and the biases and LayerNorm parameters as F32, as a model with 16-bit
    weights holds them (``dtype`` must then be None).
    """
    from safetensors.numpy import save_file

    if weight_dtype is not None:
        from ..half import half_dtype_name, save_half

        if dtype is not None:
            raise ValueError("save_safetensors: give dtype or weight_dtype, not both")
        return save_half(weights, config, path, half_dtype_name("save_safetensors: weight_dtype", weight_dtype))

    _check_config("save_safetensors", config)
    w = validate(weights, config)
    if dtype is not None:
        dt = np.dtype(dtype_name("save_safetensors", dtype, ("float16", "float32", "float64")))
        w = {k: v.astype(dt, copy=False) for k, v in w.items()}
    try:
        p = Path(os.fspath(path))
    except TypeError:
        raise TypeError(f"save_safetensors: path must be a str or os.PathLike, got {type(path).__name__}") from None
    tensors = {
        (k if k == "lm_head.weight" else _PREFIX + k): np.ascontiguousarray(v) for k, v in w.items()
    }
    metadata = {"format": "pt", _CONFIG_METADATA_KEY: json.dumps(config.to_dict())}
    dtypes = sorted({v.dtype.name for v in w.values()})
    if p.suffix == ".safetensors":
        if p.is_dir():
            raise ValueError(f"save_safetensors: {str(p)!r} is a folder; give a file path or a folder without the .safetensors suffix")
        p.parent.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(p), metadata=metadata)
        return p
    if p.exists() and not p.is_dir():
        raise ValueError(f"save_safetensors: {str(p)!r} exists and is not a folder")
    p.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(p / "model.safetensors"), metadata=metadata)
    with open(p / "config.json", "w", encoding="utf-8") as fh:
        json.dump(_hf_config(config, dtypes[0] if len(dtypes) == 1 else "float32"), fh, indent=2)
        fh.write("\n")
    return p
