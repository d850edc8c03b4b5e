"""Single-stream decode speed on an idle machine and beside busy processes, llaisys and llama.cpp.

    python tools/bench_contention.py [--model qwen2.5-coder-0.5b-instruct] [--busy 2]
        [--tokens 64] [--repeats 3] [--threads N] [--backends llaisys,llama.cpp]
        [--variant NAME:VAR=VALUE,...] [--json out.json]

A user's machine is never idle: a browser, an editor, a build. This measures what the busy
machine does to one answer's decode speed. Each condition (idle, then --busy N competing
processes that spin in pure Python) runs --repeats rounds, and each round measures every
backend once, in turn, so a slow patch of the machine hits them all alike. The busy processes
are started by the tool before each measurement and killed after it; each also exits by itself
after --busy-limit seconds, so none outlives the tool.

- llaisys: a worker process holds one LLM (greedy, ignore_eos, --tokens new tokens from a
  32-token prompt) and reports decode tok/s as (tokens - 1) / (last token - first token): the
  engine's step loop, Python included, as a user of LLM.generate or the server sees it.
  --variant adds llaisys workers started with more environment (OpenMP settings, e.g.
  `--variant passive:OMP_WAIT_POLICY=passive`), to compare wait policies side by side.
- llama.cpp: its own llama-bench (-p 0 -n TOKENS -t THREADS -r 1, tg tok/s) on a GGUF of the
  same bf16 weights (llama.cpp-f16: rounded to f16, ggml's faster path on AVX2), or on the very
  GGUF file llaisys runs where the model resolves to one (--quant, or a bare name on a CPU whose
  default format is the GGUF), built by tools/build_llama_cpp.py (not started here: it must
  exist). Its threads wait as llaisys' do: llama-bench runs with the OpenMP wait settings llaisys
  chose for this CPU kind (libllaisys/cpu_tuning.py) and with `--poll 0`, so ggml's own barrier
  does not busy-wait either (its default, --poll 50, spins); --peer-wait default gives it OpenMP's
  own ~3 ms spin and --poll 50 instead, a labelled condition.

Prints a table (backend x condition, median tok/s and busy/idle ratio) and writes JSON with the
CPU model and flags, settings and every sample.
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
from benchkit import host  # noqa: E402
from benchkit import peer as llama_cpp_peer  # noqa: E402

PROMPT_TOKENS = 32
BUSY_CODE = "import time\nend = time.monotonic() + {limit}\nwhile time.monotonic() < end:\n    pass\n"


# ---- the llaisys worker (a child process; one LLM, one measurement per "run" line) ------------
def worker_main(model: str, threads: int, tokens: int) -> None:
    from llaisys import LLM, SamplingParams, runtime
    from llaisys.libllaisys import WAIT_APPLIED, WAIT_VARS

    prompt = [(7 * i + 13) % 5000 + 100 for i in range(PROMPT_TOKENS)]
    params = SamplingParams(max_tokens=tokens, ignore_eos=True, temperature=0.0)
    with LLM(model, threads=threads or None, max_num_seqs=1, kv_cache_memory="256MiB") as llm:
        llm.generate([prompt], params)  # warm-up: workspaces, page cache, OpenMP pool
        wait = {k: os.environ[k] for k in WAIT_VARS if k in os.environ}
        print(json.dumps({"threads": runtime.num_threads(), "isa": runtime.cpu_isa(),
                          "wait_from_environment": wait, "wait_set_by_llaisys": WAIT_APPLIED}), flush=True)
        for line in sys.stdin:
            if line.strip() != "run":
                break
            out = llm.generate([prompt], params)[0]
            n = len(out.outputs[0].token_ids)
            m = out.metrics
            print(json.dumps({"tok_s": (n - 1) / (m.last_token - m.first_token)}), flush=True)


class LlaisysWorker:
    def __init__(self, name: str, model: str, threads: int, tokens: int, extra_env: dict):
        env = dict(os.environ, **extra_env)
        self.name, self.extra_env = name, extra_env
        self.proc = subprocess.Popen([sys.executable, __file__, "--worker", model, str(threads), str(tokens)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.info = self._read()

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"llaisys worker {self.name} exited with {self.proc.wait()}")
        return json.loads(line)

    def measure(self) -> float:
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        return self._read()["tok_s"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


# ---- llama.cpp ---------------------------------------------------------------------------------
class LlamaBench:
    """llama-bench on the GGUF of `dtype` (bf16: our values; f16: ggml's fast path on AVX2)."""

    def __init__(self, model_dir: Path, dtype: str, threads: int, tokens: int, wait: dict):
        self.name = "llama.cpp" if dtype == "bf16" else f"llama.cpp-{dtype}"
        if str(model_dir).endswith(".gguf"):  # the file llaisys runs, as it is
            if dtype != "bf16":
                raise SystemExit(f"{self.name}: the model is a GGUF file ({model_dir}); only `llama.cpp` runs it")
            gguf = model_dir
        else:
            gguf = llama_cpp_peer.gguf_for(model_dir, dtype)
        self.extra_env = dict(wait)  # the wait settings llama-bench's OpenMP gets
        p = llama_cpp_peer.paths()
        self.exe = p["bin"] / "llama-bench"
        if not self.exe.exists():
            raise SystemExit(f"{self.exe} is missing: build it with tools/build_llama_cpp.py")
        self.info = llama_cpp_peer.describe(p)
        self.cmd = [str(self.exe), "-m", str(gguf), "-p", "0", "-n", str(tokens), "-t", str(threads),
                    "-r", "1", "-o", "json"]
        if wait:  # and ggml's own barrier sleeps too: its default --poll 50 busy-waits (2.4 against
            self.cmd += ["--poll", "0"]  # 14.8 tok/s at --poll 0 beside 2 busy loops, Zen 3, 2026-11-29)
        self.info["argv"] = self.cmd[1:]

    def measure(self) -> float:
        proc = subprocess.run(self.cmd, capture_output=True, text=True, timeout=600,
                              env={**os.environ, **self.extra_env})
        if proc.returncode != 0:
            raise RuntimeError(f"llama-bench failed:\n{proc.stderr[-2000:]}")
        return float(json.loads(proc.stdout)[0]["avg_ts"])

    def close(self) -> None:
        pass


# ---- the competing load ------------------------------------------------------------------------
class Busy:
    """`n` processes spinning in pure Python while the with-block runs (each bounded by `limit` s)."""

    def __init__(self, n: int, limit: float):
        self.n, self.limit, self.procs = n, limit, []

    def __enter__(self):
        code = BUSY_CODE.format(limit=self.limit)
        self.procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(self.n)]
        time.sleep(0.3 if self.n else 0)  # let them get going
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()
        self.procs = []


