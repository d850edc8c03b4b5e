"""One tunable's values against each other on this CPU: llaisys decode (and, if asked, prefill
and batches) of one GGUF file, each value in its own process, the values alternating round by
round, with the read bandwidth measured at the start of every round and once after the last.

    python tools/bench_tunable.py --var LLAISYS_QUANT_PREFETCH --values 0 512 1024 2048 4096
    python tools/bench_tunable.py --var LLAISYS_QUANT_F32_ROWS --values unset 64 128 100000 \\
                                  --workloads prefill [--model NAME --quant q4_k_m | --gguf FILE]
                                  [--rounds 5] [--threads N] [--quick] [--out bench_tunable.json]

How the per-CPU tables are measured (src/utils/cpu_isa.cpp's prefetch rows, the crossovers of
src/ops/linear/cpu/quant_plan.cpp, libllaisys/cpu_tuning.py's wait rows): the worker is
bench_compare's llaisys one (its like-for-like settings, f32 KV, every timed run after an untimed
one of the same shape), started with VAR=value ("unset": without VAR). A round runs every value
once, each round in a rotated order, so a host that speeds up or slows down within the sitting
(a shared VM's read bandwidth moves within minutes) moves every value alike. The table gives the
median over the rounds with its range, and for decode the weight GB/s and its share of the
round's bandwidth (median of the per-round shares). The JSON keeps every run, the bandwidths and
the machine (CPU model, flags, THP mode)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "bench_limits"))
import bench_compare  # noqa: E402
import bench_limits  # noqa: E402
from benchkit import host  # noqa: E402

UNSET = "unset"


def run_value(var: str, value: str, gguf: str, spec: dict, threads: int) -> dict:
    """bench_compare's llaisys worker with var=value (or without var) in its environment."""
    with host.env_var(var, None if value == UNSET else value):
        return bench_compare.run_worker("llaisys", gguf, spec, threads)


def summarise(res: dict) -> list:
    """A row per value: median and range of each workload, decode's GB/s and bandwidth share."""
    rows = []
    for value in res["values"]:
        runs = [r for r in res["runs"] if r["value"] == value]
        row = {"value": value}
        for key in sorted({k for r in runs for k, v in r["result"].items() if isinstance(v, (int, float))}):
            xs = [r["result"][key] for r in runs if key in r["result"]]
            row[key] = {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}
        shares = [r["result"]["decode"] * res["weight_bytes_per_token"] / 1e9 / res["bandwidth"][r["round"]]
                  for r in runs if "decode" in r["result"]]
        if shares:
            row["decode bandwidth share"] = statistics.median(shares)
        rows.append(row)
    return rows


def print_table(res: dict) -> None:
    bw = res["bandwidth"]
    print(f"\n{host.describe(res['machine'])}\n{res['var']}, {res['threads']} threads, {Path(res['gguf']).name}: "
          f"read bandwidth {statistics.mean(bw):.1f} GB/s ({min(bw):.1f}-{max(bw):.1f}, {len(bw)} readings)")
    keys = [k for k in ("decode", "prefill", *(f"batch-{b}" for b in res["spec"]["batches"])) if k in res["rows"][0]]
    print(f"{'value':>10}  " + "  ".join(f"{k + ' tok/s':>22}" for k in keys) + "  decode share")
    for row in res["rows"]:
        cells = [f"{row[k]['median']:7.1f} ({row[k]['min']:.1f}-{row[k]['max']:.1f})" for k in keys]
        share = f"{100 * row['decode bandwidth share']:5.0f}%" if "decode bandwidth share" in row else "     -"
        print(f"{row['value']:>10}  " + "  ".join(f"{c:>22}" for c in cells) + f"  {share}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--var", required=True, help="the environment variable, e.g. LLAISYS_QUANT_PREFETCH")
    ap.add_argument("--values", nargs="+", required=True, help=f"its values ('{UNSET}': without it)")
    ap.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    ap.add_argument("--quant", default="q4_k_m", choices=["q4_k_m", "q8_0"])
    ap.add_argument("--gguf", default=None, metavar="FILE", help="a GGUF file instead of --model/--quant")
    ap.add_argument("--workloads", nargs="+", default=["decode"], choices=["decode", "prefill", "batch"])
    ap.add_argument("--batches", type=int, nargs="+", default=[16])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--quick", action="store_true", help="tiny workloads: check the tool runs, not a figure")
    ap.add_argument("--out", default="bench_tunable.json")
    args = ap.parse_args(argv)
    if args.gguf and not (args.gguf.lower().endswith(".gguf") and os.path.isfile(args.gguf)):
        ap.error(f"--gguf {args.gguf}: not an existing .gguf file")
    if args.rounds < 1 or args.rounds > 50:
        ap.error("--rounds: 1 to 50")
    if args.gguf:
        gguf = args.gguf
    else:
        from llaisys.models import hub

        gguf = str(hub.resolve_model(args.model, quant=args.quant))
    # the worker runs every batch in "batches" whatever "workloads" says: none unless asked for
    batches = args.batches if "batch" in args.workloads else []
    spec = dict(bench_compare.workload_spec(args.quick), workloads=args.workloads, batches=batches, quant=True)
    res = {"machine": host.machine(), "var": args.var, "values": args.values, "gguf": gguf, "threads": args.threads,
           "spec": spec, "weight_bytes_per_token": bench_limits.weight_traffic(gguf)["decode_bytes_per_token"],
           "bandwidth": [], "runs": []}
    for i in range(args.rounds):
        res["bandwidth"].append(bench_limits.measure(args.threads, args.quick)["read_bandwidth_gb_s"])
        order = args.values[i % len(args.values):] + args.values[:i % len(args.values)]
        for value in order:
            result = run_value(args.var, value, gguf, spec, args.threads)
            res["runs"].append({"round": i, "value": value, "result": bench_compare.flatten(result)})
            print(f"round {i + 1}/{args.rounds} {args.var}={value}: "
                  + ", ".join(f"{k} {v:.1f}" for k, v in res["runs"][-1]["result"].items()
                              if isinstance(v, (int, float))), flush=True)
    res["bandwidth"].append(bench_limits.measure(args.threads, args.quick)["read_bandwidth_gb_s"])  # after
    res["rows"] = summarise(res)
    print_table(res)
    Path(args.out).write_text(json.dumps(res, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
