// Integer dot products of block-quantized weight rows with quantized activations, one set per
// instruction set (quant_scalar.cpp, quant_avx2.cpp, quant_avx512.cpp); quant_weight.cpp picks
// one at run time and quantizes the activations they read.
//
// Activations are quantized once per call, per row of x, symmetrically to int8 with an f32
// scale per block: d = max|x| / 127, q = round(x / d), so |x - q d| <= d / 2.
//   Q4_0, Q5_0, Q8_0 weights read BlockQ8_32 (32 values) and use sum(q) for their offsets
//   (q - 8, q - 16), subtracted from the integer dot product before it is scaled; Q4_1 and
//   Q5_1 read it too, their min m a term of its own: d d_x (q . x_q) + m d_x sum(x_q);
//   Q2_K .. Q6_K, IQ4_XS and the i-quants (IQ1_*, IQ2_*, IQ3_*) weights read BlockQ8_K (256 values) and its bsums (sums of each 16) or
//   dsums (d times the sums of each 32) for their offsets and mins.
// The weight's stored integers are multiplied with the activations' in exact integer
// arithmetic (per sub-block), then scaled in f32.
#pragma once

#include "../../../quant/blocks.hpp"

#include <cstddef>
#include <cstdint>

namespace llaisys::ops::cpu {

struct BlockQ8_32 {
    float d;          // scale: x ~= d * qs
    int32_t sum;      // sum(qs)
    int8_t qs[32];    // [32]
};
static_assert(sizeof(BlockQ8_32) == 40);

// ggml's block_q8_K (d, qs, bsums) laid out so that the 32-byte loads of qs are aligned (in
// ggml's order every other one crossed a cache line), plus what Q4_K / Q5_K's mins read: one
// fused multiply-add of dsums against the weight block's dmin * mins per activation row.
struct alignas(32) BlockQ8_K {
    int8_t qs[quant::kBlockK];           // [256]
    int16_t bsums[quant::kBlockK / 16];  // [16] sums of each 16 of qs
    float dsums[quant::kBlockK / 32];    // [8] d * (bsums[2j] + bsums[2j + 1])
    float d;                             // scale: x ~= d * qs
};
static_assert(sizeof(BlockQ8_K) == 352);

// Whether weights of dtype dt read BlockQ8_K (K-quants) or BlockQ8_32 activations.
constexpr bool reads_q8k(llaisysDataType_t dt) {
    return dt == LLAISYS_DTYPE_Q2_K || dt == LLAISYS_DTYPE_Q3_K || dt == LLAISYS_DTYPE_Q4_K || dt == LLAISYS_DTYPE_Q5_K || dt == LLAISYS_DTYPE_Q6_K ||
           dt == LLAISYS_DTYPE_IQ4_XS || dt == LLAISYS_DTYPE_IQ2_XXS || dt == LLAISYS_DTYPE_IQ2_XS ||
           dt == LLAISYS_DTYPE_IQ2_S || dt == LLAISYS_DTYPE_IQ3_XXS || dt == LLAISYS_DTYPE_IQ3_S ||
           dt == LLAISYS_DTYPE_IQ1_S || dt == LLAISYS_DTYPE_IQ1_M;
}

// out[i * ldo + r] = W row r . x row i for r < rows, i < m: w [rows][row_bytes] GGUF blocks of
// dtype dt (nb blocks a row); xq [m][xq_stride bytes] the quantized activations (nb blocks of
// BlockQ8_32 or BlockQ8_K a row, as dt reads). Each weight block is decoded once per group of
// up to 8 activation rows, each group walking all the weight rows, so a caller that passes a
// few weight rows keeps them in L1 for the whole batch; a single activation row (decode) walks
// the weight rows one at a time (on CPUs that split 256-bit ops, the 32-blocks 4 at a time on
// 128-bit vectors: quant_dot.inc).
#define LLAISYS_QUANT_DOT_ROWS_DECL                                                                          \
    void dot_rows(llaisysDataType_t dt, float *out, size_t ldo, const std::byte *w, size_t row_bytes,         \
                  size_t rows, const std::byte *xq, size_t xq_stride, size_t m, size_t nb)
// dst [rows][ldd]: columns [0, nbk * block) of row r = blocks [b0, b0 + nbk) of weight row r of
// w [rows][row_bytes] (dtype dt), dequantized to f32: the float path's panel (quant_gemm.cpp).
#define LLAISYS_QUANT_DEQUANT_ROWS_DECL                                                                      \
    void dequant_rows(llaisysDataType_t dt, float *dst, size_t ldd, const std::byte *w, size_t row_bytes,     \
                      size_t rows, size_t b0, size_t nbk)
// out[i * ldo + r] = lane r of group . x row i for r < rows, i < m: group [nb] x16 blocks of
// dtype dt (quant_x16.hpp), xq as dot_rows reads it (quant_x16_*.cpp).
#define LLAISYS_QUANT_DOT_X16_DECL                                                                           \
    void dot_x16(llaisysDataType_t dt, float *out, size_t ldo, const std::byte *group, size_t rows,           \
                 const std::byte *xq, size_t xq_stride, size_t m, size_t nb)
namespace quant_scalar {
LLAISYS_QUANT_DOT_ROWS_DECL;
LLAISYS_QUANT_DEQUANT_ROWS_DECL;
}
namespace quant_avx2 {
LLAISYS_QUANT_DOT_ROWS_DECL;
LLAISYS_QUANT_DEQUANT_ROWS_DECL;
LLAISYS_QUANT_DOT_X16_DECL;
}
// AVX-VNNI (the VEX vpdpbusd, 256-bit): only where cpu_has_avx_vnni() (quant_x16_avxvnni.cpp).
namespace quant_avxvnni { LLAISYS_QUANT_DOT_X16_DECL; }
// AVX-512 VNNI (vpdpbusd on 256-bit vectors, AVX512VL): only where cpu_has_avx512_vnni().
// (the float path dequantizes with quant_avx2's dequant_rows under AVX-512 too: 256-bit code;
// dot_x16 runs on 512-bit vectors)
namespace quant_avx512 {
LLAISYS_QUANT_DOT_ROWS_DECL;
LLAISYS_QUANT_DOT_X16_DECL;
}
// The same x16 kernels with GFNI: only where cpu_has_avx512_vnni() and cpu_has_gfni().
namespace quant_avx512_gfni { LLAISYS_QUANT_DOT_X16_DECL; }

}  // namespace llaisys::ops::cpu
