// Linear over GGUF blocks on the GPU (quant_linear_nvidia.hpp): a dequantize-in-register GEMV
// for decode, dequantized 16-bit panels through cuBLAS for prefill. In cuBLAS's column-major
// terms a panel P [rows_p, k] (row-major) is P^T [k, rows_p] (ld k), so its output columns
//   out^T[row0 .. row0 + rows_p, :] = op_T(P^T) x in^T  ->  GemmEx(T, N, rows_p, m, k, ldc = n)
// with C = out + row0 (see linear_nvidia.cu).
#include "quant_linear_nvidia.hpp"

#include "../../../device/nvidia/cuda_check.hpp"
#include "../../../device/nvidia/cuda_kernel_utils.cuh"
#include "../../../quant/blocks.hpp"
#include "../../../quant/dequant.hpp"
#include "../../../quant/nvidia/dequant_nvidia.hpp"
#include "gemm_common.hpp"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <type_traits>
#include <vector>

namespace llaisys::ops::nvidia {
namespace {

using namespace llaisys::device::nvidia;
using quant::BlockQ4_0;
using quant::BlockQ4_K;
using quant::BlockQ5_0;
using quant::BlockQ5_K;
using quant::BlockQ6_K;
using quant::BlockQ8_0;

constexpr unsigned kThreads = 256;        // elementwise kernels
constexpr size_t kPanelBytes = 64 << 20;  // prefill: dequantized weight panel in scratch

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
// read 16 consecutive quant bytes in every format and share one scale, and FMAs them into the
// f32 sums of all m activation rows; a shuffle sum ends the row.
//
// The weights are formed with few instructions: four quant bytes at a time are masked into
// place, and each byte becomes a float through the exponent of 2^23 (0x4B0000qq is 2^23 + qq,
// exactly, so one subtraction gives the integer: no int-to-float conversion, which runs at a
// quarter of the FMA rate). Formats with one scale per unit (Q4_0, Q5_0, Q8_0, Q6_K) sum
// q x and scale the sum once; Q4_K and Q5_K form each weight as fmaf(d sc, q, -dmin m), one
// rounding. So the product is W x in f32 with a different summation order and rounding from
// llaisysDequantize's weights, inside the same bound. (The first versions dequantized bit for
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

template <int MR>
__device__ __forceinline__ void unit_dot(const BlockQ5_0 &b, int u, const float *x, size_t k, int m, bool vec,
                                         float *acc) {
    const uint32_t qh = ld4(b.qh) >> (16 * u);  // bit t: the fifth bit of element 16 u + t
    uint32_t q[4];
#pragma unroll
    for (int w = 0; w < 4; w++) {
        const uint32_t h = (qh >> (4 * w)) & 0xFu;  // fifth bits of bytes 4w .. 4w + 3
        const uint32_t hb = (h & 1u) | (h & 2u) << 7 | (h & 4u) << 14 | (h & 8u) << 21;
        q[w] = ((ld4(b.qs + 4 * w) >> (4 * u)) & 0x0F0F0F0Fu) | hb << 4;
    }
    scaled_unit<MR>(q, 16.0f, to_float(b.d), x, k, m, vec, acc);
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
    float v[kUnit];
    unit_values(q, 0.0f, v);
#pragma unroll
    for (int t = 0; t < kUnit; t++) v[t] = fmaf(dl, v[t], -ml);
    unit_fma<MR, false>(v, 1.0f, x, k, m, vec, acc);
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

// The end of a GEMV row: the lanes' sums added across the warp, then (WPR > 1) across the
// row's warps through part [kGemvWarps][MR], and written with the bias by one lane. Every
// warp of the block calls it when WPR > 1 (it holds a block barrier).
template <int MR, int WPR>
__device__ __forceinline__ void finish_row(float (&acc)[MR], float (*part)[MR], unsigned lane, unsigned warp,
                                           bool live, size_t row, float *out, size_t ldo, int m, const void *bias,
                                           int bias_dt) {
#pragma unroll
    for (int i = 0; i < MR; i++) acc[i] = warp_sum(acc[i]);
    if (WPR > 1) {
        if (lane == 0) {
#pragma unroll
            for (int i = 0; i < MR; i++) part[warp][i] = acc[i];
        }
        __syncthreads();
        if (warp % WPR != 0) return;
#pragma unroll
        for (int i = 0; i < MR; i++) {
            acc[i] = part[warp][i];
#pragma unroll
            for (int t = 1; t < WPR; t++) acc[i] += part[warp + t][i];
        }
    }
    if (lane == 0 && live) {
        const float b = bias ? bias_at(bias, bias_dt, row) : 0.0f;
#pragma unroll
        for (int i = 0; i < MR; i++) {
            if (i < m) out[size_t(i) * ldo + row] = acc[i] + b;
        }
    }
}

template <class B, int MR, int WPR>
__global__ void __launch_bounds__(kGemvThreads)
    gemv_kernel(float *out, size_t ldo, const float *x, size_t k, int m, SegGroup<B> g, size_t nb,
                const void *bias, int bias_dt, bool x_vec) {
    static_assert(kGemvWarps % WPR == 0, "a block holds whole rows");
    __shared__ uint4 buf[kGemvWarps][kWarpChunk / 16 + 2];
    __shared__ float part[WPR > 1 ? kGemvWarps : 1][MR];
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5, sub = warp % WPR;
    const size_t row = size_t(blockIdx.x) * (kGemvWarps / WPR) + warp / WPR;
    const bool live = row < g.rows;
    if (WPR == 1 && !live) return;  // the whole warp; nothing below waits for the block
    float acc[MR];
#pragma unroll
    for (int i = 0; i < MR; i++) acc[i] = 0.0f;
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
                unit_dot<MR>(blk, int(u % kUnits<B>), x + (b0 * kUnits<B> + u) * kUnit, k, m, x_vec, acc);
            }
        }
    }
    finish_row<MR, WPR>(acc, part, lane, warp, live, row, out, ldo, m, bias, bias_dt);
}

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

