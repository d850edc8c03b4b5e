// x16 groups (quant_x16.hpp): packing and unpacking. The kernels are quant_x16_avx2.cpp and
// quant_x16_avx512.cpp; without AVX2 (LLAISYS_ISA=scalar) weights keep the file's layout, whose
// plain-loop kernels run near the float path's speed where an x16 one ran 4-25x slower.
#include "quant_x16.hpp"

#include "../../../quant/dequant.hpp"
#include "../../../utils/error.hpp"

#include <cstring>

namespace llaisys::ops::cpu::x16 {

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
        for (size_t c = 0; c < 8; c++) {  // a word at a time: the float path and the tiles unpack per call
            uint32_t v;
            std::memcpy(&v, &x.qs[c][4 * r], 4);
            v ^= 0x80808080u;
            std::memcpy(dst[b].qs + 4 * c, &v, 4);
        }
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
        uint32_t qh = 0;  // bit c of byte i -> bit 4 c + i: each byte's 8 bits spread to every 4th
        for (size_t i = 0; i < 4; i++) {
            uint32_t t = x.qh[4 * r + i];
            t = (t | t << 12) & 0x000F000Fu;
            t = (t | t << 6) & 0x03030303u;
            t = (t | t << 3) & 0x11111111u;
            qh |= t << i;
        }
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

}  // namespace llaisys::ops::cpu::x16
