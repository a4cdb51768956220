"""What the GGUF fuzzers run: the target (bytes -> GGUFReader and gptcore.load) and a
mutator that knows GGUF's layout.

Random byte edits of a GGUF file mostly hit tensor data, which the parser never looks at.
:func:`mutate` therefore also walks the file's header (an independent walker, not the
reader under test) and sets one of its fields (a count, a string length, a value or element
type, an array length, a number of dimensions, a dimension, a tensor type or offset, the
version) to a value chosen to break things; rebuilds the file from its parts with metadata
values, names, dimensions or types changed (so that an edit reaches the checks behind the
parser: configuration, names, shapes, tokenizer); and flips bits, truncates and appends.
Used by ``fuzz_gguf.py`` (atheris or a plain loop) and ``tests/test_gguf_fuzz.py``
(hypothesis).
"""

from __future__ import annotations

import os
import random
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

import gptcore
from gptcore.gguf import GGUFReader
from gptcore.gguf.format import READABLE_TYPES
from gptcore.weights.gguf_checkpoint import describe, write_model

#: What reading a hostile GGUF file may raise. Anything else is a bug, and so is a crash or a hang.
ALLOWED = (ValueError,)

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "tiny-a-hf"
IDS = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])

_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


# ------------------------------------------------------------------------------------------
# seeds
# ------------------------------------------------------------------------------------------

def _tiny_tokenizer() -> "gptcore.Tokenizer":
    """A byte-level BPE tokenizer: 256 byte tokens, three merges, one special token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    byte_tokens = sorted(alphabet)
    vocab = {t: i for i, t in enumerate(byte_tokens)}
    merges = [("t", "h"), ("th", "e"), ("Ġ", "the")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>"])
    return gptcore.Tokenizer(tok)


def seeds() -> Dict[str, bytes]:
    """Valid GGUF files: the tiny-a fixture model in F32, F16, BF16, Q8_0 and Q4_0 (no
    tokenizer), and a model with an untied head and a byte-level BPE tokenizer."""
    out: Dict[str, bytes] = {}
    weights, config = gptcore.load_safetensors(FIXTURE)
    tmp = Path(tempfile.mkdtemp(prefix="gptcore-gguf-seeds-"))
    try:
        for wd in ("float32", "float16", "bfloat16", "q8_0", "q4_0"):
            p = write_model(weights, config, tmp / f"{wd}.gguf", wd)
            out[f"tiny-a-{wd}"] = p.read_bytes()
        tok = _tiny_tokenizer()
        cfg = gptcore.GPTConfig(vocab_size=tok.vocab_size, n_ctx=8, d_model=32, n_heads=2, n_layers=1, tied=False)
        w = gptcore.init_weights(cfg, seed=3)
        out["tok-untied-f32"] = write_model(w, cfg, tmp / "tok.gguf", "float32", tok).read_bytes()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


# ------------------------------------------------------------------------------------------
# an independent walk over the header: where each field is
# ------------------------------------------------------------------------------------------

class _Stop(Exception):
    pass


def fields(data: bytes) -> List[Tuple[int, int, str]]:
    """``(position, width, kind)`` of the header's numeric fields, as far as the header can be
    walked (a broken file gives the fields before the break)."""
    out: List[Tuple[int, int, str]] = []
    pos = 0

    def take(n: int, kind: str) -> int:
        nonlocal pos
        if pos + n > len(data):
            raise _Stop
        v = int.from_bytes(data[pos:pos + n], "little")
        out.append((pos, n, kind))
        pos += n
        return v

    def string(kind: str) -> None:
        nonlocal pos
        n = take(8, kind)
        if pos + n > len(data):
            raise _Stop
        pos += n

    def value(vtype: int, depth: int = 0) -> None:
        nonlocal pos
        if vtype == 8:
            string("string length")
        elif vtype == 9:
            if depth > 3:
                raise _Stop
            et = take(4, "element type")
            n = take(8, "array length")
            if et in _SCALAR_SIZES:
                pos += n * _SCALAR_SIZES[et]
                if pos > len(data):
                    raise _Stop
            else:
                for _ in range(min(n, 100000)):
                    value(et, depth + 1)
        elif vtype in _SCALAR_SIZES:
            take(_SCALAR_SIZES[vtype], "value")
        else:
            raise _Stop

    try:
        pos = 4
        take(4, "version")
        n_t = take(8, "tensor count")
        n_kv = take(8, "metadata count")
        for _ in range(min(n_kv, 10000)):
            string("key length")
            value(take(4, "value type"))
        for _ in range(min(n_t, 10000)):
            string("name length")
            nd = take(4, "n_dims")
            for _ in range(min(nd, 8)):
                take(8, "dimension")
            take(4, "tensor type")
            take(8, "offset")
    except _Stop:
        pass
    return out


def _interesting(rng: random.Random, width: int, data_len: int) -> int:
    r = rng.random()
    if r < 0.4:
        v = rng.choice([0, 1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 14, 15, 28, 30, 31, 32, 33, 34, 63, 64, 255, 256])
    elif r < 0.7:
        v = rng.choice([data_len - 1, data_len, data_len + 1, data_len // 2, data_len // 34, 2**31 - 1, 2**31, 2**32 - 1,
                        2**32, 2**53, 2**62, 2**63 - 1, 2**63, 2**64 - 1])
    else:
        v = rng.randrange(0, 1 << (8 * width))
    return v % (1 << (8 * width))


# ------------------------------------------------------------------------------------------
# rebuilding a file from its parts (with a raw framer, not gptcore's writer)
# ------------------------------------------------------------------------------------------

def _s(x: bytes) -> bytes:
    return struct.pack("<Q", len(x)) + x


def _parts(data: bytes) -> Optional[Tuple[List[Tuple[bytes, bytes]], List[list], int]]:
    """(metadata as (key, type code + value bytes), tensors as [name, ne, type, data bytes],
    alignment) of a valid file, else None."""
    import gptcore.gguf.reader as rd

    work = Path(tempfile.mkdtemp(prefix="gptcore-gguf-parts-"))
    try:
        f = work / "x.gguf"
        f.write_bytes(data)
        try:
            r = rd.GGUFReader(f)
        except ValueError:
            return None
        with r:
            spans = [pos for pos, _, kind in fields(data) if kind == "key length"]
            kv_end = None
            meta = []
            infos = [pos for pos, _, kind in fields(data) if kind == "name length"]
            kv_end = infos[0] if infos else None
            bounds = spans + ([kv_end] if kv_end is not None else [])
            if kv_end is None or len(spans) != len(r.fields):
                return None
            for a, b in zip(bounds, bounds[1:]):
                n = int.from_bytes(data[a:a + 8], "little")
                meta.append((data[a + 8:a + 8 + n], data[a + 8 + n:b]))
            tensors = [[t.name.encode(), list(t.ne), _type_id(t.type), bytes(r.raw(t.name))] for t in r.tensors.values()]
            return meta, tensors, r.alignment
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _type_id(name: str) -> int:
    from gptcore.gguf.format import TENSOR_TYPES

    return TENSOR_TYPES[name].id


def frame(meta: List[Tuple[bytes, bytes]], tensors: List[list], alignment: int = 32, version: int = 3) -> bytes:
    """A GGUF file from raw parts: each tensor's data at the next multiple of ``alignment``."""
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(meta))
    head += b"".join(_s(k) + v for k, v in meta)
    body = b""
    infos = b""
    for name, ne, ttype, raw in tensors:
        infos += _s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d % 2**64) for d in ne)
        infos += struct.pack("<IQ", ttype, len(body))
        body += raw + b"\0" * (-len(raw) % alignment)
    head += infos
    return head + b"\0" * (-len(head) % alignment) + body