// ---------------------------------------------------------------------------------------
// launch helpers

void add_bias(std::byte *out, llaisysDataType_t act, const float *acc, const std::byte *bias,
              llaisysDataType_t bias_dt, size_t m, size_t n, cudaStream_t stream) {
    dispatch_float(act, [&](auto otag) {
        using TO = decltype(otag);
        bias_kernel<TO><<<grid_for(m * n, kThreads), kThreads, 0, stream>>>(reinterpret_cast<TO *>(out), acc, bias,
                                                                          int(bias_dt), m, n);
    });
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

// The activations quantized for the int8 kernels: q [m, k] int8, d [m, k / 32] f32; q null
// where none of the call's formats has an int8 kernel (or LLAISYS_GEMV_INT8=0).
struct QuantX {
    const int8_t *q = nullptr;
    const float *d = nullptr;
};

bool int8_format(llaisysDataType_t dt) {
    return dt == LLAISYS_DTYPE_Q8_0 || dt == LLAISYS_DTYPE_Q4_K || dt == LLAISYS_DTYPE_Q6_K;
}

// Whether the int8 kernels run: by default; LLAISYS_GEMV_INT8=0 keeps the float path (for
// measurements and for its tests).
bool int8_enabled() {
    static const bool on = [] {
        const char *e = std::getenv("LLAISYS_GEMV_INT8");
        return !(e && e[0] == '0');
    }();
    return on;
}

// Warps a row takes: 4 while one warp a row would not fill the GPU once (and every warp
// gets a block of the row), else 1. LLAISYS_GEMV_SPLIT=1|2|4 fixes it (for measurements).
int warps_per_row(size_t rows, size_t nb, int device_id) {
    static const int forced = [] {
        const char *e = std::getenv("LLAISYS_GEMV_SPLIT");
        const int v = e ? std::atoi(e) : 0;
        return v == 1 || v == 2 || v == 4 ? v : 0;
    }();
    static std::atomic<int> sms[64];  // SMs per device, read once (any thread may race to fill one)
    int sm = device_id >= 0 && device_id < 64 ? sms[device_id].load(std::memory_order_relaxed) : 0;
    if (sm == 0) {
        LLAISYS_CUDA_CHECK(cudaDeviceGetAttribute(&sm, cudaDevAttrMultiProcessorCount, device_id));
        if (device_id >= 0 && device_id < 64) sms[device_id].store(sm, std::memory_order_relaxed);
    }
    int wpr = forced ? forced : rows < size_t(sm) * 32 ? 4 : 1;
    while (wpr > 1 && nb < size_t(wpr)) wpr /= 2;
    return wpr;
}

template <class B, int MR, int WPR>
void launch_gemv(float *out, size_t ldo, const float *x, size_t k, int m, const SegGroup<B> &g, size_t nb,
                 const void *bias, llaisysDataType_t bias_dt, cudaStream_t stream) {
    const bool x_vec = reinterpret_cast<uintptr_t>(x) % 16 == 0 && k % 4 == 0;  // float4 activation loads
    const size_t rows = g.rows;
    gemv_kernel<B, MR, WPR><<<unsigned(ceil_div(rows, kGemvWarps / WPR)), kGemvThreads, 0, stream>>>(
        out, ldo, x, k, m, g, nb, bias, int(bias_dt), x_vec);
}

template <class B, int MR, int WPR>
void launch_gemv_int8(float *out, size_t ldo, const QuantX &qx, size_t k, int m, const SegGroup<B> &g, size_t nb,
                      const void *bias, llaisysDataType_t bias_dt, cudaStream_t stream) {
    gemv_int8_kernel<B, MR, WPR><<<unsigned(ceil_div(size_t(g.rows), kGemvWarps / WPR)), kGemvThreads, 0, stream>>>(
        out, ldo, qx.q, qx.d, k, m, g, nb, bias, int(bias_dt));
}

// The int8 kernel where the format has one and the activations were quantized (qx.q set),
// else the float one.
template <class B, int MR>
void launch_gemv(float *out, size_t ldo, const float *x, const QuantX &qx, size_t k, int m, const SegGroup<B> &g,
                 size_t nb, const void *bias, llaisysDataType_t bias_dt, int wpr, cudaStream_t stream) {
    if constexpr (kQUnits<B> > 0) {
        if (qx.q) {
            if (wpr == 4) launch_gemv_int8<B, MR, 4>(out, ldo, qx, k, m, g, nb, bias, bias_dt, stream);
            else if (wpr == 2) launch_gemv_int8<B, MR, 2>(out, ldo, qx, k, m, g, nb, bias, bias_dt, stream);
            else launch_gemv_int8<B, MR, 1>(out, ldo, qx, k, m, g, nb, bias, bias_dt, stream);
            return;
        }
    }
    if (wpr == 4) launch_gemv<B, MR, 4>(out, ldo, x, k, m, g, nb, bias, bias_dt, stream);
    else if (wpr == 2) launch_gemv<B, MR, 2>(out, ldo, x, k, m, g, nb, bias, bias_dt, stream);
    else launch_gemv<B, MR, 1>(out, ldo, x, k, m, g, nb, bias, bias_dt, stream);
}

// The GEMV over every segment, activation rows in chunks of at most kQuantGemvRows: one
// launch for each run of consecutive segments of one format (at most kMaxGroupSegs).
// out [m, n] f32, x [m, k] f32.
void gemv(float *out, const float *x, QuantX qx, const cpu::QuantRows *segs, size_t n_segs, size_t n, size_t k,
          const std::byte *bias, llaisysDataType_t bias_dt, size_t m, int device_id, cudaStream_t stream) {
    for (size_t s0 = 0; s0 < n_segs;) {
        size_t s1 = s0 + 1;  // the group: segments [s0, s1)
        while (s1 < n_segs && s1 - s0 < size_t(kMaxGroupSegs) && segs[s1].dt == segs[s0].dt) s1++;
        const size_t row0 = segs[s0].row0, rows = segs[s1 - 1].row0 + segs[s1 - 1].rows - row0;
        const size_t nb = k / quant_block_size(segs[s0].dt);
        if (rows > 0) {
            const int wpr = warps_per_row(rows, nb, device_id);
            quant::dispatch_quant(segs[s0].dt, [&](auto tag) {
                using B = decltype(tag);
                SegGroup<B> g{};
                g.n = int(s1 - s0);
                for (size_t s = s0; s < s1; s++) {
                    g.w[s - s0] = reinterpret_cast<const B *>(segs[s].data);
                    g.row0[s - s0] = unsigned(segs[s].row0 - row0);
                }
                g.rows = unsigned(rows);
                QuantX gx = qx;  // the int8 kernels' loads need 16-byte (Q4_K) or 2-byte aligned blocks
                for (size_t s = s0; s < s1; s++) {
                    if (reinterpret_cast<uintptr_t>(segs[s].data) % (std::is_same_v<B, BlockQ4_K> ? 16 : 2) != 0) {
                        gx = QuantX{};
                    }
                }
                for (size_t i0 = 0; i0 < m; i0 += kQuantGemvRows) {
                    const int mc = int(std::min(kQuantGemvRows, m - i0));
                    float *o = out + i0 * n + row0;
                    const float *xc = x + i0 * k;
                    const QuantX xi = gx.q ? QuantX{gx.q + i0 * k, gx.d + i0 * k / kXBlock} : QuantX{};
                    const void *b = bias ? bias + row0 * dtype_size(bias_dt) : nullptr;
                    if (mc <= 1) launch_gemv<B, 1>(o, n, xc, xi, k, mc, g, nb, b, bias_dt, wpr, stream);
                    else if (mc <= 2) launch_gemv<B, 2>(o, n, xc, xi, k, mc, g, nb, b, bias_dt, wpr, stream);
                    else if (mc <= 4) launch_gemv<B, 4>(o, n, xc, xi, k, mc, g, nb, b, bias_dt, wpr, stream);
                    else launch_gemv<B, 8>(o, n, xc, xi, k, mc, g, nb, b, bias_dt, wpr, stream);
                    LLAISYS_CUDA_CHECK(cudaGetLastError());
                }
            });
        }
        s0 = s1;
    }
}

cudaDataType_t cuda_type(llaisysDataType_t dt) { return dt == LLAISYS_DTYPE_F16 ? CUDA_R_16F : CUDA_R_16BF; }

void check_segments(const cpu::QuantRows *segs, size_t n_segs, size_t n, size_t k) {
    size_t next = 0;
    for (size_t s = 0; s < n_segs; s++) {
        const cpu::QuantRows &seg = segs[s];
        LLAISYS_CHECK(seg.row0 == next, LLAISYS_STATUS_SHAPE_MISMATCH, "quantized linear: segment ", s,
                      " starts at row ", seg.row0, ", expected ", next, " (segments must tile the rows in order)");
        LLAISYS_CHECK(quant::row_bytes(seg.dt, k) == seg.row_bytes, LLAISYS_STATUS_SHAPE_MISMATCH,
                      "quantized linear: segment ", s, " has ", seg.row_bytes, "-byte rows, but k = ", k, " of ",
                      dtype_name(seg.dt), " needs ", quant::row_bytes(seg.dt, k));
        LLAISYS_CHECK(seg.rows == 0 || seg.data != nullptr, LLAISYS_STATUS_INVALID_ARGUMENT,
                      "quantized linear: segment ", s, " has no data");
        next += seg.rows;
    }
    LLAISYS_CHECK(next == n, LLAISYS_STATUS_SHAPE_MISMATCH, "quantized linear: the segments cover ", next,
                  " rows of a weight with n = ", n);
}

}  // namespace

