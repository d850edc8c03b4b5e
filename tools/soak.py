"""Soak test: N clients for T minutes against one llaisys server, a realistic mixed trace,
errors counted by kind and the server's memory (RSS) sampled over time.

    python tools/soak.py [--model qwen2.5-coder-0.5b-instruct] [--minutes 30] [--clients 8]
        [--max-tokens 128] [--url http://127.0.0.1:PORT --pid PID] [--output soak.json]

Without --url it starts `python -m llaisys.cli serve MODEL` (test/server/server_helpers.py's
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
import http.client
import json
import os
import random
import signal
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "test" / "server"))
sys.path.append(str(ROOT / "test"))  # ports.free_port, which server_helpers uses
from bench_serving import WORDS, Client, _content, _error_message, percentile, sse_events  # noqa: E402
from server_helpers import MODEL_NAME, launch, metrics_of  # noqa: E402
from soak_hostile import HOSTILE, make_hostile  # noqa: E402

DEFAULT_MODEL = "qwen2.5-coder-0.5b-instruct"
MAX_MINUTES = 24 * 60
MAX_CLIENTS = 256

# kind -> weight (relative); the intentional aborts are a few percent of the trace
TRACE = {
    "chat_stream": 30, "chat": 20, "completion_stream": 15, "completion": 15, "chat_n2": 4,
    "drop_stream": 7, "cancel_stream": 6, "drop_waiting": 3,
}
SYSTEM = ("You are a careful senior Python engineer. Answer briefly, with code when it helps, "
          "and never invent APIs that do not exist.")
QUESTIONS = ("Write a function that reverses a linked list.", "What does the GIL protect?",
             "Explain list comprehensions with one example.", "How do I read a CSV file with the standard library?",
             "Write a binary search in Python.", "What is the difference between a tuple and a list?",
             "Sort a dict by value.", "How do I time a function?", "Explain decorators in two sentences.",
             "Write a generator that yields Fibonacci numbers.")
CODE_PROMPTS = ("def quicksort(xs):\n", "import numpy as np\n\ndef softmax(x):\n", "class Stack:\n    def __init__(self):\n",
                "# parse a date string in ISO format\nfrom datetime import datetime\n", "def is_prime(n: int) -> bool:\n")


@dataclass
class Result:
    kind: str
    client: int
    start: float  # perf_counter() at send, relative to the trace's start
    ok: bool = False
    error_kind: str = ""  # "" when ok
    error: str = ""
    status: int = 0
    e2e: Optional[float] = None  # s, send -> end (requests run to completion only)
    ttft: Optional[float] = None  # s, send -> first content chunk (streams)
    output_tokens: int = 0
    finish_reason: Optional[str] = None
    note: str = ""  # e.g. "cancel raced the end"


class Failure(Exception):
    def __init__(self, kind: str, msg: str, status: int = 0):
        super().__init__(msg)
        self.kind, self.status = kind, status


# ---- the trace -----------------------------------------------------------------------------
def make_request(kind: str, rng: random.Random, args, user: str) -> tuple:
    """(path, body) of one request of `kind`."""
    sampled = rng.random() < 0.4
    body = {"model": args.model, "user": user, "max_tokens": rng.randint(1, args.max_tokens),
            "temperature": 0.7 if sampled else 0.0}
    if sampled:
        body["top_p"] = 0.9
        if rng.random() < 0.5:
            body["seed"] = rng.randrange(2**31)
    if kind in ("drop_stream", "cancel_stream", "drop_waiting"):
        body["max_tokens"] = args.max_tokens  # long enough to be cut short
        body["ignore_eos"] = True
    stream = kind.endswith("_stream")
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    if kind == "chat_n2":
        body.update(n=2, temperature=0.8, max_tokens=rng.randint(1, max(1, args.max_tokens // 2)))
    if kind.startswith("completion") or (kind in ("drop_stream", "cancel_stream", "drop_waiting")
                                         and rng.random() < 0.5):
        if rng.random() < 0.5:
            body["prompt"] = rng.choice(CODE_PROMPTS)
        else:
            body["prompt"] = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 120)))
        if rng.random() < 0.2:
            body["stop"] = ["\n\n"]
        return "/v1/completions", body
    messages = [{"role": "system", "content": SYSTEM}] if rng.random() < 0.6 else []
    if rng.random() < 0.3:  # a second turn
        messages += [{"role": "user", "content": rng.choice(QUESTIONS)},
                     {"role": "assistant", "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 40)))}]
    q = rng.choice(QUESTIONS)
    if rng.random() < 0.3:
        q += " Context: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 100)))
    messages.append({"role": "user", "content": q})
    body["messages"] = messages
    return "/v1/chat/completions", body


class Runner:
    def __init__(self, client: Client, args, t0: float):
        self.client, self.args, self.t0 = client, args, t0

    def run(self, kind: str, path: str, body: dict, client_id: int, rng: random.Random,
            expect: int = 200) -> Result:
        """One request; `expect` is the status it must get (a 4xx: refused in the API's error shape)."""
        res = Result(kind=kind, client=client_id, start=time.perf_counter() - self.t0)
        start = time.perf_counter()
        conn = self.client.connect()
        try:
            if kind == "drop_waiting":
                self._drop_waiting(body, rng, res)
            else:
                conn.request("POST", self.client.prefix + path, body=json.dumps(body).encode(),
                             headers=self.client.headers)
                resp = conn.getresponse()
                res.status = resp.status
                if resp.status != expect:
                    raise Failure(f"http_{resp.status}", _error_message(resp.read()), resp.status)
                if expect != 200:
                    err = json.loads(resp.read())["error"]
                    if not isinstance(err.get("message"), str) or not err["message"]:
                        raise Failure("bad_error", f"a {expect} without an error message: {err!r:.200}")
                    res.note = f"refused with {expect} as expected"
                elif body.get("stream"):
                    self._stream(kind, resp, body, rng, res, start)
                else:
                    self._whole(resp, body, res, start)
            res.ok = True
        except Failure as e:
            res.error_kind, res.error = e.kind, str(e)[:300]
        except socket.timeout as e:
            res.error_kind, res.error = "client_timeout", f"{type(e).__name__}: {e}"
        except (OSError, http.client.HTTPException) as e:
            res.error_kind, res.error = "connection", f"{type(e).__name__}: {e}"
        except (ValueError, KeyError, TypeError, IndexError) as e:
            res.error_kind, res.error = "bad_response", f"{type(e).__name__}: {e}"
        finally:
            conn.close()
        return res

    def _whole(self, resp, body: dict, res: Result, start: float) -> None:
        out = json.loads(resp.read())
        res.e2e = res.ttft = time.perf_counter() - start
        n = body.get("n", 1)
        if len(out["choices"]) != n:
            raise Failure("bad_response", f"{len(out['choices'])} choices for n={n}")
        for c in out["choices"]:
            if c.get("finish_reason") not in ("stop", "length"):
                raise Failure("bad_finish", f"finish_reason {c.get('finish_reason')!r}")
        res.finish_reason = out["choices"][0]["finish_reason"]
        res.output_tokens = out["usage"]["completion_tokens"]
        if not 0 < res.output_tokens <= n * body["max_tokens"]:
            raise Failure("bad_response", f"{res.output_tokens} completion tokens for max_tokens {body['max_tokens']}")

    def _stream(self, kind: str, resp, body: dict, rng: random.Random, res: Result, start: float) -> None:
        cut_after = rng.randint(1, 8) if kind in ("drop_stream", "cancel_stream") else None
        chunks, cancelled, rid = 0, None, None
        finish = None
        for event in sse_events(resp, Failure):  # a stream without [DONE] raises Failure("no_done")
            rid = rid or event.get("id")
            for c in event.get("choices") or []:
                if _content(c):
                    chunks += 1
                    if res.ttft is None:
                        res.ttft = time.perf_counter() - start
                finish = c.get("finish_reason") or finish
            if event.get("usage"):
                res.output_tokens = event["usage"].get("completion_tokens") or 0
            if cut_after is not None and cancelled is None and chunks >= cut_after:
                if kind == "drop_stream":
                    res.note = f"dropped after {chunks} chunks"
                    return  # run() closes the connection: the server sees the client leave
                cancelled = self._cancel(rid, body["user"])
        res.finish_reason = finish
        if kind == "cancel_stream":
            if cancelled is None:
                res.note = "ended before the cut"
            elif cancelled:
                if finish != "abort":
                    raise Failure("bad_finish", f"cancelled stream ended with finish_reason {finish!r}")
                res.note = "cancelled"
            else:
                res.note = "cancel raced the end"
            return
        res.e2e = time.perf_counter() - start
        if finish not in ("stop", "length"):
            raise Failure("bad_finish", f"finish_reason {finish!r}")

    def _cancel(self, rid: Optional[str], user: str) -> bool:
        """POST the cancel route; True if it cancelled, False if the request had just finished."""
        if not rid:
            raise Failure("bad_stream", "no response id in the first event")
        conn = self.client.connect()
        try:
            conn.request("POST", f"{self.client.prefix}/v1/requests/{rid}/cancel",
                         body=json.dumps({"user": user}).encode(), headers=self.client.headers)
            resp = conn.getresponse()
            raw = resp.read()
            if resp.status == 200 and json.loads(raw).get("cancelled") is True:
                return True
            if resp.status == 404 and b"request_not_found" in raw:
                return False
            raise Failure(f"cancel_http_{resp.status}", _error_message(raw), resp.status)
        finally:
            conn.close()

    def _drop_waiting(self, body: dict, rng: random.Random, res: Result) -> None:
        """A non-streaming request whose client hangs up before the answer comes."""
        payload = json.dumps(body).encode()
        with socket.create_connection((self.client.host, self.client.port), timeout=self.args.timeout) as s:
            s.sendall(b"POST %s/v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (self.client.prefix.encode(), self.client.host.encode(),
                                                        len(payload), payload))
            time.sleep(rng.uniform(0.2, 1.5))
        res.note = "hung up while waiting"


