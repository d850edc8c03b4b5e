// The K-quant quantizers (Q4_K, Q5_K, Q6_K), following llama.cpp's reference algorithm
// (ggml-quants.c: quantize_row_q{4,5,6}_K_ref, make_qkx2_quants, make_qx_quants). Every
// float operation is written in llama.cpp's order and rounded on its own (this file is built
// without FMA contraction, as llama.cpp's reference is), so the bytes match for finite input.
#include "quantize.hpp"

#include "dequant.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace llaisys::quant {

namespace {

constexpr float kGroupMaxEps = 1e-15f;  // a group with max |x| below this is all zero

// Round to nearest, ties to even, for |v| <= 4194303 (the magic-number trick llama.cpp uses).
int nearest_int(float v) {
    const float shifted = v + 12582912.0f;  // 1.5 * 2^23: the integer lands in the mantissa
    int32_t bits;
    std::memcpy(&bits, &shifted, 4);
    return (bits & 0x007fffff) - 0x00400000;
}

// Asymmetric quantization of x [n] to L [n] in [0, nmax] with weights w [n]: returns the
// scale, *neg_min the negated minimum (>= 0), such that x ~ scale * L - *neg_min. A first
// guess from the range, then nstep + 1 trial scales (rmin + rdelta * is + nmax) / range, each
// refined by weighted least squares; the one of least weighted squared error wins.
float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min, uint8_t *Laux,
                    float rmin, float rdelta, int nstep) {
    float min = x[0], max = x[0];
    float sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; i++) L[i] = 0;
        *neg_min = -min;
        return 0.0f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        const int l = nearest_int(iscale * (x[i] - min));
        L[i] = uint8_t(std::max(0, std::min(nmax, l)));
        const float prod = scale * L[i];
        const float diff = prod + min - x[i];
        best_error += w[i] * (diff * diff);
    }
    for (int is = 0; is <= nstep; is++) {
        const float step = rdelta * is;
        iscale = (rmin + step + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * (x[i] - min));
            l = std::max(0, std::min(nmax, l));
            Laux[i] = uint8_t(l);
            const float wl = w[i] * l;
            sum_l += wl;
            sum_l2 += wl * l;
            sum_xl += wl * x[i];
        }
        const float wl2 = sum_w * sum_l2, l_l = sum_l * sum_l;
        const float D = wl2 - l_l;
        if (D > 0) {
            const float a = sum_w * sum_xl, b = sum_x * sum_l;
            float this_scale = (a - b) / D;
            const float c = sum_l2 * sum_x, e = sum_l * sum_xl;
            float this_min = (c - e) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                const float prod = this_scale * Laux[i];
                const float diff = prod + this_min - x[i];
                cur_error += w[i] * (diff * diff);
            }
            if (cur_error < best_error) {
                for (int i = 0; i < n; i++) L[i] = Laux[i];
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *neg_min = -min;
    return scale;
}

