"""Our safetensors reader/writer: round trips, interop with the official library, corrupt files."""

import json
import struct

import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch

from llaisys.models.safetensors_io import RawTensor, read_safetensors, write_safetensors


def _bf16_bits(t: torch.Tensor) -> np.ndarray:
    return t.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def _sample_tensors():
    rng = np.random.default_rng(0)
    f32 = rng.standard_normal((3, 5)).astype(np.float32)
    return [
        RawTensor("a.bf16", "bf16", (3, 5), _bf16_bits(torch.from_numpy(f32))),
        RawTensor("b.f16", "f16", (4,), rng.standard_normal(4).astype(np.float16)),
        RawTensor("c.f32", "f32", (2, 2, 2), rng.standard_normal((2, 2, 2)).astype(np.float32)),
        RawTensor("d.i64", "i64", (3,), np.array([1, -2, 3], np.int64)),
        RawTensor("e.empty", "f32", (0, 7), np.zeros((0, 7), np.float32)),
        RawTensor("f.scalar", "f64", (), np.array(2.5)),
        RawTensor("g.u8", "u8", (5,), np.arange(5, dtype=np.uint8)),
        RawTensor("h.bool", "bool", (2,), np.array([True, False])),
    ]


def test_round_trip_with_metadata(tmp_path):
    path = tmp_path / "x.safetensors"
    tensors = _sample_tensors()
    write_safetensors(path, tensors, metadata={"format": "pt", "note": "ünïcode"})
    f = read_safetensors(path)
    assert f.metadata == {"format": "pt", "note": "ünïcode"}
    assert list(f.tensors) == [t.name for t in tensors]  # offset order = write order
    for t in tensors:
        got = f.tensors[t.name]
        assert got.dtype == t.dtype and got.shape == t.shape
        assert got.data.dtype == t.data.dtype and np.array_equal(got.data, t.data)
    assert (8 + struct.unpack("<Q", path.read_bytes()[:8])[0]) % 8 == 0  # data region aligned


def test_reader_returns_read_only_zero_copy_views(tmp_path):
    path = tmp_path / "x.safetensors"
    write_safetensors(path, {t.name: t for t in _sample_tensors()})
    t = read_safetensors(path).tensors["c.f32"]
    assert not t.data.flags.owndata  # a view into the file's memory map, not a copy
    assert not t.data.flags.writeable
    with pytest.raises(ValueError):
        t.data[0, 0, 0] = 1.0


def test_official_library_reads_our_file(tmp_path):
    path = tmp_path / "ours.safetensors"
    write_safetensors(path, _sample_tensors(), metadata={"format": "pt"})
    loaded = safetensors.torch.load_file(str(path))
    for t in _sample_tensors():
        ref = loaded[t.name]
        if t.dtype == "bf16":
            assert ref.dtype == torch.bfloat16
            assert np.array_equal(ref.view(torch.int16).numpy().view(np.uint16), t.data)
        else:
            assert np.array_equal(ref.numpy(), t.data)
    with safetensors.safe_open(str(path), framework="pt") as f:
        assert f.metadata() == {"format": "pt"}


def test_we_read_official_library_files(tmp_path):
    path = tmp_path / "theirs.safetensors"
    g = torch.Generator().manual_seed(0)
    ref = {"w": torch.randn(7, 3, generator=g).to(torch.bfloat16), "h": torch.randn(5, generator=g).half(),
           "z": torch.randn(2, 4, generator=g), "i": torch.arange(6, dtype=torch.int32).reshape(2, 3)}
    safetensors.torch.save_file(ref, str(path), metadata={"k": "v"})
    f = read_safetensors(path)
    assert f.metadata == {"k": "v"}
    assert f.tensors["w"].dtype == "bf16" and np.array_equal(f.tensors["w"].data, _bf16_bits(ref["w"]))
    assert f.tensors["h"].dtype == "f16" and np.array_equal(f.tensors["h"].data, ref["h"].numpy())
    assert f.tensors["z"].dtype == "f32" and np.array_equal(f.tensors["z"].data, ref["z"].numpy())
    assert f.tensors["i"].dtype == "i32" and np.array_equal(f.tensors["i"].data, ref["i"].numpy())


def test_writer_rejects_bad_input(tmp_path):
    path = tmp_path / "x.safetensors"
    with pytest.raises(ValueError, match="uint16"):
        RawTensor("w", "bf16", (2,), np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="shape"):
        RawTensor("w", "f32", (3,), np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="unknown dtype"):
        RawTensor("w", "q4", (2,), np.zeros(2, np.uint8))
    t = RawTensor("w", "f32", (2,), np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="duplicate"):
        write_safetensors(path, [t, t])
    with pytest.raises(ValueError, match="__metadata__"):
        write_safetensors(path, [t], metadata={"n": 1})


# ---- corrupt files: every one must be a ValueError naming the file -------------------------------

def _file(tmp_path, header, data=b"", raw_header=None, length=None):
    blob = raw_header if raw_header is not None else json.dumps(header).encode()
    n = len(blob) if length is None else length
    path = tmp_path / "bad.safetensors"
    path.write_bytes(struct.pack("<Q", n) + blob + data)
    return path


def _entry(dtype="F32", shape=(2,), offsets=(0, 8)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


CORRUPT = {
    "bad json": dict(raw_header=b"{not json"),
    "not utf8": dict(raw_header=b'{"\xff": 1}'),
    "not an object": dict(header=[1, 2]),
    "unknown dtype": dict(header={"w": _entry(dtype="Q4")}, data=bytes(8)),
    "negative dim": dict(header={"w": _entry(shape=(-2,))}, data=bytes(8)),
    "shape mismatch": dict(header={"w": _entry(shape=(3,))}, data=bytes(8)),
    "range out of bounds": dict(header={"w": _entry(offsets=(0, 8))}, data=bytes(4)),
    "reversed range": dict(header={"w": _entry(offsets=(8, 0))}, data=bytes(8)),
    "overlap": dict(header={"a": _entry(), "b": _entry(offsets=(4, 12))}, data=bytes(12)),
    "missing field": dict(header={"w": {"dtype": "F32", "shape": [2]}}, data=bytes(8)),
    "shape not ints": dict(header={"w": _entry(shape=("2",))}, data=bytes(8)),
    "bad metadata": dict(header={"__metadata__": {"a": 1}}),
    "header longer than file": dict(header={}, length=1000),
    "absurd header length": dict(header={}, length=1 << 60),
    "duplicate names": dict(raw_header=b'{"w":' + json.dumps(_entry()).encode() + b',"w":'
                            + json.dumps(_entry()).encode() + b"}", data=bytes(8)),
}


@pytest.mark.parametrize("case", list(CORRUPT))
def test_corrupt_file_is_value_error(tmp_path, case):
    kw = dict(CORRUPT[case])
    path = _file(tmp_path, kw.pop("header", None), **kw)
    with pytest.raises(ValueError, match="bad.safetensors"):
        read_safetensors(path)


def test_truncated_files_are_value_errors(tmp_path):
    good = tmp_path / "good.safetensors"
    write_safetensors(good, _sample_tensors())
    blob = good.read_bytes()
    for cut in (0, 3, 8, 20, len(blob) - 1):
        bad = tmp_path / "bad.safetensors"
        bad.write_bytes(blob[:cut])
        with pytest.raises(ValueError, match="bad.safetensors"):
            read_safetensors(bad)


def test_missing_file_is_value_error(tmp_path):
    with pytest.raises(ValueError, match="nope.safetensors"):
        read_safetensors(tmp_path / "nope.safetensors")
