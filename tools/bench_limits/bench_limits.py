"""This machine's limits, and llaisys figures as fractions of the limit of the path that ran.

    python tools/bench_limits/bench_limits.py [--threads N] [--models NAME ...] [--models-json FILE]
                                              [--out FILE] [--quick]

Compiles limits.c (beside this file) with the system C compiler, runs it for the memory read
bandwidth (the better of a plain and a prefetching read loop) and the peak of every SIMD
instruction family this CPU has (limits.c says how each is counted), and, given the JSON
written by tools/bench_models.py or tools/bench_compare.py (or with --models, after running
bench_models here, in the same sitting), prints each model's decode and prefill speed against
its limit:

- decode (one sequence): every weight byte is read once per token, so the limit is
  bandwidth / bytes of weights read per token (the embedding table counts once when it is
  also the output head, and not at all otherwise: a lookup reads one row);
- prefill: 2 x (parameters a token passes through) FLOPs per token, held against the peak of
  the instruction the linear layers ran (kernel_path: from the run's ISA, llaisysCpuIsa(),
  and the weight dtype), not against an f32 FMA peak that a bf16 dot-product path can exceed.
  Attention FLOPs are left out: small beside the projections at 512 tokens.

A run's ISA is its row's "isa" (or the report's), else this process's runtime.cpu_isa(); its
weight dtype the row's "weight_dtype", else the checkpoint's. Prints tables and writes JSON. The
host is shared: run it in the same sitting as the figures it judges, and read the fractions,
not the absolutes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class KernelPath:
    """Which GEMM the CPU linear layers run (src/ops/linear/cpu/linear_cpu.cpp, packed.cpp)."""

    isa: str           # llaisysCpuIsa() of the run: scalar, avx2, avx512, avx512bf16
    weight_dtype: str  # bf16, f16, f32
    description: str   # what the GEMM does, e.g. "bf16 weights on avx2: widened to f32, FMA ymm"
    ceiling: str       # key of the instruction's peak in limits.c's "peaks"


_WIDEN = {"f32": "f32", "f16": "widened to f32 (vcvtph2ps)", "bf16": "widened to f32 (shift/mask)"}


def kernel_path(isa: str, weight_dtype: str) -> KernelPath:
    """The kernel linear_packed runs for weights of `weight_dtype` under `isa`, read off the
    dispatch: PackedWeight packs for active_isa(), except that under avx512bf16 only bf16 is
    packed for the dot products (f16/f32 fall back to avx512); linear_packed_panels then runs
    that ISA's kernel. Activations are f32 throughout."""
    if weight_dtype == "quantized":  # a GGUF's blocks: int8 dot products (quant_x16*.inc)
        ceiling = {"avx512": "int8_vnni_zmm", "avx512bf16": "int8_vnni_zmm"}.get(isa, "int8_maddubs_ymm")
        return KernelPath(isa, weight_dtype, f"block-quantized weights on {isa}: int8 dot products (decode; "
                          "prefill's float or AMX path is not judged against this)", ceiling)
    if weight_dtype not in _WIDEN:
        raise ValueError(f"weight_dtype must be one of {sorted(_WIDEN)}, got {weight_dtype!r}")
    how = _WIDEN[weight_dtype]
    if isa == "scalar":  # packed_reference: plain loops, compiled to mulss + addss (no SIMD)
        return KernelPath(isa, weight_dtype, f"{weight_dtype} weights on scalar: plain loop, {how}, "
                          "mulss + addss", "f32_muladd_scalar")
    if isa == "avx2":  # gemm_packed_kernel.inc built -mavx2 -mfma -mf16c, 6 x 16 tile
        return KernelPath(isa, weight_dtype, f"{weight_dtype} weights on avx2: {how}, FMA ymm", "f32_fma_ymm")
    if isa == "avx512bf16" and weight_dtype == "bf16":  # gemm_avx512bf16.cpp: x rounded to bf16
        return KernelPath(isa, weight_dtype, "bf16 weights on avx512bf16: activations rounded to bf16, "
                          "vdpbf16ps zmm", "bf16_dot_zmm")
    if isa in ("avx512", "avx512bf16"):  # gemm_packed_kernel.inc built -mavx512f, 8 x 32 tile
        return KernelPath(isa, weight_dtype, f"{weight_dtype} weights on {isa}: {how}, FMA zmm", "f32_fma_zmm")
    raise ValueError(f"isa must be scalar, avx2, avx512 or avx512bf16, got {isa!r}")


