"""bench_compare.py's workers: one backend's workloads in a process of its own, its figures printed as
one JSON line. The driver (tools/bench_compare.py) runs

    <interpreter> tools/bench_compare_workers.py BACKEND TARGET SPEC_JSON THREADS

with this interpreter for llaisys and transformers, and the llama.cpp peer's own virtualenv
(tools/build_llama_cpp.py) for llama.cpp: that worker imports nothing from llaisys. The workloads
are described in bench_compare.py's docstring; every backend gets the same prompts (prompt(),
offline_requests(): random ids from fixed seeds) and the same untimed run before each timed one.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchkit import host  # noqa: E402


# ---- workloads (shared by every worker) ------------------------------------------------------
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

    def decode_seconds(p, steps: int) -> float:
        """Prefill the prompts p, then the seconds of `steps` greedy one-token steps on them."""
        out = model(p, use_cache=True, logits_to_keep=1)
        nxt, past = greedy(out), out.past_key_values
        t = now()
        for _ in range(steps):
            out = model(nxt, past_key_values=past, use_cache=True)
            nxt, past = greedy(out), out.past_key_values
        return now() - t

    with torch.inference_mode():
        p = ids([prompt(spec["prefill"], vocab, 1)])
        model(p, logits_to_keep=1)  # warm-up (kernel selection, allocator)
        if "prefill" in spec["workloads"]:
            t = now()
            model(p, logits_to_keep=1)
            res["prefill"] = p.shape[1] / (now() - t)

        for _ in range(2 if "decode" in spec["workloads"] else 0):  # the second is timed
            p = ids([prompt(spec["decode_prompt"], vocab, 2)])
            res["decode"] = spec["decode"] / decode_seconds(p, spec["decode"])

        for b in (b for b in spec["batches"] for _ in range(2)):  # the second of each is timed
            p = ids([prompt(spec["batch_prompt"], vocab, 100 + s) for s in range(b)])
            res[f"batch-{b}"] = b * spec["batch_steps"] / decode_seconds(p, spec["batch_steps"])
    return res


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


if __name__ == "__main__":
    worker_main(*sys.argv[1:5])