// Symmetric quantization of x [n] to L [n] in [0, 2 * nmax) (value l - nmax), weighted by
// x^2: the scale from max |x|, then 18 trial scales around it, the best by weighted least
// squares. Returns the scale (0 for an all-zero group).
float fit_scale_symmetric(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = std::fabs(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < kGroupMaxEps) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.0f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * x[i]);
        l = std::max(-nmax, std::min(nmax - 1, l));
        L[i] = int8_t(l + nmax);
        const float w = x[i] * x[i];
        const float wx = w * x[i];
        sumlx += wx * l;
        const float wl = w * l;
        suml2 += wl * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        const float tenth = 0.1f * is;
        iscale = -(nmax + tenth) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * x[i]);
            l = std::max(-nmax, std::min(nmax - 1, l));
            const float w = x[i] * x[i];
            const float wx = w * x[i];
            sumlx += wx * l;
            const float wl = w * l;
            suml2 += wl * l;
        }
        const float lhs = sumlx * sumlx, rhs = best * suml2;
        if (suml2 > 0 && lhs > rhs) {
            for (int i = 0; i < n; i++) {
                const int l = nearest_int(iscale * x[i]);
                L[i] = int8_t(nmax + std::max(-nmax, std::min(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

// Q4_K / Q5_K: 8 sub-blocks of 32 fitted with fit_scale_min (levels 0..nmax), their scales and
// mins quantized to 6 bits against the largest of each, then every value re-quantized with
// the stored (rounded) scales. Writes d, dmin, scales[12]; L [256] gets the levels.
void quantize_k4_common(const float *x, int nmax, float rmin, int nstep, fp16_t &d_out, fp16_t &dmin_out,
                        uint8_t *packed, uint8_t *L) {
    float weights[32], scales[8], mins[8];
    uint8_t Laux[32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
        const float av_x = std::sqrt(sum_x2 / 32);
        for (int l = 0; l < 32; l++) weights[l] = av_x + std::fabs(xs[l]);
        scales[j] = fit_scale_min(32, nmax, xs, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    std::memset(packed, 0, kScalesK);
    for (int j = 0; j < 8; j++) {
        const uint8_t ls = uint8_t(std::min(63, int(uint8_t(nearest_int(inv_scale * scales[j])))));
        const uint8_t lm = uint8_t(std::min(63, int(uint8_t(nearest_int(inv_min * mins[j])))));
        if (j < 4) {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = uint8_t((ls & 0xF) | ((lm & 0xF) << 4));
            packed[j - 4] |= uint8_t((ls >> 4) << 6);
            packed[j] |= uint8_t((lm >> 4) << 6);
        }
    }
    d_out = from_f32<fp16_t>(max_scale / 63.f);
    dmin_out = from_f32<fp16_t>(max_min / 63.f);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        scale_min_k4(packed, j, sc, m);
        const float d = to_f32(d_out) * sc;
        if (!d) continue;
        const float dm = to_f32(dmin_out) * m;
        for (int i = 0; i < 32; i++) {
            const int l = nearest_int((x[32 * j + i] + dm) / d);
            L[32 * j + i] = uint8_t(std::max(0, std::min(nmax, l)));
        }
    }
}

}  // namespace

void quantize_block(const float *x, BlockQ4_K &b) {
    uint8_t L[kBlockK];
    quantize_k4_common(x, 15, -1.0f, 20, b.d, b.dmin, b.scales, L);
    for (int j = 0; j < 4; j++) {  // chunk j of 32 bytes: sub-block 2j low nibbles, 2j + 1 high
        for (int l = 0; l < 32; l++) b.qs[32 * j + l] = uint8_t(L[64 * j + l] | (L[64 * j + 32 + l] << 4));
    }
}

void quantize_block(const float *x, BlockQ5_K &b) {
    uint8_t L[kBlockK];
    quantize_k4_common(x, 31, -0.5f, 15, b.d, b.dmin, b.scales, L);
    std::memset(b.qh, 0, sizeof(b.qh));
    for (int j = 0; j < 4; j++) {  // as Q4_K, the fifth bit of sub-block s in bit s of qh[l]
        for (int l = 0; l < 32; l++) {
            const int l1 = L[64 * j + l], l2 = L[64 * j + 32 + l];
            b.qs[32 * j + l] = uint8_t((l1 & 0xF) | ((l2 & 0xF) << 4));
            b.qh[l] |= uint8_t(((l1 >> 4) << (2 * j)) | ((l2 >> 4) << (2 * j + 1)));
        }
    }
}

void quantize_block(const float *x, BlockQ6_K &b) {
    int8_t L[kBlockK];
    float scales[16];
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < 16; ib++) {
        scales[ib] = fit_scale_symmetric(16, 32, x + 16 * ib, L + 16 * ib);
        const float abs_scale = std::fabs(scales[ib]);
        if (abs_scale > max_abs_scale) {
            max_abs_scale = abs_scale;
            max_scale = scales[ib];
        }
    }
    if (max_abs_scale < kGroupMaxEps) {
        std::memset(&b, 0, sizeof(b));
        return;
    }
    const float iscale = -128.f / max_scale;
    b.d = from_f32<fp16_t>(1 / iscale);
    for (int ib = 0; ib < 16; ib++) b.scales[ib] = int8_t(std::min(127, nearest_int(iscale * scales[ib])));
    for (int j = 0; j < 16; j++) {
        const float d = to_f32(b.d) * b.scales[j];
        if (!d) continue;
        for (int i = 0; i < 16; i++) {
            const int l = nearest_int(x[16 * j + i] / d);
            L[16 * j + i] = int8_t(std::max(-32, std::min(31, l)) + 32);
        }
    }
    for (int h = 0; h < 2; h++) {  // half h: elements 128 h .. 128 h + 127
        const int8_t *Lh = L + 128 * h;
        for (int l = 0; l < 32; l++) {
            b.ql[64 * h + l] = uint8_t((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
            b.ql[64 * h + l + 32] = uint8_t((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
            b.qh[32 * h + l] = uint8_t((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) |
                                       ((Lh[l + 96] >> 4) << 6));
        }
    }
}

}  // namespace llaisys::quant
