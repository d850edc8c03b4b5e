"""Every op on the NVIDIA device against a torch reference computed on the CPU, in f32, f16 and
bf16, with the tolerances of the CPU tests (conftest.TOLERANCES).

Inputs are made in torch in the target dtype and copied to the GPU bit for bit; results come
back through numpy; references are float64 (rope: float32, as transformers) on the CPU, so
the same file runs on a machine whose torch has no CUDA. Skipped as a whole where this build
or machine has no NVIDIA GPU.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

import llaisys
from llaisys import DeviceType, Status, ops
from llaisys import runtime as rt

from test_op_reference import ATTENTION_CASES, SPECIALS, attention_ref, rope_ref

NV = DeviceType.NVIDIA

pytestmark = pytest.mark.skipif(rt.device_count(NV) == 0, reason="no NVIDIA GPU in this build/machine")


# ------------------------------------------------------------------------------------------
# moving tensors


def gpu(t: torch.Tensor) -> llaisys.Tensor:
    """A tensor on GPU 0 holding exactly the bits of `t` (bf16 travels as uint16 bits)."""
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return llaisys.Tensor.from_numpy(t.view(torch.int16).numpy().view(np.uint16), dtype="bf16", device=NV)
    return llaisys.Tensor.from_numpy(t.numpy(), device=NV)


def gpu_empty(shape, dtype: str) -> llaisys.Tensor:
    return llaisys.Tensor(tuple(shape), dtype, device=NV)


def gpu_full(shape, dtype: str, value: float) -> llaisys.Tensor:
    return llaisys.Tensor.from_numpy(np.full(shape, value, dtype=np.float32), dtype=dtype, device=NV)


def bits(t: llaisys.Tensor) -> torch.Tensor:
    return torch.from_numpy(t.numpy(raw=True).view(np.uint16).astype(np.int32))


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
# attention

LONG_ATTENTION_CASES = [
    (40, 300, 14, 2, 64, 64),  # prefill configuration, Qwen2.5-0.5B grouping
    (1, 2000, 12, 2, 128, 128),  # long decode
    (17, 17, 28, 4, 128, 128),  # Qwen2.5-7B grouping, a whole prompt
    (5, 70, 32, 1, 16, 24),  # MQA, group of 32: one token per prefill tile
]


@pytest.mark.parametrize("case", ATTENTION_CASES + LONG_ATTENTION_CASES,
                         ids=lambda c: "q{}kv{}h{}/{}d{}dv{}".format(*c))
def test_self_attention(bridge, dtype, case):
    q_len, kv_len, heads, kv_heads, d, dv = case
    q, k = bridge.randn((q_len, heads, d), dtype), bridge.randn((kv_len, kv_heads, d), dtype)
    v = bridge.randn((kv_len, kv_heads, dv), dtype)
    scale = 1.0 / math.sqrt(d)
    out = gpu_empty((q_len, heads, dv), dtype)
    ops.self_attention(out, gpu(q), gpu(k), gpu(v), scale)
    bridge.assert_close(out, attention_ref(q, k, v, scale), dtype, scale=2.0)


def paged_ref(q, k_cache, v_cache, q_pos, query_start, kv_start, kv_slots, kv_pos, scale, window=0):
    """float64 reference straight from the contract: token t attends the entries of its row
    with kv_pos <= q_pos[t] (and > q_pos[t] - window when window > 0); a token that sees
    nothing gets zeros."""
    n, heads, _ = q.shape
    kv_heads, dv = k_cache.shape[1], v_cache.shape[2]
    group = heads // kv_heads
    out = torch.zeros(n, heads, dv, dtype=torch.float64)
    for s in range(len(query_start) - 1):
        slots = kv_slots[kv_start[s]:kv_start[s + 1]].long()
        pos = kv_pos[kv_start[s]:kv_start[s + 1]]
        for t in range(int(query_start[s]), int(query_start[s + 1])):
            vis = pos <= q_pos[t]
            if window:
                vis &= pos > q_pos[t] - window
            sel = slots[vis]
            if len(sel) == 0:
                continue
            kk = k_cache[sel].double().repeat_interleave(group, 1)  # [m, heads, d]
            vv = v_cache[sel].double().repeat_interleave(group, 1)
            w = torch.einsum("hd,mhd->hm", q[t].double(), kk).mul(scale).softmax(-1)
            out[t] = torch.einsum("hm,mhd->hd", w, vv)
    return out


def block_view(gen, q_lens, ctx_lens, block_size, n_blocks):
    """BLOCK layout: each row's context 0..ctx-1 in shuffled physical blocks; its queries are
    the last q_len positions."""
    perm = torch.randperm(n_blocks, generator=gen).tolist()
    slots, pos, kv_start, q_pos, query_start = [], [], [0], [], [0]
    for q_len, ctx in zip(q_lens, ctx_lens):
        table = [perm.pop() for _ in range(-(-ctx // block_size))]
        slots += [table[p // block_size] * block_size + p % block_size for p in range(ctx)]
        pos += list(range(ctx))
        kv_start.append(len(slots))
        q_pos += list(range(ctx - q_len, ctx))
        query_start.append(len(q_pos))
    return query_start, q_pos, kv_start, slots, pos


def slot_view(gen, n_slots):
    """SLOT layout: cells scattered over the pool, positions ascending with gaps (a removed
    range), a shared prefix (two rows reading the same cells), a row whose only query sits
    before every cell it could see, and a row with no cells at all."""
    cells = torch.randperm(n_slots, generator=gen).tolist()
    prefix = cells[:20]
    rows = [  # (cell list, positions, query positions)
        (prefix + cells[20:50], list(range(20)) + list(range(25, 55)), [52, 53, 54]),
        (prefix + cells[50:51], list(range(21)), [20]),
        (cells[51:300], list(range(100, 349)), list(range(300, 349))),
        (cells[300:310], list(range(10, 20)), [3]),  # sees nothing
        ([], [], [0, 1]),  # no cells: sees nothing
        (cells[310:1500], list(range(1190)), [1189]),  # long decode
    ]
    slots, pos, kv_start, q_pos, query_start = [], [], [0], [], [0]
    for c, p, qp in rows:
        slots += c
        pos += p
        kv_start.append(len(slots))
        q_pos += qp
        query_start.append(len(q_pos))
    return query_start, q_pos, kv_start, slots, pos


PAGED_HEADS = [(14, 2, 64, 64), (12, 2, 128, 128), (8, 1, 33, 33), (4, 4, 16, 24)]


def run_paged(bridge, dtype, kv_dtype, heads, kv_heads, d, dv, n_slots, view, window=None):
    query_start, q_pos, kv_start, slots, pos = view
    n = query_start[-1]
    q = bridge.randn((n, heads, d), dtype)
    k_cache = bridge.randn((n_slots, kv_heads, d), kv_dtype)
    v_cache = bridge.randn((n_slots, kv_heads, dv), kv_dtype)
    args = [torch.tensor(q_pos, dtype=torch.int64), torch.tensor(query_start, dtype=torch.int32),
            torch.tensor(kv_start, dtype=torch.int32), torch.tensor(slots, dtype=torch.int32),
            torch.tensor(pos, dtype=torch.int64)]
    scale = 1.0 / math.sqrt(d)
    out = gpu_full((n, heads, dv), dtype, float("nan"))  # every element must be written
    if window is None:
        ops.paged_attention(out, gpu(q), gpu(k_cache), gpu(v_cache), *[gpu(a) for a in args], scale)
    else:
        ops.paged_attention_window(out, gpu(q), gpu(k_cache), gpu(v_cache), *[gpu(a) for a in args], scale, window)
    expected = paged_ref(q, k_cache, v_cache, *args, scale, window or 0)
    bridge.assert_close(out, expected, dtype, scale=2.0)
    return out, expected


@pytest.mark.parametrize("heads,kv_heads,d,dv", PAGED_HEADS, ids=lambda c: str(c))
def test_paged_attention_block_layout(bridge, gen, dtype, heads, kv_heads, d, dv):
    """Mixed batch: decode rows (1 query), speculative-sized rows (3, 4: still the decode
    configuration), prefill chunks (5, 37, 64: the prefill configuration), long contexts."""
    q_lens = [1, 3, 4, 5, 37, 1, 64]
    ctx_lens = [1, 40, 4, 5, 100, 1500, 700]
    view = block_view(gen, q_lens, ctx_lens, block_size=16, n_blocks=256)
    run_paged(bridge, dtype, dtype, heads, kv_heads, d, dv, 256 * 16, view)


@pytest.mark.parametrize("heads,kv_heads,d,dv", PAGED_HEADS, ids=lambda c: str(c))
def test_paged_attention_slot_layout(bridge, gen, dtype, heads, kv_heads, d, dv):
    view = slot_view(gen, 2048)
    out, _ = run_paged(bridge, dtype, dtype, heads, kv_heads, d, dv, 2048, view)
    query_start = view[0]
    seen_nothing = bridge.to_torch(out)[query_start[3]:query_start[5]]  # rows 3 and 4
    assert seen_nothing.shape[0] == 3 and (seen_nothing == 0).all()


@pytest.mark.parametrize("kv_dtype", ["bf16", "f16"])
def test_paged_attention_f32_queries_over_16bit_cache(bridge, gen, kv_dtype):
    """The model's case: f32 activations over a bf16/f16 cache."""
    view = block_view(gen, [1, 1, 29], [17, 333, 29], block_size=16, n_blocks=64)
    run_paged(bridge, "f32", kv_dtype, 12, 2, 128, 128, 64 * 16, view)


