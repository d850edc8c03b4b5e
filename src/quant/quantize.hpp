// Quantization into the GGUF block formats (blocks.hpp), scalar reference code.
//   Q4_0, Q5_0, Q8_0: bit-identical to gguf-py's gguf.quants.quantize (which matches
//     llama.cpp's quantize_row_*_ref): d = the signed value of largest magnitude / -8 (-16),
//     or max|x| / 127, computed in f32 and stored rounded to f16; q from 1/d unrounded.
//   Q4_K, Q5_K, Q6_K: llama.cpp's reference quantizers (quantize_row_q{4,5,6}_K_ref with
//     make_qkx2_quants / make_qx_quants), the same float operations in the same order, so
//     the bytes match llama.cpp's for finite input.
// Inputs must be finite (the row functions check and throw INVALID_ARGUMENT naming the
// element); the per-block functions assume it.
#pragma once

#include "blocks.hpp"

#include <cstddef>

namespace llaisys::quant {

// One block from its kBlock32 or kBlockK f32 values: x [block size].
void quantize_block(const float *x, BlockQ4_0 &b);
void quantize_block(const float *x, BlockQ5_0 &b);
void quantize_block(const float *x, BlockQ8_0 &b);
void quantize_block(const float *x, BlockQ4_K &b);
void quantize_block(const float *x, BlockQ5_K &b);
void quantize_block(const float *x, BlockQ6_K &b);

// One row: x [k] f32 -> blocks (row_bytes(dt, k) bytes). k must be a multiple of the block size.
void quantize_row(const float *x, llaisysDataType_t dt, void *blocks, size_t k);

// rows rows, parallel over rows (OpenMP): in [rows, k] of float dtype idt (f32, f16 or bf16,
// widened to f32 exactly) -> blocks [rows, row_bytes(dt, k)] bytes.
void quantize_rows(const void *in, llaisysDataType_t idt, void *blocks, llaisysDataType_t dt, size_t rows, size_t k);

}  // namespace llaisys::quant
