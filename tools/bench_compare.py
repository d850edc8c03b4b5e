"""llaisys against llama.cpp and HF transformers on the same weights, same machine, same threads.

    python tools/bench_compare.py [--models NAME ...] [--backends llaisys llama.cpp-bf16 ...]
                                  [--repeats 3] [--threads N] [--quick] [--out bench_compare.json]
                                  [--device cpu|nvidia] [--workloads prefill decode batch offline]
                                  [--quant q4_k_m|q8_0] [--gguf FILE ...]

Workloads (greedy, random token ids from a fixed seed, the same for every backend; every
backend gets the same warm-up: each timed run follows an untimed one of the same shape, in a
fresh cache, for prefill, decode and every batch):
  prefill    one 512-token prompt into a fresh KV cache; the first run is untimed, the
             second (again into a fresh cache) timed                  -> prompt tok/s
  decode     64-token prompt (untimed), then 128 tokens one at a time -> output tok/s
  batch-B    B sequences of 32 prompt tokens (untimed), then 32 decode steps
             with all B sequences in each step (B = 1 4 8 16 32)    -> aggregate output tok/s
  offline    llaisys only: 32 requests, mixed lengths (prompts 16..256, outputs 16..128), all
             submitted at once to the engine's continuous batching -> requests/s, TTFT, TPOT
             (llama.cpp's own scheduler is its server: tools/bench_servers.py compares them)

Like for like (the headline columns), and what differs in the labelled ones:
  llaisys               every greedy row computes all of its logits as the peers do
                        (LLAISYS_GREEDY_SCREEN=0) and buffers stay in small pages
                        (LLAISYS_HUGE_PAGES=0); f32 KV cache
  llaisys-noamx         llaisys as in the `llaisys` column with LLAISYS_AMX=0: on a CPU with AMX the
                        quantized float path (prefill, batches from 8-12 rows) on AVX-512 FMAs,
                        as on a CPU without AMX (with --quant; not among the defaults)
  llaisys-default       llaisys as users get it: the greedy lm_head screen (the same tokens,
                        fewer lm_head bytes read per step), huge-page advice and the default KV
                        dtype (f16, as llama.cpp's default: compare with llama.cpp-*-kvf16)
  llama.cpp-bf16        llama.cpp (tools/build_llama_cpp.py: the llama.cpp vendored in
                        llama-cpp-python, built for this CPU) on a bf16 GGUF written by
                        `llaisys export-gguf` from our directory (exactly our values), f32 KV
                        cache like llaisys; batch-B runs with per-sequence KV cells and with one
                        unified buffer, and reports the better of the two (which: `batch-B kv`)
  llama.cpp-bf16-kvf16  the same with llama.cpp's default f16 KV cache
  llama.cpp-f16         f16 GGUF (our values rounded to f16: on AVX2 llama.cpp's faster path,
                        as ggml has F16C but no bf16 arithmetic there), f32 KV; -kvf16 with f16 KV
  hf-bf16 / hf-f32      transformers, torch==2.13.0, with its KV cache (its default, the model dtype)

--quant q4_k_m|q8_0 runs llaisys (llaisys, llaisys-default) and llama.cpp (llama.cpp with f32 KV,
llama.cpp-kvf16) on one GGUF file per model as it is (`hub.resolve_model(name, quant=...)`): the
same bytes, no conversion; --gguf FILE ... does the same on given files (tools/make_moe_gguf.py's
random Qwen3-30B-A3B-shaped one). "decode weight GB/s" is decode tok/s times the bytes a token
reads: every weight but an untied embedding, counted from what was loaded (for --quant, the
file's tensors), and of a mixture of experts only the ACTIVE weights: attention, router, lm_head
and top k / n of the expert tensors (bench_limits.decode_bytes).

With --device nvidia the same workloads run on the GPU (llaisys and transformers on cuda:0; the
llama.cpp build is CPU-only and is left out), batch-B goes up to 256 sequences, and the llaisys
worker also measures the GPU's device-to-device copy bandwidth and reports decode as weight
bytes read per second against it ("decode weight GB/s", "d2d copy GB/s").

Each backend runs in its own process (tools/bench_compare_workers.py); the repeats alternate
backends (A B C A B C ...); the table shows medians with min-max and the ratio of llaisys to each
peer. Writes JSON with every sample, the CPU model and its SIMD flags, and llaisys' ISA path.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit import host  # noqa: E402
from benchkit import peer as llama_cpp_peer  # noqa: E402

BATCHES = (1, 4, 8, 16, 32)
GPU_BATCHES = (1, 4, 16, 64, 256)
ALL_BACKENDS = ("llaisys", "llaisys-default", "llama.cpp-bf16", "llama.cpp-bf16-kvf16", "hf-bf16")
QUANT_BACKENDS = ("llaisys", "llaisys-default", "llama.cpp", "llama.cpp-kvf16")  # --quant: one GGUF for all
EXTRA_BACKENDS = ("llaisys-noamx",)  # allowed with --quant, run only when asked for
OPTIONAL_BACKENDS = ("llama.cpp-f16", "llama.cpp-f16-kvf16", "hf-f32")
WORKLOADS = ("prefill", "decode", "batch", "offline")
WORKERS = Path(__file__).resolve().with_name("bench_compare_workers.py")  # one backend in a process


# ---- the workloads' sizes (the workers: bench_compare_workers.py) -------------------------
def workload_spec(quick: bool, device: str = "cpu") -> dict:
    if quick:  # a smoke run of the tool itself
        return {"prefill": 64, "decode_prompt": 16, "decode": 8, "batch_prompt": 8, "batch_steps": 4,
                "batches": [1, 4], "offline": 4, "device": device}
    return {"prefill": 512, "decode_prompt": 64, "decode": 128, "batch_prompt": 32, "batch_steps": 32,
            "batches": list(GPU_BATCHES if device == "nvidia" else BATCHES), "offline": 32, "device": device}


# ---- the driver ------------------------------------------------------------------------------
def run_worker(backend: str, model_dir: str, spec: dict, threads: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    if backend in ("llaisys", "llaisys-noamx"):  # like for like: every logit computed, small pages as the peers get
        env.update(LLAISYS_GREEDY_SCREEN="0", LLAISYS_HUGE_PAGES="0")
    if backend == "llaisys-noamx":
        env["LLAISYS_AMX"] = "0"
    if backend.startswith("llama.cpp"):
        peer = llama_cpp_peer.ensure()
        env = llama_cpp_peer.bindings_env(peer, env)
        exe = peer["python"]
        target = model_dir if spec.get("quant") else str(llama_cpp_peer.gguf_for(model_dir, backend.split("-")[1]))
    else:
        exe, target = sys.executable, model_dir
    cmd = [exe, str(WORKERS), backend, target, json.dumps(spec), str(threads)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{backend} worker failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def flatten(res: dict) -> dict:
    """The numbers of one worker's result (its "meta" stays in the JSON only)."""
    out = {k: v for k, v in res.items() if not isinstance(v, dict)}
    for k, v in res.get("offline", {}).items():
        out[f"offline {k}"] = v
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"])
    ap.add_argument("--backends", nargs="+", default=None,
                    choices=sorted(set(ALL_BACKENDS + OPTIONAL_BACKENDS + QUANT_BACKENDS + EXTRA_BACKENDS)),
                    help=f"default: {' '.join(ALL_BACKENDS)}; with --quant: {' '.join(QUANT_BACKENDS)}")
    ap.add_argument("--quant", choices=["q4_k_m", "q8_0"], default=None,
                    help="run every backend on this GGUF file of each model as it is (llaisys and llama.cpp "
                         "read the same file; transformers has no quantized path and is left out)")
    ap.add_argument("--gguf", nargs="+", default=None, metavar="FILE",
                    help="run these GGUF files as they are, as --quant runs a model's file (e.g. the random "
                         "Qwen3-30B-A3B-shaped file of tools/make_moe_gguf.py); replaces --models")
    ap.add_argument("--quantize", choices=["q8_0", "q4_k"], default=None,
                    help="llaisys quantizes each model directory's matrices at load (LLM(quantize=...)); the "
                         "peers keep the directory's weights, so this is a labelled row, not like for like")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--quick", action="store_true", help="tiny workloads: check that every backend runs")
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS,
                    help="run only these (e.g. --workloads decode for more repeats of one figure)")
    ap.add_argument("--batches", type=int, nargs="+", default=None,
                    help=f"batch sizes of the batch workload (default: {' '.join(map(str, BATCHES))} on the CPU)")
    ap.add_argument("--out", default="bench_compare.json")
    ap.add_argument("--device", default="cpu", choices=["cpu", "nvidia"],
                    help="nvidia: llaisys and transformers on the GPU (llama.cpp backends are left out)")
    args = ap.parse_args()
    from llaisys.models import hub

    if args.gguf:
        if args.quant or args.quantize:
            ap.error("--gguf runs each file as it is: give neither --quant nor --quantize")
        args.models, args.quant = args.gguf, "file"
    allowed = QUANT_BACKENDS + EXTRA_BACKENDS if args.quant else ALL_BACKENDS + OPTIONAL_BACKENDS
    args.backends = args.backends or list(QUANT_BACKENDS if args.quant else ALL_BACKENDS)
    if set(args.backends) - set(allowed):
        ap.error(f"--backends {' '.join(sorted(set(args.backends) - set(allowed)))}: "
                 f"{'with' if args.quant else 'without'} --quant the choices are {' '.join(allowed)}")

    if args.device == "nvidia":
        dropped = [b for b in args.backends if b.startswith("llama.cpp")]
        args.backends = [b for b in args.backends if b not in dropped]
        if dropped:
            print(f"--device nvidia: leaving out {', '.join(dropped)} (this llama.cpp build runs on the CPU)")
    spec = workload_spec(args.quick, args.device)
    spec["workloads"] = sorted(set(args.workloads))
    if args.batches:
        if min(args.batches) < 1:
            ap.error("--batches must be >= 1")
        spec["batches"] = sorted(set(args.batches))
    if "batch" not in args.workloads:
        spec["batches"] = []
    spec["quant"] = args.quant
    spec["quantize"] = args.quantize
    if args.quant and args.quantize:
        ap.error("--quant runs a GGUF file as it is; --quantize quantizes a directory: give one")
    report = {"machine": host.machine(), "device": args.device,
              "gpu": host.gpu_model() if args.device == "nvidia" else None,
              "threads": args.threads, "spec": spec, "command": " ".join(sys.argv), "models": {}}
    print(host.describe(report["machine"]), flush=True)
    for name in args.models:
        # without --quant the bf16 directory, whatever a bare name resolves to on this CPU (hub.default_quant);
        # a local directory or file is taken as it is (resolve_model refuses a quant for it)
        local = os.path.exists(name)
        if args.gguf:
            model_dir = str(hub.resolve_model(name))
            if not model_dir.lower().endswith(".gguf"):
                ap.error(f"--gguf {name}: not a .gguf file")
        else:
            model_dir = str(hub.resolve_model(name, quant=args.quant if local else args.quant or hub.DEFAULT_QUANT))
        samples = {b: [] for b in args.backends}
        for r in range(args.repeats):
            for b in args.backends:  # alternate: A B C, A B C, ...
                print(f"[{name}] repeat {r + 1}/{args.repeats}: {b}", flush=True)
                samples[b].append(run_worker(b, model_dir, spec, args.threads))
        report["models"][name] = samples
        print_table(name, samples, args.backends)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {args.out}")


