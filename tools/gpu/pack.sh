#!/usr/bin/env bash
# Packs what tools/gpu/call.sh needs into gpu-carry/ and .whl/ (both ignored), here, without a
# GPU, so that a session lent one spends its device time on the call alone:
#   gpu-carry/libs.tar.xz       libllaisys-NEW.so (this working tree) and libllaisys-HEAD.so
#                               (PACK_BASE, default HEAD: the A/B's base), sm_90 builds
#   gpu-carry/tokenizer.tar.xz  a Qwen2.5 tokenizer folder (the GPU server test, the peer's GGUF)
#   .whl/                       the runtime packages the GPU image lacks (doc/nvidia.md), for its
#                               Python 3.12
# The llama.cpp peer (gpu-carry/llama-cuda.tar.xz) is tools/gpu/build_llama_cuda.sh's, an hour
# on 2 cores: run it once beforehand when the peer stage should run. Then, on the GPU machine:
#   run(command="bash tools/gpu/call.sh", carry=["gpu-carry", ".whl"])
# PACK_STEPS picks steps ("new base tokenizer wheels", default all); PACK_JOBS the build's jobs.
set -euo pipefail
cd "$(dirname "$0")/../.."
G=$PWD/gpu-carry; mkdir -p "$G"
STEPS="${PACK_STEPS:-new base tokenizer wheels}"
step() { case " $STEPS " in *" $1 "*) return 0;; esac; return 1; }
build90() {  # $1: source tree, $2: build dir; prints the library's path
    cmake -S "$1" -B "$2" -G Ninja -DLLAISYS_NVIDIA=ON -DLLAISYS_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DCMAKE_BUILD_TYPE=Release > /dev/null
    nice cmake --build "$2" -j "${PACK_JOBS:-2}" > "$2.log" 2>&1 || { tail -20 "$2.log" >&2; exit 1; }
    echo "$2/libllaisys.so"
}

if step new; then
    cp "$(build90 "$PWD" "$PWD/build/nv90")" "$G/libllaisys-NEW.so"
    echo "NEW: $(git rev-parse --short HEAD)$(git diff --quiet || echo '+changes')"
fi
if step base; then
    base=$(git rev-parse --short "${PACK_BASE:-HEAD}")
    wt=$PWD/build/pack-base-src
    rm -rf "$wt"; git worktree prune
    git worktree add -q --detach "$wt" "$base"
    cp "$(build90 "$wt" "$PWD/build/nv90-base")" "$G/libllaisys-HEAD.so"
    git worktree remove --force "$wt"
    echo "HEAD (the base): $base"
fi
if [ -f "$G/libllaisys-NEW.so" ] && [ -f "$G/libllaisys-HEAD.so" ]; then
    tar cJf "$G/libs.tar.xz" -C "$G" libllaisys-NEW.so libllaisys-HEAD.so
fi
if step tokenizer; then
    M="${PACK_TOKENIZER:-$HOME/.cache/llaisys/models/qwen2.5-coder-0.5b-instruct}"
    rm -rf "$G/tokenizer"; mkdir -p "$G/tokenizer"
    for f in config.json tokenizer.json tokenizer_config.json generation_config.json; do cp "$M/$f" "$G/tokenizer/"; done
    tar cJf "$G/tokenizer.tar.xz" -C "$G" tokenizer
fi
if step wheels; then  # the GPU image has numpy, safetensors, tokenizers, jinja2, prometheus-client
    rm -rf .whl; mkdir -p .whl
    for w in flask==3.1.3 itsdangerous==2.2.0 blinker==1.9.0 gguf==0.19.0 llguidance==1.9.1; do
        python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
            --platform manylinux2014_x86_64 \
            -d .whl "$w"
    done
fi
du -ch "$G"/*.tar.xz .whl/*.whl 2> /dev/null | tail -1 | sed 's/total/to carry (64 MiB at most)/'
