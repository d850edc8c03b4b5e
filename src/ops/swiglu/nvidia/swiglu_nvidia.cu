#include "swiglu_nvidia.hpp"

#include "../../../device/nvidia/cuda_check.hpp"
#include "../../../device/nvidia/cuda_kernel_utils.cuh"
#include "../../linear/nvidia/int8_act.cuh"

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


// swiglu_kernel over f32 rows whose outputs are also quantized for the int8 GEMV (int8_act.cuh):
// one warp a block of 32 outputs (cols is a multiple of 32, so a block lies in one row).
__global__ void swiglu_quant_kernel(float *out, int8_t *q, float *qd, const float *gate, const float *up, size_t rows,
                                    size_t cols, size_t in_stride, size_t out_stride) {
    pdl_launch_dependents();
    const unsigned lane = threadIdx.x & 31;
    const size_t blocks = rows * cols / kXBlock, step = size_t(gridDim.x) * blockDim.x / 32;
    for (size_t b = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; b < blocks; b += step) {
        const size_t e = b * kXBlock + lane, r = e / cols, i = e % cols;
        const float x = gate[r * in_stride + i];
        const float v = up[r * in_stride + i] * x / (1.0f + expf(-x));
        out[r * out_stride + i] = v;
        quantize32(q + b * kXBlock, qd + b, v, lane);
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

void swiglu_quant(float *out, int8_t *q, float *q_d, const float *gate, const float *up, size_t rows, size_t cols,
                  size_t in_stride, size_t out_stride, cudaStream_t stream) {
    LLAISYS_CHECK_ARG(cols % kXBlock == 0, "swiglu_quant: cols = ", cols, " is not a multiple of ", kXBlock);
    if (rows == 0 || cols == 0) return;
    constexpr unsigned kThreads = 256;
    swiglu_quant_kernel<<<grid_for(rows * cols, kThreads), kThreads, 0, stream>>>(out, q, q_d, gate, up, rows, cols,
                                                                                in_stride, out_stride);
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace llaisys::ops::nvidia
