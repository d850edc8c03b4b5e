// Device-side dequantization of the GGUF block formats (../blocks.hpp), eight elements at a
// time: the building block of the CUDA dequantize kernel and of the quantized GEMV (nvcc only).
//
// Bit-identical to the CPU reference (../dequant.cpp) by construction: the f16 scales are
// widened exactly (to_float, as to_f32, NaN payloads kept), and every product, sum and
// difference is rounded on its own (x86_mul, x86_add, x86_sub: round to nearest, never
// contracted into an FMA, which nvcc's default --fmad=true would do and which would change the
// last bit; NaN results as x86 makes them, so NaN and Inf scales give the CPU's bits too), in
// the CPU's order:
//   Q4_0, Q5_0: d * float(q - offset)      Q8_0: float(q) * d      Q4_1, Q5_1: d * float(q) + m
//   Q2_K, Q4_K, Q5_K: (d * sc) * q - (dmin * m)  Q3_K, Q6_K: (d * scale) * float(q - offset)
//   IQ4_XS: (d * float(ls - 32)) * float(T[q])     IQ1_*, IQ2_*, IQ3_*: (D * float(S)) * float(q)
// The NaN handling is a compare and a select per element on data already in registers.
//
// dequant8(block, e0, out) writes elements e0 .. e0 + 7 of the block (e0 a multiple of 8,
// below the block size) to out [8]. Eight consecutive elements always share one scale and
// read eight consecutive quant bytes in every format but the i-quants (one or two grid
// entries, iq_block.cuh), so a warp's 32 lanes cover 256 consecutive elements with coalesced
// reads.
#pragma once

#include "../../device/nvidia/cuda_kernel_utils.cuh"
#include "../blocks.hpp"
#include "../dequant.hpp"
#include "iq_block.cuh"

