"""llaisys against llama.cpp and HF transformers on the same weights, same machine, same threads.

    python tools/bench_compare.py [--models NAME ...] [--backends llaisys llama.cpp-bf16 ...]
                                  [--repeats 3] [--threads N] [--quick] [--out bench_compare.json]
                                  [--device cpu|nvidia] [--workloads prefill decode batch offline]
                                  [--quant q4_k_m|q8_0] [--gguf FILE ...]

Workloads (greedy, random token ids from a fixed seed, the same for every backend; every
backend gets the same warm-up: each timed run follows an untimed one of the same shape, in a
fresh cache, for prefill, decode and every batch):
  prefill    one 512-token prompt into a fresh KV cache; the first run is untimed, the
             second (again into a fresh cache) timed                  -> prompt tok/s
  decode     64-token prompt (untimed), then 128 tokens one at a time -> output tok/s
  batch-B    B sequences of 32 prompt tokens (untimed), then 32 decode steps
             with all B sequences in each step (B = 1 4 8 16 32)    -> aggregate output tok/s
  offline    llaisys only: 32 requests, mixed lengths (prompts 16..256, outputs 16..128), all
             submitted at once to the engine's continuous batching -> requests/s, TTFT, TPOT
             (llama.cpp's own scheduler is its server: tools/bench_servers.py compares them)

Like for like (the headline columns), and what differs in the labelled ones:
  llaisys               every greedy row computes all of its logits as the peers do
                        (LLAISYS_GREEDY_SCREEN=0) and buffers stay in small pages
                        (LLAISYS_HUGE_PAGES=0); f32 KV cache
  llaisys-noamx         llaisys as in the `llaisys` column with LLAISYS_AMX=0: on a CPU with AMX the
                        quantized float path (prefill, batches from 8-12 rows) on AVX-512 FMAs,
                        as on a CPU without AMX (with --quant; not among the defaults)
  llaisys-default       llaisys as users get it: the greedy lm_head screen (the same tokens,
                        fewer lm_head bytes read per step), huge-page advice and the default KV
                        dtype (f16, as llama.cpp's default: compare with llama.cpp-*-kvf16)
  llama.cpp-bf16        llama.cpp (tools/build_llama_cpp.py: the llama.cpp vendored in
                        llama-cpp-python, built for this CPU) on a bf16 GGUF written by
                        `llaisys export-gguf` from our directory (exactly our values), f32 KV
                        cache like llaisys; batch-B runs with per-sequence KV cells and with one
                        unified buffer, and reports the better of the two (which: `batch-B kv`)
  llama.cpp-bf16-kvf16  the same with llama.cpp's default f16 KV cache
  llama.cpp-f16         f16 GGUF (our values rounded to f16: on AVX2 llama.cpp's faster path,
                        as ggml has F16C but no bf16 arithmetic there), f32 KV; -kvf16 with f16 KV
  hf-bf16 / hf-f32      transformers, torch==2.13.0, with its KV cache (its default, the model dtype)

--quant q4_k_m|q8_0 runs llaisys (llaisys, llaisys-default) and llama.cpp (llama.cpp with f32 KV,
llama.cpp-kvf16) on one GGUF file per model as it is (`hub.resolve_model(name, quant=...)`): the
same bytes, no conversion; --gguf FILE ... does the same on given files (tools/make_moe_gguf.py's
random Qwen3-30B-A3B-shaped one). "decode weight GB/s" is decode tok/s times the bytes a token
reads: every weight but an untied embedding, counted from what was loaded (for --quant, the
file's tensors), and of a mixture of experts only the ACTIVE weights: attention, router, lm_head
and top k / n of the expert tensors (bench_limits.decode_bytes).

With --device nvidia the same workloads run on the GPU (llaisys and transformers on cuda:0; the
llama.cpp build is CPU-only and is left out), batch-B goes up to 256 sequences, and the llaisys
worker also measures the GPU's device-to-device copy bandwidth and reports decode as weight
bytes read per second against it ("decode weight GB/s", "d2d copy GB/s").

Each backend runs in its own process; the repeats alternate backends (A B C A B C ...); the
table shows medians with min-max and the ratio of llaisys to each peer. Writes JSON with every
sample, the CPU model and its SIMD flags, and llaisys' ISA path.
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
import build_llama_cpp  # noqa: E402

BATCHES = (1, 4, 8, 16, 32)
GPU_BATCHES = (1, 4, 16, 64, 256)
ALL_BACKENDS = ("llaisys", "llaisys-default", "llama.cpp-bf16", "llama.cpp-bf16-kvf16", "hf-bf16")
QUANT_BACKENDS = ("llaisys", "llaisys-default", "llama.cpp", "llama.cpp-kvf16")  # --quant: one GGUF for all
EXTRA_BACKENDS = ("llaisys-noamx",)  # allowed with --quant, run only when asked for
OPTIONAL_BACKENDS = ("llama.cpp-f16", "llama.cpp-f16-kvf16", "hf-f32")
WORKLOADS = ("prefill", "decode", "batch", "offline")


# ---- workloads (shared by every worker) ------------------------------------------------------
def workload_spec(quick: bool, device: str = "cpu") -> dict:
    if quick:  # a smoke run of the tool itself
        return {"prefill": 64, "decode_prompt": 16, "decode": 8, "batch_prompt": 8, "batch_steps": 4,
                "batches": [1, 4], "offline": 4, "device": device}
    return {"prefill": 512, "decode_prompt": 64, "decode": 128, "batch_prompt": 32, "batch_steps": 32,
            "batches": list(GPU_BATCHES if device == "nvidia" else BATCHES), "offline": 32, "device": device}


def offline_requests(n: int, vocab: int, seed: int = 7) -> list:
    """[(prompt ids, output length)]: mixed lengths, the same for every backend."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [(rng.integers(100, vocab - 100, int(rng.integers(16, 257))).tolist(), int(rng.integers(16, 129)))
            for _ in range(n)]


