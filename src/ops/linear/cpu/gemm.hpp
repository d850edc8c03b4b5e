// SIMD GEMM entry points (one per instruction set); linear_cpu.cpp picks one at run time.
#pragma once

#include <cstddef>
#include <cstdint>

namespace llaisys::ops::cpu {

// Packed weights (packed.hpp): output columns per panel for each ISA, and the k block the
// packed GEMM walks a panel in (a KC x NR block of bf16 is 16 KiB at NR = 32: it stays in L1
// while every row tile of the activations passes over it).
constexpr size_t kPackedNrAvx2 = 16;
constexpr size_t kPackedNrAvx512 = 32;
constexpr size_t kPackedKc = 256;
// The logit screen's int8 copy of W comes in blocks of 4 rows, each block [kpad / 32][4][32]:
// element (i, kk) at (i / 4) 4 kpad + (kk / 32) 128 + (i % 4) 32 + kk % 32 (kpad a multiple of
// 64, rows zero-padded to it and to a multiple of 4), so that a block is read as one run.
constexpr size_t kScreenGroup = 32;

namespace avx2 {
void linear_f32(float *out, const float *x, const void *w, const void *bias, int wdt, size_t m, size_t n, size_t k);
// out [m, n] = x [m, k] @ W^T + bias [n] (or null, dtype wdt); W packed for NR = 16. With
// sel, only the n_sel panels it lists are computed (their columns of out written, each value
// as the whole product would give it); null sel: every panel.
void linear_packed_f32(float *out, const float *x, const void *panels, const void *bias, int wdt, size_t m,
                       size_t n, size_t k, const uint32_t *sel = nullptr, size_t n_sel = 0);
// The logit screen's integer dot products (logit_screen.cpp): for the blocks [b0, b1) of w
// (int8, 4 rows each, stored as described at kScreenGroup), dots [m][4 (b1 - b0)] = those rows
// . u [m][kpad] (int16); kpad a multiple of 64.
void screen_dots(int32_t *dots, const int16_t *u, const int8_t *w, size_t m, size_t kpad, size_t b0, size_t b1);
// c [rows][NR] (+= when accumulate) a [rows][lda] (its first kc columns) @ blk [kc][NR], all f32,
// NR this ISA's kPackedNr*: the packed kernel's register tiles over any A. The quantized linear's
// float path (quant_gemm.cpp) passes dequantized weight rows as a and a panel of its packed
// activations as blk.
void panel_block_f32(float *c, const float *a, size_t lda, size_t rows, const float *blk, size_t kc, bool accumulate);
}
namespace avx512 {
void linear_f32(float *out, const float *x, const void *w, const void *bias, int wdt, size_t m, size_t n, size_t k);
// The same with W packed for NR = 32.
void linear_packed_f32(float *out, const float *x, const void *panels, const void *bias, int wdt, size_t m,
                       size_t n, size_t k, const uint32_t *sel = nullptr, size_t n_sel = 0);
void screen_dots(int32_t *dots, const int16_t *u, const int8_t *w, size_t m, size_t kpad, size_t b0, size_t b1);
void panel_block_f32(float *c, const float *a, size_t lda, size_t rows, const float *blk, size_t kc, bool accumulate);
}
namespace avx512bf16 {
// out [m, n] = bf16(x) [m, k] @ W^T + bias [n] (bf16, or null); W bf16 in pair panels
// (packed.hpp), NR = 32. xb [m, ceil(k / 2)] is the caller's scratch for the rounded x.
// sel / n_sel as for linear_packed_f32.
void linear_packed_bf16(float *out, const float *x, uint32_t *xb, const void *panels, const void *bias, size_t m,
                        size_t n, size_t k, const uint32_t *sel = nullptr, size_t n_sel = 0);
}
}  // namespace llaisys::ops::cpu
