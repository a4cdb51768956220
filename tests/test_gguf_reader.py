"""gptcore.gguf's reader and writer: round trips, the ``gguf`` package as an independent
reader and writer, and malformed files (each a ValueError naming the file and the fault)."""

from __future__ import annotations

import struct

import gguf as ref
import numpy as np
import pytest

from gptcore.gguf import GGUFReader, Value, ValueType, WriterTensor, quantize, write_gguf
from gptcore.gguf.format import Q4_0_BLOCK, Q8_0_BLOCK, TENSOR_TYPES

RNG = np.random.default_rng(48)
W = RNG.standard_normal((3, 64)).astype(np.float32)

ALL_VALUES = {
    "general.architecture": "gpt2",
    "t.u8": Value(ValueType.UINT8, 255), "t.i8": Value(ValueType.INT8, -128),
    "t.u16": Value(ValueType.UINT16, 65535), "t.i16": Value(ValueType.INT16, -32768),
    "t.u32": Value(ValueType.UINT32, 2**32 - 1), "t.i32": Value(ValueType.INT32, -2**31),
    "t.u64": Value(ValueType.UINT64, 2**64 - 1), "t.i64": Value(ValueType.INT64, -2**63),
    "t.f32": Value(ValueType.FLOAT32, 1e-5), "t.f64": Value(ValueType.FLOAT64, 1e-300),
    "t.bool": True, "t.str": "héllo, 世界 🎉",
    "t.strs": ["a", "", "Ġthe", "日本"],
    "t.i32s": Value(ValueType.ARRAY, np.array([-1, 0, 7], np.int32), ValueType.INT32),
    "t.f32s": Value(ValueType.ARRAY, np.array([0.5, -2.0], np.float32), ValueType.FLOAT32),
    "t.bools": Value(ValueType.ARRAY, np.array([True, False]), ValueType.BOOL),
    "t.empty": Value(ValueType.ARRAY, np.zeros(0, np.uint64), ValueType.UINT64),
    "t.nested": Value(ValueType.ARRAY, [Value(ValueType.ARRAY, np.arange(3, dtype=np.uint8), ValueType.UINT8),
                                        Value(ValueType.ARRAY, ["x"], ValueType.STRING)], ValueType.ARRAY),
}


def _tensors():
    return [
        WriterTensor("a.f32", "F32", W.shape, W),
        WriterTensor("b.f16", "F16", W.shape, W.astype(np.float16)),
        WriterTensor("c.bf16", "BF16", (5,), np.arange(5, dtype=np.uint16) + 0x3F80),
        WriterTensor("d.q8_0", "Q8_0", W.shape, quantize(W, "q8_0")),
        WriterTensor("e.q4_0", "Q4_0", W.shape, lambda: quantize(W, "q4_0")),
        WriterTensor("f.empty", "F32", (0, 4), np.zeros((0, 4), np.float32)),
        WriterTensor("g.4d", "F32", (2, 1, 3, 2), np.arange(12, dtype=np.float32).reshape(2, 1, 3, 2)),
    ]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    p = tmp_path_factory.mktemp("gguf") / "all.gguf"
    write_gguf(p, ALL_VALUES, _tensors())
    return p


def _same(a, b):
    if isinstance(a, Value):
        a = a.value
    if isinstance(b, Value):
        b = b.value
    if isinstance(a, list) and a and isinstance(a[0], Value):
        return all(_same(x, y) for x, y in zip(a, b)) and len(a) == len(b)
    if isinstance(a, np.ndarray):
        return a.dtype == np.asarray(b).dtype and np.array_equal(a, b)
    return a == b and type(a) is type(b)


def test_round_trip_metadata_of_every_type(written):
    with GGUFReader(written) as r:
        assert r.version == 3 and r.alignment == 32
        assert list(r.fields) == list(ALL_VALUES)
        for k, v in ALL_VALUES.items():
            got = r.fields[k]
            want = v if isinstance(v, Value) else None
            if want is not None:
                assert got.type == want.type and got.element_type == want.element_type, k
            if k == "t.f32":
                assert got.value == float(np.float32(1e-5))
            else:
                assert _same(v, got.value), (k, got.value)
        assert r.metadata["t.nested"][0].tolist() == [0, 1, 2] and r.metadata["t.nested"][1] == ["x"]


