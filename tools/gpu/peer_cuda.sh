#!/usr/bin/env bash
# llama.cpp's CUDA build beside llaisys on the same GGUF files, in one call on a lent GPU machine
# (issue 40 item 6). The GPU machine reaches no model hub, so the weights are random ones of the
# 1.5B shape (tools/gpu/bench_gpu.py's writer, std 0.02), written there with the tokenizer
# carried in gpu-carry/tokenizer, then exported by llaisys itself: bf16 as they are, and Q4_K_M
# by llaisys's quantizers (`export-gguf --dtype q4_k_m`, llama.cpp's recipe). Both engines then
# read the very same file:
#   llama.cpp: llama-bench -p 512 -n 128 -fa 1 -r 3 (its default f16 KV), and
#              llama-batched-bench -npp 32 -ntg 32 -npl 1,64 -fa on (bench_compare's batch shape);
#   llaisys:   tools/gpu/profile_decode.py on the GGUF, f16 KV: a 512-token prefill (pp512) and
#              128 decode steps after a 1-token prompt (tg128), each after an untimed warm-up;
#              tools/bench_compare.py --backends llaisys-default --workloads batch --batches 1 64 (its
#              step loop over the model, the engine's default f16 KV).
# The peer binaries come from tools/gpu/build_llama_cuda.sh (gpu-carry/llama-cuda, carried as
# gpu-carry/llama-cuda.tar.xz and unpacked there). Logs and JSON
# go to $OUT; the last lines are the summary table.
set -u
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT"
P="${PEER_BIN:-$PWD/gpu-carry/llama-cuda}"
M="${PEER_MODEL_DIR:-/tmp/llaisys-profile-1.5b}"
TOK="${LLAISYS_TEST_TOKENIZER_DIR:-$PWD/gpu-carry/tokenizer}"
FORMATS="${PEER_FORMATS:-q4_k_m bf16}"
LIMIT="${PEER_LIMIT:-90}"
DEV="${PEER_DEVICE:-nvidia}"  # cpu: a check of this script beside a CPU build of the peer
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
# cuBLAS and cudart of the machine's torch (the binaries were linked against the same SONAMEs)
NV=$(python3 -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))' 2> /dev/null)/nvidia
export LD_LIBRARY_PATH="$(ls -d "$NV"/cu13/lib "$NV"/*/lib /usr/local/cuda/lib64 2> /dev/null | tr '\n' ':')${LD_LIBRARY_PATH:-}"

if [ ! -f "$M/config.json" ]; then
    python3 -c "import sys; sys.path.insert(0, 'tools/gpu'); from bench_gpu import write_random; from pathlib import Path; write_random(Path('$M'), '${PEER_SHAPE:-1.5b}', '$([ "$DEV" = cpu ] && echo cpu || echo cuda)')"
fi
for f in tokenizer.json tokenizer_config.json generation_config.json; do cp "$TOK/$f" "$M/"; done
for d in $FORMATS; do
    [ -f "/tmp/peer-$d.gguf" ] || timeout "$LIMIT" python3 -m llaisys.cli export-gguf "$M" "/tmp/peer-$d.gguf" --dtype "$d" --quiet
    echo "gguf $d rc=$?: $(stat -c %s "/tmp/peer-$d.gguf" 2> /dev/null) bytes"
done
cat "$P/commit" 2> /dev/null | sed 's/^/llama.cpp: /'
if [ "$DEV" = nvidia ]; then  # the ceiling of the sitting: a device-to-device copy (bytes read + written), and the clocks
    python3 -c "import sys; sys.path.insert(0, 'tools'); from bench_compare import gpu_copy_bandwidth; print(f'd2d copy: {gpu_copy_bandwidth():.0f} GB/s')" | tee "$OUT/copy.txt"
    nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem --format=csv,noheader | sed 's/^/clocks before: /' | tee -a "$OUT/copy.txt"
fi

