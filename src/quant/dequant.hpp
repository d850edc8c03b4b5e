// Dequantization of the GGUF block formats (blocks.hpp): scalar reference code, bit-identical
// to gguf-py's gguf.quants.dequantize. Every value is computed in f32 with gguf-py's order of
// operations (which decides the last bit):
//   Q4_0, Q5_0: d * float(q - offset)      Q8_0: float(q) * d
//   Q4_1, Q5_1: d * float(q) + m           (two roundings: never fused into an FMA)
//   Q2_K, Q4_K, Q5_K: (d * sc) * q - (dmin * m)  (two roundings: never fused into an FMA)
//   Q3_K:       (d * scale) * float(q - 4)    Q6_K: (d * scale) * float(q - 32)
//   IQ4_XS:     (d * float(ls - 32)) * float(kIq4Values[q])
//   IQ1_*, IQ2_*, IQ3_*: (D * float(S)) * float(q) (iq.hpp: gguf-py's scale, a power of two apart)
// NaN or Inf in an f16 scale propagates as in gguf-py. The per-block functions are the
// building blocks for the quantized kernels (src/ops/linear); the row functions validate.
#pragma once

#include "blocks.hpp"

#include <cstddef>
#include <cstring>

namespace llaisys::quant {

// One block into its kBlock32 or kBlockK values: out [block size] f32.
void dequantize_block(const BlockQ4_0 &b, float *out);
void dequantize_block(const BlockQ4_1 &b, float *out);
void dequantize_block(const BlockQ5_0 &b, float *out);
void dequantize_block(const BlockQ5_1 &b, float *out);
void dequantize_block(const BlockQ8_0 &b, float *out);
void dequantize_block(const BlockQ2_K &b, float *out);
void dequantize_block(const BlockQ3_K &b, float *out);
void dequantize_block(const BlockQ4_K &b, float *out);
void dequantize_block(const BlockQ5_K &b, float *out);
void dequantize_block(const BlockQ6_K &b, float *out);
void dequantize_block(const BlockIQ4_XS &b, float *out);
void dequantize_block(const BlockIQ2_XXS &b, float *out);
void dequantize_block(const BlockIQ2_XS &b, float *out);
void dequantize_block(const BlockIQ2_S &b, float *out);
void dequantize_block(const BlockIQ3_XXS &b, float *out);
void dequantize_block(const BlockIQ3_S &b, float *out);
void dequantize_block(const BlockIQ1_S &b, float *out);
void dequantize_block(const BlockIQ1_M &b, float *out);

// Host code, and device code too where nvcc compiles this header (the GPU dequantizer and GEMV).
#ifdef __CUDACC__
#define LLAISYS_HOST_DEVICE __host__ __device__
#else
#define LLAISYS_HOST_DEVICE
#endif

// Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7) from the packed scales[12].
LLAISYS_HOST_DEVICE inline void scale_min_k4(const uint8_t *scales, int j, uint8_t &sc, uint8_t &m) {
    if (j < 4) {
        sc = scales[j] & 63;
        m = scales[j + 4] & 63;
    } else {
        sc = uint8_t((scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4));
        m = uint8_t((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
    }
}

// Q3_K: the 16 scales of the sub-blocks of 16 from the packed scales[12], each + 32 (0 .. 63) as byte
// j of w: scale j is the low (j < 8) or high nibble of scales[j % 8], with bits 2 (j / 4) of
// scales[8 + j % 4] on top. Four bytes at a time; static, so each SIMD build keeps its own copy.
LLAISYS_HOST_DEVICE static inline void q3_k_scales(const uint8_t *scales, uint32_t (&w)[4]) {
    uint32_t a[3];
    memcpy(a, scales, 12);  // little-endian words, as the bytes' order gives them on x86 and CUDA
    const uint32_t m4 = 0x0F0F0F0Fu, m2 = 0x03030303u;
    w[0] = (a[0] & m4) | (a[2] & m2) << 4;
    w[1] = (a[1] & m4) | (a[2] >> 2 & m2) << 4;
    w[2] = (a[0] >> 4 & m4) | (a[2] >> 4 & m2) << 4;
    w[3] = (a[1] >> 4 & m4) | (a[2] >> 6 & m2) << 4;
}

// Scale j (-32 .. 31) of a Q3_K block alone, as q3_k_scales unpacks it.
LLAISYS_HOST_DEVICE static inline int q3_k_scale(const uint8_t *scales, int j) {
    return int(((scales[j % 8] >> (4 * (j / 8))) & 0x0F) | ((scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
}

// Element e's stored value, for the scalar code (the dequantizer, the scalar dot products):
// Q2_K's 2 bits (bits 2 ((e % 128) / 32) of qs[32 (e / 128) + e % 32]), Q3_K's 3 (the third bit
// e / 32 of hmask[e % 32]), IQ4_XS's table value (the low (e % 32 < 16) or high nibble of
// qs[16 (e / 32) + e % 16]).
static inline int q2_k_quant(const uint8_t *qs, int e) {
    return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}
static inline int q3_k_quant(const BlockQ3_K &b, int e) {
    return q2_k_quant(b.qs, e) | ((b.hmask[e % 32] >> (e / 32)) & 1) << 2;
}
static inline int iq4_xs_value(const BlockIQ4_XS &b, int e) {
    return kIq4Values[(b.qs[16 * (e / 32) + e % 16] >> (4 * ((e % 32) / 16))) & 0x0F];
}

// IQ4_XS: the 8 sub-blocks' 6-bit scales ls (0 .. 63; the scale is ls - 32) as the bytes of a
// uint64: ls j = nibble j % 2 of scales_l[j / 2], with bits 2j of scales_h on top.
LLAISYS_HOST_DEVICE static inline uint64_t iq4_xs_scales(const BlockIQ4_XS &b) {
    uint64_t h = b.scales_h;  // the 2-bit fields to bytes: 8 at 32-bit, 4 at 16-bit, 2 at 8-bit distance
    h = (h | h << 24) & 0x000000FF000000FFull;
    h = (h | h << 12) & 0x000F000F000F000Full;
    h = (h | h << 6) & 0x0303030303030303ull;
    uint64_t l = uint64_t(b.scales_l[0]) | uint64_t(b.scales_l[1]) << 16 | uint64_t(b.scales_l[2]) << 32 |
                 uint64_t(b.scales_l[3]) << 48;  // byte 2i: scales_l[i]; its high nibble to byte 2i + 1
    l = (l | l << 4) & 0x0F0F0F0F0F0F0F0Full;
    return l | h << 4;
}

// Sub-block j's scale (ls - 32) alone.
LLAISYS_HOST_DEVICE static inline int iq4_xs_scale(const BlockIQ4_XS &b, int j) {
    return int(((b.scales_l[j / 2] >> (4 * (j % 2))) & 0x0F) | ((b.scales_h >> (2 * j)) & 3) << 4) - 32;
}

// Bytes of one row of k elements of quantized dtype dt; throws SHAPE_MISMATCH (naming k) when
// k is not a multiple of the block size, UNSUPPORTED when dt is not block-quantized.
size_t row_bytes(llaisysDataType_t dt, size_t k);

// One row: blocks (row_bytes(dt, k) bytes) -> out [k] f32, or f16 / bf16 (each value
// rounded once from its f32 value). k must be a multiple of the block size.
void dequantize_row(const void *blocks, llaisysDataType_t dt, float *out, size_t k);
void dequantize_row(const void *blocks, llaisysDataType_t dt, fp16_t *out, size_t k);
void dequantize_row(const void *blocks, llaisysDataType_t dt, bf16_t *out, size_t k);

// rows rows, parallel over rows (OpenMP): blocks [rows, row_bytes(dt, k)] bytes ->
// out [rows, k] of float dtype odt (f32, f16 or bf16; else UNSUPPORTED).
void dequantize_rows(const void *blocks, llaisysDataType_t dt, void *out, llaisysDataType_t odt, size_t rows,
                     size_t k);

}  // namespace llaisys::quant