def test_round_trip_tensors_are_zero_copy_views(written):
    with GGUFReader(written) as r:
        assert list(r.tensors) == [t.name for t in _tensors()]
        for t in _tensors():
            info = r.tensors[t.name]
            data = t.data() if callable(t.data) else t.data
            assert info.type == t.type and info.shape == t.shape and info.ne == tuple(reversed(t.shape))
            assert info.offset % 32 == 0
            assert r.raw(t.name).tobytes() == np.ascontiguousarray(data).tobytes(), t.name
            v = r.tensor(t.name)
            assert not v.flags.writeable
            if v.size:
                assert np.shares_memory(v, r.raw(t.name)), "a view of the file, not a copy"
        assert r.tensor("a.f32").dtype == np.float32 and np.array_equal(r.tensor("a.f32"), W)
        assert r.tensor("b.f16").dtype == np.float16
        assert r.tensor("c.bf16").dtype == np.uint16
        q8, q4 = r.tensor("d.q8_0"), r.tensor("e.q4_0")
        assert q8.dtype == Q8_0_BLOCK and q8.shape == (3, 2) and q4.dtype == Q4_0_BLOCK and q4.shape == (3, 2)
        assert np.array_equal(r.to_float32("c.bf16"), (np.arange(5, dtype=np.uint32) + 0x3F80 << 16).view(np.float32))
        assert np.array_equal(r.to_float32("b.f16"), W.astype(np.float16).astype(np.float32))


def test_the_gguf_package_reads_our_files_the_same(written):
    g = ref.GGUFReader(written)
    with GGUFReader(written) as r:
        assert [t.name for t in g.tensors] == list(r.tensors)
        for t in g.tensors:
            mine = r.tensors[t.name]
            assert t.tensor_type.name == mine.type
            assert tuple(int(x) for x in t.shape) == mine.ne
            assert t.data_offset == mine.offset
            assert t.data.tobytes() == r.raw(t.name).tobytes()
        for k in ALL_VALUES:
            if k == "t.nested":
                continue  # the gguf package flattens nested arrays
            f = g.fields[k]
            got = f.contents()
            mine = r.metadata[k]
            if isinstance(mine, np.ndarray):
                assert np.array_equal(np.asarray(got, dtype=mine.dtype), mine), k
            else:
                assert got == mine, k


