"""GFLOP/s and GB/s (weight bytes read per call) of the quantized linear kernels against the
bf16 packed GEMM, on the linear shapes of Qwen2.5 1.5B (or 0.5B) at decode and prefill sizes.

    python tools/bench_quant_linear.py [--model 1.5b|0.5b] [--m 1 16 128] [--formats q4_k q8_0 ...]
                                       [--shapes qkv o gate_up down lm_head] [--out FILE]
    python tools/bench_quant_linear.py --crossover --shapes o --m 2 4 8 16 32 [--formats ...]
    python tools/bench_quant_linear.py --stream --shapes gate_up --formats q4_k [--repeats 5]
    OMP_NUM_THREADS=1 python tools/bench_quant_linear.py --clock cpu ...   # G MAC/s per core

Each (shape, m) times the bf16 PackedLinear and one PackedLinear per format (random GGUF blocks
with sane scales: the kernels' speed does not depend on the values), alternately, --repeats
times each, every timed run >= --min-time s; figures are medians, every run is in the JSON. The
CPU model, the SIMD flags and the llaisys ISA path are recorded (benchkit.host). GB/s counts the
weight's bytes once per call, the traffic decode is bound by; at m = 128 GFLOP/s is the figure
to read. The host may be shared: compare columns of one run rather than runs.

--clock cpu times each call by the process's CPU time instead of the wall clock: with
OMP_NUM_THREADS=1 that is the kernels' cost per core, which a busy shared host disturbs far
less than wall time (it still shares caches); the GMAC/s column is then per core.

--crossover times, per format, the int8 dot-product path against the float (dequantize + f32
GEMM) path at each m, in child processes alternating between the two (LLAISYS_QUANT_F32_ROWS),
and reports the smallest m from which the float path stays faster: the figures behind
the crossovers in src/ops/linear/cpu/quant_plan.cpp (printed by `llaisys info`).

--stream times decode's weight stream without the rest of a step: per format, as many distinct
copies of one shape as a model has layers (28 for the 1.5B: 434 MB of Q4_K gate_up, far beyond
any L3 here), m = 1, every copy in turn (one pass ~10 ms). Each round times passes for about a
second, then measures the read bandwidth (tools/bench_limits) at once, and prints the weights'
GB/s beside it and their share of it. A shared host's bandwidth may change within a minute
(a Zen 4 VM moved between ~35 and ~65 GB/s): read the share round by round, not of a mean."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

import llaisys
from llaisys import ops

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit.host import describe, machine  # noqa: E402
from benchkit.stats import time_per_call  # noqa: E402

MODELS = {  # name -> (k, n)
    "0.5b": {"qkv": (896, 1152), "o": (896, 896), "gate_up": (896, 9728), "down": (4864, 896),
             "lm_head": (896, 151936)},
    "1.5b": {"qkv": (1536, 2048), "o": (1536, 1536), "gate_up": (1536, 17920), "down": (8960, 1536),
             "lm_head": (1536, 151936)},
}
# format -> (block size, block bytes, byte offsets of its f16 scales)
FORMATS = {"q4_0": (32, 18, (0,)), "q5_0": (32, 22, (0,)), "q8_0": (32, 34, (0,)), "q4_1": (32, 20, (0, 2)),
           "q5_1": (32, 24, (0, 2)),
           "q2_k": (256, 84, (80, 82)), "q3_k": (256, 110, (108,)), "q4_k": (256, 144, (0, 2)),
           "q5_k": (256, 176, (0, 2)), "q6_k": (256, 210, (208,)), "iq4_xs": (256, 136, (0,)),
           "iq2_xxs": (256, 66, (0,)), "iq2_xs": (256, 74, (0,)), "iq2_s": (256, 82, (0,)), "iq3_xxs": (256, 98, (0,)),
           "iq3_s": (256, 110, (0,)), "iq1_s": (256, 50, (0,)),
           "iq1_m": (256, 56, ())}  # (IQ1_M's d is spread over its scales' top nibbles: left random)


def random_blocks(fmt: str, n: int, k: int, rng) -> np.ndarray:
    """uint8 [n, k / block * block bytes]: random quants, f16 scales around 0.01."""
    bs, bb, scale_at = FORMATS[fmt]
    b = rng.integers(0, 256, (n, k // bs, bb), dtype=np.uint8)
    for off in scale_at:
        b[:, :, off:off + 2] = np.full((n, k // bs), 0.01, np.float16).view(np.uint8).reshape(n, k // bs, 2)
    return b.reshape(n, -1)


def bench_shape(name: str, k: int, n: int, m: int, formats: list[str], repeats: int, min_time: float, rng,
                timer=time_per_call) -> list:
    x = llaisys.Tensor.from_numpy(rng.standard_normal((m, k), dtype=np.float32))
    out = llaisys.Tensor((m, n), "f32")
    kernels = {}  # label -> (PackedLinear, weight bytes)
    wb = llaisys.Tensor.from_numpy(rng.standard_normal((n, k), dtype=np.float32) * 0.05, dtype="bf16")
    kernels["bf16"] = (ops.PackedLinear(wb), n * k * 2)
    wb.close()
    for fmt in formats:
        if k % FORMATS[fmt][0]:
            continue  # k not a multiple of this format's block (the 0.5B's 896 for the K-quants)
        blocks = random_blocks(fmt, n, k, rng)
        w = llaisys.Tensor.from_numpy(blocks, fmt, shape=(n, k))
        kernels[fmt] = (ops.PackedLinear(w), blocks.nbytes)
        w.close()
    runs = {label: [] for label in kernels}
    for _ in range(repeats):  # alternate, so a busy spell on the host hits every kernel
        for label, (packed, _) in kernels.items():
            runs[label].append(timer(lambda: packed(out, x), min_time))
    rows = []
    for label, (packed, nbytes) in kernels.items():
        s = float(np.median(runs[label]))
        rows.append({"shape": name, "k": k, "n": n, "m": m, "weight": label, "weight_bytes": nbytes,
                     "ms": round(s * 1e3, 4), "gmacs": round(m * n * k / s / 1e9, 2), "gflops": round(2.0 * m * n * k / s / 1e9, 2),
                     "gbps": round(nbytes / s / 1e9, 2), "vs_bf16": None, "runs_s": [round(t, 6) for t in runs[label]]})
        packed.close()
    base = next(r for r in rows if r["weight"] == "bf16")["ms"]
    for r in rows:
        r["vs_bf16"] = round(base / r["ms"], 3)
    return rows


CHILD = """
import json, sys, numpy as np, llaisys
from llaisys import ops
sys.path.insert(0, {tools!r})
from bench_quant_linear import random_blocks
from benchkit.stats import time_per_call
k, n, fmt, ms, min_time = {k}, {n}, {fmt!r}, {ms!r}, {min_time}
rng = np.random.default_rng(0)
w = llaisys.Tensor.from_numpy(random_blocks(fmt, n, k, rng), fmt, shape=(n, k))
res = {{}}
with ops.PackedLinear(w) as packed:
    for m in ms:
        x = llaisys.Tensor.from_numpy(rng.standard_normal((m, k), dtype=np.float32))
        out = llaisys.Tensor((m, n), "f32")
        res[m] = time_per_call(lambda: packed(out, x), min_time)
