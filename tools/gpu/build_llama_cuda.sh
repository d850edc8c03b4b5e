#!/usr/bin/env bash
# The llama.cpp peer for the GPU comparison (issue 40 item 6), built here without a GPU: the
# llama.cpp that llama-cpp-python 0.3.36 vendors (tools/build_llama_cpp.py fetches it), CUDA for
# sm_90 only, llama-bench and llama-batched-bench linked statically against ggml, stripped and
# packed as gpu-carry/llama-cuda.tar.xz (ignored; 43 MB, carried to the GPU machine with `run`'s
# carry and unpacked there into gpu-carry/llama-cuda, which tools/gpu/peer_cuda.sh runs).
#
# The toolkit here ships no cuBLAS, so pip's nvidia-cublas wheel (the SONAME libcublas.so.13 of
# the GPU machine's torch) gives the headers and the link; there the binaries find cuBLAS and
# cudart through LD_LIBRARY_PATH (tools/gpu/peer_cuda.sh sets it). The driver stub is missing
# too, so GGML_CUDA_NO_VMM=ON: llama.cpp's legacy memory pool instead of its virtual-memory one
# (a labelled difference; it allocates no differently once warm). CUDA graphs stay on
# (GGML_CUDA_GRAPHS, llama.cpp's default). Took 58 min on 2 cores (2026-11-28) and 20 min on a
# Zen 5's 2 cores (2026-11-29), the 22 MMQ template instances the longest.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=${LLAISYS_HOME:-$HOME/.cache/llaisys}/peers
SRC=$ROOT/llama_cpp_python-0.3.36/vendor/llama.cpp
B=$ROOT/build-cuda90
CUB=$ROOT/cublas-13.0
[ -d "$SRC" ] || python3 tools/build_llama_cpp.py --print-env > /dev/null   # fetches the source
if [ ! -f "$CUB/nvidia/cu13/include/cublas_v2.h" ]; then
    mkdir -p "$CUB"
    python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_27_x86_64 \
        --python-version 3.11 nvidia-cublas==13.0.0.19 -d "$CUB"
    (cd "$CUB" && unzip -q -o nvidia_cublas-*.whl 'nvidia/*')
fi
L=$CUB/nvidia/cu13/lib; I=$CUB/nvidia/cu13/include
cmake -S "$SRC" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_NO_VMM=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=OFF \
    -DCUDA_cublas_LIBRARY=$L/libcublas.so.13 -DCUDA_cublasLt_LIBRARY=$L/libcublasLt.so.13 \
    -DCMAKE_CUDA_FLAGS="-I$I" -DCMAKE_CXX_FLAGS="-I$I" > "$B.configure.log"
nice -n 10 cmake --build "$B" --target llama-bench llama-batched-bench -j "${JOBS:-2}"
mkdir -p gpu-carry/llama-cuda
for t in llama-bench llama-batched-bench; do strip -o gpu-carry/llama-cuda/$t "$B/bin/$t"; done
git -C "$SRC" rev-parse HEAD 2> /dev/null > gpu-carry/llama-cuda/commit || echo "llama-cpp-python 0.3.36" > gpu-carry/llama-cuda/commit
# Each binary is 69 MB (ggml-cuda's sm_90 code linked into both); xz with a dictionary that
# spans both finds the second one in the first: 43 MB, under a call's 64 MiB with room left.
XZ_OPT="--lzma2=preset=9,dict=256MiB" tar cJf gpu-carry/llama-cuda.tar.xz -C gpu-carry llama-cuda
rm -rf gpu-carry/llama-cuda
ls -la gpu-carry/llama-cuda.tar.xz
