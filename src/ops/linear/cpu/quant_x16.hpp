// Block-quantized weight rows repacked 16 at a time ("x16"): the layout QuantWeight keeps the
// formats below in, and the int8 kernels' best stream.
//
// In the file's own layout (one row after another) an int8 kernel holds one weight row per
// vector and spends as many instructions per superblock on that row's scales, offsets and
// horizontal sums as on its products, whatever the batch (quant_dot.inc: ~73 instructions per
// Q4_K superblock and activation row). Here 16 rows' quants are interleaved 4 bytes at a time,
// so one 512-bit vpdpbusd multiplies 4 k of 16 rows by one broadcast of 4 activation bytes,
// each lane is one output (no horizontal sums), and a sub-block's 16 scales are one vector:
// about a fifth of the instructions per superblock and row (llama.cpp's "repack" layouts,
// ggml-cpu/repack.cpp, do the same with 8 rows).
//
// A segment of R rows becomes ceil(R / 16) groups, each nb = k / block blocks of 16 rows (a
// group's blocks in k order, so decode reads one sequential stream a group); rows past R in the
// last group are zero. Per block, by format:
//
//   Q4_K (2368 bytes; 16 x 144 = 2304 in the file: the scales are kept unpacked, one byte each)
//     fp16 d[16], dmin[16]               row r's d and dmin
//     u8   sc[8][16], mn[8][16]          sub-block j's 6-bit scale and min of row r
//     u8   qs[4][8][64]                  qs[p][c][4 r + i] = the file's qs[32 p + 4 c + i] of row r:
//                                        low nibble element 64 p + 4 c + i, high nibble + 32
//   Q6_K (3392 bytes; 16 x 210 = 3360 in the file, padded to whole cache lines)
//     u8   ql[32][64]                    ql[w][4 r + i] = the file's ql[4 w + i] of row r
//     u8   qh[16][64]                    qh[w][4 r + i] = the file's qh[4 w + i] of row r
//     i8   sc[16][16]                    sub-block j's scale of row r
//     fp16 d[16]                         row r's d
//
//   Q8_0 (544 bytes, as in the file)
//     u8   qs[8][64]                     qs[c][4 r + i] = the file's qs[4 c + i] of row r, plus 128
//                                        (vpdpbusd multiplies unsigned by signed bytes)
//     fp16 d[16]
//
//   Q5_0 (352 bytes, as in the file)
//     u8   qs[4][64]                     qs[w][4 r + i] = the file's qs[4 w + i] of row r
//     u8   qh[64]                        bit c of qh[4 r + i] = fifth bit of element 4 c + i of row r
//     fp16 d[16]
//
//   Q4_1 (320 bytes, as in the file): Q5_0's qs and d without qh, then
//     fp16 m[16]                         row r's min
//   Q5_1 (384 bytes, as in the file): Q5_0's block, then m[16] as Q4_1's
//
//   Q2_K (1344 bytes, as in the file)
//     u8   qs[16][64]                    qs[w][4 r + i] = the file's qs[4 w + i] of row r
//     u8   scales[16][16]                the file's scales[j] of row r (scale low nibble, min high)
//     fp16 d[16], dmin[16]
//   Q3_K (1856 bytes; 16 x 110 = 1760 in the file: the scales kept unpacked, padded to whole lines)
//     u8   qs[16][64]                    as Q2_K's
//     u8   hmask[8][64]                  hmask[w][4 r + i] = the file's hmask[4 w + i] of row r
//     i8   sc[16][16]                    sub-block j's scale (-32 .. 31) of row r
//     fp16 d[16]
//   IQ4_XS (2240 bytes; 16 x 136 = 2176 in the file: the scales kept unpacked, padded)
//     u8   qs[8][4][64]                  qs[j][c][4 r + i] = the file's qs[16 j + 4 c + i] of row r:
//                                        low nibble element 32 j + 4 c + i, high nibble + 16
//     i8   sc[8][16]                     sub-block j's scale (ls - 32) of row r
//     fp16 d[16]
// (Q2_K, Q3_K and IQ4_XS are repacked only for the 512-bit vpdpbusd kernels, as Q6_K.)
//
// (The 32-blocks' x16 blocks are not whole cache lines: their vector loads may cross one.)
//
// pack and unpack_row are exact inverses on any bytes (the file's block is rebuilt bit for bit),
// so the float path, the AMX tiles and the embedding rows read x16 segments through unpack_row
// with the dequantizers they already have.
#pragma once

