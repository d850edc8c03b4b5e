"""Soak test: N clients for T minutes against one llaisys server, a realistic mixed trace,
errors counted by kind and the server's memory (RSS) sampled over time.

    python tools/soak.py [--model qwen2.5-coder-0.5b-instruct] [--minutes 30] [--clients 8]
        [--max-tokens 128] [--url http://127.0.0.1:PORT --pid PID] [--output soak.json]

Without --url it starts `python -m llaisys.cli serve MODEL` (tools/benchkit/server.py's
launcher: this interpreter, this environment, so PYTHONPATH / LLAISYS_LIBRARY reach the server)
on a free 127.0.0.1 port (with the launcher's --kv-cache-memory 128MiB, and --request-timeout
set to --timeout unless --server-arg gives one), waits for /health, and stops it with SIGTERM
at the end, on an error and on Ctrl-C / SIGTERM. With --url it attaches to a running server (RSS needs --pid).

The trace (each client draws one kind per request, weights in TRACE): chat and completions,
streaming and not, greedy and sampled (temperature 0.7, top_p 0.9, some seeded), max_tokens
from 1 to --max-tokens, prompts of 5 to 120 words with or without a shared system prompt (the
prefix cache is exercised), a few `n: 2`, and on purpose: streams the client drops after a few
chunks, streams cancelled through POST /v1/requests/<id>/cancel, and non-streaming requests
whose client hangs up before the answer. One HTTP connection per request, loopback only.
--hostile F mixes a fraction F of hostile requests in (tools/soak_hostile.py: grammar bombs,
an unsatisfiable schema, junk message fields, ~6,000-token prompts), each with the status it
must get: a bomb answered 400 in the API's error shape is a success, a 5xx or a 200 is an error.

Errors: any request that does not end as its kind expects: a status other than 200, a stream
without `data: [DONE]`, an error event, a malformed body, a client timeout (--timeout, generous
on purpose: a contended machine must slow the trace down, not fail it), a cancel that neither
succeeds nor races a finished request. After the clients stop, the server must return to idle
(no request running or waiting, no KV block held: the gauges of /metrics), else that is an error
too ("not_idle").

RSS: VmRSS of /proc/<server pid>/status every --sample-s seconds. Warm-up is the first
--warmup-frac (default 20 %) of the trace's wall time, counted from the first request; the
verdict looks only at the samples after it: the RSS is flat if (max - min) / min over them is at
most --rss-tolerance (default 5 %). That band bounds every pair of post-warm-up samples, so it is
stricter than comparing the maximum with the first sample or with the median; a leak of any
size per request grows without bound, so over 24 minutes it leaves the band, while the allocator's
and the KV pool's first-touch growth (pages of the pool are touched as blocks are first used)
happen during warm-up. The least-squares slope over the same samples is printed for reference,
and /proc/<pid>/smaps is read at the warm-up's end (of the planned duration) and after the
trace: the mappings that grew in between say where any growth went (the KV pool's two tensors
are the two mappings of its size, each about --kv-cache-memory / 2).

Prints requests, errors by kind, p50/p99 end-to-end latency and TTFT, RSS over time and two
verdict lines; writes everything as JSON (--output). Exit status 0 iff both verdicts pass.
Latencies on a shared machine measure the contention as much as the server: errors and RSS are
what this tool judges.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from benchkit.host import cpu_model, vm_rss_kib  # noqa: E402
from benchkit.openai_http import Client  # noqa: E402
from benchkit.server import MODEL_NAME, launch, metrics_of  # noqa: E402
from soak_hostile import HOSTILE, make_hostile  # noqa: E402
from soak_report import Sampler, report_text, smaps_growth, smaps_rss_kib, summarize  # noqa: E402
from soak_trace import TRACE, Runner, make_request  # noqa: E402

DEFAULT_MODEL = "qwen2.5-coder-0.5b-instruct"
MAX_MINUTES = 24 * 60
MAX_CLIENTS = 256


# ---- the run -------------------------------------------------------------------------------
def client_loop(i: int, runner: Runner, args, deadline: float, stop: threading.Event, results: list,
                lock: threading.Lock) -> None:
    rng = random.Random(args.seed * 1000 + i)
    kinds, weights = zip(*TRACE.items())
    user = f"soak-{i}"
    hostile, hostile_weights = zip(*HOSTILE.items())
    while not stop.is_set() and time.perf_counter() < deadline:
        if rng.random() < args.hostile:
            kind = rng.choices(hostile, hostile_weights)[0]
            path, body, expect = make_hostile(kind, rng, args.model, user)
            kind = "hostile_" + kind
        else:
            kind = rng.choices(kinds, weights)[0]
            (path, body), expect = make_request(kind, rng, args, user), 200
        res = runner.run(kind, path, body, i, rng, expect)
        with lock:
            results.append(res)
        if not res.ok and len([r for r in results if not r.ok]) > args.max_errors:
            stop.set()  # something is badly wrong: stop early, the report says so
        time.sleep(rng.uniform(0.0, args.think_s))


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--model", default=DEFAULT_MODEL, help="model dir or known name to serve (not with --url)")
    ap.add_argument("--url", default=None, help="attach to this running server instead of starting one")
    ap.add_argument("--pid", type=int, default=None, help="with --url: the server's pid, for RSS")
    ap.add_argument("--served-model", default=None, help="with --url: the model name to send (default: first of /v1/models)")
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=128, help="largest max_tokens of the trace")
    ap.add_argument("--timeout", type=float, default=3600.0,
                    help="client socket timeout per request, s; a server this tool starts gets it as its "
                         "--request-timeout too (generous: on a contended machine a request may take minutes)")
    ap.add_argument("--think-s", type=float, default=0.5, help="each client pauses up to this between requests")
    ap.add_argument("--sample-s", type=float, default=5.0, help="RSS / gauge sampling period")
    ap.add_argument("--warmup-frac", type=float, default=0.2)
    ap.add_argument("--rss-tolerance", type=float, default=0.05)
    ap.add_argument("--max-errors", type=int, default=200, help="stop early after this many errors")
    ap.add_argument("--hostile", type=float, default=0.0,
                    help="fraction of requests drawn from the hostile mix (tools/soak_hostile.py), e.g. 0.05")
    ap.add_argument("--server-arg", action="append", default=[], help="extra argument for `serve` (repeatable)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", default="soak.json", help="JSON report ('-': none)")
    ap.add_argument("--log-dir", default=None, help="where the server log goes (default: a temp dir)")
    args = ap.parse_args(argv)
    if not 0 < args.minutes <= MAX_MINUTES:
        ap.error(f"--minutes must be in (0, {MAX_MINUTES}]")
    if not 1 <= args.clients <= MAX_CLIENTS:
        ap.error(f"--clients must be in [1, {MAX_CLIENTS}]")
    if not 1 <= args.max_tokens <= 4096:
        ap.error("--max-tokens must be in [1, 4096]")
    if not 0 <= args.warmup_frac < 1 or not 0 < args.rss_tolerance < 1:
        ap.error("--warmup-frac must be in [0, 1) and --rss-tolerance in (0, 1)")
    if args.timeout <= 0 or args.sample_s <= 0 or args.think_s < 0:
        ap.error("--timeout and --sample-s must be > 0, --think-s >= 0")
    if not 0 <= args.hostile <= 1:
        ap.error("--hostile must be in [0, 1]")
    if args.url and args.server_arg:
        ap.error("--server-arg needs a server this tool starts (no --url)")
    return args


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv=None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_interrupt)  # `kill` stops the server too, as Ctrl-C does
    srv = None
    stop = threading.Event()
    try:
        if args.url:
            url, pid = args.url.rstrip("/"), args.pid
        else:
            log_dir = Path(args.log_dir or tempfile.mkdtemp(prefix="soak-"))
            log_dir.mkdir(parents=True, exist_ok=True)
            t_load = time.monotonic()
            serve_args = list(args.server_arg)
            if not any(a.startswith("--request-timeout") for a in serve_args):
                serve_args += ["--request-timeout", str(args.timeout)]
            srv = launch(args.model, log_dir, *serve_args)
            print(f"server pid {srv.proc.pid} on {srv.url} ready in {time.monotonic() - t_load:.0f} s "
                  f"(log {srv.log_path})", flush=True)
            url, pid = srv.url, srv.proc.pid
        client = Client(url, None, args.timeout)
        args.model = args.served_model or (MODEL_NAME if srv else client.get_json("/v1/models")["data"][0]["id"])
        rss_at_ready = vm_rss_kib(pid) if pid else None
        t0 = time.perf_counter()
        duration_target = args.minutes * 60
        sampler = Sampler(pid, url, args.sample_s, t0, stop)
        sampler.smaps_at = duration_target * args.warmup_frac
        sampler.sample()
        sampler.start()
        results: list = []
        lock = threading.Lock()
        runner = Runner(client, args, t0)
        threads = [threading.Thread(target=client_loop, daemon=True, name=f"client-{i}",
                                    args=(i, runner, args, t0 + duration_target, stop, results, lock))
                   for i in range(args.clients)]
        for t in threads:
            t.start()
        next_print = time.perf_counter() + 60
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(timeout=1.0)
            if time.perf_counter() >= next_print:
                next_print += 60
                with lock:
                    n, bad = len(results), sum(not r.ok for r in results)
                last = sampler.samples[-1] if sampler.samples else {}
                rss = last.get("rss_kib")
                print(f"[{time.perf_counter() - t0:6.0f} s] requests {n} errors {bad} "
                      f"rss {rss / 1024 if rss else float('nan'):.1f} MiB", flush=True)
        duration = time.perf_counter() - t0
        stop.set()
        sampler.join(timeout=args.sample_s + 30)
        sampler.sample()  # one more: the server after the trace
        smaps_end = smaps_rss_kib(pid) if pid else {}
        growth = smaps_growth(sampler.smaps_warm, smaps_end) if sampler.smaps_warm and smaps_end else None
        gauges = metrics_of(SimpleNamespace(url=url))
        deadline = time.monotonic() + 60
        while any(gauges.values()) and time.monotonic() < deadline:
            time.sleep(0.5)
            gauges = metrics_of(SimpleNamespace(url=url))
        idle = {"not_idle": any(gauges.values()), "gauges": gauges}
        server_exit = srv.stop() if srv else None
        summary = summarize(results, sampler.samples, duration, args, idle, server_exit)
        summary["rss"]["smaps_growth_after_warmup"] = growth
        print(report_text(summary, sampler.samples, args), flush=True)
        cpu = cpu_model()
        report = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": " ".join(sys.argv),
                  "cpu": cpu, "nproc": os.cpu_count(), "load_avg": os.getloadavg(), "model": args.model,
                  "url": url, "pid": pid, "rss_kib_at_ready": rss_at_ready,
                  "config": {k: v for k, v in vars(args).items()}, "trace_weights": TRACE,
                  "hostile_weights": HOSTILE if args.hostile else None, "summary": summary,
                  "rss_samples": sampler.samples, "results": [asdict(r) for r in results]}
        if args.output != "-":
            with open(args.output, "w") as f:
                json.dump(report, f, indent=1)
        return 0 if all(summary["verdict"].values()) else 1
    except KeyboardInterrupt:
        print("interrupted: stopping", file=sys.stderr, flush=True)
        return 130
    finally:
        stop.set()
        if srv is not None:
            srv.stop()


if __name__ == "__main__":
    sys.exit(main())
