// One block per token (grid-stride over tokens): the threads walk the (head, j < d/2) pairs of
// the q and k heads, rotating each pair as rope_nvidia.cu does (the angle pos * inv_freq[j] in
// f32, both values read before either is written), a key pair also stored into the cache;
// then the value row is copied into the cache.
#include "rope_kv_write_nvidia.hpp"

#include "../../../device/nvidia/cuda_check.hpp"
#include "../../../device/nvidia/cuda_kernel_utils.cuh"

namespace llaisys::ops::nvidia {
namespace {

using namespace llaisys::device::nvidia;

template <class TK>
__global__ void rope_kv_write_kernel(float *qkv, size_t stride, size_t heads, size_t kv_heads, size_t d, size_t k_off,
                                     size_t v_off, const int64_t *pos, const float *inv_freq, float attn_scale,
                                     TK *k_cache, TK *v_cache, const int64_t *slots, size_t n) {
    const size_t half = d / 2, kv_dim = kv_heads * d;
    for (size_t t = blockIdx.x; t < n; t += gridDim.x) {
        const float p = float(pos[t]);
        const int64_t slot = slots[t];
        float *row = qkv + t * stride;
        for (size_t e = threadIdx.x; e < (heads + kv_heads) * half; e += blockDim.x) {
            const size_t h = e / half, j = e % half;
            float s, c;
            sincosf(p * inv_freq[j], &s, &c);
            s *= attn_scale;
            c *= attn_scale;
            const bool key = h >= heads;
            float *x = row + (key ? k_off + (h - heads) * d : h * d);
            const float x1 = x[j], x2 = x[j + half];
            const float y1 = x1 * c - x2 * s, y2 = x2 * c + x1 * s;
            x[j] = y1;
            x[j + half] = y2;
            if (key && slot >= 0) {
                TK *kd = k_cache + size_t(slot) * kv_dim + (h - heads) * d;
                kd[j] = from_float<TK>(y1);
                kd[j + half] = from_float<TK>(y2);
            }
        }
        if (slot >= 0) {
            TK *vd = v_cache + size_t(slot) * kv_dim;
            for (size_t e = threadIdx.x; e < kv_dim; e += blockDim.x) vd[e] = from_float<TK>(row[v_off + e]);
        }
    }
}

}  // namespace

void rope_kv_write(float *qkv, size_t stride, size_t heads, size_t kv_heads, size_t d, size_t k_off, size_t v_off,
                   const int64_t *pos, const float *inv_freq, float attn_scale, std::byte *k_cache,
                   std::byte *v_cache, llaisysDataType_t kvdt, const int64_t *slots, size_t n, cudaStream_t stream) {
    if (n == 0 || d < 2) return;
    const unsigned threads = row_threads((heads + kv_heads) * (d / 2));
    dispatch_float(kvdt, [&](auto tag) {
        using TK = decltype(tag);
        rope_kv_write_kernel<TK><<<row_blocks(n), threads, 0, stream>>>(
            qkv, stride, heads, kv_heads, d, k_off, v_off, pos, inv_freq, attn_scale, reinterpret_cast<TK *>(k_cache),
            reinterpret_cast<TK *>(v_cache), slots, n);
    });
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace llaisys::ops::nvidia
