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
# lease still returns what it had):
#   1. the GPU tests of NEW (CALL_TESTS, within CALL_TEST_LIMIT seconds: 120, for the CUDA graph
#      cases' child processes), but the wide decode kernel's (stage 3b); if they fail, every later
#      stage runs HEAD
#   2. CALL_ROUNDS alternations of HEAD and NEW decode (profile_decode.py, bf16, f16 KV); NEW's
#      quantized GEMV tests with the pipelined int8 kernel (LLAISYS_GEMV_INT8=2, opt-in until
#      this passes), at the default split and at LLAISYS_GEMV_SPLIT=1 (one warp a row: its
#      rows-per-warp path, which the tests' small weights do not reach by default); then
#      CALL_INT8_ROUNDS of NEW's Q4_K decode with the first int8 GEMV (the default), the
#      pipelined one launched as any kernel (LLAISYS_GEMV_PDL=0) and the pipelined one, in turn
#   3. CALL_GRAPH_ROUNDS alternations of NEW's decode on the BLOCK layout (bf16, Q4_K) without and
#      with CUDA graphs (LLAISYS_CUDA_GRAPHS=1, opt-in until test_cuda_graphs.py passes)
#      and CALL_FLASH_ROUNDS of a 2,048-token prefill without and with the tensor-core prefill
#      attention (LLAISYS_FLASH_PREFILL=1, opt-in until test_nvidia_attention.py's flash cases pass)
#   3b. the wide-load decode attention (LLAISYS_WIDE_DECODE=1, opt-in until this passes): its op
#      and model-level GPU tests (test_nvidia_attention.py -k wide_decode,
#      test_wide_decode_nvidia.py: a failure here leaves the other stages on NEW), then
#      CALL_WIDE_ROUNDS alternations of decode without and with it on the BLOCK layout (bf16,
#      f16 KV) at a 64-token and a CALL_LONG-token context
#   3c. the int8 producers (LLAISYS_INT8_PRODUCERS=1, opt-in until this passes): their GPU tests
#      (test_int8_producers_nvidia.py: the same bits as without them), then CALL_INT8P_ROUNDS
#      alternations of Q4_K decode (BLOCK layout) without and with them, with the first int8 GEMV
#      and with the pipelined one
#   4. the llama.cpp peer on the same GGUF files (tools/gpu/peer_cuda.sh)
#   5. decode at a CALL_LONG-token context
#   6. the engine's overlapped output processing and async scheduling (async_output,
#      async_scheduling; off by default: doc/engine.md) against the synchronous engine, through
#      LLM.generate at batch 1 and 64 (bench_engine_cost.py)
set -u
cd "$(dirname "$0")/../.."
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
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader

TESTS="${CALL_TESTS:-test/parity/test_archs.py test/parity/test_tiny_qwen2.py test/parity/test_quant_model.py
 test/parity/test_kv_slot.py test/server/test_server_nvidia.py test/ops/test_nvidia_ops.py
 test/ops/test_nvidia_attention.py test/ops/test_quant_nvidia.py test/parity/test_cuda_graphs.py}"
timeout "${CALL_TEST_LIMIT:-120}" python3 -m pytest -q -p no:cacheprovider -o addopts="" -n 12 -rfE --tb=short \
    -k "not wide_decode" $TESTS \
    > $OUT/pytest-new.log 2>&1
rc=$?; echo "pytest NEW rc=$rc: $(tail -1 $OUT/pytest-new.log)"; grep -E "^(FAILED|ERROR)" $OUT/pytest-new.log | head
if [ $rc -ne 0 ] && [ -f "$HEAD" ]; then NEW=$HEAD; export LLAISYS_LIBRARY=$HEAD; echo "NEW failed: what follows runs HEAD"; fi
pack

M=/tmp/llaisys-profile-1.5b; P="python3 tools/gpu/profile_decode.py --model-dir $M --kv-dtype f16"
for r in $(seq 1 "${CALL_ROUNDS:-1}"); do
    for v in HEAD NEW; do
        [ -f "${!v}" ] || continue
        LLAISYS_LIBRARY=${!v} timeout 60 $P --prompt 64 --steps 64 --out $OUT/ab-$v-$r.json 2>&1 | tail -1 | sed "s/^/$v $r: /"
    done
done
pack
for split in 4 1; do
    LLAISYS_GEMV_INT8=2 LLAISYS_GEMV_SPLIT=$split timeout 60 python3 -m pytest -q -p no:cacheprovider -o addopts="" \
        -n 12 -rfE --tb=short test/ops/test_quant_nvidia.py > $OUT/pytest-pipe-split$split.log 2>&1
    echo "quant GEMV tests, pipelined int8, LLAISYS_GEMV_SPLIT=$split: $(tail -1 $OUT/pytest-pipe-split$split.log)"
