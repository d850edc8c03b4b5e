// Where the pipelined int8 GEMV (quant_gemv_int8.cuh) finds a block's bytes, and how it turns
// the 16-byte words it loaded into quant values and scales: pure functions of the loaded
// words, for the host as well as the device, so test/cpp/test_int8_layout.cpp checks them
// against the CPU's dequantization without a GPU.
//
// A lane's unit of work is an "item" of a block (kItems* a block). The weight loads are
// 16-byte aligned words (chunks): a Q4_K block (144 bytes) is 16-byte aligned when its row is,
// so its header and each 16 bytes of nibbles are one chunk each; Q6_K (210 bytes) and Q8_0
// (34) blocks are only 2-byte aligned, so an item loads the aligned chunks that cover its bytes
// (two for 16 bytes at an even offset o = address % 16, three for Q8_0's 34) and `window`
// shifts the bytes out of them. A chunk that holds one byte of a block lies inside the block's
// allocation (allocations are 256-byte aligned and a multiple of 512 bytes), so the extra
// bytes are read but never used.
#pragma once

#include "../../../quant/dequant.hpp"  // LLAISYS_HOST_DEVICE, the block types

#include <cstdint>

namespace llaisys::ops::int8 {

constexpr int kItemsQ4K = 8;  // item u: 16 nibble bytes, 16 elements of sub-blocks 2 (u / 2) and + 1
constexpr int kItemsQ6K = 8;  // item t: units 8 (t / 4) + t % 4 and 4 on (16 elements each), one ql span
constexpr int kItemsQ80 = 1;  // the block: 32 elements

// lo >> s | hi << (32 - s), s < 32: the funnel shift of two little-endian words.
LLAISYS_HOST_DEVICE inline uint32_t funnel_r(uint32_t lo, uint32_t hi, unsigned s) {
#ifdef __CUDA_ARCH__
    return __funnelshift_r(lo, hi, s);
#else
    return s ? (lo >> s) | (hi << (32 - s)) : lo;
#endif
}

LLAISYS_HOST_DEVICE constexpr int top_pow2(int n) { return n >= 4 ? 4 : n >= 2 ? 2 : n; }

// out[j] = bytes [s + 4 j, s + 4 j + 4) of the words w (little-endian), s / 4 <= MAXW <= 7.
// The word offset is applied in binary steps of selects with constant indices (a dynamic
// register index would put w in local memory), then the byte offset by funnel shifts. Bytes
// past w's end come out as garbage (callers never use them).
template <int NOUT, int MAXW, int NIN>
LLAISYS_HOST_DEVICE inline void window(const uint32_t (&w)[NIN], unsigned s, uint32_t (&out)[NOUT]) {
    static_assert(MAXW <= 7 && NOUT + MAXW <= NIN, "the window lies inside the words");
    uint32_t t[NIN];
    for (int i = 0; i < NIN; i++) t[i] = w[i];
    for (int step = top_pow2(MAXW); step > 0; step /= 2) {
        const bool take = ((s / 4) & unsigned(step)) != 0;
        for (int i = 0; i + step < NIN; i++) t[i] = take ? t[i + step] : t[i];
    }
    for (int j = 0; j < NOUT; j++) out[j] = funnel_r(t[j], j + 1 < NIN ? t[j + 1] : 0u, 8 * (s % 4));
}

// ---- Q4_K: header chunk h = {d | dmin << 16, scales[0..3], scales[4..7], scales[8..11]}; item
// u's nibbles are the chunk at byte 16 + 16 u (qs[16 u ..]), its elements 64 (u / 2) + 16 (u % 2)
// + i (low nibbles, sub-block 2 (u / 2)) and 32 on (high nibbles, the next sub-block).
LLAISYS_HOST_DEVICE constexpr int q4k_qs_offset(int u) { return 16 + 16 * u; }
LLAISYS_HOST_DEVICE constexpr int q4k_elem(int u) { return 64 * (u / 2) + 16 * (u % 2); }

// The 6-bit scales and mins of sub-blocks 2 p and 2 p + 1 from the header's three scale words
// (quant::scale_min_k4 for all eight sub-blocks at once, a byte each).
LLAISYS_HOST_DEVICE inline void q4k_scale_min(uint32_t s0, uint32_t s1, uint32_t s2, int p, int (&sc)[2],
                                              int (&mn)[2]) {
    const uint32_t sc_w = p < 2 ? s0 & 0x3F3F3F3Fu : (s2 & 0x0F0F0F0Fu) | ((s0 >> 2) & 0x30303030u);
    const uint32_t mn_w = p < 2 ? s1 & 0x3F3F3F3Fu : ((s2 >> 4) & 0x0F0F0F0Fu) | ((s1 >> 2) & 0x30303030u);
    const unsigned sh = 16 * unsigned(p & 1);
    sc[0] = int((sc_w >> sh) & 0xFFu), sc[1] = int((sc_w >> (sh + 8)) & 0xFFu);
    mn[0] = int((mn_w >> sh) & 0xFFu), mn[1] = int((mn_w >> (sh + 8)) & 0xFFu);
}

// ---- Q6_K: item t (h = t / 4, c = t % 4) holds units u0 = 8 h + c and u1 = u0 + 4, which share
// their ql bytes (low and high nibbles) and their qh bytes (bits 2 (c / 2) and 4 above).
LLAISYS_HOST_DEVICE constexpr int q6k_unit(int t) { return 8 * (t / 4) + t % 4; }  // u0; elements 16 u0 + i, and 64 on
LLAISYS_HOST_DEVICE constexpr int q6k_ql_offset(int t) { return 64 * (t / 4) + 16 * (t % 4); }
LLAISYS_HOST_DEVICE constexpr int q6k_qh_offset(int t) { return 128 + 32 * (t / 4) + 16 * (t % 2); }
// scales[u0]; scales[u1] is 4 bytes on
LLAISYS_HOST_DEVICE constexpr int q6k_scale_offset(int t) { return 192 + q6k_unit(t); }
LLAISYS_HOST_DEVICE constexpr int q6k_d_offset() { return 208; }

// The 6-bit values (0 .. 63, a byte each) of units u0 (q0) and u1 (q1) from the item's 16 ql
// and 16 qh bytes.
LLAISYS_HOST_DEVICE inline void q6k_values(const uint32_t (&ql)[4], const uint32_t (&qh)[4], int t,
                                           uint32_t (&q0)[4], uint32_t (&q1)[4]) {
    const unsigned hs = 2 * unsigned((t % 4) / 2);
    for (int w = 0; w < 4; w++) {
        q0[w] = (ql[w] & 0x0F0F0F0Fu) | ((qh[w] >> hs) & 0x03030303u) << 4;
        q1[w] = ((ql[w] >> 4) & 0x0F0F0F0Fu) | ((qh[w] >> (hs + 4)) & 0x03030303u) << 4;
    }
}

// ---- Q8_0: the block's 34 bytes at offset o of three chunks: d is the window at o, the 32
// quant bytes the 8 words at o + 2.
LLAISYS_HOST_DEVICE inline void q80_fields(const uint32_t (&c)[12], unsigned o, uint32_t &d_bits,
                                           uint32_t (&q)[8]) {
    uint32_t d[1];
    window<1, 3>(c, o, d);
    d_bits = d[0] & 0xFFFFu;
    window<8, 4>(c, o + 2, q);
}

}  // namespace llaisys::ops::int8
