"""Load generator for any OpenAI-compatible server (llaisys, vLLM, llama.cpp's server, ...).

    python tools/bench_serving.py --base-url http://127.0.0.1:8000 [--model NAME] [--api-key KEY]
        [--concurrency 1 4 16] [--request-rate R] [--num-requests N] [--input-len 128]
        [--output-len 64] [--endpoint completions|chat] [--no-stream] [--no-ignore-eos]
        [--eos-bias TOKEN_ID ...] [--output FILE]

For each concurrency level it sends --num-requests requests (at most that many in flight;
with --request-rate, arrivals follow a Poisson process of that rate), each a synthetic prompt
of --input-len random words asking for exactly --output-len tokens (max_tokens, and
``ignore_eos`` in the body unless --no-ignore-eos, for servers that refuse unknown fields).
It prints one table (a column per level) and writes JSON: requests/s, output tokens/s, and
TTFT, TPOT, ITL and end-to-end latency (mean, p50, p95, p99), plus errors by status.

Definitions (as vLLM's benchmark): TTFT is send to the first content chunk; ITL the gaps
between content chunks (a chunk may carry more than one token when the server holds back
half a UTF-8 character); TPOT per request (e2e - TTFT) / (output tokens - 1). Output tokens
come from the usage the server reports (stream_options.include_usage), else from the number
of content chunks. Standard library only (with tools/benchkit), so it runs wherever Python does.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchkit, also when loaded by file path
from benchkit.openai_http import WORDS, Client  # noqa: E402
from benchkit.stats import percentile  # noqa: E402


def make_body(args, rng: random.Random) -> tuple:
    """(path, body) of one request: a fresh random prompt so the prefix cache cannot help."""
    words = " ".join(rng.choice(WORDS) for _ in range(args.input_len))
    body = {"model": args.model, "max_tokens": args.output_len, "temperature": args.temperature,
            "stream": args.stream}
    if args.stream:
        body["stream_options"] = {"include_usage": True}
    if args.ignore_eos:
        body["ignore_eos"] = True
    if args.eos_bias:  # for servers without ignore_eos: the end tokens can never be chosen
        body["logit_bias"] = {str(t): -100 for t in args.eos_bias}
    if args.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": words}]
        return "/v1/chat/completions", body
    body["prompt"] = words
    return "/v1/completions", body


def run_level(client: Client, args, concurrency: int, seed: int) -> dict:
    """Send args.num_requests requests with at most `concurrency` in flight; the summary."""
    rng = random.Random(seed)
    requests = [make_body(args, rng) for _ in range(args.num_requests)]
    results: list = []
    lock = threading.Lock()

    def one(path_body):
        r = client.post(path_body[0], path_body[1], args.stream)
        with lock:
            results.append(r)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        arrival = 0.0
        for req in requests:
            if args.request_rate:  # Poisson arrivals: exponential gaps
                arrival += rng.expovariate(args.request_rate)
                delay = t0 + arrival - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            pool.submit(one, req)
    duration = time.perf_counter() - t0
    return summarize(results, duration, concurrency, args.request_rate)


def _stats_ms(values: list) -> dict:
    ms = [v * 1000.0 for v in values]
    return {"mean": sum(ms) / len(ms) if ms else None, "p50": percentile(ms, 50), "p95": percentile(ms, 95),
            "p99": percentile(ms, 99), "n": len(ms)}


def summarize(results: list, duration: float, concurrency: int, request_rate: Optional[float]) -> dict:
    ok = [r for r in results if r.ok]
    errors: dict = {}
    for r in results:
        if not r.ok:
            key = str(r.status or "no response")
            errors.setdefault(key, {"count": 0, "example": r.error})["count"] += 1
    out_tokens = sum(r.output_tokens for r in ok)
    prompt_tokens = sum(r.prompt_tokens or 0 for r in ok)
    return {
        "concurrency": concurrency, "request_rate": request_rate, "duration_s": duration,
        "requests": len(results), "completed": len(ok), "errors": len(results) - len(ok), "errors_by_status": errors,
        "prompt_tokens": prompt_tokens, "output_tokens": out_tokens,
        "requests_per_s": len(ok) / duration if duration > 0 else None,
        "output_tokens_per_s": out_tokens / duration if duration > 0 else None,
        "total_tokens_per_s": (out_tokens + prompt_tokens) / duration if duration > 0 else None,
        "ttft_ms": _stats_ms([r.ttft for r in ok if r.ttft is not None]),
        "tpot_ms": _stats_ms([r.tpot for r in ok if r.tpot is not None]),
        "itl_ms": _stats_ms([gap for r in ok for gap in r.itl]),
        "e2e_ms": _stats_ms([r.e2e for r in ok]),
    }


def format_table(levels: list) -> str:
    """One column per level, one row per figure."""
    def num(v, digits=1):
        return "-" if v is None else f"{v:.{digits}f}"

    heads = [f"c={lv['concurrency']}" + (f" r={lv['request_rate']:g}/s" if lv["request_rate"] else "")
             for lv in levels]
    rows = [("requests ok/err", [f"{lv['completed']}/{lv['errors']}" for lv in levels]),
            ("duration s", [num(lv["duration_s"], 2) for lv in levels]),
            ("requests/s", [num(lv["requests_per_s"], 3) for lv in levels]),
            ("output tok/s", [num(lv["output_tokens_per_s"]) for lv in levels]),
            ("total tok/s", [num(lv["total_tokens_per_s"]) for lv in levels])]
    for metric, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("e2e_ms", "E2E")):
        for q in ("mean", "p50", "p95", "p99"):
            rows.append((f"{label} {q} ms", [num(lv[metric][q]) for lv in levels]))
    width = max(12, *(len(h) for h in heads))
    lines = [f"{'':18}" + "".join(f"{h:>{width + 2}}" for h in heads)]
    lines += [f"{name:18}" + "".join(f"{v:>{width + 2}}" for v in vals) for name, vals in rows]
    return "\n".join(lines)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--base-url", default="http://127.0.0.1:8000", help="server root (a trailing /v1 is accepted)")
    ap.add_argument("--model", default=None, help="model name to send (default: the first of GET /v1/models)")
    ap.add_argument("--api-key", default=None, help="sent as 'Authorization: Bearer KEY'")
    ap.add_argument("--endpoint", choices=["completions", "chat"], default="completions")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16], help="levels: most requests in flight")
    ap.add_argument("--request-rate", type=float, default=None,
                    help="Poisson arrival rate in requests/s (default: send as fast as concurrency allows)")
    ap.add_argument("--num-requests", type=int, nargs="+", default=None,
                    help="requests per level: one number for every level, or one per --concurrency level "
                         "(default: 4 x concurrency, at least 8)")
    ap.add_argument("--input-len", type=int, default=128, help="prompt length in random words (~tokens)")
    ap.add_argument("--output-len", type=int, default=64, help="max_tokens of each request")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--no-stream", dest="stream", action="store_false", help="non-streaming requests")
    ap.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                    help="do not send ignore_eos (outputs may then end before --output-len)")
    ap.add_argument("--eos-bias", type=int, nargs="+", default=None, metavar="TOKEN_ID",
                    help="send logit_bias -100 for these end-of-sequence ids (servers that ignore ignore_eos)")
    ap.add_argument("--warmup", type=int, default=1, help="requests sent (and not counted) before the first level")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    ap.add_argument("--output", default="bench_serving.json", help="JSON results file ('-': none)")
    args = ap.parse_args(argv)
    if any(c < 1 for c in args.concurrency):
        ap.error("--concurrency levels must be >= 1")
    if args.request_rate is not None and args.request_rate <= 0:
        ap.error("--request-rate must be > 0")
    for name in ("input_len", "output_len"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.num_requests is not None:
        if any(n < 1 for n in args.num_requests):
            ap.error("--num-requests must be >= 1")
        if len(args.num_requests) not in (1, len(args.concurrency)):
            ap.error("--num-requests takes one number or one per --concurrency level")
    return args


def run_benchmark(args, client: Client) -> dict:
    """The warm-up, then every concurrency level of args against client: the JSON report."""
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    rng = random.Random(args.seed ^ 0x5EED)
    for _ in range(args.warmup):
        client.post(*make_body(args, rng), args.stream)
    levels = []
    for i, c in enumerate(args.concurrency):
        if args.num_requests is None:
            n = max(8, 4 * c)
        else:
            n = args.num_requests[i if len(args.num_requests) > 1 else 0]
        level_args = argparse.Namespace(**{**vars(args), "num_requests": n})
        levels.append(run_level(client, level_args, c, seed=args.seed + i))
    return {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "base_url": args.base_url,
            "model": args.model, "endpoint": args.endpoint, "input_len_words": args.input_len,
            "output_len": args.output_len, "stream": args.stream, "ignore_eos": args.ignore_eos,
            "eos_bias": args.eos_bias, "temperature": args.temperature, "command": " ".join(sys.argv),
            "client_load_avg_1m": [load_before, os.getloadavg()[0] if load_before is not None else None],
            "levels": levels}


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        client = Client(args.base_url, args.api_key, args.timeout)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.model is None:
        try:
            args.model = client.get_json("/v1/models")["data"][0]["id"]
        except (OSError, RuntimeError, ValueError, KeyError, IndexError) as e:
            print(f"error: cannot pick a model from GET /v1/models ({e}); pass --model", file=sys.stderr)
            return 2
    report = run_benchmark(args, client)
    levels = report["levels"]
    print(f"{args.base_url}  model={args.model}  endpoint={args.endpoint}  input~{args.input_len} words  "
          f"output={args.output_len} tokens  stream={args.stream}  ignore_eos={args.ignore_eos}")
    print(format_table(levels))
    for lv in levels:
        for status, e in lv["errors_by_status"].items():
            print(f"c={lv['concurrency']}: {e['count']} x HTTP {status}: {e['example']}", file=sys.stderr)
    if args.output != "-":
        with open(args.output, "w") as f:
            json.dump(report, f, indent=2)
    return 0 if all(lv["completed"] for lv in levels) else 1


if __name__ == "__main__":
    sys.exit(main())
