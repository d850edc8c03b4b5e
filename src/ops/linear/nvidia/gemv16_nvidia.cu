// gemv16 (gemv16_nvidia.hpp). A warp computes kRowsPerWarp outputs (the swiglu form: one
// output from its gate and up rows): each lane takes 8 consecutive weights of a row per 16-byte
// load, lanes side by side (a warp reads 512 contiguous bytes of a row at once), and kUnroll
// such loads of every row are issued before the first is used, so 2 KiB to 4 KiB a warp are in
// flight. Weights bypass L1 (read once); the activations, a few KB, are re-read from L1 by every
// warp. Each lane sums its products of all m rows in f32; the warp ends with shuffle sums.
#include "gemv16_nvidia.hpp"

#include "../../../device/nvidia/cuda_check.hpp"
#include "../../../device/nvidia/cuda_kernel_utils.cuh"
#include "../../../device/nvidia/load_stream.cuh"
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
__device__ __forceinline__ float dot8(const uint4 &w, const float (&x)[8], float acc) {
    const float2 w0 = widen2(w.x, TW{}), w1 = widen2(w.y, TW{}), w2 = widen2(w.z, TW{}), w3 = widen2(w.w, TW{});
    acc = fmaf(w0.x, x[0], acc);
    acc = fmaf(w0.y, x[1], acc);
    acc = fmaf(w1.x, x[2], acc);
    acc = fmaf(w1.y, x[3], acc);
    acc = fmaf(w2.x, x[4], acc);
    acc = fmaf(w2.y, x[5], acc);
    acc = fmaf(w3.x, x[6], acc);
    acc = fmaf(w3.y, x[7], acc);
    return acc;
}

// What the kernels do around the product: write it (+ bias); NORM: the activation rows are
// RMS-normalised first, out = ((x * g) . W) / rms(x) with rms = sqrt(mean(x^2) + eps), the
// norm's weight g read beside the activations (each warp walks the whole row, so it sums the
// squares itself: no norm launch, no normalised copy in memory); ACC: out += the product (the
// residual add of the o and down projections).
enum Mode : int { kPlain = 0, kNorm = 1, kAcc = 2 };

// WR weight rows a warp (rows[r]), M activation rows at most (m of them real), columns
// [c_begin, k) (c_begin a multiple of 8): sums[r][i] = in[i] . W[rows[r]] over them (in[i] * g
// when NORM, whose squares of in[i] go to ss[i]), complete in every lane. Rows are `ld` apart.
template <class TW, int M, int WR, bool NORM>
__device__ __forceinline__ void warp_dots(const float *in, const TW *w, const TW *g, const size_t (&rows)[WR], size_t m,
                                          size_t ld, size_t c_begin, size_t k, float (&sums)[WR][M], float (&ss)[M]) {
    const unsigned lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < M; i++) {
        ss[i] = 0.0f;
#pragma unroll
        for (int r = 0; r < WR; r++) sums[r][i] = 0.0f;
    }
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
                float gv[8];
                if constexpr (NORM) {
                    const uint4 graw = __ldg(reinterpret_cast<const uint4 *>(g + c));
                    const float2 g0 = widen2(graw.x, TW{}), g1 = widen2(graw.y, TW{});
                    const float2 g2 = widen2(graw.z, TW{}), g3 = widen2(graw.w, TW{});
                    gv[0] = g0.x, gv[1] = g0.y, gv[2] = g1.x, gv[3] = g1.y;
                    gv[4] = g2.x, gv[5] = g2.y, gv[6] = g3.x, gv[7] = g3.y;
                }
#pragma unroll
                for (int i = 0; i < M; i++) {
                    if (i < int(m)) {
                        const float4 a = __ldg(reinterpret_cast<const float4 *>(in + size_t(i) * ld + c));
                        const float4 b = __ldg(reinterpret_cast<const float4 *>(in + size_t(i) * ld + c) + 1);
                        float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
                        if constexpr (NORM) {
#pragma unroll
                            for (int e = 0; e < 8; e++) {
                                ss[i] = fmaf(xv[e], xv[e], ss[i]);
                                xv[e] *= gv[e];
                            }
                        }
#pragma unroll
                        for (int r = 0; r < WR; r++) sums[r][i] = dot8<TW>(wv[u][r], xv, sums[r][i]);
                    }
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < M; i++) {
        if constexpr (NORM) ss[i] = warp_sum(ss[i]);
#pragma unroll
        for (int r = 0; r < WR; r++) sums[r][i] = warp_sum(sums[r][i]);
    }
}

