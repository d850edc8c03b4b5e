// The float GEMV of quant_linear_nvidia.cu (decode over GGUF blocks, dequantized in registers),
// and the bias helper its kernels share; included there only (everything in an anonymous
// namespace, as the .cu had it).
#pragma once

#include "../../../device/nvidia/cuda_kernel_utils.cuh"
#include "../../../quant/blocks.hpp"
#include "../../../quant/dequant.hpp"
#include "../../../quant/nvidia/dequant_block.cuh"
#include "gemm_common.hpp"

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace llaisys::ops::nvidia {
namespace {

using namespace llaisys::device::nvidia;
using quant::BlockQ2_K;
using quant::BlockQ3_K;
using quant::BlockIQ4_XS;
using quant::BlockQ4_0;
using quant::BlockQ4_1;
using quant::BlockQ4_K;
using quant::BlockQ5_0;
using quant::BlockQ5_1;
using quant::BlockQ5_K;
using quant::BlockQ6_K;
using quant::BlockQ8_0;

// ---------------------------------------------------------------------------------------
// kernels

__device__ __forceinline__ float bias_at(const void *bias, int dt, size_t j) {
    switch (dt) {
    case LLAISYS_DTYPE_F16: return to_float(static_cast<const fp16_t *>(bias)[j]);
    case LLAISYS_DTYPE_BF16: return to_float(static_cast<const bf16_t *>(bias)[j]);
    default: return static_cast<const float *>(bias)[j];
    }
}

// out[i, row] (i < m <= MR) = sum_k x[i, k] * W[row, k] (+ bias[row]): one warp per weight
// row, kGemvWarps rows a block, no block barrier. A warp stages its row's bytes chunk by chunk
// (whole blocks, at most kWarpChunk bytes) into its own shared memory with 16-byte loads, all
// in flight at once; then each lane takes units of 16 elements (lane, lane + 32, ...), which
// read 16 consecutive quant bytes in every format (the i-quants: two or four grid entries) and
// share one scale, and FMAs them into the f32 sums of all m activation rows; a shuffle sum
// ends the row.
//
// The weights are formed with few instructions: four quant bytes at a time are masked into
// place, and each byte becomes a float through the exponent of 2^23 (0x4B0000qq is 2^23 + qq,
// exactly, so one subtraction gives the integer: no int-to-float conversion, which runs at a
// quarter of the FMA rate). Formats with one scale per unit (Q4_0, Q5_0, Q8_0, Q6_K, the
// i-quants) sum q x and scale the sum once; Q2_K, Q4_K and Q5_K form each weight as
// fmaf(d sc, q, -dmin m), one rounding (Q4_1 and Q5_1 as fmaf(d, q, m)). So the product is W x
// in f32 with a different summation order and rounding from llaisysDequantize's weights,
// inside the same bound. (The first versions dequantized bit for
// bit as llaisysDequantize, at about 12 instructions an element, and walked a row with one
// memory round trip per 256 elements, one after the other: the 1.5B's Q4_K decode ran at 95
// tok/s, against 125 from bf16 weights.)
constexpr unsigned kGemvWarps = 4;
constexpr unsigned kGemvThreads = kGemvWarps * 32;
constexpr size_t kWarpChunk = 2048;
constexpr int kUnit = 16;  // elements of one unit

template <class B>
constexpr size_t kChunkBlocks = kWarpChunk / sizeof(B);
template <class B>
constexpr int kUnits = int(quant::block_elems<B>()) / kUnit;

// Copies bytes [p0, p1) to `buf` + (p0 % 16), threads tid, tid + nt, ... sharing the work:
// 16-byte loads for the aligned middle, single bytes for the ends (which may belong to no
// allocation past the row's own bytes).
__device__ __forceinline__ void stage_bytes(uint4 *buf, const uint8_t *p0, const uint8_t *p1, unsigned tid,
                                            unsigned nt) {
    const uintptr_t a0 = reinterpret_cast<uintptr_t>(p0), a1 = reinterpret_cast<uintptr_t>(p1);
    const uintptr_t base = a0 & ~uintptr_t(15), lo = (a0 + 15) & ~uintptr_t(15), hi = a1 & ~uintptr_t(15);
    uint8_t *sb = reinterpret_cast<uint8_t *>(buf);
    const uintptr_t head_end = lo < a1 ? lo : a1;
    for (uintptr_t a = a0 + tid; a < head_end; a += nt) sb[a - base] = *reinterpret_cast<const uint8_t *>(a);
    if (hi > lo) {
        const uint4 *src = reinterpret_cast<const uint4 *>(lo);
        uint4 *dst = buf + (lo - base) / 16;
        const size_t words = (hi - lo) / 16;
        for (size_t v = tid; v < words; v += nt) dst[v] = src[v];
    }
    for (uintptr_t a = (hi > lo ? hi : lo) + tid; a < a1; a += nt) sb[a - base] = *reinterpret_cast<const uint8_t *>(a);
}

// Four bytes at p (any alignment; the word after p's must be readable: the staging buffers
// have slack), as the little-endian u32.
__device__ __forceinline__ uint32_t ld4(const uint8_t *p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const uint32_t *w = reinterpret_cast<const uint32_t *>(a & ~uintptr_t(3));
    return __funnelshift_r(w[0], w[1], unsigned(a & 3) * 8);
}

// Byte i of q4 (0..255) as the float 2^23 + byte; subtract kMagic (+ an offset) for the integer.
constexpr float kMagic = 8388608.0f;
__device__ __forceinline__ float byte_f(uint32_t q4, int i) {
    return __uint_as_float(__byte_perm(q4, 0x4B000000u, 0x7540u + unsigned(i)));
}

// The 16 quant values of a unit, as floats (q - offset), from 4 words of bytes.
__device__ __forceinline__ void unit_values(const uint32_t (&q)[4], float offset, float (&v)[kUnit]) {
#pragma unroll
    for (int w = 0; w < 4; w++) {
#pragma unroll
        for (int i = 0; i < 4; i++) v[4 * w + i] = byte_f(q[w], i) - (kMagic + offset);
    }
}

// acc[i] += scale * (v . x_i) (ONE_SCALE) or acc[i] += v . x_i (the weights themselves), for
// the m activation rows x_i = x + i k (16 elements; vec: 16-byte aligned).
template <int MR, bool ONE_SCALE>
__device__ __forceinline__ void unit_fma(const float (&v)[kUnit], float scale, const float *x, size_t k, int m,
                                         bool vec, float *acc) {
#pragma unroll
    for (int i = 0; i < MR; i++) {
        if (i < m) {
            const float *xi = x + size_t(i) * k;
            float xs[kUnit];
            if (vec) {
#pragma unroll
                for (int j = 0; j < kUnit / 4; j++) {
                    const float4 t = reinterpret_cast<const float4 *>(xi)[j];
                    xs[4 * j] = t.x, xs[4 * j + 1] = t.y, xs[4 * j + 2] = t.z, xs[4 * j + 3] = t.w;
                }
            } else {
#pragma unroll
                for (int j = 0; j < kUnit; j++) xs[j] = xi[j];
            }
            float s = ONE_SCALE ? 0.0f : acc[i];
#pragma unroll
            for (int j = 0; j < kUnit; j++) s = fmaf(v[j], xs[j], s);
            acc[i] = ONE_SCALE ? fmaf(scale, s, acc[i]) : s;
        }
    }
}

// acc[i] += scale * ((q - offset) . x_i): a unit of the formats with one scale per unit
// (Q4_0, Q5_0, Q8_0, Q6_K).
template <int MR>
__device__ __forceinline__ void scaled_unit(const uint32_t (&q)[4], float offset, float scale, const float *x,
                                            size_t k, int m, bool vec, float *acc) {
    float v[kUnit];
    unit_values(q, offset, v);
    unit_fma<MR, true>(v, scale, x, k, m, vec, acc);
}

template <int MR>
__device__ __forceinline__ void unit_dot(const BlockQ8_0 &b, int u, const float *x, size_t k, int m, bool vec,
                                         float *acc) {
    const uint8_t *qs = reinterpret_cast<const uint8_t *>(b.qs) + kUnit * u;
    uint32_t q[4];
#pragma unroll
    for (int w = 0; w < 4; w++) q[w] = ld4(qs + 4 * w) ^ 0x80808080u;  // int8 + 128
    scaled_unit<MR>(q, 128.0f, to_float(b.d), x, k, m, vec, acc);
}

template <int MR>
__device__ __forceinline__ void unit_dot(const BlockQ4_0 &b, int u, const float *x, size_t k, int m, bool vec,
                                         float *acc) {
    uint32_t q[4];  // elements 16 u + t: the low (u = 0) or high (u = 1) nibbles of qs[t]
#pragma unroll
    for (int w = 0; w < 4; w++) q[w] = (ld4(b.qs + 4 * w) >> (4 * u)) & 0x0F0F0F0Fu;
    scaled_unit<MR>(q, 8.0f, to_float(b.d), x, k, m, vec, acc);
}

// Q5_0 / Q5_1 unit u: elements 16 u + t, the low (u = 0) or high (u = 1) nibbles of qs[t] with
// bit 16 u + t of the little-endian qh as bit 4.
__device__ __forceinline__ void q5_unit(const uint8_t *qs, const uint8_t *qh_bytes, int u, uint32_t (&q)[4]) {
    const uint32_t qh = ld4(qh_bytes) >> (16 * u);  // bit t: the fifth bit of element 16 u + t
#pragma unroll
    for (int w = 0; w < 4; w++) {
        const uint32_t h = (qh >> (4 * w)) & 0xFu;  // fifth bits of bytes 4w .. 4w + 3
        const uint32_t hb = (h & 1u) | (h & 2u) << 7 | (h & 4u) << 14 | (h & 8u) << 21;
        q[w] = ((ld4(qs + 4 * w) >> (4 * u)) & 0x0F0F0F0Fu) | hb << 4;
    }
}

template <int MR>
__device__ __forceinline__ void unit_dot(const BlockQ5_0 &b, int u, const float *x, size_t k, int m, bool vec,
                                         float *acc) {
    uint32_t q[4];
    q5_unit(b.qs, b.qh, u, q);
    scaled_unit<MR>(q, 16.0f, to_float(b.d), x, k, m, vec, acc);
}

// acc[i] += w . x_i for a unit of the formats with a min (Q2_K, Q4_K, Q5_K; Q4_1 and Q5_1 with
// ml = -m): each weight fmaf(d sc, q, -dmin m), one rounding.
template <int MR>
__device__ __forceinline__ void minned_unit(const uint32_t (&q)[4], float dl, float ml, const float *x, size_t k,
                                            int m, bool vec, float *acc) {
    float v[kUnit];
    unit_values(q, 0.0f, v);
#pragma unroll
    for (int t = 0; t < kUnit; t++) v[t] = fmaf(dl, v[t], -ml);
    unit_fma<MR, false>(v, 1.0f, x, k, m, vec, acc);
}

// Q4_1 / Q5_1 unit u: Q4_0's and Q5_0's quants, each weight fmaf(d, q, m) (minned_unit with
// the min negated).
template <int MR>
__device__ __forceinline__ void unit_dot(const BlockQ4_1 &b, int u, const float *x, size_t k, int m, bool vec,
                                         float *acc) {
    uint32_t q[4];
#pragma unroll
    for (int w = 0; w < 4; w++) q[w] = (ld4(b.qs + 4 * w) >> (4 * u)) & 0x0F0F0F0Fu;
    minned_unit<MR>(q, to_float(b.d), -to_float(b.m), x, k, m, vec, acc);
}

template <int MR>
__device__ __forceinline__ void unit_dot(const BlockQ5_1 &b, int u, const float *x, size_t k, int m, bool vec,
                                         float *acc) {
    uint32_t q[4];
    q5_unit(b.qs, b.qh, u, q);
    minned_unit<MR>(q, to_float(b.d), -to_float(b.m), x, k, m, vec, acc);
}

// Q4_K / Q5_K unit u: sub-block j = u / 2, its elements 16 (u % 2) + t; q from the nibbles
// (j even: low, odd: high) of qs[32 (j / 2) + 16 (u % 2) + t], plus bit j of qh[16 (u % 2) + t]
// for Q5_K (qh null for Q4_K).
template <int MR>
__device__ __forceinline__ void unit_dot_k4(fp16_t dh, fp16_t dminh, const uint8_t *scales, const uint8_t *qs,
                                            const uint8_t *qh, int u, const float *x, size_t k, int m, bool vec,
                                            float *acc) {
    const int j = u / 2, half = u % 2;
    uint8_t sc, mn;
    quant::scale_min_k4(scales, j, sc, mn);
    const float dl = to_float(dh) * float(sc), ml = to_float(dminh) * float(mn);
    const uint8_t *q0 = qs + 32 * (j / 2) + kUnit * half;
    uint32_t q[4];
#pragma unroll
    for (int w = 0; w < 4; w++) {
        q[w] = (ld4(q0 + 4 * w) >> (4 * (j & 1))) & 0x0F0F0F0Fu;
        if (qh) q[w] |= ((ld4(qh + kUnit * half + 4 * w) >> j) & 0x01010101u) << 4;
    }
    minned_unit<MR>(q, dl, ml, x, k, m, vec, acc);
}

template <int MR>
__device__ __forceinline__ void unit_dot(const BlockQ4_K &b, int u, const float *x, size_t k, int m, bool vec,
                                         float *acc) {
    unit_dot_k4<MR>(b.d, b.dmin, b.scales, b.qs, nullptr, u, x, k, m, vec, acc);
}

template <int MR>
__device__ __forceinline__ void unit_dot(const BlockQ5_K &b, int u, const float *x, size_t k, int m, bool vec,
                                         float *acc) {
    unit_dot_k4<MR>(b.d, b.dmin, b.scales, b.qs, b.qh, u, x, k, m, vec, acc);
}

// Q2_K unit u = sub-block u, elements 16 u + t: bits 2 ((u % 8) / 2) of qs[32 (u / 8) + 16 (u % 2) + t],
// scale and min the nibbles of scales[u]; weights fmaf(d sc, q, -dmin m) as Q4_K's.
template <int MR>
__device__ __forceinline__ void unit_dot(const BlockQ2_K &b, int u, const float *x, size_t k, int m, bool vec,
                                         float *acc) {
    const uint8_t *q0 = b.qs + 32 * (u / 8) + kUnit * (u % 2);
    const int shift = 2 * ((u % 8) / 2);
    const float dl = to_float(b.d) * float(b.scales[u] & 0x0F), ml = to_float(b.dmin) * float(b.scales[u] >> 4);
    uint32_t q[4];
#pragma unroll
    for (int w = 0; w < 4; w++) q[w] = (ld4(q0 + 4 * w) >> shift) & 0x03030303u;
    minned_unit<MR>(q, dl, ml, x, k, m, vec, acc);
}

// Q3_K unit u: Q2_K's two bits of each element, the third bit u / 2 of hmask[16 (u % 2) + t];
// one scale (q3_k_scale u) for the unit's q - 4.
template <int MR>
__device__ __forceinline__ void unit_dot(const BlockQ3_K &b, int u, const float *x, size_t k, int m, bool vec,
                                         float *acc) {
    const uint8_t *q0 = b.qs + 32 * (u / 8) + kUnit * (u % 2), *hm = b.hmask + kUnit * (u % 2);
    const int shift = 2 * ((u % 8) / 2), bit = u / 2;
    uint32_t q[4];
#pragma unroll
    for (int w = 0; w < 4; w++)
        q[w] = ((ld4(q0 + 4 * w) >> shift) & 0x03030303u) | ((ld4(hm + 4 * w) >> bit) & 0x01010101u) << 2;
    scaled_unit<MR>(q, 4.0f, to_float(b.d) * float(quant::q3_k_scale(b.scales, u)), x, k, m, vec, acc);
}

// IQ4_XS unit u: sub-block j = u / 2, the low (u even) or high nibbles of qs[16 j + t] as table
// values (quant::nvidia::iq4_value), one scale d (ls_j - 32) for the unit.
template <int MR>
__device__ __forceinline__ void unit_dot(const BlockIQ4_XS &b, int u, const float *x, size_t k, int m, bool vec,
                                         float *acc) {
    const uint8_t *q0 = b.qs + kUnit * (u / 2);
    float v[kUnit];
#pragma unroll
    for (int w = 0; w < 4; w++) {
        const uint32_t q4 = ld4(q0 + 4 * w) >> (4 * (u % 2));
#pragma unroll
        for (int i = 0; i < 4; i++) v[4 * w + i] = float(quant::nvidia::iq4_value((q4 >> (8 * i)) & 0x0F));
    }
    unit_fma<MR, true>(v, to_float(b.d) * float(quant::iq4_xs_scale(b, u / 2)), x, k, m, vec, acc);
}

// i-quant unit u: groups 2 u and 2 u + 1 of quant::nvidia::iq_group, one scale D S[u]; each q
// a float through kMagic, its sign flipped in the float's sign bit.
template <int MR, class B, std::enable_if_t<quant::kIsIQuant<B>, int> = 0>
__device__ __forceinline__ void unit_dot(const B &b, int u, const float *x, size_t k, int m, bool vec, float *acc) {
    float v[kUnit];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const quant::nvidia::IqGroup g = quant::nvidia::iq_group(b, 2 * u + h);
        const float off = kMagic + float(g.off);
#pragma unroll
        for (int t = 0; t < 8; t++) {
            const uint32_t sign = (g.signs << (31 - t)) & 0x80000000u;
            v[8 * h + t] = __uint_as_float(__float_as_uint(byte_f(g.mags[t / 4], t % 4) - off) ^ sign);
        }
    }
    unit_fma<MR, true>(v, quant::nvidia::iq_d(b) * float(quant::nvidia::iq_scale(b, u)), x, k, m, vec, acc);
}

// Q6_K unit u = elements 16 u + t, scale scales[u]: half h = u / 8, r0 = 16 (u % 8); low 4 bits
// from ql[64 h + r0 % 64 + t] (low nibble for r0 < 64, else high), high 2 bits from
// qh[32 h + r0 % 32 + t] at bit 2 (r0 / 32).
template <class Load>
__device__ __forceinline__ void q6k_unit(const BlockQ6_K &b, int u, Load load4, uint32_t (&q)[4]) {
    const int h = u / 8, r0 = kUnit * (u % 8);
    const uint8_t *ql = b.ql + 64 * h + r0 % 64;
    const uint8_t *qh = b.qh + 32 * h + r0 % 32;
    const int lo_shift = 4 * (r0 / 64), hi_shift = 2 * (r0 / 32);
#pragma unroll
    for (int w = 0; w < 4; w++) {
        q[w] = ((load4(ql + 4 * w) >> lo_shift) & 0x0F0F0F0Fu) | ((load4(qh + 4 * w) >> hi_shift) & 0x03030303u) << 4;
    }
}

template <int MR>
__device__ __forceinline__ void unit_dot(const BlockQ6_K &b, int u, const float *x, size_t k, int m, bool vec,
                                         float *acc) {
    uint32_t q[4];
    q6k_unit(b, u, [](const uint8_t *p) { return ld4(p); }, q);
    scaled_unit<MR>(q, 32.0f, to_float(b.d) * float(b.scales[u]), x, k, m, vec, acc);
}

// The weight rows of one launch: up to kMaxGroupSegs segments of one format, which tile the
// launch's rows [0, rows) in order (segment s starts at row0[s]; row0[0] = 0). A fused
// weight's parts (q|k|v, gate|up) are separate allocations, one launch for all of them.
constexpr int kMaxGroupSegs = 4;
template <class B>
struct SegGroup {
    const B *w[kMaxGroupSegs];
    unsigned row0[kMaxGroupSegs];
    unsigned rows;
    int n;
};

// WPR warps share a row (split-K: warp s of the row takes blocks [nb s / WPR, nb (s + 1) /
// WPR) and the partial sums meet in shared memory), kGemvWarps / WPR rows a block. Splitting
// serves the projections with fewer rows than the GPU holds warps (q|k|v, o, down on the 1.5B):
// one warp a row left most SMs idle, each warp walking its whole row.
// Row `row`'s blocks in its segment of the group.
template <class B>
__device__ __forceinline__ const B *group_row(const SegGroup<B> &g, size_t row, size_t nb) {
    const B *w0 = g.w[0];
    unsigned r0 = 0;
#pragma unroll
    for (int t = 1; t < kMaxGroupSegs; t++) {  // constant indices: the group stays in parameter space
        if (t < g.n && row >= g.row0[t]) w0 = g.w[t], r0 = g.row0[t];
    }
    return w0 + (row - r0) * nb;
}

// The end of a warp's R GEMV rows row0 .. row0 + R - 1 (those below `rows` are written): the
// lanes' sums added across the warp, then (WPR > 1) across the rows' warps through
// part [kGemvWarps][R][MR], and written with the bias by one lane. Every warp of the block calls
// it when WPR > 1 (it holds a block barrier).
template <int MR, int WPR, int R = 1>
__device__ __forceinline__ void finish_row(float (&acc)[R][MR], float (*part)[R][MR], unsigned lane, unsigned warp,
                                           size_t row0, size_t rows, float *out, size_t ldo, int m,
                                           const void *bias, int bias_dt, bool accumulate = false) {
#pragma unroll
    for (int r = 0; r < R; r++) {
#pragma unroll
        for (int i = 0; i < MR; i++) acc[r][i] = warp_sum(acc[r][i]);
    }
    if (WPR > 1) {
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < R; r++) {
#pragma unroll
                for (int i = 0; i < MR; i++) part[warp][r][i] = acc[r][i];
            }
        }
        __syncthreads();
        if (warp % WPR != 0) return;
#pragma unroll
        for (int r = 0; r < R; r++) {
#pragma unroll
            for (int i = 0; i < MR; i++) {
                acc[r][i] = part[warp][r][i];
#pragma unroll
                for (int t = 1; t < WPR; t++) acc[r][i] += part[warp + t][r][i];
            }
        }
    }
    if (lane != 0) return;
