"""GFLOP/s of the CPU linear op: the plain SIMD GEMM (ops.linear over the HF [n, k] weight)
against the packed-panel GEMM (ops.PackedLinear), on the linear shapes of Qwen2.5 0.5B or 1.5B;
or, with --isa, the packed GEMM under several SIMD paths (LLAISYS_ISA) against each other.

    python tools/bench_gemm.py [--model 0.5b|1.5b] [--m 1 8 16 128 512] [--shapes qkv o ...]
                               [--dtype bf16] [--isa avx512 avx512bf16] [--out FILE]

f32 activations, weights of --dtype (bf16 by default, as the model stores them). For each
(shape, m) the two kernels run alternately, --repeats times each, every timed run long enough
(>= --min-time s) to average out the scheduler; figures are medians, all runs are in the JSON.
m = 1..16 is decode (weight streaming), m = 128, 512 prefill (FMA throughput). The ISA is chosen
once per process, so --isa runs each (shape, repeat, ISA) in a child process, the ISAs in turn;
the ratio is the last ISA's packed GFLOP/s over the first's. The host is shared, so read the
ratio column rather than the absolute figures (see doc/benchmarks.md on OMP_WAIT_POLICY)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

import llaisys
from llaisys import ops
from benchkit.stats import time_per_call

# model -> name -> (k, n): in_features -> out_features (fused as the model runs them)
MODELS = {
    "0.5b": {"qkv": (896, 1152), "o": (896, 896), "gate_up": (896, 9728), "down": (4864, 896),
             "lm_head": (896, 151936)},
    "1.5b": {"qkv": (1536, 2048), "o": (1536, 1536), "gate_up": (1536, 17920), "down": (8960, 1536),
             "lm_head": (1536, 151936)},
}
SHAPES = MODELS["0.5b"]


def bench(name: str, m: int, dtype: str, repeats: int, min_time: float, rng) -> dict:
    k, n = SHAPES[name]
    x = llaisys.Tensor.from_numpy(rng.standard_normal((m, k), dtype=np.float32))
    w = llaisys.Tensor.from_numpy(rng.standard_normal((n, k), dtype=np.float32) * 0.05, dtype=dtype)
    out = llaisys.Tensor((m, n), "f32")
    with ops.PackedLinear(w) as packed:
        plain_s, packed_s = [], []
        for _ in range(repeats):  # alternate, so a busy spell on the host hits both
            plain_s.append(time_per_call(lambda: ops.linear(out, x, w), min_time))
            packed_s.append(time_per_call(lambda: packed(out, x), min_time))
    flop = 2.0 * m * n * k
    plain, pk = float(np.median(plain_s)), float(np.median(packed_s))
    return {"shape": name, "m": m, "k": k, "n": n, "dtype": dtype,
            "plain_gflops": round(flop / plain / 1e9, 2), "packed_gflops": round(flop / pk / 1e9, 2),
            "ratio": round(plain / pk, 3), "plain_runs_s": [round(t, 6) for t in plain_s],
            "packed_runs_s": [round(t, 6) for t in packed_s]}


def packed_seconds(name: str, ms: list[int], dtype: str, min_time: float) -> dict[int, float]:
    """Seconds per PackedLinear call of shape `name` for each m (one run each, this process's ISA)."""
    k, n = SHAPES[name]
    rng = np.random.default_rng(0)
    w = llaisys.Tensor.from_numpy(rng.standard_normal((n, k), dtype=np.float32) * 0.05, dtype=dtype)
    out = {}
    with ops.PackedLinear(w) as packed:
        for m in ms:
            x = llaisys.Tensor.from_numpy(rng.standard_normal((m, k), dtype=np.float32))
            y = llaisys.Tensor((m, n), "f32")
            out[m] = time_per_call(lambda: packed(y, x), min_time)
    return out


def compare_isas(name: str, ms: list[int], args) -> list[dict]:
    """The packed GEMM of shape `name` under each of args.isa, child processes taking turns."""
    k, n = SHAPES[name]
    runs = {isa: {m: [] for m in ms} for isa in args.isa}
    for _ in range(args.repeats):
        for isa in args.isa:
            cmd = [sys.executable, __file__, "--child", "--model", args.model, "--shapes", name, "--dtype", args.dtype,
                   "--min-time", str(args.min_time), "--m", *map(str, ms)]
            child = subprocess.run(cmd, env=dict(os.environ, LLAISYS_ISA=isa), capture_output=True, text=True,
                                   check=True)
            for m, sec in json.loads(child.stdout.splitlines()[-1]).items():
                runs[isa][int(m)].append(sec)
    rows = []
    for m in ms:
        flop = 2.0 * m * n * k
        gf = {isa: round(flop / float(np.median(runs[isa][m])) / 1e9, 2) for isa in args.isa}
        rows.append({"shape": name, "m": m, "k": k, "n": n, "dtype": args.dtype, "gflops": gf,
                     "ratio": round(gf[args.isa[-1]] / gf[args.isa[0]], 3),
                     "runs_s": {isa: [round(t, 6) for t in runs[isa][m]] for isa in args.isa}})
    return rows


def main() -> None:
    global SHAPES
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="0.5b", choices=list(MODELS))
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--m", nargs="+", type=int, default=[1, 8, 16, 128, 512])
    ap.add_argument("--dtype", default="bf16", choices=["f32", "f16", "bf16"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=0.2)
    ap.add_argument("--out", default="bench_gemm.json")
    ap.add_argument("--isa", nargs="+", help="compare the packed GEMM under these LLAISYS_ISA values")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # one compare_isas run
    args = ap.parse_args()
    SHAPES = MODELS[args.model]
    if args.child:
        print(json.dumps(packed_seconds(args.shapes[0], args.m, args.dtype, args.min_time)))
        return
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, threads: {os.environ.get('OMP_NUM_THREADS', 'all')}"
          f" of {os.cpu_count()}, ISA {os.environ.get('LLAISYS_ISA', 'best')}, OMP_WAIT_POLICY="
          f"{os.environ.get('OMP_WAIT_POLICY', 'unset')}, load average {os.getloadavg()[0]:.2f} at start", flush=True)
    rng = np.random.default_rng(0)
    rows = []
    if args.isa:
        print(f"{'shape':8} {'k':>5} {'n':>7} {'m':>4} " + " ".join(f"{isa + ' GFLOP/s':>18}" for isa in args.isa)
              + f" {'ratio':>6}")
        for name in args.shapes:
            for r in compare_isas(name, args.m, args):
                rows.append(r)
                print(f"{name:8} {r['k']:5} {r['n']:7} {r['m']:4} "
                      + " ".join(f"{r['gflops'][isa]:18.2f}" for isa in args.isa) + f" {r['ratio']:6.2f}", flush=True)
        with open(args.out, "w") as f:
            json.dump({"model": args.model, "load_avg_end": round(os.getloadavg()[0], 2), "rows": rows}, f, indent=2)
        return
    print(f"{'shape':8} {'k':>5} {'n':>7} {'m':>4} {'plain GFLOP/s':>14} {'packed GFLOP/s':>15} {'ratio':>6}")
    for name in args.shapes:
        for m in args.m:
            r = bench(name, m, args.dtype, args.repeats, args.min_time, rng)
            rows.append(r)
            print(f"{name:8} {r['k']:5} {r['n']:7} {m:4} {r['plain_gflops']:14.2f} {r['packed_gflops']:15.2f} "
                  f"{r['ratio']:6.2f}", flush=True)
    with open(args.out, "w") as f:
        json.dump({"model": args.model, "load_avg_end": round(os.getloadavg()[0], 2), "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
