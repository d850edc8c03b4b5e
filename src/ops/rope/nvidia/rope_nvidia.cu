// One block per token (grid-stride over tokens); the threads walk the (head, j < d/2) pairs.
// Like the CPU: inv_freq = 1 / theta^(2j/d) and angle = pos * inv_freq in f32, then the
// rotation of the pair (x[j], x[j + d/2]) read before either is written (so out may alias in).
#include "rope_nvidia.hpp"

#include "../../../device/nvidia/cuda_check.hpp"
#include "../../../device/nvidia/cuda_kernel_utils.cuh"

namespace llaisys::ops::nvidia {
namespace {

using namespace llaisys::device::nvidia;

template <class T>
__global__ void rope_kernel(T *out, const T *in, const int64_t *pos, size_t n, size_t heads, size_t d, size_t stride,
                            float theta) {
    const size_t half = d / 2;
    for (size_t i = blockIdx.x; i < n; i += gridDim.x) {
        const float p = float(pos[i]);
        for (size_t e = threadIdx.x; e < heads * half; e += blockDim.x) {
            const size_t h = e / half, j = e % half;
            const float inv_freq = 1.0f / powf(theta, float(2 * j) / float(d));
            float s, c;
            sincosf(p * inv_freq, &s, &c);
            const size_t base = i * stride + h * d;
            const float x1 = to_float(in[base + j]), x2 = to_float(in[base + j + half]);
            out[base + j] = from_float<T>(x1 * c - x2 * s);
            out[base + j + half] = from_float<T>(x2 * c + x1 * s);
        }
    }
}

}  // namespace

void rope(std::byte *out, const std::byte *in, const int64_t *pos, llaisysDataType_t dtype, size_t n,
          size_t heads, size_t d, size_t stride, float theta, cudaStream_t stream) {
    if (n == 0 || heads == 0 || d < 2) return;
    const size_t pairs = heads * (d / 2);
    const unsigned threads = row_threads(pairs);
    const unsigned blocks = row_blocks(n);
    dispatch_float(dtype, [&](auto tag) {
        using T = decltype(tag);
        rope_kernel<T><<<blocks, threads, 0, stream>>>(reinterpret_cast<T *>(out), reinterpret_cast<const T *>(in),
                                                       pos, n, heads, d, stride, theta);
    });
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace llaisys::ops::nvidia