def prompt(n: int, vocab: int, seed: int) -> list:
    import numpy as np

    return np.random.default_rng(seed).integers(100, vocab - 100, n).tolist()


# ---- llaisys worker ------------------------------------------------------------------------
def run_llaisys(model_dir: str, spec: dict, threads: int, kv_dtype: str = "f32") -> dict:
    import numpy as np

    from llaisys import LLM, DeviceType, SamplingParams
    from llaisys.models.loader import load_model
    from llaisys.models.model import Model, RowSampling
    from llaisys.runtime import cpu_amx, cpu_isa

    device = spec.get("device", "cpu")
    if model_dir.endswith(".gguf"):  # --quant: the GGUF file as it is
        from llaisys.models.gguf_model import load_gguf

        loaded = load_gguf(model_dir).loaded
    else:  # --quantize: the directory's matrices quantized at load (llaisys only)
        loaded = load_model(model_dir, quantize=spec.get("quantize"))
    # bytes a decode step streams: every weight but an untied embedding (only a row of it is read);
    # of a mixture of experts, the active weights (top k / n of the expert tensors)
    sys.path.insert(0, str(Path(__file__).resolve().parent / "bench_limits"))
    from bench_limits import decode_bytes

    weight_bytes = decode_bytes(loaded)
    model = Model(loaded, device=DeviceType[device.upper()])
    vocab = model.config.vocab_size
    res = {"meta": {"isa": cpu_isa(), "amx": cpu_amx(), "kv_dtype": kv_dtype, "weight_bytes_per_token": weight_bytes,
                    "greedy_screen": os.environ.get("LLAISYS_GREEDY_SCREEN", "1") != "0",
                    "huge_pages": os.environ.get("LLAISYS_HUGE_PAGES", "1") != "0"}}

    def step(cache, toks, pos, starts, seqs, rows):
        """One core call; greedy ids of `rows`, sampled in the core as the engine does for a greedy
        request without logprobs (the peers compute no logprobs either): up to 8 rows a step take
        the lm_head screen unless LLAISYS_GREEDY_SCREEN=0 (doc/architecture.md)."""
        return model.step(cache, token_ids=toks, positions=pos, query_start=starts, seq_ids=seqs,
                          sample_rows=rows, sampling=[RowSampling()] * len(rows), want_logprobs=False)

    p = prompt(spec["prefill"], vocab, 1)
    for _ in range(2 if "prefill" in spec["workloads"] else 0):  # time the second call; the first grows
        with model.create_kv_cache("slot", n_slots=4096, dtype=kv_dtype) as cache:  # the step buffers (as transformers' warm-up)
            t = time.perf_counter()
            step(cache, p, np.arange(len(p)), [0, len(p)], [0], [len(p) - 1])
            res["prefill"] = len(p) / (time.perf_counter() - t)
    for _ in range(2 if "decode" in spec["workloads"] else 0):  # time the second; a fresh cache each
        with model.create_kv_cache("slot", n_slots=4096, dtype=kv_dtype) as cache:
            p = prompt(spec["decode_prompt"], vocab, 2)
            out = step(cache, p, np.arange(len(p)), [0, len(p)], [0], [len(p) - 1])
            nxt, n = int(out.token_ids[0]), len(p)
            t = time.perf_counter()
            for i in range(spec["decode"]):
                nxt = int(step(cache, [nxt], [n + i], [0, 1], [0], [0]).token_ids[0])
            res["decode"] = spec["decode"] / (time.perf_counter() - t)
        res["meta"]["anon_huge_kib"] = host.anon_huge_kib(os.getpid())  # 2 MiB pages in use
    if "decode" in res:
        res["decode weight GB/s"] = res["decode"] * weight_bytes / 1e9
    if device == "nvidia" and "decode" in res:
        res["d2d copy GB/s"] = gpu_copy_bandwidth()
    for b in (b for b in spec["batches"] for _ in range(2)):  # each batch twice: the second is timed
        lp, steps = spec["batch_prompt"], spec["batch_steps"]
        with model.create_kv_cache("slot", n_slots=b * (lp + steps) + 64, dtype=kv_dtype) as cache:
            toks = sum((prompt(lp, vocab, 100 + s) for s in range(b)), [])
            pos = np.tile(np.arange(lp), b)
            starts = np.arange(b + 1) * lp
            out = step(cache, toks, pos, starts, list(range(b)), (starts[1:] - 1).tolist())
            nxt = out.token_ids.tolist()
            t = time.perf_counter()
            for i in range(steps):
                nxt = step(cache, nxt, [lp + i] * b, list(range(b + 1)), list(range(b)), list(range(b))).token_ids.tolist()
            res[f"batch-{b}"] = b * steps / (time.perf_counter() - t)
    model.close()
    if "offline" not in spec["workloads"]:
        return res

    reqs = offline_requests(spec["offline"], vocab)
    with LLM(str(model_dir), device=device, kv_dtype=kv_dtype, max_num_seqs=32, max_num_batched_tokens=512, kv_cache_memory="2GiB") as llm:
        params = [SamplingParams(max_tokens=n, ignore_eos=True) for _, n in reqs]
        t = time.perf_counter()
        outs = llm.generate([ids for ids, _ in reqs], params)
        wall = time.perf_counter() - t
    ttft = [o.metrics.first_token - o.metrics.arrival for o in outs]
    tpot = [(o.metrics.last_token - o.metrics.first_token) / max(1, len(o.outputs[0].token_ids) - 1) for o in outs]
    res["offline"] = {"requests_s": len(reqs) / wall, "output_tok_s": sum(n for _, n in reqs) / wall,
                      "ttft_s": statistics.median(ttft), "tpot_s": statistics.median(tpot)}
    return res