def measure(threads: int, quick: bool = False) -> dict:
    """limits.c's JSON, built once per source version into the temp dir."""
    src = HERE / "limits.c"
    tag = hashlib.sha1(src.read_bytes()).hexdigest()[:12]
    exe = Path(tempfile.gettempdir()) / f"llaisys-limits-{os.getuid()}-{tag}"
    if not exe.exists():
        cc = os.environ.get("CC", "cc")
        tmp = exe.with_name(f"{exe.name}.{os.getpid()}")  # concurrent builds each rename a whole file
        subprocess.run([cc, "-O3", "-fopenmp", str(src), "-o", str(tmp)], check=True)
        os.replace(tmp, exe)
    cmd = [str(exe), str(threads)] + (["quick"] if quick else [])
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def weight_traffic(model_path) -> dict:
    """Bytes read per decoded token, FLOPs per prefill token and the weight dtype, from the files
    (a model directory, or a GGUF file as bench_compare.py --quant runs it); a mixture of experts
    counts its active weights (per_token)."""
    from llaisys.models.loader import load_model  # validates and memory-maps; reads no weights

    if str(model_path).lower().endswith(".gguf"):
        from llaisys.models.gguf_model import load_gguf

        loaded = load_gguf(model_path).loaded
    else:
        loaded = load_model(model_path)
    quantized = any(str(t.dtype) not in ("f32", "f16", "bf16") for t in loaded.tensors.values())
    counts = per_token(loaded, "size")
    params_per_token = sum(counts.values()) - counts["model.embed_tokens.weight"] - counts.get("lm_head.weight", 0)
    return {"decode_bytes_per_token": decode_bytes(loaded), "prefill_flops_per_token": int(2 * params_per_token),
            "weight_dtype": "quantized" if quantized else loaded.dtype}


def per_token(loaded, attr: str) -> dict:
    """name -> how much of each tensor one token reads (`attr` "nbytes": bytes, "size": values):
    all of it, but of a mixture of experts' expert tensors top k / n (the experts a token is
    routed to: its ACTIVE weights; shared experts and routers are read whole)."""
    cfg = loaded.config
    share = cfg.n_experts_per_tok / cfg.n_experts if cfg.n_experts else 1.0
    return {name: getattr(t.data, attr) * (share if ".experts." in name else 1.0) for name, t in loaded.tensors.items()}


def decode_bytes(loaded) -> int:
    """Weight bytes a decode token reads: every active weight (per_token) but an untied embedding,
    of which only a row is read."""
    sizes = per_token(loaded, "nbytes")
    tied = loaded.config.tie_word_embeddings or "lm_head.weight" not in sizes
    return int(sum(sizes.values()) - (0 if tied else sizes["model.embed_tokens.weight"]))


def figures_from(doc) -> list:
    """Rows {model, prefill_tok_s, decode_tok_s[, isa, weight_dtype]} from bench_models.py's
    list of rows, or from bench_compare.py's report (its "llaisys" backend, medians of runs)."""
    if isinstance(doc, list):
        return doc
    if not isinstance(doc, dict) or not isinstance(doc.get("models"), dict):
        raise ValueError("--models-json: expected bench_models.py's list of rows or bench_compare.py's report")
    rows = []
    quant = (doc.get("spec") or {}).get("quant")  # bench_compare.py --quant: the GGUF file of that format
    for name, backends in doc["models"].items():
        runs = backends.get("llaisys") or []
        pre = [r["prefill"] for r in runs if "prefill" in r]
        dec = [r["decode"] for r in runs if "decode" in r]
        isa = next((r.get("meta", {}).get("isa") or r.get("isa") for r in runs
                    if r.get("meta", {}).get("isa") or r.get("isa")),
                   (doc.get("machine") or {}).get("llaisys_isa") or doc.get("isa"))
        if pre or dec:
            rows.append({"model": name, "prefill_tok_s": statistics.median(pre) if pre else None,
                         "decode_tok_s": statistics.median(dec) if dec else None, "threads": doc.get("threads"),
                         **({"isa": isa} if isa else {}), **({"quant": quant} if quant else {})})
    return rows


def judge(r: dict, t: dict, lim: dict, isa: str) -> dict:
    """One model's figures against the limits: decode against bandwidth, prefill against the
    peak of the kernel path that ran (None where the figure or the peak is missing)."""
    bw = lim["read_bandwidth_gb_s"] * 1e9
    path = kernel_path(r.get("isa") or isa, r.get("weight_dtype") or t["weight_dtype"])
    peak = lim["peaks"][path.ceiling]
    out = {**r, **t, "path": asdict(path), "ceiling_instruction": peak["instruction"],
           "ceiling_gflop_s": peak["peak"], "ceiling_missing_reason": peak.get("reason")}
    dec, pre = r.get("decode_tok_s"), r.get("prefill_tok_s")
    out["decode_gb_s"] = None if dec is None else round(dec * t["decode_bytes_per_token"] / 1e9, 2)
    limit = bw / t["decode_bytes_per_token"]
    out["decode_limit_tok_s"] = round(limit, 1)
    out["decode_fraction"] = None if dec is None else round(dec / limit, 3)
    out["prefill_gflop_s"] = None if pre is None else round(pre * t["prefill_flops_per_token"] / 1e9, 1)
    ok = pre is not None and peak["peak"]
    out["prefill_fraction"] = round(out["prefill_gflop_s"] / peak["peak"], 3) if ok else None
    return out