def test_we_read_files_of_the_gguf_package(tmp_path):
    p = tmp_path / "ref.gguf"
    w = ref.GGUFWriter(str(p), "gpt2")
    w.add_custom_alignment(64)
    w.add_uint32("gpt2.block_count", 12)
    w.add_float32("gpt2.attention.layer_norm_epsilon", 1e-5)
    w.add_string("x.s", "ü")
    w.add_array("x.a", [1, 2, 3])
    w.add_array("x.strs", ["a", "bc"])
    w.add_bool("x.b", False)
    q8 = ref.quants.quantize(W, ref.GGMLQuantizationType.Q8_0)
    bf = ref.quants.quantize(W, ref.GGMLQuantizationType.BF16)
    w.add_tensor("f32", W)
    w.add_tensor("f16", W.astype(np.float16))
    w.add_tensor("q8", q8, raw_dtype=ref.GGMLQuantizationType.Q8_0)
    w.add_tensor("bf16", bf, raw_dtype=ref.GGMLQuantizationType.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with GGUFReader(p) as r:
        assert r.alignment == 64
        assert r.metadata["general.architecture"] == "gpt2" and r.metadata["gpt2.block_count"] == 12
        assert r.fields["gpt2.block_count"].type == ValueType.UINT32
        assert r.metadata["x.s"] == "ü" and r.metadata["x.strs"] == ["a", "bc"] and r.metadata["x.b"] is False
        assert r.metadata["x.a"].tolist() == [1, 2, 3]
        assert np.array_equal(r.tensor("f32"), W)
        assert np.array_equal(r.tensor("f16"), W.astype(np.float16))
        assert r.tensors["q8"].shape == W.shape and r.raw("q8").tobytes() == q8.tobytes()
        assert np.array_equal(r.to_float32("bf16"), ref.quants.dequantize(bf, ref.GGMLQuantizationType.BF16))
        for t in r.tensors.values():
            assert t.offset % 64 == 0


def test_type_table_matches_the_gguf_package():
    for name, t in TENSOR_TYPES.items():
        q = ref.GGMLQuantizationType[name]
        assert q.value == t.id and ref.GGML_QUANT_SIZES[q] == (t.block_size, t.type_size), name


def test_alignment_is_honoured(tmp_path):
    for a in (1, 8, 64, 4096):
        p = write_gguf(tmp_path / f"a{a}.gguf", {}, _tensors()[:3], alignment=a)
        with GGUFReader(p) as r:
            assert r.alignment == a and all(t.offset % a == 0 for t in r.tensors.values())
            assert np.array_equal(r.tensor("a.f32"), W)
        assert ref.GGUFReader(p).alignment == a


@pytest.mark.parametrize("bad, err, words", [
    (dict(metadata={"n": 5}), TypeError, "give a gguf.format.Value"),
    (dict(metadata={"n": Value(ValueType.UINT8, 256)}), ValueError, "does not fit UINT8"),
    (dict(metadata={"n": Value(ValueType.UINT32, 1.5)}), TypeError, "'n' is UINT32"),
    (dict(metadata={"n": Value(ValueType.ARRAY, np.array([-1]), ValueType.UINT16)}), ValueError, "outside UINT16"),
    (dict(tensors=[WriterTensor("x", "Q6_K", (2, 256), np.zeros(420, np.uint8))]), ValueError, "Q6_K"),
    (dict(tensors=[WriterTensor("x", "Q8_0", (2, 33), np.zeros(2, Q8_0_BLOCK))]), ValueError, "not a multiple of 32"),
    (dict(tensors=[WriterTensor("x", "F32", (2, 3), np.zeros((3, 3), np.float32))]), ValueError, "needs 24 bytes"),
    (dict(tensors=[WriterTensor("x", "F32", (2, 3), np.zeros((2, 3), np.float64))]), ValueError, "needs data of dtype"),
    (dict(tensors=[WriterTensor("x" * 64, "F32", (1,), np.zeros(1, np.float32))]), ValueError, "longer than 63"),
    (dict(tensors=[WriterTensor("x", "F32", (1,), np.zeros(1, np.float32))] * 2), ValueError, "given twice"),
])
def test_writer_refuses_what_does_not_fit(tmp_path, bad, err, words):
    p = tmp_path / "w.gguf"
    with pytest.raises(err) as info:
        write_gguf(p, bad.get("metadata", {}), bad.get("tensors", []))
    assert words in str(info.value)
    assert not p.exists() and not list(tmp_path.iterdir()), "a failed write leaves nothing behind"


# ------------------------------------------------------------------------------------------
# malformed files: built byte by byte here, independent of the writer
# ------------------------------------------------------------------------------------------

def _s(b: bytes) -> bytes:
    return struct.pack("<Q", len(b)) + b


def _kv(key: bytes, vtype: int, payload: bytes) -> bytes:
    return _s(key) + struct.pack("<I", vtype) + payload


def _info(name: bytes, ne, ttype: int, offset: int) -> bytes:
    return _s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne) + struct.pack("<IQ", ttype, offset)


def _file(kvs=(), infos=(), data=b"", version=3, n_tensors=None, n_kv=None, magic=b"GGUF", align=32) -> bytes:
    head = magic + struct.pack("<IQQ", version, len(infos) if n_tensors is None else n_tensors,
                               len(kvs) if n_kv is None else n_kv)
    head += b"".join(kvs) + b"".join(infos)
    return head + b"\0" * (-len(head) % align) + data


