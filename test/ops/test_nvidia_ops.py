"""Every op on the NVIDIA device against a torch reference computed on the CPU, in f32, f16 and
bf16, with the tolerances of the CPU tests (conftest.TOLERANCES); attention is in
test_nvidia_attention.py.

Inputs are made in torch in the target dtype and copied to the GPU bit for bit; results come
back through numpy; references are float64 (rope: float32, as transformers) on the CPU, so
the same file runs on a machine whose torch has no CUDA. Skipped as a whole where this build
or machine has no NVIDIA GPU.
"""

from __future__ import annotations

import math
import os

import pytest
import torch

import llaisys
from llaisys import Status, ops
from llaisys import runtime as rt

from nvidia_tensors import NV, bits, gpu, gpu_empty, gpu_full
from test_op_reference import SPECIALS, rope_ref

pytestmark = pytest.mark.skipif(rt.device_count(NV) == 0, reason="no NVIDIA GPU in this build/machine")


# ------------------------------------------------------------------------------------------
# elementwise


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 33), (2, 5, 4097), (1 << 20,)])
@pytest.mark.parametrize("name", ["add", "mul"])
def test_add_mul(bridge, name, dtype, shape):
    a, b = bridge.randn(shape, dtype, 3.0), bridge.randn(shape, dtype, 3.0)
    out = gpu_empty(shape, dtype)
    getattr(ops, name)(out, gpu(a), gpu(b))
    expected = a.double() + b.double() if name == "add" else a.double() * b.double()
    bridge.assert_close(out, expected, dtype, scale=10.0)


@pytest.mark.parametrize("name", ["add", "mul"])
@pytest.mark.parametrize("half", ["f16", "bf16"])
def test_add_mul_round_like_torch(bridge, name, half):
    """Bit-identical to torch's f32-then-round results, specials included (as on the CPU)."""
    specials = torch.tensor(SPECIALS[half], dtype=torch.float64).to(bridge.torch_dtype(half))
    a = torch.cat([specials.repeat_interleave(len(specials)), bridge.randn((999,), half, 100.0)])
    b = torch.cat([specials.repeat(len(specials)), bridge.randn((999,), half, 0.01)])
    out = gpu_empty(a.shape, half)
    getattr(ops, name)(out, gpu(a), gpu(b))
    expected = a + b if name == "add" else a * b
    want = expected.view(torch.int16).to(torch.int32) & 0xFFFF
    nan = torch.isnan(expected)
    assert torch.isnan(bridge.to_torch(out)).equal(nan)
    mismatch = (bits(out) != want) & ~nan
    assert not mismatch.any(), f"{int(mismatch.sum())} results differ, first at {int(mismatch.nonzero()[0])}"


@pytest.mark.parametrize("half", ["f16", "bf16"])
def test_every_16bit_pattern_survives_a_kernel(bridge, half):
    """x * 1 reproduces every non-NaN pattern (no flush-to-zero on the GPU either)."""
    x = torch.arange(2 ** 16, dtype=torch.int32).to(torch.int16).view(bridge.torch_dtype(half))
    out = gpu_empty(x.shape, half)
    ops.mul(out, gpu(x), gpu(torch.ones_like(x)))
    nan = torch.isnan(x)
    assert torch.isnan(bridge.to_torch(out)).equal(nan)
    assert bits(out)[~nan].equal(torch.arange(2 ** 16, dtype=torch.int32)[~nan])


def test_add_mul_in_place(bridge, dtype):
    a, b = bridge.randn((5, 9), dtype), bridge.randn((5, 9), dtype)
    ta, tb = gpu(a), gpu(b)
    ops.add(ta, ta, tb)
    bridge.assert_close(ta, a.double() + b.double(), dtype, scale=4.0)


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 33), (4, 4097), (3, 700001)])
def test_swiglu(bridge, dtype, shape):
    gate, up = bridge.randn(shape, dtype, 3.0), bridge.randn(shape, dtype, 2.0)
    out = gpu_empty(shape, dtype)
    ops.swiglu(out, gpu(gate), gpu(up))
    g = gate.double()
    bridge.assert_close(out, up.double() * g * torch.sigmoid(g), dtype, scale=4.0)


# ------------------------------------------------------------------------------------------
# embedding, rms_norm


@pytest.mark.parametrize("n,vocab,d", [(1, 1, 1), (7, 33, 64), (33, 151, 7), (64, 100, 896), (70000, 5, 3)])
def test_embedding(bridge, dtype, weight_dtype, n, vocab, d):
    """Rows come back exactly (converted exactly or rounded once when the dtypes differ);
    n = 70000 rows takes more rows than blocks."""
    weight = bridge.randn((vocab, d), weight_dtype)
    index = bridge.randint((n,), 0, vocab)
    index[0] = vocab - 1
    out = gpu_empty((n, d), dtype)
    ops.embedding(out, gpu(index), gpu(weight))
    want = weight[index].to(bridge.torch_dtype(dtype)).float()
    torch.testing.assert_close(bridge.to_torch(out), want, atol=0, rtol=0)


