#!/usr/bin/env bash
# One prepared call on a lent GPU machine, the shape that fit in 170 s on 2026-11-28
# (doc/nvidia.md, "Running on a GPU"). Packed beforehand here by tools/gpu/pack.sh (all under
# gpu-carry/ and .whl/, ignored):
#   libs.tar.xz        libllaisys-NEW.so (the build under test) and libllaisys-HEAD.so (the
#                      committed one), sm_90 builds made here: tar cJf, 3 MB for both
#   tokenizer.tar.xz   a Qwen2.5 tokenizer folder (tokenizer.json, tokenizer_config.json,
#                      generation_config.json, config.json), for the GPU server test and the peer
#   llama-cuda.tar.xz  tools/gpu/build_llama_cuda.sh's peer (optional: the peer stage skips without it)
# and the wheels the GPU image lacks in .whl/ (doc/nvidia.md). Run it with
#   run(command="bash tools/gpu/call.sh", carry=["gpu-carry", ".whl"])
# Stages, each result tarred into $OUT/out.tgz as soon as it exists (a call cut short by the
# lease still returns what it had). The timings come after the tests, most valuable first, and a
# stage starts only while CALL_BUDGET seconds (default 360) have not run out, so that a session's
# 15 device minutes hold a second call (two starts of 1-2 minutes each): the first call spends
# ~6 minutes, the fix and the second call (CALL_BUDGET=240) the rest. CALL_ROUNDS (default 1)
# alternations of each A/B; a second call can ask for 3 of the ones that matter.
#   1. the GPU tests of NEW (CALL_TESTS, within CALL_TEST_LIMIT seconds: 180), the opt-in
#      kernels' tests among them (CUDA graphs, tensor-core prefill, wide decode attention, int8
#      producers). If a test of the default path fails, every later stage runs HEAD; an opt-in
#      kernel whose tests fail is not timed.
#   2. decode on the BLOCK layout (bf16, Q4_K) without and with CUDA graphs (LLAISYS_CUDA_GRAPHS=1)
#   3. the wide decode attention (LLAISYS_WIDE_DECODE=1), bf16 on the BLOCK layout, at a
#      64-token and a CALL_LONG-token (4,096) context, without and with it
#   4. the int8 GEMVs: the quantized GEMV tests with the pipelined kernel (LLAISYS_GEMV_INT8=2) at
#      the default split and at LLAISYS_GEMV_SPLIT=1 (one warp a row: its rows-per-warp path); then
#      Q4_K decode with the first and the pipelined GEMV, each without and with the int8
#      producers (LLAISYS_INT8_PRODUCERS=1)
#   5. a 2,048-token prefill without and with the tensor-core attention (LLAISYS_FLASH_PREFILL=1)
#   6. HEAD against NEW: bf16 decode (profile_decode.py, SLOT layout, f16 KV)
#   7. the engine in its three step orders (sync, async_output, async_scheduling: off by default,
#      doc/engine.md) through LLM.generate at batch 1 and 64 (bench_engine_cost.py): whether
#      async scheduling should be the default on a GPU
#   8. the llama.cpp peer on the same GGUF files (tools/gpu/peer_cuda.sh; measured 2026-11-28)
set -u
cd "$(dirname "$0")/../.."
T0=$(date +%s)
F="${OUT:-$PWD/gpu-out}"; mkdir -p "$F"; export OUT=/tmp/call-out; mkdir -p $OUT
G=$PWD/gpu-carry; NEW=$G/libllaisys-NEW.so; HEAD=$G/libllaisys-HEAD.so
for a in tokenizer libs llama-cuda; do [ -f $G/$a.tar.xz ] && tar xJf $G/$a.tar.xz -C $G; done
export LLAISYS_LIBRARY=$NEW PYTHONUNBUFFERED=1 LLAISYS_SKIP_REAL_MODEL=1 LLAISYS_TEST_TOKENIZER_DIR=$G/tokenizer
if ls .whl/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD/python"
pack() { tar czf "$F/out.tgz" -C /tmp call-out; }
# stage NAME SECONDS: whether NAME (about SECONDS long) still fits in CALL_BUDGET; says so if not
stage() {
    local spent=$(( $(date +%s) - T0 ))
    if [ $(( spent + $2 )) -gt "${CALL_BUDGET:-360}" ]; then echo "$1: skipped at ${spent} s (CALL_BUDGET)"; return 1; fi
    echo "== $1 (at ${spent} s)"
}
R=$(seq 1 "${CALL_ROUNDS:-1}")
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader

OPT_IN="test_cuda_graphs.py|flash_prefill|wide_decode|int8_producers"  # the opt-in kernels' tests
TESTS="${CALL_TESTS:-test/parity/test_archs.py test/parity/test_tiny_qwen2.py test/parity/test_quant_model.py
 test/parity/test_kv_slot.py test/server/test_server_nvidia.py test/ops/test_nvidia_ops.py
 test/ops/test_nvidia_attention.py test/ops/test_quant_nvidia.py test/parity/test_cuda_graphs.py
 test/parity/test_wide_decode_nvidia.py test/parity/test_int8_producers_nvidia.py}"
