"""What the loader fuzzers run: the target (bytes -> gptcore.load in three ways) and a
mutator that understands the safetensors layout.

A safetensors file is ``u64 little-endian header length | JSON header | tensor bytes``. Random
byte edits almost always break the length prefix or the JSON, so they only exercise the
first lines of the parser; :func:`mutate` therefore edits the parsed header (dtypes, shapes,
offsets, names, metadata) and re-frames it with a correct prefix, as well as flipping bits,
truncating, and editing the header text. Used by ``fuzz_loader.py`` (atheris or a plain loop)
and by ``tests/test_loader_fuzz.py`` (hypothesis).
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Dict, Optional, Tuple

import numpy as np

import gptcore

#: What loading a hostile file may raise. Anything else (AttributeError, KeyError, IndexError,
#: OverflowError, RuntimeError, ...) is a bug, and so is a crash or a hang.
ALLOWED = (ValueError, TypeError, FileNotFoundError, MemoryError)

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "tiny-a-hf"
IDS = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])

DTYPES = ["F32", "F64", "F16", "BF16", "I8", "I16", "I32", "I64", "U8", "U16", "U32", "U64", "BOOL",
          "F8_E4M3", "F8_E5M2", "C64", "XYZ", "", 7, None]
NAMES = [
    "transformer.wte.weight", "wte.weight", "transformer.wpe.weight", "lm_head.weight",
    "transformer.h.0.ln_1.weight", "transformer.h.1.ln_2.bias", "transformer.h.2.ln_1.weight",
    "transformer.h.7.mlp.c_fc.weight", "transformer.h.0.attn.bias", "transformer.h.0.attn.masked_bias",
    "h.01.ln_1.weight", "h.-1.ln_1.weight", "h.x.ln_1.weight", "transformer.", "", "__metadata__",
    "transformer.ln_f.weight", "transformer.ln_f.bias", "transformer.h.0.attn.c_attn.weight",
]


# ------------------------------------------------------------------------------------------
# framing
# ------------------------------------------------------------------------------------------

def split(data: bytes) -> Tuple[Optional[dict], bytes, bytes]:
    """(parsed header or None, header bytes, body) of a safetensors file."""
    if len(data) < 8:
        return None, b"", data
    n = int.from_bytes(data[:8], "little")
    if n > len(data) - 8:
        return None, b"", data[8:]
    text, body = data[8:8 + n], data[8 + n:]
    try:
        header = json.loads(text)
    except (ValueError, RecursionError):
        return None, text, body
    return (header if isinstance(header, dict) else None), text, body


def frame(header_text: bytes, body: bytes, pad: bool = True) -> bytes:
    if pad:
        header_text += b" " * (-len(header_text) % 8)
    return len(header_text).to_bytes(8, "little") + header_text + body


def frame_header(header: dict, body: bytes) -> bytes:
    return frame(json.dumps(header).encode(), body)


# ------------------------------------------------------------------------------------------
# seeds
# ------------------------------------------------------------------------------------------

def _convert(data: bytes, dtype: str) -> bytes:
    """The fixture file with every F32 tensor stored as ``dtype`` (F64, F16 or BF16)."""
    header, _, body = split(data)
    out = bytearray()
    new = {}
    for name, info in sorted(((k, v) for k, v in header.items() if k != "__metadata__"),
                             key=lambda kv: kv[1]["data_offsets"][0]):
        a, b = info["data_offsets"]
        x = np.frombuffer(body[a:b], dtype="<f4")
        if dtype == "F64":
            raw = x.astype("<f8").tobytes()
        elif dtype == "F16":
            raw = x.astype("<f2").tobytes()
        else:  # BF16: the upper half of each float32
            raw = (x.view("<u4") >> 16).astype("<u2").tobytes()
        new[name] = {"dtype": dtype, "shape": info["shape"], "data_offsets": [len(out), len(out) + len(raw)]}
        out += raw
    new["__metadata__"] = header.get("__metadata__", {})
    return frame_header(new, bytes(out))


def seeds() -> Dict[str, bytes]:
    """Seed inputs: the fixture's model.safetensors, the same in F64/F16/BF16, and one file
    that carries its configuration in the metadata (as gptcore.save_safetensors writes)."""
    raw = (FIXTURE / "model.safetensors").read_bytes()
    out = {"fixture-f32": raw}
    for dt in ("F64", "F16", "BF16"):
        out[f"fixture-{dt.lower()}"] = _convert(raw, dt)
    header, _, body = split(raw)
    cfg = json.loads((FIXTURE / "config.json").read_text())
    config = dict(vocab_size=cfg["vocab_size"], n_ctx=cfg["n_positions"], d_model=cfg["n_embd"],
                  n_heads=cfg["n_head"], n_layers=cfg["n_layer"])
    header = dict(header)
    header["__metadata__"] = {"format": "pt", "gptcore_config": json.dumps(config)}
    out["fixture-metadata-config"] = frame_header(header, body)
    return out


# ------------------------------------------------------------------------------------------
# mutation
# ------------------------------------------------------------------------------------------

def _number(rng: random.Random, big: bool) -> int:
    r = rng.random()
    if r < 0.5:
        return rng.randrange(0, 130)
    if r < 0.8 or not big:
        return rng.choice([0, 1, 2, 31, 32, 33, 61, 64, 96, 127, 128, 4095, 4096, 9999])
    return rng.choice([2**31 - 1, 2**32, 2**53, 2**63 - 1, 2**64 - 1, 2**64, -1, 10**30])


def _edit_header(header: dict, body: bytes, rng: random.Random, big: bool) -> bytes:
    h = json.loads(json.dumps(header))
    for _ in range(rng.randint(1, 3)):
        names = [k for k in h if k != "__metadata__"]
        op = rng.randrange(10)
        name = rng.choice(names) if names else None
        info = h.get(name) if name else None
        if op == 0 and isinstance(info, dict):
            info["dtype"] = rng.choice(DTYPES)
        elif op == 1 and isinstance(info, dict):
            info["shape"] = [_number(rng, big) for _ in range(rng.randint(0, 3))]
        elif op == 2 and isinstance(info, dict):
            a = _number(rng, big) if rng.random() < 0.5 else rng.randrange(0, len(body) + 2)
            b = _number(rng, big) if rng.random() < 0.5 else rng.randrange(0, len(body) + 2)
            info["data_offsets"] = [a, b]
        elif op == 3 and name:
            new = rng.choice(NAMES)
            if rng.random() < 0.3:
                new = new.replace("h.0.", f"h.{_number(rng, big)}.")
            h[new] = h.pop(name)
        elif op == 4 and name:
            del h[name]
        elif op == 5 and name:
            h[rng.choice(NAMES)] = json.loads(json.dumps(h[name]))  # same bytes, second name
        elif op == 6:
            meta = h.setdefault("__metadata__", {})
            if not isinstance(meta, dict):
                meta = h["__metadata__"] = {}
            cfg = {"vocab_size": 61, "n_ctx": 32, "d_model": 32, "n_heads": 4, "n_layers": 2}
            key = rng.choice(list(cfg) + ["pos", "tied", "bias", "ln_eps", "junk"])
            cfg[key] = rng.choice([_number(rng, big), "x", None, True, 1.5, [], {}, "sinusoidal"])
            meta["gptcore_config"] = json.dumps(cfg) if rng.random() < 0.9 else rng.choice(["[1]", "{", "null", "7"])
        elif op == 7:
            h["__metadata__"] = rng.choice([None, [], 7, "x", {"a": 1}, {"format": "pt"}, {"gptcore_config": 3}])
        elif op == 8 and isinstance(info, dict):
            key = rng.choice(["dtype", "shape", "data_offsets"])
            if rng.random() < 0.5:
                info.pop(key, None)
            else:
                info[key] = rng.choice([None, "x", [1], {}, 3.5, [-1, 2]])
        elif op == 9 and name:
            h[name] = rng.choice([None, [], "x", 3, {"dtype": "F32"}])
    return frame_header(h, body)


_ITEM = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
         "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}
_SPECIAL = [b"\x00\x00\xc0\x7f", b"\x00\x00\x80\x7f", b"\x00\x00\x80\xff", b"\xff\xff\x7f\x7f", b"\x01\x00\x00\x00"]


def _rebuild(header: dict, body: bytes, rng: random.Random, big: bool) -> bytes:
    """Edit the tensors as objects (name, dtype, shape, bytes) and write a well-formed file
    again, so that the edit reaches gptcore's own checks instead of the parser's."""
    tensors = []
    for name, info in header.items():
        if name == "__metadata__" or not isinstance(info, dict):
            continue
        try:
            a, b = info["data_offsets"]
            dtype, shape = info["dtype"], list(info["shape"])
            if isinstance(dtype, str) and all(isinstance(x, int) for x in shape):
                tensors.append([name, dtype, shape, body[int(a):int(b)]])
        except (KeyError, TypeError, ValueError, OverflowError):
            continue
    if not tensors:
        return frame_header(header, body)
    for _ in range(rng.randint(1, 3)):
        t = rng.choice(tensors)
        op = rng.randrange(9)
        if op == 0:  # same bytes, other shape with the same number of elements
            n = max(1, len(t[3]) // _ITEM.get(t[1], 1))
            divs = [d for d in range(1, min(n, 4096) + 1) if n % d == 0]
            d = rng.choice(divs)
            t[2] = rng.choice([[n], [d, n // d], [n // d, d], [1, d, n // d], [n // d, 1, d]])
        elif op == 1:  # another shape, bytes cut or padded to match
            shape = [rng.choice([0, 1, 2, 3, 32, 61, 96, 128]) for _ in range(rng.randint(0, 3))]
            size = int(np.prod(shape, dtype=np.int64)) * _ITEM.get(t[1], 4)
            t[2], t[3] = shape, (t[3] * (size // max(1, len(t[3])) + 1))[:size]
        elif op == 2:  # reinterpret the bytes as another dtype (of the same width, or resized)
            same = [k for k, v in _ITEM.items() if v == _ITEM.get(t[1]) and k != t[1]]
            if same and rng.random() < 0.5:
                t[1] = rng.choice(same)
            else:
                t[1] = rng.choice(sorted(_ITEM))
                size = math.prod(t[2]) * _ITEM[t[1]]
                if 0 <= size <= 1 << 22:
                    t[3] = (t[3] * (size // max(1, len(t[3])) + 1))[:size]
        elif op == 3 and len(t[3]) >= 4:  # NaN, inf, -inf, max or a subnormal at random places
            b = bytearray(t[3])
            for _ in range(rng.randint(1, 4)):
                i = rng.randrange(0, len(b) - 3) & ~3
                b[i:i + 4] = rng.choice(_SPECIAL)
            t[3] = bytes(b)
        elif op == 4:  # rename
            new = rng.choice(NAMES)
            if rng.random() < 0.4:
                new = new.replace("h.0.", f"h.{_number(rng, big)}.")
            t[0] = new
        elif op == 5 and len(tensors) > 1:
            tensors.remove(t)
        elif op == 6:  # a second copy under another name
            tensors.append([rng.choice(NAMES), t[1], list(t[2]), t[3]])
        elif op == 7:  # swap the contents of two tensors of equal byte size
            other = [u for u in tensors if len(u[3]) == len(t[3]) and u is not t]
            if other:
                u = rng.choice(other)
                t[3], u[3] = u[3], t[3]
        else:  # metadata with a configuration
            cfg = {"vocab_size": 61, "n_ctx": 32, "d_model": 32, "n_heads": 4, "n_layers": 2}
            key = rng.choice(list(cfg) + ["pos", "tied", "bias", "attn_bias", "ln_affine", "ln_eps", "d_ff"])
            cfg[key] = rng.choice([_number(rng, big), None, False, True, "sinusoidal", 1e-5, 0.0])
            header = dict(header)
            header["__metadata__"] = {"format": "pt", "gptcore_config": json.dumps(cfg)}
    out, h = bytearray(), {}
    for name, dtype, shape, raw in tensors:
        h[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(out), len(out) + len(raw)]}
        out += raw
    if isinstance(header.get("__metadata__"), dict):
        h["__metadata__"] = header["__metadata__"]
    return frame_header(h, bytes(out))


def mutate(data: bytes, rng: random.Random, big: bool = True) -> bytes:
    """One random edit of ``data``: structural header edits, header text edits, bit flips,
    truncation, extension, or a new length prefix. ``big=False`` keeps every number it writes
    below 10^4 (so that a test run in-process cannot ask for a huge model)."""
    header, text, body = split(data)
    op = rng.randrange(10)
    if header is not None and op <= 1:
        return _edit_header(header, body, rng, big)
    if header is not None and op >= 8:
        return _rebuild(header, body, rng, big)
    if op == 3 and text:
        t = bytearray(text)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(t))
            t[i] = rng.choice(b'{}[]",:0123456789-eE. ' + bytes([rng.randrange(256)]))
        return frame(bytes(t), body, pad=False)
    if op == 4 and data:
        b = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        return bytes(b)
    if op == 5:
        return data[: rng.randrange(len(data) + 1)]
    if op == 6:
        return data + bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    n = rng.choice([0, 1, 7, 8, len(text), len(text) + 1, len(text) - 1, len(data), 2**32, 2**63, 2**64 - 1])
    n = max(0, min(n, 2**64 - 1))
    return n.to_bytes(8, "little") + data[8:]


# ------------------------------------------------------------------------------------------
# the target
# ------------------------------------------------------------------------------------------

def known_bug(data: bytes) -> Optional[str]:
    """The known, not yet fixed bug an input runs into, if any (``fuzz_loader.py
    --skip-known`` skips such inputs so that a run can look for new ones):

    - ``"huge-n_layers"``: a configuration with a huge ``n_layers`` makes
      ``weights.validate`` build every expected name first (minutes to forever);
    - ``"huge-block-index"``: a tensor named ``h.<huge>.…`` makes ``infer_config`` list every
      missing block;
    - ``"float8"``: a tensor of dtype F8_E4M3 or F8_E5M2 made the safetensors library's numpy
      reader raise AttributeError (numpy has no float8), which gptcore let through before it
      read safetensors files itself (``gptcore.weights.safetensors_file``).
    """
    header, _, _ = split(data)
    if header is None:
        return None
    for info in header.values():
        if isinstance(info, dict) and isinstance(info.get("dtype"), str) and info["dtype"].startswith("F8"):
            return "float8"
    meta = header.get("__metadata__")
    if isinstance(meta, dict) and isinstance(meta.get("gptcore_config"), str):
        try:
            cfg = json.loads(meta["gptcore_config"])
        except (ValueError, RecursionError):
            cfg = None
        if isinstance(cfg, dict) and isinstance(cfg.get("n_layers"), int) and cfg["n_layers"] > 10_000:
            return "huge-n_layers"
    for name in header:
        parts = name.split(".")
        for i, part in enumerate(parts[:-1]):
            if part == "h" and parts[i + 1].isdigit() and int(parts[i + 1]) > 10_000:
                return "huge-block-index"
    return None


class Workdir:
    """A folder laid out like a Hugging Face checkpoint, rewritten for each input (in
    /dev/shm when available, so that fuzzing does not wear a disk)."""

    def __init__(self) -> None:
        base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
        # libFuzzer ends the process without Python's clean-up: remove what dead runs left
        for old in Path(base).glob("gptcore-fuzz-*-*"):
            pid = old.name.split("-")[2]
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                shutil.rmtree(old, ignore_errors=True)
        self.root = Path(tempfile.mkdtemp(prefix=f"gptcore-fuzz-{os.getpid()}-", dir=base))
        self.folder = self.root / "hf"
        self.folder.mkdir()
        shutil.copy(FIXTURE / "config.json", self.folder / "config.json")
        self.file = self.folder / "model.safetensors"

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _use(model: "gptcore.Model") -> None:
    """A loaded model must work: forward on a few ids gives logits of the right shape."""
    ids = IDS % model.config.vocab_size
    ids = ids[:, : model.config.n_ctx] if model.config.pos == "learned" else ids
    out = model.forward(ids)
    assert out.shape == ids.shape + (model.config.vocab_size,), out.shape


def check_bytes(data: bytes, work: Workdir) -> int:
    """Load ``data`` as model.safetensors three ways: the folder (with the fixture's
    config.json), the bare file with ``n_heads=4`` (config from metadata or shapes), and
    ``load_safetensors`` on the bare file. Returns how many loads succeeded; raises whatever
    is not in :data:`ALLOWED`."""
    work.file.write_bytes(data)
    ok = 0
    for attempt in (
        lambda: _use(gptcore.load(work.folder, dtype="float32")),
        lambda: _use(gptcore.load(work.file, n_heads=4, dtype="float64")),
        lambda: gptcore.load_safetensors(work.file),
    ):
        try:
            attempt()
            ok += 1
        except ALLOWED:
            pass
    return ok
