"""View semantics against numpy: shapes, strides, shared storage, copies, lifetimes, and the
edge cases (0-d, zero-size), plus the debug print."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import llaisys
from llaisys import DataType, Status
from llaisys.dtypes import is_quantized


def arange(*shape: int, dtype=np.float32) -> tuple[llaisys.Tensor, np.ndarray]:
    a = np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
    return llaisys.Tensor.from_numpy(a), a


def np_strides(a: np.ndarray) -> tuple[int, ...]:
    return tuple(s // a.itemsize for s in a.strides)


def elem_offset(view: llaisys.Tensor, base: llaisys.Tensor) -> int:
    return (view.data_ptr() - base.data_ptr()) // 4


def assert_input_error(call, status: Status, *fragments: str) -> None:
    with pytest.raises(llaisys.LlaisysInputError) as info:
        call()
    assert info.value.status == status, str(info.value)
    for f in fragments:
        assert f in str(info.value)


# ------------------------------------------------------------------------------------------
# view, permute, slice


def test_view_shares_storage():
    t, a = arange(2, 3, 4)
    v = t.view(6, 4)
    assert v.shape == (6, 4) and v.strides == (4, 1) and v.is_contiguous()
    assert v.data_ptr() == t.data_ptr()
    np.testing.assert_array_equal(v.numpy(), a.reshape(6, 4))
    v.slice(0, 5, 6).load(np.full((1, 4), -1, dtype=np.float32))  # write through the view
    assert (t.numpy()[1, 2] == -1).all()
    s = t.view(24)
    assert s.shape == (24,) and s.strides == (1,)
    assert t.view(1, 24, 1).strides == (24, 1, 1)


def test_view_errors():
    t, _ = arange(2, 3, 4)
    assert_input_error(lambda: t.view(5, 5), Status.SHAPE_MISMATCH, "element counts")
    p = t.permute(2, 0, 1)
    assert_input_error(lambda: p.view(24), Status.SHAPE_MISMATCH, "reshape")


@pytest.mark.parametrize("order", [(1, 0, 2), (2, 0, 1), (0, 1, 2), (2, 1, 0)])
def test_permute_matches_numpy(order):
    t, a = arange(2, 3, 4)
    p = t.permute(*order)
    ref = a.transpose(order)
    assert p.shape == ref.shape and p.strides == np_strides(ref)
    assert p.is_contiguous() == (order == (0, 1, 2))
    assert p.data_ptr() == t.data_ptr()
    np.testing.assert_array_equal(p.numpy(), ref)


def test_permute_errors():
    t, _ = arange(2, 3)
    assert_input_error(lambda: t.permute(0, 0), Status.INVALID_ARGUMENT, "permutation")
    assert_input_error(lambda: t.permute(0, 2), Status.INVALID_ARGUMENT, "permutation")
    assert_input_error(lambda: t.permute(0), Status.SHAPE_MISMATCH, "permute")
    with pytest.raises(ValueError):
        t.permute(-1, 0)


@pytest.mark.parametrize("dim,start,end", [(0, 1, 2), (1, 1, 3), (2, 0, 4), (2, 3, 4), (1, 2, 2), (0, 0, 0)])
def test_slice_matches_numpy(dim, start, end):
    t, a = arange(2, 3, 4)
    s = t.slice(dim, start, end)
    index = [slice(None)] * 3
    index[dim] = slice(start, end)
    ref = a[tuple(index)]
    assert s.shape == ref.shape and s.strides == np_strides(ref)
    np.testing.assert_array_equal(s.numpy(), ref)
    if ref.size:
        assert elem_offset(s, t) == (ref.__array_interface__["data"][0] - a.__array_interface__["data"][0]) // 4


def test_slice_errors():
    t, _ = arange(2, 3)
    assert_input_error(lambda: t.slice(1, 2, 5), Status.OUT_OF_RANGE, "slice")
    assert_input_error(lambda: t.slice(1, 2, 1), Status.OUT_OF_RANGE, "slice")
    assert_input_error(lambda: t.slice(2, 0, 1), Status.OUT_OF_RANGE, "dim")
    with pytest.raises(ValueError):
        t.slice(0, -1, 1)


def test_writes_through_strided_views_are_seen_by_the_source():
    t, a = arange(4, 5)
    col = t.slice(1, 2, 3).permute(1, 0)  # [1, 4], stride 5
    col.load(np.array([[100, 101, 102, 103]], dtype=np.float32))
    a[:, 2] = [100, 101, 102, 103]
    np.testing.assert_array_equal(t.numpy(), a)
    # an op writing into a contiguous row slice
    row = t.slice(0, 3, 4)
    llaisys.ops.add(row, row, row)
    a[3] *= 2
    np.testing.assert_array_equal(t.numpy(), a)


# ------------------------------------------------------------------------------------------
# reshape, contiguous, copy_


def test_reshape_is_a_view_when_possible():
    t, a = arange(2, 3, 4)
    r = t.reshape(4, 6)
    assert r.data_ptr() == t.data_ptr()
    np.testing.assert_array_equal(r.numpy(), a.reshape(4, 6))
    # permuted, but the merged dims stay adjacent in memory: still a view
    p = t.permute(1, 0, 2)  # [3, 2, 4]
    r2 = p.reshape(3, 2, 2, 2)
    assert r2.data_ptr() == t.data_ptr()
    np.testing.assert_array_equal(r2.numpy(), a.transpose(1, 0, 2).reshape(3, 2, 2, 2))


def test_reshape_copies_when_it_must():
    t, a = arange(2, 3, 4)
    p = t.permute(2, 1, 0)
    r = p.reshape(24)
    ref = a.transpose(2, 1, 0).reshape(24)
    np.testing.assert_array_equal(r.numpy(), ref)
    assert r.is_contiguous() and r.strides == (1,)
    r.load(np.zeros(24, dtype=np.float32))  # the copy is independent of the source
    np.testing.assert_array_equal(t.numpy(), a)
    assert_input_error(lambda: p.reshape(5), Status.SHAPE_MISMATCH, "element counts")


def test_contiguous():
    t, a = arange(3, 4)
    same = t.contiguous()
    assert same.data_ptr() == t.data_ptr()
    c = t.permute(1, 0).contiguous()
    assert c.is_contiguous() and c.strides == (3, 1) and c.data_ptr() != t.data_ptr()
    np.testing.assert_array_equal(c.numpy(), a.T)


def test_copy_between_strided_tensors():
    dst_base, _ = arange(4, 3)
    dst = dst_base.permute(1, 0)  # [3, 4] with strides (1, 3)
    src_base, b = arange(3, 8)
    src = src_base.slice(1, 2, 6)  # [3, 4] with strides (8, 1)
    dst.copy_(src)
    np.testing.assert_array_equal(dst.numpy(), b[:, 2:6])
    np.testing.assert_array_equal(dst_base.numpy(), b[:, 2:6].T)
    assert_input_error(lambda: dst.copy_(src_base), Status.SHAPE_MISMATCH, "copy")
    other = llaisys.Tensor((3, 4), "f16")
    assert_input_error(lambda: other.copy_(src), Status.DTYPE_MISMATCH, "copy")


def test_copy_into_self_overlap_free_views():
    t, a = arange(2, 6)
    t.slice(1, 0, 3).copy_(t.slice(1, 3, 6))
    a[:, 0:3] = a[:, 3:6]
    np.testing.assert_array_equal(t.numpy(), a)


# ------------------------------------------------------------------------------------------
# lifetimes


def test_views_outlive_their_source_handle():
    t, a = arange(3, 4)
    v = t.permute(1, 0)
    s = v.slice(0, 1, 3)
    ptr = t.data_ptr()
    t.close()
    with pytest.raises(ValueError, match="closed"):
        t.numpy()
    gc.collect()
    np.testing.assert_array_equal(v.numpy(), a.T)
    v.close()
    np.testing.assert_array_equal(s.numpy(), a.T[1:3])
    assert s.data_ptr() == ptr + 4
    assert repr(t) == "Tensor(closed)"


def test_storage_is_released_with_the_last_handle(quiet_gc):
    before = llaisys.runtime.memory_stats().allocated
    t = llaisys.Tensor((256, 256), "f32")
    assert llaisys.runtime.memory_stats().allocated >= before + 256 * 256 * 4
    v = t.view(65536)
    with t:
        pass  # closes t
    assert llaisys.runtime.memory_stats().allocated >= before + 256 * 256 * 4
    v.close()
    assert llaisys.runtime.memory_stats().allocated == before
    v.close()  # closing twice is harmless


# ------------------------------------------------------------------------------------------
# scalars, zero-size tensors, queries, debug


def test_scalar_tensor():
    t = llaisys.Tensor.from_numpy(np.array(2.5, dtype=np.float32))
    assert t.shape == () and t.strides == () and t.ndim == 0 and t.numel() == 1 and t.is_contiguous()
    assert t.numpy().shape == () and t.numpy() == 2.5
    v = t.view(1, 1)
    assert v.shape == (1, 1) and v.numpy()[0, 0] == 2.5
    assert v.view().shape == () and v.reshape().numpy() == 2.5
    assert t.permute().shape == ()
    out = llaisys.Tensor((), "f32")
    llaisys.ops.add(out, t, t)
    assert out.numpy() == 5.0
    bf = llaisys.Tensor.from_numpy(np.array(1.5, dtype=np.float32), dtype="bf16")
    assert bf.numpy().shape == () and bf.numpy() == 1.5


def test_zero_size_tensors():
    t = llaisys.Tensor((2, 0, 3), "f32")
    assert t.numel() == 0 and t.shape == (2, 0, 3) and t.strides == (0, 3, 1)
    assert t.numpy().shape == (2, 0, 3)
    assert t.view(0, 5).shape == (0, 5)
    assert t.reshape(3, 0).shape == (3, 0)
    p = t.permute(2, 0, 1)
    assert p.shape == (3, 2, 0) and p.contiguous().numel() == 0
    assert p.is_contiguous(), "a tensor without elements is contiguous whatever its strides (as in torch)"
    llaisys.ops.add(p, p, llaisys.Tensor((3, 2, 0), "f32"))
    assert t.slice(0, 1, 2).shape == (1, 0, 3)
    assert t.slice(2, 1, 3).shape == (2, 0, 2)
    t.copy_(llaisys.Tensor((2, 0, 3), "f32"))
    t.load(np.zeros((2, 0, 3), dtype=np.float32))
    empty_rows = llaisys.Tensor((0, 4), "f32")
    llaisys.ops.add(empty_rows, empty_rows, empty_rows)
    llaisys.ops.softmax(empty_rows, empty_rows)


@pytest.mark.parametrize("dtype", [d for d in DataType if d != DataType.INVALID and not is_quantized(d)],
                         ids=lambda d: d.name.lower())  # quantized: test/ops/test_quant_tensors.py
def test_queries(dtype):
    t = llaisys.Tensor((2, 3, 5), dtype)
    assert t.shape == (2, 3, 5) and t.strides == (15, 5, 1) and t.ndim == 3 and t.numel() == 30
    assert t.dtype == dtype and t.device == llaisys.DeviceType.CPU and t.device_id == 0
    assert t.data_ptr() % 64 == 0, "storage is cache-line aligned"
    assert f"dtype={dtype.name.lower()}" in repr(t)


def test_debug_print(capfd):
    t = llaisys.Tensor.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
    t.debug(0)
    out = capfd.readouterr().out.splitlines()
    assert out[0] == "Tensor(shape=[2, 3], strides=[3, 1], dtype=f32, device=cpu:0)"
    assert out[1] == "0 1 2 3 4 5"
    t.permute(1, 0).debug(4)
    out = capfd.readouterr().out.splitlines()
    assert out[0] == "Tensor(shape=[3, 2], strides=[1, 3], dtype=f32, device=cpu:0)"
    assert out[1] == "0 3 1 4 ... (2 more)"
    llaisys.Tensor.from_numpy(np.array([1.5, -2], dtype=np.float32), dtype="bf16").debug()
    out = capfd.readouterr().out.splitlines()
    assert "dtype=bf16" in out[0] and out[1] == "1.5 -2"
    llaisys.Tensor((0, 2), "i64").debug()
    out = capfd.readouterr().out.splitlines()
    assert out[0].startswith("Tensor(shape=[0, 2]") and out[1] == ""