# ---- RSS and gauges ------------------------------------------------------------------------
def vm_rss_kib(pid: int) -> Optional[int]:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def smaps_rss_kib(pid: int) -> dict:
    """{"start-end name": Rss KiB} of every mapping of the process that holds memory."""
    out, key = {}, None
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                head = line.split(None, 6)
                if "-" in head[0] and not head[0].endswith(":"):
                    key = head[0] + (" " + head[5].strip() if len(head) > 5 else "")
                elif head[0] == "Rss:" and key is not None and int(head[1]):
                    out[key] = int(head[1])
    except (OSError, ValueError, IndexError):
        return {}
    return out


def smaps_growth(before: dict, after: dict, top: int = 8) -> dict:
    """Where RSS went between two smaps_rss_kib() snapshots: the mappings that grew most."""
    diffs = {k: after.get(k, 0) - before.get(k, 0) for k in set(before) | set(after)}
    grew = sorted(((d, k) for k, d in diffs.items() if d), reverse=True)
    return {"total_kib": sum(diffs.values()), "top": [{"mapping": k, "before_kib": before.get(k, 0),
                                                       "after_kib": after.get(k, 0), "delta_kib": d}
                                                      for d, k in grew[:top]]}


class Sampler(threading.Thread):
    """Every `every` seconds: (t since the trace's start, RSS KiB, running, waiting, kv usage)."""

    def __init__(self, pid: Optional[int], url: str, every: float, t0: float, stop: threading.Event):
        super().__init__(daemon=True, name="sampler")
        self.pid, self.srv, self.every, self.t0, self.stop = pid, SimpleNamespace(url=url), every, t0, stop
        self.samples: list = []
        self.smaps_at: Optional[float] = None  # when to snapshot /proc/<pid>/smaps (the warm-up's end)
        self.smaps_warm: dict = {}

    def sample(self) -> None:
        rss = vm_rss_kib(self.pid) if self.pid else None
        try:
            m = metrics_of(self.srv)
        except Exception as e:  # noqa: BLE001 - a failed scrape is recorded, not fatal
            m = {"error": f"{type(e).__name__}: {e}"}
        t = time.perf_counter() - self.t0
        self.samples.append({"t_s": round(t, 2), "rss_kib": rss, **m})
        if self.pid and self.smaps_at is not None and t >= self.smaps_at and not self.smaps_warm:
            self.smaps_warm = smaps_rss_kib(self.pid)

    def run(self) -> None:
        while not self.stop.wait(self.every):
            self.sample()


