"""Every op against a torch reference, for f32, f16 and bf16, on odd and edge shapes.

Inputs are created in the target dtype in torch and handed to llaisys bit for bit; the
reference is computed in float64 (rope: float32, as transformers does) from those rounded
inputs; tolerances come from TOLERANCES in conftest.py. A test that takes the `dtype`
fixture runs once for each of f32, f16 and bf16.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import torch

from llaisys import ops

# ------------------------------------------------------------------------------------------
# references


def rope_ref(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """HF rotate-half RoPE computed in float32, as transformers' Qwen2 does."""
    d = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    freqs = pos.float()[:, None] * inv_freq  # [n, d/2]
    emb = torch.cat([freqs, freqs], dim=-1)  # [n, d]
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    xf = x.float()
    x1, x2 = xf[..., : d // 2], xf[..., d // 2:]
    return xf * cos + torch.cat([-x2, x1], dim=-1) * sin


def attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """Causal GQA attention in float64; query i sits at position kv_len - q_len + i."""
    q_len, heads, _ = q.shape
    kv_len, kv_heads, _ = k.shape
    group = heads // kv_heads
    qd, kd, vd = q.double(), k.double().repeat_interleave(group, 1), v.double().repeat_interleave(group, 1)
    scores = torch.einsum("qhd,khd->hqk", qd, kd) * scale  # [heads, q_len, kv_len]
    q_pos = torch.arange(q_len) + (kv_len - q_len)
    scores = scores.masked_fill(torch.arange(kv_len)[None, :] > q_pos[:, None], float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), vd)  # [q_len, heads, dv]


# ------------------------------------------------------------------------------------------
# elementwise

ELEMENTWISE_SHAPES = [(1,), (7,), (3, 33), (2, 5, 4097)]  # the last one takes the OpenMP path


@pytest.mark.parametrize("shape", ELEMENTWISE_SHAPES)
@pytest.mark.parametrize("name", ["add", "mul"])
def test_add_mul(bridge, name, dtype, shape):
    a, b = bridge.randn(shape, dtype, 3.0), bridge.randn(shape, dtype, 3.0)
    out = bridge.empty(shape, dtype)
    getattr(ops, name)(out, bridge.to_llaisys(a), bridge.to_llaisys(b))
    expected = a.double() + b.double() if name == "add" else a.double() * b.double()
    bridge.assert_close(out, expected, dtype, scale=10.0)


SPECIALS = {
    # zeros, infinities, NaN, the largest finite value, the smallest subnormal, a subnormal,
    # and pairs whose exact sum or product lies halfway between two representable values
    "f16": [0.0, -0.0, float("inf"), float("-inf"), float("nan"), 65504.0, -65504.0, 2.0 ** -24, 3 * 2.0 ** -20,
            1.0, 2.0 ** -11, 1.0 + 2.0 ** -10, 2.0 ** -12, 3.0, 1.0 + 2.0 ** -9, 255.0, 257.0],
    "bf16": [0.0, -0.0, float("inf"), float("-inf"), float("nan"), 3.3895313892515355e38, 2.0 ** -133,
             3 * 2.0 ** -130, 1.0, 2.0 ** -8, 1.0 + 2.0 ** -7, 2.0 ** -9, 3.0, 1.0 + 2.0 ** -6, 17.0, 15.0],
}


@pytest.mark.parametrize("name", ["add", "mul"])
@pytest.mark.parametrize("half", ["f16", "bf16"])
def test_add_mul_round_like_torch(bridge, name, half):
    """16-bit results are bit-identical to torch's (f32 arithmetic, round to nearest even),
    including overflow to inf, subnormals, ties and signed zeros; NaN stays NaN."""
    specials = torch.tensor(SPECIALS[half], dtype=torch.float64).to(bridge.torch_dtype(half))
    a = torch.cat([specials.repeat_interleave(len(specials)), bridge.randn((999,), half, 100.0)])
    b = torch.cat([specials.repeat(len(specials)), bridge.randn((999,), half, 0.01)])
    out = bridge.empty(a.shape, half)
    getattr(ops, name)(out, bridge.to_llaisys(a), bridge.to_llaisys(b))
    expected = a + b if name == "add" else a * b
    got = torch.from_numpy(bridge.bits(out).astype("int32"))
    want = expected.view(torch.int16).to(torch.int32) & 0xFFFF
    nan = torch.isnan(expected)
    assert torch.isnan(bridge.to_torch(out)).equal(nan)
    mismatch = (got != want) & ~nan
    assert not mismatch.any(), f"{int(mismatch.sum())} results differ, first at {int(mismatch.nonzero()[0])}"


