"""Bad input to every op raises llaisys.LlaisysInputError (a ValueError) with the right status
and a message naming the op, and never writes a partial result."""

from __future__ import annotations

import numpy as np
import pytest

import llaisys
from llaisys import Status, ops

SHAPE, DTYPE, ARG, RANGE = Status.SHAPE_MISMATCH, Status.DTYPE_MISMATCH, Status.INVALID_ARGUMENT, Status.OUT_OF_RANGE


def t(*shape: int, dtype: str = "f32") -> llaisys.Tensor:
    """A zero-filled tensor (zeros so that no op below can trip over garbage values)."""
    arr = np.zeros(shape, dtype=np.float32)
    if dtype in ("i64", "i32"):
        arr = arr.astype(np.int64 if dtype == "i64" else np.int32)
    return llaisys.Tensor.from_numpy(arr, dtype=dtype)


def transposed(rows: int, cols: int, dtype: str = "f32") -> llaisys.Tensor:
    """A non-contiguous [rows, cols] view: the transpose of a [cols, rows] tensor."""
    return t(cols, rows, dtype=dtype).permute(1, 0)


def assert_input_error(call, status: Status, *fragments: str) -> llaisys.LlaisysInputError:
    with pytest.raises(llaisys.LlaisysInputError) as info:
        call()
    err = info.value
    assert isinstance(err, ValueError)
    assert err.status == status, str(err)
    assert err.message, "an error needs a message"
    for fragment in fragments:
        assert fragment in str(err), f"{fragment!r} not in {str(err)!r}"
    return err


