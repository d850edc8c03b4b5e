// One block per row (grid-stride over rows), three strided passes with a block reduction
// after each of the first two: the max (NaN ignored, as the CPU's std::max(mx, x) does), the
// sum of exp(x - max), then out = exp(x - max) / sum. The last pass starts after the
// reductions' barriers, so every read of the row precedes every write: out may alias in.
#include "softmax_nvidia.hpp"

#include "../../../device/nvidia/cuda_check.hpp"
#include "../../../device/nvidia/cuda_kernel_utils.cuh"

namespace llaisys::ops::nvidia {
namespace {

using namespace llaisys::device::nvidia;

template <class T>
__global__ void softmax_kernel(T *out, const T *in, size_t rows, size_t n) {
    __shared__ float scratch[32];
    for (size_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *x = in + r * n;
        T *y = out + r * n;
        float mx = -INFINITY;
        for (size_t j = threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, to_float(x[j]));
        mx = block_max(mx, scratch);
        float sum = 0.0f;
        for (size_t j = threadIdx.x; j < n; j += blockDim.x) sum += expf(to_float(x[j]) - mx);
        sum = block_sum(sum, scratch);
        for (size_t j = threadIdx.x; j < n; j += blockDim.x) y[j] = from_float<T>(expf(to_float(x[j]) - mx) / sum);
    }
}

}  // namespace

void softmax(std::byte *out, const std::byte *in, llaisysDataType_t dtype, size_t rows, size_t n,
             cudaStream_t stream) {
    if (rows == 0 || n == 0) return;
    const unsigned threads = n >= 1024 ? 1024 : 32 * unsigned(ceil_div(n, 32));
    const unsigned blocks = row_blocks(rows);
    dispatch_float(dtype, [&](auto tag) {
        using T = decltype(tag);
        softmax_kernel<T><<<blocks, threads, 0, stream>>>(reinterpret_cast<T *>(out), reinterpret_cast<const T *>(in),
                                                          rows, n);
    });
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace llaisys::ops::nvidia