@pytest.mark.parametrize("half", ["f16", "bf16"])
def test_every_16bit_pattern_survives_a_kernel(bridge, half):
    """Kernels widen to f32 and round back: x * 1 reproduces every non-NaN bit pattern exactly
    (subnormals included: no flush-to-zero), and NaN stays NaN."""
    x = torch.arange(2 ** 16, dtype=torch.int32).to(torch.int16).view(bridge.torch_dtype(half))
    out = bridge.empty(x.shape, half)
    ops.mul(out, bridge.to_llaisys(x), bridge.to_llaisys(torch.ones_like(x)))
    nan = torch.isnan(x)
    got = torch.from_numpy(bridge.bits(out).astype("int32"))
    want = torch.arange(2 ** 16, dtype=torch.int32)
    assert torch.isnan(bridge.to_torch(out)).equal(nan)
    assert got[~nan].equal(want[~nan])


def test_add_mul_in_place(bridge, dtype):
    """out may alias a or b."""
    a, b = bridge.randn((5, 9), dtype), bridge.randn((5, 9), dtype)
    ta, tb = bridge.to_llaisys(a), bridge.to_llaisys(b)
    ops.add(ta, ta, tb)
    bridge.assert_close(ta, a.double() + b.double(), dtype, scale=4.0)
    ops.mul(tb, ta, tb)
    bridge.assert_close(tb, bridge.to_torch(ta).double() * b.double(), dtype, scale=4.0)


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 33), (4, 4097)])
def test_swiglu(bridge, dtype, shape):
    gate, up = bridge.randn(shape, dtype, 3.0), bridge.randn(shape, dtype, 2.0)
    out = bridge.empty(shape, dtype)
    ops.swiglu(out, bridge.to_llaisys(gate), bridge.to_llaisys(up))
    g = gate.double()
    bridge.assert_close(out, up.double() * g * torch.sigmoid(g), dtype, scale=4.0)


# ------------------------------------------------------------------------------------------
# embedding, linear, rms_norm


@pytest.mark.parametrize("n,vocab,d", [(1, 1, 1), (7, 33, 64), (33, 151, 7), (64, 100, 512)])
def test_embedding(bridge, dtype, n, vocab, d):
    weight = bridge.randn((vocab, d), dtype)
    index = bridge.randint((n,), 0, vocab)
    index[0] = vocab - 1  # the last row, and (n > 1) a repeat
    out = bridge.empty((n, d), dtype)
    ops.embedding(out, bridge.to_llaisys(index), bridge.to_llaisys(weight))
    torch.testing.assert_close(bridge.to_torch(out), weight[index].float(), atol=0, rtol=0)


@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (2, 7, 3), (1, 4097, 7), (7, 33, 5), (33, 64, 129), (3, 896, 14)])
def test_linear(bridge, dtype, bias, m, k, n):
    x, w = bridge.uniform((m, k), dtype), bridge.uniform((n, k), dtype)
    b = bridge.uniform((n,), dtype) if bias else None
    out = bridge.empty((m, n), dtype)
    ops.linear(out, bridge.to_llaisys(x), bridge.to_llaisys(w), bridge.to_llaisys(b) if bias else None)
    expected = x.double() @ w.double().T + (b.double() if bias else 0.0)
    bridge.assert_close(out, expected, dtype, scale=math.sqrt(k))