void linear_quant(std::byte *out, const std::byte *in, llaisysDataType_t act, const cpu::QuantRows *segs,
                  size_t n_segs, size_t n, size_t k, const std::byte *bias, llaisysDataType_t bias_dt, size_t m,
                  int device_id, cudaStream_t stream) {
    check_segments(segs, n_segs, n, k);
    if (m == 0 || n == 0) return;
    dispatch_float(act, [](auto) {});  // validates act
    if (bias) dispatch_float(bias_dt, [](auto) {});
    LLAISYS_CHECK(m <= size_t(INT_MAX) && n <= size_t(INT_MAX) && k <= size_t(INT_MAX), LLAISYS_STATUS_UNSUPPORTED,
                  "linear: [", m, ", ", k, "] x [", n, ", ", k, "]^T exceeds the kernels' 32-bit sizes");
    DeviceState &st = device_state(device_id);
    const bool f32 = act == LLAISYS_DTYPE_F32;

    if (m <= kQuantGemvRows || k == 0) {
        // f32 activations and out in place; 16-bit ones widened, the product in f32 scratch
        bool int8 = false;  // activations quantized once for the int8 kernels
        for (size_t s = 0; s < n_segs; s++) int8 = int8 || (segs[s].rows > 0 && int8_format(segs[s].dt));
        int8 = int8 && int8_enabled() && k > 0 && k % kXBlock == 0;
        const size_t x_bytes = f32 ? 0 : align_up(m * k * sizeof(float));
        const size_t acc_bytes = f32 ? 0 : align_up(m * n * sizeof(float));
        const size_t q_bytes = int8 ? align_up(m * k) : 0, d_bytes = int8 ? align_up(m * k / kXBlock * 4) : 0;
        const size_t total = x_bytes + acc_bytes + q_bytes + d_bytes;
        std::byte *buf = total ? scratch(st, device_id, total) : nullptr;
        const float *x = reinterpret_cast<const float *>(in);
        float *acc = reinterpret_cast<float *>(out);
        if (!f32) {
            convert_dtype(buf, LLAISYS_DTYPE_F32, in, act, m * k, stream);
            x = reinterpret_cast<const float *>(buf);
            acc = reinterpret_cast<float *>(buf + x_bytes);
        }
        QuantX qx;
        if (int8) {
            int8_t *q = reinterpret_cast<int8_t *>(buf + x_bytes + acc_bytes);
            float *d = reinterpret_cast<float *>(buf + x_bytes + acc_bytes + q_bytes);
            const size_t blocks = m * k / kXBlock;
            quantize_x_kernel<<<unsigned(ceil_div(blocks * 32, kThreads)), kThreads, 0, stream>>>(q, d, x, blocks);
            LLAISYS_CUDA_CHECK(cudaGetLastError());
            qx = QuantX{q, d};
        }
        gemv(acc, x, qx, segs, n_segs, n, k, f32 ? bias : nullptr, bias_dt, m, device_id, stream);
        if (!f32) add_bias(out, act, acc, bias, bias_dt, m, n, stream);
        return;
    }

    const llaisysDataType_t gdt = act == LLAISYS_DTYPE_F16 ? LLAISYS_DTYPE_F16 : LLAISYS_DTYPE_BF16;
    const size_t panel_rows = std::min(n, std::max<size_t>(1, kPanelBytes / (k * 2)));
    const size_t in_bytes = act == gdt ? 0 : align_up(m * k * 2);        // [m, k] gdt
    const size_t acc_bytes = f32 ? 0 : align_up(m * n * sizeof(float));  // [m, n] f32
    const size_t panel_bytes = align_up(panel_rows * k * 2);             // [panel_rows, k] gdt
    std::byte *buf = scratch(st, device_id, in_bytes + acc_bytes + panel_bytes);
    const void *b_ptr = in;
    if (act != gdt) {
        convert_dtype(buf, gdt, in, act, m * k, stream);
        b_ptr = buf;
    }
    float *acc = f32 ? reinterpret_cast<float *>(out) : reinterpret_cast<float *>(buf + in_bytes);
    std::byte *panel = buf + in_bytes + acc_bytes;

    const cublas::Api &api = cublas::api();
    const cublas::Handle h = st.handle;
    cublas::check(api.set_stream(h, stream), "cublasSetStream");
    const float alpha = 1.0f, beta = 0.0f;
    for (size_t s = 0; s < n_segs; s++) {
        const cpu::QuantRows &seg = segs[s];
        for (size_t r = 0; r < seg.rows; r += panel_rows) {
            const size_t rows_p = std::min(panel_rows, seg.rows - r);
            quant::nvidia::dequantize_rows(panel, gdt, seg.data, seg.dt, rows_p, k, nullptr, r, stream);
            cublas::check(api.gemm_ex(h, cublas::kOpT, cublas::kOpN, int(rows_p), int(m), int(k), &alpha, panel,
                                      cuda_type(gdt), int(k), b_ptr, cuda_type(gdt), int(k), &beta,
                                      acc + seg.row0 + r, CUDA_R_32F, int(n), cublas::kCompute32F,
                                      cublas::kGemmDefault),
                          "cublasGemmEx");
        }
    }
    if (bias || !f32) add_bias(out, act, acc, bias, bias_dt, m, n, stream);
}

}  // namespace llaisys::ops::nvidia
