// The GGUF block-quantized formats, byte for byte as llama.cpp's ggml defines them (and
// gguf-py's gguf.quants reads them). A row of k elements is k / kBlock consecutive blocks.
// Dequantized value of element i of a block (q: its stored integer, d/dmin: f16 scales):
//   Q4_0: (q - 8) * d                      q 4 bits: i < 16 low nibble of qs[i], else high nibble of qs[i - 16]
//   Q4_1: d * q + m                        q as Q4_0's; m an f16 min (the block's smallest value)
//   Q5_0: (q - 16) * d                     as Q4_0, plus bit 4 from qh (bit i of the little-endian u32)
//   Q5_1: d * q + m                        q as Q5_0's, m as Q4_1's
//   Q8_0: q * d                            q int8
//   Q2_K: d * sc[j] * q - dmin * m[j]      16 sub-blocks j of 16; sc, m the low and high nibbles of scales[j],
//                                          q 2 bits: element 128 h + 32 s + l is bits 2s of qs[32 h + l]
//   Q3_K: d * sc[j] * (q - 4)              16 sub-blocks j of 16; sc 6-bit minus 32, packed in scales[12];
//                                          q 3 bits: Q2_K's 2, plus bit 4h + s of hmask[l]
//   Q4_K: d * sc[j] * q - dmin * m[j]      8 sub-blocks j of 32; sc, m 6-bit, packed in scales[12]
//   Q5_K: as Q4_K with a fifth bit from qh
//   Q6_K: d * scales[j] * (q - 32)         16 sub-blocks j of 16; q 6 bits from ql (4) and qh (2)
//   IQ4_XS: d * (ls[j] - 32) * T[q]        8 sub-blocks j of 32; ls 6 bits (scales_l nibble, scales_h
//                                          2 bits); q the low (i < 16) or high nibble of qs[16 j + i % 16],
//                                          T llama.cpp's int8 table kIq4Values
//   IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M (the i-quants of 1.56-3.44 bits a weight):
//                                          runs of 8 (IQ1, IQ2) or 4 (IQ3) values are one entry of a
//                                          fixed grid (iq_grids.hpp), with sign bits and odd scales per
//                                          16 or 32; as integers D * S[e / 16] * q[e] (iq.hpp)
// Q8_K is not a storage format here: the K-quant kernels' activation side is their own layout
// (BlockQ8_K in ops/linear/cpu/quant_kernels.hpp).
#pragma once