@pytest.mark.parametrize("m,d,eps", [(1, 1, 1e-6), (1, 7, 1e-5), (5, 33, 1e-6), (17, 4097, 1e-6), (3, 896, 1.0),
                                     (70000, 8, 1e-6)])
def test_rms_norm(bridge, dtype, m, d, eps):
    x, w = bridge.randn((m, d), dtype, 2.0), bridge.randn((d,), dtype)
    out = gpu_empty((m, d), dtype)
    ops.rms_norm(out, gpu(x), gpu(w), eps)
    xd = x.double()
    bridge.assert_close(out, xd / torch.sqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * w.double(), dtype, scale=4.0)


def test_rms_norm_in_place_and_mixed_weight(bridge, weight_dtype):
    x, w = bridge.randn((4, 1536), "f32"), bridge.randn((1536,), weight_dtype)
    t = gpu(x)
    ops.rms_norm(t, t, gpu(w), 1e-6)
    xd = x.double()
    bridge.assert_close(t, xd / torch.sqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double(), "f32", scale=4.0)


@pytest.mark.parametrize("m,d,eps", [(1, 1, 1e-6), (5, 33, 1e-6), (17, 4097, 1e-6), (3, 896, 1.0)])
def test_add_rms_norm(bridge, dtype, weight_dtype, m, d, eps):
    r, x, w = bridge.randn((m, d), dtype, 2.0), bridge.randn((m, d), dtype), bridge.randn((d,), weight_dtype)
    res, out = gpu(r), gpu_empty((m, d), dtype)
    ops.add_rms_norm(out, res, gpu(x), gpu(w), eps)
    summed = (r.double() + x.double()).to(r.dtype)  # what a separate add stores: exact
    torch.testing.assert_close(bridge.to_torch(res), summed.float(), atol=0, rtol=0)
    sd = summed.double()
    bridge.assert_close(out, sd / torch.sqrt(sd.pow(2).mean(-1, keepdim=True) + eps) * w.double(), dtype, scale=4.0)


# ------------------------------------------------------------------------------------------
# linear (cuBLAS)

LINEAR_SHAPES = [(1, 1, 1), (2, 7, 3), (1, 4097, 7), (7, 33, 5), (33, 64, 129), (3, 896, 14), (77, 1536, 257)]


@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("m,k,n", LINEAR_SHAPES)
def test_linear(bridge, dtype, bias, m, k, n):
    x, w = bridge.uniform((m, k), dtype), bridge.uniform((n, k), dtype)
    b = bridge.uniform((n,), dtype) if bias else None
    out = gpu_empty((m, n), dtype)
    ops.linear(out, gpu(x), gpu(w), gpu(b) if bias else None)
    expected = x.double() @ w.double().T + (b.double() if bias else 0.0)
    # f32 must not run on TF32 (10-bit mantissa): its tolerance would fail by ~1000x
    bridge.assert_close(out, expected, dtype, scale=math.sqrt(k))


@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("m,k,n", LINEAR_SHAPES)
def test_linear_f32_activations_16bit_weights(bridge, weight_dtype, bias, m, k, n):
    """The model's case: f32 activations x bf16/f16 weights. cuBLAS rounds the activations to
    the weight dtype (tensor cores), so the reference does too; the decode GEMV (gemv16) takes
    them as they are. The product is f32 either way."""
    x, w = bridge.uniform((m, k), "f32"), bridge.uniform((n, k), weight_dtype)
    b = bridge.uniform((n,), weight_dtype) if bias else None
    out = gpu_empty((m, n), "f32")
    ops.linear(out, gpu(x), gpu(w), gpu(b) if bias else None)
    xr = x.double() if gemv16_serves(m, k) else x.to(bridge.torch_dtype(weight_dtype)).double()
    expected = xr @ w.double().T + (b.double() if bias else 0.0)
    bridge.assert_close(out, expected, "f32", scale=math.sqrt(k))


def gemv16_serves(m: int, k: int) -> bool:
    """Whether the decode GEMV runs a linear of f32 activations over 16-bit weights (gemv16_nvidia.hpp)."""
    return 1 <= m <= 8 and k % 8 == 0 and os.environ.get("LLAISYS_CUDA_GEMV") != "0"


