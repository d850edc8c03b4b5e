"""Load time, resident memory after load, prefill and single-stream decode speed of real
models through the core.

    python tools/bench_models.py [--models NAME ...] [--prompt-len 512] [--decode-len 128] [--out FILE]

Prints a table and writes JSON (a list of rows, one per model; tools/bench_limits reads it).
Memory is this process's VmRSS (and peak, VmHWM) from /proc/self/status right after the
load. Prefill is one step of prompt-len tokens; decode is decode-len single-token steps, each
sampled greedily in the core as the engine does. Each figure is the median over --repeats
runs (all runs are kept in the JSON). Timings only: the host is shared, so compare figures
taken in one run, and read them beside the load average printed with them. On a host with
more runnable threads than cores, OMP_WAIT_POLICY=passive keeps OpenMP's spinning at every
barrier from eating the time slices (doc/benchmarks.md)."""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from llaisys.models import hub
from llaisys.models.loader import load_model
from llaisys.models.qwen2 import Qwen2Model, RowSampling

from benchkit.stats import run_header


def _greedy_step(model: Qwen2Model, cache, tokens, start: int) -> int:
    """Run `tokens` at positions start.. as one row of seq 0 and return the greedy next token,
    sampled in the core (no logits through Python). With its logprob, so every logit is
    computed: a step then reads every weight once, which is what bench_limits.py holds decode
    against (the greedy screen, which reads half of the lm_head, is timed by bench_compare.py)."""
    n = len(tokens)
    res = model.step(cache, token_ids=tokens, positions=np.arange(start, start + n), query_start=[0, n],
                     seq_ids=[0], sample_rows=[n - 1], sampling=[RowSampling()], want_logprobs=True)
    return int(res.token_ids[0])


def _rss_mb() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MiB, from /proc/self/status (0 where unreadable)."""
    vals = {"VmRSS": 0.0, "VmHWM": 0.0}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key = line.split(":")[0]
                if key in vals:
                    vals[key] = int(line.split()[1]) / 1024
    except OSError:
        pass
    return round(vals["VmRSS"], 1), round(vals["VmHWM"], 1)


def bench(name: str, prompt_len: int, decode_len: int, repeats: int) -> dict:
    path = hub.resolve_model(name)
    load_avg_start = os.getloadavg()[0]
    t0 = time.perf_counter()
    model = Qwen2Model(load_model(path))
    load_s = time.perf_counter() - t0
    rss_load, peak_load = _rss_mb()
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, model.config.vocab_size, prompt_len)
    prefill, decode = [], []
    for _ in range(repeats):
        with model.create_kv_cache("slot", n_slots=prompt_len + decode_len + 16) as cache:
            t = time.perf_counter()
            nxt = _greedy_step(model, cache, prompt, 0)
            prefill.append(prompt_len / (time.perf_counter() - t))
            t = time.perf_counter()
            for i in range(decode_len):
                nxt = _greedy_step(model, cache, [nxt], prompt_len + i)
            decode.append(decode_len / (time.perf_counter() - t))
    model.close()
    return {"model": name, "load_s": round(load_s, 2), "rss_after_load_mb": rss_load,
            "peak_rss_load_mb": peak_load, "prefill_tok_s": round(float(np.median(prefill)), 1),
            "decode_tok_s": round(float(np.median(decode)), 1), "prefill_runs": [round(x, 1) for x in prefill],
            "decode_runs": [round(x, 1) for x in decode], "prompt_len": prompt_len, "decode_len": decode_len,
            "repeats": repeats, "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "load_avg_start": round(load_avg_start, 2),
            "load_avg_end": round(os.getloadavg()[0], 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(hub.REGISTRY))
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--decode-len", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="bench_models.json")
    args = ap.parse_args()
    print(run_header(f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}"), flush=True)
    rows = [bench(m, args.prompt_len, args.decode_len, args.repeats) for m in args.models]
    print(f"{'model':32} {'load s':>7} {'RSS MiB':>8} {'prefill tok/s':>14} {'decode tok/s':>13} {'load avg':>12}")
    for r in rows:
        print(f"{r['model']:32} {r['load_s']:7.2f} {r['rss_after_load_mb']:8.0f} {r['prefill_tok_s']:14.1f} "
              f"{r['decode_tok_s']:13.1f} "
              f"{r['load_avg_start']:5.2f}->{r['load_avg_end']:<5.2f}")
    with open(args.out, "w") as f:
        json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
