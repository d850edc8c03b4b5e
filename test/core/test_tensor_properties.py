"""Property tests: random chains of permute/slice agree with numpy, and view/reshape agree
with torch's rules (view succeeds exactly when torch.view does; values always match)."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import llaisys

SETTINGS = settings(max_examples=60, deadline=None)

shapes = st.lists(st.integers(0, 5), min_size=1, max_size=4).map(tuple)


def source(shape) -> tuple[llaisys.Tensor, np.ndarray]:
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    return llaisys.Tensor.from_numpy(a), a


def assert_same_layout(t: llaisys.Tensor, a: np.ndarray, base: llaisys.Tensor, base_a: np.ndarray) -> None:
    assert t.shape == a.shape
    np.testing.assert_array_equal(t.numpy(), a)
    if a.size:  # strides and offsets only mean something when there are elements
        assert t.strides == tuple(s // 4 for s in a.strides)
        offset = (a.__array_interface__["data"][0] - base_a.__array_interface__["data"][0]) // 4
        assert t.data_ptr() - base.data_ptr() == offset * 4
    assert t.is_contiguous() == a.flags["C_CONTIGUOUS"]


@SETTINGS
@given(shape=shapes, data=st.data())
def test_permute_and_slice_chains_match_numpy(shape, data):
    base, base_a = source(shape)
    t, a = base, base_a
    for _ in range(data.draw(st.integers(1, 4), label="steps")):
        if data.draw(st.booleans(), label="permute?"):
            order = data.draw(st.permutations(range(a.ndim)), label="order")
            t, a = t.permute(*order), a.transpose(order)
        else:
            dim = data.draw(st.integers(0, a.ndim - 1), label="dim")
            start = data.draw(st.integers(0, a.shape[dim]), label="start")
            end = data.draw(st.integers(start, a.shape[dim]), label="end")
            index = [slice(None)] * a.ndim
            index[dim] = slice(start, end)
            t, a = t.slice(dim, start, end), a[tuple(index)]
        assert_same_layout(t, a, base, base_a)
    c = t.contiguous()
    assert c.is_contiguous()
    np.testing.assert_array_equal(c.numpy(), a)


def factor_shape(data, n: int) -> tuple[int, ...]:
    """A random shape with n elements (up to 4 dims, 1s sprinkled in)."""
    if n == 0:
        dims = data.draw(st.lists(st.integers(0, 4), min_size=1, max_size=4), label="dims")
        pos = data.draw(st.integers(0, len(dims) - 1), label="zero at")
        dims[pos] = 0
        return tuple(dims)
    dims, rest = [], n
    while len(dims) < 3 and rest > 1:
        divisors = [d for d in range(1, rest + 1) if rest % d == 0]
        d = data.draw(st.sampled_from(divisors), label="factor")
        dims.append(d)
        rest //= d
    dims.append(rest)
    return tuple(data.draw(st.permutations(dims), label="new shape"))


@SETTINGS
@given(shape=shapes, data=st.data())
def test_view_and_reshape_follow_torch(shape, data):
    base, base_a = source(shape)
    order = data.draw(st.permutations(range(len(shape))), label="order")
    t, ref = base.permute(*order), torch.from_numpy(base_a).permute(*order)
    new_shape = factor_shape(data, ref.numel())
    try:
        ref_view = ref.view(new_shape)
    except RuntimeError:
        ref_view = None
    if ref_view is None:
        try:
            t.view(*new_shape)
        except llaisys.LlaisysInputError as e:
            assert e.status == llaisys.Status.SHAPE_MISMATCH
        else:
            raise AssertionError(f"view of {ref.shape}/{ref.stride()} as {new_shape} succeeded; torch refuses")
    else:
        v = t.view(*new_shape)
        assert v.shape == tuple(ref_view.shape)
        np.testing.assert_array_equal(v.numpy(), ref_view.numpy())
        if ref.numel():
            assert v.data_ptr() == t.data_ptr()
            big = [i for i, s in enumerate(new_shape) if s > 1]  # size-1 strides are arbitrary
            assert [v.strides[i] for i in big] == [ref_view.stride()[i] for i in big]
    r = t.reshape(*new_shape)
    np.testing.assert_array_equal(r.numpy(), ref.reshape(new_shape).numpy())
    assert (r.data_ptr() == t.data_ptr()) == (ref_view is not None) or ref.numel() == 0
