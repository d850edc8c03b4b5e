#include "swiglu_nvidia.hpp"

#include "../../../device/nvidia/cuda_check.hpp"
#include "../../../device/nvidia/cuda_kernel_utils.cuh"

namespace llaisys::ops::nvidia {
namespace {

using namespace llaisys::device::nvidia;

// Grid-stride over the rows * cols outputs; the CPU's expression order: (up * g) / (1 + e^-g).
template <class T>
__global__ void swiglu_kernel(T *out, const T *gate, const T *up, size_t rows, size_t cols, size_t in_stride,
                              size_t out_stride) {
    const size_t total = rows * cols;
    for (size_t e = size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += size_t(gridDim.x) * blockDim.x) {
        const size_t r = e / cols, i = e % cols;
        const float x = to_float(gate[r * in_stride + i]);
        out[r * out_stride + i] = from_float<T>(to_float(up[r * in_stride + i]) * x / (1.0f + expf(-x)));
    }
}

}  // namespace

void swiglu(std::byte *out, const std::byte *gate, const std::byte *up, llaisysDataType_t dtype, size_t rows,
            size_t cols, size_t in_stride, size_t out_stride, cudaStream_t stream) {
    if (rows == 0 || cols == 0) return;
    constexpr unsigned kThreads = 256;
    dispatch_float(dtype, [&](auto tag) {
        using T = decltype(tag);
        swiglu_kernel<T><<<grid_for(rows * cols, kThreads), kThreads, 0, stream>>>(
            reinterpret_cast<T *>(out), reinterpret_cast<const T *>(gate), reinterpret_cast<const T *>(up), rows, cols,
            in_stride, out_stride);
    });
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace llaisys::ops::nvidia
