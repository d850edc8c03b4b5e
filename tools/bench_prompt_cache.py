"""The prompt cache on disk: TTFT of a long prompt cold, after a restart with --prompt-cache-dir,
and warm in memory (for scale).

    python tools/bench_prompt_cache.py [--model NAME|DIR] [--tokens 4096] [--threads 2]
        [--new-tokens 16] [--dir DIR] [--out FILE] [--server]

One process after another, as a server restart would be, each a fresh LLM over the same fresh
cache directory:
1. cold: a warm-up request (a few tokens, not the prompt), then the prompt with max_tokens=1
   (its TTFT: the whole prefill), then the prompt again (the in-memory prefix cache: warm);
   then the greedy --new-tokens; close() writes the cached blocks;
2. restart: a new process (here, a new LLM after the first is closed and freed: same files,
   same code path), the same warm-up, then the prompt with max_tokens=1 (TTFT with its blocks
   read from disk), then the greedy tokens, compared with the cold ones.
With --server, the same through two real `llaisys serve` processes, the first stopped with
SIGINT (the issue's acceptance: kill -INT, restart, >= 90 % cached, TTFT <= 15 % of cold).
The prompt is the stdlib text of tools/perplexity.py cut to --tokens ids. The 1-minute load
average is recorded before and after: the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit.host import describe, machine  # noqa: E402
from perplexity import stdlib_text  # noqa: E402


def timed(llm, ids, sp) -> tuple:
    t0 = time.perf_counter()
    out = llm.generate([ids], sp)[0]
    return time.perf_counter() - t0, out


def one_process(model: str, cache_dir: str, ids: list, threads: int, new_tokens: int, warm: bool) -> dict:
    from llaisys.engine import LLM, SamplingParams

    first = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    greedy = SamplingParams(temperature=0.0, max_tokens=new_tokens, ignore_eos=True)
    t0 = time.perf_counter()
    llm = LLM(model, threads=threads, prompt_cache_dir=cache_dir, max_model_len=len(ids) + new_tokens + 64)
    res = {"load_s": time.perf_counter() - t0}
    try:
        llm.generate([list(range(100, 116))], first)  # the first step's one-off costs, not the prompt's
        res["ttft_s"], out = timed(llm, ids, first)
        res["cached_tokens"] = out.usage.cached_tokens
        if warm:
            res["warm_ttft_s"], out = timed(llm, ids, first)
            res["warm_cached_tokens"] = out.usage.cached_tokens
        res["tokens"] = list(llm.generate([ids], greedy)[0].outputs[0].token_ids)
        stats = llm.engine.scheduler.kv.tier.stats
        res["disk_hits"], res["disk_bytes_read"] = stats.hits, stats.bytes_read
    finally:
        t0 = time.perf_counter()
        llm.close()
        res["close_s"] = time.perf_counter() - t0
    files = list(Path(cache_dir).glob("*.kvb"))
    res["files_after"], res["bytes_after"] = len(files), sum(f.stat().st_size for f in files)
    return res


def server_runs(args, ids: list, cache_dir: str) -> dict:
    """--server: the same two phases through real `llaisys serve --prompt-cache-dir` processes,
    the first stopped with SIGINT (the graceful stop writes the blocks), the second started on
    the same directory. TTFT = a non-streamed max_tokens=1 completion's wall time."""
    import signal

    import requests

    from benchkit.server import MODEL_NAME, launch

    def complete(srv, prompt, max_tokens: int) -> tuple:
        body = {"model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                "ignore_eos": True}
        t0 = time.perf_counter()
        r = requests.post(srv.url + "/v1/completions", json=body, timeout=3600)
        r.raise_for_status()
        return time.perf_counter() - t0, r.json()

    tmp = Path(tempfile.mkdtemp(prefix="bench-prompt-cache-"))
    out = {}
    for phase in ("cold", "restart"):
        srv = launch(args.model, tmp, "--threads", str(args.threads), "--kv-cache-memory", "1GiB",
                     "--prompt-cache-dir", cache_dir)
        try:
            complete(srv, list(range(100, 116)), 1)  # warm-up
            ttft, first = complete(srv, ids, 1)
            _, full = complete(srv, ids, args.new_tokens)
            out[phase] = {"ttft_s": ttft, "cached_tokens": first["usage"]["prompt_tokens_details"]["cached_tokens"],
                          "text": full["choices"][0]["text"]}
        finally:
            t0 = time.perf_counter()
            srv.proc.send_signal(signal.SIGINT)
            out.setdefault(phase, {})["exit_status"] = srv.proc.wait(600)
            out[phase]["stop_s"] = time.perf_counter() - t0
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/llaisys/models/qwen2.5-coder-0.5b-instruct"))
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--dir", default=None, help="cache directory (default: a fresh temporary one, removed after)")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument("--server", action="store_true", help="through real servers stopped with SIGINT (server_runs)")
    args = ap.parse_args()

    from llaisys.models.tokenizer import Tokenizer

    ids = Tokenizer.from_dir(args.model).encode(stdlib_text())[:args.tokens]
    cache_dir = args.dir or tempfile.mkdtemp(prefix="llaisys-prompt-cache-")
    m_before = machine()
    print(describe(m_before))
    try:
        if args.server:
            return report_server(args, ids, server_runs(args, ids, cache_dir), m_before)
        cold = one_process(args.model, cache_dir, ids, args.threads, args.new_tokens, warm=True)
        restart = one_process(args.model, cache_dir, ids, args.threads, args.new_tokens, warm=False)
    finally:
        if args.dir is None:
            shutil.rmtree(cache_dir, ignore_errors=True)
    load_after = os.getloadavg()[0]
    same = cold["tokens"] == restart["tokens"]
    rows = [("cold (first process)", cold["ttft_s"], cold["cached_tokens"]),
            ("warm (same process, memory)", cold["warm_ttft_s"], cold["warm_cached_tokens"]),
            ("after restart (disk)", restart["ttft_s"], restart["cached_tokens"])]
    print(f"\nprompt {len(ids)} tokens, {args.threads} threads, model {Path(args.model).name}")
    print(f"{'':32} {'TTFT s':>8} {'cached':>8} {'vs cold':>8}")
    for name, t, c in rows:
        print(f"{name:32} {t:8.2f} {c:8d} {t / cold['ttft_s']:8.1%}")
    print(f"\nfiles written on close: {cold['files_after']} ({cold['bytes_after'] / 2**20:.1f} MiB, close "
          f"{cold['close_s']:.2f} s); disk hits after restart: {restart['disk_hits']} blocks, "
          f"{restart['disk_bytes_read'] / 2**20:.1f} MiB; greedy {args.new_tokens} tokens identical: {same}")
    print(f"load average (1 min): {m_before['load_avg_1m']:.2f} before, {load_after:.2f} after")
    if args.out:
        Path(args.out).write_text(json.dumps({
            "machine": m_before, "load_avg_1m_after": load_after, "model": args.model, "prompt_tokens": len(ids),
            "threads": args.threads, "cold": cold, "restart": restart, "identical_tokens": same,
            "restart_ttft_vs_cold": restart["ttft_s"] / cold["ttft_s"]}, indent=1) + "\n")
    return 0 if same else 1


def report_server(args, ids: list, res: dict, m_before: dict) -> int:
    load_after = os.getloadavg()[0]
    cold, restart = res["cold"], res["restart"]
    same = cold["text"] == restart["text"]
    print(f"\nthrough llaisys serve, SIGINT between: prompt {len(ids)} tokens, {args.threads} threads")
    print(f"{'':24} {'TTFT s':>8} {'cached':>8} {'vs cold':>8} {'exit':>5} {'stop s':>7}")
    for name, r in (("cold", cold), ("after restart", restart)):
        print(f"{name:24} {r['ttft_s']:8.2f} {r['cached_tokens']:8d} {r['ttft_s'] / cold['ttft_s']:8.1%} "
              f"{r['exit_status']:5d} {r['stop_s']:7.2f}")
    print(f"greedy {args.new_tokens} tokens identical: {same}")
    print(f"load average (1 min): {m_before['load_avg_1m']:.2f} before, {load_after:.2f} after")
    if args.out:
        Path(args.out).write_text(json.dumps({
            "machine": m_before, "load_avg_1m_after": load_after, "model": args.model, "prompt_tokens": len(ids),
            "threads": args.threads, "server": True, "cold": cold, "restart": restart, "identical_text": same,
            "restart_ttft_vs_cold": restart["ttft_s"] / cold["ttft_s"]}, indent=1) + "\n")
    return 0 if same and cold["exit_status"] == 0 and restart["exit_status"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
