// Mixture-of-experts gather / combine kernels (moe_nvidia.hpp). Each is a grid-stride loop over
// the output's elements: the arrays are [n k, d] activations, small next to the experts'
// weights, and a step runs each once per sparse layer.
#include "moe_nvidia.hpp"

#include "../../../device/nvidia/cuda_check.hpp"
#include "../../../device/nvidia/cuda_kernel_utils.cuh"

namespace llaisys::ops::nvidia {
namespace {

using namespace llaisys::device::nvidia;

constexpr unsigned kThreads = 256;

__global__ void gather_kernel(float *xg, const float *x, const int32_t *row_of, size_t nk, size_t d) {
    const size_t total = nk * d;
    for (size_t e = size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += size_t(gridDim.x) * blockDim.x) {
        const size_t i = e / d, c = e % d;
        xg[e] = x[size_t(row_of[i]) * d + c];
    }
}

// o = 0; o += w_j * y_j for j in order, as moe_cpu.cpp (compiled without FMA) sums them.
__global__ void combine_kernel(float *out, const float *y, const float *weights, const int32_t *pos, size_t n,
                               size_t k, size_t d) {
    const size_t total = n * d;
    for (size_t e = size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += size_t(gridDim.x) * blockDim.x) {
        const size_t t = e / d, c = e % d;
        float o = 0.0f;
        for (size_t j = 0; j < k; j++) {
            const float w = weights[t * k + j];
            o = __fadd_rn(o, __fmul_rn(w, y[size_t(pos[t * k + j]) * d + c]));
        }
        out[e] = o;
    }
}

__global__ void sigmoid_gated_kernel(float *out, const float *y, const float *gate, size_t n, size_t d) {
    const size_t total = n * d;
    for (size_t e = size_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += size_t(gridDim.x) * blockDim.x) {
        const float g = 1.0f / (1.0f + expf(-gate[e / d]));
        out[e] = __fadd_rn(out[e], __fmul_rn(g, y[e]));
    }
}

}  // namespace

void moe_gather(float *xg, const float *x, const int32_t *row_of, size_t nk, size_t d, cudaStream_t stream) {
    if (nk == 0 || d == 0) return;
    gather_kernel<<<grid_for(nk * d, kThreads), kThreads, 0, stream>>>(xg, x, row_of, nk, d);
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

void moe_combine(float *out, const float *y, const float *weights, const int32_t *pos, size_t n, size_t k, size_t d,
                 cudaStream_t stream) {
    if (n == 0 || d == 0) return;
    combine_kernel<<<grid_for(n * d, kThreads), kThreads, 0, stream>>>(out, y, weights, pos, n, k, d);
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

void add_sigmoid_gated(float *out, const float *y, const float *gate, size_t n, size_t d, cudaStream_t stream) {
    if (n == 0 || d == 0) return;
    sigmoid_gated_kernel<<<grid_for(n * d, kThreads), kThreads, 0, stream>>>(out, y, gate, n, d);
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace llaisys::ops::nvidia
