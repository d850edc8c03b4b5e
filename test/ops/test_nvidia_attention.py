"""Attention on the NVIDIA device against float64 references on the CPU: self_attention over
ATTENTION_CASES and longer ones, and paged_attention in the BLOCK and SLOT layouts (decode
batches, prefill chunks, f32 queries over 16-bit caches, sliding windows, a bad slot refused),
also against the CPU kernel. Skipped as a whole where this build or machine has no NVIDIA GPU.
"""

from __future__ import annotations

import math

import pytest
import torch

import llaisys
from llaisys import Status, ops
from llaisys import runtime as rt

from nvidia_tensors import NV, gpu, gpu_empty, gpu_full
from test_op_reference import ATTENTION_CASES, attention_ref

pytestmark = pytest.mark.skipif(rt.device_count(NV) == 0, reason="no NVIDIA GPU in this build/machine")


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


def test_paged_attention_bad_slot_is_rejected(bridge):
    q, k = bridge.randn((1, 2, 8), "f32"), bridge.randn((4, 1, 8), "f32")
    idx = [torch.tensor([0]), torch.tensor([0, 1], dtype=torch.int32), torch.tensor([0, 2], dtype=torch.int32),
           torch.tensor([1, 4], dtype=torch.int32), torch.tensor([0, 1])]
    out = gpu_full((1, 2, 8), "f32", 7.0)
    with pytest.raises(llaisys.LlaisysError) as info:
        ops.paged_attention(out, gpu(q), gpu(k), gpu(k), *[gpu(a) for a in idx], 1.0)
    assert info.value.status == Status.OUT_OF_RANGE and "kv slot 4" in str(info.value)
    assert (out.numpy() == 7.0).all()


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


# ------------------------------------------------------------------------------------------
# opt-in kernels, each against the default one on the same inputs

def kernel_ab(bridge, gen, monkeypatch, env: str, q_lens, ctx_lens, heads, kv_heads, d, act, kv_dtype, window):
    """A BLOCK-layout batch of these rows run with `env` set to 1 and to 0 (each kernel reads its
    variable at every launch), every output starting as NaN: (with, without, float64 reference,
    query_start)."""
    query_start, q_pos, kv_start, slots, pos = block_view(gen, q_lens, ctx_lens, block_size=16, n_blocks=256)
    n, n_slots = query_start[-1], 256 * 16
    q = bridge.randn((n, heads, d), act)
    k_cache, v_cache = bridge.randn((n_slots, kv_heads, d), kv_dtype), bridge.randn((n_slots, kv_heads, d), kv_dtype)
    idx = [torch.tensor(q_pos, dtype=torch.int64), torch.tensor(query_start, dtype=torch.int32),
           torch.tensor(kv_start, dtype=torch.int32), torch.tensor(slots, dtype=torch.int32),
           torch.tensor(pos, dtype=torch.int64)]
    scale = 1.0 / math.sqrt(d)

    def run(on: bool):
        monkeypatch.setenv(env, "1" if on else "0")
        out = gpu_full((n, heads, d), act, float("nan"))  # every element must be written
        args = [gpu(q), gpu(k_cache), gpu(v_cache), *[gpu(a) for a in idx], scale]
        if window:
            ops.paged_attention_window(out, *args, window)
        else:
            ops.paged_attention(out, *args)
        return bridge.to_torch(out)

    expected = paged_ref(q, k_cache, v_cache, *idx, scale, window).to(torch.float32)
    return run(True), run(False), expected, query_start


# ------------------------------------------------------------------------------------------
# the tensor-core prefill kernel (flash_kernel.cuh, LLAISYS_FLASH_PREFILL=1)

FLASH_HEADS = [(14, 2, 64), (12, 2, 128), (28, 4, 128), (8, 8, 128), (64, 1, 64)]


