"""Where a GPU decode step's time goes: wall time per step, and each kernel's time under ncu.

    python tools/gpu/profile_decode.py [--shape 1.5b] [--quantize q4_k] [--steps 64] [--model-dir D] [--out x.json]
    ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv \\
        --log-file k.csv python tools/gpu/profile_decode.py --ncu-steps 2 ...
    python tools/gpu/profile_decode.py --parse k.csv --steps-profiled 2

Writes random bf16 weights of the shape (tools/gpu/bench_gpu.py's writer), or takes a GGUF file,
loads them with llaisys on the GPU (KV cache dtype --kv-dtype, f32 by default as bench_compare),
prefills a prompt (once untimed, then timed: prefill_tok_s) and decodes greedily one token a
step, timing each step by the host clock (a step returns after its stream synchronize).
With --ncu-steps N the last N steps run between cuProfilerStart and cuProfilerStop, so ncu
measures those kernels alone; --parse sums the kernels of such a CSV by name, per step. Wall
time minus the kernels' sum is what the GPU spends idle: launches and host work.
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def parse(path: Path, steps: int) -> dict:
    """Kernel name -> (launches per step, microseconds per step) from ncu's CSV log."""
    rows = [line for line in path.read_text().splitlines() if line.startswith('"')]
    per = defaultdict(lambda: [0, 0.0])
    for r in csv.DictReader(rows):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = r["Kernel Name"].split("(")[0].replace("void ", "").strip()
        name = name.split("<")[0].split("::")[-1] + ("<" + name.split("<", 1)[1] if "<" in name else "")
        scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(
            r.get("Metric Unit", "nsecond"), 1e-3)
        per[name][0] += 1
        per[name][1] += float(r["Metric Value"].replace(",", "")) * scale
    table = {k: {"launches": v[0] / steps, "us": v[1] / steps} for k, v in per.items()}
    return dict(sorted(table.items(), key=lambda kv: -kv[1]["us"]))