def test_paged_attention_decode_batch(bridge, gen, dtype):
    """32 decode rows at once, every one a query of length 1."""
    ctx = torch.randint(1, 400, (32,), generator=gen).tolist()
    view = block_view(gen, [1] * 32, ctx, block_size=16, n_blocks=1024)
    run_paged(bridge, dtype, dtype, 14, 2, 64, 64, 1024 * 16, view)


def test_paged_attention_matches_cpu_kernel(bridge, gen):
    """GPU and CPU kernels over the same inputs agree to f32 rounding."""
    query_start, q_pos, kv_start, slots, pos = slot_view(gen, 2048)
    n = query_start[-1]
    q, k, v = bridge.randn((n, 14, 64), "f32"), bridge.randn((2048, 2, 64), "bf16"), bridge.randn((2048, 2, 64), "bf16")
    idx = [torch.tensor(q_pos), torch.tensor(query_start, dtype=torch.int32), torch.tensor(kv_start, dtype=torch.int32),
           torch.tensor(slots, dtype=torch.int32), torch.tensor(pos)]
    on_gpu, on_cpu = gpu_empty((n, 14, 64), "f32"), bridge.empty((n, 14, 64), "f32")
    ops.paged_attention(on_gpu, gpu(q), gpu(k), gpu(v), *[gpu(a) for a in idx], 0.125)
    ops.paged_attention(on_cpu, *[bridge.to_llaisys(a) for a in (q, k, v, *idx)], 0.125)
    torch.testing.assert_close(bridge.to_torch(on_gpu), bridge.to_torch(on_cpu), atol=2e-5, rtol=2e-5)


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


