"""GFLOP/s of the CPU linear op: the plain SIMD GEMM (ops.linear over the HF [n, k] weight)
against the packed-panel GEMM (ops.PackedLinear), on the linear shapes of Qwen2.5-0.5B.

    python tools/bench_gemm.py [--m 1 8 16 128 512] [--shapes qkv o ...] [--dtype bf16] [--out FILE]

f32 activations, weights of --dtype (bf16 by default, as the model stores them). For each
(shape, m) the two kernels run alternately, --repeats times each, every timed run long enough
(>= --min-time s) to average out the scheduler; figures are medians, all runs are in the JSON.
m = 1..16 is decode (weight streaming), m = 128, 512 prefill (FMA throughput). The host is
shared, so read the ratio column rather than the absolute figures (see doc/benchmarks.md on
OMP_WAIT_POLICY)."""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

import llaisys
from llaisys import ops

# name -> (k, n): in_features -> out_features of Qwen2.5-0.5B (fused as the model runs them)
SHAPES = {
    "qkv": (896, 1152),
    "o": (896, 896),
    "gate_up": (896, 9728),
    "down": (4864, 896),
    "lm_head": (896, 151936),
}


def _time(fn, min_time: float) -> float:
    """Seconds per call of fn, over as many calls as fill min_time (at least one)."""
    fn()  # warm: page in, spin up the OpenMP team
    calls, t0 = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= min_time:
            return elapsed / calls


def bench(name: str, m: int, dtype: str, repeats: int, min_time: float, rng) -> dict:
    k, n = SHAPES[name]
    x = llaisys.Tensor.from_numpy(rng.standard_normal((m, k), dtype=np.float32))
    w = llaisys.Tensor.from_numpy(rng.standard_normal((n, k), dtype=np.float32) * 0.05, dtype=dtype)
    out = llaisys.Tensor((m, n), "f32")
    with ops.PackedLinear(w) as packed:
        plain_s, packed_s = [], []
        for _ in range(repeats):  # alternate, so a busy spell on the host hits both
            plain_s.append(_time(lambda: ops.linear(out, x, w), min_time))
            packed_s.append(_time(lambda: packed(out, x), min_time))
    flop = 2.0 * m * n * k
    plain, pk = float(np.median(plain_s)), float(np.median(packed_s))
    return {"shape": name, "m": m, "k": k, "n": n, "dtype": dtype,
            "plain_gflops": round(flop / plain / 1e9, 2), "packed_gflops": round(flop / pk / 1e9, 2),
            "ratio": round(plain / pk, 3), "plain_runs_s": [round(t, 6) for t in plain_s],
            "packed_runs_s": [round(t, 6) for t in packed_s]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--m", nargs="+", type=int, default=[1, 8, 16, 128, 512])
    ap.add_argument("--dtype", default="bf16", choices=["f32", "f16", "bf16"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=0.2)
    ap.add_argument("--out", default="bench_gemm.json")
    args = ap.parse_args()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, threads: {os.environ.get('OMP_NUM_THREADS', 'all')}"
          f" of {os.cpu_count()}, ISA {os.environ.get('LLAISYS_ISA', 'best')}, OMP_WAIT_POLICY="
          f"{os.environ.get('OMP_WAIT_POLICY', 'unset')}, load average {os.getloadavg()[0]:.2f} at start", flush=True)
    rng = np.random.default_rng(0)
    print(f"{'shape':8} {'k':>5} {'n':>7} {'m':>4} {'plain GFLOP/s':>14} {'packed GFLOP/s':>15} {'ratio':>6}")
    rows = []
    for name in args.shapes:
        for m in args.m:
            r = bench(name, m, args.dtype, args.repeats, args.min_time, rng)
            rows.append(r)
            print(f"{name:8} {r['k']:5} {r['n']:7} {m:4} {r['plain_gflops']:14.2f} {r['packed_gflops']:15.2f} "
                  f"{r['ratio']:6.2f}", flush=True)
    with open(args.out, "w") as f:
        json.dump({"load_avg_end": round(os.getloadavg()[0], 2), "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
