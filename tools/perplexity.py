"""Perplexity over a fixed text every machine has: CPython's standard library source.

    python tools/perplexity.py [--model NAME|DIR|FILE.gguf ...] [--kv-dtype f32 f16 bf16 q8_0]
        [--gguf FILE ...] [--llama-kv-dtype f16 [q8_0 q8_0/f16 ...]] [--llama-flash-attn auto|on]
        [--window 512] [--max-windows N]
        [--threads N] [--out FILE]

Text: the files STDLIB_FILES read from this interpreter's standard library
(sysconfig "stdlib"), each preceded by a "# file: <name>" line, joined with newlines. The list
is pinned; the text differs only where CPython versions changed those files, so the JSON
records the Python version and the SHA-256 of the text: compare figures only where it matches.

Tokens: the text is tokenized once with the llaisys tokenizer of the first --model (or
--tokenizer), without special tokens; the same ids go to every backend.

Scoring, as llama.cpp's `perplexity` tool does it: the ids are cut into consecutive windows of
N = --window tokens (stride N; a partial last window is dropped). Each window is computed from
an empty KV cache, positions 0..N-1. The logits at positions N/2 .. N-2 are scored against the
next token: tokens N/2+1 .. N-1 of every window, N/2 - 1 per window, each with at least N/2
tokens of context. PPL = exp(mean negative log-likelihood over all scored tokens), in float64.

Backends:
- llaisys: the model API, one llaisysModelStep per window with the scored rows as sample rows
  and want_logits (the exact logits; no sampling). --kv-dtype lists the KV dtypes to run.
- llama.cpp: llama-cpp-python with logits_all=True, run as a subprocess of the peer
  virtualenv of tools/build_llama_cpp.py (LLAMA_CPP_LIB_PATH set to its build), on each --gguf
  and each --llama-kv-dtype (K/V, such as q8_0/f16, gives K and V apart). A quantized V cache
  needs its flash attention: --llama-flash-attn auto turns it on for a q8_0 V only, `on` for
  every run (so an f16 and a q8_0 run differ in the KV dtype alone). llama.cpp keeps a
  quantized cache in a Hadamard basis, as llaisys does; LLAMA_ATTN_ROT_DISABLE=1 in the
  environment turns that off for a comparison.

Prints a table (ppl, mean NLL, top-1 agreement with the first run, seconds) and writes JSON
with the machine (tools/benchkit/host.py), the text's identity and every run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import numpy as np

# Pinned: small, self-contained pure-Python modules (about 3,200 lines, ~28k Qwen2 tokens).
STDLIB_FILES = ("bisect.py", "colorsys.py", "fnmatch.py", "glob.py", "graphlib.py", "heapq.py", "queue.py",
                "sched.py", "shlex.py", "string.py", "textwrap.py")
DEFAULT_WINDOW = 512
# engine/config.py KV_DTYPES (not imported: the llama.cpp worker has no llaisys)
KV_DTYPES = ("f32", "f16", "bf16", "q8_0")


class PerplexityError(ValueError):
    """A bad argument of the tool (names the field)."""


# ---- the text and the windows (stdlib + numpy only: the llama.cpp worker imports this file) ----
def stdlib_text(files=STDLIB_FILES) -> str:
    root = Path(sysconfig.get_paths()["stdlib"])
    parts = []
    for name in files:
        path = root / name
        if not path.is_file():
            raise PerplexityError(f"files: {name} is not in this interpreter's standard library ({root})")
        parts.append(f"# file: {name}\n" + path.read_text(encoding="utf-8"))
    return "\n".join(parts)


def text_info(text: str, files=STDLIB_FILES) -> dict:
    return {"files": list(files), "python": sys.version.split()[0], "chars": len(text),
            "lines": text.count("\n") + 1, "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}


def make_windows(ids, window: int, max_windows: int | None = None) -> np.ndarray:
    """[n_windows, window] int64: consecutive, non-overlapping windows of ids (the tail dropped)."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 4:
        raise PerplexityError(f"window must be an integer >= 4, got {window!r}")
    ids = np.asarray(ids, np.int64)
    n = len(ids) // window
    if max_windows is not None:
        if max_windows < 1:
            raise PerplexityError(f"max_windows must be >= 1, got {max_windows}")
        n = min(n, max_windows)
    if n == 0:
        raise PerplexityError(f"window: {len(ids)} tokens do not fill one window of {window}")
    return ids[:n * window].reshape(n, window)


