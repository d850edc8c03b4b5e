"""One sitting on this CPU kind: llaisys against llama.cpp on one GGUF file, with llama.cpp's own
C++ benchmarks as the cross-check and the read bandwidth beside every decode figure.

    python tools/bench_sitting.py [--model qwen2.5-coder-1.5b-instruct] [--quant q4_k_m] [--gguf FILE]
                                  [--threads N] [--repeats 3] [--out sitting.json] [--quick]
    python tools/bench_sitting.py --summary sitting.json     # a saved sitting's table again

In rounds (--repeats of them), each of which runs every engine once, so that a host that speeds
up or slows down during the sitting (a shared VM's read bandwidth was seen to move from 21 to
35 GB/s within one sitting) moves every column alike:
1. the memory read bandwidth (tools/bench_limits/limits.c), the limit of decode;
2. tools/bench_compare.py --quant: llaisys and llama.cpp (its Python bindings over the same
   compiled llama.cpp) alternating, prefill 512, decode 128 after a 64-token prompt, batch-1/4/16,
   f32 KV on both sides, small pages (LLAISYS_HUGE_PAGES=0; llama.cpp maps the file);
3. llama.cpp's own `llama-bench -t N -p 512 -n 128 -fa 0,1 -ctk f16 -ctv f16 -r 2 -o json` and
   `llama-batched-bench -npp 64 -ntg 64 -npl 1,4,16 -ctk f32 -ctv f32` on the same file
   (tools/build_llama_cpp.py builds both from the same source as the bindings), with the same
   threads. This llama-bench takes no f32 KV, so its rows are held against the bindings' run
   with f16 KV (`llama.cpp-kvf16`, run in step 2 too), and "llama.cpp at its best" is the best
   of every llama.cpp figure of the row, whatever its KV dtype (the llaisys column keeps f32).
After the last round the bandwidth is measured once more. Every figure is the median over the
rounds; the bandwidth is the mean of all its measurements, and its range is printed.

The table gives every decode figure as weight GB/s (tok/s x the bytes a token reads: every
weight but an untied embedding; of a mixture of experts the active weights, top k / n of the
experts: bench_limits.decode_bytes) and as a share of the read bandwidth (the mean of the two
measurements), the ratio of llaisys to llama.cpp at its best (the best of its bindings and its C++
tools), and flags where the bindings and the C++ tools disagree by more than 3%. The JSON holds
every sample, the machine (CPU, flags, THP mode, load), llama.cpp's commit and system_info, and
each process's AnonHugePages (2 MiB pages: 0 on both sides means small pages were verified).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "bench_limits"))
from benchkit import host  # noqa: E402
import bench_limits  # noqa: E402
from benchkit import peer as llama_cpp_peer  # noqa: E402

DISAGREE = 0.03  # bindings vs C++ tools: flagged beyond this


def bandwidth(threads: int, quick: bool) -> dict:
    lim = bench_limits.measure(threads, quick)
    return {"read_gb_s": lim["read_bandwidth_gb_s"], "read_cpu_share": lim["read_cpu_share"]}


def run_compare(model: str, quant: str, threads: int, repeats: int, quick: bool, gguf: str | None = None) -> dict:
    out = Path(tempfile.mkdtemp()) / "compare.json"
    what = ["--gguf", gguf] if gguf else ["--models", model, "--quant", quant]
    cmd = [sys.executable, str(HERE / "bench_compare.py"), *what,
           "--backends", "llaisys", "llama.cpp", "llama.cpp-kvf16", "--workloads", "prefill", "decode", "batch",
           "--batches", "1", "4", "16", "--threads", str(threads), "--repeats", str(repeats), "--out", str(out)]
    subprocess.run(cmd + (["--quick"] if quick else []), check=True)
    return json.loads(out.read_text())


def llama_bench(exe: str, gguf: str, threads: int, quick: bool) -> list:
    """llama-bench's rows for one round: -r 2 (its own warm-up run comes first)."""
    # f16 KV: this llama-bench takes no f32 cache type (its -ctk list stops at f16), so its rows
    # cross-check the bindings' f16-KV run (llama.cpp-kvf16), not the f32 headline
    cmd = [exe, "-m", gguf, "-t", str(threads), "-p", "64" if quick else "512", "-n", "8" if quick else "128",
           "-fa", "0,1", "-ctk", "f16", "-ctv", "f16", "-r", "1" if quick else "2", "-o", "json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"llama-bench failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def batched_bench(exe: str, gguf: str, threads: int, quick: bool) -> dict:
    """llama-batched-bench's rows (--output-format jsonl), at its defaults but for threads and KV."""
    npl = "1,4" if quick else "1,4,16"
    n = "8" if quick else "64"
    cmd = [exe, "-m", gguf, "-t", str(threads), "-tb", str(threads), "-npp", n, "-ntg", n, "-npl", npl,
           "-c", "2048", "-ctk", "f32", "-ctv", "f32", "--output-format", "jsonl"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"llama-batched-bench failed:\n{proc.stderr[-3000:]}")
    rows = [json.loads(ln) for ln in (proc.stdout + "\n" + proc.stderr).splitlines() if ln.startswith("{")]
    return {"rows": [dict(r, b=r["pl"], s_tg=r["speed_tg"], s_pp=r["speed_pp"]) for r in rows],
            "command": " ".join(cmd)}


def bandwidths(res: dict) -> list:
    """Every read bandwidth of the sitting (GB/s): one a round and the last, or before and after."""
    rounds = [r["read_gb_s"] for r in res.get("bandwidth_rounds", [])]
    return rounds + [res["bandwidth_after"]["read_gb_s"]] if rounds else \
        [res["bandwidth_before"]["read_gb_s"], res["bandwidth_after"]["read_gb_s"]]


def med(xs: list) -> float | None:
    return statistics.median(xs) if xs else None


def summarise(res: dict) -> dict:
    """The figures of the table, from the raw results."""
    bw = statistics.mean(bandwidths(res))
    wbytes = res["weight_bytes_per_token"]
    cmp_raw = next(iter(res["compare"]["models"].values()))  # backend -> one result per repeat

    def runs(backend: str, key: str) -> list:
        return [r[key] for r in cmp_raw[backend] if key in r]

    lb = res["llama_bench"]
    tg = {fa: [r["avg_ts"] for r in lb if r["n_gen"] > 0 and bool(r["flash_attn"]) == fa] for fa in (False, True)}
    pp = {fa: [r["avg_ts"] for r in lb if r["n_prompt"] > 0 and bool(r["flash_attn"]) == fa] for fa in (False, True)}
    bb_runs: dict = {}
    for r in res["batched_bench"]["rows"]:  # every round's rows
        bb_runs.setdefault(r["b"], []).append(r["s_tg"])
    bb = {b: med(v) for b, v in bb_runs.items()}
    rows = []

    def row(what, ours, peers: dict, gbps: bool, bind: str = "bindings"):
        """peers: llama.cpp's figures by how they were taken; `bind` names the bindings' figure
        that the C++ tools' (the other keys but "bindings*") are held against."""
        best_name = max((k for k in peers if peers[k]), key=lambda k: peers[k], default=None)
        best = peers.get(best_name) if best_name else None
        r = {"workload": what, "llaisys": ours, "peers": peers, "peer_best": best_name,
             "ratio_vs_best": ours / best if ours and best else None}
        if gbps:
            r["llaisys_gb_s"] = ours * wbytes / 1e9 if ours else None
            r["llaisys_share"] = r["llaisys_gb_s"] / bw if ours else None
            r["peer_gb_s"] = best * wbytes / 1e9 if best else None
            r["peer_share"] = r["peer_gb_s"] / bw if best else None
        bind, tools = peers.get(bind), [v for k, v in peers.items() if not k.startswith("bindings") and v]
        r["bindings_vs_tools"] = bind / max(tools) - 1 if bind and tools else None
        r["disagree"] = r["bindings_vs_tools"] is not None and abs(r["bindings_vs_tools"]) > DISAGREE
        rows.append(r)

    row("decode (tg128)", med(runs("llaisys", "decode")),
        {"bindings": med(runs("llama.cpp", "decode")), "bindings f16 KV": med(runs("llama.cpp-kvf16", "decode")),
         "llama-bench fa0 f16 KV": med(tg[False]), "llama-bench fa1 f16 KV": med(tg[True])}, True, "bindings f16 KV")
    row("prefill (pp512)", med(runs("llaisys", "prefill")),
        {"bindings": med(runs("llama.cpp", "prefill")), "bindings f16 KV": med(runs("llama.cpp-kvf16", "prefill")),
         "llama-bench fa0 f16 KV": med(pp[False]), "llama-bench fa1 f16 KV": med(pp[True])}, False, "bindings f16 KV")
    for b in (1, 4, 16):
        row(f"batch-{b} decode", med(runs("llaisys", f"batch-{b}")),
            {"bindings": med(runs("llama.cpp", f"batch-{b}")), "bindings f16 KV": med(runs("llama.cpp-kvf16", f"batch-{b}")),
             "llama-batched-bench": bb.get(b)}, b == 1)
    huge = {b: [(r.get("meta") or {}).get("anon_huge_kib") for r in cmp_raw[b]] for b in cmp_raw}
    return {"read_gb_s": bw, "rows": rows, "anon_huge_kib": huge}


def print_table(res: dict, s: dict) -> None:
    m = res["machine"]
    print(f"\n{host.describe(m)}")
    print(f"file {res['gguf']} ({res['weight_bytes_per_token'] / 1e9:.3f} GB read a token), {res['threads']} threads, "
          f"f32 KV; read bandwidth {s['read_gb_s']:.1f} GB/s (measured {len(bandwidths(res))} times: "
          f"{min(bandwidths(res)):.1f}-{max(bandwidths(res)):.1f}); llama.cpp {res['llama_cpp_commit']}")
    print(f"llama.cpp system_info: {res['llama_cpp_system_info']}")
    print(f"AnonHugePages during decode (KiB, per repeat): {s['anon_huge_kib']}; THP {m.get('thp')}")
    print("| workload | llaisys tok/s | GB/s (share) | llama.cpp bindings | C++ tool(s) | best peer GB/s (share) "
          "| llaisys / best | bindings vs tools |")
    print("|---|---|---|---|---|---|---|---|")
    f = lambda v, spec=".1f": "-" if v is None else format(v, spec)  # noqa: E731
    for r in s["rows"]:
        tools = ", ".join(f"{k} {f(v)}" for k, v in r["peers"].items() if k != "bindings")  # f16-KV bindings too
        ours = f"{f(r.get('llaisys_gb_s'))} ({f(r.get('llaisys_share'), '.0%')})" if "llaisys_gb_s" in r else ""
        peer = f"{f(r.get('peer_gb_s'))} ({f(r.get('peer_share'), '.0%')})" if "peer_gb_s" in r else ""
        flag = f(r["bindings_vs_tools"], "+.1%") + (" DISAGREE" if r["disagree"] else "")
        print(f"| {r['workload']} | {f(r['llaisys'])} | {ours} | {f(r['peers'].get('bindings'))} | {tools} | {peer} "
              f"| {f(r['ratio_vs_best'], '.2f')}x ({r['peer_best']}) | {flag} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    ap.add_argument("--quant", default="q4_k_m", choices=["q4_k_m", "q8_0"])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="sitting.json")
    ap.add_argument("--quick", action="store_true", help="tiny workloads: check the tool runs, not a figure")
    ap.add_argument("--gguf", default=None, metavar="FILE",
                    help="a GGUF file run as it is instead of --model/--quant (tools/make_moe_gguf.py's random "
                         "Qwen3-30B-A3B-shaped file: decode GB/s then counts its active weights)")
    ap.add_argument("--summary", default=None, metavar="JSON",
                    help="print the table of a sitting's JSON again (summarised as this version does) and exit")
    args = ap.parse_args(argv)
    if args.summary:
        res = json.loads(Path(args.summary).read_text())
        res["summary"] = summarise(res)
        print_table(res, res["summary"])
        return 0
    from llaisys.models import hub

    if args.gguf and not (args.gguf.lower().endswith(".gguf") and os.path.isfile(args.gguf)):
        ap.error(f"--gguf {args.gguf}: not an existing .gguf file")
    gguf = args.gguf or str(hub.resolve_model(args.model, quant=args.quant))
    peer = llama_cpp_peer.ensure()
    res = {"machine": host.machine(), "gguf": gguf, "threads": args.threads, "kv_dtype": "f32",
           "weight_bytes_per_token": bench_limits.weight_traffic(gguf)["decode_bytes_per_token"], "peer": peer}
    bb_exe = str(Path(peer["bench"]).with_name("llama-batched-bench"))
    res["bandwidth_rounds"], res["llama_bench"], res["batched_bench"] = [], [], {"rows": [], "commands": []}
    for i in range(args.repeats):
        print(f"round {i + 1}/{args.repeats}", flush=True)
        res["bandwidth_rounds"].append(bandwidth(args.threads, args.quick))
        cmp = run_compare(args.model, args.quant, args.threads, 1, args.quick, args.gguf)
        if i == 0:
            res["compare"] = cmp
        else:  # one result per round and backend, as bench_compare's own repeats would be
            for name, backends in cmp["models"].items():
                for b, runs in backends.items():
                    res["compare"]["models"][name][b] += runs
        res["llama_bench"] += [dict(r, round=i) for r in llama_bench(peer["bench"], gguf, args.threads, args.quick)]
        bb = batched_bench(bb_exe, gguf, args.threads, args.quick)
        res["batched_bench"]["rows"] += [dict(r, round=i) for r in bb["rows"]]
        res["batched_bench"]["commands"].append(bb["command"])
    res["bandwidth_before"] = res["bandwidth_rounds"][0]
    res["bandwidth_after"] = bandwidth(args.threads, args.quick)
    first = res["llama_bench"][0] if res["llama_bench"] else {}
    res["llama_cpp_commit"] = first.get("build_commit") or peer.get("llama_cpp_commit")
    res["llama_cpp_cpu_info"] = first.get("cpu_info")
    res["llama_cpp_system_info"] = llama_cpp_peer.system_info(peer)
    res["summary"] = s = summarise(res)
    print_table(res, s)
    Path(args.out).write_text(json.dumps(res, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
