"""Keystroke latency of code infill: replays an editing session against POST /infill.

    python tools/bench_infill.py --base-url http://127.0.0.1:8012 [--requests 50]
        [--ring-tokens 2048] [--n-predict 4] [--cold 3] [--ring-update-every 0] [--output FILE]

The session is what llama.vim sends while one types: one file (a standard-library module),
its lines from --line on retyped one keystroke per request: `input_prefix` the --n-prefix
lines before the cursor, `prompt` the cursor line typed so far, `input_suffix` the --n-suffix
lines after; `input_extra` a ring of 32-line chunks of other standard-library modules,
--ring-tokens tokens in all (counted with the server's /tokenize), unchanged while typing as
llama.vim keeps it in insert mode (--ring-update-every N moves the ring every N requests: a
new chunk appended, the oldest dropped; those keystrokes are reported apart, for a server run
with and without --cache-reuse).

Cold prefill: --cold requests of the same size whose first chunk is unique (nothing of the
prompt is cached; a server with --cache-reuse stops its walk at that chunk too, as
llama-server's does), before the session. TTFT is send to the first server-sent event
(`stream: true`), the first token. Prints TTFT p50/p99 of the keystrokes against the cold
median, and writes them (every request's TTFT, prompt and cached tokens) as JSON. Standard
library only.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit import openai_http  # noqa: E402

FILE_MODULE = "json.decoder"  # the file being edited
RING_MODULES = ("textwrap", "difflib", "heapq", "bisect", "shlex", "fnmatch", "calendar", "string", "glob",
                "tokenize", "argparse", "dataclasses")
CHUNK_LINES = 32  # llama.vim's ring_chunk_size / 2 (the lines it takes around the cursor)


def module_lines(name: str) -> list:
    spec = importlib.util.find_spec(name)
    with open(spec.origin, encoding="utf-8") as f:
        return f.read().splitlines()


def percentile(xs: list, q: float) -> float:
    """Nearest-rank percentile (q in [0, 100])."""
    s = sorted(xs)
    return s[max(0, min(len(s) - 1, int(round(q / 100.0 * len(s) + 0.5)) - 1))]


class Client(openai_http.Client):
    """benchkit's client with /infill's streamed first event timed."""

    def __init__(self, base_url: str, api_key: str = "", timeout: float = 600.0):
        super().__init__(base_url, api_key, timeout)

    def infill_ttft(self, body: dict) -> tuple:
        """(seconds to the first event, the final result) of a streamed /infill request."""
        conn = self.connect()
        try:
            t0 = time.monotonic()
            conn.request("POST", self.prefix + "/infill", json.dumps(dict(body, stream=True)), self.headers)
            r = conn.getresponse()
            if r.status != 200:
                raise RuntimeError(f"/infill answered {r.status}: {r.read()[:300]!r}")
            ttft, final = None, None
            for line in r:
                if not line.startswith(b"data: "):
                    continue
                if ttft is None:
                    ttft = time.monotonic() - t0
                event = json.loads(line[6:])
                if "error" in event:
                    raise RuntimeError(f"/infill failed: {event['error']}")
                if event.get("stop"):
                    final = event
            return ttft, final
        finally:
            conn.close()


def build_ring(client: Client, ring_tokens: int) -> list:
    """Chunks of CHUNK_LINES lines of RING_MODULES until ring_tokens tokens (counted by /tokenize)."""
    chunks, total = [], 0
    for name in RING_MODULES:
        lines = module_lines(name)
        for i in range(0, len(lines) - CHUNK_LINES, CHUNK_LINES * 3):  # spread over the module
            text = "\n".join(lines[i:i + CHUNK_LINES]) + "\n"
            n = client.request_json("POST", "/tokenize", {"prompt": text})["count"]
            if total + n > ring_tokens:
                return chunks
            chunks.append({"filename": name.replace(".", "/") + ".py", "text": text, "tokens": n})
            total += n
    return chunks


def keystrokes(lines: list, start: int, n: int, n_prefix: int, n_suffix: int):
    """n (prefix, typed, suffix) states of retyping lines[start:] from an empty line."""
    row, col, out = start, 0, []
    while len(out) < n and row < len(lines):
        line = lines[row]
        col = min(col + 1, len(line))
        prefix = "\n".join(lines[max(0, row - n_prefix):row]) + "\n"
        suffix = "\n" + "\n".join(lines[row + 1:row + 1 + n_suffix]) + "\n"
        out.append((prefix, line[:col], suffix))
        if col >= len(line):
            row, col = row + 1, 0
    return out


def body_of(prefix: str, typed: str, suffix: str, ring: list, n_predict: int) -> dict:
    """llama.vim's request body (its sampling; no time limits: the bench measures the full prompt)."""
    return {"id_slot": 0, "input_prefix": prefix, "input_suffix": suffix, "prompt": typed, "n_predict": n_predict,
            "input_extra": [{"filename": c["filename"], "text": c["text"]} for c in ring], "top_k": 40,
            "top_p": 0.90, "samplers": ["top_k", "top_p", "infill"], "cache_prompt": True, "temperature": 0}