@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("m", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("k,n", [(8, 1), (64, 3), (1536, 257), (2056, 2), (8960, 33), (1024, 2049)])
def test_gemv16(bridge, weight_dtype, bias, m, k, n):
    """The decode GEMV: every row count up to 8 (a template of 1, 2, 4 or 8 rows with the rest
    masked), k short of, equal to and past its 1024-element unrolled step, an odd row count
    (a warp's second row past the end). Exact f32 products of unrounded activations, so the
    bound is f32 summation's; the output is poisoned first, so an unwritten element fails."""
    x, w = bridge.uniform((m, k), "f32"), bridge.uniform((n, k), weight_dtype)
    b = bridge.uniform((n,), weight_dtype) if bias else None
    out = gpu_full((m, n), "f32", float("nan"))
    ops.linear(out, gpu(x), gpu(w), gpu(b) if bias else None)
    expected = x.double() @ w.double().T + (b.double() if bias else 0.0)
    bridge.assert_close(out, expected, "f32", scale=math.sqrt(k))


@pytest.mark.parametrize("act,wdt", [("bf16", "f32"), ("f16", "f32"), ("bf16", "f16"), ("f16", "bf16")])
def test_linear_16bit_activations_other_weights(bridge, act, wdt):
    """Both operands widened to f32 (exact products, as on the CPU), rounded once to act."""
    x, w, b = bridge.uniform((9, 300), act), bridge.uniform((17, 300), wdt), bridge.uniform((17,), wdt)
    out = gpu_empty((9, 17), act)
    ops.linear(out, gpu(x), gpu(w), gpu(b))
    bridge.assert_close(out, x.double() @ w.double().T + b.double(), act, scale=math.sqrt(300))


def test_linear_empty_inner_dimension_is_the_bias(bridge, dtype):
    b = bridge.uniform((5,), dtype)
    out = gpu_full((3, 5), dtype, float("nan"))
    ops.linear(out, gpu_empty((3, 0), dtype), gpu_empty((5, 0), dtype), gpu(b))
    torch.testing.assert_close(bridge.to_torch(out), b.float().expand(3, 5), atol=0, rtol=0)


# ------------------------------------------------------------------------------------------
# rope, argmax, softmax


@pytest.mark.parametrize("n,heads,d,theta", [(1, 1, 2, 10000.0), (5, 3, 64, 10000.0), (7, 14, 128, 1e6),
                                              (9, 2, 6, 500.0), (300, 2, 128, 1e6)])
def test_rope(bridge, dtype, n, heads, d, theta):
    x = bridge.randn((n, heads, d), dtype)
    pos = bridge.randint((n,), 0, 4096)
    pos[0] = 0
    out = gpu_empty((n, heads, d), dtype)
    ops.rope(out, gpu(x), gpu(pos), theta)
    bridge.assert_close(out, rope_ref(x, pos, theta), dtype, scale=25.0 if dtype == "f32" else 1.0)


def test_rope_in_place_matches_out_of_place(bridge, dtype):
    x = bridge.randn((6, 4, 16), dtype)
    pos = torch.arange(6) * 7
    ref = gpu_empty((6, 4, 16), dtype)
    ops.rope(ref, gpu(x), gpu(pos), 10000.0)
    t = gpu(x)
    ops.rope(t, t, gpu(pos), 10000.0)
    assert (bridge.to_torch(t) == bridge.to_torch(ref)).all()


@pytest.mark.parametrize("shape", [(1,), (7,), (1, 1), (5, 33), (3, 4097), (40, 2000), (2, 151936), (70000, 3)])
def test_argmax_first_max(bridge, dtype, shape):
    vals = bridge.randint(shape, -4, 5).to(bridge.torch_dtype(dtype))  # many ties
    rows = 1 if len(shape) == 1 else shape[0]
    idx, val = gpu_empty((rows,), "i64"), gpu_empty((rows,), dtype)
    ops.argmax(idx, val, gpu(vals))
    v2 = vals.reshape(rows, -1).float()
    assert bridge.to_torch(idx).equal(torch.argmax(v2, dim=-1))
    assert bridge.to_torch(val).equal(v2.max(-1).values)


def test_argmax_nan_inf_and_negative_rows(bridge, dtype):
    vals = bridge.randn((6, 3001), dtype)
    vals[2, 1700] = float("nan")
    vals[2, 40] = float("nan")
    vals[3, 2999] = float("inf")
    vals[3, 9] = float("inf")
    vals[4] = float("-inf")  # every element the same: index 0
    vals[5] = -vals[5].abs() - 1  # all negative
    idx, val = gpu_empty((6,), "i64"), gpu_empty((6,), dtype)
    ops.argmax(idx, val, gpu(vals))
    got = bridge.to_torch(idx)
    assert got.tolist() == torch.argmax(vals.float(), dim=-1).tolist()
    assert got[2] == 40 and got[3] == 9 and got[4] == 0
    assert math.isnan(bridge.to_torch(val)[2]) and bridge.to_torch(val)[3] == float("inf")


@pytest.mark.parametrize("shape,scale", [((1,), 1.0), ((7,), 1.0), ((5, 33), 10.0), ((2, 3, 4097), 30.0),
                                         ((1, 151), 300.0), ((2, 151936), 5.0), ((70000, 3), 1.0)])
def test_softmax(bridge, dtype, shape, scale):
    x = bridge.randn(shape, dtype, scale)
    out = gpu_empty(shape, dtype)
    ops.softmax(out, gpu(x))
    # a 151936-long row sums that many f32 terms (the block reduction keeps it near 1e-6)
    bridge.assert_close(out, torch.softmax(x.double(), dim=-1), dtype, scale=0.1,
                        rtol_factor=3.0 if shape[-1] > 100000 else 1.0)


def test_softmax_masked_and_in_place(bridge, dtype):
    x = bridge.randn((4, 10), dtype)
    x[0, 3:] = float("-inf")
    x[1, 0] = 1000.0 if dtype != "f16" else 60000.0
    x[3] = float("-inf")  # nothing left: NaN, as on the CPU and in torch
    t = gpu(x)
    ops.softmax(t, t)
    bridge.assert_close(t, torch.softmax(x.double(), dim=-1), dtype, scale=0.1)


# ------------------------------------------------------------------------------------------
# errors


def test_mixed_devices_are_rejected(bridge):
    a = bridge.randn((4,), "f32")
    with pytest.raises(llaisys.LlaisysError) as info:
        ops.add(gpu_empty((4,), "f32"), bridge.to_llaisys(a), gpu(a))
    assert info.value.status == Status.DEVICE_MISMATCH
    assert "different devices" in str(info.value)


def test_embedding_index_out_of_range_writes_nothing(bridge):
    weight = bridge.randn((10, 8), "f32")
    out = gpu_full((3, 8), "f32", 7.0)
    with pytest.raises(llaisys.LlaisysError) as info:
        ops.embedding(out, gpu(torch.tensor([1, 10, 2])), gpu(weight))
    assert info.value.status == Status.OUT_OF_RANGE and "index[1] = 10" in str(info.value)
    with pytest.raises(llaisys.LlaisysError):
        ops.embedding(out, gpu(torch.tensor([-1, 0, 2])), gpu(weight))
    assert (out.numpy() == 7.0).all()


def test_rope_negative_position_is_rejected(bridge):
    with pytest.raises(llaisys.LlaisysError) as info:
        t = gpu(bridge.randn((2, 1, 4), "f32"))
        ops.rope(t, t, gpu(torch.tensor([0, -3])), 10000.0)
    assert info.value.status == Status.OUT_OF_RANGE and "negative" in str(info.value)


# ------------------------------------------------------------------------------------------
# the general decoder's ops (issue 17): RoPE tables, per-head RMSNorm (its sliding window: test_nvidia_attention.py)


@pytest.mark.parametrize("scaling,fields", [
    ("linear", dict(scaling=1, factor=4.0)),
    ("llama3", dict(theta=500000.0, scaling=2, factor=8.0, original_max_position=8192)),
    ("yarn", dict(theta=1000000.0, scaling=3, factor=4.0, original_max_position=32768)),
])
def test_rope_table(bridge, dtype, scaling, fields):
    d, n, heads = 128, 19, 3
    inv_freq, attn_scale = ops.rope_frequencies(d, **fields)
    x = bridge.randn((n, heads, d), dtype)
    pos = bridge.randint((n,), 0, 60000)
    out, ref = gpu_empty((n, heads, d), dtype), bridge.empty((n, heads, d), dtype)
    ops.rope_table(out, gpu(x), gpu(pos), llaisys.Tensor.from_numpy(inv_freq, device=NV), attn_scale)
    ops.rope_table(ref, bridge.to_llaisys(x), bridge.to_llaisys(pos), llaisys.Tensor.from_numpy(inv_freq),
                   attn_scale)  # the CPU kernel, itself checked against torch in test_rope_scaling.py
    bridge.assert_close(out, bridge.to_torch(ref), dtype, scale=8.0 if dtype == "f32" else 1.0, rtol_factor=4.0)


@pytest.mark.parametrize("n,heads,d", [(1, 1, 8), (7, 16, 128), (300, 8, 128)])
def test_rms_norm_heads(bridge, dtype, weight_dtype, n, heads, d):
    x = bridge.randn((n, heads, d), dtype, 3.0)
    w = bridge.uniform((d,), weight_dtype, 0.5, 1.5)
    got, ref = gpu(x), bridge.to_llaisys(x)
    ops.rms_norm_heads(got, gpu(w), 1e-6)
    ops.rms_norm_heads(ref, bridge.to_llaisys(w), 1e-6)
    bridge.assert_close(got, bridge.to_torch(ref), dtype)
