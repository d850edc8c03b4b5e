// x16 groups (quant_x16.hpp): packing and unpacking. The kernels are quant_x16_avx2.cpp and
// quant_x16_avx512.cpp; without AVX2 (LLAISYS_ISA=scalar) weights keep the file's layout, whose
// plain-loop kernels run near the float path's speed where an x16 one ran 4-25x slower.
#include "quant_x16.hpp"

#include "../../../quant/dequant.hpp"
#include "../../../utils/error.hpp"

#include <cstring>
#include <type_traits>

namespace llaisys::ops::cpu::x16 {

namespace {

// Each format's row r of an x16 block from (put) and back to (get) the file's block.

void put(BlockQ4_K &x, size_t r, const quant::BlockQ4_K &f) {
    x.d[r] = f.d;
    x.dmin[r] = f.dmin;
    for (int j = 0; j < 8; j++) quant::scale_min_k4(f.scales, j, x.sc[j][r], x.mn[j][r]);
    for (size_t p = 0; p < 4; p++)
        for (size_t c = 0; c < 8; c++) std::memcpy(&x.qs[p][c][4 * r], f.qs + 32 * p + 4 * c, 4);
}

void get(quant::BlockQ4_K &f, const BlockQ4_K &x, size_t r) {
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

void put(BlockQ6_K &x, size_t r, const quant::BlockQ6_K &f) {
    for (size_t w = 0; w < 32; w++) std::memcpy(&x.ql[w][4 * r], f.ql + 4 * w, 4);
    for (size_t w = 0; w < 16; w++) std::memcpy(&x.qh[w][4 * r], f.qh + 4 * w, 4);
    for (size_t j = 0; j < 16; j++) x.sc[j][r] = f.scales[j];
    x.d[r] = f.d;
}

void get(quant::BlockQ6_K &f, const BlockQ6_K &x, size_t r) {
    for (size_t w = 0; w < 32; w++) std::memcpy(f.ql + 4 * w, &x.ql[w][4 * r], 4);
    for (size_t w = 0; w < 16; w++) std::memcpy(f.qh + 4 * w, &x.qh[w][4 * r], 4);
    for (size_t j = 0; j < 16; j++) f.scales[j] = x.sc[j][r];
    f.d = x.d[r];
}

void put(BlockQ8_0 &x, size_t r, const quant::BlockQ8_0 &f) {
    for (size_t c = 0; c < 8; c++) {  // a word at a time, as get: byte by byte packed at 2.4 GB/s, not 12
        uint32_t v;
        std::memcpy(&v, f.qs + 4 * c, 4);
        v ^= 0x80808080u;
        std::memcpy(&x.qs[c][4 * r], &v, 4);
    }
    x.d[r] = f.d;
}

void get(quant::BlockQ8_0 &f, const BlockQ8_0 &x, size_t r) {
    for (size_t c = 0; c < 8; c++) {  // a word at a time: the float path and the tiles unpack per call
        uint32_t v;
        std::memcpy(&v, &x.qs[c][4 * r], 4);
        v ^= 0x80808080u;
        std::memcpy(f.qs + 4 * c, &v, 4);
    }
    f.d = x.d[r];
}

// Q5_0 / Q5_1's fifth bits: bit c of qh[4 r + i] = bit 4 c + i of the file's little-endian qh
void put_qh(uint8_t *xqh, const uint8_t *fqh) {
    uint32_t qh;
    std::memcpy(&qh, fqh, 4);
    for (size_t e = 0; e < 32; e++) xqh[e % 4] |= uint8_t(((qh >> e) & 1) << (e / 4));
}

void get_qh(uint8_t *fqh, const uint8_t *xqh) {
    uint32_t qh = 0;  // bit c of byte i -> bit 4 c + i: each byte's 8 bits spread to every 4th
    for (size_t i = 0; i < 4; i++) {
        uint32_t t = xqh[i];
        t = (t | t << 12) & 0x000F000Fu;
        t = (t | t << 6) & 0x03030303u;
        t = (t | t << 3) & 0x11111111u;
        qh |= t << i;
    }
    std::memcpy(fqh, &qh, 4);
}

// The 32-blocks' nibble words: qs[w][4 r + i] = the file's qs[4 w + i] of row r.
void put_qs(uint8_t (*xqs)[4 * kRows], size_t r, const uint8_t *fqs) {
    for (size_t w = 0; w < 4; w++) std::memcpy(&xqs[w][4 * r], fqs + 4 * w, 4);
}

void get_qs(uint8_t *fqs, const uint8_t (*xqs)[4 * kRows], size_t r) {
    for (size_t w = 0; w < 4; w++) std::memcpy(fqs + 4 * w, &xqs[w][4 * r], 4);
}

void put(BlockQ5_0 &x, size_t r, const quant::BlockQ5_0 &f) {
    put_qs(x.qs, r, f.qs);
    put_qh(x.qh + 4 * r, f.qh);
    x.d[r] = f.d;
}

void get(quant::BlockQ5_0 &f, const BlockQ5_0 &x, size_t r) {
    get_qs(f.qs, x.qs, r);
    get_qh(f.qh, x.qh + 4 * r);
    f.d = x.d[r];
}

void put(BlockQ4_1 &x, size_t r, const quant::BlockQ4_1 &f) {
    put_qs(x.qs, r, f.qs);
    x.d[r] = f.d;
    x.m[r] = f.m;
}

void get(quant::BlockQ4_1 &f, const BlockQ4_1 &x, size_t r) {
    get_qs(f.qs, x.qs, r);
    f.d = x.d[r];
    f.m = x.m[r];
}

void put(BlockQ5_1 &x, size_t r, const quant::BlockQ5_1 &f) {
    put_qs(x.qs, r, f.qs);
    put_qh(x.qh + 4 * r, f.qh);
    x.d[r] = f.d;
    x.m[r] = f.m;
}

void get(quant::BlockQ5_1 &f, const BlockQ5_1 &x, size_t r) {
    get_qs(f.qs, x.qs, r);
    get_qh(f.qh, x.qh + 4 * r);
    f.d = x.d[r];
    f.m = x.m[r];
}

void put(BlockQ2_K &x, size_t r, const quant::BlockQ2_K &f) {
    for (size_t w = 0; w < 16; w++) std::memcpy(&x.qs[w][4 * r], f.qs + 4 * w, 4);
    for (size_t j = 0; j < 16; j++) x.scales[j][r] = f.scales[j];
    x.d[r] = f.d;
    x.dmin[r] = f.dmin;
}

void get(quant::BlockQ2_K &f, const BlockQ2_K &x, size_t r) {
    for (size_t w = 0; w < 16; w++) std::memcpy(f.qs + 4 * w, &x.qs[w][4 * r], 4);
    for (size_t j = 0; j < 16; j++) f.scales[j] = x.scales[j][r];
    f.d = x.d[r];
    f.dmin = x.dmin[r];
}

void put(BlockQ3_K &x, size_t r, const quant::BlockQ3_K &f) {
    for (size_t w = 0; w < 16; w++) std::memcpy(&x.qs[w][4 * r], f.qs + 4 * w, 4);
    for (size_t w = 0; w < 8; w++) std::memcpy(&x.hmask[w][4 * r], f.hmask + 4 * w, 4);
    for (int j = 0; j < 16; j++) x.sc[j][r] = int8_t(quant::q3_k_scale(f.scales, j));
    x.d[r] = f.d;
}

void get(quant::BlockQ3_K &f, const BlockQ3_K &x, size_t r) {
    for (size_t w = 0; w < 16; w++) std::memcpy(f.qs + 4 * w, &x.qs[w][4 * r], 4);
    for (size_t w = 0; w < 8; w++) std::memcpy(f.hmask + 4 * w, &x.hmask[w][4 * r], 4);
    std::memset(f.scales, 0, sizeof f.scales);
    for (int j = 0; j < 16; j++) {  // the inverse of q3_k_scale: low 4 bits by nibble, high 2 by pair
        const int v = x.sc[j][r] + 32;
        f.scales[j % 8] |= uint8_t((v & 0x0F) << (4 * (j / 8)));
        f.scales[8 + j % 4] |= uint8_t((v >> 4) << (2 * (j / 4)));
    }
    f.d = x.d[r];
}

void put(BlockIQ4_XS &x, size_t r, const quant::BlockIQ4_XS &f) {
    for (size_t j = 0; j < 8; j++)
        for (size_t c = 0; c < 4; c++) std::memcpy(&x.qs[j][c][4 * r], f.qs + 16 * j + 4 * c, 4);
    for (int j = 0; j < 8; j++) x.sc[j][r] = int8_t(quant::iq4_xs_scale(f, j));
    x.d[r] = f.d;
}

void get(quant::BlockIQ4_XS &f, const BlockIQ4_XS &x, size_t r) {
    for (size_t j = 0; j < 8; j++)
        for (size_t c = 0; c < 4; c++) std::memcpy(f.qs + 16 * j + 4 * c, &x.qs[j][c][4 * r], 4);
    f.scales_h = 0;
    std::memset(f.scales_l, 0, sizeof f.scales_l);
    for (int j = 0; j < 8; j++) {  // the inverse of iq4_xs_scale
        const int ls = x.sc[j][r] + 32;
        f.scales_l[j / 2] |= uint8_t((ls & 0x0F) << (4 * (j % 2)));
        f.scales_h |= uint16_t((ls >> 4) << (2 * j));
    }
    f.d = x.d[r];
}

// fn(X *, const F *) with null pointers of dt's x16 block X and file block F.
template <class Fn>
auto visit(llaisysDataType_t dt, Fn fn) {
    switch (dt) {
    case LLAISYS_DTYPE_Q4_K: return fn(static_cast<BlockQ4_K *>(nullptr), static_cast<const quant::BlockQ4_K *>(nullptr));
    case LLAISYS_DTYPE_Q6_K: return fn(static_cast<BlockQ6_K *>(nullptr), static_cast<const quant::BlockQ6_K *>(nullptr));
    case LLAISYS_DTYPE_Q8_0: return fn(static_cast<BlockQ8_0 *>(nullptr), static_cast<const quant::BlockQ8_0 *>(nullptr));
    case LLAISYS_DTYPE_Q5_0: return fn(static_cast<BlockQ5_0 *>(nullptr), static_cast<const quant::BlockQ5_0 *>(nullptr));
    case LLAISYS_DTYPE_Q4_1: return fn(static_cast<BlockQ4_1 *>(nullptr), static_cast<const quant::BlockQ4_1 *>(nullptr));
    case LLAISYS_DTYPE_Q5_1: return fn(static_cast<BlockQ5_1 *>(nullptr), static_cast<const quant::BlockQ5_1 *>(nullptr));
    case LLAISYS_DTYPE_Q2_K: return fn(static_cast<BlockQ2_K *>(nullptr), static_cast<const quant::BlockQ2_K *>(nullptr));
    case LLAISYS_DTYPE_Q3_K: return fn(static_cast<BlockQ3_K *>(nullptr), static_cast<const quant::BlockQ3_K *>(nullptr));
    case LLAISYS_DTYPE_IQ4_XS:
        return fn(static_cast<BlockIQ4_XS *>(nullptr), static_cast<const quant::BlockIQ4_XS *>(nullptr));
    default: fail(LLAISYS_STATUS_INTERNAL, "x16: no repacked layout for ", dtype_name(dt));
    }
}

}  // namespace

size_t block_bytes(llaisysDataType_t dt) {
    return visit(dt, [](auto *x, const auto *) { return sizeof *x; });
}

void pack(llaisysDataType_t dt, std::byte *dst, const std::byte *src, size_t rows, size_t nb) {
    LLAISYS_CHECK(rows >= 1 && rows <= kRows, LLAISYS_STATUS_INTERNAL, "x16: ", rows, " rows in a group");
    visit(dt, [&](auto *xt, const auto *ft) {
        using X = std::remove_pointer_t<decltype(xt)>;
        using F = std::remove_const_t<std::remove_pointer_t<decltype(ft)>>;
        X *x = reinterpret_cast<X *>(dst);
        const F *f = reinterpret_cast<const F *>(src);
        for (size_t b = 0; b < nb; b++) {
            std::memset(&x[b], 0, sizeof(X));
            for (size_t r = 0; r < rows; r++) put(x[b], r, f[r * nb + b]);
        }
    });
}

void unpack_row(llaisysDataType_t dt, std::byte *dst, const std::byte *group, size_t lane, size_t b0, size_t nbk) {
    visit(dt, [&](auto *xt, const auto *ft) {
        using X = std::remove_pointer_t<decltype(xt)>;
        using F = std::remove_const_t<std::remove_pointer_t<decltype(ft)>>;
        const X *x = reinterpret_cast<const X *>(group) + b0;
        F *f = reinterpret_cast<F *>(dst);
        for (size_t b = 0; b < nbk; b++) get(f[b], x[b], lane);
    });
}

}  // namespace llaisys::ops::cpu::x16