# (op name, call, expected status, words the message must contain)
CASES = [
    # add / mul
    ("add", lambda: ops.add(t(2, 3), t(3, 2), t(2, 3)), SHAPE, ["add"]),
    ("add", lambda: ops.add(t(2, 3), t(2, 3), t(2, 3, dtype="f16")), DTYPE, ["add", "f16"]),
    ("add", lambda: ops.add(t(2, 3), transposed(2, 3), t(2, 3)), ARG, ["add", "contiguous"]),
    ("add", lambda: ops.add(t(2, 3, dtype="i32"), t(2, 3, dtype="i32"), t(2, 3, dtype="i32")), DTYPE, ["add"]),
    ("mul", lambda: ops.mul(t(4), t(4), t(5)), SHAPE, ["mul"]),
    ("mul", lambda: ops.mul(t(4, dtype="bf16"), t(4), t(4)), DTYPE, ["mul"]),
    ("mul", lambda: ops.mul(transposed(3, 2), t(3, 2), t(3, 2)), ARG, ["mul", "contiguous"]),
    # embedding
    ("embedding", lambda: ops.embedding(t(2, 4), t(2, dtype="i32"), t(5, 4)), DTYPE, ["embedding", "index"]),
    ("embedding", lambda: ops.embedding(t(2, 4), t(2, 1, dtype="i64"), t(5, 4)), SHAPE, ["embedding", "index"]),
    ("embedding", lambda: ops.embedding(t(2, 3), t(2, dtype="i64"), t(5, 4)), SHAPE, ["embedding", "out"]),
    ("embedding", lambda: ops.embedding(t(2, 4), t(2, dtype="i64"), t(20)), SHAPE, ["embedding", "weight"]),
    ("embedding", lambda: ops.embedding(t(2, 4), t(2, dtype="i64"), transposed(5, 4)), ARG, ["contiguous"]),
    ("embedding", lambda: ops.embedding(t(2, 4, dtype="i64"), t(2, dtype="i64"), t(5, 4)), DTYPE, ["embedding"]),
    # linear
    ("linear", lambda: ops.linear(t(2, 3), t(2, 4), t(3, 5)), SHAPE, ["linear", "inner"]),
    ("linear", lambda: ops.linear(t(2, 4), t(2, 4), t(3, 4)), SHAPE, ["linear", "out"]),
    ("linear", lambda: ops.linear(t(2, 3), t(2, 4), t(3, 4), t(4)), SHAPE, ["linear", "bias"]),
    ("linear", lambda: ops.linear(t(2, 3, dtype="f16"), t(2, 4), t(3, 4)), DTYPE, ["linear"]),
    ("linear", lambda: ops.linear(t(2, 3), t(2, 4), t(3, 4), t(3, dtype="bf16")), DTYPE, ["linear"]),
    ("linear", lambda: ops.linear(t(2, 3), t(2, 4), transposed(3, 4)), ARG, ["linear", "contiguous"]),
    ("linear", lambda: ops.linear(t(2, 3), t(1, 2, 4), t(3, 4)), SHAPE, ["linear", "in"]),
    # rms_norm
    ("rms_norm", lambda: ops.rms_norm(t(2, 4), t(2, 4), t(5), 1e-6), SHAPE, ["rms_norm", "weight"]),
    ("rms_norm", lambda: ops.rms_norm(t(2, 4), t(2, 4), t(4), 0.0), ARG, ["rms_norm", "eps"]),
    ("rms_norm", lambda: ops.rms_norm(t(2, 4), t(2, 4), t(4), -1e-6), ARG, ["rms_norm", "eps"]),
    ("rms_norm", lambda: ops.rms_norm(t(2, 4), t(2, 4), t(4), float("nan")), ARG, ["rms_norm", "eps"]),
    ("rms_norm", lambda: ops.rms_norm(t(2, 4), t(2, 4), t(4), float("inf")), ARG, ["rms_norm", "eps"]),
    ("rms_norm", lambda: ops.rms_norm(t(2, 4, dtype="bf16"), t(2, 4), t(4), 1e-6), DTYPE, ["rms_norm"]),
    ("rms_norm", lambda: ops.rms_norm(t(8), t(8), t(8), 1e-6), SHAPE, ["rms_norm"]),
    ("rms_norm", lambda: ops.rms_norm(t(2, 4), transposed(2, 4), t(4), 1e-6), ARG, ["contiguous"]),
    # add_rms_norm
    ("add_rms_norm", lambda: ops.add_rms_norm(t(2, 4), t(2, 4), t(2, 4), t(5), 1e-6), SHAPE, ["add_rms_norm", "weight"]),
    ("add_rms_norm", lambda: ops.add_rms_norm(t(2, 4), t(3, 4), t(2, 4), t(4), 1e-6), SHAPE, ["residual"]),
    ("add_rms_norm", lambda: ops.add_rms_norm(t(2, 4), t(2, 4), t(2, 4), t(4), 0.0), ARG, ["eps"]),
    ("add_rms_norm", lambda: ops.add_rms_norm(t(2, 4), t(2, 4, dtype="bf16"), t(2, 4), t(4), 1e-6), DTYPE, ["add_rms_norm"]),
    ("add_rms_norm", lambda: ops.add_rms_norm(t(2, 4), t(2, 4), transposed(2, 4), t(4), 1e-6), ARG, ["contiguous"]),
    ("add_rms_norm", lambda: (lambda a: ops.add_rms_norm(a, a, t(2, 4), t(4), 1e-6))(t(2, 4)), ARG, ["alias"]),
    # rope
    ("rope", lambda: ops.rope(t(2, 3, 5), t(2, 3, 5), t(2, dtype="i64"), 1e4), SHAPE, ["rope", "even"]),
    ("rope", lambda: ops.rope(t(2, 3, 4), t(2, 3, 4), t(2, dtype="i32"), 1e4), DTYPE, ["rope", "pos"]),
    ("rope", lambda: ops.rope(t(2, 3, 4), t(2, 3, 4), t(3, dtype="i64"), 1e4), SHAPE, ["rope", "pos"]),
    ("rope", lambda: ops.rope(t(2, 3, 4), t(2, 3, 4), t(2, dtype="i64"), 0.0), ARG, ["rope", "theta"]),
    ("rope", lambda: ops.rope(t(2, 3, 4), t(2, 3, 4), t(2, dtype="i64"), -5.0), ARG, ["rope", "theta"]),
    ("rope", lambda: ops.rope(t(2, 12), t(2, 12), t(2, dtype="i64"), 1e4), SHAPE, ["rope"]),
    ("rope", lambda: ops.rope(t(2, 3, 4), t(2, 3, 4, dtype="f16"), t(2, dtype="i64"), 1e4), DTYPE, ["rope"]),
    ("rope", lambda: ops.rope(t(3, 2, 4), t(2, 3, 4).permute(1, 0, 2), t(3, dtype="i64"), 1e4), ARG,
     ["contiguous"]),
    # self_attention
    ("self_attention", lambda: ops.self_attention(t(5, 2, 8), t(5, 2, 8), t(4, 2, 8), t(4, 2, 8), 0.5), SHAPE,
     ["self_attention", "exceeds"]),
    ("self_attention", lambda: ops.self_attention(t(1, 3, 8), t(1, 3, 8), t(4, 2, 8), t(4, 2, 8), 0.5), SHAPE,
     ["self_attention", "multiple"]),
    ("self_attention", lambda: ops.self_attention(t(1, 2, 8), t(1, 2, 8), t(4, 2, 6), t(4, 2, 8), 0.5), SHAPE,
     ["self_attention", "head dim"]),
    ("self_attention", lambda: ops.self_attention(t(1, 2, 8), t(1, 2, 8), t(4, 2, 8), t(3, 2, 8), 0.5), SHAPE,
     ["self_attention", "v"]),
    ("self_attention", lambda: ops.self_attention(t(1, 2, 4), t(1, 2, 8), t(4, 2, 8), t(4, 2, 8), 0.5), SHAPE,
     ["self_attention", "out"]),
    ("self_attention", lambda: ops.self_attention(t(1, 2, 8), t(1, 2, 8), t(4, 2, 8, dtype="f16"), t(4, 2, 8),
                                                  0.5), DTYPE, ["self_attention"]),
    ("self_attention", lambda: ops.self_attention(t(1, 2, 8), t(1, 2, 8), t(2, 4, 8).permute(1, 0, 2),
                                                  t(4, 2, 8), 0.5), ARG, ["self_attention", "contiguous"]),
    ("self_attention", lambda: ops.self_attention(t(1, 2, 8), t(1, 2, 8), t(4, 2, 8), t(4, 2, 8),
                                                  float("nan")), ARG, ["self_attention", "scale"]),
    ("self_attention", lambda: ops.self_attention(t(1, 16), t(1, 16), t(4, 16), t(4, 16), 0.5), SHAPE,
     ["self_attention"]),
    # swiglu
    ("swiglu", lambda: ops.swiglu(t(2, 3), t(2, 3), t(3, 2)), SHAPE, ["swiglu", "up"]),
    ("swiglu", lambda: ops.swiglu(t(2, 3), t(2, 3, dtype="f16"), t(2, 3)), DTYPE, ["swiglu"]),
    ("swiglu", lambda: ops.swiglu(t(2, 3), transposed(2, 3), t(2, 3)), ARG, ["swiglu", "contiguous"]),
    # argmax
    ("argmax", lambda: ops.argmax(t(2, dtype="i32"), t(2), t(2, 5)), DTYPE, ["argmax", "max_idx"]),
    ("argmax", lambda: ops.argmax(t(2, dtype="i64"), t(2, dtype="f16"), t(2, 5)), DTYPE, ["argmax"]),
    ("argmax", lambda: ops.argmax(t(3, dtype="i64"), t(3), t(2, 5)), SHAPE, ["argmax", "max_idx"]),
    ("argmax", lambda: ops.argmax(t(2, dtype="i64"), t(2), t(2, 3, 5)), SHAPE, ["argmax"]),
    ("argmax", lambda: ops.argmax(t(2, dtype="i64"), t(2), t(2, 0)), SHAPE, ["argmax", "empty"]),
    ("argmax", lambda: ops.argmax(t(2, dtype="i64"), t(2), transposed(2, 5)), ARG, ["argmax", "contiguous"]),
    # softmax
    ("softmax", lambda: ops.softmax(t(), t()), SHAPE, ["softmax"]),
    ("softmax", lambda: ops.softmax(t(2, 3), t(3, 2)), SHAPE, ["softmax"]),
    ("softmax", lambda: ops.softmax(t(2, 3, dtype="f16"), t(2, 3)), DTYPE, ["softmax"]),
    ("softmax", lambda: ops.softmax(t(2, 3), transposed(2, 3)), ARG, ["softmax", "contiguous"]),
]


