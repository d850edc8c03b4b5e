"""paged_attention, the blocked SIMD kernel the model runs, against a float64 torch reference and
against paged_attention_reference (the plain key-by-key kernel it replaced).

Batches are shaped like the model's: decode rows, prefill chunks whose positions start
mid-context, contexts past 1000 keys that are not a multiple of the 32-key block, GQA groups
1, 2, 6 and 7, head dims 64 and 128 and odd ones, queries that see no key, positions with
gaps, and slot lists as both KV layouts produce them (BLOCK: shuffled 16-slot blocks; SLOT:
cells scattered over the pool). Cache slots no row lists hold NaN, so reading one shows.
The SIMD path is chosen once per process: test_every_simd_path re-runs this file in child
processes with LLAISYS_ISA=scalar, avx2 and avx512."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from llaisys import ops

from cpu_features import skip_a_repeated_path

BLOCK_SIZE = 16


@dataclass
class Row:
    q_pos: list[int]   # position of each query token
    kv_pos: list[int]  # positions of the row's cache entries, ascending


def row(q_len: int, kv_len: int, first: int | None = None) -> Row:
    """q_len queries at positions first.. (default: the last q_len of kv_len) over entries 0..kv_len-1."""
    first = kv_len - q_len if first is None else first
    return Row(list(range(first, first + q_len)), list(range(kv_len)))


# The mid-context prefill chunk's context: 1,100 keys; 300 in the sanitizer run (make asan-pytest
# sets LLAISYS_TEST_SANITIZED), where the kernels run ~5x slower and this case, on every path,
# was most of that run's time (~130 of its 477 test-seconds): what ASan checks (the tiles' edges,
# several blocks, a chunk that starts mid-context) 300 keys still cover.
CHUNK_CONTEXT = 300 if os.environ.get("LLAISYS_TEST_SANITIZED") == "1" else 1100

# name -> (heads, kv_heads, d, dv, rows)
CASES = {
    "decode_qwen05": (14, 2, 64, 64, [row(1, 1037), row(1, 1), row(1, 33), row(1, 64), row(1, 500)]),
    "prefill_chunk_qwen15": (12, 2, 128, 128, [row(45, CHUNK_CONTEXT, first=CHUNK_CONTEXT - 45)]),
    "prefill_from_0_group7": (7, 1, 64, 64, [row(70, 70)]),
    "mixed_batch": (14, 2, 64, 64, [row(1, 300), row(37, 100, first=63), row(5, 5), row(0, 12), row(1, 2000)]),
    "mha_odd_dim": (7, 7, 33, 33, [row(3, 70), row(1, 1), row(9, 9)]),
    "group2_dv_differs": (4, 2, 16, 24, [row(5, 5), row(37, 100), row(2, 41)]),
    # queries before every entry of their row, a row with no entries, and one that sees some
    "sees_nothing": (6, 2, 64, 64, [Row([0, 1, 2], list(range(10, 20))), Row([4, 5], []), row(3, 40)]),
    # entries with position gaps (a SLOT-layout row after evictions), queries in any order
    "position_gaps": (12, 2, 128, 128, [Row([900, 3, 1200, 451, 0, 1100, 77], sorted(set(range(0, 1300, 3))
                                                                                      | {1, 2, 451})),
                                        Row([60], list(range(0, 120, 2)))]),
}

DTYPES = [("f32", "bf16"), ("f32", "f16"), ("f32", "f32"), ("bf16", "bf16"), ("f16", "f16")]  # (act, kv)


def slot_lists(gen: torch.Generator, rows: list[Row], layout: str) -> tuple[list[torch.Tensor], int]:
    """Cache slots of each row's entries, and the pool size. BLOCK: each row owns whole
    BLOCK_SIZE-slot blocks, handed out in shuffled order; SLOT: any free cell of the pool."""
    if layout == "block":
        need = [-(-len(r.kv_pos) // BLOCK_SIZE) for r in rows]
        n_blocks = sum(need) + 3  # a few blocks nobody owns
        order = torch.randperm(n_blocks, generator=gen)
        out, used = [], 0
        for r, nb in zip(rows, need):
            blocks = order[used:used + nb]
            used += nb
            j = torch.arange(len(r.kv_pos))
            out.append((blocks[j // BLOCK_SIZE] * BLOCK_SIZE + j % BLOCK_SIZE) if nb else j)
        return out, n_blocks * BLOCK_SIZE
    n_slots = sum(len(r.kv_pos) for r in rows) + 29
    cells = torch.randperm(n_slots, generator=gen)
    out, used = [], 0
    for r in rows:
        out.append(cells[used:used + len(r.kv_pos)])
        used += len(r.kv_pos)
    return out, n_slots


def reference(q, k, v, rows: list[Row], slots, scale: float, window: int = 0) -> torch.Tensor:
    """float64 attention of each query over its row's entries with position <= its own (and,
    with a window, > its own - window: transformers' sliding_window_causal_mask), a row's queries
    at once under that mask; a query that sees no entry gets zeros."""
    heads, kv_heads = q.shape[1], k.shape[1]
    group = heads // kv_heads
    out = torch.zeros(q.shape[0], heads, v.shape[2], dtype=torch.float64)
    t = 0
    for r, sl in zip(rows, slots):
        n = len(r.q_pos)
        if n and r.kv_pos:
            kr = k[sl].double().repeat_interleave(group, 1)  # [m, heads, d]
            vr = v[sl].double().repeat_interleave(group, 1)
            q_pos = torch.tensor(r.q_pos, dtype=torch.int64)[:, None]
            kv_pos = torch.tensor(r.kv_pos, dtype=torch.int64)[None, :]
            vis = kv_pos <= q_pos  # [n, m]
            if window:
                vis &= kv_pos > q_pos - window
            s = torch.einsum("qhd,khd->qhk", q[t:t + n].double(), kr) * scale  # [n, heads, m]
            p = s.masked_fill(~vis[:, None, :], float("-inf")).softmax(-1)  # NaN where nothing is seen
            seen = vis.any(1)
            out[t:t + n][seen] = torch.einsum("qhk,khd->qhd", p, vr)[seen]
        t += n
    return out


def run_case(bridge, gen, name: str, act: str, kv: str, layout: str, window: int | None = None):
    """(blocked, reference, float64) outputs; window None: the windowless entry points."""
    heads, kv_heads, d, dv, rows = CASES[name]
    slots, n_slots = slot_lists(gen, rows, layout)
    n = sum(len(r.q_pos) for r in rows)
    q = bridge.randn((n, heads, d), act)
    k, v = bridge.randn((n_slots, kv_heads, d), kv), bridge.randn((n_slots, kv_heads, dv), kv)
    listed = torch.zeros(n_slots, dtype=torch.bool)
    for sl in slots:
        listed[sl] = True
    k[~listed], v[~listed] = float("nan"), float("nan")
    t = bridge.to_llaisys
    args = [t(q), t(k), t(v), t(torch.tensor([p for r in rows for p in r.q_pos], dtype=torch.int64)),
            t(torch.tensor([0] + [len(r.q_pos) for r in rows], dtype=torch.int32).cumsum(0).to(torch.int32)),
            t(torch.tensor([0] + [len(r.kv_pos) for r in rows], dtype=torch.int32).cumsum(0).to(torch.int32)),
            t(torch.cat(slots).to(torch.int32)), t(torch.tensor([p for r in rows for p in r.kv_pos],
                                                                dtype=torch.int64))]
    scale = 1.0 / math.sqrt(d)
    fast, plain = bridge.empty((n, heads, dv), act), bridge.empty((n, heads, dv), act)
    if window is None:
        ops.paged_attention(fast, *args, scale)
        ops.paged_attention_reference(plain, *args, scale)
    else:
        ops.paged_attention_window(fast, *args, scale, window)
        ops.paged_attention_window(plain, *args, scale, window, reference=True)
    return fast, plain, reference(q, k, v, rows, slots, scale, window or 0)


@pytest.mark.parametrize("layout", ["block", "slot"])
@pytest.mark.parametrize("act,kv", DTYPES, ids=lambda x: x)
@pytest.mark.parametrize("name", list(CASES))
def test_paged_attention(bridge, gen, name, act, kv, layout):
    fast, plain, expected = run_case(bridge, gen, name, act, kv, layout)
    bridge.assert_close(fast, expected, act, scale=2.0)
    bridge.assert_close(fast, bridge.to_torch(plain).double(), act, scale=2.0)
    got = bridge.to_torch(fast)
    assert not got.isnan().any()
    seen = torch.tensor([p >= min(r.kv_pos, default=1 << 62) for r in CASES[name][4] for p in r.q_pos])
    assert (got[~seen] == 0).all(), "a query that sees no entry gets zeros"
    assert (got[seen].abs().sum(-1) > 0).all()


# Sliding windows: 1 (a query sees only its own position), shorter than a query chunk and than
# a key block (5), about a block (33), longer than a chunk but shorter than the context (100,
# 700), and longer than every context (100000, the same as no window).
WINDOWS = [1, 5, 33, 700, 100000]
WINDOW_CASES = ["decode_qwen05", "prefill_chunk_qwen15", "mixed_batch", "sees_nothing", "position_gaps"]


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("act,kv", [("f32", "f32"), ("f16", "f16"), ("bf16", "bf16")],
                         ids=lambda x: x)
@pytest.mark.parametrize("name", WINDOW_CASES)
def test_sliding_window(bridge, gen, name, act, kv, window):
    fast, plain, expected = run_case(bridge, gen, name, act, kv, "slot" if window % 2 else "block", window)
    bridge.assert_close(fast, expected, act, scale=2.0)
    bridge.assert_close(plain, expected, act, scale=2.0)
    got = bridge.to_torch(fast)
    assert not got.isnan().any()
    rows = CASES[name][4]
    seen = torch.tensor([any(p - window < kp <= p for kp in r.kv_pos) for r in rows for p in r.q_pos])
    assert (got[~seen] == 0).all(), "a query whose window holds no entry gets zeros"
    assert (got[seen].abs().sum(-1) > 0).all()


def test_window_zero_is_no_window(bridge, gen):
    fast, _, _ = run_case(bridge, gen, "mixed_batch", "f32", "f32", "slot", 0)
    gen.manual_seed(7)
    a = run_case(bridge, gen, "mixed_batch", "f32", "f32", "slot", 0)[0]
    gen.manual_seed(7)
    b = run_case(bridge, gen, "mixed_batch", "f32", "f32", "slot", None)[0]
    assert np.array_equal(a.numpy(), b.numpy())


def test_window_one_is_the_own_value(bridge, gen):
    """window 1: each query sees only the entry at its own position, so out = v of that entry."""
    heads, kv_heads, d = 4, 2, 16
    n = 6
    q = bridge.randn((n, heads, d), "f32")
    k, v = bridge.randn((n, kv_heads, d), "f32"), bridge.randn((n, kv_heads, d), "f32")
    t = bridge.to_llaisys
    out = bridge.empty((n, heads, d), "f32")
    ops.paged_attention_window(out, t(q), t(k), t(v), t(torch.arange(n)), t(torch.tensor([0, n], dtype=torch.int32)),
                               t(torch.tensor([0, n], dtype=torch.int32)), t(torch.arange(n, dtype=torch.int32)),
                               t(torch.arange(n)), 0.25, 1)
    torch.testing.assert_close(bridge.to_torch(out), v.repeat_interleave(2, 1), rtol=1e-6, atol=1e-6)


def test_negative_window_is_refused(bridge):
    t = bridge.to_llaisys
    out = bridge.empty((1, 1, 8), "f32")
    args = [t(bridge.randn((1, 1, 8), "f32")), t(bridge.randn((1, 1, 8), "f32")), t(bridge.randn((1, 1, 8), "f32")),
            t(torch.tensor([0])), t(torch.tensor([0, 1], dtype=torch.int32)), t(torch.tensor([0, 1], dtype=torch.int32)),
            t(torch.tensor([0], dtype=torch.int32)), t(torch.tensor([0]))]
    for reference in (False, True):
        with pytest.raises(ValueError, match="window"):
            ops.paged_attention_window(out, *args, 1.0, -3, reference=reference)


def test_large_scores_and_one_dominant_key(bridge, gen):
    """Scores far apart (exp underflows to 0 for all but one key) and a max that grows block by
    block: the online rescale and the exp's large-negative range."""
    heads, kv_heads, d, n_keys = 4, 1, 64, 300
    q = torch.ones(1, heads, d)
    k = torch.zeros(n_keys, kv_heads, d)
    k[:, 0, :] = torch.linspace(-30, 30, n_keys)[:, None]  # scores from -1920 to 1920 (scale 1)
    k[150, 0, :] = 40.0  # not the last key: its weight must survive later blocks
    v = torch.randn(n_keys, kv_heads, d, generator=gen)
    t = bridge.to_llaisys
    rows = [Row([n_keys - 1], list(range(n_keys)))]
    args = [t(q), t(k), t(v), t(torch.tensor([n_keys - 1])), t(torch.tensor([0, 1], dtype=torch.int32)),
            t(torch.tensor([0, n_keys], dtype=torch.int32)), t(torch.arange(n_keys, dtype=torch.int32)),
            t(torch.arange(n_keys))]
    out = bridge.empty((1, heads, d), "f32")
    ops.paged_attention(out, *args, 1.0)
    expected = reference(q, k, v, rows, [torch.arange(n_keys)], 1.0)
    bridge.assert_close(out, expected, "f32")
    torch.testing.assert_close(bridge.to_torch(out)[0, 0], v[150, 0], atol=0, rtol=0)