@pytest.mark.parametrize("m,d,eps", [(1, 1, 1e-6), (1, 7, 1e-5), (5, 33, 1e-6), (17, 4097, 1e-6), (3, 896, 1.0)])
def test_rms_norm(bridge, dtype, m, d, eps):
    x, w = bridge.randn((m, d), dtype, 2.0), bridge.randn((d,), dtype)
    out = bridge.empty((m, d), dtype)
    ops.rms_norm(out, bridge.to_llaisys(x), bridge.to_llaisys(w), eps)
    xd = x.double()
    expected = xd / torch.sqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * w.double()
    bridge.assert_close(out, expected, dtype, scale=4.0)


def test_rms_norm_in_place(bridge, dtype):
    x, w = bridge.randn((4, 40), dtype), bridge.randn((40,), dtype)
    t = bridge.to_llaisys(x)
    ops.rms_norm(t, t, bridge.to_llaisys(w), 1e-6)
    xd = x.double()
    bridge.assert_close(t, xd / torch.sqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double(), dtype, scale=4.0)


@pytest.mark.parametrize("m,d,eps", [(1, 1, 1e-6), (5, 33, 1e-6), (17, 4097, 1e-6), (3, 896, 1.0)])
def test_add_rms_norm(bridge, dtype, m, d, eps):
    r, x, w = bridge.randn((m, d), dtype, 2.0), bridge.randn((m, d), dtype), bridge.randn((d,), dtype)
    res, out = bridge.to_llaisys(r), bridge.empty((m, d), dtype)
    ops.add_rms_norm(out, res, bridge.to_llaisys(x), bridge.to_llaisys(w), eps)
    # the residual holds the sum rounded to the dtype, as a separate add would store it
    summed = (r.double() + x.double()).to(r.dtype)
    torch.testing.assert_close(bridge.to_torch(res), summed.float(), atol=0, rtol=0)
    sd = summed.double()
    expected = sd / torch.sqrt(sd.pow(2).mean(-1, keepdim=True) + eps) * w.double()
    bridge.assert_close(out, expected, dtype, scale=4.0)


def test_mixed_dtype_weights(bridge, weight_dtype):
    """f32 activations with weights of any float dtype (include/llaisys/ops.h)."""
    x = bridge.uniform((3, 65), "f32")
    w, b = bridge.uniform((9, 65), weight_dtype), bridge.uniform((9,), weight_dtype)
    out = bridge.empty((3, 9), "f32")
    ops.linear(out, bridge.to_llaisys(x), bridge.to_llaisys(w), bridge.to_llaisys(b))
    bridge.assert_close(out, x.double() @ w.double().T + b.double(), "f32", scale=8.0)

    norm_w = bridge.randn((65,), weight_dtype)
    normed = bridge.empty((3, 65), "f32")
    ops.rms_norm(normed, bridge.to_llaisys(x), bridge.to_llaisys(norm_w), 1e-6)
    xd = x.double()
    bridge.assert_close(normed, xd / torch.sqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * norm_w.double(), "f32")

    table = bridge.randn((11, 65), weight_dtype)
    index = torch.tensor([3, 0, 10, 3])
    emb = bridge.empty((4, 65), "f32")
    ops.embedding(emb, bridge.to_llaisys(index), bridge.to_llaisys(table))
    torch.testing.assert_close(bridge.to_torch(emb), table[index].float(), atol=0, rtol=0)