def print_table(name: str, raw: dict, backends: list) -> None:
    samples = {b: [flatten(r) for r in runs] for b, runs in raw.items()}
    metrics = list(dict.fromkeys(k for runs in samples.values() for run in runs for k in run))
    lower_better = {"offline ttft_s", "offline tpot_s"}
    print(f"\n{name}: median (min-max); ratio = llaisys / peer (> 1: llaisys better)")
    print(f"{'metric':22}" + "".join(f"{b:>26}" for b in backends))
    for m in metrics:
        cells, med = [], {}
        for b in backends:
            vals = [run[m] for run in samples[b] if m in run]
            if not vals:
                cells.append(f"{'-':>26}")
                continue
            med[b] = statistics.median(vals)
            cells.append(f"{med[b]:>10.3g} ({min(vals):.3g}-{max(vals):.3g})".rjust(26))
        print(f"{m:22}" + "".join(cells))
        if "llaisys" in med:
            ratios = []
            for b in backends:
                if b != "llaisys" and b in med and med[b] > 0 and med["llaisys"] > 0:
                    ratio = med[b] / med["llaisys"] if m in lower_better else med["llaisys"] / med[b]
                    ratios.append(f"{b} x{ratio:.2f}")
            if ratios:
                print(f"{'':22}  " + ", ".join(ratios))


if __name__ == "__main__":
    main()
