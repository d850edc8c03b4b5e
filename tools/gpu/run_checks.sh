#!/usr/bin/env bash
# One call on a lent GPU machine (see doc/nvidia.md, "Running on a GPU"): the NVIDIA build made
# beforehand (LLAISYS_LIBRARY, default build/nv90/libllaisys.so) against the GPU tests, then
# compute-sanitizer over a slice of the op tests, then a short benchmark. Each stage has its
# own time limit so one hang cannot eat the lease; logs go to $OUT (or ./gpu-out).
# Stages to run: GPU_STAGES="info tests profile graphs variants splits ncu-detail sanitize bench" (default
# all but graphs, variants, splits and ncu-detail; graphs times decode with and without CUDA graphs; variants times decode under GPU_VARIANTS' environments,
# splits runs the quantized GEMV's tests at each LLAISYS_GEMV_SPLIT and LLAISYS_GEMV_INT8=0; ncu-detail puts GPU_NCU_KERNEL's launches under ncu's occupancy and stall sections). profile times
# decode steps of a 1.5B of random weights (bf16, Q4_K, Q8_0) with this library and, when
# GPU_BASE_LIBRARY names another build, with that one too (an A/B in one call; GPU_PROFILE_ROUNDS
# alternates them that many times), then puts GPU_NCU_FORMATS' steps under ncu (GPU_NCU_ARGS,
# e.g. "--kv-dtype f16", passed to those runs; tools/gpu/profile_decode.py).
set -u
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT"
STAGES="${GPU_STAGES:-info tests profile sanitize bench}"
export PYTHONUNBUFFERED=1 LLAISYS_SKIP_REAL_MODEL=1
export LLAISYS_LIBRARY="${LLAISYS_LIBRARY:-$PWD/build/nv90/libllaisys.so}"
if ls .whl/*.whl > /dev/null 2>&1; then  # runtime dependencies the GPU image lacks, carried as wheels
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
if [ -z "${LLAISYS_CUBLAS_LIBRARY:-}" ]; then  # pip's nvidia-cublas wheel
    LLAISYS_CUBLAS_LIBRARY=$(python3 -c 'import nvidia.cublas, os, glob; d = list(nvidia.cublas.__path__)[0]; print((glob.glob(d + "/lib/libcublas.so.*") or [""])[0])' 2> /dev/null)
    [ -z "$LLAISYS_CUBLAS_LIBRARY" ] && LLAISYS_CUBLAS_LIBRARY=$(python3 -c 'import glob, site; print((sorted(glob.glob(site.getsitepackages()[0] + "/nvidia/*/lib/libcublas.so.*")) or [""])[0])')
    export LLAISYS_CUBLAS_LIBRARY
fi
stage() { case " $STAGES " in *" $1 "*) return 0;; esac; return 1; }

if stage info; then
    { date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv; nvcc --version | tail -1
      python3 -c 'import torch, sys; print(sys.version.split()[0], "torch", torch.__version__, torch.cuda.get_device_name(0))'
      echo "cublas: $LLAISYS_CUBLAS_LIBRARY"; nproc
      python3 -c 'from llaisys import runtime, DeviceType; print("llaisys sees", runtime.device_count(DeviceType.NVIDIA), "GPU(s)")'
    } 2>&1 | tee "$OUT/info.txt"
fi

# the GPU server test's tokenizer (test/server/test_server_nvidia.py): a folder carried to the
# machine with config.json and the tokenizer files of a Qwen2.5 model (doc/nvidia.md)
TOK="${LLAISYS_TEST_TOKENIZER_DIR:-$PWD/gpu-carry/tokenizer}"
[ -f "$TOK/tokenizer.json" ] && export LLAISYS_TEST_TOKENIZER_DIR="$TOK"
TESTS="test/server/test_server_nvidia.py test/core/test_nvidia_runtime.py test/core/test_allocator_cache.py test/core/test_runtime_api.py
 test/ops/test_nvidia_ops.py test/ops/test_nvidia_attention.py test/ops/test_quant_nvidia.py test/ops/test_argmax_nan.py
 test/sampling/test_sampler_nvidia.py test/sampling/test_sample_device.py test/sampling/test_sampler_nan.py
 test/parity/test_tiny_qwen2.py test/parity/test_kv_slot.py test/parity/test_quant_model.py test/parity/test_archs.py
 test/parity/test_moe_nvidia.py test/parity/test_cuda_graphs.py test/parity/test_padded_decode.py"