# Run in a child process: the CPU kernels choose their SIMD path once per process, and
# LLAISYS_ISA forces one lower than the CPU's best. f32 activations take the SIMD GEMM (with
# f32, f16 or bf16 weights); numpy is the float64 reference; the bound is TOLERANCES["f32"].
LINEAR_CHILD = r"""
import numpy as np, llaisys
from llaisys import ops
rng = np.random.default_rng(0)
worst = 0.0
for wdt in ("f32", "f16", "bf16"):
    for bias in (False, True):
        for m, k, n in [(1, 1, 1), (2, 7, 3), (1, 4097, 7), (7, 33, 5), (33, 64, 129), (3, 896, 14), (5, 130, 33)]:
            x = llaisys.Tensor.from_numpy(rng.uniform(-1, 1, (m, k)).astype(np.float32))
            w = llaisys.Tensor.from_numpy(rng.uniform(-1, 1, (n, k)).astype(np.float32), dtype=wdt)
            b = llaisys.Tensor.from_numpy(rng.uniform(-1, 1, n).astype(np.float32), dtype=wdt) if bias else None
            out = llaisys.Tensor((m, n), "f32")
            ops.linear(out, x, w, b)
            ref = x.numpy().astype(np.float64) @ w.numpy().astype(np.float64).T + (b.numpy() if bias else 0.0)
            err = np.abs(out.numpy() - ref) / (1e-5 * np.sqrt(k) + 1e-5 * np.abs(ref))
            worst = max(worst, float(err.max()))
print(worst)
"""


# (avx512bf16 changes only the packed GEMM of bf16 weights: ops.linear keeps f32 activations)
@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512", "avx512bf16"])
def test_linear_on_every_simd_path(isa):
    child = subprocess.run([sys.executable, "-c", LINEAR_CHILD], env=dict(os.environ, LLAISYS_ISA=isa),
                           capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-4000:]
    worst = float(child.stdout.split()[-1])
    assert worst <= 1.0, f"linear on {isa}: error {worst:.3g} x the f32 tolerance"


# ------------------------------------------------------------------------------------------
# rope and attention


@pytest.mark.parametrize("n,heads,d,theta", [(1, 1, 2, 10000.0), (5, 3, 64, 10000.0), (7, 14, 128, 1e6),
                                              (9, 2, 6, 500.0)])
def test_rope(bridge, dtype, n, heads, d, theta):
    x = bridge.randn((n, heads, d), dtype)
    pos = bridge.randint((n,), 0, 4096)
    pos[0] = 0
    out = bridge.empty((n, heads, d), dtype)
    ops.rope(out, bridge.to_llaisys(x), bridge.to_llaisys(pos), theta)
    # Angles reach 4096 rad: one float32 ulp of an angle is ~2.4e-4, so f32 is held to that.
    bridge.assert_close(out, rope_ref(x, pos, theta), dtype, scale=25.0 if dtype == "f32" else 1.0)


def test_rope_in_place_matches_out_of_place(bridge, dtype):
    x = bridge.randn((6, 4, 16), dtype)
    pos = torch.arange(6) * 7
    ref = bridge.empty((6, 4, 16), dtype)
    ops.rope(ref, bridge.to_llaisys(x), bridge.to_llaisys(pos), 10000.0)
    t = bridge.to_llaisys(x)
    ops.rope(t, t, bridge.to_llaisys(pos), 10000.0)
    assert (bridge.to_torch(t) == bridge.to_torch(ref)).all()


ATTENTION_CASES = [
    # q_len, kv_len, heads, kv_heads, d, dv
    (1, 1, 1, 1, 8, 8),
    (5, 5, 3, 1, 16, 16),  # prefill, odd head count, MQA
    (3, 37, 14, 2, 64, 64),  # Qwen2-1.5B grouping, q_len < kv_len
    (7, 19, 12, 2, 64, 64),  # Qwen2.5-0.5B grouping
    (1, 33, 7, 7, 33, 33),  # decode, MHA, odd head dim
    (4, 9, 4, 2, 8, 12),  # dv != d
]


def test_attention_reference_matches_sdpa(gen):
    """The manual reference itself agrees with torch's SDPA (explicit bottom-right causal mask)."""
    q_len, kv_len, heads, kv_heads, d = 3, 11, 6, 2, 16
    q = torch.randn(q_len, heads, d, generator=gen, dtype=torch.float64)
    k = torch.randn(kv_len, kv_heads, d, generator=gen, dtype=torch.float64)
    v = torch.randn(kv_len, kv_heads, d, generator=gen, dtype=torch.float64)
    allowed = torch.arange(kv_len)[None, :] <= (torch.arange(q_len) + kv_len - q_len)[:, None]
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1).repeat_interleave(3, 0), v.transpose(0, 1).repeat_interleave(3, 0),
        attn_mask=allowed, scale=0.3).transpose(0, 1)
    torch.testing.assert_close(attention_ref(q, k, v, 0.3), sdpa)


