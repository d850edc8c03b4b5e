// The i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M; blocks.hpp) as integers.
// Every one of them is, element e of a block of 256,
//     value = D * S[e / 16] * q[e]
// with q a signed integer (|q| <= 62), S a small odd integer per 16 (per-32 formats repeat it)
// and D the block's f32 scale, d times a power of two:
//   IQ2_*:   q = +-g, g in {8, 25, 43} (grid), S = 2 ls + 1, D = d / 8   (gguf-py: d (0.5 + ls) / 4 g)
//   IQ3_XXS: q = +-g, g in {4, 12, .., 62},     S = 2 ls + 1, D = d / 4   (d (0.5 + ls) / 2 g)
//   IQ3_S:   q = +-g, g in {1, 3, .., 15},      S = 2 ls + 1, D = d       (d (1 + 2 ls) g)
//   IQ1_*:   q = 8 g +- 1, g in {-1, 0, 1},     S = 2 ls + 1, D = d / 8   (d (2 ls + 1) (g +- 1/8))
// so D * S rounds as gguf-py's scale does (a power of two apart) and (D S) q is its value to the
// bit. The SIMD kernels read the same fields (quant_iq.inc); this is the scalar reference.
#pragma once

#include "blocks.hpp"
#include "iq_grids.inc"

#include <cstring>

