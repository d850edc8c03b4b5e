// gemv16 (gemv16_nvidia.hpp). A warp computes kRowsPerWarp outputs (the swiglu form: one
// output from its gate and up rows): each lane takes 8 consecutive weights of a row per 16-byte
// load, lanes side by side (a warp reads 512 contiguous bytes of a row at once), and kUnroll
// such loads of every row are issued before the first is used, so 2 KiB to 4 KiB a warp are in
// flight. Weights bypass L1 (read once); the activations, a few KB, are re-read from L1 by every
// warp. Each lane sums its products of all m rows in f32; the warp ends with shuffle sums.
#include "gemv16_nvidia.hpp"

#include "../../../device/nvidia/cuda_check.hpp"
#include "../../../device/nvidia/cuda_kernel_utils.cuh"
#include "../../../utils/error.hpp"

#include <cstdlib>
#include <cstring>

namespace llaisys::ops::nvidia {
namespace {

using namespace llaisys::device::nvidia;

constexpr unsigned kWarps = 4;
constexpr int kUnroll = 4;

__device__ __forceinline__ size_t ceil_div_dev(size_t a, size_t b) { return (a + b - 1) / b; }

// Split-K when the row pairs would give fewer warps than this many a multiprocessor's worth
// (132 multiprocessors on an H200: 2 row pairs a warp, 4 warps a block), and a row is long.
constexpr size_t kSplitBelowRows = 2 * 8 * 132;
constexpr size_t kSplitMinK = 2048;

__device__ __forceinline__ uint4 load_stream(const void *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

// Two weights packed in 32 bits, widened exactly.
__device__ __forceinline__ float2 widen2(uint32_t u, bf16_t) {
    return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
}
__device__ __forceinline__ float2 widen2(uint32_t u, fp16_t) {
    __half2 h;
    memcpy(&h, &u, sizeof(h));
    return __half22float2(h);
}

// acc += dot(8 weights in w, x[0..8))
template <class TW>
__device__ __forceinline__ float dot8(const uint4 &w, const float *x, float acc) {
    const float4 a = __ldg(reinterpret_cast<const float4 *>(x));
    const float4 b = __ldg(reinterpret_cast<const float4 *>(x) + 1);
    const float2 w0 = widen2(w.x, TW{}), w1 = widen2(w.y, TW{}), w2 = widen2(w.z, TW{}), w3 = widen2(w.w, TW{});
    acc = fmaf(w0.x, a.x, acc);
    acc = fmaf(w0.y, a.y, acc);
    acc = fmaf(w1.x, a.z, acc);
    acc = fmaf(w1.y, a.w, acc);
    acc = fmaf(w2.x, b.x, acc);
    acc = fmaf(w2.y, b.y, acc);
    acc = fmaf(w3.x, b.z, acc);
    acc = fmaf(w3.y, b.w, acc);
    return acc;
}

// WR weight rows a warp (rows[r]), M activation rows at most (m of them real), columns
// [c_begin, k) (c_begin a multiple of 8): sums[r][i] = in[i] . W[rows[r]] over them, complete in
// every lane. Rows are `ld` elements apart.
template <class TW, int M, int WR>
__device__ __forceinline__ void warp_dots(const float *in, const TW *w, const size_t (&rows)[WR], size_t m, size_t ld,
                                          size_t c_begin, size_t k, float (&sums)[WR][M]) {
    const unsigned lane = threadIdx.x & 31;
#pragma unroll
    for (int r = 0; r < WR; r++)
#pragma unroll
        for (int i = 0; i < M; i++) sums[r][i] = 0.0f;
    for (size_t c0 = c_begin + size_t(lane) * 8; c0 < k; c0 += 256 * kUnroll) {
        uint4 wv[kUnroll][WR];
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            const size_t c = c0 + 256 * size_t(u);
#pragma unroll
            for (int r = 0; r < WR; r++) wv[u][r] = c < k ? load_stream(w + rows[r] * ld + c) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            const size_t c = c0 + 256 * size_t(u);
            if (c < k) {
#pragma unroll
                for (int i = 0; i < M; i++) {
                    if (i < int(m)) {
#pragma unroll
                        for (int r = 0; r < WR; r++) sums[r][i] = dot8<TW>(wv[u][r], in + size_t(i) * ld + c, sums[r][i]);
                    }
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < WR; r++)
#pragma unroll
        for (int i = 0; i < M; i++) sums[r][i] = warp_sum(sums[r][i]);
}

// out [m, n] = in @ W^T + bias. KS = 1: a warp serves rows 2w, 2w + 1 alone. KS = kWarps
// (split-K, for few rows of many columns: the 1.5B's down projection has 1,536 rows of 8,960,
// which left 6 warps a multiprocessor and read 1.4 TB/s): the block's warps share its two rows,
// each a contiguous quarter of the columns, and their sums meet in shared memory.
template <class TW, int M, int KS>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(float *out, const float *in, const TW *w, const TW *bias,
                                                           size_t m, size_t n, size_t k) {
    constexpr int WR = 2;
    const unsigned lane = threadIdx.x & 31, warp_in_block = threadIdx.x >> 5;
    const size_t warp = size_t(blockIdx.x) * (kWarps / KS) + warp_in_block / KS, first = warp * WR;
    if (first >= n) return;  // whole blocks only when KS > 1 (every warp of a block shares `first`)
    size_t rows[WR];
#pragma unroll
    for (int r = 0; r < WR; r++) rows[r] = min(first + r, n - 1);  // a past-the-end row re-reads the last
    const size_t part = (ceil_div_dev(k, KS) + 7) / 8 * 8, c_begin = min(k, part * (warp_in_block % KS));
    float sums[WR][M];
    warp_dots<TW, M, WR>(in, w, rows, m, k, c_begin, min(k, c_begin + part), sums);
    if constexpr (KS > 1) {
        __shared__ float s_sum[KS][WR][M];
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < WR; r++)
#pragma unroll
                for (int i = 0; i < M; i++) s_sum[warp_in_block][r][i] = sums[r][i];
        }
        __syncthreads();
        if (warp_in_block != 0) return;
#pragma unroll
        for (int r = 0; r < WR; r++)
#pragma unroll
            for (int i = 0; i < M; i++) {
                float t = 0.0f;
#pragma unroll
                for (int q = 0; q < KS; q++) t += s_sum[q][r][i];
                sums[r][i] = t;
            }
    }
#pragma unroll
    for (int r = 0; r < WR; r++) {
#pragma unroll
        for (int i = 0; i < M; i++) {
            if (lane == unsigned(r * M + i) % 32 && i < int(m) && first + r < n) {
                out[size_t(i) * n + first + r] = sums[r][i] + (bias ? to_float(bias[first + r]) : 0.0f);
            }
        }
    }
}

// out [m, I] = silu(in @ W[j]) * (in @ W[I + j]): a warp serves output column j.
template <class TW, int M>
__global__ void __launch_bounds__(kWarps * 32) swiglu_kernel(float *out, const float *in, const TW *w, size_t m,
                                                             size_t I, size_t k) {
    const size_t j = size_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
    if (j >= I) return;
    const size_t rows[2] = {j, I + j};
    float sums[2][M];
    warp_dots<TW, M, 2>(in, w, rows, m, k, 0, k, sums);
    const unsigned lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < M; i++) {
        if (lane == unsigned(i) && i < int(m)) {
            const float g = sums[0][i], up = sums[1][i];
            out[size_t(i) * I + j] = up * g / (1.0f + expf(-g));  // the swiglu kernel's expression
        }
    }
}

template <class F>
void dispatch_rows(size_t m, F &&f) {
    if (m <= 1) f(std::integral_constant<int, 1>{});
    else if (m <= 2) f(std::integral_constant<int, 2>{});
    else if (m <= 4) f(std::integral_constant<int, 4>{});
    else f(std::integral_constant<int, 8>{});
}

bool enabled() {
    static const bool on = [] {
        const char *e = std::getenv("LLAISYS_CUDA_GEMV");
        return !(e && std::strcmp(e, "0") == 0);
    }();
    return on;
}

}  // namespace

bool gemv16_serves(llaisysDataType_t act, llaisysDataType_t wdt, size_t m, size_t k, const void *in,
                   const void *weight) {
    return enabled() && act == LLAISYS_DTYPE_F32 && (wdt == LLAISYS_DTYPE_BF16 || wdt == LLAISYS_DTYPE_F16) &&
           m >= 1 && m <= kGemv16MaxRows && k > 0 && k % 8 == 0 && reinterpret_cast<uintptr_t>(in) % 16 == 0 &&
           reinterpret_cast<uintptr_t>(weight) % 16 == 0;
}

void gemv16(float *out, const float *in, const std::byte *weight, const std::byte *bias, llaisysDataType_t wdt,
            size_t m, size_t n, size_t k, cudaStream_t stream) {
    if (n == 0) return;
    const bool split = n < kSplitBelowRows && k >= kSplitMinK;
    const size_t blocks = split ? ceil_div(n, 2) : ceil_div(n, 2 * kWarps);
    LLAISYS_CHECK(blocks <= size_t(INT_MAX), LLAISYS_STATUS_UNSUPPORTED, "gemv16: ", n, " rows exceed the CUDA grid");
    dispatch_float(wdt, [&](auto tag) {
        using TW = decltype(tag);
        if constexpr (!std::is_same_v<TW, float>) {
            dispatch_rows(m, [&](auto mtag) {
                constexpr int M = decltype(mtag)::value;
                const TW *W = reinterpret_cast<const TW *>(weight), *B = reinterpret_cast<const TW *>(bias);
                if (split) {
                    gemv_kernel<TW, M, int(kWarps)><<<unsigned(blocks), kWarps * 32, 0, stream>>>(out, in, W, B, m, n, k);
                } else {
                    gemv_kernel<TW, M, 1><<<unsigned(blocks), kWarps * 32, 0, stream>>>(out, in, W, B, m, n, k);
                }
            });
        }
    });
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

void gemv16_swiglu(float *out, const float *in, const std::byte *weight, llaisysDataType_t wdt, size_t m, size_t I,
                   size_t k, cudaStream_t stream) {
    if (I == 0) return;
    const size_t blocks = ceil_div(I, kWarps);
    LLAISYS_CHECK(blocks <= size_t(INT_MAX), LLAISYS_STATUS_UNSUPPORTED, "gemv16: ", I, " rows exceed the CUDA grid");
    dispatch_float(wdt, [&](auto tag) {
        using TW = decltype(tag);
        if constexpr (!std::is_same_v<TW, float>) {
            dispatch_rows(m, [&](auto mtag) {
                swiglu_kernel<TW, decltype(mtag)::value><<<unsigned(blocks), kWarps * 32, 0, stream>>>(
                    out, in, reinterpret_cast<const TW *>(weight), m, I, k);
            });
        }
    });
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace llaisys::ops::nvidia
