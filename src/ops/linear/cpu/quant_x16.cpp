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
    return on && dt == LLAISYS_DTYPE_Q4_K;
}

size_t block_bytes(llaisysDataType_t dt) {
    switch (dt) {
    case LLAISYS_DTYPE_Q4_K: return sizeof(BlockQ4_K);
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

}  // namespace

void pack(llaisysDataType_t dt, std::byte *dst, const std::byte *src, size_t rows, size_t nb) {
    LLAISYS_CHECK(rows >= 1 && rows <= kRows, LLAISYS_STATUS_INTERNAL, "x16: ", rows, " rows in a group");
    switch (dt) {
    case LLAISYS_DTYPE_Q4_K:
        return pack_q4_k(reinterpret_cast<BlockQ4_K *>(dst), reinterpret_cast<const quant::BlockQ4_K *>(src), rows, nb);
    default: fail(LLAISYS_STATUS_INTERNAL, "x16: no repacked layout for ", dtype_name(dt));
    }
}

void unpack_row(llaisysDataType_t dt, std::byte *dst, const std::byte *group, size_t lane, size_t b0, size_t nbk) {
    switch (dt) {
    case LLAISYS_DTYPE_Q4_K:
        return unpack_q4_k(reinterpret_cast<quant::BlockQ4_K *>(dst), reinterpret_cast<const BlockQ4_K *>(group), lane,
                           b0, nbk);
    default: fail(LLAISYS_STATUS_INTERNAL, "x16: no repacked layout for ", dtype_name(dt));
    }
}

}  // namespace x16

namespace quant_scalar {

// The same sums as the SIMD kernels, lane by lane: per sub-block the exact integer dot product,
// scaled in f32.
void dot_x16(llaisysDataType_t dt, float *out, size_t ldo, const std::byte *group, size_t rows, const std::byte *xq,
             size_t xq_stride, size_t m, size_t nb) {
    LLAISYS_CHECK(dt == LLAISYS_DTYPE_Q4_K, LLAISYS_STATUS_INTERNAL, "x16: no kernel for ", dtype_name(dt));
    const auto *w = reinterpret_cast<const x16::BlockQ4_K *>(group);
    for (size_t i = 0; i < m; i++) {
        const auto *x = reinterpret_cast<const BlockQ8_K *>(xq + i * xq_stride);  // [nb]
        for (size_t r = 0; r < rows; r++) {
            float acc = 0.0f;
            for (size_t b = 0; b < nb; b++) {
                const x16::BlockQ4_K &wb = w[b];
                int32_t s[8] = {};  // per sub-block
                for (size_t p = 0; p < 4; p++)
                    for (size_t c = 0; c < 8; c++)
                        for (size_t t = 0; t < 4; t++) {
                            const uint8_t q = wb.qs[p][c][4 * r + t];
                            s[2 * p] += int32_t(q & 0x0F) * x[b].qs[64 * p + 4 * c + t];
                            s[2 * p + 1] += int32_t(q >> 4) * x[b].qs[64 * p + 32 + 4 * c + t];
                        }
                float sum = 0.0f, mins = 0.0f;
                for (size_t j = 0; j < 8; j++) {
                    sum += float(s[j]) * float(wb.sc[j][r]);
                    mins += float(wb.mn[j][r]) * x[b].dsums[j];
                }
                acc += sum * to_f32(wb.d[r]) * x[b].d - mins * to_f32(wb.dmin[r]);
            }
            out[i * ldo + r] = acc;
        }
    }
}

}  // namespace quant_scalar
}  // namespace llaisys::ops::cpu
