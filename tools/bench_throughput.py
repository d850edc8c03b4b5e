"""Offline engine throughput: continuous batching vs the same requests one after another.

    python tools/bench_throughput.py [--model NAME|DIR] [--num-prompts 16] [--input-len 128]
        [--output-len 64] [--shared-prefix-frac 0.0] [--mode both|batched|sequential]
        [--prefix-caching on|off|both] [--kv-layout block|slot] [--out FILE]

The workload is fixed by --seed: N prompts of random token ids, each --input-len long; with
--shared-prefix-frac F the first round(F * input_len) ids are the same in every prompt (a
shared system prompt) and the rest differ. Every request is greedy with ignore_eos, so it
makes exactly --output-len tokens. "batched" adds all N at once and steps the engine until
they finish (continuous batching); "sequential" adds one, runs it to the end, then the next.

Before each timed run one warm-up request (the shared prefix, or 16 ids, with max_tokens 1)
goes through the same engine: it pages the weights in and, with a shared prefix and prefix
caching on, leaves the prefix's full blocks in the cache, as earlier traffic with the same
system prompt would. Counters are differences over the timed run only.

Prints a table and writes JSON: requests/s, output and total tokens/s, TTFT and TPOT
p50/p95, peak KV usage, prefix-cache hit rate and the prefill tokens actually computed, and
the split of wall time between the C step call and the Python around it (scheduling, index
arrays, sampling bookkeeping, detokenization).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np

import llaisys.models.model as model_module
from llaisys.engine import EngineConfig, LLMEngine, SamplingParams
from llaisys.engine.worker import Worker, WorkerConfig
from llaisys.models import hub

# random prompt ids are drawn from [TOKEN_LOW, TOKEN_HIGH): ordinary BPE pieces, no specials
TOKEN_LOW, TOKEN_HIGH = 1000, 100000


@dataclass
class Workload:
    prompts: list  # [N] lists of input_len token ids
    output_len: int  # tokens each request makes (ignore_eos)
    shared_len: int  # leading ids common to every prompt


def make_workload(num_prompts: int, input_len: int, output_len: int, shared_frac: float, seed: int) -> Workload:
    """N prompts of input_len random ids whose first round(shared_frac * input_len) are shared."""
    if num_prompts < 1 or input_len < 1 or output_len < 1:
        raise ValueError("--num-prompts, --input-len and --output-len must be >= 1")
    if not 0.0 <= shared_frac < 1.0:
        raise ValueError(f"--shared-prefix-frac must be in [0, 1), got {shared_frac}")
    rng = np.random.default_rng(seed)
    shared_len = int(round(shared_frac * input_len))
    shared = rng.integers(TOKEN_LOW, TOKEN_HIGH, shared_len).tolist()
    prompts = [shared + rng.integers(TOKEN_LOW, TOKEN_HIGH, input_len - shared_len).tolist()
               for _ in range(num_prompts)]
    return Workload(prompts, output_len, shared_len)


def step_profile(worker: Worker, rows=(1, 4, 16), ctx: int = 32, repeats: int = 5, seed: int = 0) -> dict:
    """CPU ms of one core step by its shape, straight on the model (SLOT cache, no engine):
    a decode step of 1, 4, 16 rows at context ctx, and prefill per token. CPU time, not
    wall time, so it is not inflated by other processes on a shared host (exact with one
    thread: OMP_NUM_THREADS=1). This is the profile behind the batched/sequential speedup."""
    m, rng, n = worker.model, np.random.default_rng(seed), max(rows)
    out = {}
    with m.create_kv_cache("slot", n_slots=n * (ctx + len(rows) * repeats + 8)) as cache:
        qs = np.arange(n + 1) * ctx
        c = time.process_time()
        m.step(cache, token_ids=rng.integers(TOKEN_LOW, TOKEN_HIGH, n * ctx), positions=np.tile(np.arange(ctx), n),
               query_start=qs, seq_ids=np.arange(n), sample_rows=qs[1:] - 1)
        out["prefill_cpu_ms_per_token"] = round(1000 * (time.process_time() - c) / (n * ctx), 2)
        pos, cpu = np.full(n, ctx), {r: [] for r in rows}
        for _ in range(repeats):
            for r in rows:
                c = time.process_time()
                m.step(cache, token_ids=rng.integers(TOKEN_LOW, TOKEN_HIGH, r), positions=pos[:r].copy(),
                       query_start=np.arange(r + 1), seq_ids=np.arange(r), sample_rows=np.arange(r))
                cpu[r].append(time.process_time() - c)
                pos[:r] += 1
    out["decode_step_cpu_ms_by_rows"] = {r: round(1000 * float(np.median(v)), 1) for r, v in cpu.items()}
    return out


def _pct(xs: list, q: float) -> Optional[float]:
    return float(np.percentile(xs, q)) if xs else None


class CoreCallTimer:
    """Times the C call of each step (llaisysModelStep) by standing in for the ctypes
    library object that llaisys.models.model calls through; everything else in a run's wall
    time is Python: scheduling, building the step's index arrays, sampling bookkeeping,
    detokenization and output processing."""

    def __init__(self):
        self.seconds = 0.0
        self.calls = 0
        self._lib = None

    def __enter__(self):
        self._lib = model_module.LIB
        step = self._lib.llaisysModelStep

        def timed(*a):
            t = time.perf_counter()
            try:
                return step(*a)
            finally:
                self.seconds += time.perf_counter() - t
                self.calls += 1

        lib = self._lib

        class Proxy:
            llaisysModelStep = staticmethod(timed)

            def __getattr__(self, name):
                return getattr(lib, name)

        model_module.LIB = Proxy()
        return self

    def __exit__(self, *exc):
        model_module.LIB = self._lib


class TimedRunner:
    """Wraps the real runner: the time each step spends in the core, by kind (the profile
    that explains a speedup: prefill work is the same in both modes, decode steps are not)."""

    def __init__(self, runner):
        self.runner = runner
        self.steps = []  # per computing step: (n_seqs, n_tokens, seconds in the core)

    def execute(self, batch):
        t = time.perf_counter()
        res = self.runner.execute(batch)
        if batch.n_tokens:
            self.steps.append((batch.n_seqs, batch.n_tokens, time.perf_counter() - t))
        return res

    def profile(self) -> dict:
        """Core seconds in steps that prefill (any row computes more than one token) and in
        pure decode steps, and the mean decode step time by batch rows."""
        prefill = [s for s in self.steps if s[1] > s[0]]
        decode = [s for s in self.steps if s[1] == s[0]]
        by_rows = {}
        for n, _, dt in decode:
            by_rows.setdefault(n, []).append(dt)
        return {"core_s_prefill_steps": round(sum(s[2] for s in prefill), 3),
                "prefill_steps": len(prefill),
                "core_s_decode_steps": round(sum(s[2] for s in decode), 3),
                "decode_steps": len(decode),
                "decode_step_s_by_rows": {n: round(float(np.mean(v)), 4) for n, v in sorted(by_rows.items())}}


class Runner:
    """One engine per run, all on one loaded Worker (the KV cache is reallocated per engine)."""

    def __init__(self, worker: Worker, args):
        self.worker = worker
        self.args = args

    def engine(self, kv_layout: str, prefix_caching: bool) -> LLMEngine:
        a = self.args
        num_blocks = self.worker.num_blocks(a.block_size)
        cfg = EngineConfig(max_num_seqs=a.max_num_seqs, max_num_batched_tokens=a.max_num_batched_tokens,
                           max_model_len=min(self.worker.model.config.max_position_embeddings,
                                             num_blocks * a.block_size),
                           block_size=a.block_size, num_blocks=num_blocks, enable_prefix_caching=prefix_caching,
                           kv_layout=kv_layout, seed=a.seed)
        return LLMEngine(cfg, TimedRunner(self.worker.make_runner(cfg)), self.worker.tokenizer)

    def run(self, wl: Workload, mode: str, kv_layout: str = "block", prefix_caching: bool = False) -> dict:
        return self.run_with_outputs(wl, mode, kv_layout, prefix_caching)[0]

    def run_with_outputs(self, wl: Workload, mode: str, kv_layout: str, prefix_caching: bool) -> tuple:
        """(summary row, the finished RequestOutputs in prompt order) of one timed run."""
        eng = self.engine(kv_layout, prefix_caching)
        warm = wl.prompts[0][:wl.shared_len] if wl.shared_len else wl.prompts[0][:16]
        _run_all(eng, [warm], SamplingParams(max_tokens=1), "warmup")
        m0 = eng.metrics.copy()
        sp = SamplingParams(temperature=0.0, max_tokens=wl.output_len, ignore_eos=True)
        peak = [0.0]

        def watch():
            peak[0] = max(peak[0], eng.metrics.kv_usage)

        eng.runner.steps.clear()
        with CoreCallTimer() as core:
            t0, c0 = time.perf_counter(), time.process_time()
            if mode == "batched":
                outs = _run_all(eng, wl.prompts, sp, "req", watch)
            else:
                outs = [o for i, p in enumerate(wl.prompts) for o in _run_all(eng, [p], sp, f"req{i}-", watch)]
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        row = _summarise(wl, mode, kv_layout, prefix_caching, outs, wall, m0, eng, peak[0])
        row.update(core_call_s=round(core.seconds, 3), python_s=round(wall - core.seconds, 3),
                   python_share=round(1 - core.seconds / wall, 4), core_calls=core.calls)
        row.update(cpu_s=round(cpu, 2), output_tokens_per_cpu_s=round(len(outs) * wl.output_len / cpu, 3),
                   load_avg_1m=round(os.getloadavg()[0], 2), **eng.runner.profile())
        return row, outs


def _run_all(eng: LLMEngine, prompts: list, sp: SamplingParams, prefix: str, on_step=None) -> list:
    """Add every prompt, step until all finish; the finished RequestOutputs in order."""
    ids = [f"{prefix}{i}" for i in range(len(prompts))]
    for rid, p in zip(ids, prompts):
        eng.add_request(rid, p, sp)
    done = {}
    while eng.has_unfinished_requests():
        for out in eng.step():
            if out.finished:
                done[out.request_id] = out
        if on_step is not None:
            on_step()
    bad = [rid for rid in ids if done[rid].outputs[0].finish_reason != "length"]
    if bad:
        raise RuntimeError(f"requests {bad} did not finish by length: {[done[r].error for r in bad]}")
    return [done[rid] for rid in ids]


def _summarise(wl: Workload, mode: str, kv_layout: str, prefix_caching: bool, outs: list, wall: float, m0,
               eng: LLMEngine, peak_kv: float) -> dict:
    m1 = eng.metrics
    n, out_len, in_len = len(outs), wl.output_len, len(wl.prompts[0])
    if any(len(o.outputs[0].token_ids) != out_len for o in outs):
        raise RuntimeError("a request made a different number of tokens than --output-len")
    ttft = [o.metrics.first_token - o.metrics.arrival for o in outs]
    tpot = [(o.metrics.last_token - o.metrics.first_token) / (out_len - 1) for o in outs] if out_len > 1 else []
    computed = m1.computed_tokens_total - m0.computed_tokens_total
    # every output token but the last is fed back as one decode token; the rest is prefill
    # (prompt tokens not served by the prefix cache, plus any recompute after preemption)
    prefill_computed = computed - n * (out_len - 1)
    hits = m1.prefix_cache.hit_tokens - m0.prefix_cache.hit_tokens
    queried = m1.prefix_cache.query_tokens - m0.prefix_cache.query_tokens
    return {
        "mode": mode, "kv_layout": kv_layout, "prefix_caching": prefix_caching,
        "num_prompts": n, "input_len": in_len, "output_len": out_len, "shared_prefix_len": wl.shared_len,
        "wall_s": round(wall, 3),
        "requests_per_s": round(n / wall, 4),
        "output_tokens_per_s": round(n * out_len / wall, 2),
        "total_tokens_per_s": round(n * (in_len + out_len) / wall, 2),
        "ttft_p50_s": _pct(ttft, 50), "ttft_p95_s": _pct(ttft, 95),
        "tpot_p50_s": _pct(tpot, 50), "tpot_p95_s": _pct(tpot, 95),
        "peak_kv_usage": round(peak_kv, 4),
        "prefix_cache_hit_rate": round(hits / queried, 4) if queried else 0.0,
        "prefix_hit_tokens": hits,
        "prefill_tokens_computed": prefill_computed,
        "prompt_tokens": n * in_len,
        "steps": m1.num_steps - m0.num_steps,
        "preemptions": m1.num_preemptions_total - m0.num_preemptions_total,
    }


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def print_table(rows: list, title: str) -> None:
    print(title)
    print(f"{'mode':10} {'layout':6} {'prefix':6} {'wall s':>8} {'req/s':>7} {'out tok/s':>9} {'tot tok/s':>9} "
          f"{'TTFT p50':>8} {'p95':>7} {'TPOT p50':>8} {'p95':>7} {'KV peak':>7} {'hit':>5} {'prefill':>7}")
    for r in rows:
        print(f"{r['mode']:10} {r['kv_layout']:6} {('on' if r['prefix_caching'] else 'off'):6} {r['wall_s']:8.1f} "
              f"{r['requests_per_s']:7.3f} {r['output_tokens_per_s']:9.2f} {r['total_tokens_per_s']:9.2f} "
              f"{_fmt(r['ttft_p50_s'], '8.2f')} {_fmt(r['ttft_p95_s'], '7.2f')} {_fmt(r['tpot_p50_s'], '8.3f')} "
              f"{_fmt(r['tpot_p95_s'], '7.3f')} {r['peak_kv_usage']:7.1%} {r['prefix_cache_hit_rate']:5.1%} "
              f"{r['prefill_tokens_computed']:7d}")


def print_profile(rows: list) -> None:
    """Where the time went: core seconds in prefill and in decode steps, decode step time by rows."""
    for r in rows:
        by = ", ".join(f"{n}: {dt * 1000:.0f}" for n, dt in r["decode_step_s_by_rows"].items())
        print(f"  {r['mode']:10} {r['kv_layout']:5} prefix {'on ' if r['prefix_caching'] else 'off'}: "
              f"core {r['core_s_prefill_steps']:.1f} s in {r['prefill_steps']} prefill steps + "
              f"{r['core_s_decode_steps']:.1f} s in {r['decode_steps']} decode steps, of {r['wall_s']:.1f} s wall "
              f"(cpu {r['cpu_s']:.0f} s, load {r['load_avg_1m']:.1f}); decode ms/step by rows {{{by}}}")
        print(f"  {'':10} Python outside the C step call: {r['python_s']:.2f} s of {r['wall_s']:.1f} s wall "
              f"({r['python_share']:.1%}) over {r['core_calls']} calls, "
              f"{r['python_s'] / max(r['core_calls'], 1) * 1000:.1f} ms per step")


def add_common_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--model", default=hub.DEFAULT_MODEL, help="model directory or known name")
    ap.add_argument("--num-prompts", type=int, default=16)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--shared-prefix-frac", type=float, default=0.0,
                    help="fraction of each prompt that is the same in all prompts, in [0, 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-num-seqs", type=int, default=16)
    ap.add_argument("--max-num-batched-tokens", type=int, default=2048)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--kv-cache-memory", default="256MiB")
    ap.add_argument("--kv-dtype", default="f32")


def load_worker(args) -> Worker:
    return Worker(WorkerConfig(model=args.model, kv_cache_memory=args.kv_cache_memory, kv_dtype=args.kv_dtype))


def environment(worker: Worker, args) -> dict:
    return {"model": worker.name, "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "threads": os.environ.get("OMP_NUM_THREADS", "all"), "cpus": os.cpu_count(),
            "load_avg_1m_at_end": round(os.getloadavg()[0], 2), "args": vars(args)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(ap)
    ap.add_argument("--mode", choices=["both", "batched", "sequential"], default="both")
    ap.add_argument("--prefix-caching", choices=["on", "off", "both"], default="off")
    ap.add_argument("--kv-layout", choices=["block", "slot"], default="block")
    ap.add_argument("--step-profile", action="store_true",
                    help="also measure CPU ms per core step by batch rows (decode) and per prefill token")
    ap.add_argument("--out", default="bench_throughput.json")
    args = ap.parse_args()
    if args.kv_layout == "slot" and args.prefix_caching != "off":
        ap.error("--prefix-caching needs --kv-layout block")
    wl = make_workload(args.num_prompts, args.input_len, args.output_len, args.shared_prefix_frac, args.seed)
    worker = load_worker(args)
    try:
        runner = Runner(worker, args)
        modes = ["batched", "sequential"] if args.mode == "both" else [args.mode]
        caching = [False, True] if args.prefix_caching == "both" else [args.prefix_caching == "on"]
        rows = [runner.run(wl, m, args.kv_layout, c) for m in modes for c in caching]
        profile = step_profile(worker) if args.step_profile else None
    finally:
        worker.close()
    result = {"env": environment(worker, args), "runs": rows}
    if profile is not None:
        result["step_profile"] = profile
    by = {(r["mode"], r["prefix_caching"]): r for r in rows}
    for c in caching:
        if ("batched", c) in by and ("sequential", c) in by:
            b, q, key = by[("batched", c)], by[("sequential", c)], "prefix_" + ("on" if c else "off")
            result.setdefault("speedup_batched_vs_sequential", {})[key] = round(
                b["output_tokens_per_s"] / q["output_tokens_per_s"], 2)
            result.setdefault("speedup_batched_vs_sequential_cpu_time", {})[key] = round(q["cpu_s"] / b["cpu_s"], 2)
    for m in modes:
        if (m, False) in by and (m, True) in by:
            off, on = by[(m, False)]["prefill_tokens_computed"], by[(m, True)]["prefill_tokens_computed"]
            result.setdefault("prefill_cut_by_prefix_caching", {})[m] = round(1 - on / off, 4)
    print_table(rows, f"{args.num_prompts} requests, input {args.input_len}, output {args.output_len}, shared prefix "
                      f"{wl.shared_len} tokens, {worker.name}, load avg {os.getloadavg()[0]:.2f}")
    print_profile(rows)
    for k in ("speedup_batched_vs_sequential", "speedup_batched_vs_sequential_cpu_time", "prefill_cut_by_prefix_caching", "step_profile"):
        if k in result:
            print(f"{k}: {result[k]}")
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
