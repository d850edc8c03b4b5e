#include "dequant.hpp"

#include "iq.hpp"

#include "../utils/checked.hpp"

#include <cstring>
#include <vector>

namespace llaisys::quant {

void dequantize_block(const BlockQ4_0 &b, float *out) {  // out [32]
    const float d = to_f32(b.d);
    for (size_t i = 0; i < kBlock32 / 2; i++) {
        out[i] = d * float(int(b.qs[i] & 0x0F) - 8);
        out[i + kBlock32 / 2] = d * float(int(b.qs[i] >> 4) - 8);
    }
}

void dequantize_block(const BlockQ5_0 &b, float *out) {  // out [32]
    const float d = to_f32(b.d);
    uint32_t qh;
    std::memcpy(&qh, b.qh, 4);  // little-endian: bit i is the fifth bit of element i
    for (size_t i = 0; i < kBlock32 / 2; i++) {
        const int lo = (b.qs[i] & 0x0F) | int((qh >> i) & 1u) << 4;
        const int hi = (b.qs[i] >> 4) | int((qh >> (i + 16)) & 1u) << 4;
        out[i] = d * float(lo - 16);
        out[i + kBlock32 / 2] = d * float(hi - 16);
    }
}

void dequantize_block(const BlockQ4_1 &b, float *out) {  // out [32]
    const float d = to_f32(b.d), m = to_f32(b.m);
    for (size_t i = 0; i < kBlock32 / 2; i++) {
        const float lo = d * float(b.qs[i] & 0x0F), hi = d * float(b.qs[i] >> 4);  // rounded on their own, as gguf-py
        out[i] = lo + m;
        out[i + kBlock32 / 2] = hi + m;
    }
}

void dequantize_block(const BlockQ5_1 &b, float *out) {  // out [32]
    const float d = to_f32(b.d), m = to_f32(b.m);
    uint32_t qh;
    std::memcpy(&qh, b.qh, 4);  // as Q5_0's
    for (size_t i = 0; i < kBlock32 / 2; i++) {
        const int lo = (b.qs[i] & 0x0F) | int((qh >> i) & 1u) << 4;
        const int hi = (b.qs[i] >> 4) | int((qh >> (i + 16)) & 1u) << 4;
        const float plo = d * float(lo), phi = d * float(hi);  // rounded on their own, as gguf-py
        out[i] = plo + m;
        out[i + kBlock32 / 2] = phi + m;
    }
}

void dequantize_block(const BlockQ8_0 &b, float *out) {  // out [32]
    const float d = to_f32(b.d);
    for (size_t i = 0; i < kBlock32; i++) out[i] = float(b.qs[i]) * d;
}

namespace {

// Q4_K and Q5_K: sub-block j (32 values) is (d * sc[j]) * q - (dmin * m[j]), q the low
// (j even) or high (j odd) nibbles of qs[32 * (j / 2) ..], plus bit j of qh[0..32] for Q5_K.
void dequantize_k4(fp16_t dh, fp16_t dminh, const uint8_t *scales, const uint8_t *qs, const uint8_t *qh,
                   float *out) {  // out [256]
    const float d = to_f32(dh), dmin = to_f32(dminh);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        scale_min_k4(scales, j, sc, m);
        const float dl = d * float(sc), ml = dmin * float(m);
        const uint8_t *q = qs + 32 * (j / 2);
        const int shift = (j & 1) * 4;
        for (int i = 0; i < 32; i++) {
            int v = (q[i] >> shift) & 0x0F;
            if (qh) v |= ((qh[i] >> j) & 1) << 4;
            const float prod = dl * float(v);  // rounded on its own: gguf-py does not fuse
            out[32 * j + i] = prod - ml;
        }
    }
}

}  // namespace

void dequantize_block(const BlockQ2_K &b, float *out) {  // out [256]
    const float d = to_f32(b.d), dmin = to_f32(b.dmin);
    for (int e = 0; e < int(kBlockK); e++) {
        const int q = q2_k_quant(b.qs, e);
        const float dl = d * float(b.scales[e / 16] & 0x0F), ml = dmin * float(b.scales[e / 16] >> 4);
        const float prod = dl * float(q);  // rounded on its own: gguf-py does not fuse
        out[e] = prod - ml;
    }
}

void dequantize_block(const BlockQ3_K &b, float *out) {  // out [256]
    const float d = to_f32(b.d);
    for (int e = 0; e < int(kBlockK); e++) {
        const float dl = d * float(q3_k_scale(b.scales, e / 16));
        out[e] = dl * float(q3_k_quant(b, e) - 4);
    }
}

void dequantize_block(const BlockQ4_K &b, float *out) { dequantize_k4(b.d, b.dmin, b.scales, b.qs, nullptr, out); }

void dequantize_block(const BlockQ5_K &b, float *out) { dequantize_k4(b.d, b.dmin, b.scales, b.qs, b.qh, out); }

