"""Multi-session chat trace against any OpenAI-compatible server: the prefix-cache hit rate
a router achieves (issue 23: prefix-aware routing vs Ray's default).

    python tools/bench_sessions.py --base-url http://127.0.0.1:8000 [--sessions 8] [--turns 4]
        [--system-words 200] [--user-words 24] [--max-tokens 16] [--concurrency 4] [--session-ids]

Each session is a conversation with its own long system prompt; every turn sends the whole
history so far (OpenAI style, so only the prompt's blocks tell a router where the history
is cached), or with --session-ids also a ``session_id`` (server-side sessions, routed by
session). Sessions run concurrently (at most --concurrency at once), their turns in order.
The hit rate is the served prompt tokens reported as cached over all prompt tokens, from
each response's usage (``prompt_tokens_details.cached_tokens``). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.request import Request, urlopen

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit.openai_http import WORDS as OPENAI_WORDS  # noqa: E402

WORDS = OPENAI_WORDS[:49]  # the first 49 of the load generators' words (the sessions drawn so far)


def post(base: str, body: dict, key: str, timeout: float) -> dict:
    req = Request(base.rstrip("/") + "/v1/chat/completions", data=json.dumps(body).encode(), method="POST",
                  headers={"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})})
    with urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def run_session(args, s: int) -> list:
    rng = random.Random(args.seed * 1000 + s)
    system = f"Session {s}. " + " ".join(rng.choice(WORDS) for _ in range(args.system_words))
    history = [{"role": "system", "content": system}]
    usages = []
    for t in range(args.turns):
        user = {"role": "user", "content": " ".join(rng.choice(WORDS) for _ in range(args.user_words))}
        body = {"model": args.model, "max_tokens": args.max_tokens, "temperature": 0}
        if args.session_ids:
            body.update(session_id=f"bench-{args.seed}-{s}", messages=[history[0], user] if t == 0 else [user])
        else:
            body["messages"] = history + [user]
        out = post(args.base_url, body, args.api_key, args.timeout)
        u = out["usage"]
        usages.append((u["prompt_tokens"], (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)))
        history += [user, {"role": "assistant", "content": out["choices"][0]["message"]["content"]}]
    return usages


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", default=None, help="model name (default: the server's first)")
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--sessions", type=int, default=8)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--system-words", type=int, default=200, help="words of each session's system prompt")
    ap.add_argument("--user-words", type=int, default=24, help="words of each user turn")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=4, help="sessions in flight at once")
    ap.add_argument("--session-ids", action="store_true", help="send session_id (server-side history)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--output", default="-", help="JSON results file ('-': none)")
    args = ap.parse_args(argv)
    if args.model is None:
        with urlopen(Request(args.base_url.rstrip("/") + "/v1/models", headers={"Authorization": f"Bearer "
                                                                                 f"{args.api_key}"} if args.api_key
                             else {}), timeout=60) as r:
            args.model = json.loads(r.read())["data"][0]["id"]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.concurrency) as pool:
        per_session = list(pool.map(lambda s: run_session(args, s), range(args.sessions)))
    wall = time.perf_counter() - t0
    prompt = sum(p for us in per_session for p, _ in us)
    cached = sum(c for us in per_session for _, c in us)
    later = [(p, c) for us in per_session for p, c in us[1:]]  # turns that have a history to hit
    report = {"sessions": args.sessions, "turns": args.turns, "prompt_tokens": prompt, "cached_tokens": cached,
              "hit_rate": cached / prompt if prompt else 0.0,
              "hit_rate_later_turns": sum(c for _, c in later) / max(1, sum(p for p, _ in later)),
              "wall_s": wall}
    print(json.dumps(report, indent=1))
    if args.output != "-":
        with open(args.output, "w") as f:
            json.dump({"args": vars(args), **report}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
