"""Speculative decoding benchmark (issue 21): decode speed with speculation on vs off.

One run, configurations alternated within each repeat, printed table + JSON:
- workloads: "grounded" (edit/refactor code given in the prompt, answer by quoting a given
  document: the output copies the input, where prompt lookup shines) and "chat" (open questions);
- llaisys on the target (default: the 1.5B's Q4_K_M GGUF) with speculation off, n-gram, and a
  draft model (default: the 0.5B's GGUF), at batch 1 and batch 16 (adaptive k and the
  off-switch on, as users get them);
- llama.cpp's own speculative decoding, the peer of record: llama-server (tools/build_llama_cpp.py)
  on the same GGUF files and prompts, off, n-gram (`--spec-type ngram-simple`: prompt lookup in
  C++) and draft model (`--spec-type draft-simple -md`, the same draft GGUF), over loopback with
  streaming. Batch 1: one
  slot, tok/s = (tokens - 1) / (last token - first token) from the client's clock, as for
  llaisys (its own `timings.predicted_per_second` and draft acceptance are kept beside). Batch
  B: B slots (`--parallel B`, 1,024 tokens of context each), the B prompts sent at once, tok/s =
  output tokens / wall time from the first request sent to the last stream's end, as llaisys'
  batch figure (which runs offline: no HTTP on its side);
- llama-cpp-python on the same GGUF file and prompts, plain and with its prompt-lookup
  speculative decoding (llama_cpp.llama_speculative.LlamaPromptLookupDecoding), batch 1: a
  labelled row only (pure-Python lookup through logits_all, slower than plain llama.cpp).

Batch 1 reports decode tok/s (output tokens after the first / time after the first token,
greedy); batch 16 reports output tokens / wall time of the whole batch (prefill included,
the same for on and off). Each configuration runs in its own process (llama.cpp in the peer
virtualenv of tools/build_llama_cpp.py).

  python tools/bench_spec.py                      # the full run
  python tools/bench_spec.py --batches 1 --max-tokens 96 --repeats 1 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit.host import describe, machine  # noqa: E402
from benchkit import peer as llama_cpp_peer  # noqa: E402
from benchkit.net import free_port  # noqa: E402

GGUF = Path.home() / ".cache/llaisys/gguf"
CODE = '''import json
from dataclasses import dataclass


@dataclass
class Item:
    name: str
    price: float
    quantity: int


def load_items(path):
    with open(path) as f:
        data = json.load(f)
    items = []
    for row in data:
        items.append(Item(row["name"], float(row["price"]), int(row["quantity"])))
    return items


def total_value(items):
    total = 0.0
    for item in items:
        total += item.price * item.quantity
    return total


def cheapest(items):
    best = None
    for item in items:
        if best is None or item.price < best.price:
            best = item
    return best
'''
DOC = ("The lighthouse at Pointe Sombre was built in 1861 from granite quarried on the island itself. "
       "Its lamp, first fuelled by whale oil and later by kerosene, was electrified in 1936. The keeper's "
       "house beside the tower held two families until 1971, when the light was automated. In 1998 the "
       "tower was listed as a historic monument, and since 2004 it has been open to visitors every summer, "
       "who climb its 183 steps to a gallery 41 metres above the sea.")
GROUNDED = [
    f"Rename the function total_value to inventory_value everywhere in this code and print the whole "
    f"updated file:\n```python\n{CODE}```",
    f"Add type hints to every function in this code and print the complete file:\n```python\n{CODE}```",
    f"Quote, word for word, the sentences of this document that mention a year:\n\n{DOC}",
    f"Replace the for loop in total_value with sum() and print the whole file:\n```python\n{CODE}```",
]
CHAT = ["Explain how a hash map works.", "Write a short story about a robot learning to paint.",
        "What are the pros and cons of electric cars?", "Describe the water cycle for a child."]


def prompts(kind: str, n: int) -> list:
    """n prompts of the workload. A batch larger than its distinct prompts tags each with its
    index, so that no two share more than the chat template's head: llama-server's slots share
    no prefix, and llaisys' prefix cache would have prefilled a repeated prompt once (the rows
    of before 2026-11-29 16:00 UTC repeated them)."""
    base = GROUNDED if kind == "grounded" else CHAT
    if n <= len(base):
        return base[:n]
    return [f"(Request {i + 1} of {n}.) {base[i % len(base)]}" for i in range(n)]


# ---- workers ----------------------------------------------------------------------------------
def run_llaisys(cfg: dict) -> dict:
    from llaisys.engine import SamplingParams
    from llaisys.engine.llm import LLM

    spec = cfg["spec"]
    llm = LLM(cfg["target"], kv_cache_memory="512MiB", max_num_seqs=max(16, cfg["batch"]), seed=0,
              speculative=None if spec == "off" else spec, num_speculative_tokens=cfg.get("k"))
    sp = SamplingParams(temperature=0.0, max_tokens=cfg["max_tokens"], ignore_eos=True)
    msgs = [[{"role": "user", "content": p}] for p in prompts(cfg["workload"], cfg["batch"])]
    llm.generate(msgs[:1], SamplingParams(max_tokens=4))  # warm-up (workspace, caches)
    res = {}
    if cfg["batch"] == 1:
        rates = []
        for m in msgs[:1] if cfg["workload"] == "chat" else [[{"role": "user", "content": p}] for p in GROUNDED[:2]]:
            first, n, t_end = None, 0, None
            for out in llm.stream(m, sp):
                now = time.perf_counter()
                got = len(out.outputs[0].token_ids)
                if first is None and got:
                    first, n0 = now, got
                n, t_end = got, now
            rates.append((n - n0) / (t_end - first))
        res["tok_s"] = statistics.mean(rates)
    else:
        t = time.perf_counter()
        outs = llm.generate(msgs, sp)
        res["tok_s"] = sum(len(o.outputs[0].token_ids) for o in outs) / (time.perf_counter() - t)
    st = llm.spec.stats if llm.spec is not None else None
    if st is not None:
        res.update(draft_tokens=st.num_draft_tokens, accepted_tokens=st.num_accepted_tokens,
                   acceptance_rate=round(st.acceptance_rate, 3), mean_accepted_length=round(st.mean_accepted_length, 3),
                   off_steps=st.num_off_steps)
    llm.close()
    return res


def run_llama(cfg: dict) -> dict:
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    draft = LlamaPromptLookupDecoding(num_pred_tokens=cfg.get("k") or 10) if cfg["spec"] == "ngram" else None
    llm = Llama(model_path=cfg["llama_gguf"], n_ctx=4096, n_threads=cfg["threads"], verbose=False, draft_model=draft,
                logits_all=draft is not None)
    ps = [prompts(cfg["workload"], 1)[0]] if cfg["workload"] == "chat" else GROUNDED[:2]
    llm.create_chat_completion([{"role": "user", "content": "Hi"}], max_tokens=4, temperature=0.0)  # warm-up
    rates = []
    for p in ps:
        first, n, t_end = None, 0, None
        for chunk in llm.create_chat_completion([{"role": "user", "content": p}], max_tokens=cfg["max_tokens"],
                                                temperature=0.0, stream=True):
            if not chunk["choices"][0]["delta"].get("content"):
                continue
            now = time.perf_counter()
            n += 1  # one chunk per token
            if first is None:
                first = now
            t_end = now
        rates.append((n - 1) / (t_end - first))
    return {"tok_s": statistics.mean(rates)}


def run_llama_server(cfg: dict) -> dict:
    """llama-server with its own speculation (cfg["spec"]: off, ngram, draft:<gguf>), one slot
    per sequence of the batch."""
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor

    peer = llama_cpp_peer.ensure()
    port = free_port()
    spec, batch = cfg["spec"], cfg["batch"]
    # -md alone loads the draft model but drafts nothing: this llama.cpp's --spec-type is none by
    # default (measured: no draft_n in the timings without draft-simple, 41 of 60 accepted with it)
    extra = [] if spec == "off" else ["--spec-type", "ngram-simple"] if spec == "ngram" else \
        ["--spec-type", "draft-simple", "-md", spec.split(":", 1)[1], "-tbd", str(cfg["threads"]),
         "-td", str(cfg["threads"])]
    ctx = 4096 if batch == 1 else 1024 * batch  # the slots share -c
    argv = [peer["server"], "-m", cfg["llama_gguf"], "--host", "127.0.0.1", "--port", str(port), "-t", str(cfg["threads"]),
            "-tb", str(cfg["threads"]), "-c", str(ctx), "--parallel", str(batch), "--no-webui", *extra]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if urllib.request.urlopen(base + "/health", timeout=2).status == 200:
                    break
            except OSError:
                time.sleep(0.5)
            if proc.poll() is not None:
                raise RuntimeError(f"llama-server exited: {proc.stderr.read()[-2000:]}")

        def chat(content: str, max_tokens: int) -> tuple:
            body = json.dumps({"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
                               "temperature": 0.0, "stream": True, "ignore_eos": True}).encode()
            req = urllib.request.Request(base + "/v1/chat/completions", body, {"Content-Type": "application/json"})
            first = last = None
            timings = {}
            with urllib.request.urlopen(req, timeout=600) as r:
                for line in r:
                    if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                        continue
                    ev = json.loads(line[6:])
                    timings = ev.get("timings") or timings
                    if ev["choices"] and ev["choices"][0]["delta"].get("content"):
                        last = time.perf_counter()
                        first = first or last
            return first, last, timings

        chat("Hi", 4)  # warm-up
        if batch > 1:  # all slots at once: output tokens over the whole batch's wall time
            t0 = time.perf_counter()
            with ThreadPoolExecutor(batch) as pool:
                done = list(pool.map(lambda p: chat(p, cfg["max_tokens"]), prompts(cfg["workload"], batch)))
            wall = time.perf_counter() - t0
            drafted = sum(t.get("draft_n", 0) for _, _, t in done)
            res = {"tok_s": sum(t["predicted_n"] for _, _, t in done) / wall, "argv": argv[1:]}
            if drafted:
                res["acceptance_rate"] = round(sum(t.get("draft_n_accepted", 0) for _, _, t in done) / drafted, 3)
            return res
        rates, own, accept = [], [], []
        for p in [prompts(cfg["workload"], 1)[0]] if cfg["workload"] == "chat" else GROUNDED[:2]:
            first, last, t = chat(p, cfg["max_tokens"])
            rates.append((t["predicted_n"] - 1) / (last - first))
            own.append(t.get("predicted_per_second"))
            if t.get("draft_n"):
                accept.append(t["draft_n_accepted"] / t["draft_n"])
        res = {"tok_s": statistics.mean(rates), "server_predicted_per_second": own, "argv": argv[1:]}
        if accept:
            res["acceptance_rate"] = round(statistics.mean(accept), 3)
        return res
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def run_config(cfg: dict) -> dict:
    env = dict(os.environ)
    if cfg["backend"] == "llama-server":
        try:
            return run_llama_server(cfg)
        except Exception as e:  # noqa: BLE001 (reported as the row's error, as a failed worker's)
            return {"error": repr(e)}
    if cfg["backend"] == "llama.cpp":
        peer = llama_cpp_peer.ensure()
        exe = peer["python"]
        env = llama_cpp_peer.bindings_env(peer, env)
    else:
        exe = sys.executable
    proc = subprocess.run([exe, __file__, "--worker", json.dumps(cfg)], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": proc.stderr[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---- the driver --------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default=str(GGUF / "qwen2.5-coder-1.5b-instruct.gguf"))
    ap.add_argument("--draft", default=str(GGUF / "qwen2.5-coder-0.5b-instruct.gguf"))
    ap.add_argument("--workloads", nargs="+", default=["grounded", "chat"], choices=["grounded", "chat"])
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 16])
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--llama-gguf", default=None,
                    help="the GGUF llama.cpp runs (default: --target; give the same weights' GGUF when --target is a "
                         "directory, e.g. from `llaisys export-gguf DIR OUT.gguf`)")
    ap.add_argument("--k", type=int, default=None, help="num_speculative_tokens (default: the engine's)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--no-llama", action="store_true", help="skip llama.cpp")
    ap.add_argument("--bindings", action="store_true",
                    help="also run llama-cpp-python's pure-Python prompt lookup (a labelled row)")
    ap.add_argument("--json", default=None, help="write the results here too")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        cfg = json.loads(a.worker)
        print(json.dumps(run_llama(cfg) if cfg["backend"] == "llama.cpp" else run_llaisys(cfg)))
        return
    print(describe(machine()), flush=True)
    configs = []
    for w in a.workloads:
        for b in a.batches:
            for spec in ("off", "ngram", f"draft:{a.draft}"):
                configs.append(dict(backend="llaisys", workload=w, batch=b, spec=spec))
            if not a.no_llama:
                for spec in ("off", "ngram", f"draft:{a.draft}"):
                    configs.append(dict(backend="llama-server", workload=w, batch=b, spec=spec))
                if a.bindings and b == 1:
                    for spec in ("off", "ngram"):
                        configs.append(dict(backend="llama.cpp", workload=w, batch=1, spec=spec))
    for c in configs:
        c.update(target=a.target, llama_gguf=a.llama_gguf or a.target, max_tokens=a.max_tokens, k=a.k,
                 threads=a.threads)
    runs = {i: [] for i in range(len(configs))}
    for r in range(a.repeats):  # alternating: every configuration once per repeat
        for i, c in enumerate(configs):
            res = run_config(c)
            runs[i].append(res)
            shown = {k: v for k, v in res.items() if k != "tok_s"} if "tok_s" in res else res.get("error", "")[-300:]
            print(f"[{r}] {label(c)}: {fmt(res.get('tok_s'))} tok/s {shown}", flush=True)
    rows = []
    for i, c in enumerate(configs):
        ok = [x for x in runs[i] if "tok_s" in x]
        med = statistics.median(x["tok_s"] for x in ok) if ok else None
        rows.append(dict(config=label(c), workload=c["workload"], batch=c["batch"], backend=c["backend"],
                         spec=c["spec"].split(":")[0], tok_s=med, runs=runs[i]))
    base = {(r["workload"], r["batch"], r["backend"]): r for r in rows if r["spec"] == "off"}
    print(f"\n{'configuration':58s} {'tok/s':>8s} {'x off':>6s} {'paired':>6s} {'accept':>7s} {'mean len':>8s}")
    for r in rows:
        b = base.get((r["workload"], r["batch"], r["backend"]))
        last = r["runs"][-1] if r["runs"] else {}
        r["x_off"] = r["tok_s"] / b["tok_s"] if r["tok_s"] and b and b["tok_s"] else None
        # Each repeat's run against the "off" run of the same repeat (minutes apart, so the
        # VM's drift between repeats cancels), then the median of those ratios.
        pairs = [x["tok_s"] / o["tok_s"] for x, o in zip(r["runs"], b["runs"] if b else [])
                 if "tok_s" in x and "tok_s" in o]
        r["x_off_paired"] = pairs
        paired = statistics.median(pairs) if pairs else None
        print(f"{r['config']:58s} {fmt(r['tok_s']):>8s} {fmt(r['x_off']):>6s} {fmt(paired):>6s} "
              f"{fmt(last.get('acceptance_rate')):>7s} {fmt(last.get('mean_accepted_length')):>8s}")
    def rate(w, b, backend, spec):
        return next((r["tok_s"] for r in rows if (r["workload"], r["batch"], r["backend"], r["spec"]) ==
                     (w, b, backend, spec)), None)

    for w in a.workloads:  # llaisys against llama-server, like for like
        for b in a.batches:
            for spec in ("off", "ngram", "draft"):
                mine, peer = rate(w, b, "llaisys", spec), rate(w, b, "llama-server", spec)
                if mine and peer:
                    print(f"{w} b{b}: llaisys {spec} / llama-server {spec} = {mine / peer:.2f}x")
    out = dict(machine=machine(), args=vars(a), rows=rows, time=time.strftime("%Y-%m-%d %H:%M:%S"))
    print(json.dumps(out))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


def label(c: dict) -> str:
    return f"{c['backend']} {c['workload']} b{c['batch']} spec={c['spec'].split(':')[0]}"


def fmt(v) -> str:
    return "-" if v is None else f"{v:.2f}"


if __name__ == "__main__":
    main()