@pytest.mark.parametrize("op,call,status,fragments", CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_bad_input_raises(op, call, status, fragments):
    assert_input_error(call, status, *fragments)


@pytest.mark.parametrize("bad", [5, -1, 2 ** 40])
def test_embedding_out_of_range_writes_nothing(bad):
    weight = llaisys.Tensor.from_numpy(np.arange(20, dtype=np.float32).reshape(5, 4))
    out = llaisys.Tensor.from_numpy(np.full((3, 4), -7.0, dtype=np.float32))
    index = llaisys.Tensor.from_numpy(np.array([0, 4, bad], dtype=np.int64))
    assert_input_error(lambda: ops.embedding(out, index, weight), RANGE, "embedding", str(bad))
    assert (out.numpy() == -7.0).all(), "a rejected embedding must not write a partial result"


def test_rope_negative_position_writes_nothing():
    out = llaisys.Tensor.from_numpy(np.full((3, 2, 4), 9.0, dtype=np.float32))
    x = llaisys.Tensor.from_numpy(np.ones((3, 2, 4), dtype=np.float32))
    pos = llaisys.Tensor.from_numpy(np.array([0, 1, -1], dtype=np.int64))
    assert_input_error(lambda: ops.rope(out, x, pos, 1e4), RANGE, "rope", "negative")
    assert (out.numpy() == 9.0).all()


def test_closed_tensor_is_rejected_in_python():
    a = t(2)
    a.close()
    with pytest.raises(ValueError, match="closed"):
        ops.add(t(2), a, t(2))