# ---- the run -----------------------------------------------------------------------------------
def cpu_info() -> dict:
    simd = [f for f in host.cpu_flag_list() if f.startswith(("avx", "fma", "f16c", "amx"))]
    return {"model": host.cpu_model(), "logical_cpus": os.cpu_count(), "simd_flags": simd}


def parse_variant(text: str) -> tuple[str, dict]:
    name, _, assigns = text.partition(":")
    env = dict(a.split("=", 1) for a in assigns.split(",") if a)
    if not name or not env:
        raise argparse.ArgumentTypeError(f"--variant wants NAME:VAR=VALUE[,VAR=VALUE], got {text!r}")
    return f"llaisys[{name}]", env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--busy", type=int, default=2, help="competing busy processes (default 2)")
    ap.add_argument("--busy-limit", type=float, default=300.0, help="seconds a busy process lives at most")
    ap.add_argument("--tokens", type=int, default=64, help="decode tokens per measurement")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0,
                    help="threads of both backends (default: llaisys' default, the physical cores)")
    ap.add_argument("--backends", default=None,
                    help="comma-separated: llaisys, llama.cpp (bf16 GGUF, or the model's GGUF), llama.cpp-f16 "
                         "(f16 GGUF; not for a GGUF model). Default: all that apply")
    ap.add_argument("--variant", action="append", type=parse_variant, default=[],
                    help="an extra llaisys worker with this environment, e.g. passive:OMP_WAIT_POLICY=passive")
    ap.add_argument("--quant", default=None, help="the model's format (default: what a bare name runs here)")
    ap.add_argument("--peer-wait", choices=["same", "default"], default="same",
                    help="same: llama.cpp's OpenMP waits as llaisys chose for this CPU, with --poll 0; "
                         "default: OpenMP's own and --poll 50")
    ap.add_argument("--json", default="bench_contention.json")
    args = ap.parse_args()

    from llaisys import runtime
    from llaisys.libllaisys import WAIT_APPLIED
    from llaisys.models import hub

    model_dir = Path(hub.resolve_model(args.model, quant=args.quant or hub.default_quant()))
    peer_wait = dict(WAIT_APPLIED) if args.peer_wait == "same" else {}
    threads = args.threads or runtime.num_threads()
    backends = []
    names = args.backends or ("llaisys,llama.cpp" if str(model_dir).endswith(".gguf") else "llaisys,llama.cpp,llama.cpp-f16")
    try:
        for name in filter(None, names.split(",")):
            if name == "llaisys":
                backends.append(LlaisysWorker("llaisys", str(model_dir), threads, args.tokens, {}))
            elif name in ("llama.cpp", "llama.cpp-f16"):
                backends.append(LlamaBench(model_dir, "f16" if name.endswith("f16") else "bf16", threads, args.tokens,
                                           peer_wait))
            else:
                raise SystemExit(f"unknown backend {name!r}")
        for name, env in args.variant:
            backends.append(LlaisysWorker(name, str(model_dir), threads, args.tokens, env))
        conditions = ["idle"] + ([f"busy {args.busy}"] if args.busy else [])
        samples = {b.name: {c: [] for c in conditions} for b in backends}
        for cond, n_busy in zip(conditions, (0, args.busy)):
            for r in range(args.repeats):
                for b in backends:
                    with Busy(n_busy, args.busy_limit):
                        tok_s = b.measure()
                    samples[b.name][cond].append(tok_s)
                    print(f"{cond:>8} round {r + 1}: {b.name:<24} {tok_s:8.2f} tok/s", flush=True)
    finally:
        for b in backends:
            b.close()

    medians = {name: {c: statistics.median(v) for c, v in s.items()} for name, s in samples.items()}
    print(f"\nsingle-stream decode tok/s (median of {args.repeats}), {threads} threads, {cpu_info()['model']}")
    head = f"{'backend':<26}" + "".join(f"{c:>12}" for c in conditions) + (f"{'busy/idle':>12}" if args.busy else "")
    print(head + "\n" + "-" * len(head))
    for name, m in medians.items():
        ratio = f"{m[conditions[1]] / m['idle']:12.2f}" if args.busy else ""
        print(f"{name:<26}" + "".join(f"{m[c]:12.2f}" for c in conditions) + ratio)
    result = {"cpu": cpu_info(), "model": str(model_dir), "threads": threads, "tokens": args.tokens,
              "repeats": args.repeats, "busy": args.busy, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "env": {k: v for k, v in os.environ.items() if k.startswith(("OMP_", "GOMP_", "KMP_"))},
              "backends": {b.name: dict(b.info, extra_env=getattr(b, "extra_env", {})) for b in backends},
              "median_tok_s": medians, "samples_tok_s": samples}
    Path(args.json).write_text(json.dumps(result, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        worker_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
