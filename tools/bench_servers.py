"""llaisys' server against llama.cpp's own server and llama-cpp-python's, one request trace.

    python tools/bench_servers.py [--model NAME] [--servers llaisys llama-server llama-cpp-python ...]
        [--concurrency 1 4 16 64] [--num-requests N ...] [--input-len 128] [--output-len 64] [--quant Q]
        [--threads N] [--repeats 3] [--out bench_servers.json]

Each server is started here on a free loopback port, alone on the machine (the previous one is
stopped first), warmed up with the same two requests, and driven by tools/bench_serving.py with
the same seeded trace: at each concurrency level the same prompts of --input-len random words,
greedy, exactly --output-len tokens each, streamed. Reported per level and server: requests/s,
output tok/s, TTFT and TPOT p50/p99, and the output tokens each request got (the same for
every server, or the comparison is void: the tool says so).

The servers, all on the same weights (--quant q4_k_m|q8_0, or a bare name on a CPU whose default
format is the GGUF: every server reads that very file; otherwise llama.cpp reads the bf16 GGUF
that `llaisys export-gguf` writes from the llaisys model directory: exactly its values) and
--threads threads:
  llaisys             `llaisys serve`, as the like-for-like row: every greedy row computes all
                      of its logits (LLAISYS_GREEDY_SCREEN=0), buffers in small pages
                      (LLAISYS_HUGE_PAGES=0), f32 KV cache (--kv-dtype f32)
  llaisys-default     `llaisys serve` as users get it (greedy screen, huge pages, f16 KV)
  llama-server        llama.cpp's server (tools/build_llama_cpp.py): --parallel slots = the
                      highest concurrency, continuous batching, per-slot KV cells, f32 KV
                      cache (-ctk/-ctv f32, like llaisys), everything else its defaults
  llama-server-kvu    the same with one unified KV buffer (-kvu)
  llama-server-kvf16  the same with llama.cpp's default f16 KV cache
  llama-cpp-python    llama-cpp-python's server (the same compiled llama.cpp through its
                      Python bindings; it serves one request at a time), f32 KV cache; it has
                      no ignore_eos, so its requests carry logit_bias -100 on the end tokens
Prints one table per concurrency level and writes JSON with every figure and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit import host  # noqa: E402
import bench_serving  # noqa: E402
from benchkit import peer as llama_cpp_peer  # noqa: E402
from benchkit.net import free_port  # noqa: E402

SERVERS = ("llaisys", "llaisys-default", "llama-server", "llama-server-kvu", "llama-server-kvf16", "llama-cpp-python")
DEFAULT_SERVERS = ("llaisys", "llama-server", "llama-cpp-python")
CTX_SLACK = 64  # tokens per slot beyond prompt + output (a word may be two tokens)


def eos_ids(model_dir: Path) -> list:
    if str(model_dir).endswith(".gguf"):
        from gguf import GGUFReader

        field = GGUFReader(str(model_dir)).fields.get("tokenizer.ggml.eos_token_id")
        return [int(field.parts[field.data[0]][0])] if field else []
    ids = []
    for name in ("generation_config.json", "config.json"):
        f = model_dir / name
        if f.exists():
            v = json.loads(f.read_text()).get("eos_token_id")
            ids += v if isinstance(v, list) else [] if v is None else [v]
    return sorted(set(ids))


def command(server: str, model_dir: Path, port: int, args) -> tuple:
    """(argv, environment) that start `server` on 127.0.0.1:port."""
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    slots = max(args.concurrency)
    ctx = slots * (args.input_len * 2 + args.output_len + CTX_SLACK)
    host = ["--host", "127.0.0.1", "--port", str(port)]
    if server.startswith("llaisys"):
        kv = []
        if server == "llaisys":
            env.update(LLAISYS_GREEDY_SCREEN="0", LLAISYS_HUGE_PAGES="0")
            kv = ["--kv-dtype", "f32"]  # as llama-server's -ctk/-ctv f32 below
        return [sys.executable, "-m", "llaisys.cli", "serve", "--model", str(model_dir), *host, *kv,
                "--max-num-seqs", str(slots), "--log-level", "warning"], env
    peer = llama_cpp_peer.ensure()
    env = llama_cpp_peer.bindings_env(peer, env)
    gguf = str(model_dir) if str(model_dir).endswith(".gguf") else str(llama_cpp_peer.gguf_for(model_dir))
    if server == "llama-cpp-python":
        return [peer["python"], "-m", "llama_cpp.server", "--model", gguf, *host, "--n_threads", str(args.threads),
                "--n_threads_batch", str(args.threads), "--n_ctx", str(args.input_len * 2 + args.output_len + CTX_SLACK),
                "--type_k", "0", "--type_v", "0",  # 0: GGML_TYPE_F32
                # its default (True) ends the running stream with [DONE] whenever another request
                # arrives, which cut every stream to a few tokens at concurrency > 1; False queues them
                "--interrupt_requests", "False"], env
    kv = "f16" if server.endswith("-kvf16") else "f32"
    argv = [peer["server"], "-m", gguf, *host, "-t", str(args.threads), "-tb", str(args.threads),
            "--parallel", str(slots), "--cont-batching", "-c", str(ctx), "-ctk", kv, "-ctv", kv, "--no-webui"]
    if server.endswith("-kvu"):
        argv.append("--kv-unified")
    return argv, env


class Server:
    """A server process on a loopback port; stopped (and waited for) on exit."""

    def __init__(self, name: str, model_dir: Path, args, log_dir: Path):
        self.name, self.port = name, free_port()
        argv, env = command(name, model_dir, self.port, args)
        self.log = open(log_dir / f"{name}.log", "ab")
        self.proc = subprocess.Popen(argv, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.url = f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float) -> None:
        client = bench_serving.Client(self.url, None, 10.0)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} (see {self.log.name})")
            try:  # /health: 503 while loading (llaisys, llama-server); llama-cpp-python has none
                client.get_json("/health")
                return
            except RuntimeError as e:
                if "HTTP 404" in str(e):
                    client.get_json("/v1/models")  # it answers once the model is loaded
                    return
                time.sleep(1.0)
            except (OSError, ValueError):
                time.sleep(1.0)
        raise RuntimeError(f"{self.name} was not ready after {timeout:.0f} s (see {self.log.name})")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


def measure(server: str, model_dir: Path, args, log_dir: Path) -> dict:
    with Server(server, model_dir, args, log_dir) as srv:
        srv.wait_ready(args.start_timeout)
        argv = ["--base-url", srv.url, "--concurrency", *map(str, args.concurrency), "--input-len", str(args.input_len),
                "--output-len", str(args.output_len), "--warmup", "2", "--seed", str(args.seed), "--output", "-"]
        if args.num_requests:
            argv += ["--num-requests", *map(str, args.num_requests)]
        if server == "llama-cpp-python":
            argv += ["--no-ignore-eos", "--eos-bias", *map(str, eos_ids(model_dir))]
        bargs = bench_serving.parse_args(argv)
        client = bench_serving.Client(srv.url, None, bargs.timeout)
        bargs.model = client.get_json("/v1/models")["data"][0]["id"]
        return bench_serving.run_benchmark(bargs, client)


ROWS = (("requests/s", lambda lv: lv["requests_per_s"], "{:.3f}", True),
        ("output tok/s", lambda lv: lv["output_tokens_per_s"], "{:.1f}", True),
        ("TTFT p50 ms", lambda lv: lv["ttft_ms"]["p50"], "{:.0f}", False),
        ("TTFT p99 ms", lambda lv: lv["ttft_ms"]["p99"], "{:.0f}", False),
        ("TPOT p50 ms", lambda lv: lv["tpot_ms"]["p50"], "{:.1f}", False),
        ("TPOT p99 ms", lambda lv: lv["tpot_ms"]["p99"], "{:.1f}", False),
        ("out tok/request", lambda lv: lv["output_tokens"] / max(1, lv["completed"]), "{:.1f}", None),
        ("ok/errors", lambda lv: f"{lv['completed']}/{lv['errors']}", "{}", None))


def best_level(runs: list, i: int) -> dict:
    """Of the repeats, the level whose requests/s is the median (a repeat is one trace)."""
    levels = sorted((r["levels"][i] for r in runs), key=lambda lv: lv["requests_per_s"] or 0)
    return levels[len(levels) // 2]


def print_tables(results: dict, concurrency: list) -> None:
    names = list(results)
    for i, c in enumerate(concurrency):
        print(f"\nconcurrency {c}: median of {len(results[names[0]])} repeat(s); "
              "ratio = llaisys / llama-server (> 1: llaisys better)")
        print(f"{'':18}" + "".join(f"{n:>20}" for n in names) + f"{'ratio':>9}")
        lv = {n: best_level(results[n], i) for n in names}
        for label, get, fmt, higher in ROWS:
            vals = {n: get(lv[n]) for n in names}
            cells = "".join(f"{'-' if vals[n] is None else fmt.format(vals[n]):>20}" for n in names)
            ratio = ""
            a, b = vals.get("llaisys"), vals.get("llama-server")
            if higher is not None and a and b:
                ratio = f"{(a / b if higher else b / a):>9.2f}"
            print(f"{label:18}{cells}{ratio}")
        outs = {round(get(lv[n])) for n in names for label, get, _, _ in ROWS if label == "out tok/request"}
        if len(outs) > 1:
            print("  warning: the servers produced different numbers of tokens per request: not comparable")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct", help="known model name or llaisys model directory")
    ap.add_argument("--servers", nargs="+", default=list(DEFAULT_SERVERS), choices=SERVERS)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--num-requests", type=int, nargs="+", default=None,
                    help="requests per level (default: bench_serving's, 4 x concurrency, at least 8)")
    ap.add_argument("--input-len", type=int, default=128, help="prompt length in random words")
    ap.add_argument("--output-len", type=int, default=64, help="tokens generated per request")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for every server")
    ap.add_argument("--repeats", type=int, default=3, help="traces per server; servers alternate")
    ap.add_argument("--seed", type=int, default=0, help="the trace's seed (the same for every server)")
    ap.add_argument("--start-timeout", type=float, default=600.0, help="seconds a server may take to load")
    ap.add_argument("--quant", default=None, choices=["bf16", "q4_k_m", "q8_0"],
                    help="the model's format (default: what a bare name runs on this CPU)")
    ap.add_argument("--out", default="bench_servers.json")
    args = ap.parse_args()
    if min(args.concurrency) < 1 or args.repeats < 1 or args.threads < 1:
        ap.error("--concurrency, --repeats and --threads must be >= 1")
    from llaisys.models import hub

    model_dir = Path(hub.resolve_model(args.model, quant=args.quant or hub.default_quant()))
    log_dir = Path(args.out).resolve().parent / "bench_servers_logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    machine = host.machine()
    print(host.describe(machine), flush=True)
    peer = llama_cpp_peer.ensure() if any(not s.startswith("llaisys") for s in args.servers) else None
    results = {s: [] for s in args.servers}
    for r in range(args.repeats):
        for s in args.servers:  # alternate: A B C, A B C, ...
            print(f"repeat {r + 1}/{args.repeats}: {s}", flush=True)
            results[s].append(measure(s, model_dir, args, log_dir))
    print_tables(results, args.concurrency)
    report = {"machine": machine, "model": args.model, "model_dir": str(model_dir), "peer": peer,
              "command": " ".join(sys.argv), "threads": args.threads, "results": results}
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
