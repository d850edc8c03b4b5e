"""Tensors of the block-quantized dtypes: sizes, raw bytes in and out, whole-row views, the
errors malformed ones get (C ABI status + message, Python ValueError subclasses), floating ops
refusing them, the dequantize / quantize ops' argument checks, and embedding lookups in a
quantized table against dequantize-then-lookup."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
import torch

import llaisys
from llaisys import DataType, Status, ops
from llaisys.dtypes import block_bytes, block_size, is_quantized, quant_byte_shape
from llaisys.libllaisys import LIB, LlaisysError, LlaisysInputError
from quant_cases import FORMATS, NO_QUANTIZER, dequantize, random_blocks, reference_dequantize, sizes


def make(fmt: str, shape, seed: int = 0):
    """A tensor of `shape` with random blocks (sane scales), and its raw bytes."""
    rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    n_blocks = rows * shape[-1] // sizes(fmt)[0]
    raw = random_blocks(fmt, n_blocks, np.random.default_rng(seed)).reshape(quant_byte_shape(shape, fmt))
    return llaisys.Tensor.from_numpy(raw, fmt, shape=shape), raw


@pytest.mark.parametrize("fmt", FORMATS)
def test_sizes_and_raw_round_trip(fmt):
    bs, bb = sizes(fmt)
    assert (block_size(fmt), block_bytes(fmt)) == (bs, bb)
    assert LIB.llaisysDataTypeBlockSize(int(DataType[fmt.upper()])) == bs
    assert LIB.llaisysDataTypeBlockBytes(int(DataType[fmt.upper()])) == bb
    t, raw = make(fmt, (3, 2, 2 * bs))
    assert t.shape == (3, 2, 2 * bs) and t.strides == (4 * bs, 2 * bs, 1) and t.numel() == 12 * bs
    assert t.dtype == DataType[fmt.upper()] and is_quantized(t.dtype)
    back = t.numpy()
    assert back.dtype == np.uint8 and back.shape == (3, 2, 2 * bb) and back.tobytes() == raw.tobytes()
    flat = llaisys.Tensor.from_numpy(raw.reshape(-1), fmt, shape=(6, 2 * bs))  # any byte layout with a shape
    assert flat.numpy().tobytes() == raw.tobytes()
    inferred = llaisys.Tensor.from_numpy(raw, fmt)  # shape read from the bytes
    assert inferred.shape == t.shape
    empty = llaisys.Tensor((0, bs), fmt)
    assert empty.numpy().shape == (0, bb)


@pytest.mark.parametrize("fmt", ["q8_0", "q4_k"])
def test_whole_row_views(fmt):
    bs, bb = sizes(fmt)
    t, raw = make(fmt, (4, 3, 2 * bs), seed=1)
    rows = t.slice(0, 1, 3)
    assert rows.shape == (2, 3, 2 * bs) and rows.numpy().tobytes() == raw[1:3].tobytes()
    mid = t.slice(1, 1, 2)  # not contiguous: read and contiguous() copy whole rows
    assert not mid.is_contiguous() and mid.numpy().tobytes() == raw[:, 1:2].tobytes()
    assert mid.contiguous().numpy().tobytes() == raw[:, 1:2].tobytes()
    perm = t.permute(1, 0, 2)
    assert perm.numpy().tobytes() == raw.transpose(1, 0, 2).tobytes()
    assert t.view(12, 2 * bs).numpy().tobytes() == raw.tobytes()
    assert t.view(4 * 3 * 2 * bs).numpy().tobytes() == raw.tobytes()  # one long row: the same blocks
    assert perm.reshape(12, 2 * bs).numpy().tobytes() == raw.transpose(1, 0, 2).tobytes()
    dst = llaisys.Tensor((3, 4, 2 * bs), fmt)
    dst.copy_(perm)
    np.testing.assert_array_equal(dequantize(dst.numpy().reshape(12, -1), fmt, (12, 2 * bs)),
                                  reference_dequantize(raw.transpose(1, 0, 2).reshape(-1, bb), fmt).reshape(12, -1))


def status_of(fn) -> Status:
    with pytest.raises(LlaisysError) as e:
        fn()
    return Status(e.value.status)


@pytest.mark.parametrize("fmt", ["q4_0", "q5_1", "q6_k"])
def test_malformed_tensors(fmt):
    bs, bb = sizes(fmt)
    with pytest.raises(LlaisysInputError, match="last dim 33 .* not a multiple of its block size"):
        llaisys.Tensor((2, 33), fmt)
    with pytest.raises(ValueError, match="at least one dim"):
        llaisys.Tensor((), fmt)
    t, raw = make(fmt, (2, bs))
    assert status_of(lambda: t.slice(1, 0, bs // 2)) == Status.UNSUPPORTED  # inside a row
    assert status_of(lambda: t.permute(1, 0)) == Status.UNSUPPORTED
    assert status_of(lambda: t.view(4, bs // 2)) == Status.SHAPE_MISMATCH
    # wrong byte counts: the C ABI and Python
    buf = (ctypes.c_uint8 * (raw.nbytes + 1))()
    assert LIB.llaisysTensorLoad(t.handle, buf, raw.nbytes + 1) == Status.SHAPE_MISMATCH
    assert f"holds {raw.nbytes} bytes" in llaisys.libllaisys.last_error()
    assert LIB.llaisysTensorLoad(t.handle, buf, raw.nbytes - 1) == Status.SHAPE_MISMATCH
    assert LIB.llaisysTensorRead(t.handle, buf, raw.nbytes - 1) == Status.BUFFER_TOO_SMALL
    with pytest.raises(ValueError, match="do not hold"):
        llaisys.Tensor.from_numpy(raw[:, :-1], fmt, shape=(2, bs))
    with pytest.raises(ValueError, match="bytes per row"):
        llaisys.Tensor.from_numpy(raw[:, :-1], fmt)
    with pytest.raises(ValueError, match="raw bytes"):
        llaisys.Tensor.from_numpy(np.zeros((2, bs), np.float32), fmt)


def test_unknown_dtype_ids():
    out = ctypes.c_void_p()
    shape = (ctypes.c_size_t * 1)(32)
    for bad in (0, 10, 99, 100, 101, 104, 105, 109, 115, 120, 124, 128, 130, 150, -1):
        assert LIB.llaisysTensorCreate2(shape, 1, bad, 0, 0, ctypes.byref(out)) == Status.INVALID_ARGUMENT, bad
        assert out.value is None and f"dtype {bad}" in llaisys.libllaisys.last_error()
        assert LIB.llaisysDataTypeBlockSize(bad) == 0 and LIB.llaisysDataTypeBlockBytes(bad) == 0


def test_floating_ops_refuse_quantized_tensors():
    q, _ = make("q8_0", (2, 32))
    f = llaisys.Tensor.from_numpy(np.ones((2, 32), np.float32))
    idx = llaisys.Tensor.from_numpy(np.zeros(2, np.int64))
    calls = {
        "add": lambda: ops.add(f, q, q), "add out": lambda: ops.add(q, f, f), "mul": lambda: ops.mul(q, q, q),
        "softmax": lambda: ops.softmax(f, q), "rms_norm": lambda: ops.rms_norm(f, q, f.slice(0, 0, 1).view(32), 1e-6),
        "rms_norm weight": lambda: ops.rms_norm(f, f, q.view(64), 1e-6),
        "swiglu": lambda: ops.swiglu(f, q, f), "embedding out": lambda: ops.embedding(q, idx, f),
        "argmax": lambda: ops.argmax(llaisys.Tensor((2,), "i64"), llaisys.Tensor((2,), "f32"), q),
        "dequantize into quant": lambda: ops.dequantize(q, q), "quantize from quant": lambda: ops.quantize(q, q),
        "dequantize from float": lambda: ops.dequantize(f, f), "quantize into float": lambda: ops.quantize(f, f),
    }
    for name, call in calls.items():
        status = status_of(call)
        assert status in (Status.DTYPE_MISMATCH, Status.UNSUPPORTED), (name, status)
        assert llaisys.libllaisys.last_error(), name


def test_quantize_and_dequantize_argument_checks():
    q, raw = make("q4_0", (2, 64))
    assert status_of(lambda: ops.dequantize(llaisys.Tensor((2, 32), "f32"), q)) == Status.SHAPE_MISMATCH
    assert status_of(lambda: ops.dequantize(llaisys.Tensor((2, 64), "i32"), q)) == Status.DTYPE_MISMATCH
    assert status_of(lambda: ops.quantize(q, llaisys.Tensor((4, 32), "f32"))) == Status.SHAPE_MISMATCH
    bad = np.ones((2, 64), np.float32)
    for value in (np.nan, np.inf, -np.inf):
        bad[1, 40] = value
        with pytest.raises(ValueError, match=r"in\[1, 40\] = .* not finite"):
            ops.quantize(q, llaisys.Tensor.from_numpy(bad))
        assert q.numpy().tobytes() == raw.tobytes(), "a refused quantize writes nothing"
    bad16 = llaisys.Tensor.from_numpy(bad, "f16")
    with pytest.raises(ValueError, match="not finite"):
        ops.quantize(q, bad16)
    strided = llaisys.Tensor((64, 2), "f32").permute(1, 0)
    assert status_of(lambda: ops.quantize(q, strided)) == Status.INVALID_ARGUMENT
    for fmt in NO_QUANTIZER:  # run as files store them, with no quantizer
        qk, rawk = make(fmt, (2, 256))
        assert status_of(lambda: ops.quantize(qk, llaisys.Tensor.from_numpy(np.ones((2, 256), np.float32)))) \
            == Status.UNSUPPORTED
        assert qk.numpy().tobytes() == rawk.tobytes()


@pytest.mark.parametrize("out_dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_embedding_quantized_table(fmt, out_dtype):
    bs = sizes(fmt)[0]
    vocab, d = 50, 2 * bs
    table, raw = make(fmt, (vocab, d), seed=5)
    ids = np.array([3, 0, 49, 3, 17, 48], dtype=np.int64)
    out = llaisys.Tensor((len(ids), d), out_dtype)
    ops.embedding(out, llaisys.Tensor.from_numpy(ids), table)
    full = torch.from_numpy(reference_dequantize(raw, fmt).reshape(vocab, d))  # dequantize, then look up
    expected = full[torch.from_numpy(ids)].to({"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[out_dtype])
    got = torch.from_numpy(out.numpy(raw=True))
    want = expected.view(torch.int16).numpy().view(np.uint16) if out_dtype == "bf16" else expected.numpy()
    assert np.array_equal(got.numpy().view(np.uint8), np.ascontiguousarray(want).view(np.uint8))
    with pytest.raises(ValueError, match=r"index\[1\] = 50 is outside the vocabulary"):
        ops.embedding(out.slice(0, 0, 2), llaisys.Tensor.from_numpy(np.array([1, 50], np.int64)), table)
    with pytest.raises(ValueError):
        ops.embedding(out.slice(0, 0, 1), llaisys.Tensor.from_numpy(np.array([-1], np.int64)), table)


def test_debug_prints_dequantized_values(capfd):
    raw = np.zeros((1, 34), np.uint8)
    raw[0, :2] = np.array([1.0], np.float16).view(np.uint8)  # d = 1
    raw[0, 2:] = np.arange(-16, 16, dtype=np.int8).view(np.uint8)
    llaisys.Tensor.from_numpy(raw, "q8_0").debug(4)
    out = capfd.readouterr().out.splitlines()
    assert out[0] == "Tensor(shape=[1, 32], strides=[32, 1], dtype=q8_0, device=cpu:0)"
    assert out[1] == "-16 -15 -14 -13 ... (28 more)"
