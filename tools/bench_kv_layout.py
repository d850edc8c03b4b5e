"""SLOT vs BLOCK KV layout on the same offline workload (continuous batching, no prefix caching).

    python tools/bench_kv_layout.py [--model NAME|DIR] [--num-prompts 16] [--input-len 128]
        [--output-len 64] [--repeats 1] [--out FILE]

Both layouts run the workload of tools/bench_throughput.py (same seed, same prompts, greedy,
ignore_eos) on one loaded model, alternating SLOT and BLOCK --repeats times so drift on a
shared host hits both alike; the table shows each run and the JSON also holds the median
per layout. The greedy tokens of the two layouts are compared as a check: they must match.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

from bench_throughput import (Runner, add_common_args, environment, load_worker, make_workload, print_profile,
                              print_table)

LAYOUTS = ("slot", "block")
MEDIAN_KEYS = ("wall_s", "output_tokens_per_s", "total_tokens_per_s", "ttft_p50_s", "tpot_p50_s", "peak_kv_usage")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(ap)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", default="bench_kv_layout.json")
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    wl = make_workload(args.num_prompts, args.input_len, args.output_len, args.shared_prefix_frac, args.seed)
    worker = load_worker(args)
    rows, tokens = [], {}
    try:
        runner = Runner(worker, args)
        for _ in range(args.repeats):
            for layout in LAYOUTS:
                row, outs = runner.run_with_outputs(wl, "batched", layout, prefix_caching=False)
                rows.append(row)
                tokens.setdefault(layout, [o.outputs[0].token_ids for o in outs])
    finally:
        worker.close()
    same = tokens["slot"] == tokens["block"]
    median = {lay: {k: statistics.median(r[k] for r in rows if r["kv_layout"] == lay) for k in MEDIAN_KEYS}
              for lay in LAYOUTS}
    print_table(rows, f"{args.num_prompts} requests, input {args.input_len}, output {args.output_len}, "
                      f"{worker.name}, load avg {os.getloadavg()[0]:.2f}")
    print_profile(rows)
    ratio = median["block"]["output_tokens_per_s"] / median["slot"]["output_tokens_per_s"]
    print(f"block / slot output tok/s (median of {args.repeats}): {ratio:.2f}; greedy tokens identical: {same}")
    with open(args.out, "w") as f:
        json.dump({"env": environment(worker, args), "runs": rows, "median": median,
                   "block_over_slot_output_tok_s": round(ratio, 3), "greedy_tokens_identical": same}, f, indent=2)
    if not same:
        raise SystemExit("SLOT and BLOCK produced different greedy tokens")


if __name__ == "__main__":
    main()
