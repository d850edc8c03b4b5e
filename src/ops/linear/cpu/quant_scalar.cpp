// Quantized dot products without SIMD (quant_kernels.hpp): LLAISYS_ISA=scalar and CPUs without
// AVX2. The same integer sums, offsets and mins as quant_dot.inc, in plain loops: each weight
// block is decoded to its stored integers once per activation row.
#include "quant_kernels.hpp"

#include "../../../quant/dequant.hpp"
#include "../../../quant/iq.hpp"

#include <cstring>
#include <type_traits>

namespace llaisys::ops::cpu::quant_scalar {
namespace {

using namespace llaisys::quant;

int dot32(const uint8_t *q, const int8_t *x, size_t len) {
    int s = 0;
    for (size_t i = 0; i < len; i++) s += int(q[i]) * int(x[i]);
    return s;
}

// The 32 stored integers of a Q4_0 / Q4_1 block (nibbles, 0..15) and of a Q5_0 / Q5_1 block
// (plus bit i of qh as bit 4, 0..31) into q [32].
void quants4(const uint8_t *qs, uint8_t *q) {
    for (size_t i = 0; i < 16; i++) {
        q[i] = qs[i] & 0x0F;
        q[i + 16] = qs[i] >> 4;
    }
}

void quants5(const uint8_t *qs, const uint8_t *qh_bytes, uint8_t *q) {
    uint32_t qh;
    std::memcpy(&qh, qh_bytes, 4);
    for (size_t i = 0; i < 16; i++) {
        q[i] = uint8_t((qs[i] & 0x0F) | (((qh >> i) & 1) << 4));
        q[i + 16] = uint8_t((qs[i] >> 4) | (((qh >> (i + 16)) & 1) << 4));
    }
}

// One weight block against one activation block; q is scratch for the block's integers.
float block_dot(const BlockQ4_0 &b, const BlockQ8_32 &x, uint8_t *q) {
    quants4(b.qs, q);
    return to_f32(b.d) * x.d * float(dot32(q, x.qs, 32) - 8 * x.sum);
}

float block_dot(const BlockQ5_0 &b, const BlockQ8_32 &x, uint8_t *q) {
    quants5(b.qs, b.qh, q);
    return to_f32(b.d) * x.d * float(dot32(q, x.qs, 32) - 16 * x.sum);
}

// Q4_1 / Q5_1: sum (d q + m) x = d x.d (q . x_q) + m x.d sum(x_q), the min a term of its own
// (it has its own f16 scale: no integer offset as Q4_0's).
float block_dot(const BlockQ4_1 &b, const BlockQ8_32 &x, uint8_t *q) {
    quants4(b.qs, q);
    return to_f32(b.d) * x.d * float(dot32(q, x.qs, 32)) + to_f32(b.m) * x.d * float(x.sum);
}

float block_dot(const BlockQ5_1 &b, const BlockQ8_32 &x, uint8_t *q) {
    quants5(b.qs, b.qh, q);
    return to_f32(b.d) * x.d * float(dot32(q, x.qs, 32)) + to_f32(b.m) * x.d * float(x.sum);
}

float block_dot(const BlockQ8_0 &b, const BlockQ8_32 &x, uint8_t *) {
    int s = 0;
    for (size_t i = 0; i < 32; i++) s += int(b.qs[i]) * int(x.qs[i]);
    return to_f32(b.d) * x.d * float(s);
}

// Q2_K: sum_j sc_j (q_j . x_j) over 16 sub-blocks of 16, and their mins against x's bsums.
float block_dot(const BlockQ2_K &b, const BlockQ8_K &x, uint8_t *q) {
    for (int e = 0; e < int(kBlockK); e++) q[e] = uint8_t(q2_k_quant(b.qs, e));
    int sum = 0, mins = 0;
    for (int j = 0; j < 16; j++) {
        sum += int(b.scales[j] & 0x0F) * dot32(q + 16 * j, x.qs + 16 * j, 16);
        mins += int(b.scales[j] >> 4) * x.bsums[j];
    }
    return to_f32(b.d) * x.d * float(sum) - to_f32(b.dmin) * x.d * float(mins);
}

// Q3_K: sum_j sc_j (q_j . x_j - 4 bsums_j) over 16 sub-blocks of 16, q = Q2_K's 2 bits + hmask's third.
float block_dot(const BlockQ3_K &b, const BlockQ8_K &x, uint8_t *q) {
    for (int e = 0; e < int(kBlockK); e++) q[e] = uint8_t(q3_k_quant(b, e));
    int sum = 0;
    for (int j = 0; j < 16; j++) sum += q3_k_scale(b.scales, j) * (dot32(q + 16 * j, x.qs + 16 * j, 16) - 4 * x.bsums[j]);
    return to_f32(b.d) * x.d * float(sum);
}

// IQ4_XS: sum_j (ls_j - 32) (T_j . x_j) over 8 sub-blocks of 32.
float block_dot(const BlockIQ4_XS &b, const BlockQ8_K &x, uint8_t *) {
    int sum = 0;
    for (int j = 0; j < 8; j++) {
        int s = 0;
        for (int e = 32 * j; e < 32 * j + 32; e++) s += iq4_xs_value(b, e) * int(x.qs[e]);
        sum += iq4_xs_scale(b, j) * s;
    }
    return to_f32(b.d) * x.d * float(sum);
}

// The i-quants as integers (iq.hpp): D x.d sum_j S_j (q_j . x_j) over 16 sub-blocks of 16.
template <class B, std::enable_if_t<kIsIQuant<B>, int> = 0>
float block_dot(const B &b, const BlockQ8_K &x, uint8_t *scratch) {
    int8_t *q = reinterpret_cast<int8_t *>(scratch);
    int S[16];
    const float D = iq_ints(b, q, S);
    int sum = 0;
    for (int j = 0; j < 16; j++) {
        int s = 0;
        for (int e = 16 * j; e < 16 * j + 16; e++) s += int(q[e]) * int(x.qs[e]);
        sum += S[j] * s;
    }
    return D * x.d * float(sum);
}

// Q4_K / Q5_K once the 256 quants are in q: sum_j sc_j (q_j . x_j) and the mins.
float k4_dot(const uint8_t *scales, fp16_t d, fp16_t dmin, const BlockQ8_K &x, const uint8_t *q) {
    int sum = 0, mins = 0;
    for (int j = 0; j < 8; j++) {
        uint8_t sc, mn;
        scale_min_k4(scales, j, sc, mn);
        sum += int(sc) * dot32(q + 32 * j, x.qs + 32 * j, 32);
        mins += int(mn) * (x.bsums[2 * j] + x.bsums[2 * j + 1]);
    }
    return to_f32(d) * x.d * float(sum) - to_f32(dmin) * x.d * float(mins);
}

float block_dot(const BlockQ4_K &b, const BlockQ8_K &x, uint8_t *q) {
    for (size_t j = 0; j < 4; j++)
        for (size_t l = 0; l < 32; l++) {
            q[64 * j + l] = b.qs[32 * j + l] & 0x0F;
            q[64 * j + 32 + l] = b.qs[32 * j + l] >> 4;
        }
    return k4_dot(b.scales, b.d, b.dmin, x, q);
}

float block_dot(const BlockQ5_K &b, const BlockQ8_K &x, uint8_t *q) {
    for (size_t j = 0; j < 4; j++)
        for (size_t l = 0; l < 32; l++) {
            q[64 * j + l] = uint8_t((b.qs[32 * j + l] & 0x0F) | (((b.qh[l] >> (2 * j)) & 1) << 4));
            q[64 * j + 32 + l] = uint8_t((b.qs[32 * j + l] >> 4) | (((b.qh[l] >> (2 * j + 1)) & 1) << 4));
        }
    return k4_dot(b.scales, b.d, b.dmin, x, q);
}

float block_dot(const BlockQ6_K &b, const BlockQ8_K &x, uint8_t *q) {
    for (size_t h = 0; h < 2; h++) {
        const uint8_t *ql = b.ql + 64 * h, *qh = b.qh + 32 * h;
        uint8_t *o = q + 128 * h;
        for (size_t l = 0; l < 32; l++) {
            o[l] = uint8_t((ql[l] & 0x0F) | ((qh[l] & 3) << 4));
            o[l + 32] = uint8_t((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4));
            o[l + 64] = uint8_t((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            o[l + 96] = uint8_t((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
    }
    int sum = 0;
    for (int s = 0; s < 16; s++) sum += int(b.scales[s]) * (dot32(q + 16 * s, x.qs + 16 * s, 16) - 32 * x.bsums[s]);
    return to_f32(b.d) * x.d * float(sum);
}

template <class B, class X>
void rows_impl(float *out, size_t ldo, const std::byte *w, size_t row_bytes, size_t rows, const std::byte *xq,
               size_t xq_stride, size_t m, size_t nb) {
    uint8_t q[kBlockK];  // one block's stored integers
    for (size_t r = 0; r < rows; r++) {
        const B *wr = reinterpret_cast<const B *>(w + r * row_bytes);  // [nb]
        for (size_t i = 0; i < m; i++) {
            const X *xr = reinterpret_cast<const X *>(xq + i * xq_stride);  // [nb]
            float s = 0.0f;
            for (size_t ib = 0; ib < nb; ib++) s += block_dot(wr[ib], xr[ib], q);
            out[i * ldo + r] = s;
        }
    }
}

}  // namespace

void dot_rows(llaisysDataType_t dt, float *out, size_t ldo, const std::byte *w, size_t row_bytes, size_t rows,
              const std::byte *xq, size_t xq_stride, size_t m, size_t nb) {
    dispatch_quant(dt, [&](auto tag) {
        using B = decltype(tag);
        using X = std::conditional_t<reads_q8k(dtype_of<B>()), BlockQ8_K, BlockQ8_32>;
        rows_impl<B, X>(out, ldo, w, row_bytes, rows, xq, xq_stride, m, nb);
    });
}

void dequant_rows(llaisysDataType_t dt, float *dst, size_t ldd, const std::byte *w, size_t row_bytes, size_t rows,
                  size_t b0, size_t nbk) {
    dispatch_quant(dt, [&](auto tag) {
        using B = decltype(tag);
        constexpr size_t bs = block_elems<B>();
        for (size_t r = 0; r < rows; r++) {
            const B *blk = reinterpret_cast<const B *>(w + r * row_bytes) + b0;  // [nbk]
            for (size_t b = 0; b < nbk; b++) dequantize_block(blk[b], dst + r * ldd + b * bs);
        }
    });
}

}  // namespace llaisys::ops::cpu::quant_scalar
