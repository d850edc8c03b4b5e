// One block per token (grid-stride over tokens); the threads walk the (head, j < d/2) pairs.
// Like the CPU: angle = pos * inv_freq[j] in f32 (inv_freq from a device table, or without one
// 1 / theta^(2j/d)), cos and sin times attn_scale, then the rotation of the pair
// (x[j], x[j + d/2]) read before either is written (so out may alias in).
#include "rope_nvidia.hpp"

#include "../../../device/nvidia/cuda_check.hpp"
#include "../../../device/nvidia/cuda_kernel_utils.cuh"

namespace llaisys::ops::nvidia {
namespace {

using namespace llaisys::device::nvidia;

template <class T>
__global__ void rope_kernel(T *out, const T *in, const int64_t *pos, size_t n, size_t heads, size_t d, size_t stride,
                            const float *inv_freq_table, float theta, float attn_scale) {
    const size_t half = d / 2;
    for (size_t i = blockIdx.x; i < n; i += gridDim.x) {
        const float p = float(pos[i]);
        for (size_t e = threadIdx.x; e < heads * half; e += blockDim.x) {
            const size_t h = e / half, j = e % half;
            const float inv_freq =
                inv_freq_table ? inv_freq_table[j] : 1.0f / powf(theta, float(2 * j) / float(d));
            float s, c;
            sincosf(p * inv_freq, &s, &c);
            s *= attn_scale;
            c *= attn_scale;
            const size_t base = i * stride + h * d;
            const float x1 = to_float(in[base + j]), x2 = to_float(in[base + j + half]);
            out[base + j] = from_float<T>(x1 * c - x2 * s);
            out[base + j + half] = from_float<T>(x2 * c + x1 * s);
        }
    }
}

void launch(std::byte *out, const std::byte *in, const int64_t *pos, llaisysDataType_t dtype, size_t n, size_t heads,
            size_t d, size_t stride, const float *inv_freq, float theta, float attn_scale, cudaStream_t stream) {
    if (n == 0 || heads == 0 || d < 2) return;
    const size_t pairs = heads * (d / 2);
    const unsigned threads = row_threads(pairs);
    const unsigned blocks = row_blocks(n);
    dispatch_float(dtype, [&](auto tag) {
        using T = decltype(tag);
        rope_kernel<T><<<blocks, threads, 0, stream>>>(reinterpret_cast<T *>(out), reinterpret_cast<const T *>(in),
                                                       pos, n, heads, d, stride, inv_freq, theta, attn_scale);
    });
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void rope(std::byte *out, const std::byte *in, const int64_t *pos, llaisysDataType_t dtype, size_t n,
          size_t heads, size_t d, size_t stride, const float *inv_freq, float attn_scale, cudaStream_t stream) {
    launch(out, in, pos, dtype, n, heads, d, stride, inv_freq, 0.0f, attn_scale, stream);
}

void rope(std::byte *out, const std::byte *in, const int64_t *pos, llaisysDataType_t dtype, size_t n,
          size_t heads, size_t d, size_t stride, float theta, cudaStream_t stream) {
    launch(out, in, pos, dtype, n, heads, d, stride, nullptr, theta, 1.0f, stream);
}

}  // namespace llaisys::ops::nvidia