if stage tests; then
    # -k nvidia would drop tests whose ids do not say so; the CPU halves are quick, so all run
    timeout "${GPU_TEST_LIMIT:-300}" python3 -m pytest -q -p no:cacheprovider -o addopts="" --timeout 120 -rfE --tb=short \
        -n "${GPU_TEST_WORKERS:-4}" $TESTS > "$OUT/pytest.log" 2>&1
    echo "pytest rc=$?"; grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head -60; tail -3 "$OUT/pytest.log"
fi

if stage profile; then
    M=/tmp/llaisys-profile-1.5b
    # GPU_PROFILE_ROUNDS=R alternates the libraries R times (base, new, base, new, ...: drift of
    # the machine hits both alike); each run's SM and memory clocks go to clocks.csv, and the
    # medians and their ratio are printed at the end
    for r in $(seq 1 "${GPU_PROFILE_ROUNDS:-1}"); do
    for lib in ${GPU_BASE_LIBRARY:+base} new; do
        [ $lib = base ] && L="$GPU_BASE_LIBRARY" || L="$LLAISYS_LIBRARY"
        for q in ${GPU_PROFILE_FORMATS:-bf16 q4_k q8_0}; do
            tag=$lib-$q$([ "${GPU_PROFILE_ROUNDS:-1}" -gt 1 ] && echo "-r$r")
            LLAISYS_LIBRARY="$L" timeout "${GPU_PROFILE_LIMIT:-90}" python3 tools/gpu/profile_decode.py --model-dir $M --quantize $q \
                --steps 96 ${GPU_PROFILE_ARGS:-} --out "$OUT/decode-$tag.json" > "$OUT/decode-$tag.log" 2>&1
            echo "decode $tag rc=$?: $(tail -1 "$OUT/decode-$tag.log")"
            echo "$tag,$(nvidia-smi --query-gpu=clocks.sm,clocks.mem --format=csv,noheader 2> /dev/null)" >> "$OUT/clocks.csv"
        done
        if [ -n "${GPU_PROFILE_LONG:-}" ]; then  # a long context: bf16, a prompt of that many tokens
            LLAISYS_LIBRARY="$L" timeout "${GPU_PROFILE_LIMIT:-90}" python3 tools/gpu/profile_decode.py --model-dir $M \
                --prompt $GPU_PROFILE_LONG --steps 96 ${GPU_PROFILE_ARGS:-} --out "$OUT/decode-$lib-long.json" \
                > "$OUT/decode-$lib-long.log" 2>&1
            echo "decode $lib bf16 prompt $GPU_PROFILE_LONG rc=$?: $(tail -1 "$OUT/decode-$lib-long.log")"
        fi
    done
    done
    python3 - "$OUT" <<'EOF_SUMMARY'
import glob, json, re, statistics, sys
runs = {}
for f in glob.glob(sys.argv[1] + "/decode-*.json"):
    m = re.match(r".*/decode-(base|new)-([a-z0-9_]+?)(?:-r\d+)?\.json$", f)
    if m and m.group(2) != "long":
        runs.setdefault((m.group(2), m.group(1)), []).append(json.load(open(f))["tok_s"])
for q in sorted({q for q, _ in runs}):
    b, n = runs.get((q, "base")), runs.get((q, "new"))
    line = f"decode {q}: new median {statistics.median(n):.1f} tok/s ({len(n)} runs)" if n else f"decode {q}:"
    if b and n:
        line += f", base {statistics.median(b):.1f} ({len(b)}), new/base {statistics.median(n) / statistics.median(b):.3f}"
    print(line)
EOF_SUMMARY
    for q in ${GPU_NCU_FORMATS-bf16 q4_k}; do
        timeout "${GPU_PROFILE_LIMIT:-90}" ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum \
            --csv --log-file "$OUT/ncu-$q.csv" python3 tools/gpu/profile_decode.py --model-dir $M --quantize $q --steps 8 --ncu-steps 2 ${GPU_NCU_ARGS:-} \
            > "$OUT/ncu-$q.log" 2>&1
        echo "ncu $q rc=$?"
        cat "$OUT/ncu-$q.csv" "$OUT/ncu-$q.log" > /tmp/ncu-$q.all 2> /dev/null
        python3 tools/gpu/profile_decode.py --parse /tmp/ncu-$q.all --steps-profiled 2 --out "$OUT/kernels-$q.json" 2>&1 | head -24
    done
fi

