// The i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) read on the device: the
// fields of ../iq.cpp's iq_ints, eight elements (a "group", one grid entry's worth for IQ1 and
// IQ2, two for IQ3) at a time, for dequant8 (dequant_block.cuh) and the float GEMV's units
// (ops/linear/nvidia/quant_gemv_float.cuh). Element e of a block is D * S[e / 16] * q[e] (../iq.hpp).
//
// The grids are the packed uint16 entries of ../iq_grids.inc (iq.hpp's expanded tables are
// host constexpr data), one copy per translation unit in global memory, read through the
// read-only cache: a warp's lanes look up different entries, which __constant__ memory would
// serialize. An entry becomes bytes in registers:
//   IQ2, IQ1: 2-bit map indices f spread to one a byte (spread4), then IQ2's magnitudes
//             8 + 17 f + (f >> 1) = 8, 25, 43 and IQ1's 8 f (q = 8 f - 8 +- 1) byte-wise, no carries;
//   IQ3:      the entry's 4-bit indices (all below 8, so plain byte selectors) pick the map's
//             bytes with one __byte_perm.
#pragma once

#include "../../device/nvidia/cuda_kernel_utils.cuh"
#include "../blocks.hpp"
#include "../iq_grids.inc"

#include <cstdint>
#include <type_traits>