for d in $FORMATS; do
    G=/tmp/peer-$d.gguf
    timeout "$LIMIT" "$P/llama-bench" -m "$G" -p 512 -n 128 -ngl 99 -fa 1 -r 3 -o json > "$OUT/llama-bench-$d.json" 2> "$OUT/llama-bench-$d.err"
    echo "llama-bench $d rc=$?"
    timeout "$LIMIT" "$P/llama-batched-bench" -m "$G" -c 8192 -b 2048 -ub 512 -npp 32 -ntg 32 -npl 1,64 -ngl 99 -fa on \
        --output-format jsonl > "$OUT/batched-bench-$d.jsonl" 2> "$OUT/batched-bench-$d.err"
    echo "llama-batched-bench $d rc=$?"
    timeout "$LIMIT" python3 tools/gpu/profile_decode.py --device "$DEV" --model-dir "$G" --prompt 512 --steps 8 --kv-dtype f16 \
        --out "$OUT/llaisys-pp-$d.json" > "$OUT/llaisys-pp-$d.log" 2>&1
    echo "llaisys pp $d rc=$?"
    timeout "$LIMIT" python3 tools/gpu/profile_decode.py --device "$DEV" --model-dir "$G" --prompt 1 --steps 128 --kv-dtype f16 \
        --out "$OUT/llaisys-tg-$d.json" > "$OUT/llaisys-tg-$d.log" 2>&1
    echo "llaisys tg $d rc=$?"
    timeout "$LIMIT" python3 tools/bench_compare.py --models "$G" --device "$DEV" --backends llaisys-default --workloads batch \
        --batches 1 64 --out "$OUT/llaisys-batch-$d.json" > "$OUT/llaisys-batch-$d.log" 2>&1
    echo "llaisys batch $d rc=$?"
done

[ "$DEV" = nvidia ] && nvidia-smi --query-gpu=clocks.sm,clocks.mem --format=csv,noheader | sed 's/^/clocks after: /' | tee -a "$OUT/copy.txt"
python3 - "$OUT" $FORMATS <<'EOF'
import json, statistics, sys
from pathlib import Path
out, formats = Path(sys.argv[1]), sys.argv[2:]

def load(p, lines=False):
    try:
        t = (out / p).read_text()
        return [json.loads(x) for x in t.splitlines() if x.startswith("{")] if lines else json.loads(t)
    except Exception:
        return None

print(f"{'tok/s':28s} {'llama.cpp':>10s} {'llaisys':>10s} {'ratio':>6s}")
for d in formats:
    lb, bb = load(f"llama-bench-{d}.json") or [], load(f"batched-bench-{d}.jsonl", True) or []
    pp, tg, ba = load(f"llaisys-pp-{d}.json"), load(f"llaisys-tg-{d}.json"), load(f"llaisys-batch-{d}.json")
    def best(r):  # the median of llama-bench's repetitions: one cold run (seen: pp512 at half speed) moves the mean
        return statistics.median(r["samples_ts"]) if r.get("samples_ts") else r["avg_ts"]

    peer = {"pp512": next((best(r) for r in lb if r.get("n_prompt") == 512 and r.get("n_gen") == 0), None),
            "tg128": next((best(r) for r in lb if r.get("n_gen") == 128 and r.get("n_prompt") == 0), None)}
    for r in bb:
        peer[f"batch-{r['pl']}"] = r.get("speed_tg")
    ours = {"pp512": pp and pp.get("prefill_tok_s"), "tg128": tg and tg.get("tg_tok_s_mean")}
    if ba:
        run = next(iter(ba["models"].values()))["llaisys-default"][0]
        ours.update({k: v for k, v in run.items() if k.startswith("batch-")})
    for k in sorted(set(peer) | set(ours)):
        a, b = peer.get(k), ours.get(k)
        ratio = f"{b / a:6.2f}" if a and b else "     -"
        print(f"{d + ' ' + k:28s} {a or 0:10.1f} {b or 0:10.1f} {ratio}")
EOF