#include "../../../quant/blocks.hpp"
#include "llaisys.h"

#include <cstddef>
#include <cstdint>

namespace llaisys::ops::cpu::x16 {

constexpr size_t kRows = 16;

struct BlockQ4_K {
    fp16_t d[kRows], dmin[kRows];
    uint8_t sc[8][kRows], mn[8][kRows];
    uint8_t qs[4][8][4 * kRows];
};
static_assert(sizeof(BlockQ4_K) == 2368 && sizeof(BlockQ4_K) % 64 == 0);

struct BlockQ6_K {
    uint8_t ql[32][4 * kRows];
    uint8_t qh[16][4 * kRows];
    int8_t sc[16][kRows];
    fp16_t d[kRows];
    uint8_t pad[32];
};
static_assert(sizeof(BlockQ6_K) == 3392 && sizeof(BlockQ6_K) % 64 == 0);

struct BlockQ8_0 {
    uint8_t qs[8][4 * kRows];
    fp16_t d[kRows];
};
static_assert(sizeof(BlockQ8_0) == 544);

struct BlockQ5_0 {
    uint8_t qs[4][4 * kRows];
    uint8_t qh[4 * kRows];
    fp16_t d[kRows];
};
static_assert(sizeof(BlockQ5_0) == 352);

struct BlockQ4_1 {
    uint8_t qs[4][4 * kRows];
    fp16_t d[kRows], m[kRows];
};
static_assert(sizeof(BlockQ4_1) == 320);

struct BlockQ5_1 {
    uint8_t qs[4][4 * kRows];
    uint8_t qh[4 * kRows];
    fp16_t d[kRows], m[kRows];
};
static_assert(sizeof(BlockQ5_1) == 384);

struct BlockQ2_K {
    uint8_t qs[16][4 * kRows];
    uint8_t scales[16][kRows];
    fp16_t d[kRows], dmin[kRows];
};
static_assert(sizeof(BlockQ2_K) == 1344 && sizeof(BlockQ2_K) % 64 == 0);

struct BlockQ3_K {
    uint8_t qs[16][4 * kRows];
    uint8_t hmask[8][4 * kRows];
    int8_t sc[16][kRows];
    fp16_t d[kRows];
    uint8_t pad[32];
};
static_assert(sizeof(BlockQ3_K) == 1856 && sizeof(BlockQ3_K) % 64 == 0);

struct BlockIQ4_XS {
    uint8_t qs[8][4][4 * kRows];
    int8_t sc[8][kRows];
    fp16_t d[kRows];
    uint8_t pad[32];
};
static_assert(sizeof(BlockIQ4_XS) == 2240 && sizeof(BlockIQ4_XS) % 64 == 0);

// Bytes of one x16 block of dtype dt (dt supported).
size_t block_bytes(llaisysDataType_t dt);
// dst [nb] x16 blocks (one group) from the file's rows src [rows][nb blocks], 1 <= rows <= 16;
// lanes from rows on are zero.
void pack(llaisysDataType_t dt, std::byte *dst, const std::byte *src, size_t rows, size_t nb);
// dst [nbk] the file's blocks [b0, b0 + nbk) of lane r of group (x16 blocks of dtype dt).
void unpack_row(llaisysDataType_t dt, std::byte *dst, const std::byte *group, size_t lane, size_t b0, size_t nbk);

}  // namespace llaisys::ops::cpu::x16