namespace llaisys::quant::nvidia {

using device::nvidia::to_float;
using device::nvidia::x86_add;
using device::nvidia::x86_mul;
using device::nvidia::x86_sub;

// Groups of eight elements per block of type B (a constant device code may read).
template <class B>
constexpr int kGroupsPerBlock = int(block_elems<B>() / 8);

__device__ __forceinline__ void dequant8(const BlockQ4_0 &b, int e0, float *out) {  // out [8]
    const float d = to_float(b.d);
    const int shift = e0 >= 16 ? 4 : 0;  // elements 16..31 are the high nibbles of qs[0..16)
    const uint8_t *qs = b.qs + (e0 & 15);
#pragma unroll
    for (int t = 0; t < 8; t++) out[t] = x86_mul(d, float(int((qs[t] >> shift) & 0x0F) - 8));
}

// The 8 stored 5-bit values of a Q5_0 / Q5_1 block from element e0: the nibble, and bit e of qh
// (the little-endian u32 of the CPU) as the fifth bit of element e.
__device__ __forceinline__ void q5_quants8(const uint8_t *qs_all, const uint8_t *qh4, int e0, int (&q)[8]) {
    const uint32_t qh = uint32_t(qh4[0]) | uint32_t(qh4[1]) << 8 | uint32_t(qh4[2]) << 16 | uint32_t(qh4[3]) << 24;
    const int shift = e0 >= 16 ? 4 : 0;
    const uint8_t *qs = qs_all + (e0 & 15);
#pragma unroll
    for (int t = 0; t < 8; t++) q[t] = int((qs[t] >> shift) & 0x0F) | int((qh >> (e0 + t)) & 1u) << 4;
}

__device__ __forceinline__ void dequant8(const BlockQ5_0 &b, int e0, float *out) {  // out [8]
    const float d = to_float(b.d);
    int q[8];
    q5_quants8(b.qs, b.qh, e0, q);
#pragma unroll
    for (int t = 0; t < 8; t++) out[t] = x86_mul(d, float(q[t] - 16));
}

// Q4_1 / Q5_1: Q4_0's and Q5_0's quants without the offset, (d * q) + m.
__device__ __forceinline__ void dequant8(const BlockQ4_1 &b, int e0, float *out) {  // out [8]
    const float d = to_float(b.d), m = to_float(b.m);
    const int shift = e0 >= 16 ? 4 : 0;
    const uint8_t *qs = b.qs + (e0 & 15);
#pragma unroll
    for (int t = 0; t < 8; t++) out[t] = x86_add(x86_mul(d, float((qs[t] >> shift) & 0x0F)), m);
}

__device__ __forceinline__ void dequant8(const BlockQ5_1 &b, int e0, float *out) {  // out [8]
    const float d = to_float(b.d), m = to_float(b.m);
    int q[8];
    q5_quants8(b.qs, b.qh, e0, q);
#pragma unroll
    for (int t = 0; t < 8; t++) out[t] = x86_add(x86_mul(d, float(q[t])), m);
}

__device__ __forceinline__ void dequant8(const BlockQ8_0 &b, int e0, float *out) {  // out [8]
    const float d = to_float(b.d);
#pragma unroll
    for (int t = 0; t < 8; t++) out[t] = x86_mul(float(b.qs[e0 + t]), d);
}

// Q2_K element e: bits 2 ((e % 128) / 32) of qs[32 (e / 128) + e % 32]; sub-block j = e / 16
// (one for all eight) has scale and min the low and high nibbles of scales[j].
__device__ __forceinline__ void dequant8(const BlockQ2_K &b, int e0, float *out) {  // out [8]
    const uint8_t *q = b.qs + 32 * (e0 / 128) + e0 % 32;
    const int shift = 2 * ((e0 % 128) / 32), j = e0 / 16;
    const float dl = x86_mul(to_float(b.d), float(b.scales[j] & 0x0F)),
                ml = x86_mul(to_float(b.dmin), float(b.scales[j] >> 4));
#pragma unroll
    for (int t = 0; t < 8; t++) out[t] = x86_sub(x86_mul(dl, float((q[t] >> shift) & 3)), ml);
}

// Q3_K element e: Q2_K's two bits, the third bit e / 32 of hmask[e % 32]; (d * sc[j]) * (q - 4)
// with j = e / 16 (one for all eight).
__device__ __forceinline__ void dequant8(const BlockQ3_K &b, int e0, float *out) {  // out [8]
    const uint8_t *q = b.qs + 32 * (e0 / 128) + e0 % 32, *hm = b.hmask + e0 % 32;
    const int shift = 2 * ((e0 % 128) / 32), bit = e0 / 32;
    const float dl = x86_mul(to_float(b.d), float(q3_k_scale(b.scales, e0 / 16)));
#pragma unroll
    for (int t = 0; t < 8; t++) out[t] = x86_mul(dl, float((((q[t] >> shift) & 3) | ((hm[t] >> bit) & 1) << 2) - 4));
}

// kIq4Values[q] (q < 16) in device code: the table's 16 bytes as four words, two byte permutes.
__device__ __forceinline__ int iq4_value(unsigned q) {
    constexpr uint32_t t0 = 0xBFAD9881u, t1 = 0xF6EADDCFu, t2 = 0x26190D01u, t3 = 0x71594535u;  // bytes 0..15
    const uint32_t lo = __byte_perm(t0, t1, q & 7), hi = __byte_perm(t2, t3, q & 7);
    return int(int8_t((q & 8 ? hi : lo) & 0xFF));
}

// IQ4_XS element e: sub-block j = e / 32, the low (e % 32 < 16) or high nibble of
// qs[16 j + e % 16]; (d * float(ls_j - 32)) * float(T[q]).
__device__ __forceinline__ void dequant8(const BlockIQ4_XS &b, int e0, float *out) {  // out [8]
    const int j = e0 / 32, shift = 4 * ((e0 % 32) / 16);
    const uint8_t *q = b.qs + 16 * j + e0 % 16;
    const float dl = x86_mul(to_float(b.d), float(iq4_xs_scale(b, j)));
#pragma unroll
    for (int t = 0; t < 8; t++) out[t] = x86_mul(dl, float(iq4_value((q[t] >> shift) & 0x0F)));
}

// The i-quants: q of the eight elements from their group (iq_block.cuh), the one scale
// D * float(S[e0 / 16]) rounded first, as the CPU's dequantize_iq.
template <class B>
__device__ __forceinline__ void dequant8_iq(const B &b, int e0, float *out) {  // out [8]
    const IqGroup g = iq_group(b, e0 / 8);
    const float dl = x86_mul(iq_d(b), float(iq_scale(b, e0 / 16)));
#pragma unroll
    for (int t = 0; t < 8; t++) out[t] = x86_mul(dl, float(iq_q(g, t)));
}

__device__ __forceinline__ void dequant8(const BlockIQ2_XXS &b, int e0, float *out) { dequant8_iq(b, e0, out); }
__device__ __forceinline__ void dequant8(const BlockIQ2_XS &b, int e0, float *out) { dequant8_iq(b, e0, out); }
__device__ __forceinline__ void dequant8(const BlockIQ2_S &b, int e0, float *out) { dequant8_iq(b, e0, out); }
__device__ __forceinline__ void dequant8(const BlockIQ3_XXS &b, int e0, float *out) { dequant8_iq(b, e0, out); }
__device__ __forceinline__ void dequant8(const BlockIQ3_S &b, int e0, float *out) { dequant8_iq(b, e0, out); }
__device__ __forceinline__ void dequant8(const BlockIQ1_S &b, int e0, float *out) { dequant8_iq(b, e0, out); }
__device__ __forceinline__ void dequant8(const BlockIQ1_M &b, int e0, float *out) { dequant8_iq(b, e0, out); }

// Q4_K / Q5_K sub-block j = e0 / 32: (d * sc[j]) * q - (dmin * m[j]); q the low (j even) or
// high (j odd) nibbles of qs[32 (j / 2) + i], plus bit j of qh[i] for Q5_K (qh may be null).
__device__ __forceinline__ void dequant8_k4(fp16_t dh, fp16_t dminh, const uint8_t *scales, const uint8_t *qs,
                                            const uint8_t *qh, int e0, float *out) {  // out [8]
    const int j = e0 / 32, i0 = e0 % 32;
    uint8_t sc, m;
    scale_min_k4(scales, j, sc, m);
    const float dl = x86_mul(to_float(dh), float(sc)), ml = x86_mul(to_float(dminh), float(m));
    const uint8_t *q = qs + 32 * (j / 2) + i0;
    const int shift = (j & 1) * 4;
#pragma unroll
    for (int t = 0; t < 8; t++) {
        int v = (q[t] >> shift) & 0x0F;
        if (qh) v |= ((qh[i0 + t] >> j) & 1) << 4;
        out[t] = x86_sub(x86_mul(dl, float(v)), ml);
    }
}

__device__ __forceinline__ void dequant8(const BlockQ4_K &b, int e0, float *out) {
    dequant8_k4(b.d, b.dmin, b.scales, b.qs, nullptr, e0, out);
}

__device__ __forceinline__ void dequant8(const BlockQ5_K &b, int e0, float *out) {
    dequant8_k4(b.d, b.dmin, b.scales, b.qs, b.qh, e0, out);
}

// Q6_K element e: half h = e / 128, r = e % 128; low 4 bits from ql[64 h + r % 64] (low
// nibble for r < 64, else high), high 2 bits from qh[32 h + r % 32] at bit 2 (r / 32); scale
// scales[e / 16] (one for all eight).
__device__ __forceinline__ void dequant8(const BlockQ6_K &b, int e0, float *out) {  // out [8]
    const int h = e0 / 128, r0 = e0 % 128;
    const uint8_t *ql = b.ql + 64 * h + r0 % 64;
    const uint8_t *qh = b.qh + 32 * h + r0 % 32;
    const int lo_shift = 4 * (r0 / 64), hi_shift = 2 * (r0 / 32);
    const float dl = x86_mul(to_float(b.d), float(b.scales[e0 / 16]));
#pragma unroll
    for (int t = 0; t < 8; t++) {
        const int lo = (ql[t] >> lo_shift) & 0x0F;
        const int hi = (qh[t] >> hi_shift) & 0x03;
        out[t] = x86_mul(dl, float((lo | hi << 4) - 32));
    }
}

}  // namespace llaisys::quant::nvidia