def test_paged_attention_bad_slot_is_rejected(bridge):
    q, k = bridge.randn((1, 2, 8), "f32"), bridge.randn((4, 1, 8), "f32")
    idx = [torch.tensor([0]), torch.tensor([0, 1], dtype=torch.int32), torch.tensor([0, 2], dtype=torch.int32),
           torch.tensor([1, 4], dtype=torch.int32), torch.tensor([0, 1])]
    out = gpu_full((1, 2, 8), "f32", 7.0)
    with pytest.raises(llaisys.LlaisysError) as info:
        ops.paged_attention(out, gpu(q), gpu(k), gpu(k), *[gpu(a) for a in idx], 1.0)
    assert info.value.status == Status.OUT_OF_RANGE and "kv slot 4" in str(info.value)
    assert (out.numpy() == 7.0).all()


def test_rope_negative_position_is_rejected(bridge):
    with pytest.raises(llaisys.LlaisysError) as info:
        t = gpu(bridge.randn((2, 1, 4), "f32"))
        ops.rope(t, t, gpu(torch.tensor([0, -3])), 10000.0)
    assert info.value.status == Status.OUT_OF_RANGE and "negative" in str(info.value)


# ------------------------------------------------------------------------------------------
# the general decoder's ops (issue 17): sliding window, RoPE tables, per-head RMSNorm


@pytest.mark.parametrize("window", [1, 5, 33, 700, 100000])
@pytest.mark.parametrize("heads,kv_heads,d,dv", [(14, 2, 64, 64), (8, 8, 128, 128)], ids=lambda c: str(c))
def test_paged_attention_window(bridge, gen, dtype, heads, kv_heads, d, dv, window):
    """Decode rows and prefill chunks (both kernel configurations) under a sliding window."""
    q_lens, ctx_lens = [1, 4, 37, 1, 64], [1, 40, 100, 1500, 700]
    query_start, q_pos, kv_start, slots, pos = [0], [], [0], [], []
    order = torch.randperm(sum(ctx_lens) + 9, generator=gen).tolist()
    for ql, cl in zip(q_lens, ctx_lens):
        query_start.append(query_start[-1] + ql)
        q_pos += list(range(cl - ql, cl))
        kv_start.append(kv_start[-1] + cl)
        pos += list(range(cl))
        slots += order[kv_start[-2]:kv_start[-1]]
    run_paged(bridge, dtype, dtype, heads, kv_heads, d, dv, len(order), (query_start, q_pos, kv_start, slots, pos),
              window)


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
