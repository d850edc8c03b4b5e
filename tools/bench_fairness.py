"""A long prompt beside a decoding stream: the stream's inter-token gaps and the prompt's TTFT.

    python tools/bench_fairness.py [--model qwen2.5-coder-0.5b-instruct] [--threads 2]
        [--prompt-tokens 6000] [--gaps 0,500] [--repeats 2] [--json out.json]
    python tools/bench_fairness.py --server [--gaps 0,500] [--window 30] [--json out.json]

For each --gaps value (the engine's decode_gap_ms; 0 is the token budget alone, as before steps
were sized in time), one engine (AsyncEngine over an LLM, as the server runs it) measures:

- alone: the long prompt (--prompt-tokens random ids, max_tokens 1) with nothing else running:
  its TTFT;
- beside a stream: a greedy stream (32-token prompt, ignore_eos) decodes; after its 8th token the
  long prompt (new ids: no prefix-cache hit) arrives; the stream's largest and median gap between
  consecutive tokens from that moment until the long prompt's first token, and that TTFT.

Each condition runs --repeats times (a fresh prompt each time) and the medians are reported, with
TTFT beside / alone as the ratio the acceptance bound reads (<= 1.3), the step-cost fit the
engine learnt (engine/step_cost.py) and the CPU's flags. Prints a table, writes JSON.

--server measures what a user of the server feels, over loopback: a real `llaisys serve`
(--threads, the default KV budget) streams one greedy chat while a huge input arrives, and the
stream's largest gap over the --window seconds after it is sent is reported, with when the huge
request got its answer (first event, or its error). The inputs are issue #39's: a /v1/responses
input of 4,096 messages (~56k tokens: rendered and tokenized in the request's thread, beside the
engine loop, then refused as longer than the context) and a chat with 128 tools (a long prompt).
The huge request's client hangs up at the end of the window (the server aborts it).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit import host  # noqa: E402

STREAM_PROMPT = 32
STREAM_TOKENS = 4000  # more than the measurement needs: the stream is aborted once it is done


def _ids(rng: random.Random, n: int) -> list:
    return [rng.randrange(1000, 150000) for _ in range(n)]


def _alone(engine, rng, n: int, SamplingParams) -> float:
    t0 = time.monotonic()
    stream = engine.add_request(f"alone-{rng.random()}", _ids(rng, n), SamplingParams(max_tokens=1))
    for _ in stream:
        pass
    return time.monotonic() - t0


def _beside(engine, rng, n: int, SamplingParams) -> dict:
    sp = SamplingParams(max_tokens=STREAM_TOKENS, ignore_eos=True, temperature=0.0)
    stream = engine.add_request(f"stream-{rng.random()}", _ids(rng, STREAM_PROMPT), sp)
    times = []
    long_done = threading.Event()
    result = {}

    def read():
        for out in stream:
            times.append(time.monotonic())
            if long_done.is_set() and len(times) > result.get("mark", 1 << 30) + 2:
                stream.abort()
                break
        for _ in stream:  # the final output after the abort
            pass

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    while len(times) < 8:
        time.sleep(0.01)
    t0 = time.monotonic()
    result["mark"] = len(times)
    long = engine.add_request(f"long-{rng.random()}", _ids(rng, n), SamplingParams(max_tokens=1))
    for _ in long:
        pass
    ttft = time.monotonic() - t0
    long_done.set()
    reader.join(timeout=120)
    window = [t for t in times if t >= t0 - 1e-3]
    gaps = [b - a for a, b in zip(times, times[1:]) if b > t0]
    return {"ttft_s": ttft, "max_gap_s": max(gaps), "median_gap_s": statistics.median(gaps),
            "stream_tokens_during": len(window)}


def run(args) -> dict:
    from llaisys import LLM, SamplingParams, runtime
    from llaisys.engine import AsyncEngine

    rows = []
    for gap in args.gaps:
        rng = random.Random(1234 + int(gap))
        with LLM(args.model, threads=args.threads, max_num_seqs=8, decode_gap_ms=gap) as llm:
            engine = AsyncEngine(llm.engine)
            try:
                _alone(engine, rng, 512, SamplingParams)  # warm-up: workspaces, OpenMP pool, first fit
                alone = [_alone(engine, rng, args.prompt_tokens, SamplingParams) for _ in range(args.repeats)]
                beside = [_beside(engine, rng, args.prompt_tokens, SamplingParams) for _ in range(args.repeats)]
                fit = llm.engine.step_cost.rates()
            finally:
                engine.shutdown()
        med = lambda key: statistics.median(b[key] for b in beside)  # noqa: E731
        rows.append({"decode_gap_ms": gap, "ttft_alone_s": statistics.median(alone),
                     "ttft_beside_s": med("ttft_s"), "max_gap_s": max(b["max_gap_s"] for b in beside),
                     "median_gap_s": med("median_gap_s"),
                     "ttft_ratio": med("ttft_s") / statistics.median(alone),
                     "alone_samples": alone, "beside_samples": beside, "step_cost_fit": fit})
        threads = runtime.num_threads()
    return {"machine": host.machine(), "model": args.model, "threads": threads,
            "prompt_tokens": args.prompt_tokens, "repeats": args.repeats, "rows": rows}


def _huge_inputs(model: str) -> dict:
    """name -> (path, body) of the huge inputs the server mode sends."""
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"note {i}: keep going"}
            for i in range(4095)] + [{"role": "user", "content": "Summarize the notes."}]
    tools = [{"type": "function", "function": {
        "name": f"tool_{i}", "description": f"Looks up record kind {i} by id and returns its fields as JSON.",
        "parameters": {"type": "object", "properties": {"id": {"type": "string", "description": "record id"},
                                                        "limit": {"type": "integer", "minimum": 1, "maximum": 100}},
                       "required": ["id"]}}} for i in range(128)]
    return {"responses_4096_messages": ("/v1/responses", {"model": model, "input": msgs, "max_output_tokens": 1,
                                                           "stream": True}),
            "chat_128_tools": ("/v1/chat/completions", {"model": model, "max_tokens": 1, "stream": True, "tools": tools,
                                                         "messages": [{"role": "user", "content": "Find record 7."}]})}


def run_server(args) -> dict:
    import requests
    from benchkit.server import MODEL_NAME, launch, sse_events

    from llaisys.models import hub

    rows = []
    for gap in args.gaps:
        tmp = Path(tempfile.mkdtemp(prefix="fairness-"))
        srv = launch(hub.download(args.model, progress=False), tmp, "--threads", str(args.threads),
                     "--kv-cache-memory", "1GiB", "--decode-gap-ms", str(gap))
        try:
            for name, (path, body) in _huge_inputs(MODEL_NAME).items():
                times = []

                def stream():
                    chat = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Count from 1 to 1000."}],
                            "max_tokens": 4000, "ignore_eos": True, "temperature": 0, "stream": True}
                    with requests.post(srv.url + "/v1/chat/completions", json=chat, stream=True, timeout=600) as r:
                        for piece in r.iter_content(chunk_size=None):
                            times.append(time.monotonic())
                            if stop.is_set():
                                break

                stop = threading.Event()
                reader = threading.Thread(target=stream, daemon=True)
                reader.start()
                while len(times) < 8:
                    time.sleep(0.01)
                t0 = time.monotonic()
                status, first = None, None
                try:
                    with requests.post(srv.url + path, json=body, stream=True, timeout=args.window) as r:
                        status = r.status_code
                        if status != 200:  # refused (e.g. longer than the context): when the answer came
                            r.content
                            first = time.monotonic() - t0
                        else:
                            for _ in sse_events(r):
                                first = first or time.monotonic() - t0
                except requests.RequestException:  # the window ended first: hang up (the server aborts it)
                    pass
                while time.monotonic() < t0 + args.window:
                    time.sleep(0.1)
                stop.set()
                reader.join(timeout=60)
                gaps = [b - a for a, b in zip(times, times[1:]) if b > t0 and a < t0 + args.window]
                rows.append({"decode_gap_ms": gap, "input": name, "status": status, "first_event_s": first,
                             "max_gap_s": max(gaps), "median_gap_s": statistics.median(gaps),
                             "stream_chunks_in_window": len(gaps)})
        finally:
            srv.stop()
    return {"machine": host.machine(), "model": args.model, "threads": args.threads, "window_s": args.window,
            "server_rows": rows}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompt-tokens", type=int, default=6000)
    p.add_argument("--gaps", default="0,500", help="decode_gap_ms values, comma-separated (0: off)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--json", default=None)
    p.add_argument("--server", action="store_true", help="the huge server inputs instead (see above)")
    p.add_argument("--window", type=float, default=30.0, help="--server: seconds watched after the input is sent")
    args = p.parse_args(argv)
    args.gaps = [float(g) for g in args.gaps.split(",")]
    if args.server:
        res = run_server(args)
        print(host.describe(res["machine"]))
        print(f"{res['model']} served with {res['threads']} threads; one greedy stream while a huge input arrives")
        print(f"{'decode_gap_ms':>13} {'input':>24} {'status':>6} {'answer':>7} {'max gap':>8} {'median gap':>11} "
              f"{'chunks':>7}")
        for r in res["server_rows"]:
            answer = "-" if r["first_event_s"] is None else f"{r['first_event_s']:.1f}s"
            print(f"{r['decode_gap_ms']:>13g} {r['input']:>24} {r['status'] or '-':>6} {answer:>7} "
                  f"{r['max_gap_s']:>7.2f}s {r['median_gap_s']:>10.3f}s {r['stream_chunks_in_window']:>7}")
        _write_json(args.json, res)
        return 0
    res = run(args)
    print(host.describe(res["machine"]))
    print(f"{res['model']}, {res['threads']} threads, a {res['prompt_tokens']}-token prompt beside one greedy stream")
    print(f"{'decode_gap_ms':>13} {'TTFT alone':>11} {'TTFT beside':>12} {'ratio':>6} {'max gap':>8} {'median gap':>11}")
    for r in res["rows"]:
        print(f"{r['decode_gap_ms']:>13g} {r['ttft_alone_s']:>10.2f}s {r['ttft_beside_s']:>11.2f}s "
              f"{r['ttft_ratio']:>6.2f} {r['max_gap_s']:>7.2f}s {r['median_gap_s']:>10.3f}s")
    _write_json(args.json, res)
    return 0


def _write_json(path, res: dict) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    sys.exit(main())