@pytest.mark.parametrize("window", [0, 5, 70])
@pytest.mark.parametrize("act", ["f32", "cache"])
@pytest.mark.parametrize("kv_dtype", ["f16", "bf16"])
@pytest.mark.parametrize("heads,kv_heads,d", FLASH_HEADS, ids=lambda c: str(c))
def test_flash_prefill(bridge, gen, monkeypatch, heads, kv_heads, d, kv_dtype, act, window):
    """Prefill rows (5 to 200 queries, beside decode rows) through the tensor-core kernel, against
    the float64 reference within its operands' precision (queries and weights rounded to the
    cache's type; f32 accumulation), and not equal to the f32 kernel's output, which shows the
    launch took it. Groups of 1 to 64 query heads, windows shorter and longer than a key tile, rows
    that end mid-tile, decode rows in the same launch (untouched)."""
    dtype = kv_dtype if act == "cache" else "f32"
    q_lens, ctx_lens = [1, 5, 37, 200, 1, 64, 130], [1, 5, 100, 200, 1500, 700, 130]
    flash, plain, expected, query_start = kernel_ab(bridge, gen, monkeypatch, "LLAISYS_FLASH_PREFILL", q_lens,
                                                    ctx_lens, heads, kv_heads, d, dtype, kv_dtype, window)
    tol = 2e-2 if kv_dtype == "bf16" else 3e-3  # one rounding of q and of every weight to the cache's type
    torch.testing.assert_close(flash, expected, atol=tol, rtol=tol)
    long_rows = slice(query_start[1], query_start[4])  # rows of 5, 37 and 200 queries
    assert not torch.equal(flash[long_rows], plain[long_rows]), "the tensor-core kernel did not run"
    decode_rows = [query_start[0], query_start[4]]
    assert torch.equal(flash[decode_rows], plain[decode_rows]), "decode rows keep their own kernel"


# ------------------------------------------------------------------------------------------
# the wide-load decode kernel (decode_wide_kernel.cuh, LLAISYS_WIDE_DECODE=1)

# (heads, kv_heads, d): groups 1 to 8 through every template bucket (1, 2, 4, 6, 8), both
# head sizes; Qwen2.5-0.5B (7 of 64), 1.5B (6 of 128), 7B (7 of 128), Qwen3-30B-A3B (8 of 128)
WIDE_HEADS = [(8, 8, 128), (16, 8, 128), (12, 4, 64), (32, 8, 128), (40, 8, 128), (12, 2, 128), (14, 2, 64),
              (28, 4, 128), (32, 4, 128)]
WIDE_VIEWS = {  # q_lens, ctx_lens: decode and speculative-sized rows beside a prefill chunk
    "mixed": ([1, 3, 4, 1, 1, 37, 1], [1, 40, 4, 70, 1500, 100, 9]),
    "one-long-row": ([1], [3000]),  # one (row, kv head) pair per block x: the most splits (47)
}


@pytest.mark.parametrize("window", [0, 33])
@pytest.mark.parametrize("view_name", list(WIDE_VIEWS))
@pytest.mark.parametrize("kv_dtype", ["f16", "bf16"])
@pytest.mark.parametrize("heads,kv_heads,d", WIDE_HEADS, ids=lambda c: str(c))
def test_wide_decode(bridge, gen, monkeypatch, heads, kv_heads, d, kv_dtype, view_name, window):
    """Decode rows (1 to 4 queries) of f32 queries over an f16 / bf16 cache through the wide-load
    kernel: against the float64 reference, every output written (the buffer starts as NaN), not
    equal to decode_kernel's output (so the launch took it), and the prefill chunk untouched."""
    q_lens, ctx_lens = WIDE_VIEWS[view_name]
    wide, plain, expected, _ = kernel_ab(bridge, gen, monkeypatch, "LLAISYS_WIDE_DECODE", q_lens, ctx_lens, heads,
                                         kv_heads, d, "f32", kv_dtype, window)
    torch.testing.assert_close(wide, expected, atol=2e-5, rtol=1e-5)  # f32 sums: run_paged's tolerance
    decode = torch.tensor([ql <= 4 for ql, _ in zip(q_lens, ctx_lens) for _ in range(ql)])
    assert not torch.equal(wide[decode], plain[decode]), "the wide kernel did not run"
    assert torch.equal(wide[~decode], plain[~decode]), "the prefill chunk keeps its own kernel"