done
for r in $(seq 1 "${CALL_INT8_ROUNDS:-1}"); do
    # the first int8 kernel (default); the pipelined one launched as any kernel; the pipelined one
    for v in first:LLAISYS_GEMV_INT8=1 nopdl:LLAISYS_GEMV_INT8=2,LLAISYS_GEMV_PDL=0 pipelined:LLAISYS_GEMV_INT8=2; do
        env $(echo "${v#*:}" | tr , ' ') timeout 60 $P --quantize q4_k --prompt 64 --steps 64 \
            --out $OUT/int8-${v%%:*}-$r.json 2>&1 |
            tail -1 | sed "s/^/q4_k ${v%%:*} $r: /"
    done
done
pack
for r in $(seq 1 "${CALL_GRAPH_ROUNDS:-2}"); do  # decode on the BLOCK layout without and with CUDA graphs
    for g in 0 1; do
        for q in bf16 q4_k; do
            LLAISYS_CUDA_GRAPHS=$g timeout 60 $P --layout block --quantize $q --prompt 64 --steps 64 \
                --out $OUT/graphs-$g-$q-$r.json 2>&1 | tail -1 | sed "s/^/graphs=$g $q $r: /"
        done
    done
done
for r in $(seq 1 "${CALL_FLASH_ROUNDS:-2}"); do  # prefill of 2,048 tokens without and with the tensor-core attention
    for f in 0 1; do
        LLAISYS_FLASH_PREFILL=$f timeout 60 $P --prompt 2048 --steps 4 --out $OUT/flash-$f-$r.json 2>&1 | tail -1 |
            sed "s/^/flash=$f $r: /"
    done
done
pack
timeout 90 python3 -m pytest -q -p no:cacheprovider -o addopts="" -n 12 -rfE --tb=short -k wide_decode \
    test/ops/test_nvidia_attention.py test/parity/test_wide_decode_nvidia.py > $OUT/pytest-wide.log 2>&1
echo "op and model tests, wide decode attention: $(tail -1 $OUT/pytest-wide.log)"; grep -E "^(FAILED|ERROR)" $OUT/pytest-wide.log | head -5
for r in $(seq 1 "${CALL_WIDE_ROUNDS:-2}"); do  # decode attention: the first split-K kernel, then the wide one
    for w in 0 1; do
        for ctx in 64 "${CALL_LONG:-4096}"; do
            LLAISYS_WIDE_DECODE=$w timeout 45 $P --layout block --prompt $ctx --steps 32 --out $OUT/wide-$w-$ctx-$r.json \
                2>&1 | tail -1 | sed "s/^/wide=$w ctx=$ctx $r: /"
        done
    done
done
pack
timeout 90 python3 -m pytest -q -p no:cacheprovider -o addopts="" -n 12 -rfE --tb=short \
    test/parity/test_int8_producers_nvidia.py > $OUT/pytest-int8p.log 2>&1
echo "model tests, int8 producers: $(tail -1 $OUT/pytest-int8p.log)"; grep -E "^(FAILED|ERROR)" $OUT/pytest-int8p.log | head -5
for r in $(seq 1 "${CALL_INT8P_ROUNDS:-2}"); do  # Q4_K decode: the quantizer before each linear, then the producers
    for g in 1 2; do
        for p in 0 1; do
            LLAISYS_GEMV_INT8=$g LLAISYS_INT8_PRODUCERS=$p timeout 45 $P --layout block --quantize q4_k --prompt 64 \
                --steps 64 --out $OUT/int8p-$g-$p-$r.json 2>&1 | tail -1 | sed "s/^/gemv=$g producers=$p $r: /"
        done
    done
done
pack
if [ -x $G/llama-cuda/llama-bench ]; then
    PEER_LIMIT=75 bash tools/gpu/peer_cuda.sh 2>&1 | tee $OUT/peer.log
    pack
fi
timeout 45 $P --prompt "${CALL_LONG:-4096}" --steps 32 --out $OUT/long.json 2>&1 | tail -1
pack
for f in tokenizer.json tokenizer_config.json generation_config.json; do cp "$G/tokenizer/$f" "$M/" 2> /dev/null; done
timeout 120 python3 tools/bench_engine_cost.py --model $M --device nvidia --kv-cache-memory 2GiB --modes sync async_output async_scheduling --batches 1 64 \
    --tokens 64 --repeats 3 --out $OUT/async.json 2>&1 | grep -E "^\|"
pack
