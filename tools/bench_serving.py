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
of content chunks. Standard library only, so it runs wherever Python does.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Optional
from urllib.parse import urlsplit

# Common short English words: each is one token with its leading space in most BPE vocabularies.
WORDS = ("time year people way day man thing woman life child world school state family student group "
         "country problem hand part place case week company system program question work government number "
         "night point home water room mother area money story fact month lot right study book eye job word "
         "business issue side kind head house service friend father power hour game line end member law car "
         "city community name president team minute idea kid body information back parent face others level "
         "office door health person art war history party result change morning reason research girl guy "
         "moment air teacher force education").split()


@dataclass
class RequestResult:
    ok: bool = False
    status: int = 0  # HTTP status (0: no response)
    error: str = ""
    start: float = 0.0  # perf_counter() at send
    ttft: Optional[float] = None  # s, send -> first content chunk
    e2e: float = 0.0  # s, send -> end of the response
    itl: list = field(default_factory=list)  # s, gaps between content chunks
    prompt_tokens: Optional[int] = None  # from usage
    output_tokens: int = 0  # from usage, else content chunks

    @property
    def tpot(self) -> Optional[float]:
        if self.ttft is None or self.output_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)


class Client:
    """One HTTP connection per request (what concurrent users do), to base_url."""

    def __init__(self, base_url: str, api_key: Optional[str], timeout: float):
        u = urlsplit(base_url.rstrip("/"))
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"--base-url must be http(s)://host[:port][/prefix], got {base_url!r}")
        self.https = u.scheme == "https"
        self.host, self.port = u.hostname, u.port or (443 if self.https else 80)
        self.prefix = u.path.rstrip("/")
        if self.prefix.endswith("/v1"):
            self.prefix = self.prefix[:-3]
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.timeout = timeout

    def connect(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=self.timeout)

    def get_json(self, path: str) -> dict:
        conn = self.connect()
        try:
            conn.request("GET", self.prefix + path, headers=self.headers)
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 200:
                raise RuntimeError(f"GET {path}: HTTP {resp.status}: {body[:300]!r}")
            return json.loads(body)
        finally:
            conn.close()

    def post(self, path: str, body: dict, stream: bool) -> RequestResult:
        res = RequestResult(start=time.perf_counter())
        conn = self.connect()
        try:
            conn.request("POST", self.prefix + path, body=json.dumps(body).encode(), headers=self.headers)
            resp = conn.getresponse()
            res.status = resp.status
            if resp.status != 200:
                res.error = _error_message(resp.read())
            elif stream:
                _read_stream(resp, res, body.get("max_tokens"))
            else:
                _read_whole(resp, res)
        except (OSError, http.client.HTTPException, ValueError) as e:
            res.error = f"{type(e).__name__}: {e}"
        finally:
            conn.close()
        res.e2e = time.perf_counter() - res.start
        res.ok = not res.error
        return res


def _error_message(raw: bytes) -> str:
    try:
        err = json.loads(raw)["error"]
        return str(err.get("message", err))[:300]
    except (ValueError, KeyError, TypeError, AttributeError):
        return raw[:300].decode("utf-8", "replace")


def _content(choice: dict) -> str:
    """The text of one choice of a chunk or response (completions or chat)."""
    if "text" in choice:
        return choice.get("text") or ""
    msg = choice.get("delta") or choice.get("message") or {}
    return msg.get("content") or ""


def _value_error(kind: str, message: str) -> Exception:
    return ValueError(message)


def sse_events(resp, fail=_value_error):
    """The JSON payloads of a server-sent-event response as they come, ending at data: [DONE].
    fail(kind, message) makes the exception raised for a payload that is not JSON (kind
    "bad_stream"), an error event ("error_event") or a stream that ends without [DONE]
    ("no_done")."""
    for raw in iter(resp.readline, b""):
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        try:
            event = json.loads(data)
        except ValueError:
            raise fail("bad_stream", f"not JSON: {data[:200]!r}") from None
        if "error" in event:
            raise fail("error_event", f"error event: {_error_message(data)}")
        yield event
    raise fail("no_done", "the stream ended without data: [DONE]")


def _read_stream(resp, res: RequestResult, max_tokens: Optional[int] = None) -> None:
    """Server-sent events until [DONE]: time the content chunks, take the usage. A server that
    reports no usage (llama-cpp-python's) made exactly max_tokens tokens when it finished for
    "length"; else the content chunks are the count (a chunk may hold more than one token)."""
    last, chunks, finish = None, 0, None
    for event in sse_events(resp):
        now = time.perf_counter()
        for c in event.get("choices") or []:
            finish = c.get("finish_reason") or finish
        if any(_content(c) for c in event.get("choices") or []):
            chunks += 1
            if last is None:
                res.ttft = now - res.start
            else:
                res.itl.append(now - last)
            last = now
        if event.get("usage"):
            res.prompt_tokens = event["usage"].get("prompt_tokens")
            res.output_tokens = event["usage"].get("completion_tokens") or 0
    if not res.output_tokens:
        res.output_tokens = max_tokens if finish == "length" and max_tokens else chunks


def _read_whole(resp, res: RequestResult) -> None:
    body = json.loads(resp.read())
    res.ttft = time.perf_counter() - res.start  # the whole answer is the first token's arrival
    usage = body.get("usage") or {}
    res.prompt_tokens = usage.get("prompt_tokens")
    res.output_tokens = usage.get("completion_tokens") or 0


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


def percentile(values: list, q: float) -> Optional[float]:
    """The q-th percentile (0..100) with linear interpolation (numpy's default); None if empty."""
    if not values:
        return None
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


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