@pytest.mark.parametrize("case", ATTENTION_CASES, ids=lambda c: "q{}kv{}h{}/{}d{}dv{}".format(*c))
def test_self_attention(bridge, dtype, case):
    q_len, kv_len, heads, kv_heads, d, dv = case
    q, k = bridge.randn((q_len, heads, d), dtype), bridge.randn((kv_len, kv_heads, d), dtype)
    v = bridge.randn((kv_len, kv_heads, dv), dtype)
    scale = 1.0 / math.sqrt(d)
    out = bridge.empty((q_len, heads, dv), dtype)
    ops.self_attention(out, bridge.to_llaisys(q), bridge.to_llaisys(k), bridge.to_llaisys(v), scale)
    bridge.assert_close(out, attention_ref(q, k, v, scale), dtype, scale=2.0)


# ------------------------------------------------------------------------------------------
# argmax and softmax


@pytest.mark.parametrize("shape", [(1,), (7,), (1, 1), (5, 33), (3, 4097), (40, 2000)])
def test_argmax_first_max(bridge, dtype, shape):
    # small integers: many ties, so "the first maximum" is actually exercised
    vals = bridge.randint(shape, -4, 5).to(bridge.torch_dtype(dtype))
    rows = 1 if len(shape) == 1 else shape[0]
    idx, val = bridge.empty((rows,), "i64"), bridge.empty((rows,), dtype)
    ops.argmax(idx, val, bridge.to_llaisys(vals))
    v2 = vals.reshape(rows, -1).float()
    expected = torch.argmax(v2, dim=-1)  # documented: the first maximal value
    assert (v2 == v2.max(-1, keepdim=True).values).float().argmax(-1).equal(expected)
    assert bridge.to_torch(idx).equal(expected)
    assert bridge.to_torch(val).equal(v2.max(-1).values)


def test_argmax_continuous_and_nan(bridge, dtype):
    vals = bridge.randn((4, 301), dtype)
    vals[2, 17] = float("nan")
    vals[2, 40] = float("nan")
    vals[3, 5] = float("inf")
    vals[3, 9] = float("inf")
    idx, val = bridge.empty((4,), "i64"), bridge.empty((4,), dtype)
    ops.argmax(idx, val, bridge.to_llaisys(vals))
    got = bridge.to_torch(idx)
    assert got.tolist() == torch.argmax(vals.float(), dim=-1).tolist()
    assert got[2] == 17 and got[3] == 5
    assert math.isnan(bridge.to_torch(val)[2]) and bridge.to_torch(val)[3] == float("inf")


@pytest.mark.parametrize("shape,scale", [((1,), 1.0), ((7,), 1.0), ((5, 33), 10.0), ((2, 3, 4097), 30.0),
                                         ((1, 151), 300.0)])
def test_softmax(bridge, dtype, shape, scale):
    x = bridge.randn(shape, dtype, scale)
    out = bridge.empty(shape, dtype)
    ops.softmax(out, bridge.to_llaisys(x))
    bridge.assert_close(out, torch.softmax(x.double(), dim=-1), dtype, scale=0.1)


def test_softmax_masked_and_in_place(bridge, dtype):
    x = bridge.randn((3, 10), dtype)
    x[0, 3:] = float("-inf")  # a causal-mask style row
    x[1, 0] = 1000.0 if dtype != "f16" else 60000.0  # one dominating logit
    t = bridge.to_llaisys(x)
    ops.softmax(t, t)
    bridge.assert_close(t, torch.softmax(x.double(), dim=-1), dtype, scale=0.1)