// 1 / rms of each activation row from its sum of squares over k (the norm kernel's 1/sqrtf).
template <int M>
__device__ __forceinline__ void scale_by_rms(const float (&ss)[M], size_t k, float eps, float *sums) {
#pragma unroll
    for (int i = 0; i < M; i++) sums[i] *= 1.0f / sqrtf(ss[i] / float(k) + eps);
}

// out [m, n] (=, or += with ACC) in @ W^T + bias. KS = 1: a warp serves rows 2w, 2w + 1 alone.
// KS = kWarps (split-K, for few rows of many columns: the 1.5B's down projection has 1,536 rows
// of 8,960, which left 6 warps a multiprocessor and read 1.4 TB/s): the block's warps share its
// two rows, each a contiguous quarter of the columns, and their sums meet in shared memory.
template <class TW, int M, int KS, int MODE>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(float *out, const float *in, const TW *w, const TW *bias,
                                                           const TW *g, float eps, size_t m, size_t n, size_t k) {
    constexpr int WR = 2;
    const unsigned lane = threadIdx.x & 31, warp_in_block = threadIdx.x >> 5;
    const size_t warp = size_t(blockIdx.x) * (kWarps / KS) + warp_in_block / KS, first = warp * WR;
    if (first >= n) return;  // whole blocks only when KS > 1 (every warp of a block shares `first`)
    size_t rows[WR];
#pragma unroll
    for (int r = 0; r < WR; r++) rows[r] = min(first + r, n - 1);  // a past-the-end row re-reads the last
    const size_t part = (ceil_div_dev(k, KS) + 7) / 8 * 8, c_begin = min(k, part * (warp_in_block % KS));
    float sums[WR][M], ss[M];
    warp_dots<TW, M, WR, MODE == kNorm>(in, w, g, rows, m, k, c_begin, min(k, c_begin + part), sums, ss);
    if constexpr (KS > 1) {
        __shared__ float s_sum[KS][WR + 1][M];
        if (lane == 0) {
#pragma unroll
            for (int i = 0; i < M; i++) {
                s_sum[warp_in_block][WR][i] = ss[i];
#pragma unroll
                for (int r = 0; r < WR; r++) s_sum[warp_in_block][r][i] = sums[r][i];
            }
        }
        __syncthreads();
        if (warp_in_block != 0) return;
#pragma unroll
        for (int i = 0; i < M; i++) {
            float t = 0.0f;
#pragma unroll
            for (int q = 0; q < KS; q++) t += s_sum[q][WR][i];
            ss[i] = t;
#pragma unroll
            for (int r = 0; r < WR; r++) {
                t = 0.0f;
#pragma unroll
                for (int q = 0; q < KS; q++) t += s_sum[q][r][i];
                sums[r][i] = t;
            }
        }
    }
    if constexpr (MODE == kNorm) {
#pragma unroll
        for (int r = 0; r < WR; r++) scale_by_rms<M>(ss, k, eps, sums[r]);
    }
#pragma unroll
    for (int r = 0; r < WR; r++) {
#pragma unroll
        for (int i = 0; i < M; i++) {
            if (lane == unsigned(r * M + i) % 32 && i < int(m) && first + r < n) {
                const float v = sums[r][i] + (bias ? to_float(bias[first + r]) : 0.0f);
                float *o = out + size_t(i) * n + first + r;
                *o = MODE == kAcc ? *o + v : v;
            }
        }
    }
}