namespace llaisys::quant::nvidia {

using device::nvidia::to_float;
using device::nvidia::x86_mul;

static __device__ const uint16_t kIq2xxsGridPacked[] = {LLAISYS_IQ2_XXS_GRID};  // [256]
static __device__ const uint16_t kIq2xsGridPacked[] = {LLAISYS_IQ2_XS_GRID};    // [512]
static __device__ const uint16_t kIq2sGridPacked[] = {LLAISYS_IQ2_S_GRID};      // [1024]
static __device__ const uint16_t kIq3xxsGridPacked[] = {LLAISYS_IQ3_XXS_GRID};  // [256]
static __device__ const uint16_t kIq3sGridPacked[] = {LLAISYS_IQ3_S_GRID};      // [512]
static __device__ const uint16_t kIq1GridPacked[] = {LLAISYS_IQ1_S_GRID};       // [2048]

// Eight elements of an i-quant block: q_t = (byte t of mags - off), negated where bit t of
// signs is set.
struct IqGroup {
    uint32_t mags[2];  // bytes 0..7: |q_t| + off (IQ2, IQ3: |q_t|; IQ1: 8 (grid value + 1))
    uint32_t signs;    // bit t: q_t < 0 (IQ2, IQ3; 0 for IQ1)
    int off;           // IQ1: 9 (delta -1) or 7 (delta +1); 0 for the others
};

// q_t of a group as an int (exact).
__device__ __forceinline__ int iq_q(const IqGroup &g, int t) {
    const int mag = int((g.mags[t / 4] >> (8 * (t % 4))) & 0xFFu) - g.off;
    return (g.signs >> t) & 1u ? -mag : mag;
}

// 7 sign bits -> 8: bit 7 makes the count of set bits even (iq.hpp's kIqSigns).
__device__ __forceinline__ uint32_t iq_signs7(uint32_t s7) { return s7 | (uint32_t(__popc(s7)) & 1u) << 7; }

// Four 2-bit fields (bits 2 i of x, x < 256) as bytes i.
__device__ __forceinline__ uint32_t spread4(uint32_t x) {
    const uint32_t t = (x | x << 12) & 0x000F000Fu;  // fields 0, 1 at bits 0..3; 2, 3 at 16..19
    return (t | t << 6) & 0x03030303u;
}

__device__ __forceinline__ uint32_t iq2_mags4(uint32_t f) {  // f: 2-bit indices, a byte each
    return 17u * f + ((f >> 1) & 0x01010101u) + 0x08080808u;
}

__device__ __forceinline__ IqGroup iq2_group(const uint16_t *grid, unsigned idx, uint32_t signs) {
    const uint32_t p = __ldg(grid + idx);
    return IqGroup{{iq2_mags4(spread4(p & 0xFFu)), iq2_mags4(spread4(p >> 8))}, signs, 0};
}

__device__ __forceinline__ IqGroup iq1_group(unsigned idx, bool minus) {
    const uint32_t p = __ldg(kIq1GridPacked + idx);
    return IqGroup{{spread4(p & 0xFFu) << 3, spread4(p >> 8) << 3}, 0u, minus ? 9 : 7};
}

// IQ3 map bytes: IQ3_XXS 4, 12, .., 52, 62; IQ3_S 1, 3, .., 15 (lo holds indices 0..3, hi 4..7).
__device__ __forceinline__ IqGroup iq3_group(const uint16_t *grid, unsigned i0, unsigned i1, uint32_t lo, uint32_t hi,
                                             uint32_t signs) {
    return IqGroup{{__byte_perm(lo, hi, __ldg(grid + i0)), __byte_perm(lo, hi, __ldg(grid + i1))}, signs, 0};
}

// Bytes p[0..3] as the little-endian u32 (p only byte aligned).
__device__ __forceinline__ uint32_t iq_le32(const uint8_t *p) {
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

// A 4-bit scale per 16 (IQ2_XS, IQ2_S): nibble j % 2 of scales[j / 2].
__device__ __forceinline__ int iq_scale16(const uint8_t *scales, int j) {
    return 2 * ((scales[j / 2] >> (4 * (j % 2))) & 15) + 1;
}

// ---- per format: iq_group(b, g) (elements 8 g .. 8 g + 7), iq_scale(b, j) (S of elements
// 16 j ..), iq_d(b) (D, rounded as iq_ints rounds it: NaN and Inf as the CPU's).

// IQ2_XXS, per 32 (t = g / 4): 4 index bytes, then a u32 of 4 x 7 sign bits and the scale.
__device__ __forceinline__ uint32_t iq2_xxs_aux(const BlockIQ2_XXS &b, int t) {
    return uint32_t(b.qs[4 * t + 2]) | uint32_t(b.qs[4 * t + 3]) << 16;
}
__device__ __forceinline__ IqGroup iq_group(const BlockIQ2_XXS &b, int g) {
    const unsigned idx = reinterpret_cast<const uint8_t *>(b.qs + 4 * (g / 4))[g % 4];
    return iq2_group(kIq2xxsGridPacked, idx, iq_signs7((iq2_xxs_aux(b, g / 4) >> (7 * (g % 4))) & 127u));
}
__device__ __forceinline__ int iq_scale(const BlockIQ2_XXS &b, int j) {
    return 2 * int(iq2_xxs_aux(b, j / 2) >> 28) + 1;
}
__device__ __forceinline__ float iq_d(const BlockIQ2_XXS &b) { return x86_mul(to_float(b.d), 0.125f); }

// IQ2_XS: qs[g] is a 9-bit grid index and 7 sign bits.
__device__ __forceinline__ IqGroup iq_group(const BlockIQ2_XS &b, int g) {
    const unsigned v = b.qs[g];
    return iq2_group(kIq2xsGridPacked, v & 511u, iq_signs7(v >> 9));
}
__device__ __forceinline__ int iq_scale(const BlockIQ2_XS &b, int j) { return iq_scale16(b.scales, j); }
__device__ __forceinline__ float iq_d(const BlockIQ2_XS &b) { return x86_mul(to_float(b.d), 0.125f); }

// IQ2_S: index qs[g] with bits 8-9 from qh[g / 4], the 8 sign bits qs[32 + g].
__device__ __forceinline__ IqGroup iq_group(const BlockIQ2_S &b, int g) {
    const unsigned idx = b.qs[g] | ((b.qh[g / 4] >> (2 * (g % 4))) & 3u) << 8;
    return iq2_group(kIq2sGridPacked, idx, b.qs[32 + g]);
}
__device__ __forceinline__ int iq_scale(const BlockIQ2_S &b, int j) { return iq_scale16(b.scales, j); }
__device__ __forceinline__ float iq_d(const BlockIQ2_S &b) { return x86_mul(to_float(b.d), 0.125f); }

// IQ3_XXS: indices qs[2 g], qs[2 g + 1]; per 32 (t = g / 4) the u32 at qs + 64 + 4 t holds
// 4 x 7 sign bits and the scale.
__device__ __forceinline__ IqGroup iq_group(const BlockIQ3_XXS &b, int g) {
    const uint32_t aux = iq_le32(b.qs + 64 + 4 * (g / 4));
    return iq3_group(kIq3xxsGridPacked, b.qs[2 * g], b.qs[2 * g + 1], 0x1C140C04u, 0x3E342C24u,
                     iq_signs7((aux >> (7 * (g % 4))) & 127u));
}
__device__ __forceinline__ int iq_scale(const BlockIQ3_XXS &b, int j) {
    return 2 * int(iq_le32(b.qs + 64 + 4 * (j / 2)) >> 28) + 1;
}
__device__ __forceinline__ float iq_d(const BlockIQ3_XXS &b) { return x86_mul(to_float(b.d), 0.25f); }

// IQ3_S: indices 2 g and 2 g + 1 (qs, bit 8 from qh: bits 2 (g % 4) and + 1 of qh[g / 4]), the
// sign byte signs[g]; a 4-bit scale per 32.
__device__ __forceinline__ IqGroup iq_group(const BlockIQ3_S &b, int g) {
    const unsigned h = b.qh[g / 4] >> (2 * (g % 4));
    return iq3_group(kIq3sGridPacked, b.qs[2 * g] | (h & 1u) << 8, b.qs[2 * g + 1] | (h & 2u) << 7, 0x07050301u,
                     0x0F0D0B09u, b.signs[g]);
}
__device__ __forceinline__ int iq_scale(const BlockIQ3_S &b, int j) {
    const int t = j / 2;  // the 32 the 16 lies in
    return 2 * ((b.scales[t / 2] >> (4 * (t % 2))) & 15) + 1;
}
__device__ __forceinline__ float iq_d(const BlockIQ3_S &b) { return to_float(b.d); }

// IQ1_S: per 32 (t = g / 4), qh[t] holds 4 x 3 high index bits, the 3-bit scale (bits 12-14)
// and the delta's sign (bit 15).
__device__ __forceinline__ IqGroup iq_group(const BlockIQ1_S &b, int g) {
    const unsigned h = b.qh[g / 4];
    return iq1_group(b.qs[g] | ((h >> (3 * (g % 4))) & 7u) << 8, h & 0x8000u);
}
__device__ __forceinline__ int iq_scale(const BlockIQ1_S &b, int j) {
    return 2 * int((b.qh[j / 2] >> 12) & 7u) + 1;
}
__device__ __forceinline__ float iq_d(const BlockIQ1_S &b) { return x86_mul(to_float(b.d), 0.125f); }

// IQ1_M: nibble g % 2 of qh[g / 2] holds 3 high index bits and the delta's sign; the four u16
// scales (bytes: the block is only byte aligned) hold 3-bit scales per 16 and, in their top
// nibbles, the f16 d (iq.hpp's iq1_m_d).
__device__ __forceinline__ IqGroup iq_group(const BlockIQ1_M &b, int g) {
    const unsigned h = (b.qh[g / 2] >> (4 * (g % 2))) & 15u;
    return iq1_group(b.qs[g] | (h & 7u) << 8, h & 8u);
}
__device__ __forceinline__ int iq_scale(const BlockIQ1_M &b, int j) {
    const unsigned sc = b.scales[2 * (j / 4)] | unsigned(b.scales[2 * (j / 4) + 1]) << 8;
    return 2 * int((sc >> (3 * (j % 4))) & 7u) + 1;
}
__device__ __forceinline__ float iq_d(const BlockIQ1_M &b) {
    fp16_t d;
    d.bits = uint16_t(b.scales[1] >> 4 | (b.scales[3] >> 4) << 4 | (b.scales[5] >> 4) << 8 | (b.scales[7] >> 4) << 12);
    return x86_mul(to_float(d), 0.125f);
}

}  // namespace llaisys::quant::nvidia