namespace llaisys::quant {

namespace iq_detail {
inline constexpr uint16_t kPacked2xxs[] = {LLAISYS_IQ2_XXS_GRID};
inline constexpr uint16_t kPacked2xs[] = {LLAISYS_IQ2_XS_GRID};
inline constexpr uint16_t kPacked2s[] = {LLAISYS_IQ2_S_GRID};
inline constexpr uint16_t kPacked3xxs[] = {LLAISYS_IQ3_XXS_GRID};
inline constexpr uint16_t kPacked3s[] = {LLAISYS_IQ3_S_GRID};
inline constexpr uint16_t kPacked1s[] = {LLAISYS_IQ1_S_GRID};

// Tables as plain arrays (read as .v[i]: no accessor function, so a SIMD build emits none; see
// quant_dot.inc on what its translation units may call).
template <class T, size_t N>
struct Table {
    T v[N];
};

// Entries of 8 values (2-bit map indices) as 8 bytes, value i in byte i.
template <size_t N>
constexpr Table<uint64_t, N> bytes8(const uint16_t (&p)[N], uint8_t m0, uint8_t m1, uint8_t m2) {
    Table<uint64_t, N> out{};
    const uint8_t map[4] = {m0, m1, m2, 0};
    for (size_t e = 0; e < N; e++)
        for (int i = 0; i < 8; i++) out.v[e] |= uint64_t(map[(p[e] >> (2 * i)) & 3]) << (8 * i);
    return out;
}
// Entries of 4 values (4-bit map indices) as 4 bytes: 4 + 8 i (IQ3_XXS, 62 for the last) or 1 + 2 i (IQ3_S).
template <size_t N>
constexpr Table<uint32_t, N> bytes4(const uint16_t (&p)[N], bool xxs) {
    Table<uint32_t, N> out{};
    for (size_t e = 0; e < N; e++)
        for (int i = 0; i < 4; i++) {
            const int k = (p[e] >> (4 * i)) & 15;
            out.v[e] |= uint32_t(xxs ? (k == 7 ? 62 : 4 + 8 * k) : 1 + 2 * k) << (8 * i);
        }
    return out;
}
constexpr Table<uint8_t, 128> signs7() {
    Table<uint8_t, 128> out{};
    for (int k = 0; k < 128; k++) {
        int ones = 0;
        for (int b = 0; b < 7; b++) ones += (k >> b) & 1;
        out.v[k] = uint8_t(k | (ones & 1) << 7);
    }
    return out;
}
// Whether every 4-bit map index of an IQ3 grid is below 8 (the maps have 8 values; the GPU's
// __byte_perm read relies on it, nvidia/iq_block.cuh).
template <size_t N>
constexpr bool indices_below_8(const uint16_t (&p)[N]) {
    for (size_t e = 0; e < N; e++)
        if (p[e] & 0x8888) return false;
    return true;
}
static_assert(indices_below_8(kPacked3xxs) && indices_below_8(kPacked3s), "IQ3 grid map indices are 0..7");

// 7 sign bits (with parity) as 8 bytes for vpsignb: 0xFF (-1) where a sign bit is set, else 1.
constexpr Table<uint64_t, 128> sign_bytes7() {
    const auto bits = signs7();
    Table<uint64_t, 128> out{};
    for (int k = 0; k < 128; k++)
        for (int i = 0; i < 8; i++) out.v[k] |= uint64_t((bits.v[k] >> i) & 1 ? 0xFF : 0x01) << (8 * i);
    return out;
}
}  // namespace iq_detail

// The grids: 8 magnitudes a uint64 (IQ2), 4 a uint32 (IQ3), 8 values g + 1 (0, 1, 2) a uint64 (IQ1).
inline constexpr auto kIq2xxsGrid = iq_detail::bytes8(iq_detail::kPacked2xxs, 8, 25, 43);  // [256]
inline constexpr auto kIq2xsGrid = iq_detail::bytes8(iq_detail::kPacked2xs, 8, 25, 43);    // [512]
inline constexpr auto kIq2sGrid = iq_detail::bytes8(iq_detail::kPacked2s, 8, 25, 43);      // [1024]
inline constexpr auto kIq3xxsGrid = iq_detail::bytes4(iq_detail::kPacked3xxs, true);       // [256]
inline constexpr auto kIq3sGrid = iq_detail::bytes4(iq_detail::kPacked3s, false);          // [512]
inline constexpr auto kIq1Grid = iq_detail::bytes8(iq_detail::kPacked1s, 0, 1, 2);         // [2048]
// 7 sign bits to 8: bit 7 makes the count of set bits even (IQ2_XXS, IQ2_XS, IQ3_XXS).
inline constexpr auto kIqSigns = iq_detail::signs7();
inline constexpr auto kIqSignBytes = iq_detail::sign_bytes7();  // the same as vpsignb's +-1 bytes
static_assert(sizeof kIq2xxsGrid == 256 * 8 && sizeof kIq2xsGrid == 512 * 8 && sizeof kIq2sGrid == 1024 * 8 &&
              sizeof kIq3xxsGrid == 256 * 4 && sizeof kIq3sGrid == 512 * 4 && sizeof kIq1Grid == 2048 * 8);

// (static: each SIMD build keeps its own copy)
static inline uint32_t load_u32(const void *p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// IQ1_M's f16 d, from the top nibbles of its four uint16 scales.
static inline fp16_t iq1_m_d(const BlockIQ1_M &b) {
    uint16_t s[4];
    std::memcpy(s, b.scales, 8);
    fp16_t d;
    d.bits = uint16_t((s[0] >> 12) | ((s[1] >> 8) & 0x00F0) | ((s[2] >> 4) & 0x0F00) | (s[3] & 0xF000));
    return d;
}

// The block as integers: q [256] signed, S [16] (per 16 elements); returns D.
float iq_ints(const BlockIQ2_XXS &b, int8_t *q, int *S);
float iq_ints(const BlockIQ2_XS &b, int8_t *q, int *S);
float iq_ints(const BlockIQ2_S &b, int8_t *q, int *S);
float iq_ints(const BlockIQ3_XXS &b, int8_t *q, int *S);
float iq_ints(const BlockIQ3_S &b, int8_t *q, int *S);
float iq_ints(const BlockIQ1_S &b, int8_t *q, int *S);
float iq_ints(const BlockIQ1_M &b, int8_t *q, int *S);

}  // namespace llaisys::quant