#pragma unroll
    for (int r = 0; r < R; r++) {
        if (row0 + r < rows) {
            const float b = bias ? bias_at(bias, bias_dt, row0 + r) : 0.0f;
#pragma unroll
            for (int i = 0; i < MR; i++) {
                if (i < m) {  // accumulate: what a separate add of the product (bias added) would store
                    float *o = out + size_t(i) * ldo + row0 + r;
                    const float v = acc[r][i] + b;
                    *o = accumulate ? *o + v : v;
                }
            }
        }
    }
}

template <class B, int MR, int WPR>
__global__ void __launch_bounds__(kGemvThreads)
    gemv_kernel(float *out, size_t ldo, const float *x, size_t k, int m, SegGroup<B> g, size_t nb,
                const void *bias, int bias_dt, bool x_vec) {
    static_assert(kGemvWarps % WPR == 0, "a block holds whole rows");
    __shared__ uint4 buf[kGemvWarps][kWarpChunk / 16 + 2];
    __shared__ float part[WPR > 1 ? kGemvWarps : 1][1][MR];
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5, sub = warp % WPR;
    const size_t row = size_t(blockIdx.x) * (kGemvWarps / WPR) + warp / WPR;
    const bool live = row < g.rows;
    if (WPR == 1 && !live) return;  // the whole warp; nothing below waits for the block
    float acc[1][MR];
#pragma unroll
    for (int i = 0; i < MR; i++) acc[0][i] = 0.0f;
    if (live) {
        const B *wr = group_row(g, row, nb);
        const size_t b_end = nb * (sub + 1) / WPR;
        for (size_t b0 = nb * sub / WPR; b0 < b_end; b0 += kChunkBlocks<B>) {
            const size_t cb = min(kChunkBlocks<B>, b_end - b0);
            const uint8_t *p0 = reinterpret_cast<const uint8_t *>(wr + b0);
            __syncwarp();  // every lane is done with the last chunk
            stage_bytes(buf[warp], p0, p0 + cb * sizeof(B), lane, 32);
            __syncwarp();
            const uint8_t *sb = reinterpret_cast<const uint8_t *>(buf[warp]) + (reinterpret_cast<uintptr_t>(p0) & 15);
            for (unsigned u = lane; u < cb * kUnits<B>; u += 32) {
                const B &blk = *reinterpret_cast<const B *>(sb + (u / kUnits<B>)*sizeof(B));
                unit_dot<MR>(blk, int(u % kUnits<B>), x + (b0 * kUnits<B> + u) * kUnit, k, m, x_vec, acc[0]);
            }
        }
    }
    finish_row<MR, WPR>(acc, part, lane, warp, row, g.rows, out, ldo, m, bias, bias_dt);
}

}  // namespace
}  // namespace llaisys::ops::nvidia