#include "../utils/types.hpp"

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace llaisys::quant {

constexpr size_t kBlock32 = 32;    // elements per block: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0
constexpr size_t kBlockK = 256;    // elements per super-block: Q2_K .. Q6_K, Q8_K
constexpr size_t kScalesK = 12;    // bytes of packed 6-bit scales (and mins) in Q3_K, Q4_K, Q5_K

struct BlockQ4_0 {
    fp16_t d;
    uint8_t qs[kBlock32 / 2];
};
struct BlockQ4_1 {
    fp16_t d;
    fp16_t m;
    uint8_t qs[kBlock32 / 2];
};
struct BlockQ5_0 {
    fp16_t d;
    uint8_t qh[4];
    uint8_t qs[kBlock32 / 2];
};
struct BlockQ5_1 {
    fp16_t d;
    fp16_t m;
    uint8_t qh[4];
    uint8_t qs[kBlock32 / 2];
};
struct BlockQ8_0 {
    fp16_t d;
    int8_t qs[kBlock32];
};
struct BlockQ2_K {
    uint8_t scales[kBlockK / 16];
    uint8_t qs[kBlockK / 4];
    fp16_t d;
    fp16_t dmin;
};
struct BlockQ3_K {
    uint8_t hmask[kBlockK / 8];
    uint8_t qs[kBlockK / 4];
    uint8_t scales[kScalesK];
    fp16_t d;
};
struct BlockQ4_K {
    fp16_t d;
    fp16_t dmin;
    uint8_t scales[kScalesK];
    uint8_t qs[kBlockK / 2];
};
struct BlockQ5_K {
    fp16_t d;
    fp16_t dmin;
    uint8_t scales[kScalesK];
    uint8_t qh[kBlockK / 8];
    uint8_t qs[kBlockK / 2];
};
struct BlockIQ4_XS {
    fp16_t d;
    uint16_t scales_h;
    uint8_t scales_l[kBlockK / 64];
    uint8_t qs[kBlockK / 2];
};
// IQ4_NL / IQ4_XS's 16 values (ggml's kvalues_iq4nl)
constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
// The i-quants (llama.cpp's ggml-common.h layouts; iq.hpp reads them).
struct BlockIQ2_XXS {
    fp16_t d;
    uint16_t qs[kBlockK / 8];  // per 32: 4 grid indices (bytes), then 4 x 7 sign bits and a 4-bit scale
};
struct BlockIQ2_XS {
    fp16_t d;
    uint16_t qs[kBlockK / 8];        // per 8: a 9-bit grid index and 7 sign bits
    uint8_t scales[kBlockK / 32];    // a 4-bit scale per 16
};
struct BlockIQ2_S {
    fp16_t d;
    uint8_t qs[kBlockK / 4];         // [32] grid indices' low 8 bits, then [32] sign bits
    uint8_t qh[kBlockK / 32];        // the indices' bits 8-9, 2 per 8
    uint8_t scales[kBlockK / 32];    // a 4-bit scale per 16
};
struct BlockIQ3_XXS {
    fp16_t d;
    uint8_t qs[3 * kBlockK / 8];  // [64] grid indices (4 values each), then per 32 a uint32: 4 x 7 sign bits, 4-bit scale
};
struct BlockIQ3_S {
    fp16_t d;
    uint8_t qs[kBlockK / 4];       // grid indices' low 8 bits (4 values each)
    uint8_t qh[kBlockK / 32];      // their bit 8
    uint8_t signs[kBlockK / 8];    // a sign bit per value
    uint8_t scales[kBlockK / 64];  // a 4-bit scale per 32
};
struct BlockIQ1_S {
    fp16_t d;
    uint8_t qs[kBlockK / 8];     // grid indices' low 8 bits (8 values each)
    uint16_t qh[kBlockK / 32];   // per 32: 4 x 3 high index bits, a 3-bit scale, the delta's sign
};
struct BlockIQ1_M {
    uint8_t qs[kBlockK / 8];      // grid indices' low 8 bits
    uint8_t qh[kBlockK / 16];     // per 8, a nibble: 3 high index bits and the delta's sign
    uint8_t scales[kBlockK / 32]; // 4 uint16: 3-bit scales per 16, the f16 d in their top nibbles
};
struct BlockQ6_K {
    uint8_t ql[kBlockK / 2];
    uint8_t qh[kBlockK / 4];
    int8_t scales[kBlockK / 16];
    fp16_t d;
};

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ5_0) == 22 && sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockIQ2_XXS) == 66 && sizeof(BlockIQ2_XS) == 74 && sizeof(BlockIQ2_S) == 82);
static_assert(sizeof(BlockIQ3_XXS) == 98 && sizeof(BlockIQ3_S) == 110 && sizeof(BlockIQ1_S) == 50 && sizeof(BlockIQ1_M) == 56);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);

template <class B>
constexpr llaisysDataType_t dtype_of();
template <> constexpr llaisysDataType_t dtype_of<BlockQ4_0>() { return LLAISYS_DTYPE_Q4_0; }
template <> constexpr llaisysDataType_t dtype_of<BlockQ4_1>() { return LLAISYS_DTYPE_Q4_1; }
template <> constexpr llaisysDataType_t dtype_of<BlockQ5_0>() { return LLAISYS_DTYPE_Q5_0; }
template <> constexpr llaisysDataType_t dtype_of<BlockQ5_1>() { return LLAISYS_DTYPE_Q5_1; }
template <> constexpr llaisysDataType_t dtype_of<BlockQ8_0>() { return LLAISYS_DTYPE_Q8_0; }
template <> constexpr llaisysDataType_t dtype_of<BlockQ2_K>() { return LLAISYS_DTYPE_Q2_K; }
template <> constexpr llaisysDataType_t dtype_of<BlockQ3_K>() { return LLAISYS_DTYPE_Q3_K; }
template <> constexpr llaisysDataType_t dtype_of<BlockQ4_K>() { return LLAISYS_DTYPE_Q4_K; }
template <> constexpr llaisysDataType_t dtype_of<BlockQ5_K>() { return LLAISYS_DTYPE_Q5_K; }
template <> constexpr llaisysDataType_t dtype_of<BlockQ6_K>() { return LLAISYS_DTYPE_Q6_K; }
template <> constexpr llaisysDataType_t dtype_of<BlockIQ4_XS>() { return LLAISYS_DTYPE_IQ4_XS; }
template <> constexpr llaisysDataType_t dtype_of<BlockIQ2_XXS>() { return LLAISYS_DTYPE_IQ2_XXS; }
template <> constexpr llaisysDataType_t dtype_of<BlockIQ2_XS>() { return LLAISYS_DTYPE_IQ2_XS; }
template <> constexpr llaisysDataType_t dtype_of<BlockIQ2_S>() { return LLAISYS_DTYPE_IQ2_S; }
template <> constexpr llaisysDataType_t dtype_of<BlockIQ3_XXS>() { return LLAISYS_DTYPE_IQ3_XXS; }
template <> constexpr llaisysDataType_t dtype_of<BlockIQ3_S>() { return LLAISYS_DTYPE_IQ3_S; }
template <> constexpr llaisysDataType_t dtype_of<BlockIQ1_S>() { return LLAISYS_DTYPE_IQ1_S; }
template <> constexpr llaisysDataType_t dtype_of<BlockIQ1_M>() { return LLAISYS_DTYPE_IQ1_M; }