def run(args) -> dict:
    client = Client(args.base_url, args.api_key)
    ring_all = build_ring(client, args.ring_tokens * 2)
    ring_n = 0
    while ring_n < len(ring_all) and sum(c["tokens"] for c in ring_all[:ring_n + 1]) <= args.ring_tokens:
        ring_n += 1
    ring, spare = ring_all[:ring_n], ring_all[ring_n:]
    lines = module_lines(FILE_MODULE)
    states = keystrokes(lines, args.line, args.requests, args.n_prefix, args.n_suffix)
    cold = []
    for i in range(args.cold):  # a unique first chunk: nothing of the prompt is in the cache
        unique = [{"filename": "cold.py", "text": f"# cold run {uuid.uuid4().hex}\n", "tokens": 0}] + ring
        ttft, final = client.infill_ttft(body_of(*states[0], unique, args.n_predict))
        cold.append({"ttft_s": ttft, "prompt_tokens": final["tokens_evaluated"], "cached": final["tokens_cached"]})
        print(f"cold {i}: ttft {ttft:.3f} s, prompt {final['tokens_evaluated']} tokens, "
              f"cached {final['tokens_cached']}", flush=True)
    keys = []
    for i, state in enumerate(states):
        moved = bool(args.ring_update_every and i and i % args.ring_update_every == 0 and spare)
        if moved:
            ring = ring[1:] + [spare.pop(0)]
        ttft, final = client.infill_ttft(body_of(*state, ring, args.n_predict))
        keys.append({"ttft_s": ttft, "prompt_tokens": final["tokens_evaluated"], "cached": final["tokens_cached"],
                     "prompt_ms": final["timings"]["prompt_ms"], "ring_moved": moved})
        print(f"key {i}: ttft {ttft:.3f} s, prompt {final['tokens_evaluated']}, cached {final['tokens_cached']}",
              flush=True)
    cold_med = percentile([c["ttft_s"] for c in cold], 50) if cold else None
    kt = [k["ttft_s"] for k in keys]
    mt = [k["ttft_s"] for k in keys if k["ring_moved"]]  # the keystrokes whose ring moved (server --cache-reuse)
    res = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "base_url": args.base_url,
           "config": {k: getattr(args, k) for k in ("requests", "ring_tokens", "n_predict", "cold", "line", "n_prefix",
                                                   "n_suffix", "ring_update_every")},
           "ring_chunks": len(ring_all[:ring_n]), "ring_tokens": sum(c["tokens"] for c in ring_all[:ring_n]),
           "cold": cold, "cold_ttft_median_s": cold_med, "keystrokes": keys,
           "ttft_p50_s": percentile(kt, 50), "ttft_p99_s": percentile(kt, 99),
           "p50_over_cold": percentile(kt, 50) / cold_med if cold_med else None,
           "ttft_p50_moved_s": percentile(mt, 50) if mt else None,
           "moved_p50_over_cold": percentile(mt, 50) / cold_med if mt and cold_med else None}
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8012")
    ap.add_argument("--api-key", default=os.environ.get("LLAISYS_API_KEY", ""))
    ap.add_argument("--requests", type=int, default=50, help="keystrokes to replay")
    ap.add_argument("--ring-tokens", type=int, default=2048, help="tokens of extra chunks (the ring)")
    ap.add_argument("--n-predict", type=int, default=4, help="tokens per request")
    ap.add_argument("--cold", type=int, default=3, help="cold-prefill requests before the session")
    ap.add_argument("--line", type=int, default=60, help="the file line where retyping starts")
    ap.add_argument("--n-prefix", type=int, default=256, help="lines before the cursor (llama.vim's n_prefix)")
    ap.add_argument("--n-suffix", type=int, default=64, help="lines after the cursor (llama.vim's n_suffix)")
    ap.add_argument("--ring-update-every", type=int, default=0, help="move the ring every N requests (0: never)")
    ap.add_argument("--output", default="bench_infill.json")
    args = ap.parse_args(argv)
    res = run(args)
    cold = res["cold_ttft_median_s"]
    print(f"ring {res['ring_chunks']} chunks / {res['ring_tokens']} tokens; keystroke TTFT p50 "
          f"{res['ttft_p50_s']:.3f} s, p99 {res['ttft_p99_s']:.3f} s; cold prefill "
          + (f"{cold:.3f} s (p50 = {100 * res['p50_over_cold']:.0f}% of it)" if cold else "not measured"))
    if res["ttft_p50_moved_s"] is not None:
        print(f"keystrokes whose ring moved: TTFT p50 {res['ttft_p50_moved_s']:.3f} s"
              + (f" ({100 * res['moved_p50_over_cold']:.0f}% of cold)" if cold else ""))
    with open(args.output, "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