timeout "${CALL_TEST_LIMIT:-180}" python3 -m pytest -q -p no:cacheprovider -o addopts="" -n 12 -rfE --tb=short \
    $TESTS > $OUT/pytest-new.log 2>&1
rc=$?; echo "pytest NEW rc=$rc: $(tail -1 $OUT/pytest-new.log)"; grep -E "^(FAILED|ERROR)" $OUT/pytest-new.log | head -20
failed() { grep -E "^(FAILED|ERROR)" $OUT/pytest-new.log | grep -qE "$1"; }  # a test matching $1 failed
if [ $rc -ne 0 ] && [ -f "$HEAD" ] && { ! grep -qE "^(FAILED|ERROR)" $OUT/pytest-new.log ||
        grep -E "^(FAILED|ERROR)" $OUT/pytest-new.log | grep -qvE "$OPT_IN"; }; then
    NEW=$HEAD; export LLAISYS_LIBRARY=$HEAD; echo "NEW failed on the default path: what follows runs HEAD"
fi
pack

M=/tmp/llaisys-profile-1.5b; P="python3 tools/gpu/profile_decode.py --model-dir $M --kv-dtype f16"
run() {  # run LABEL OUTFILE ENV... -- ARGS...: one profile_decode run, its last line labelled
    local label=$1 out=$2; shift 2; local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
    env "${envs[@]}" timeout 60 $P "$@" --out $OUT/$out.json 2>&1 | tail -1 | sed "s/^/$label: /"
}
if ! failed test_cuda_graphs.py && stage "CUDA graphs" 30; then
    for r in $R; do for g in 0 1; do for q in bf16 q4_k; do
        run "graphs=$g $q $r" graphs-$g-$q-$r LLAISYS_CUDA_GRAPHS=$g -- --layout block --quantize $q --prompt 64 --steps 64
    done; done; done
    pack
fi
if ! failed wide_decode && stage "wide decode attention" 35; then
    for r in $R; do for w in 0 1; do for ctx in 64 "${CALL_LONG:-4096}"; do
        run "wide=$w ctx=$ctx $r" wide-$w-$ctx-$r LLAISYS_WIDE_DECODE=$w -- --layout block --prompt $ctx --steps 32
    done; done; done
    pack
fi
if stage "int8 GEMVs" 90; then
    for split in 4 1; do
        LLAISYS_GEMV_INT8=2 LLAISYS_GEMV_SPLIT=$split timeout 50 python3 -m pytest -q -p no:cacheprovider -o addopts="" \
            -n 12 -rfE --tb=short test/ops/test_quant_nvidia.py > $OUT/pytest-pipe-split$split.log 2>&1
        echo "quant GEMV tests, pipelined int8, LLAISYS_GEMV_SPLIT=$split: $(tail -1 $OUT/pytest-pipe-split$split.log)"
    done
    producers="0"; failed int8_producers || producers="0 1"
    for r in $R; do for g in 1 2; do for p in $producers; do
        run "q4_k gemv=$g producers=$p $r" int8-$g-$p-$r LLAISYS_GEMV_INT8=$g LLAISYS_INT8_PRODUCERS=$p -- \
            --layout block --quantize q4_k --prompt 64 --steps 64
    done; done; done
    pack
fi
if ! failed flash_prefill && stage "tensor-core prefill" 20; then
    for r in $R; do for f in 0 1; do
        run "flash=$f $r" flash-$f-$r LLAISYS_FLASH_PREFILL=$f -- --prompt 2048 --steps 4
    done; done
    pack
fi
if stage "HEAD against NEW" 20; then
    for r in $R; do for v in HEAD NEW; do
        [ -f "${!v}" ] && run "$v $r" ab-$v-$r LLAISYS_LIBRARY=${!v} -- --prompt 64 --steps 64
    done; done
    pack
fi
if stage "engine step orders" 100; then
    for f in tokenizer.json tokenizer_config.json generation_config.json; do cp "$G/tokenizer/$f" "$M/" 2> /dev/null; done
    timeout 100 python3 tools/bench_engine_cost.py --model $M --device nvidia --kv-cache-memory 2GiB \
        --modes sync async_output async_scheduling --batches 1 64 --tokens 64 --repeats 3 --out $OUT/async.json 2>&1 |
        grep -E "^\|"
    pack
fi
if [ -x $G/llama-cuda/llama-bench ] && stage "llama.cpp peer" 80; then
    PEER_LIMIT=75 bash tools/gpu/peer_cuda.sh 2>&1 | tee $OUT/peer.log
    pack
fi
echo "call: $(( $(date +%s) - T0 )) s"