def test_exp_accuracy(bridge):
    """The kernel's vectorised exp, seen through attention: two keys with scores 0 and x (x <= 0)
    and values 0 and 1 give exp(x) / (1 + exp(x)), which for x < -17 is the kernel's exp(x)
    itself (1 + exp(x) rounds to 1). Held to 2 ulp there, 4 ulp (three more roundings) above,
    and 0 below ln(FLT_MIN), where the result would be subnormal."""
    x = torch.cat([torch.linspace(-87.3, 0.0, 4001), torch.tensor([-88.0, -100.0, -1e4])])
    n, d = len(x), 16
    q = torch.zeros(n, 1, d)
    q[:, 0, 0] = x
    k, v = torch.zeros(2, 1, d), torch.zeros(2, 1, d)
    k[1, 0, 0], v[1, 0, :] = 1.0, 1.0
    t = bridge.to_llaisys
    args = [t(q), t(k), t(v), t(torch.ones(n, dtype=torch.int64)), t(torch.tensor([0, n], dtype=torch.int32)),
            t(torch.tensor([0, 2], dtype=torch.int32)), t(torch.tensor([0, 1], dtype=torch.int32)),
            t(torch.tensor([0, 1]))]
    out = bridge.empty((n, 1, d), "f32")
    ops.paged_attention(out, *args, 1.0)
    got = bridge.to_torch(out)[:, 0, 0].double()
    xd = x.double()
    exact = xd.exp() / (1 + xd.exp())
    ulp = torch.from_numpy(np.spacing(exact.float().numpy())).double()
    err = ((got - exact).abs() / ulp)[x >= -87.3]
    low = x[x >= -87.3] < -17
    assert err[low].max() <= 2.0, f"exp error {err[low].max():.2f} ulp for x < -17"
    assert err[~low].max() <= 4.0, f"error {err[~low].max():.2f} ulp for -17 <= x <= 0"
    assert (got[x < -87.34] == 0).all()


@pytest.mark.skipif(os.environ.get("LLAISYS_ISA") is not None, reason="already a child with a chosen path")
@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512"])
def test_every_simd_path(isa):
    """This file again with LLAISYS_ISA set (a lower path than the CPU's best is really taken:
    utils/cpu_isa.cpp). The path this process runs, and one the CPU lacks (it would fall back
    to the CPU's best), are skipped: the file has just run on it here."""
    skip_a_repeated_path(isa)
    # passive: the child's torch and llaisys OpenMP teams would otherwise spin against each other
    env = {"OMP_WAIT_POLICY": "passive", **os.environ, "LLAISYS_ISA": isa}
    child = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", __file__],
                           cwd=Path(__file__).parent.parent.parent, env=env, capture_output=True, text=True,
                           timeout=900)
    assert child.returncode == 0, child.stdout[-4000:] + child.stderr[-2000:]