_META_EDITS = [
    (b"general.architecture", [b"llama", b"qwen2", b"gpt-2", b"", b"gpt2\x00", b"\xff\xfe"]),
    (b"gpt2.block_count", [0, 1, 3, 2**32 - 1]),
    (b"gpt2.context_length", [0, 1, 31, 33, 2**31]),
    (b"gpt2.embedding_length", [0, 16, 31, 64]),
    (b"gpt2.feed_forward_length", [0, 64, 129]),
    (b"gpt2.attention.head_count", [0, 3, 5, 32, 2**32 - 1]),
    (b"gpt2.attention.layer_norm_epsilon", [0.0, -1.0, float("nan"), float("inf"), 1e-30]),
    (b"tokenizer.ggml.model", [b"llama", b"bert", b"none", b"gpt", b""]),
    (b"tokenizer.ggml.pre", [b"llama-bpe", b"qwen2", b"default"]),
    (b"tokenizer.ggml.eos_token_id", [0, 2**32 - 1, 999]),
]


def _typed(v) -> bytes:
    if isinstance(v, bytes):
        return struct.pack("<I", 8) + _s(v)
    if isinstance(v, float):
        return struct.pack("<If", 6, v)
    return struct.pack("<II", 4, v)


def rebuild(data: bytes, rng: random.Random) -> bytes:
    """Edit a valid file's parts (metadata values and types, tensor names, dimensions, types,
    bytes) and frame it again."""
    parts = _parts(data)
    if parts is None:
        return data
    meta, tensors, alignment = parts
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(10)
        if op == 0 or op == 1:
            key, choices = rng.choice(_META_EDITS)
            meta = [(k, v) for k, v in meta if k != key]
            if rng.random() < 0.85:
                meta.append((key, _typed(rng.choice(choices))))
        elif op == 2 and meta:  # a value retyped: same bytes, other type code
            i = rng.randrange(len(meta))
            k, v = meta[i]
            meta[i] = (k, struct.pack("<I", rng.choice([0, 4, 5, 6, 7, 8, 9, 10, 12, 13])) + v[4:])
        elif op == 3 and tensors:
            t = rng.choice(tensors)
            t[0] = rng.choice([b"output.weight", b"token_embd.weight", b"blk.0.attn_qkv.weight", b"blk.7.ffn_up.weight",
                               b"blk.01.ffn_up.weight", b"position_embd.weight", b"rope_freqs.weight", b"", b"x" * 70,
                               b"blk.99999999999.attn_norm.weight"])
        elif op == 4 and tensors:
            del tensors[rng.randrange(len(tensors))]
        elif op == 5 and tensors:  # other dimensions, same bytes
            t = rng.choice(tensors)
            ne = t[1] or [1]
            t[1] = rng.choice([list(reversed(ne)), [ne[0]], ne + [1], [0] + ne[1:], [32, 2**61], [], [0, 2**62, 4]])
        elif op == 6 and tensors:  # other type, same bytes
            t = rng.choice(tensors)
            t[2] = rng.choice([0, 1, 2, 8, 12, 14, 28, 30, 24, 26, 31, 99])
        elif op == 7 and tensors:  # a tensor twice, or copied under the head's name
            t = rng.choice(tensors)
            tensors.append([rng.choice([t[0], b"output.weight"]), list(t[1]), t[2], t[3]])
        elif op == 8 and tensors:  # non-finite or extreme values in the data
            t = rng.choice(tensors)
            raw = bytearray(t[3])
            if raw:
                for _ in range(rng.randint(1, 4)):
                    i = rng.randrange(len(raw))
                    raw[i] = rng.choice([0x7F, 0xFF, 0x80, 0x7C, 0xFC])
            t[3] = bytes(raw)
        elif op == 9:
            alignment = rng.choice([1, 8, 16, 64])
            meta = [(k, v) for k, v in meta if k != b"general.alignment"] + [(b"general.alignment", _typed(alignment))]
    return frame(meta, tensors, alignment)


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One random edit of a GGUF file (see the module documentation)."""
    op = rng.choice([0, 1, 2, 3, 3, 3, 4, 5, 6, 7])  # rebuilds reach the checks behind the parser
    if op <= 2:
        fs = fields(data)
        if fs:
            pos, width, _ = rng.choice(fs)
            v = _interesting(rng, width, len(data))
            return data[:pos] + v.to_bytes(width, "little") + data[pos + width:]
    if op == 3:
        return rebuild(data, rng)
    if op == 4 and data:
        b = bytearray(data)
        hot = min(len(b), 4096)  # mostly the header
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(hot if rng.random() < 0.8 else len(b))
            b[i] ^= 1 << rng.randrange(8)
        return bytes(b)
    if op == 5:
        return data[: rng.randrange(len(data) + 1)]
    if op == 6:
        return data + bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    if op == 7 and len(data) > 24:
        return data[:4] + rng.choice([b"\x01\x00\x00\x00", b"\x02\x00\x00\x00", b"\x04\x00\x00\x00",
                                      b"\x00\x00\x00\x03", b"\x00\x00\x00\x00"]) + data[8:]
    return data[:-1] if data else data


# ------------------------------------------------------------------------------------------
# the target
# ------------------------------------------------------------------------------------------

def known_bug(data: bytes) -> Optional[str]:
    """The known, not yet fixed bug an input runs into (``fuzz_loader.py --skip-known``): none."""
    return None


class Workdir:
    """A folder for the file under test (in /dev/shm when available)."""

    def __init__(self) -> None:
        base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
        for old in Path(base).glob("gptcore-ggufz-*-*"):
            pid = old.name.split("-")[2]
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                shutil.rmtree(old, ignore_errors=True)
        self.root = Path(tempfile.mkdtemp(prefix=f"gptcore-ggufz-{os.getpid()}-", dir=base))
        self.file = self.root / "model.gguf"

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _use(model: "gptcore.Model") -> None:
    ids = IDS % model.config.vocab_size
    ids = ids[:, : model.config.n_ctx]
    out = model.forward(ids)
    assert out.shape == ids.shape + (model.config.vocab_size,), out.shape


def check_bytes(data: bytes, work: Workdir) -> int:
    """Read ``data`` as a GGUF file: every tensor through ``GGUFReader`` (views, float32
    copies), ``describe``, and ``gptcore.load`` five ways (as stored: float32, or the file's
    Q8_0 / Q4_0 blocks; bfloat16 weights; dequantized float32; quantized to q8_0 and to q4_0).
    Returns how many loads gave a working model; raises whatever is not in :data:`ALLOWED`."""
    work.file.write_bytes(data)
    try:
        r = GGUFReader(work.file)
    except ALLOWED:
        return 0
    with r:
        assert isinstance(r.metadata, dict)
        for name, t in r.tensors.items():
            if t.type in READABLE_TYPES:
                v = r.tensor(name)
                assert v.nbytes == t.nbytes and not v.flags.writeable
                assert r.to_float32(name).size == t.n_elements
            else:
                try:
                    r.tensor(name)
                    raise AssertionError(f"tensor {name!r} of type {t.type} was handed out")
                except ALLOWED:
                    pass
    describe(work.file)
    ok = 0
    for kw in ({}, {"weight_dtype": "bfloat16"}, {"weight_dtype": "float32"}, {"weight_dtype": "q8_0"},
               {"weight_dtype": "q4_0"}):
        try:
            _use(gptcore.load(work.file, **kw))
            ok += 1
        except ALLOWED:
            pass
    return ok
