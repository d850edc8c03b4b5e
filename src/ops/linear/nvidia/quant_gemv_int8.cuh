// The int8 GEMV of quant_linear_nvidia.cu (__dp4a over quantized activations) and the bias
// kernel; included there only, after quant_gemv_float.cuh (everything in an anonymous namespace).
#pragma once

#include "quant_gemv_float.cuh"

namespace llaisys::ops::nvidia {
namespace {

// ---------------------------------------------------------------------------------------
// The int8 GEMV (Q8_0, Q4_K, Q6_K): llama.cpp's route. The activations are quantized once a
// call to int8 blocks of 32 (scale amax / 127, round to nearest even), and each lane multiplies
// a unit of weight bytes, read from global memory where they are (no staging), with __dp4a:
// four multiply-adds an instruction on the integers, one scale a unit. About a quarter of the
// float path's instructions an element, and every lane's loads are in flight at once. The
// error is the CPU int8 path's: within 0.5 d_x |W| per activation block, d_x <= amax / 127.

constexpr int kXBlock = 32;  // activation elements per int8 scale

// xq [m, k] int8, xd [m, k / 32] f32: one warp a block of 32, one element a lane. A block
// holding a NaN or an infinity gets a NaN scale, so its products are NaN, as the float path's.
__global__ void quantize_x_kernel(int8_t *xq, float *xd, const float *x, size_t blocks) {
    const size_t b = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    if (b >= blocks) return;  // whole warps
    const unsigned lane = threadIdx.x & 31;
    const float v = x[b * kXBlock + lane];
    const float amax = warp_max(fabsf(v));
    const bool bad = __any_sync(0xffffffffu, !isfinite(v));
    const float d = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
    xq[b * kXBlock + lane] = bad ? int8_t(0) : int8_t(__float2int_rn(v * id));
    if (lane == 0) xd[b] = bad ? __int_as_float(0x7fc00000) : d;
}

template <class B>
constexpr size_t kBlockElems = quant::block_elems<B>();
template <class B>
constexpr int kQUnits = 0;  // int8 units a block (0: the format has no int8 kernel)
template <>
constexpr int kQUnits<BlockQ8_0> = 2;  // 16 elements
template <>
constexpr int kQUnits<BlockQ4_K> = 8;  // 16 elements of sub-block 2p and 16 of 2p + 1
template <>
constexpr int kQUnits<BlockQ6_K> = 16;  // 16 elements, one scale

// Four bytes from two 2-byte aligned halves (Q8_0's and Q6_K's blocks are 34 and 210 bytes).
__device__ __forceinline__ int ld4_2(const uint8_t *p) {
    const uint16_t *h = reinterpret_cast<const uint16_t *>(p);
    return int(uint32_t(h[0]) | uint32_t(h[1]) << 16);
}

__device__ __forceinline__ int dot16(const int (&q)[4], const int4 &xv, int c) {
    c = __dp4a(q[0], xv.x, c);
    c = __dp4a(q[1], xv.y, c);
    c = __dp4a(q[2], xv.z, c);
    return __dp4a(q[3], xv.w, c);
}

// acc[i] += dw d_x (q . xq_i) over the 16 elements from e on: a unit of the formats with one
// scale per unit (Q8_0, Q6_K).
template <int MR>
__device__ __forceinline__ void int8_unit(const int (&q)[4], float dw, size_t e, const int8_t *xq, const float *xd,
                                          size_t k, int m, float *acc) {
#pragma unroll
    for (int i = 0; i < MR; i++) {
        if (i < m) {
            const int4 xv = *reinterpret_cast<const int4 *>(xq + size_t(i) * k + e);
            acc[i] = fmaf(dw * xd[(size_t(i) * k + e) / kXBlock], float(dot16(q, xv, 0)), acc[i]);
        }
    }
}

// acc[i] += unit u of block `blk` (at element e0 of the row) . x_i, for i < m.
template <int MR>
__device__ __forceinline__ void qunit(const BlockQ8_0 &b, int u, size_t e0, const int8_t *xq, const float *xd,
                                      size_t k, int m, float *acc) {
    int q[4];
#pragma unroll
    for (int w = 0; w < 4; w++) q[w] = ld4_2(reinterpret_cast<const uint8_t *>(b.qs) + 16 * u + 4 * w);
    const float dw = to_float(b.d);
    int8_unit<MR>(q, dw, e0 + kUnit * u, xq, xd, k, m, acc);
}

template <int MR>
__device__ __forceinline__ void qunit(const BlockQ4_K &b, int u, size_t e0, const int8_t *xq, const float *xd,
                                      size_t k, int m, float *acc) {
    const int p = u / 2, h = u % 2;
    const uint4 qv = *reinterpret_cast<const uint4 *>(b.qs + 32 * p + kUnit * h);
    const int qw[4] = {int(qv.x), int(qv.y), int(qv.z), int(qv.w)};
    int lo[4], hi[4];
#pragma unroll
    for (int w = 0; w < 4; w++) lo[w] = qw[w] & 0x0F0F0F0F, hi[w] = (qw[w] >> 4) & 0x0F0F0F0F;
    uint8_t sc0, m0, sc1, m1;
    quant::scale_min_k4(b.scales, 2 * p, sc0, m0);
    quant::scale_min_k4(b.scales, 2 * p + 1, sc1, m1);
    const float d = to_float(b.d), dmin = to_float(b.dmin);
    const float ds0 = d * float(sc0), dm0 = dmin * float(m0), ds1 = d * float(sc1), dm1 = dmin * float(m1);
    const int ones[4] = {0x01010101, 0x01010101, 0x01010101, 0x01010101};
    const size_t e = e0 + 64 * p + kUnit * h;  // sub-block 2p's elements; 2p + 1's are 32 on
#pragma unroll
    for (int i = 0; i < MR; i++) {
        if (i < m) {
            const int8_t *xr = xq + size_t(i) * k + e;
            const int4 x0 = *reinterpret_cast<const int4 *>(xr), x1 = *reinterpret_cast<const int4 *>(xr + 32);
            const float *dx = xd + (size_t(i) * k + e) / kXBlock;
            const float s0 = ds0 * float(dot16(lo, x0, 0)) - dm0 * float(dot16(ones, x0, 0));
            const float s1 = ds1 * float(dot16(hi, x1, 0)) - dm1 * float(dot16(ones, x1, 0));
            acc[i] = fmaf(dx[0], s0, fmaf(dx[1], s1, acc[i]));
        }
    }
}

template <int MR>
__device__ __forceinline__ void qunit(const BlockQ6_K &b, int u, size_t e0, const int8_t *xq, const float *xd,
                                      size_t k, int m, float *acc) {
    uint32_t v[4];  // the float path's unit values, read through 2-byte loads
    q6k_unit(b, u, [](const uint8_t *p) { return uint32_t(ld4_2(p)); }, v);
    int q[4];
#pragma unroll
    for (int w = 0; w < 4; w++) q[w] = int(__vsub4(v[w], 0x20202020u));  // q - 32 in each byte: -32 .. 31
    const float dw = to_float(b.d) * float(b.scales[u]);
    int8_unit<MR>(q, dw, e0 + kUnit * u, xq, xd, k, m, acc);
}

// The int8 twin of gemv_kernel (same rows, warps and split-K; lanes take units in turn).
template <class B, int MR, int WPR>
__global__ void __launch_bounds__(kGemvThreads)
    gemv_int8_kernel(float *out, size_t ldo, const int8_t *xq, const float *xd, size_t k, int m, SegGroup<B> g,
                     size_t nb, const void *bias, int bias_dt) {
    static_assert(kGemvWarps % WPR == 0, "a block holds whole rows");
    __shared__ float part[WPR > 1 ? kGemvWarps : 1][MR];
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5, sub = warp % WPR;
    const size_t row = size_t(blockIdx.x) * (kGemvWarps / WPR) + warp / WPR;
    const bool live = row < g.rows;
    if (WPR == 1 && !live) return;
    float acc[MR];
#pragma unroll
    for (int i = 0; i < MR; i++) acc[i] = 0.0f;
    if (live) {
        const B *wr = group_row(g, row, nb);
        const size_t u_end = nb * (sub + 1) / WPR * kQUnits<B>;
#pragma unroll 2
        for (size_t u = nb * sub / WPR * kQUnits<B> + lane; u < u_end; u += 32) {
            const size_t blk = u / kQUnits<B>;
            qunit<MR>(wr[blk], int(u % kQUnits<B>), blk * kBlockElems<B>, xq, xd, k, m, acc);
        }
    }
    finish_row<MR, WPR>(acc, part, lane, warp, live, row, out, ldo, m, bias, bias_dt);
}

// out [m, n] = round(acc [m, n] + bias [n]); acc may be out itself (f32), bias may be null.
template <class TO>
__global__ void bias_kernel(TO *out, const float *acc, const void *bias, int bias_dt, size_t m, size_t n) {
    const size_t total = m * n;
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
        out[i] = from_float<TO>(acc[i] + (bias ? bias_at(bias, bias_dt, i % n) : 0.0f));
    }
}

}  // namespace
}  // namespace llaisys::ops::nvidia
