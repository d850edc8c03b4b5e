"""Load time, prefill and single-stream decode speed of real models through the core.

    python tools/bench_models.py [--models NAME ...] [--prompt-len 512] [--decode-len 128] [--out FILE]

Prints a table and writes JSON. Timings only: the host is shared, so compare figures
taken in one run."""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from llaisys.models import hub
from llaisys.models.loader import load_model
from llaisys.models.qwen2 import Qwen2Model


def bench(name: str, prompt_len: int, decode_len: int, repeats: int) -> dict:
    path = hub.resolve_model(name)
    t0 = time.perf_counter()
    model = Qwen2Model(load_model(path))
    load_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, model.config.vocab_size, prompt_len)
    prefill, decode = [], []
    for _ in range(repeats):
        with model.create_kv_cache("slot", n_slots=prompt_len + decode_len + 16) as cache:
            t = time.perf_counter()
            res = model.step(cache, token_ids=prompt, positions=np.arange(prompt_len), query_start=[0, prompt_len],
                             seq_ids=[0], sample_rows=[prompt_len - 1], want_logits=True)
            prefill.append(prompt_len / (time.perf_counter() - t))
            nxt = int(np.argmax(res.logits[0]))
            t = time.perf_counter()
            for i in range(decode_len):
                res = model.step(cache, token_ids=[nxt], positions=[prompt_len + i], query_start=[0, 1], seq_ids=[0],
                                 sample_rows=[0], want_logits=True)
                nxt = int(np.argmax(res.logits[0]))
            decode.append(decode_len / (time.perf_counter() - t))
    model.close()
    return {"model": name, "load_s": round(load_s, 2), "prefill_tok_s": round(float(np.median(prefill)), 1),
            "decode_tok_s": round(float(np.median(decode)), 1), "prompt_len": prompt_len,
            "decode_len": decode_len, "repeats": repeats}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(hub.REGISTRY))
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--decode-len", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="bench_models.json")
    args = ap.parse_args()
    rows = [bench(m, args.prompt_len, args.decode_len, args.repeats) for m in args.models]
    print(f"{'model':32} {'load s':>7} {'prefill tok/s':>14} {'decode tok/s':>13}   (threads: "
          f"{os.environ.get('OMP_NUM_THREADS', 'all')}, load avg {os.getloadavg()[0]:.2f})")
    for r in rows:
        print(f"{r['model']:32} {r['load_s']:7.2f} {r['prefill_tok_s']:14.1f} {r['decode_tok_s']:13.1f}")
    with open(args.out, "w") as f:
        json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