// out [m, I] = silu(in @ W[j]) * (in @ W[I + j]): a warp serves output column j (NORM: of the
// RMS-normalised rows, as gemv_kernel).
template <class TW, int M, bool NORM>
__global__ void __launch_bounds__(kWarps * 32) swiglu_kernel(float *out, const float *in, const TW *w, const TW *g,
                                                             float eps, size_t m, size_t I, size_t k) {
    const size_t j = size_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
    if (j >= I) return;
    const size_t rows[2] = {j, I + j};
    float sums[2][M], ss[M];
    warp_dots<TW, M, 2, NORM>(in, w, g, rows, m, k, 0, k, sums, ss);
    if constexpr (NORM) {
        scale_by_rms<M>(ss, k, eps, sums[0]);
        scale_by_rms<M>(ss, k, eps, sums[1]);
    }
    const unsigned lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < M; i++) {
        if (lane == unsigned(i) && i < int(m)) {
            const float gate = sums[0][i], up = sums[1][i];
            out[size_t(i) * I + j] = up * gate / (1.0f + expf(-gate));  // the swiglu kernel's expression
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

// f(TW{}, std::integral_constant<int, M>{}) for the 16-bit weight dtype wdt and the row
// template that covers m rows (gemv16_serves admitted only bf16 and f16).
template <class F>
void dispatch_weights_rows(llaisysDataType_t wdt, size_t m, F &&f) {
    dispatch_float(wdt, [&](auto tag) {
        if constexpr (!std::is_same_v<decltype(tag), float>) dispatch_rows(m, [&](auto mtag) { f(tag, mtag); });
    });
}

unsigned grid_of(size_t blocks, size_t rows) {
    LLAISYS_CHECK(blocks <= size_t(INT_MAX), LLAISYS_STATUS_UNSUPPORTED, "gemv16: ", rows, " rows exceed the CUDA grid");
    return unsigned(blocks);
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
                   const void *weight, const void *norm_w) {
    return enabled() && act == LLAISYS_DTYPE_F32 && (wdt == LLAISYS_DTYPE_BF16 || wdt == LLAISYS_DTYPE_F16) &&
           m >= 1 && m <= kGemv16MaxRows && k > 0 && k % 8 == 0 && reinterpret_cast<uintptr_t>(in) % 16 == 0 &&
           reinterpret_cast<uintptr_t>(weight) % 16 == 0 && reinterpret_cast<uintptr_t>(norm_w) % 16 == 0;
}

namespace {

template <int MODE>
void launch_gemv(float *out, const float *in, const std::byte *weight, const std::byte *bias, const std::byte *norm_w,
                 float eps, llaisysDataType_t wdt, size_t m, size_t n, size_t k, cudaStream_t stream) {
    if (n == 0) return;
    const bool split = n < kSplitBelowRows && k >= kSplitMinK;
    const unsigned grid = grid_of(split ? ceil_div(n, 2) : ceil_div(n, 2 * kWarps), n);
    dispatch_weights_rows(wdt, m, [&](auto tag, auto mtag) {
        using TW = decltype(tag);
        constexpr int M = decltype(mtag)::value;
        const TW *W = reinterpret_cast<const TW *>(weight), *B = reinterpret_cast<const TW *>(bias);
        const TW *G = reinterpret_cast<const TW *>(norm_w);
        if (split) {
            gemv_kernel<TW, M, int(kWarps), MODE><<<grid, kWarps * 32, 0, stream>>>(out, in, W, B, G, eps, m, n, k);
        } else {
            gemv_kernel<TW, M, 1, MODE><<<grid, kWarps * 32, 0, stream>>>(out, in, W, B, G, eps, m, n, k);
        }
    });
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void gemv16(float *out, const float *in, const std::byte *weight, const std::byte *bias, llaisysDataType_t wdt,
            size_t m, size_t n, size_t k, cudaStream_t stream) {
    launch_gemv<kPlain>(out, in, weight, bias, nullptr, 0.0f, wdt, m, n, k, stream);
}

void gemv16_norm(float *out, const float *x, const std::byte *norm_w, float eps, const std::byte *weight,
                 const std::byte *bias, llaisysDataType_t wdt, size_t m, size_t n, size_t k, cudaStream_t stream) {
    launch_gemv<kNorm>(out, x, weight, bias, norm_w, eps, wdt, m, n, k, stream);
}

void gemv16_accumulate(float *out, const float *in, const std::byte *weight, const std::byte *bias,
                       llaisysDataType_t wdt, size_t m, size_t n, size_t k, cudaStream_t stream) {
    launch_gemv<kAcc>(out, in, weight, bias, nullptr, 0.0f, wdt, m, n, k, stream);
}

void gemv16_swiglu(float *out, const float *in, const std::byte *weight, llaisysDataType_t wdt, size_t m, size_t I,
                   size_t k, cudaStream_t stream, const std::byte *norm_w, float eps) {
    if (I == 0) return;
    const unsigned grid = grid_of(ceil_div(I, kWarps), I);
    dispatch_weights_rows(wdt, m, [&](auto tag, auto mtag) {
        using TW = decltype(tag);
        constexpr int M = decltype(mtag)::value;
        const TW *W = reinterpret_cast<const TW *>(weight), *G = reinterpret_cast<const TW *>(norm_w);
        if (norm_w) {
            swiglu_kernel<TW, M, true><<<grid, kWarps * 32, 0, stream>>>(out, in, W, G, eps, m, I, k);
        } else {
            swiglu_kernel<TW, M, false><<<grid, kWarps * 32, 0, stream>>>(out, in, W, G, eps, m, I, k);
        }
    });
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace llaisys::ops::nvidia