def rss_verdict(samples: list, duration: float, warmup_frac: float, tolerance: float) -> dict:
    """Flatness of the RSS samples taken after the warm-up (see the module docstring)."""
    cut = duration * warmup_frac
    post = [(s["t_s"], s["rss_kib"]) for s in samples if s["rss_kib"] and s["t_s"] >= cut and s["t_s"] <= duration]
    out = {"warmup_s": round(cut, 1), "tolerance": tolerance, "n_post_warmup": len(post)}
    if len(post) < 3:
        return {**out, "flat": False, "why": "fewer than 3 RSS samples after warm-up"}
    rss = [r for _, r in post]
    lo, hi = min(rss), max(rss)
    ts = [t for t, _ in post]
    mt, mr = sum(ts) / len(ts), sum(rss) / len(rss)
    var = sum((t - mt) ** 2 for t in ts)
    slope = sum((t - mt) * (r - mr) for t, r in post) / var if var else 0.0  # KiB/s
    spread = (hi - lo) / lo
    return {**out, "first_kib": rss[0], "min_kib": lo, "max_kib": hi, "last_kib": rss[-1],
            "median_kib": percentile(rss, 50), "spread": spread, "max_vs_first": (hi - rss[0]) / rss[0],
            "slope_mib_per_hour": slope * 3600 / 1024, "flat": spread <= tolerance}


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


def _stats_ms(values: list) -> dict:
    ms = [v * 1000.0 for v in values if v is not None]
    return {"n": len(ms), "p50": percentile(ms, 50), "p99": percentile(ms, 99), "max": max(ms) if ms else None}


