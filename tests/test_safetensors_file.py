"""gptcore's one safetensors reader and writer (gptcore.weights.safetensors_file), against the
``safetensors`` library as the independent reference: what the library writes, gptcore reads
value for value; what gptcore writes is byte for byte what the library writes; a header the
format does not allow is refused with a ValueError naming the file."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from gptcore.weights import safetensors_file as sf

DTYPES = [np.float16, np.float32, np.float64, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32,
          np.int64, np.uint64, np.bool_]


def _random_tensors(rng, dtypes, n):
    out = {}
    for i in range(n):
        dt = np.dtype(dtypes[rng.integers(len(dtypes))])
        shape = tuple(int(s) for s in rng.integers(0, 5, size=rng.integers(0, 4)))
        if dt == np.bool_:
            a = rng.integers(0, 2, size=shape).astype(bool)
        elif dt.kind == "f":
            a = rng.standard_normal(shape).astype(dt)
        else:
            a = rng.integers(np.iinfo(dt).min, np.iinfo(dt).max, size=shape, dtype=dt, endpoint=True)
        out[f"t{rng.integers(1000)}.{i}"] = a
    return out


def _write(tmp_path, data: bytes, name="x.safetensors"):
    p = tmp_path / name
    p.write_bytes(data)
    return p


@pytest.mark.parametrize("seed", range(6))
def test_reads_what_the_library_writes(tmp_path, seed):
    rng = np.random.default_rng(seed)
    tensors = _random_tensors(rng, DTYPES, 9)
    p = _write(tmp_path, st_save(tensors, metadata={"a": "1", "format": "pt"}))
    entries, metadata = sf.read_header(p, "test")
    assert metadata == {"a": "1", "format": "pt"}
    assert sorted(e.name for e in entries) == sorted(tensors)
    for e in entries:
        got = sf.read_tensor(e, "test")
        want = tensors[e.name]
        assert got.dtype == want.dtype and got.shape == want.shape, e.name
        assert got.tobytes() == want.tobytes(), e.name


def _split(data: bytes):
    n = int.from_bytes(data[:8], "little")
    return json.loads(data[8:8 + n], object_pairs_hook=list), data[8 + n:]


@pytest.mark.parametrize("seed", range(6))
def test_writes_byte_for_byte_what_the_library_writes(tmp_path, seed):
    rng = np.random.default_rng(100 + seed)
    tensors = _random_tensors(rng, [np.float16, np.float32, np.float64], 12)
    codes = {"float16": "F16", "float32": "F32", "float64": "F64"}
    ours = {k: (codes[v.dtype.name], v) for k, v in tensors.items()}
    metadata = {"format": "pt"}
    sf.write_file(tmp_path / "ours.safetensors", ours, metadata)
    assert (tmp_path / "ours.safetensors").read_bytes() == st_save(tensors, metadata=metadata)
    # The library keeps metadata in a hash map: with several keys their order varies, the
    # rest is the same.
    metadata = {"format": "pt", "gptcore_config": json.dumps({"n": seed}), "z": ""}
    sf.write_file(tmp_path / "ours.safetensors", ours, metadata)
    (h1, d1), (h2, d2) = _split((tmp_path / "ours.safetensors").read_bytes()), _split(st_save(tensors, metadata=metadata))
    assert h1[0][0] == h2[0][0] == "__metadata__" and dict(h1[0][1]) == dict(h2[0][1]) == metadata
    assert h1[1:] == h2[1:] and d1 == d2


def test_bf16_patterns_written_and_read_as_they_are(tmp_path):
    bits = np.arange(0, 65536, 97, dtype=np.uint32).astype(np.uint16).reshape(-1, 1)
    half = np.float16([1.5, -0.0, 65504.0])
    sf.write_file(tmp_path / "b.safetensors", {"b": ("BF16", bits), "h": ("F16", half.view(np.uint16))}, {})
    entries, _ = sf.read_header(tmp_path / "b.safetensors", "test")
    by_name = {e.name: e for e in entries}
    assert by_name["b"].dtype == "BF16" and by_name["h"].dtype == "F16"
    assert np.array_equal(sf.read_tensor(by_name["b"], "test"), bits)
    assert np.array_equal(sf.read_tensor(by_name["h"], "test").view(np.uint16), half.view(np.uint16))
    # the library sees the same header
    raw = (tmp_path / "b.safetensors").read_bytes()
    n = int.from_bytes(raw[:8], "little")
    assert json.loads(raw[8:8 + n])["b"] == {"dtype": "BF16", "shape": [bits.size, 1], "data_offsets": [0, 2 * bits.size]}
    h = {k: v for k, v in st_load(raw.replace(b'"BF16"', b'"U16" ', 1)).items()}  # the library's numpy reader lacks BF16
    assert np.array_equal(h["h"].view(np.uint16), half.view(np.uint16)) and np.array_equal(h["b"], bits)
    with pytest.raises(TypeError, match="uint16 bit patterns"):
        sf.write_file(tmp_path / "c.safetensors", {"b": ("BF16", np.ones(2, np.float32))}, {})


def _frame(header: dict, body: bytes) -> bytes:
    h = json.dumps(header).encode()
    return len(h).to_bytes(8, "little") + h + body


GOOD = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F16", "shape": [2], "data_offsets": [8, 12]}}


@pytest.mark.parametrize("label,data,words", [
    ("gap", _frame({**GOOD, "b": {"dtype": "F16", "shape": [2], "data_offsets": [10, 14]}}, bytes(14)), "starts at byte 10"),
    ("overlap", _frame({**GOOD, "b": {"dtype": "F16", "shape": [2], "data_offsets": [6, 10]}}, bytes(12)), "starts at byte 6"),
    ("trailing bytes", _frame(GOOD, bytes(13)), "12 bytes of the 13"),
    ("not at the start", _frame({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, bytes(8)), "starts at byte 4"),
    ("shape lies", _frame({**GOOD, "a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, bytes(12)), "needs 12"),
    ("negative dimension", _frame({**GOOD, "a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, bytes(12)), "shape"),
    ("float dimension", _frame({**GOOD, "a": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}}, bytes(12)), "shape"),
    ("unknown dtype", _frame({**GOOD, "a": {"dtype": "F128", "shape": [2], "data_offsets": [0, 8]}}, bytes(12)), "unknown dtype"),
    ("odd length", _frame({"b": {"dtype": "F16", "shape": [2], "data_offsets": [0, 3]}}, bytes(3)), "whole number"),
    ("backwards", _frame({"b": {"dtype": "F16", "shape": [0], "data_offsets": [4, 0]}}, bytes(4)), "backwards"),
    ("metadata not strings", _frame({"__metadata__": {"a": 1}, **GOOD}, bytes(12)), "__metadata__"),
    ("header not UTF-8", b"\x04\0\0\0\0\0\0\0\xff\xfe{}", "UTF-8"),
    ("short", b"\x04\0\0", "8-byte"),
])
def test_refuses_a_header_the_format_does_not_allow(tmp_path, label, data, words):
    p = _write(tmp_path, data)
    with pytest.raises(ValueError, match="not a readable safetensors file") as info:
        sf.read_header(p, "test")
    assert words in str(info.value) and str(p) in str(info.value), str(info.value)


def test_a_dtype_numpy_cannot_hold_is_a_type_error_naming_it(tmp_path):
    p = _write(tmp_path, _frame({"f8": {"dtype": "F8_E4M3", "shape": [4], "data_offsets": [0, 4]}}, bytes(4)))
    (entry,), _ = sf.read_header(p, "test")
    with pytest.raises(TypeError, match="'f8'.*F8_E4M3"):
        sf.read_tensor(entry, "test")
