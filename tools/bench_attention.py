"""The CPU paged-attention op alone: the blocked SIMD kernel (ops.paged_attention) against the
plain per-key reference it replaced (ops.paged_attention_reference), on one layer's attention
of Qwen2.5-0.5B (14 heads, 2 kv heads, head dim 64) or Qwen2.5-1.5B (12 / 2 / 128).

    python tools/bench_attention.py [--models 0.5b 1.5b] [--cases decode16x512 ...] [--out FILE]

f32 queries, a KV cache of --kv-dtype (bf16 by default; q8_0 is quantized with ops.quantize) in the BLOCK
layout (16-slot blocks in shuffled order, so the slot lists are not contiguous). Cases:
decode R x C is R rows of one query token each after C cached positions; prefill is one
512-token chunk from position 0 (causal). GB/s counts the K and V bytes of the rows once
(what a decode step must stream). Both kernels run alternately, --repeats times each, every
timed run at least --min-time s; figures are medians, all runs are in the JSON. The host is
shared, so read the ratio column rather than the absolute figures."""

from __future__ import annotations

import argparse
import json
import math
import os

import numpy as np

import llaisys
from llaisys import ops
from llaisys.dtypes import is_quantized, quant_byte_shape
from benchkit.stats import run_header, time_per_call

MODELS = {"0.5b": (14, 2, 64), "1.5b": (12, 2, 128)}  # heads, kv heads, head dim
CASES = {  # name -> (rows, query tokens per row, cached positions per row)
    "decode16x512": (16, 1, 512),
    "decode16x2048": (16, 1, 2048),
    "decode1x2048": (1, 1, 2048),
    "prefill512": (1, 512, 512),
}
BLOCK = 16
DTYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2}
KV_DTYPES = (*DTYPE_BYTES, "q8_0")


def row_bytes(d: int, kv_dtype: str) -> int:
    """Bytes of one head's K (or V) row of d values."""
    return quant_byte_shape((d,), kv_dtype)[0] if is_quantized(kv_dtype) else d * DTYPE_BYTES[kv_dtype]


def kv_tensor(x: np.ndarray, kv_dtype: str) -> llaisys.Tensor:
    if not is_quantized(kv_dtype):
        return llaisys.Tensor.from_numpy(x, dtype=kv_dtype)
    out = llaisys.Tensor(x.shape, kv_dtype)
    ops.quantize(out, llaisys.Tensor.from_numpy(x))
    return out


def make_inputs(model: str, case: str, kv_dtype: str, rng) -> tuple[list, tuple, float]:
    heads, kv_heads, d = MODELS[model]
    rows, q_len, ctx = CASES[case]
    blocks_per_row = -(-ctx // BLOCK)
    n_blocks = rows * blocks_per_row
    block_ids = rng.permutation(n_blocks).reshape(rows, blocks_per_row)  # each row's block table
    j = np.arange(ctx)
    kv_slots = np.concatenate([block_ids[r][j // BLOCK] * BLOCK + j % BLOCK for r in range(rows)]).astype(np.int32)
    kv_pos = np.tile(j, rows).astype(np.int64)
    q_pos = np.tile(np.arange(ctx - q_len, ctx), rows).astype(np.int64)
    n = rows * q_len
    t = llaisys.Tensor.from_numpy
    q = t(rng.standard_normal((n, heads, d), dtype=np.float32))
    k = kv_tensor(rng.standard_normal((n_blocks * BLOCK, kv_heads, d), dtype=np.float32), kv_dtype)
    v = kv_tensor(rng.standard_normal((n_blocks * BLOCK, kv_heads, d), dtype=np.float32), kv_dtype)
    args = [q, k, v, t(q_pos), t(np.arange(0, n + 1, q_len, dtype=np.int32)),
            t(np.arange(0, rows * ctx + 1, ctx, dtype=np.int32)), t(kv_slots), t(kv_pos)]
    kv_bytes = rows * ctx * kv_heads * 2 * row_bytes(d, kv_dtype)
    return args, (n, heads, d), kv_bytes


def bench(model: str, case: str, kv_dtype: str, repeats: int, min_time: float, rng) -> dict:
    args, out_shape, kv_bytes = make_inputs(model, case, kv_dtype, rng)
    scale = 1.0 / math.sqrt(out_shape[2])
    out_ref, out_new = llaisys.Tensor(out_shape, "f32"), llaisys.Tensor(out_shape, "f32")
    ref_s, new_s = [], []
    for _ in range(repeats):  # alternate, so a busy spell on the host hits both
        ref_s.append(time_per_call(lambda: ops.paged_attention_reference(out_ref, *args, scale), min_time))
        new_s.append(time_per_call(lambda: ops.paged_attention(out_new, *args, scale), min_time))
    diff = float(np.abs(out_ref.numpy() - out_new.numpy()).max())
    ref, new = float(np.median(ref_s)), float(np.median(new_s))
    return {"model": model, "case": case, "kv_dtype": kv_dtype, "kv_mb": round(kv_bytes / 1e6, 2),
            "ref_ms": round(ref * 1e3, 3), "new_ms": round(new * 1e3, 3),
            "ref_gbs": round(kv_bytes / ref / 1e9, 2), "new_gbs": round(kv_bytes / new / 1e9, 2),
            "speedup": round(ref / new, 2), "max_abs_diff": diff,
            "ref_runs_s": [round(x, 6) for x in ref_s], "new_runs_s": [round(x, 6) for x in new_s]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["0.5b"], choices=list(MODELS))
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--kv-dtype", default="bf16", choices=list(KV_DTYPES))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=0.3)
    ap.add_argument("--out", default="bench_attention.json")
    args = ap.parse_args()
    print(run_header(f"ISA {os.environ.get('LLAISYS_ISA', 'best')}", f"KV {args.kv_dtype}"), flush=True)
    rng = np.random.default_rng(0)
    print(f"{'model':5} {'case':14} {'KV MB':>7} {'ref ms':>9} {'new ms':>9} {'ref GB/s':>9} {'new GB/s':>9} "
          f"{'speedup':>8}")
    rows = []
    for model in args.models:
        for case in args.cases:
            r = bench(model, case, args.kv_dtype, args.repeats, args.min_time, rng)
            rows.append(r)
            print(f"{model:5} {case:14} {r['kv_mb']:7.2f} {r['ref_ms']:9.3f} {r['new_ms']:9.3f} {r['ref_gbs']:9.2f} "
                  f"{r['new_gbs']:9.2f} {r['speedup']:7.2f}x", flush=True)
    with open(args.out, "w") as f:
        json.dump({"load_avg_end": round(os.getloadavg()[0], 2), "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
