#include "iq.hpp"

namespace llaisys::quant {
namespace {

// 8 magnitudes (a grid entry's bytes) with sign bits into q [8].
void put8(uint64_t mags, uint32_t signs, int8_t *q) {
    for (int i = 0; i < 8; i++) q[i] = int8_t(((signs >> i) & 1) ? -int((mags >> (8 * i)) & 0xFF) : int((mags >> (8 * i)) & 0xFF));
}

// An IQ1 grid entry (bytes g + 1) with the delta's sign into q [8]: 8 g +- 1.
void put8_iq1(uint64_t entry, bool minus, int8_t *q) {
    for (int i = 0; i < 8; i++) q[i] = int8_t(8 * (int((entry >> (8 * i)) & 0xFF) - 1) + (minus ? -1 : 1));
}

// A 4-bit scale per 16: nibble j % 2 of scales[j / 2], S = 2 ls + 1.
void scales16(const uint8_t *scales, int *S) {
    for (int j = 0; j < 16; j++) S[j] = 2 * ((scales[j / 2] >> (4 * (j % 2))) & 15) + 1;
}

}  // namespace

float iq_ints(const BlockIQ2_XXS &b, int8_t *q, int *S) {
    for (int t = 0; t < 8; t++) {  // 32 values: 4 grid indices, then 4 x 7 sign bits and the scale
        const uint32_t idx = load_u32(b.qs + 4 * t), aux = load_u32(b.qs + 4 * t + 2);
        for (int k = 0; k < 4; k++) put8(kIq2xxsGrid.v[(idx >> (8 * k)) & 0xFF], kIqSigns.v[(aux >> (7 * k)) & 127], q + 32 * t + 8 * k);
        S[2 * t] = S[2 * t + 1] = 2 * int(aux >> 28) + 1;
    }
    return to_f32(b.d) * 0.125f;
}

float iq_ints(const BlockIQ2_XS &b, int8_t *q, int *S) {
    for (int i = 0; i < 32; i++) put8(kIq2xsGrid.v[b.qs[i] & 511], kIqSigns.v[b.qs[i] >> 9], q + 8 * i);
    scales16(b.scales, S);
    return to_f32(b.d) * 0.125f;
}

float iq_ints(const BlockIQ2_S &b, int8_t *q, int *S) {
    for (int i = 0; i < 32; i++) put8(kIq2sGrid.v[b.qs[i] | ((b.qh[i / 4] >> (2 * (i % 4))) & 3) << 8], b.qs[32 + i], q + 8 * i);
    scales16(b.scales, S);
    return to_f32(b.d) * 0.125f;
}

float iq_ints(const BlockIQ3_XXS &b, int8_t *q, int *S) {
    for (int t = 0; t < 8; t++) {  // 32 values: 8 grid indices of 4, and a uint32 of 4 x 7 sign bits and the scale
        const uint32_t aux = load_u32(b.qs + 64 + 4 * t);
        for (int k = 0; k < 4; k++) {
            const uint64_t mags = kIq3xxsGrid.v[b.qs[8 * t + 2 * k]] | uint64_t(kIq3xxsGrid.v[b.qs[8 * t + 2 * k + 1]]) << 32;
            put8(mags, kIqSigns.v[(aux >> (7 * k)) & 127], q + 32 * t + 8 * k);
        }
        S[2 * t] = S[2 * t + 1] = 2 * int(aux >> 28) + 1;
    }
    return to_f32(b.d) * 0.25f;
}

float iq_ints(const BlockIQ3_S &b, int8_t *q, int *S) {
    for (int i = 0; i < 32; i++) {  // 8 values: 2 grid indices of 4 (bit 8 from qh), a sign byte
        const int i0 = 2 * i, i1 = 2 * i + 1;
        const uint32_t g0 = kIq3sGrid.v[b.qs[i0] | ((b.qh[i0 / 8] >> (i0 % 8)) & 1) << 8];
        const uint32_t g1 = kIq3sGrid.v[b.qs[i1] | ((b.qh[i1 / 8] >> (i1 % 8)) & 1) << 8];
        put8(g0 | uint64_t(g1) << 32, b.signs[i], q + 8 * i);
    }
    for (int t = 0; t < 8; t++) S[2 * t] = S[2 * t + 1] = 2 * ((b.scales[t / 2] >> (4 * (t % 2))) & 15) + 1;
    return to_f32(b.d);
}

float iq_ints(const BlockIQ1_S &b, int8_t *q, int *S) {
    for (int t = 0; t < 8; t++) {  // 32 values: qh[t] holds 4 x 3 high index bits, the scale, the delta's sign
        const unsigned h = b.qh[t];
        for (int k = 0; k < 4; k++) put8_iq1(kIq1Grid.v[b.qs[4 * t + k] | ((h >> (3 * k)) & 7) << 8], h & 0x8000, q + 32 * t + 8 * k);
        S[2 * t] = S[2 * t + 1] = 2 * int((h >> 12) & 7) + 1;
    }
    return to_f32(b.d) * 0.125f;
}

float iq_ints(const BlockIQ1_M &b, int8_t *q, int *S) {
    for (int i = 0; i < 32; i++) {  // 8 values: a nibble of qh, 3 high index bits and the delta's sign
        const unsigned h = (b.qh[i / 2] >> (4 * (i % 2))) & 15;
        put8_iq1(kIq1Grid.v[b.qs[i] | (h & 7) << 8], h & 8, q + 8 * i);
    }
    uint16_t sc[4];
    std::memcpy(sc, b.scales, 8);
    for (int j = 0; j < 16; j++) S[j] = 2 * ((sc[j / 4] >> (3 * (j % 4))) & 7) + 1;
    return to_f32(iq1_m_d(b)) * 0.125f;
}

}  // namespace llaisys::quant