// Whether dt is one of the seven i-quants (iq.hpp: one integer form over lattice grids). The one
// predicate for the set, in host and device code alike.
constexpr bool is_i_quant(llaisysDataType_t dt) {
    return dt == LLAISYS_DTYPE_IQ2_XXS || dt == LLAISYS_DTYPE_IQ2_XS || dt == LLAISYS_DTYPE_IQ2_S ||
           dt == LLAISYS_DTYPE_IQ3_XXS || dt == LLAISYS_DTYPE_IQ3_S || dt == LLAISYS_DTYPE_IQ1_S ||
           dt == LLAISYS_DTYPE_IQ1_M;
}
template <class B>
constexpr bool kIsIQuant = is_i_quant(dtype_of<B>());

// Elements per block of block type B.
template <class B>
constexpr size_t block_elems() {
    return std::is_same_v<B, BlockQ4_0> || std::is_same_v<B, BlockQ4_1> || std::is_same_v<B, BlockQ5_0> ||
                   std::is_same_v<B, BlockQ5_1> || std::is_same_v<B, BlockQ8_0>
               ? kBlock32
               : kBlockK;
}

// Call f(B{}) with B the block type of a block-quantized dtype.
template <class F>
void dispatch_quant(llaisysDataType_t dt, F &&f) {
    switch (dt) {
    case LLAISYS_DTYPE_Q4_0: f(BlockQ4_0{}); return;
    case LLAISYS_DTYPE_Q4_1: f(BlockQ4_1{}); return;
    case LLAISYS_DTYPE_Q5_0: f(BlockQ5_0{}); return;
    case LLAISYS_DTYPE_Q5_1: f(BlockQ5_1{}); return;
    case LLAISYS_DTYPE_Q8_0: f(BlockQ8_0{}); return;
    case LLAISYS_DTYPE_Q2_K: f(BlockQ2_K{}); return;
    case LLAISYS_DTYPE_Q3_K: f(BlockQ3_K{}); return;
    case LLAISYS_DTYPE_Q4_K: f(BlockQ4_K{}); return;
    case LLAISYS_DTYPE_Q5_K: f(BlockQ5_K{}); return;
    case LLAISYS_DTYPE_Q6_K: f(BlockQ6_K{}); return;
    case LLAISYS_DTYPE_IQ4_XS: f(BlockIQ4_XS{}); return;
    case LLAISYS_DTYPE_IQ2_XXS: f(BlockIQ2_XXS{}); return;
    case LLAISYS_DTYPE_IQ2_XS: f(BlockIQ2_XS{}); return;
    case LLAISYS_DTYPE_IQ2_S: f(BlockIQ2_S{}); return;
    case LLAISYS_DTYPE_IQ3_XXS: f(BlockIQ3_XXS{}); return;
    case LLAISYS_DTYPE_IQ3_S: f(BlockIQ3_S{}); return;
    case LLAISYS_DTYPE_IQ1_S: f(BlockIQ1_S{}); return;
    case LLAISYS_DTYPE_IQ1_M: f(BlockIQ1_M{}); return;
    default:
        fail(LLAISYS_STATUS_UNSUPPORTED, "dtype ", dtype_name(dt),
             " is not a block-quantized dtype (", kQuantDtypeNames, " are)");
    }
}

}  // namespace llaisys::quant