def main() -> None:
    from bench_gpu import SHAPES, write_random

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="1.5b", choices=list(SHAPES))
    ap.add_argument("--quantize", choices=["bf16", "q8_0", "q4_k"], default="bf16",
                    help="quantize the matrices at load (bf16: keep them)")
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--ncu-steps", type=int, default=0, help="profile the last N steps (run under ncu)")
    ap.add_argument("--parse", type=Path, help="an ncu CSV log to sum instead")
    ap.add_argument("--steps-profiled", type=int, default=1)
    ap.add_argument("--model-dir", type=Path,
                    help="use (or write, if missing) the random weights here; or a .gguf file, run as it is")
    ap.add_argument("--device", default="nvidia", choices=["cpu", "nvidia"], help="cpu: a check of this tool")
    ap.add_argument("--kv-dtype", default="f32", choices=["f32", "f16", "bf16"],
                    help="the KV cache's dtype (f32: the runs of 2026-11-27)")
    ap.add_argument("--layout", default="slot", choices=["slot", "block"],
                    help="block: the engine's layout, whose pure decode steps LLAISYS_CUDA_GRAPHS=1 replays as graphs")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    a.quantize = None if a.quantize == "bf16" else a.quantize
    if a.parse:
        table = parse(a.parse, a.steps_profiled)
        total = sum(v["us"] for v in table.values())
        print(f"{'kernel':60s} {'launches':>9s} {'us/step':>9s} {'share':>6s}")
        for k, v in table.items():
            print(f"{k[:60]:60s} {v['launches']:9.1f} {v['us']:9.1f} {100 * v['us'] / total:5.1f}%")
        print(f"{'total':60s} {sum(v['launches'] for v in table.values()):9.1f} {total:9.1f}")
        if a.out:
            a.out.write_text(json.dumps({"kernels": table, "total_us": total}, indent=2))
        return

    import numpy as np

    from llaisys import DeviceType
    from llaisys.models.loader import load_model
    from llaisys.models.model import Model, RowSampling

    with tempfile.TemporaryDirectory(prefix=f"llaisys-{a.shape}-") as tmp:
        d = a.model_dir or Path(tmp)
        if d.suffix.lower() == ".gguf":  # a GGUF file as it is (the llama.cpp comparison's weights)
            from llaisys.models.gguf_model import load_gguf

            if a.quantize:
                ap.error("--quantize applies to a directory; a GGUF file runs as it is")
            loaded = load_gguf(d).loaded
        else:
            if not (d / "config.json").exists():
                write_random(d, a.shape, "cuda" if a.device == "nvidia" else "cpu")
            loaded = load_model(str(d), quantize=a.quantize)
        model = Model(loaded, device=DeviceType[a.device.upper()])
    vocab = model.config.vocab_size
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, vocab, a.prompt).tolist()

    block = 16
    n_slots = (a.prompt + a.steps + 16 + block - 1) // block * block

    def step(cache, toks, pos, starts):
        kw = dict(seq_ids=[0])
        if a.layout == "block":  # one row whose blocks are 0, 1, ... in order
            end = int(pos[-1]) + 1
            kw = dict(slot_mapping=np.asarray(pos, dtype=np.int64), context_lens=[end],
                      block_tables=[list(range(n_slots // block))])
        return model.step(cache, token_ids=toks, positions=pos, query_start=starts, sample_rows=[len(toks) - 1],
                          sampling=[RowSampling()], want_logprobs=False, **kw)

    cuda = ctypes.CDLL("libcuda.so.1") if a.ncu_steps else None
    times = []
    with model.create_kv_cache(a.layout, n_slots=n_slots, block_size=block, dtype=a.kv_dtype) as warm:  # prefill and decode, untimed once
        w = int(step(warm, prompt, np.arange(a.prompt), [0, a.prompt]).token_ids[0])
        for i in range(min(8, a.steps)):
            w = int(step(warm, [w], [a.prompt + i], [0, 1]).token_ids[0])
    with model.create_kv_cache(a.layout, n_slots=n_slots, block_size=block, dtype=a.kv_dtype) as cache:
        t = time.perf_counter()
        nxt = int(step(cache, prompt, np.arange(a.prompt), [0, a.prompt]).token_ids[0])
        prefill_s = time.perf_counter() - t
        for i in range(a.steps):
            if cuda is not None and i == a.steps - a.ncu_steps:
                print("cuProfilerStart:", cuda.cuProfilerStart(), flush=True)
            t = time.perf_counter()
            nxt = int(step(cache, [nxt], [a.prompt + i], [0, 1]).token_ids[0])
            times.append(time.perf_counter() - t)
        if cuda is not None:
            print("cuProfilerStop:", cuda.cuProfilerStop(), flush=True)
    stats = model.stats()  # the graphs captured (LLAISYS_CUDA_GRAPHS=1), their time and memory
    model.close()
    half = len(times) // 2
    res = {"shape": a.shape if a.model_dir is None or a.model_dir.suffix.lower() != ".gguf" else a.model_dir.name,
           "quantize": a.quantize, "prompt": a.prompt, "steps": a.steps, "kv_dtype": a.kv_dtype,
           "ms_per_step_median": 1e3 * statistics.median(times[half:]),
           "ms_first_half": 1e3 * statistics.median(times[:half]), "tok_s": 1 / statistics.median(times[half:]),
           "tg_tok_s_mean": len(times) / sum(times),  # llama-bench's tg figure: every step counted
           "prefill_ms": 1e3 * prefill_s, "prefill_tok_s": a.prompt / prefill_s, "layout": a.layout,
           "graphs": stats.graphs, "graph_capture_s": stats.graph_capture_s, "padded_bytes": stats.padded_bytes}
    print(json.dumps(res))
    if a.out:
        a.out.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