def _fmt(v, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


def print_machine(lim: dict, isa: str) -> None:
    """The limits, each with the share of its wall time its threads were on a core."""
    print(f"machine ({lim['threads']} threads, llaisys ISA here: {isa}): read bandwidth "
          f"{lim['read_bandwidth_gb_s']:.1f} GB/s (plain loop {lim['plain_read_gb_s']:.1f}, "
          f"prefetching {lim['prefetched_read_gb_s']:.1f}; on a core {lim['read_cpu_share']:.0%})")
    shares = [lim["read_cpu_share"]]
    for key, p in lim["peaks"].items():
        if p["peak"] is None:
            fig = f"not run: {p['reason']}"
        else:
            fig = f"{p['peak']:.1f} {p['unit']} (on a core {p['cpu_share']:.0%})"
            shares.append(p["cpu_share"])
        print(f"  {key:18} {p['instruction']:36} {fig}")
    if min(shares) < 0.9:
        print(f"warning: the host is busy (threads on a core {min(shares):.0%} of the time at worst): the limits "
              "are low by about that share; fractions of them mean something only for figures taken under "
              "the same load")


def print_tables(rows: list) -> None:
    print(f"\n{'model':30} {'path (prefill)':72} {'GFLOP/s':>8} {'ceiling':17} {'GFLOP/s':>8} {'frac':>6}")
    for r in rows:
        print(f"{r['model']:30} {r['path']['description']:72} {_fmt(r['prefill_gflop_s'], '8.1f'):>8} "
              f"{r['path']['ceiling']:17} {_fmt(r['ceiling_gflop_s'], '8.1f'):>8} "
              f"{_fmt(r['prefill_fraction'], '6.2f'):>6}")
    for missing in sorted({(r["path"]["ceiling"], r["ceiling_missing_reason"]) for r in rows
                           if r["ceiling_gflop_s"] is None}):
        print(f"  {missing[0]} is not measured here ({missing[1]}): run this tool on the machine that ran it")
    print(f"\n{'model':30} {'decode tok/s':>12} {'GB/s':>7} {'limit tok/s':>11} {'frac':>6}  (vs read bandwidth)")
    for r in rows:
        print(f"{r['model']:30} {_fmt(r['decode_tok_s'], '12.1f'):>12} {_fmt(r['decode_gb_s'], '7.1f'):>7} "
              f"{r['decode_limit_tok_s']:11.1f} {_fmt(r['decode_fraction'], '6.2f'):>6}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--models-json", help="JSON written by tools/bench_models.py or tools/bench_compare.py")
    ap.add_argument("--models", nargs="*", help="run tools/bench_models.py on these models first")
    ap.add_argument("--out", default="bench_limits.json")
    ap.add_argument("--quick", action="store_true", help="short loops: check the tool runs, not a figure")
    args = ap.parse_args()
    if args.threads < 1:
        ap.error(f"--threads must be at least 1, got {args.threads}")
    from llaisys import runtime

    isa = runtime.cpu_isa()
    lim = measure(args.threads, args.quick)
    print_machine(lim, isa)
    figures = []
    if args.models:
        sys.path.insert(0, str(HERE.parent))
        from bench_models import bench

        figures = [{"isa": isa, **bench(m, prompt_len=512, decode_len=128, repeats=2)} for m in args.models]
    elif args.models_json:
        figures = figures_from(json.loads(Path(args.models_json).read_text()))
    for r in figures:
        ran = r.get("omp_num_threads") or r.get("threads")
        if ran and int(ran) != args.threads:
            print(f"warning: {r['model']} ran on {ran} threads, the limits are for {args.threads} (--threads)")
    rows = []
    if figures:
        from llaisys.models import hub

        def source(r):  # a GGUF file run as it is (bench_compare --gguf) names no quant of a known model
            return hub.resolve_model(r["model"], quant=None if Path(r["model"]).is_file() else r.get("quant"))

        rows = [judge(r, weight_traffic(source(r)), lim, isa) for r in figures]
        print_tables(rows)
    with open(args.out, "w") as f:
        json.dump({"machine": {**lim, "isa": isa}, "models": rows}, f, indent=2)


if __name__ == "__main__":
    main()