if stage graphs; then  # decode steps with CUDA graphs (LLAISYS_CUDA_GRAPHS=1) against without, BLOCK layout, ABAB
    M=/tmp/llaisys-profile-1.5b
    for r in $(seq 1 "${GPU_GRAPH_ROUNDS:-3}"); do
        for g in 0 1; do
            for q in ${GPU_PROFILE_FORMATS:-bf16 q4_k}; do
                LLAISYS_CUDA_GRAPHS=$g timeout "${GPU_PROFILE_LIMIT:-90}" python3 tools/gpu/profile_decode.py --model-dir $M \
                    --quantize $q --layout block --steps 96 ${GPU_PROFILE_ARGS:-} --out "$OUT/graphs-$g-$q-r$r.json" \
                    > "$OUT/graphs-$g-$q-r$r.log" 2>&1
                echo "graphs=$g $q r$r rc=$?: $(tail -1 "$OUT/graphs-$g-$q-r$r.log" | cut -c1-400)"
            done
        done
    done
fi

if stage variants; then  # GPU_VARIANTS="name:VAR=v[,VAR2=w] ...": decode steps of this library under each environment
    M=/tmp/llaisys-profile-1.5b
    for v in ${GPU_VARIANTS:-}; do
        name=${v%%:*}; envs=${v#*:}
        for q in ${GPU_PROFILE_FORMATS:-bf16 q4_k q8_0}; do
            env ${envs//,/ } timeout "${GPU_PROFILE_LIMIT:-90}" python3 tools/gpu/profile_decode.py --model-dir $M --quantize $q \
                --steps 96 ${GPU_PROFILE_ARGS:-} --out "$OUT/decode-$name-$q.json" > "$OUT/decode-$name-$q.log" 2>&1
            echo "decode $name ($envs) $q rc=$?: $(tail -1 "$OUT/decode-$name-$q.log")"
        done
    done
fi

if stage splits; then  # the quantized GEMV's other paths (row splits, the float path) against the same tests
    for e in ${GPU_SPLITS:-LLAISYS_GEMV_SPLIT=1 LLAISYS_GEMV_SPLIT=2 LLAISYS_GEMV_INT8=0}; do
        env $e timeout "${GPU_TEST_LIMIT:-300}" python3 -m pytest -q -p no:cacheprovider -o addopts="" \
            --timeout 120 -rfE --tb=short -n "${GPU_TEST_WORKERS:-4}" test/ops/test_quant_nvidia.py test/parity/test_quant_model.py \
            > "$OUT/pytest-$e.log" 2>&1
        echo "pytest $e rc=$?"; grep -E "^(FAILED|ERROR)" "$OUT/pytest-$e.log" | head -20
        tail -1 "$OUT/pytest-$e.log"
    done
fi

if stage ncu-detail; then  # occupancy, stall reasons and memory charts of one layer's quantized GEMVs
    M=/tmp/llaisys-profile-1.5b
    timeout "${GPU_PROFILE_LIMIT:-90}" ncu --profile-from-start off --clock-control none -k "regex:${GPU_NCU_KERNEL:-gemv_kernel}" \
        --launch-count "${GPU_NCU_LAUNCHES:-7}" --section SpeedOfLight --section Occupancy --section LaunchStats \
        --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
        python3 tools/gpu/profile_decode.py --model-dir $M --quantize ${GPU_NCU_QUANT:-q4_k} --steps 3 --ncu-steps 1 \
        > "$OUT/ncu-detail.txt" 2>&1
    echo "ncu-detail rc=$?"
    grep -E "gemv_kernel|decode_kernel|Duration|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Block Limit Reg|Warp Cycles Per Issued|Issue Slots Busy" \
        "$OUT/ncu-detail.txt" | head -80
fi

if stage sanitize; then
    for tool in ${GPU_SAN_TOOLS:-memcheck racecheck}; do
        k_var="GPU_SAN_K_$tool"; k="${!k_var:-${GPU_SAN_K:-}}"  # GPU_SAN_K_racecheck=... per tool
        timeout "${GPU_SAN_LIMIT:-120}" compute-sanitizer --tool $tool --error-exitcode 9 --print-limit 20 \
            python3 -m pytest -q -p no:cacheprovider -o addopts="" -x ${GPU_SAN_TESTS:-test/ops/test_nvidia_ops.py test/ops/test_nvidia_attention.py} ${k:+-k "$k"} \
            > "$OUT/sanitizer-$tool.log" 2>&1
        echo "compute-sanitizer $tool rc=$?"; grep -E "ERROR SUMMARY|passed|failed" "$OUT/sanitizer-$tool.log" | tail -3
    done
fi

if stage bench; then
    timeout "${GPU_BENCH_LIMIT:-240}" python3 tools/gpu/bench_gpu.py ${GPU_BENCH_ARGS:-} --out "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log" | tail -40
fi