def scored_rows(window: int) -> tuple[int, int]:
    """[first, end): the positions whose logits are scored (each against the token after it)."""
    return window // 2, window - 1


def nll_of(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """[R] float64 -log softmax(logits[r])[targets[r]] for logits [R, vocab]."""
    x = np.asarray(logits, np.float64)
    m = x.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(x - m).sum(axis=1))
    return lse - x[np.arange(len(x)), np.asarray(targets)]


def summarize(nll: np.ndarray) -> dict:
    """ppl and mean NLL over every scored token, with the standard error of the mean NLL."""
    flat = np.asarray(nll, np.float64).ravel()
    sem = float(flat.std(ddof=1) / np.sqrt(len(flat))) if len(flat) > 1 else 0.0
    mean = float(flat.mean())
    return {"ppl": float(np.exp(mean)), "nll_mean": mean, "nll_sem": sem, "scored_tokens": int(len(flat))}


# ---- llaisys --------------------------------------------------------------------------------
def llaisys_scores(model, wins: np.ndarray, kv_dtype: str = "f32", kv_layout: str = "block",
                   block_size: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """(nll [W, R], argmax [W, R]) of a loaded llaisys Model over the windows, R = N/2 - 1."""
    n_win, n = wins.shape
    first, end = scored_rows(n)
    n_slots = -(-n // block_size) * block_size
    nll = np.zeros((n_win, end - first))  # [W, R]
    top = np.zeros((n_win, end - first), np.int64)  # [W, R]
    with model.create_kv_cache(kv_layout, n_slots=n_slots, block_size=block_size, dtype=kv_dtype) as cache:
        if kv_layout == "block":
            layout = dict(slot_mapping=np.arange(n), block_tables=np.arange(n_slots // block_size)[None, :],
                          context_lens=[n])
        else:
            layout = dict(seq_ids=[0])
        for w, toks in enumerate(wins):
            if kv_layout == "slot":
                cache.clear()
            res = model.step(cache, token_ids=toks, positions=np.arange(n), query_start=[0, n],
                             sample_rows=np.arange(first, end), want_logits=True, **layout)
            if res is None:
                raise RuntimeError("the KV cache had no room for one window")
            nll[w] = nll_of(res.logits, toks[first + 1:])
            top[w] = res.logits.argmax(axis=1)
    return nll, top


def run_llaisys(model_path: str, wins: np.ndarray, kv_dtypes, kv_layout: str, threads) -> list:
    from llaisys.engine.worker import Worker, WorkerConfig  # loads .gguf files where the worker does

    worker = Worker(WorkerConfig(model=model_path, threads=threads))
    runs = []
    try:
        for kv in kv_dtypes:
            t = time.perf_counter()
            nll, top = llaisys_scores(worker.model, wins, kv, kv_layout)
            runs.append({"backend": "llaisys", "model": str(worker.path), "kv_dtype": kv, "kv_layout": kv_layout,
                         "seconds": time.perf_counter() - t, "nll": nll, "top": top})
            print(f"llaisys {Path(str(worker.path)).name} KV {kv}: ppl {summarize(nll)['ppl']:.4f}", flush=True)
    finally:
        worker.close()
    return runs


# ---- llama.cpp (the worker runs in the peer venv: no llaisys there) --------------------------
def llama_cpp_scores(gguf: str, wins: np.ndarray, threads: int, kv_dtype: str,
                     flash_attn: bool) -> tuple[np.ndarray, np.ndarray]:
    import llama_cpp as L
    from llama_cpp import Llama

    n_win, n = wins.shape
    first, end = scored_rows(n)
    # ggml's type ids (the bindings name no GGML_TYPE_BF16; ggml.h: GGML_TYPE_BF16 = 30, Q8_0 = 8)
    ggml = {"f32": L.GGML_TYPE_F32, "f16": L.GGML_TYPE_F16, "bf16": getattr(L, "GGML_TYPE_BF16", 30),
            "q8_0": getattr(L, "GGML_TYPE_Q8_0", 8)}
    k, v = split_kv(kv_dtype)
    extra = {"flash_attn": True} if flash_attn else {}
    llm = Llama(model_path=gguf, n_ctx=n, n_batch=n, n_ubatch=n, n_threads=threads, n_threads_batch=threads,
                logits_all=True, type_k=ggml[k], type_v=ggml[v], verbose=False, **extra)
    nll = np.zeros((n_win, end - first))
    top = np.zeros((n_win, end - first), np.int64)
    for w, toks in enumerate(wins):
        llm.reset()  # positions from 0; eval() drops the cache past n_tokens
        llm.eval(toks.tolist())
        logits = llm.scores[first:end]  # [R, vocab] the rows of this eval
        nll[w] = nll_of(logits, toks[first + 1:])
        top[w] = logits.argmax(axis=1)
    return nll, top


def split_kv(kv_dtype: str) -> tuple[str, str]:
    """'q8_0' -> ('q8_0', 'q8_0'); 'q8_0/f16' -> K q8_0, V f16 (llama.cpp's -ctk / -ctv)."""
    k, _, v = kv_dtype.partition("/")
    return k, v or k


def llama_kv_dtype(text: str) -> str:
    """argparse type of --llama-kv-dtype: a KV dtype, or K/V as two of them."""
    parts = text.split("/")
    if len(parts) > 2 or any(p not in KV_DTYPES for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r}: a KV dtype of {', '.join(KV_DTYPES)}, or K/V such as q8_0/f16")
    return text


def llama_worker_main(job_path: str) -> None:
    job = json.loads(Path(job_path).read_text())
    wins = np.load(job["windows"])
    t = time.perf_counter()
    nll, top = llama_cpp_scores(job["gguf"], wins, job["threads"], job["kv_dtype"], job["flash_attn"])
    np.savez(job["out"], nll=nll, top=top, seconds=time.perf_counter() - t)


def run_llama_cpp(gguf: str, wins: np.ndarray, threads: int, kv_dtype: str, flash_attn: str = "auto") -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from benchkit import peer as llama_cpp_peer

    peer = llama_cpp_peer.ensure()
    with tempfile.TemporaryDirectory() as tmp:
        # a quantized V cache needs llama.cpp's flash attention (-fa), as with llama-cli -ctv q8_0
        fa = flash_attn == "on" or split_kv(kv_dtype)[1] == "q8_0"
        job = {"gguf": str(gguf), "threads": threads, "kv_dtype": kv_dtype, "flash_attn": fa,
               "windows": f"{tmp}/windows.npy", "out": f"{tmp}/out.npz"}
        np.save(job["windows"], wins)
        Path(f"{tmp}/job.json").write_text(json.dumps(job))
        env = llama_cpp_peer.bindings_env(peer)
        proc = subprocess.run([peer["python"], str(Path(__file__).resolve()), "--llama-worker", f"{tmp}/job.json"],
                              env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"llama.cpp worker failed on {gguf}:\n{proc.stderr[-3000:]}")
        got = np.load(job["out"])
        return {"backend": "llama.cpp", "model": str(gguf), "kv_dtype": kv_dtype, "flash_attn": fa,
                "seconds": float(got["seconds"]),
                "nll": got["nll"], "top": got["top"], "llama_cpp": {k: peer[k] for k in ("llama_cpp_python",
                                                                                        "llama_cpp_commit")}}


def load_tokenizer(model: str):
    """The llaisys tokenizer of a model name, an HF directory, or a .gguf file (from its
    metadata; models.checkpoint.load_tokenizer reads no weights)."""
    from llaisys.models import hub
    from llaisys.models.checkpoint import load_tokenizer as checkpoint_tokenizer

    return checkpoint_tokenizer(hub.resolve_model(model))


# ---- driver ---------------------------------------------------------------------------------
def report(runs: list) -> list:
    """The JSON rows: summary figures, top-1 agreement and mean |NLL diff| against the first run."""
    rows = []
    for r in runs:
        row = {k: v for k, v in r.items() if k not in ("nll", "top")}
        row.update(summarize(r["nll"]))
        row["top1_agree_vs_first"] = float((r["top"] == runs[0]["top"]).mean())
        row["mean_abs_nll_diff_vs_first"] = float(np.abs(r["nll"] - runs[0]["nll"]).mean())
        rows.append(row)
    return rows


def print_table(rows: list) -> None:
    print(f"{'backend':10} {'kv':5} {'ppl':>9} {'nll':>8} {'±sem':>7} {'top1=1st':>8} {'|dnll|':>7} {'s':>7}  model")
    for r in rows:
        print(f"{r['backend']:10} {r['kv_dtype']:5} {r['ppl']:9.4f} {r['nll_mean']:8.5f} {r['nll_sem']:7.5f} "
              f"{r['top1_agree_vs_first']:8.4f} {r['mean_abs_nll_diff_vs_first']:7.5f} {r['seconds']:7.1f}  "
              f"{Path(r['model']).name}")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", nargs="*", default=None,
                    help="llaisys models (names, HF directories, .gguf files); default: the default model")
    ap.add_argument("--kv-dtype", nargs="+", default=["f32"], choices=KV_DTYPES, help="llaisys KV dtypes to run")
    ap.add_argument("--kv-layout", default="block", choices=("block", "slot"))
    ap.add_argument("--gguf", nargs="*", default=[], help="GGUF files to score with llama.cpp")
    ap.add_argument("--llama-kv-dtype", nargs="+", default=["f16"], type=llama_kv_dtype,
                    help="llama.cpp's KV types to run (its default f16); K/V (q8_0/f16) sets them apart")
    ap.add_argument("--llama-flash-attn", default="auto", choices=("auto", "on"),
                    help="llama.cpp's flash attention: auto, where a quantized V cache needs it; on, every run")
    ap.add_argument("--tokenizer", default=None, help="model whose tokenizer makes the ids (default: the first --model)")
    ap.add_argument("--window", type=int, default=DEFAULT_WINDOW)
    ap.add_argument("--max-windows", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None, help="threads of both backends (default: physical cores)")
    ap.add_argument("--out", default="perplexity.json")
    ap.add_argument("--llama-worker", default=None, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.llama_worker:
        llama_worker_main(args.llama_worker)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from benchkit.host import describe, machine

    from llaisys import runtime
    from llaisys.models import hub

    models = [hub.DEFAULT_MODEL] if args.model is None else args.model
    if not models and not args.gguf:
        raise PerplexityError("model: give at least one --model or --gguf")
    if args.threads is not None:
        runtime.set_num_threads(args.threads)
    threads = runtime.num_threads()
    text = stdlib_text()
    tok_src = args.tokenizer or (models[0] if models else hub.DEFAULT_MODEL)
    tokenizer = load_tokenizer(tok_src)
    ids = tokenizer.encode(text)
    wins = make_windows(ids, args.window, args.max_windows)
    m = machine()
    print(describe(m))
    info = text_info(text)
    first, end = scored_rows(args.window)
    print(f"text: {len(STDLIB_FILES)} stdlib files of Python {info['python']}, {info['lines']} lines, "
          f"sha256 {info['sha256'][:16]}; {len(ids)} tokens, {len(wins)} windows of {args.window}, "
          f"{len(wins) * (end - first)} scored", flush=True)
    runs = []
    for path in models:
        runs += run_llaisys(path, wins, args.kv_dtype, args.kv_layout, args.threads)
    for gguf in args.gguf:
        for kv in args.llama_kv_dtype:
            runs.append(run_llama_cpp(gguf, wins, threads, kv, args.llama_flash_attn))
            print(f"llama.cpp {Path(gguf).name} {kv} KV: ppl {summarize(runs[-1]['nll'])['ppl']:.4f}", flush=True)
    rows = report(runs)
    print_table(rows)
    result = {"tool": "perplexity", "machine": m, "threads": threads, "text": info, "tokenizer": str(tok_src),
              "tokens": len(ids), "window": args.window, "windows": len(wins),
              "scored": f"positions {first}..{end - 1} of each window against the next token", "runs": rows,
              "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:])}
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
