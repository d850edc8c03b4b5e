"""GPU speed on Qwen2-shaped random weights, for a GPU machine that cannot download the real ones.

    python tools/gpu/bench_gpu.py [--shapes 1.5b 7b] [--batches 1 16 64 256] [--out bench_gpu.json]

Writes each shape's config.json and a bf16 model.safetensors of random weights (std 0.02, made
on the GPU by transformers' own initialiser, so they are the same values for both backends) into
a temporary directory, then runs tools/bench_compare.py --device nvidia on it: llaisys against
transformers (bf16, SDPA) with the same workloads, warm-up and alternation as on the CPU. Token
ids are random, so these are speed figures only; correctness is test/parity on the GPU.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

# (hidden, intermediate, layers, heads, kv heads, tied): Qwen2.5-1.5B and Qwen2.5-7B
SHAPES = {"tiny": (64, 128, 2, 4, 2, True), "0.5b": (896, 4864, 24, 14, 2, True),
          "1.5b": (1536, 8960, 28, 12, 2, True), "7b": (3584, 18944, 28, 28, 4, False)}


def write_random(path: Path, shape: str, device: str) -> Path:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    hidden, inter, layers, heads, kv, tie = SHAPES[shape]
    cfg = Qwen2Config(vocab_size=151936, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=32768,
                      rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=tie, torch_dtype="bfloat16")
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(cfg).to(torch.bfloat16).eval()
    model.save_pretrained(path, safe_serialization=True)
    del model
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=["1.5b"], choices=list(SHAPES))
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64, 256])
    ap.add_argument("--workloads", nargs="+", default=["prefill", "decode", "batch"])
    ap.add_argument("--backends", nargs="+", default=["llaisys", "hf-bf16"])
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--quantize", choices=["q8_0", "q4_k"], default=None,
                    help="llaisys quantizes the matrices at load (transformers keeps bf16: a labelled comparison)")
    ap.add_argument("--device", default="nvidia", choices=["cpu", "nvidia"], help="cpu: a check of this tool")
    ap.add_argument("--out", default="bench_gpu.json")
    a = ap.parse_args()
    compare = Path(__file__).resolve().parents[1] / "bench_compare.py"
    report = {}
    for shape in a.shapes:
        with tempfile.TemporaryDirectory(prefix=f"llaisys-{shape}-") as d:
            write_random(Path(d), shape, "cuda" if a.device == "nvidia" else "cpu")
            out = Path(d) / "compare.json"
            cmd = [sys.executable, str(compare), "--models", d, "--device", a.device, "--repeats", str(a.repeats),
                   "--workloads", *a.workloads, "--batches", *map(str, a.batches), "--backends", *a.backends,
                   "--out", str(out)] + (["--quick"] if shape == "tiny" else []) + \
                (["--quantize", a.quantize] if a.quantize else [])
            print(f"== {shape}: {' '.join(cmd[1:])}", flush=True)
            subprocess.run(cmd, check=True)
            report[shape + (f"-{a.quantize}" if a.quantize else "")] = json.loads(out.read_text())
    Path(a.out).write_text(json.dumps(report, indent=2))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
