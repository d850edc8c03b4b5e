"""This machine's limits, and llaisys figures as fractions of them.

    python tools/bench_limits/bench_limits.py [--threads N] [--models NAME ...] [--models-json FILE] [--out FILE]

Compiles limits.c (beside this file) with the system C compiler for this CPU, runs it for the
memory read bandwidth (the better of a plain and a prefetching read loop) and the fp32 FMA peak, and, given the JSON written by
tools/bench_models.py (or with --models, after running that benchmark here, in the same
sitting), prints each model's decode and prefill speed against its limit:

- decode (one sequence): every weight byte is read once per token, so the limit is
  bandwidth / bytes of weights read per token (the embedding table counts once when it is
  also the output head, and not at all otherwise: a lookup reads one row);
- prefill: 2 x (parameters a token passes through) FLOPs per token, so the limit is
  peak / that (attention FLOPs are left out: small beside the projections at 512 tokens).

Prints a table and writes JSON. The host is shared: run it in the same sitting as the figures
it judges, and read the fractions, not the absolutes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def measure(threads: int) -> dict:
    exe = Path(tempfile.gettempdir()) / f"llaisys-limits-{os.getuid()}"
    src = HERE / "limits.c"
    if not exe.exists() or exe.stat().st_mtime < src.stat().st_mtime:
        cc = os.environ.get("CC", "cc")
        subprocess.run([cc, "-O3", "-march=native", "-fopenmp", str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe), str(threads)], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def weight_traffic(model_dir: str) -> dict:
    """Bytes read per decoded token and FLOPs per prefill token, from the model's files."""
    from llaisys.models.loader import load_model  # validates and memory-maps; reads no weights

    loaded = load_model(model_dir)
    cfg = loaded.config
    sizes = {name: t.data.nbytes for name, t in loaded.tensors.items()}
    counts = {name: t.data.size for name, t in loaded.tensors.items()}
    embed = "model.embed_tokens.weight"
    tied = cfg.tie_word_embeddings or "lm_head.weight" not in sizes
    read_bytes = sum(sizes.values()) - (0 if tied else sizes[embed])
    params_per_token = sum(counts.values()) - counts[embed] - counts.get("lm_head.weight", 0)
    return {"decode_bytes_per_token": read_bytes, "prefill_flops_per_token": 2 * params_per_token}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--models-json", help="JSON written by tools/bench_models.py")
    ap.add_argument("--models", nargs="*", help="run tools/bench_models.py on these models first")
    ap.add_argument("--out", default="bench_limits.json")
    args = ap.parse_args()
    lim = measure(args.threads)
    bw, peak = lim["read_bandwidth_gb_s"] * 1e9, lim["fp32_fma_peak_gflop_s"] * 1e9
    print(f"machine ({lim['isa']}, {lim['threads']} threads): read bandwidth {bw / 1e9:.1f} GB/s "
          f"(plain loop {lim['plain_read_gb_s']:.1f}, prefetching {lim['prefetched_read_gb_s']:.1f}), "
          f"fp32 FMA peak {peak / 1e9:.0f} GFLOP/s")
    rows, figures = [], []
    if args.models:
        sys.path.insert(0, str(HERE.parent))
        from bench_models import bench

        figures = [bench(m, prompt_len=512, decode_len=128, repeats=2) for m in args.models]
    elif args.models_json:
        figures = json.loads(Path(args.models_json).read_text())
    if figures:
        from llaisys.models import hub

        for r in figures:
            t = weight_traffic(hub.resolve_model(r["model"]))
            decode_limit = bw / t["decode_bytes_per_token"]
            prefill_limit = peak / t["prefill_flops_per_token"]
            rows.append({**r, **t, "decode_limit_tok_s": round(decode_limit, 1),
                         "prefill_limit_tok_s": round(prefill_limit, 1),
                         "decode_fraction": round(r["decode_tok_s"] / decode_limit, 3),
                         "prefill_fraction": round(r["prefill_tok_s"] / prefill_limit, 3)})
        print(f"{'model':32} {'decode':>8} {'limit':>7} {'frac':>6} {'prefill':>9} {'limit':>7} {'frac':>6}")
        for r in rows:
            print(f"{r['model']:32} {r['decode_tok_s']:8.1f} {r['decode_limit_tok_s']:7.1f} "
                  f"{r['decode_fraction']:6.2f} {r['prefill_tok_s']:9.1f} {r['prefill_limit_tok_s']:7.1f} "
                  f"{r['prefill_fraction']:6.2f}")
    with open(args.out, "w") as f:
        json.dump({"machine": lim, "models": rows}, f, indent=2)


if __name__ == "__main__":
    main()
