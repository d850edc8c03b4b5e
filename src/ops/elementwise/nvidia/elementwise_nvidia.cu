#include "elementwise_nvidia.hpp"

#include "../../../device/nvidia/cuda_check.hpp"
#include "../../../device/nvidia/cuda_kernel_utils.cuh"

namespace llaisys::ops::nvidia {
namespace {

using namespace llaisys::device::nvidia;

template <class T, bool kAdd>
__global__ void binary_kernel(T *out, const T *a, const T *b, size_t n) {
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        float x = to_float(a[i]), y = to_float(b[i]);
        out[i] = from_float<T>(kAdd ? x + y : x * y);
    }
}

}  // namespace

void binary(cpu::BinaryOp op, std::byte *out, const std::byte *a, const std::byte *b, llaisysDataType_t dtype,
            size_t n, cudaStream_t stream) {
    if (n == 0) return;
    constexpr unsigned kThreads = 256;
    dispatch_float(dtype, [&](auto tag) {
        using T = decltype(tag);
        auto *o = reinterpret_cast<T *>(out);
        auto *x = reinterpret_cast<const T *>(a);
        auto *y = reinterpret_cast<const T *>(b);
        if (op == cpu::BinaryOp::Add) binary_kernel<T, true><<<grid_for(n, kThreads), kThreads, 0, stream>>>(o, x, y, n);
        else binary_kernel<T, false><<<grid_for(n, kThreads), kThreads, 0, stream>>>(o, x, y, n);
    });
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace llaisys::ops::nvidia