def gpu_copy_bandwidth(nbytes: int = 1 << 30, repeats: int = 5) -> float:
    """GB/s moved (read + write) by a device-to-device copy: the GPU's practical memory limit."""
    from llaisys import DeviceType, MemcpyKind, MemoryKind, runtime

    nv = DeviceType.NVIDIA
    src, dst = runtime.malloc(nv, nbytes, MemoryKind.DEVICE), runtime.malloc(nv, nbytes, MemoryKind.DEVICE)
    try:
        runtime.memcpy(nv, dst, src, nbytes, MemcpyKind.D2D)  # warm-up
        t = time.perf_counter()
        for _ in range(repeats):
            runtime.memcpy(nv, dst, src, nbytes, MemcpyKind.D2D)  # returns when the copy is done
        return 2 * nbytes * repeats / (time.perf_counter() - t) / 1e9
    finally:
        runtime.free(nv, src, MemoryKind.DEVICE)
        runtime.free(nv, dst, MemoryKind.DEVICE)


# ---- llama.cpp worker (runs in the tool's own virtualenv; imports nothing from llaisys) --------
def run_llama_cpp(gguf_path: str, spec: dict, threads: int, kv_dtype: str = "f32") -> dict:
    import ctypes

    import llama_cpp as L
    import numpy as np

    L.llama_backend_init()
    mparams = L.llama_model_default_params()
    model = L.llama_model_load_from_file(gguf_path.encode(), mparams)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {gguf_path}")
    vocab_h = L.llama_model_get_vocab(model)
    vocab = L.llama_vocab_n_tokens(vocab_h)
    max_seqs = max(spec["batches"] + [1])
    kv_type = {"f32": L.GGML_TYPE_F32, "f16": L.GGML_TYPE_F16}[kv_dtype]

    def context(n_ctx: int, n_seq: int, unified: bool = False):
        cp = L.llama_context_default_params()
        # n_batch: the most tokens one llama_decode call may hold (32 prompts of 32 tokens go in
        # one call); n_ubatch: how many of them are computed at a time inside the call
        cp.n_ctx, cp.n_batch, cp.n_ubatch = n_ctx, min(n_ctx, 4096), 512
        cp.n_seq_max = n_seq
        # unified: one KV buffer for all sequences, each token's attention walks every cell
        # behind a mask; else each sequence gets its own n_ctx / n_seq cells
        cp.kv_unified = unified
        cp.type_k = cp.type_v = kv_type
        cp.n_threads = cp.n_threads_batch = threads
        cp.no_perf = True
        ctx = L.llama_init_from_model(model, cp)
        if not ctx:
            raise RuntimeError("llama.cpp could not create a context")
        return ctx

    batch = L.llama_batch_init(4096, 0, max_seqs)

    def decode(ctx, rows):
        """rows: [(seq, [tokens], first position, want logits of the last)] -> argmax per wanted row."""
        batch.n_tokens = 0
        wanted = []
        for seq, toks, p0, want in rows:
            for j, tok in enumerate(toks):
                i = batch.n_tokens
                batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, p0 + j, 1
                batch.seq_id[i][0] = seq
                last = want and j == len(toks) - 1
                batch.logits[i] = last
                if last:
                    wanted.append(i)
                batch.n_tokens += 1
        rc = L.llama_decode(ctx, batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        out = []
        for i in wanted:
            logits = np.ctypeslib.as_array(ctypes.cast(L.llama_get_logits_ith(ctx, i), ctypes.POINTER(ctypes.c_float)),
                                           shape=(vocab,))
            out.append(int(logits.argmax()))
        return out

    def prefill_chunks(ctx, seq, toks, p0=0):
        """Prompt in chunks of at most 512 tokens (n_batch); the argmax after the last."""
        nxt = None
        for c in range(0, len(toks), 512):
            part = toks[c:c + 512]
            got = decode(ctx, [(seq, part, p0 + c, c + 512 >= len(toks))])
            nxt = got[0] if got else nxt
        return nxt

    res = {}
    if "prefill" in spec["workloads"]:
        p = prompt(spec["prefill"], vocab, 1)
        for _ in range(2):  # the first run is untimed, as every backend's: a fresh context each
            ctx = context(4096, 1)
            t = time.perf_counter()
            prefill_chunks(ctx, 0, p)
            res["prefill"] = len(p) / (time.perf_counter() - t)
            L.llama_free(ctx)

    for _ in range(2 if "decode" in spec["workloads"] else 0):  # time the second; a fresh context each
        ctx = context(4096, 1)
        p = prompt(spec["decode_prompt"], vocab, 2)
        nxt, n = prefill_chunks(ctx, 0, p), len(p)
        t = time.perf_counter()
        for i in range(spec["decode"]):
            nxt = decode(ctx, [(0, [nxt], n + i, True)])[0]
        res["decode"] = spec["decode"] / (time.perf_counter() - t)
        res.setdefault("meta", {})["anon_huge_kib"] = host.anon_huge_kib(os.getpid())
        L.llama_free(ctx)

    for b in spec["batches"]:
        lp, steps = spec["batch_prompt"], spec["batch_steps"]
        best = {}
        for unified in (False, False, True, True) if b > 1 else (False, False):  # the second of each timed
            ctx = context(max(256, b * (lp + steps + 64)), b, unified)
            nxt = decode(ctx, [(s, prompt(lp, vocab, 100 + s), 0, True) for s in range(b)])
            t = time.perf_counter()
            for i in range(steps):
                nxt = decode(ctx, [(s, [nxt[s]], lp + i, True) for s in range(b)])
            best["unified" if unified else "per-sequence"] = b * steps / (time.perf_counter() - t)
            L.llama_free(ctx)
        kind = max(best, key=best.get)
        res[f"batch-{b}"] = best[kind]
        res.setdefault("meta", {})[f"batch-{b} kv"] = kind
        res["meta"][f"batch-{b} all"] = best
    L.llama_batch_free(batch)
    L.llama_model_free(model)
    return res


# ---- transformers worker ---------------------------------------------------------------------
def run_hf(model_dir: str, spec: dict, threads: int, dtype: str) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    dev = "cuda" if spec.get("device") == "nvidia" else "cpu"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).eval().to(dev)
    vocab = model.config.vocab_size
    res = {}

    def greedy(out):
        return out.logits[:, -1].argmax(-1, keepdim=True)

    def ids(rows):
        return torch.tensor(rows, device=dev)

    def now():  # a GPU runs asynchronously: time what it has finished
        if dev == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter()

    with torch.inference_mode():
        p = ids([prompt(spec["prefill"], vocab, 1)])
        model(p, logits_to_keep=1)  # warm-up (kernel selection, allocator)
        if "prefill" in spec["workloads"]:
            t = now()
            model(p, logits_to_keep=1)
            res["prefill"] = p.shape[1] / (now() - t)

        for _ in range(2 if "decode" in spec["workloads"] else 0):  # the second is timed
            p = ids([prompt(spec["decode_prompt"], vocab, 2)])
            out = model(p, use_cache=True, logits_to_keep=1)
            nxt, past = greedy(out), out.past_key_values
            t = now()
            for _ in range(spec["decode"]):
                out = model(nxt, past_key_values=past, use_cache=True)
                nxt, past = greedy(out), out.past_key_values
            res["decode"] = spec["decode"] / (now() - t)

        for b in (b for b in spec["batches"] for _ in range(2)):  # the second of each is timed
            p = ids([prompt(spec["batch_prompt"], vocab, 100 + s) for s in range(b)])
            out = model(p, use_cache=True, logits_to_keep=1)
            nxt, past = greedy(out), out.past_key_values
            t = now()
            for _ in range(spec["batch_steps"]):
                out = model(nxt, past_key_values=past, use_cache=True)
                nxt, past = greedy(out), out.past_key_values
            res[f"batch-{b}"] = b * spec["batch_steps"] / (now() - t)
    return res


