"""paged_attention over a q8_0 KV cache (llama.cpp's -ctk q8_0 -ctv q8_0: blocks of 32 values
with one f16 scale, 34 bytes each; a head's row is head_dim / 32 blocks). The blocked SIMD
kernel and the plain reference both read the blocks themselves; each must equal float64
attention over the dequantized K/V (gguf-py's own dequantize of the same bytes) up to f32
rounding. Batches: GQA, ragged rows (decode, a prefill chunk starting mid-context, contexts
over several 32-key blocks and not a multiple of them), in both layouts' slot orders. Slots no
row lists hold blocks with a NaN scale, so reading one shows. test_every_simd_path re-runs
this file with LLAISYS_ISA=scalar, avx2 and (where the CPU has it) avx512."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import llaisys
from llaisys import ops

from cpu_features import skip_a_repeated_path
from test_paged_attention import reference, row, slot_lists  # (test/ops is on sys.path, as for quant_cases)

gguf = pytest.importorskip("gguf")
Q8_0 = gguf.GGMLQuantizationType.Q8_0

# name -> (heads, kv_heads, d, rows)
CASES = {
    "ragged_qwen05": (14, 2, 64, [row(1, 1037), row(37, 100, first=63), row(1, 1), row(5, 5), row(1, 70)]),
    "prefill_qwen15": (12, 2, 128, [row(45, 300, first=255), row(1, 33)]),
    "mha_d32": (3, 3, 32, [row(9, 9), row(2, 130)]),
}


def quantized_cache(gen: torch.Generator, n_slots: int, kv_heads: int, d: int, listed: torch.Tensor):
    """(raw q8_0 bytes [n_slots, kv_heads, d / 32 * 34], their gguf dequantization [n_slots,
    kv_heads, d] f32) of normal(0, 1) values; unlisted slots get NaN scales (raw only)."""
    x = torch.randn(n_slots * kv_heads, d, generator=gen).numpy()
    raw = gguf.quants.quantize(x, Q8_0)  # [rows, d / 32 * 34]
    values = gguf.quants.dequantize(raw, Q8_0).astype(np.float32).reshape(n_slots, kv_heads, d)
    raw = raw.reshape(n_slots, kv_heads, -1).copy()
    nan = np.array([0x7E00], dtype=np.uint16).view(np.uint8)
    for b in range(d // 32):
        raw[~listed.numpy(), :, 34 * b:34 * b + 2] = nan
    return raw, torch.from_numpy(values)


def run_case(bridge, gen, name: str, layout: str, act: str):
    heads, kv_heads, d, rows = CASES[name]
    slots, n_slots = slot_lists(gen, rows, layout)
    listed = torch.zeros(n_slots, dtype=torch.bool)
    for sl in slots:
        listed[sl] = True
    n = sum(len(r.q_pos) for r in rows)
    q = bridge.randn((n, heads, d), act)
    k_raw, k = quantized_cache(gen, n_slots, kv_heads, d, listed)
    v_raw, v = quantized_cache(gen, n_slots, kv_heads, d, listed)
    t = bridge.to_llaisys
    shape = (n_slots, kv_heads, d)
    args = [t(q), llaisys.Tensor.from_numpy(k_raw, "q8_0", shape=shape),
            llaisys.Tensor.from_numpy(v_raw, "q8_0", shape=shape),
            t(torch.tensor([p for r in rows for p in r.q_pos], dtype=torch.int64)),
            t(torch.tensor([0] + [len(r.q_pos) for r in rows], dtype=torch.int32).cumsum(0).to(torch.int32)),
            t(torch.tensor([0] + [len(r.kv_pos) for r in rows], dtype=torch.int32).cumsum(0).to(torch.int32)),
            t(torch.cat(slots).to(torch.int32)),
            t(torch.tensor([p for r in rows for p in r.kv_pos], dtype=torch.int64))]
    scale = 1.0 / math.sqrt(d)
    fast, plain = bridge.empty((n, heads, d), act), bridge.empty((n, heads, d), act)
    ops.paged_attention(fast, *args, scale)
    ops.paged_attention_reference(plain, *args, scale)
    return fast, plain, reference(q, k, v, rows, slots, scale)


@pytest.mark.parametrize("act", ["f32", "bf16"])
@pytest.mark.parametrize("layout", ["block", "slot"])
@pytest.mark.parametrize("name", list(CASES))
def test_q8_0_cache_is_attention_over_its_dequantized_values(bridge, gen, name, layout, act):
    fast, plain, expected = run_case(bridge, gen, name, layout, act)
    for got in (fast, plain):
        assert not bridge.to_torch(got).isnan().any(), "an unlisted slot (NaN scale) was read"
        bridge.assert_close(got, expected, act, scale=2.0)


def test_q8_0_head_dims_must_be_whole_blocks():
    """A q8_0 tensor's rows are whole 32-value blocks: a cache with head dim 48 cannot be made
    (the model-level refusal, at KV cache creation, is in test/engine/test_kv_dtype.py)."""
    with pytest.raises(ValueError, match="block size"):
        llaisys.Tensor((4, 1, 48), "q8_0")


@pytest.mark.skipif(os.environ.get("LLAISYS_ISA") is not None, reason="already a child with a chosen path")
@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512"])
def test_every_simd_path(isa):
    skip_a_repeated_path(isa)  # this process's own path, or one the CPU lacks: just run here
    env = {"OMP_WAIT_POLICY": "passive", **os.environ, "LLAISYS_ISA": isa}
    child = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", __file__],
                           cwd=Path(__file__).parent.parent.parent, env=env, capture_output=True, text=True,
                           timeout=600)
    assert child.returncode == 0, child.stdout[-4000:] + child.stderr[-2000:]
