// One block per row (grid-stride over rows): a strided pass sums the squares, a block
// reduction gives 1/sqrt(mean + eps), a second pass writes the row. Every thread touches the
// same columns in both passes, so add_rms_norm's second pass reads back its own writes.
#include "rms_norm_nvidia.hpp"

#include "../../../device/nvidia/cuda_check.hpp"
#include "../../../device/nvidia/cuda_kernel_utils.cuh"
#include "../../linear/nvidia/int8_act.cuh"

namespace llaisys::ops::nvidia {
namespace {

using namespace llaisys::device::nvidia;

// The first pass of a row: 1/sqrt(mean(x^2) + eps) over x [d] (with kAdd, r [d] += x first);
// every kernel below takes it from here, so the fused ones give rms_norm's bits.
template <class T, bool kAdd>
__device__ __forceinline__ float row_inv_rms(T *r, const T *x, size_t d, float eps, float *scratch) {
    float ss = 0.0f;
    for (size_t j = threadIdx.x; j < d; j += blockDim.x) {
        float v;
        if constexpr (kAdd) {
            T sum = from_float<T>(to_float(r[j]) + to_float(x[j]));  // what a separate add would store
            r[j] = sum;
            v = to_float(sum);
        } else {
            v = to_float(x[j]);
        }
        ss += v * v;
    }
    ss = block_sum(ss, scratch);
    return 1.0f / sqrtf(ss / float(d) + eps);
}

template <class T, class TW, bool kAdd>
__global__ void rms_norm_kernel(T *out, T *residual, const T *in, const TW *weight, size_t m, size_t d, float eps) {
    __shared__ float scratch[32];
    for (size_t i = blockIdx.x; i < m; i += gridDim.x) {
        const T *x = in + i * d;
        T *r = kAdd ? residual + i * d : nullptr;
        T *y = out + i * d;
        const float inv = row_inv_rms<T, kAdd>(r, x, d, eps, scratch);
        const T *src = kAdd ? r : x;
        for (size_t j = threadIdx.x; j < d; j += blockDim.x) y[j] = from_float<T>(to_float(src[j]) * inv * to_float(weight[j]));
    }
}

// rms_norm_kernel (f32) whose second pass quantizes the row for the int8 GEMV instead of storing
// it (int8_act.cuh): d is a multiple of 32 and blockDim of 32, so each pass's 32-blocks are whole
// warps' (element j = warp base + lane).
template <class TW>
__global__ void rms_norm_quant_kernel(int8_t *q, float *qd, const float *in, const TW *weight, size_t m, size_t d,
                                      float eps) {
    __shared__ float scratch[32];
    pdl_launch_dependents();
    const unsigned lane = threadIdx.x & 31;
    for (size_t i = blockIdx.x; i < m; i += gridDim.x) {
        const float *x = in + i * d;
        const float inv = row_inv_rms<float, false>(nullptr, x, d, eps, scratch);
        for (size_t j = threadIdx.x; j < d; j += blockDim.x) {
            const size_t b = (i * d + j) / kXBlock;
            quantize32(q + b * kXBlock, qd + b, x[j] * inv * to_float(weight[j]), lane);
        }
    }
}

// One warp per head vector (head dims are small: 64 to 256), kHeadWarps warps per block.
constexpr unsigned kHeadWarps = 8;

template <class T, class TW>
__global__ void rms_norm_heads_kernel(T *x, const TW *w, size_t n, size_t heads, size_t d, size_t stride, float eps) {
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const size_t rows = n * heads;
    for (size_t i = size_t(blockIdx.x) * kHeadWarps + warp; i < rows; i += size_t(gridDim.x) * kHeadWarps) {
        T *v = x + i / heads * stride + i % heads * d;  // [d]
        float ss = 0.0f;
        for (size_t j = lane; j < d; j += 32) {
            const float f = to_float(v[j]);
            ss += f * f;
        }
        ss = warp_sum(ss);
        const float inv = 1.0f / sqrtf(ss / float(d) + eps);
        for (size_t j = lane; j < d; j += 32) {
            v[j] = from_float<T>(to_float(from_float<T>(to_float(v[j]) * inv)) * to_float(w[j]));
        }
    }
}

unsigned threads_for(size_t d) { return d >= 1024 ? 1024 : 32 * unsigned(ceil_div(d, 32)); }

template <bool kAdd>
void launch(std::byte *out, std::byte *residual, const std::byte *in, llaisysDataType_t act, const std::byte *weight,
            llaisysDataType_t wdt, size_t m, size_t d, float eps, cudaStream_t stream) {
    if (m == 0 || d == 0) return;
    const unsigned blocks = row_blocks(m);
    dispatch_float(act, [&](auto tag) {
        using T = decltype(tag);
        dispatch_float(wdt, [&](auto wtag) {
            using TW = decltype(wtag);
            rms_norm_kernel<T, TW, kAdd><<<blocks, threads_for(d), 0, stream>>>(
                reinterpret_cast<T *>(out), reinterpret_cast<T *>(residual), reinterpret_cast<const T *>(in),
                reinterpret_cast<const TW *>(weight), m, d, eps);
        });
    });
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void rms_norm_heads(std::byte *x, llaisysDataType_t dtype, const std::byte *w, llaisysDataType_t wdt, size_t n,
                    size_t heads, size_t d, size_t stride, float eps, cudaStream_t stream) {
    if (n == 0 || heads == 0 || d == 0) return;
    const unsigned blocks = row_blocks(ceil_div(n * heads, kHeadWarps));
    dispatch_float(dtype, [&](auto tag) {
        using T = decltype(tag);
        dispatch_float(wdt, [&](auto wtag) {
            using TW = decltype(wtag);
            rms_norm_heads_kernel<T, TW><<<blocks, kHeadWarps * 32, 0, stream>>>(
                reinterpret_cast<T *>(x), reinterpret_cast<const TW *>(w), n, heads, d, stride, eps);
        });
    });
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

void rms_norm_quant(int8_t *q, float *d_out, const float *in, const std::byte *weight, llaisysDataType_t wdt,
                    size_t m, size_t d, float eps, cudaStream_t stream) {
    LLAISYS_CHECK_ARG(d % kXBlock == 0, "rms_norm_quant: d = ", d, " is not a multiple of ", kXBlock);
    if (m == 0 || d == 0) return;
    dispatch_float(wdt, [&](auto wtag) {
        using TW = decltype(wtag);
        rms_norm_quant_kernel<TW><<<row_blocks(m), threads_for(d), 0, stream>>>(
            q, d_out, in, reinterpret_cast<const TW *>(weight), m, d, eps);
    });
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

void rms_norm(std::byte *out, const std::byte *in, llaisysDataType_t act, const std::byte *weight,
              llaisysDataType_t wdt, size_t m, size_t d, float eps, cudaStream_t stream) {
    launch<false>(out, nullptr, in, act, weight, wdt, m, d, eps, stream);
}

void add_rms_norm(std::byte *out, std::byte *residual, const std::byte *in, llaisysDataType_t act,
                  const std::byte *weight, llaisysDataType_t wdt, size_t m, size_t d, float eps,
                  cudaStream_t stream) {
    launch<true>(out, residual, in, act, weight, wdt, m, d, eps, stream);
}

}  // namespace llaisys::ops::nvidia
