// x16 groups (quant_x16.hpp): packing, unpacking, and the kernel without SIMD (LLAISYS_ISA=scalar
// and CPUs without AVX2), the plain-loop reference of quant_x16_avx2.cpp / quant_x16_avx512.cpp.
#include "quant_x16.hpp"

#include "../../../quant/dequant.hpp"
#include "../../../utils/error.hpp"
#include "quant_kernels.hpp"

#include <cstdlib>
#include <cstring>

namespace llaisys::ops::cpu {
namespace x16 {

bool enabled(llaisysDataType_t dt) {
    static const bool on = [] {
        const char *env = std::getenv("LLAISYS_QUANT_X16");
        return !(env && std::strcmp(env, "0") == 0);
    }();
    return on && (dt == LLAISYS_DTYPE_Q4_K || dt == LLAISYS_DTYPE_Q6_K || dt == LLAISYS_DTYPE_Q8_0 ||
                  dt == LLAISYS_DTYPE_Q5_0);
}

size_t block_bytes(llaisysDataType_t dt) {
    switch (dt) {
    case LLAISYS_DTYPE_Q4_K: return sizeof(BlockQ4_K);
    case LLAISYS_DTYPE_Q6_K: return sizeof(BlockQ6_K);
    case LLAISYS_DTYPE_Q8_0: return sizeof(BlockQ8_0);
    case LLAISYS_DTYPE_Q5_0: return sizeof(BlockQ5_0);
    default: fail(LLAISYS_STATUS_INTERNAL, "x16: no repacked layout for ", dtype_name(dt));
    }
}

namespace {

void pack_q4_k(BlockQ4_K *dst, const quant::BlockQ4_K *src, size_t rows, size_t nb) {
    for (size_t b = 0; b < nb; b++) {
        BlockQ4_K &x = dst[b];
        std::memset(&x, 0, sizeof x);
        for (size_t r = 0; r < rows; r++) {
            const quant::BlockQ4_K &f = src[r * nb + b];
            x.d[r] = f.d;
            x.dmin[r] = f.dmin;
            for (int j = 0; j < 8; j++) quant::scale_min_k4(f.scales, j, x.sc[j][r], x.mn[j][r]);
            for (size_t p = 0; p < 4; p++)
                for (size_t c = 0; c < 8; c++) std::memcpy(&x.qs[p][c][4 * r], f.qs + 32 * p + 4 * c, 4);
        }
    }
}

void unpack_q4_k(quant::BlockQ4_K *dst, const BlockQ4_K *group, size_t r, size_t b0, size_t nbk) {
    for (size_t b = 0; b < nbk; b++) {
        const BlockQ4_K &x = group[b0 + b];
        quant::BlockQ4_K &f = dst[b];
        f.d = x.d[r];
        f.dmin = x.dmin[r];
        for (int j = 0; j < 4; j++) {  // the inverse of scale_min_k4: 6 bits of each, 96 in all
            f.scales[j] = uint8_t(x.sc[j][r] | ((x.sc[j + 4][r] >> 4) << 6));
            f.scales[j + 4] = uint8_t(x.mn[j][r] | ((x.mn[j + 4][r] >> 4) << 6));
            f.scales[j + 8] = uint8_t((x.sc[j + 4][r] & 0x0F) | ((x.mn[j + 4][r] & 0x0F) << 4));
        }
        for (size_t p = 0; p < 4; p++)
            for (size_t c = 0; c < 8; c++) std::memcpy(f.qs + 32 * p + 4 * c, &x.qs[p][c][4 * r], 4);
    }
}

void pack_q6_k(BlockQ6_K *dst, const quant::BlockQ6_K *src, size_t rows, size_t nb) {
    for (size_t b = 0; b < nb; b++) {
        BlockQ6_K &x = dst[b];
        std::memset(&x, 0, sizeof x);
        for (size_t r = 0; r < rows; r++) {
            const quant::BlockQ6_K &f = src[r * nb + b];
            for (size_t w = 0; w < 32; w++) std::memcpy(&x.ql[w][4 * r], f.ql + 4 * w, 4);
            for (size_t w = 0; w < 16; w++) std::memcpy(&x.qh[w][4 * r], f.qh + 4 * w, 4);
            for (size_t j = 0; j < 16; j++) x.sc[j][r] = f.scales[j];
            x.d[r] = f.d;
        }
    }
}

void unpack_q6_k(quant::BlockQ6_K *dst, const BlockQ6_K *group, size_t r, size_t b0, size_t nbk) {
    for (size_t b = 0; b < nbk; b++) {
        const BlockQ6_K &x = group[b0 + b];
        quant::BlockQ6_K &f = dst[b];
        for (size_t w = 0; w < 32; w++) std::memcpy(f.ql + 4 * w, &x.ql[w][4 * r], 4);
        for (size_t w = 0; w < 16; w++) std::memcpy(f.qh + 4 * w, &x.qh[w][4 * r], 4);
        for (size_t j = 0; j < 16; j++) f.scales[j] = x.sc[j][r];
        f.d = x.d[r];
    }
}

void pack_q8_0(BlockQ8_0 *dst, const quant::BlockQ8_0 *src, size_t rows, size_t nb) {
    for (size_t b = 0; b < nb; b++) {
        BlockQ8_0 &x = dst[b];
        std::memset(&x, 0, sizeof x);
        for (size_t r = 0; r < rows; r++) {
            const quant::BlockQ8_0 &f = src[r * nb + b];
            for (size_t e = 0; e < 32; e++) x.qs[e / 4][4 * r + e % 4] = uint8_t(f.qs[e]) ^ 0x80;
            x.d[r] = f.d;
        }
    }
}

void unpack_q8_0(quant::BlockQ8_0 *dst, const BlockQ8_0 *group, size_t r, size_t b0, size_t nbk) {
    for (size_t b = 0; b < nbk; b++) {
        const BlockQ8_0 &x = group[b0 + b];
        for (size_t e = 0; e < 32; e++) dst[b].qs[e] = int8_t(x.qs[e / 4][4 * r + e % 4] ^ 0x80);
        dst[b].d = x.d[r];
    }
}

void pack_q5_0(BlockQ5_0 *dst, const quant::BlockQ5_0 *src, size_t rows, size_t nb) {
    for (size_t b = 0; b < nb; b++) {
        BlockQ5_0 &x = dst[b];
        std::memset(&x, 0, sizeof x);
        for (size_t r = 0; r < rows; r++) {
            const quant::BlockQ5_0 &f = src[r * nb + b];
            for (size_t w = 0; w < 4; w++) std::memcpy(&x.qs[w][4 * r], f.qs + 4 * w, 4);
            uint32_t qh;
            std::memcpy(&qh, f.qh, 4);
            for (size_t e = 0; e < 32; e++) x.qh[4 * r + e % 4] |= uint8_t(((qh >> e) & 1) << (e / 4));
            x.d[r] = f.d;
        }
    }
}

void unpack_q5_0(quant::BlockQ5_0 *dst, const BlockQ5_0 *group, size_t r, size_t b0, size_t nbk) {
    for (size_t b = 0; b < nbk; b++) {
        const BlockQ5_0 &x = group[b0 + b];
        quant::BlockQ5_0 &f = dst[b];
        for (size_t w = 0; w < 4; w++) std::memcpy(f.qs + 4 * w, &x.qs[w][4 * r], 4);
        uint32_t qh = 0;
        for (size_t e = 0; e < 32; e++) qh |= uint32_t((x.qh[4 * r + e % 4] >> (e / 4)) & 1) << e;
        std::memcpy(f.qh, &qh, 4);
        f.d = x.d[r];
    }
}

}  // namespace

void pack(llaisysDataType_t dt, std::byte *dst, const std::byte *src, size_t rows, size_t nb) {
    LLAISYS_CHECK(rows >= 1 && rows <= kRows, LLAISYS_STATUS_INTERNAL, "x16: ", rows, " rows in a group");
    switch (dt) {
    case LLAISYS_DTYPE_Q4_K:
        return pack_q4_k(reinterpret_cast<BlockQ4_K *>(dst), reinterpret_cast<const quant::BlockQ4_K *>(src), rows, nb);
    case LLAISYS_DTYPE_Q6_K:
        return pack_q6_k(reinterpret_cast<BlockQ6_K *>(dst), reinterpret_cast<const quant::BlockQ6_K *>(src), rows, nb);
    case LLAISYS_DTYPE_Q8_0:
        return pack_q8_0(reinterpret_cast<BlockQ8_0 *>(dst), reinterpret_cast<const quant::BlockQ8_0 *>(src), rows, nb);
    case LLAISYS_DTYPE_Q5_0:
        return pack_q5_0(reinterpret_cast<BlockQ5_0 *>(dst), reinterpret_cast<const quant::BlockQ5_0 *>(src), rows, nb);
    default: fail(LLAISYS_STATUS_INTERNAL, "x16: no repacked layout for ", dtype_name(dt));
    }
}

void unpack_row(llaisysDataType_t dt, std::byte *dst, const std::byte *group, size_t lane, size_t b0, size_t nbk) {
    switch (dt) {
    case LLAISYS_DTYPE_Q4_K:
        return unpack_q4_k(reinterpret_cast<quant::BlockQ4_K *>(dst), reinterpret_cast<const BlockQ4_K *>(group), lane,
                           b0, nbk);
    case LLAISYS_DTYPE_Q6_K:
        return unpack_q6_k(reinterpret_cast<quant::BlockQ6_K *>(dst), reinterpret_cast<const BlockQ6_K *>(group), lane,
                           b0, nbk);
    case LLAISYS_DTYPE_Q8_0:
        return unpack_q8_0(reinterpret_cast<quant::BlockQ8_0 *>(dst), reinterpret_cast<const BlockQ8_0 *>(group), lane,
                           b0, nbk);
    case LLAISYS_DTYPE_Q5_0:
        return unpack_q5_0(reinterpret_cast<quant::BlockQ5_0 *>(dst), reinterpret_cast<const BlockQ5_0 *>(group), lane,
                           b0, nbk);
    default: fail(LLAISYS_STATUS_INTERNAL, "x16: no repacked layout for ", dtype_name(dt));
    }
}

}  // namespace x16

namespace quant_scalar {
namespace {

// Lane r of an x16 block against one activation block: per sub-block the exact integer dot
// product, scaled in f32, as the SIMD kernels sum it.
float lane_dot(const x16::BlockQ4_K &w, size_t r, const BlockQ8_K &x) {
    int32_t s[8] = {};  // per sub-block of 32
    for (size_t p = 0; p < 4; p++)
        for (size_t c = 0; c < 8; c++)
            for (size_t t = 0; t < 4; t++) {
                const uint8_t q = w.qs[p][c][4 * r + t];
                s[2 * p] += int32_t(q & 0x0F) * x.qs[64 * p + 4 * c + t];
                s[2 * p + 1] += int32_t(q >> 4) * x.qs[64 * p + 32 + 4 * c + t];
            }
    float sum = 0.0f, mins = 0.0f;
    for (size_t j = 0; j < 8; j++) {
        sum += float(s[j]) * float(w.sc[j][r]);
        mins += float(w.mn[j][r]) * x.dsums[j];
    }
    return sum * to_f32(w.d[r]) * x.d - mins * to_f32(w.dmin[r]);
}

float lane_dot(const x16::BlockQ6_K &w, size_t r, const BlockQ8_K &x) {
    int32_t s[16];  // per sub-block of 16, with the -32 offset: -32 sum(x)
    for (size_t j = 0; j < 16; j++) s[j] = -32 * x.bsums[j];
    for (size_t h = 0; h < 2; h++)          // half of 128
        for (size_t t = 0; t < 4; t++)      // quarter of it: ql low / high nibbles, qh bits 2 t
            for (size_t l = 0; l < 32; l++) {  // element 128 h + 32 t + l
                const size_t lb = 64 * h + 32 * (t & 1) + l, hb = 32 * h + l;
                const int lo = (w.ql[lb / 4][4 * r + lb % 4] >> (4 * (t / 2))) & 0x0F;
                const int hi = (w.qh[hb / 4][4 * r + hb % 4] >> (2 * t)) & 0x03;
                s[8 * h + 2 * t + l / 16] += (lo | hi << 4) * x.qs[128 * h + 32 * t + l];
            }
    float sum = 0.0f;
    for (size_t j = 0; j < 16; j++) sum += float(s[j]) * float(w.sc[j][r]);
    return sum * to_f32(w.d[r]) * x.d;
}

float lane_dot(const x16::BlockQ8_0 &w, size_t r, const BlockQ8_32 &x) {
    int32_t s = -128 * x.sum;  // the stored bytes are q + 128
    for (size_t e = 0; e < 32; e++) s += int32_t(w.qs[e / 4][4 * r + e % 4]) * x.qs[e];
    return float(s) * (to_f32(w.d[r]) * x.d);
}

float lane_dot(const x16::BlockQ5_0 &w, size_t r, const BlockQ8_32 &x) {
    int32_t s = -16 * x.sum;  // the -16 offset
    for (size_t e = 0; e < 32; e++) {
        const int lo = (w.qs[e % 16 / 4][4 * r + e % 4] >> (4 * (e / 16))) & 0x0F;
        const int hi = (w.qh[4 * r + e % 4] >> (e / 4)) & 1;
        s += (lo | hi << 4) * x.qs[e];
    }
    return float(s) * (to_f32(w.d[r]) * x.d);
}

template <class X, class W>
void dot(float *out, size_t ldo, const W *w, size_t rows, const std::byte *xq, size_t xq_stride, size_t m,
         size_t nb) {
    for (size_t i = 0; i < m; i++) {
        const auto *x = reinterpret_cast<const X *>(xq + i * xq_stride);  // [nb]
        for (size_t r = 0; r < rows; r++) {
            float acc = 0.0f;
            for (size_t b = 0; b < nb; b++) acc += lane_dot(w[b], r, x[b]);
            out[i * ldo + r] = acc;
        }
    }
}

}  // namespace

void dot_x16(llaisysDataType_t dt, float *out, size_t ldo, const std::byte *group, size_t rows, const std::byte *xq,
             size_t xq_stride, size_t m, size_t nb) {
    switch (dt) {
    case LLAISYS_DTYPE_Q4_K:
        return dot<BlockQ8_K>(out, ldo, reinterpret_cast<const x16::BlockQ4_K *>(group), rows, xq, xq_stride, m, nb);
    case LLAISYS_DTYPE_Q6_K:
        return dot<BlockQ8_K>(out, ldo, reinterpret_cast<const x16::BlockQ6_K *>(group), rows, xq, xq_stride, m, nb);
    case LLAISYS_DTYPE_Q8_0:
        return dot<BlockQ8_32>(out, ldo, reinterpret_cast<const x16::BlockQ8_0 *>(group), rows, xq, xq_stride, m, nb);
    case LLAISYS_DTYPE_Q5_0:
        return dot<BlockQ8_32>(out, ldo, reinterpret_cast<const x16::BlockQ5_0 *>(group), rows, xq, xq_stride, m, nb);
    default: fail(LLAISYS_STATUS_INTERNAL, "x16: no kernel for ", dtype_name(dt));
    }
}

}  // namespace quant_scalar
}  // namespace llaisys::ops::cpu