def summarize(results: list, samples: list, duration: float, args, idle: dict, server_exit) -> dict:
    errors: dict = {}
    for r in results:
        if not r.ok:
            e = errors.setdefault(r.error_kind, {"count": 0, "example": r.error, "kinds": Counter()})
            e["count"] += 1
            e["kinds"][r.kind] += 1
    for e in errors.values():
        e["kinds"] = dict(e["kinds"])
    n_errors = sum(e["count"] for e in errors.values())
    if idle.get("not_idle"):
        n_errors += 1
        errors["not_idle"] = {"count": 1, "example": f"after the trace: {idle['gauges']}", "kinds": {}}
    if server_exit not in (None, 0):
        n_errors += 1
        errors["server_exit"] = {"count": 1, "example": f"server exit status {server_exit}", "kinds": {}}
    done = [r for r in results if r.ok and r.e2e is not None]
    rss = rss_verdict(samples, duration, args.warmup_frac, args.rss_tolerance)
    return {
        "requests": len(results), "ok": sum(r.ok for r in results), "errors": n_errors, "errors_by_kind": errors,
        "by_kind": dict(Counter(r.kind for r in results)),
        "notes": dict(Counter(r.note for r in results if r.note)),
        "duration_s": duration, "requests_per_s": len(results) / duration if duration else None,
        "output_tokens": sum(r.output_tokens for r in results if r.ok),
        "e2e_ms": _stats_ms([r.e2e for r in done]),
        "ttft_ms": _stats_ms([r.ttft for r in results if r.ok and r.kind.endswith("_stream") and r.ttft is not None]),
        "idle_after": idle, "server_exit_status": server_exit, "rss": rss,
        "verdict": {"errors_zero": n_errors == 0, "rss_flat": rss["flat"]},
    }


def report_text(s: dict, samples: list, args) -> str:
    def ms(v):
        return "-" if v is None else f"{v:.0f}"

    lines = [f"requests {s['requests']} ({s['requests_per_s']:.2f}/s over {s['duration_s']:.0f} s), "
             f"ok {s['ok']}, errors {s['errors']}, output tokens {s['output_tokens']}",
             "by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(s["by_kind"].items())),
             "notes: " + (", ".join(f"{k}: {v}" for k, v in sorted(s["notes"].items())) or "-")]
    for kind, e in s["errors_by_kind"].items():
        lines.append(f"  error {kind}: {e['count']} ({e['kinds']}) e.g. {e['example']}")
    for name in ("e2e_ms", "ttft_ms"):
        st = s[name]
        lines.append(f"{name[:-3].upper():5} n={st['n']} p50 {ms(st['p50'])} ms  p99 {ms(st['p99'])} ms  max {ms(st['max'])} ms")
    lines.append("RSS over time (t s: MiB, running/waiting, kv):")
    step = max(1, len(samples) // 20)
    for smp in samples[::step] + ([samples[-1]] if samples and (len(samples) - 1) % step else []):
        rss = "-" if not smp["rss_kib"] else f"{smp['rss_kib'] / 1024:.1f}"
        lines.append(f"  {smp['t_s']:8.1f}: {rss:>8} MiB  {smp.get('num_requests_running', '-')}/"
                     f"{smp.get('num_requests_waiting', '-')}  {smp.get('kv_cache_usage_perc', '-')}")
    r = s["rss"]
    if "spread" in r:
        lines.append(f"RSS after warm-up (t >= {r['warmup_s']} s, {r['n_post_warmup']} samples): min {r['min_kib'] / 1024:.1f} "
                     f"max {r['max_kib'] / 1024:.1f} first {r['first_kib'] / 1024:.1f} last {r['last_kib'] / 1024:.1f} MiB; "
                     f"spread (max-min)/min {100 * r['spread']:.2f} %; slope {r['slope_mib_per_hour']:+.1f} MiB/h")
    g = r.get("smaps_growth_after_warmup")
    if g:
        lines.append(f"mappings that grew from the warm-up's end to the trace's end (total {g['total_kib'] / 1024:+.1f} MiB):")
        for m in g["top"][:5]:
            lines.append(f"  {m['mapping']}: {m['before_kib']} -> {m['after_kib']} KiB ({m['delta_kib']:+d})")
    lines.append(f"VERDICT errors: {'PASS' if s['verdict']['errors_zero'] else 'FAIL'} ({s['errors']} errors)")
    lines.append(f"VERDICT rss flat within {100 * args.rss_tolerance:g} % after warm-up: "
                 f"{'PASS' if s['verdict']['rss_flat'] else 'FAIL'}" + (f" ({r['why']})" if "why" in r else
                                                                        f" (spread {100 * r['spread']:.2f} %)"))
    return "\n".join(lines)


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
        cpu = _cpu_model()
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


def _cpu_model() -> Optional[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


if __name__ == "__main__":
    sys.exit(main())