# ---- the driver ------------------------------------------------------------------------------
def run_worker(backend: str, model_dir: str, spec: dict, threads: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    if backend in ("llaisys", "llaisys-noamx"):  # like for like: every logit computed, small pages as the peers get
        env.update(LLAISYS_GREEDY_SCREEN="0", LLAISYS_HUGE_PAGES="0")
    if backend == "llaisys-noamx":
        env["LLAISYS_AMX"] = "0"
    if backend.startswith("llama.cpp"):
        peer = build_llama_cpp.ensure()
        env["LLAMA_CPP_LIB_PATH"] = peer["lib_path"]
        exe = peer["python"]
        target = model_dir if spec.get("quant") else str(build_llama_cpp.gguf_for(model_dir, backend.split("-")[1]))
    else:
        exe, target = sys.executable, model_dir
    cmd = [exe, __file__, "--worker", backend, target, json.dumps(spec), str(threads)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{backend} worker failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def worker_main(backend: str, target: str, spec_json: str, threads: str) -> None:
    spec, threads = json.loads(spec_json), int(threads)
    if backend.startswith("llaisys"):
        from llaisys.engine.config import DEFAULT_KV_DTYPE

        res = run_llaisys(target, spec, threads, kv_dtype=DEFAULT_KV_DTYPE if backend == "llaisys-default" else "f32")
    elif backend.startswith("llama.cpp"):
        res = run_llama_cpp(target, spec, threads, kv_dtype="f16" if backend.endswith("-kvf16") else "f32")
    else:
        res = run_hf(target, spec, threads, {"hf-bf16": "bfloat16", "hf-f32": "float32"}[backend])
    print(json.dumps(res))


def flatten(res: dict) -> dict:
    """The numbers of one worker's result (its "meta" stays in the JSON only)."""
    out = {k: v for k, v in res.items() if not isinstance(v, dict)}
    for k, v in res.get("offline", {}).items():
        out[f"offline {k}"] = v
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"])
    ap.add_argument("--backends", nargs="+", default=None,
                    choices=sorted(set(ALL_BACKENDS + OPTIONAL_BACKENDS + QUANT_BACKENDS + EXTRA_BACKENDS)),
                    help=f"default: {' '.join(ALL_BACKENDS)}; with --quant: {' '.join(QUANT_BACKENDS)}")
    ap.add_argument("--quant", choices=["q4_k_m", "q8_0"], default=None,
                    help="run every backend on this GGUF file of each model as it is (llaisys and llama.cpp "
                         "read the same file; transformers has no quantized path and is left out)")
    ap.add_argument("--gguf", nargs="+", default=None, metavar="FILE",
                    help="run these GGUF files as they are, as --quant runs a model's file (e.g. the random "
                         "Qwen3-30B-A3B-shaped file of tools/make_moe_gguf.py); replaces --models")
    ap.add_argument("--quantize", choices=["q8_0", "q4_k"], default=None,
                    help="llaisys quantizes each model directory's matrices at load (LLM(quantize=...)); the "
                         "peers keep the directory's weights, so this is a labelled row, not like for like")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--quick", action="store_true", help="tiny workloads: check that every backend runs")
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS,
                    help="run only these (e.g. --workloads decode for more repeats of one figure)")
    ap.add_argument("--batches", type=int, nargs="+", default=None,
                    help=f"batch sizes of the batch workload (default: {' '.join(map(str, BATCHES))} on the CPU)")
    ap.add_argument("--out", default="bench_compare.json")
    ap.add_argument("--device", default="cpu", choices=["cpu", "nvidia"],
                    help="nvidia: llaisys and transformers on the GPU (llama.cpp backends are left out)")
    args = ap.parse_args()
    from llaisys.models import hub

    if args.gguf:
        if args.quant or args.quantize:
            ap.error("--gguf runs each file as it is: give neither --quant nor --quantize")
        args.models, args.quant = args.gguf, "file"
    allowed = QUANT_BACKENDS + EXTRA_BACKENDS if args.quant else ALL_BACKENDS + OPTIONAL_BACKENDS
    args.backends = args.backends or list(QUANT_BACKENDS if args.quant else ALL_BACKENDS)
    if set(args.backends) - set(allowed):
        ap.error(f"--backends {' '.join(sorted(set(args.backends) - set(allowed)))}: "
                 f"{'with' if args.quant else 'without'} --quant the choices are {' '.join(allowed)}")

    if args.device == "nvidia":
        dropped = [b for b in args.backends if b.startswith("llama.cpp")]
        args.backends = [b for b in args.backends if b not in dropped]
        if dropped:
            print(f"--device nvidia: leaving out {', '.join(dropped)} (this llama.cpp build runs on the CPU)")
    spec = workload_spec(args.quick, args.device)
    spec["workloads"] = sorted(set(args.workloads))
    if args.batches:
        if min(args.batches) < 1:
            ap.error("--batches must be >= 1")
        spec["batches"] = sorted(set(args.batches))
    if "batch" not in args.workloads:
        spec["batches"] = []
    spec["quant"] = args.quant
    spec["quantize"] = args.quantize
    if args.quant and args.quantize:
        ap.error("--quant runs a GGUF file as it is; --quantize quantizes a directory: give one")
    report = {"machine": host.machine(), "device": args.device,
              "gpu": host.gpu_model() if args.device == "nvidia" else None,
              "threads": args.threads, "spec": spec, "command": " ".join(sys.argv), "models": {}}
    print(host.describe(report["machine"]), flush=True)
    for name in args.models:
        # without --quant the bf16 directory, whatever a bare name resolves to on this CPU (hub.default_quant);
        # a local directory or file is taken as it is (resolve_model refuses a quant for it)
        local = os.path.exists(name)
        if args.gguf:
            model_dir = str(hub.resolve_model(name))
            if not model_dir.lower().endswith(".gguf"):
                ap.error(f"--gguf {name}: not a .gguf file")
        else:
            model_dir = str(hub.resolve_model(name, quant=args.quant if local else args.quant or hub.DEFAULT_QUANT))
        samples = {b: [] for b in args.backends}
        for r in range(args.repeats):
            for b in args.backends:  # alternate: A B C, A B C, ...
                print(f"[{name}] repeat {r + 1}/{args.repeats}: {b}", flush=True)
                samples[b].append(run_worker(b, model_dir, spec, args.threads))
        report["models"][name] = samples
        print_table(name, samples, args.backends)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {args.out}")


def print_table(name: str, raw: dict, backends: list) -> None:
    samples = {b: [flatten(r) for r in runs] for b, runs in raw.items()}
    metrics = list(dict.fromkeys(k for runs in samples.values() for run in runs for k in run))
    lower_better = {"offline ttft_s", "offline tpot_s"}
    print(f"\n{name}: median (min-max); ratio = llaisys / peer (> 1: llaisys better)")
    print(f"{'metric':22}" + "".join(f"{b:>26}" for b in backends))
    for m in metrics:
        cells, med = [], {}
        for b in backends:
            vals = [run[m] for run in samples[b] if m in run]
            if not vals:
                cells.append(f"{'-':>26}")
                continue
            med[b] = statistics.median(vals)
            cells.append(f"{med[b]:>10.3g} ({min(vals):.3g}-{max(vals):.3g})".rjust(26))
        print(f"{m:22}" + "".join(cells))
        if "llaisys" in med:
            ratios = []
            for b in backends:
                if b != "llaisys" and b in med and med[b] > 0 and med["llaisys"] > 0:
                    ratio = med[b] / med["llaisys"] if m in lower_better else med["llaisys"] / med[b]
                    ratios.append(f"{b} x{ratio:.2f}")
            if ratios:
                print(f"{'':22}  " + ", ".join(ratios))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker_main(*sys.argv[2:6])
    else:
        main()