F32_4 = np.arange(4, dtype=np.float32).tobytes()
GOOD = _file([_kv(b"general.architecture", 8, _s(b"gpt2"))], [_info(b"t", [4], 0, 0)], F32_4 + b"\0" * 16)

MALFORMED = [
    ("empty", b"", "fewer than the 24-byte header"),
    ("magic only", b"GGUF", "fewer than the 24-byte header"),
    ("wrong magic", b"GGUG" + GOOD[4:], "does not start with the magic"),
    ("not GGUF at all", b"PK\x03\x04" + b"\0" * 40, "does not start with the magic"),
    ("version 1", _file(version=1), "version 1"),
    ("version 4", _file(version=4), "version 4"),
    ("version 0", _file(version=0), "version 0"),
    ("big endian", _file(version=3 << 24), "big-endian"),
    ("truncated counts", GOOD[:20], "fewer than the 24-byte header"),
    ("tensor count huge", _file(n_tensors=2**64 - 1), "tensor count 18446744073709551615 is larger than the file"),
    ("tensor count too large", _file([_kv(b"k", 4, b"\0" * 4)], n_tensors=1000), "tensor count 1000 is larger"),
    ("metadata count huge", _file(n_kv=2**63), "metadata count"),
    ("key length past end", _file([_s(b"k")[:8].replace(b"\x01", b"\xff") + b"k" + b"\0" * 20]), "has length 255, larger than the rest"),
    ("string value past end", _file([_kv(b"k", 8, struct.pack("<Q", 2**63) + b"abc")]), "has length 9223372036854775808"),
    ("array count past end", _file([_kv(b"k", 9, struct.pack("<IQ", 4, 2**40))]), "claims 1099511627776 elements"),
    ("array of strings past end", _file([_kv(b"k", 9, struct.pack("<IQ", 8, 3) + _s(b"a"))]), "claims 3 elements"),
    ("array elements cut", _file([_kv(b"k", 9, struct.pack("<IQ", 5, 3) + b"\0" * 4)], align=1), "claims 3 elements of type INT32"),
    ("unknown value type", _file([_kv(b"k", 13, b"\0" * 8)]), "unknown value type 13"),
    ("unknown element type", _file([_kv(b"k", 9, struct.pack("<IQ", 99, 1) + b"\0" * 8)]), "unknown value type 99"),
    ("arrays nested too deep", _file([_kv(b"k", 9, struct.pack("<IQ", 9, 1) * 6 + b"\0" * 64)]), "nests arrays more than"),
    ("empty key", _file([_kv(b"", 4, b"\0" * 4)]), "metadata key 0 (byte 24) is empty"),
    ("duplicate key", _file([_kv(b"k", 4, b"\0" * 4), _kv(b"k", 4, b"\0" * 4)]), "'k' appears twice"),
    ("key not UTF-8", _file([_kv(b"k\xff", 4, b"\0" * 4)]), "is not UTF-8"),
    ("string value not UTF-8", _file([_kv(b"k", 8, _s(b"\xc3"))]), "metadata 'k' at byte"),
    ("scalar cut", _file([_kv(b"k", 12, b"\0" * 3)], align=1), "needs 8 bytes"),
    ("alignment type", _file([_kv(b"general.alignment", 10, struct.pack("<Q", 32))]), "must be a UINT32, got UINT64"),
    ("alignment zero", _file([_kv(b"general.alignment", 4, struct.pack("<I", 0))]), "is 0, not a power of two"),
    ("alignment 24", _file([_kv(b"general.alignment", 4, struct.pack("<I", 24))]), "is 24, not a power of two"),
    ("five dimensions", _file([], [_info(b"t", [1] * 5, 0, 0)], F32_4), "has 5 dimensions (at most 4)"),
    ("dimension beyond int64", _file([], [_info(b"t", [2**63], 0, 0)], F32_4), "beyond a signed 64-bit integer"),
    ("dimensions overflow", _file([], [_info(b"t", [2**32, 2**32], 0, 0)], F32_4), "overflow a 64-bit size"),
    ("bytes overflow", _file([], [_info(b"t", [2**31, 2**31], 0, 0)], F32_4), "(F32) overflow a 64-bit size"),
    ("zero dimension beside huge ones", _file([], [_info(b"t", [0, 2**40, 2**40], 0, 0)], F32_4), "overflow"),
    ("unknown tensor type", _file([], [_info(b"t", [4], 99, 0)], F32_4), "tensor 't' has unknown type 99"),
    ("block row not a multiple", _file([], [_info(b"t", [33, 2], 8, 0)], b"\0" * 96), "rows of 33 values, not a multiple of its block size 32"),
    ("block tensor without dimensions", _file([], [_info(b"t", [], 2, 0)], b"\0" * 32), "rows of 1 values"),
    ("misaligned offset", _file([], [_info(b"t", [4], 0, 4)], F32_4 * 3), "is misaligned: its offset 4"),
    ("offset past the end", _file([], [_info(b"t", [4], 0, 2**40)], F32_4), "runs past the end of the file"),
    ("offset near 2^64", _file([], [_info(b"t", [4], 0, 2**64 - 32)], F32_4), "runs past the end of the file"),
    ("data cut short", _file([], [_info(b"t", [8], 0, 0)], F32_4), "runs past the end of the file"),
    ("overlapping tensors", _file([], [_info(b"a", [8], 0, 0), _info(b"b", [4], 0, 0)], F32_4 * 2), "overlap (bytes 96 to 112)"),
    ("duplicate tensor", _file([], [_info(b"t", [4], 0, 0), _info(b"t", [4], 0, 32)], F32_4 * 8), "tensor name 't' appears twice"),
    ("tensor name past end", _file([], [_s(b"t")[:8].replace(b"\x01", b"\xf0") + b"t"]), "larger than the rest of the file"),
    ("tensor info cut", _file([], [_info(b"t" * 40, [4], 0, 0)], align=1)[:24 + 8 + 40],
     "the number of dimensions of tensor 'tttttttttttttttttttttttttttttttttttttttt' at byte 72 needs 4 bytes"),
    ("tensor name not UTF-8", _file([], [_info(b"\xfe", [4], 0, 0)], F32_4), "the name of tensor 0 at byte"),
]