void dequantize_block(const BlockQ6_K &b, float *out) {  // out [256]
    // Element e: half h = e / 128, r = e % 128; low 4 bits from ql[64 h + r % 64] (low nibble
    // for r < 64, else high), high 2 bits from qh[32 h + r % 32] at bit 2 * (r / 32).
    const float d = to_f32(b.d);
    for (int e = 0; e < int(kBlockK); e++) {
        const int h = e / 128, r = e % 128;
        const int lo = (b.ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0F;
        const int hi = (b.qh[32 * h + r % 32] >> (2 * (r / 32))) & 0x03;
        const float dl = d * float(b.scales[e / 16]);
        out[e] = dl * float((lo | hi << 4) - 32);
    }
}

void dequantize_block(const BlockIQ4_XS &b, float *out) {  // out [256]
    const float d = to_f32(b.d);
    for (int j = 0; j < 8; j++) {
        const float dl = d * float(iq4_xs_scale(b, j));
        for (int e = 32 * j; e < 32 * j + 32; e++) out[e] = dl * float(iq4_xs_value(b, e));
    }
}

namespace {

template <class B>
void dequantize_iq(const B &b, float *out) {  // out [256]
    int8_t q[kBlockK];
    int S[kBlockK / 16];
    const float D = iq_ints(b, q, S);
    for (int j = 0; j < int(kBlockK / 16); j++) {
        const float dl = D * float(S[j]);
        for (int e = 16 * j; e < 16 * j + 16; e++) out[e] = dl * float(q[e]);
    }
}

}  // namespace

void dequantize_block(const BlockIQ2_XXS &b, float *out) { dequantize_iq(b, out); }
void dequantize_block(const BlockIQ2_XS &b, float *out) { dequantize_iq(b, out); }
void dequantize_block(const BlockIQ2_S &b, float *out) { dequantize_iq(b, out); }
void dequantize_block(const BlockIQ3_XXS &b, float *out) { dequantize_iq(b, out); }
void dequantize_block(const BlockIQ3_S &b, float *out) { dequantize_iq(b, out); }
void dequantize_block(const BlockIQ1_S &b, float *out) { dequantize_iq(b, out); }
void dequantize_block(const BlockIQ1_M &b, float *out) { dequantize_iq(b, out); }

size_t row_bytes(llaisysDataType_t dt, size_t k) {
    const size_t bs = quant_block_size(dt);
    LLAISYS_CHECK(bs != 0, LLAISYS_STATUS_UNSUPPORTED, "dtype ", dtype_name(dt),
                  " is not a block-quantized dtype (", kQuantDtypeNames, " are)");
    LLAISYS_CHECK(k % bs == 0, LLAISYS_STATUS_SHAPE_MISMATCH, "row length k = ", k, " of a ", dtype_name(dt),
                  " tensor is not a multiple of its block size ", bs);
    return checked_mul(k / bs, quant_block_bytes(dt), "quantized row bytes");
}

namespace {

// Row of nb blocks of type B -> out [nb * block] of T, through an f32 block buffer.
template <class B, class T>
void row_of(const B *blocks, size_t nb, T *out) {
    constexpr size_t bs = block_elems<B>();
    float tmp[kBlockK];
    for (size_t b = 0; b < nb; b++) {
        if constexpr (std::is_same_v<T, float>) {
            dequantize_block(blocks[b], out + b * bs);
        } else {
            dequantize_block(blocks[b], tmp);
            for (size_t i = 0; i < bs; i++) out[b * bs + i] = from_f32<T>(tmp[i]);
        }
    }
}

template <class T>
void row_any(const void *blocks, llaisysDataType_t dt, T *out, size_t k) {
    row_bytes(dt, k);  // validates dt and k
    const size_t nb = k / quant_block_size(dt);
    dispatch_quant(dt, [&](auto tag) {
        using B = decltype(tag);
        row_of(static_cast<const B *>(blocks), nb, out);
    });
}

}  // namespace

void dequantize_row(const void *blocks, llaisysDataType_t dt, float *out, size_t k) { row_any(blocks, dt, out, k); }
void dequantize_row(const void *blocks, llaisysDataType_t dt, fp16_t *out, size_t k) { row_any(blocks, dt, out, k); }
void dequantize_row(const void *blocks, llaisysDataType_t dt, bf16_t *out, size_t k) { row_any(blocks, dt, out, k); }

void dequantize_rows(const void *blocks, llaisysDataType_t dt, void *out, llaisysDataType_t odt, size_t rows,
                     size_t k) {
    const size_t rb = row_bytes(dt, k);
    const size_t nb = k / quant_block_size(dt);
    dispatch_float(odt, [&](auto otag) {
        using T = decltype(otag);
        dispatch_quant(dt, [&](auto tag) {
            using B = decltype(tag);
            const auto *src = static_cast<const std::byte *>(blocks);
            T *dst = static_cast<T *>(out);
#pragma omp parallel for schedule(static) if (rows * k > (1 << 15))
            for (ptrdiff_t r = 0; r < ptrdiff_t(rows); r++) {
                row_of(reinterpret_cast<const B *>(src + size_t(r) * rb), nb, dst + size_t(r) * k);
            }
        });
    });
}

}  // namespace llaisys::quant