print(json.dumps(res))
"""


def crossover(shape: str, k: int, n: int, formats: list[str], ms: list[int], repeats: int, min_time: float) -> list:
    """Per format, seconds per call of the int8 path and the float path at each m (children
    under LLAISYS_QUANT_F32_ROWS, which the library reads once per process), alternately;
    returns rows with both medians and the smallest m from which the float path stays faster."""
    import subprocess
    out = []
    for fmt in formats:
        if k % FORMATS[fmt][0]:
            continue
        runs = {"int8": [], "f32": []}
        for _ in range(repeats):
            for path, rows in (("int8", str(2**40)), ("f32", "0")):
                code = CHILD.format(tools=str(Path(__file__).resolve().parent), k=k, n=n, fmt=fmt, ms=ms,
                                    min_time=min_time)
                child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                       env=dict(os.environ, LLAISYS_QUANT_F32_ROWS=rows))
                runs[path].append(json.loads(child.stdout.splitlines()[-1]))
        med = {p: {m: float(np.median([r[str(m)] for r in runs[p]])) for m in ms} for p in runs}
        faster = [m for m in ms if med["f32"][m] < med["int8"][m]]
        cross = next((m for m in ms if all(x in faster for x in ms if x >= m)), None)
        for m in ms:
            out.append({"shape": shape, "k": k, "n": n, "weight": fmt, "m": m, "int8_ms": round(med["int8"][m] * 1e3, 4),
                        "f32_ms": round(med["f32"][m] * 1e3, 4),
                        "f32_speedup": round(med["int8"][m] / med["f32"][m], 3), "crossover_m": cross})
            print(f"{shape:8} {fmt:5} m {m:4}  int8 {med['int8'][m] * 1e3:9.3f} ms  f32 {med['f32'][m] * 1e3:9.3f} ms"
                  f"  f32 speedup {med['int8'][m] / med['f32'][m]:5.2f}", flush=True)
        print(f"{shape:8} {fmt:5} crossover m = {cross}", flush=True)
    return out


def stream(name: str, k: int, n: int, layers: int, formats: list[str], repeats: int, threads: int) -> list:
    """Per format and round: the m = 1 weight stream over `layers` distinct copies (GB/s), then the
    read bandwidth at once."""
    sys.path.insert(0, str(Path(__file__).resolve().parent / "bench_limits"))
    from bench_limits import measure
    rng = np.random.default_rng(0)
    x = llaisys.Tensor.from_numpy(rng.standard_normal((1, k), dtype=np.float32))
    out = llaisys.Tensor((1, n), "f32")
    rows = []
    for fmt in formats:
        if k % FORMATS[fmt][0]:
            continue
        copies, nbytes = [], 0
        for _ in range(layers):
            blocks = random_blocks(fmt, n, k, rng)
            w = llaisys.Tensor.from_numpy(blocks, fmt, shape=(n, k))
            copies.append(ops.PackedLinear(w))
            w.close()
            nbytes += blocks.nbytes
        for r in range(repeats):
            passes, t_end = [], time.perf_counter() + 1.0
            while time.perf_counter() < t_end or len(passes) < 3:
                t = time.perf_counter()
                for c in copies:
                    c(out, x)
                passes.append(time.perf_counter() - t)
            gbps = nbytes / float(np.median(passes)) / 1e9
            read = measure(threads)["read_bandwidth_gb_s"]
            rows.append({"shape": name, "k": k, "n": n, "copies": layers, "weight": fmt, "weight_bytes": nbytes,
                         "round": r, "passes": len(passes), "gbps": round(gbps, 2), "read_gb_s": read,
                         "share": round(gbps / read, 3)})
            print(f"{name:8} {fmt:6} round {r}: {gbps:6.1f} GB/s of weights, read bandwidth {read:6.1f} GB/s, "
                  f"share {gbps / read:5.2f}", flush=True)
        for c in copies:
            c.close()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="1.5b")
    ap.add_argument("--m", type=int, nargs="+", default=[1, 16, 128])
    ap.add_argument("--formats", nargs="+", choices=sorted(FORMATS), default=["q4_k", "q6_k", "q8_0", "q5_0"])
    ap.add_argument("--shapes", nargs="+", default=None, help="subset of qkv o gate_up down lm_head")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=0.3)
    ap.add_argument("--out", default="bench_quant_linear.json")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="cpu: time by process CPU time (with OMP_NUM_THREADS=1: the cost per core)")
    ap.add_argument("--crossover", action="store_true",
                    help="time the int8 and the float path of each format at each --m (children) instead")
    ap.add_argument("--stream", action="store_true",
                    help="decode's weight stream: m = 1 over one copy of the shape per layer, beside the read bandwidth")
    args = ap.parse_args(argv)
    shapes = MODELS[args.model]
    names = args.shapes or list(shapes)
    for s in names:
        if s not in shapes:
            ap.error(f"--shapes: unknown shape {s!r} (known: {' '.join(shapes)})")
    env = machine()
    print(describe(env))
    if args.crossover:
        rows = [r for name in names for r in crossover(name, *shapes[name], args.formats, args.m, args.repeats,
                                                        args.min_time)]
        Path(args.out).write_text(json.dumps({"machine": env, "model": args.model, "crossover": rows}, indent=1))
        print(f"wrote {args.out}")
        return 0
    if args.stream:
        layers = {"0.5b": 24, "1.5b": 28}[args.model]
        threads = llaisys.runtime.num_threads()
        rows = [r for name in names for r in stream(name, *shapes[name], layers, args.formats, args.repeats, threads)]
        Path(args.out).write_text(json.dumps({"machine": env, "model": args.model, "stream": rows}, indent=1))
        print(f"wrote {args.out}")
        return 0
    clock = time.process_time if args.clock == "cpu" else time.perf_counter

    def timer(fn, min_time):
        return time_per_call(fn, min_time, clock)
    print(f"clock: {args.clock}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    print(f"{'shape':8} {'m':>4} {'weight':6} {'ms':>9} {'GMAC/s':>7} {'GB/s':>6} {'vs bf16':>7}")
    rng = np.random.default_rng(0)
    rows = []
    for name in names:
        k, n = shapes[name]
        for m in args.m:
            for r in bench_shape(name, k, n, m, args.formats, args.repeats, args.min_time, rng, timer):
                rows.append(r)
                print(f"{name:8} {m:4} {r['weight']:6} {r['ms']:9.3f} {r['gmacs']:7.2f} {r['gbps']:6.1f} "
                      f"{r['vs_bf16']:7.2f}", flush=True)
    Path(args.out).write_text(json.dumps({"machine": env, "model": args.model, "clock": args.clock,
                                          "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "rows": rows}, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