@pytest.mark.parametrize("label, data, words", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_files_raise_value_error_naming_file_and_fault(tmp_path, label, data, words):
    p = tmp_path / f"{label.replace(' ', '_')}.gguf"
    p.write_bytes(data)
    with pytest.raises(ValueError) as info:
        GGUFReader(p)
    msg = str(info.value)
    assert repr(str(p)) in msg, msg
    assert words in msg, msg


def test_the_valid_base_file_reads(tmp_path):
    p = tmp_path / "good.gguf"
    p.write_bytes(GOOD)
    with GGUFReader(p) as r:
        assert r.tensor("t").tolist() == [0, 1, 2, 3]


def test_known_but_unreadable_type_is_listed_and_refused_by_name(tmp_path):
    q6 = TENSOR_TYPES["Q6_K"]
    p = tmp_path / "q6k.gguf"
    p.write_bytes(_file([], [_info(b"output.weight", [256, 2], q6.id, 0)], b"\0" * (2 * q6.type_size)))
    with GGUFReader(p) as r:
        assert r.tensors["output.weight"].type == "Q6_K" and r.tensors["output.weight"].nbytes == 420
        for fn in (r.tensor, r.to_float32):
            with pytest.raises(ValueError, match=r"tensor 'output.weight' has type Q6_K; gptcore reads F32, F16, BF16"):
                fn("output.weight")
        assert r.raw("output.weight").size == 420


def test_paths_that_are_not_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        GGUFReader(tmp_path / "missing.gguf")
    with pytest.raises(ValueError, match="is a folder"):
        GGUFReader(tmp_path)
    with pytest.raises(TypeError, match="path must be"):
        GGUFReader(3)
    with pytest.raises(ValueError, match="fewer than the 24-byte header"):
        GGUFReader("/dev/null")
