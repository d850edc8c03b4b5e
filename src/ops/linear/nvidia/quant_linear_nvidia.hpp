// CUDA launcher of linear over a block-quantized weight (GGUF Q4_0, Q5_0, Q8_0, Q4_K, Q5_K,
// Q6_K blocks in device memory, see /src/quant/blocks.hpp): the GPU twin of
// /src/ops/linear/cpu/quant_weight.hpp's linear_quant_rows.
#pragma once

#include "../cpu/quant_weight.hpp"  // QuantRows
#include "llaisys.h"

#include <cuda_runtime_api.h>

#include <cstddef>

namespace llaisys::ops::nvidia {

// Activation rows up to which the dequantize-in-register GEMV runs; past it, prefill.
constexpr size_t kQuantGemvRows = 8;

// out [m, n] = in [m, k] @ W^T + bias [n] (bias_dt; may be null), W [n, k] given as row
// ranges segs [n_segs] (a host array, ordered by row0, together covering [0, n) once; each
// segment's data a DEVICE pointer to [rows][k / block] GGUF blocks of its dtype). out and in
// of dtype act (f32, f16 or bf16), DEVICE buffers.
//   m <= kQuantGemvRows (decode): a warp per weight row (four warps share a row, split-K, when
//     the launch has fewer rows than 32 per SM) stages the row's blocks in shared memory (16-byte
//     loads) and multiplies its values with every activation row in f32 (FMA, f32 accumulation,
//     a warp reduction); 16-bit activations are widened to f32 first (exact). One launch covers
//     up to four consecutive segments of one format (q|k|v, gate|up). The result is
//     W_dequantized x in in f32, up to the summation order and one rounding of each weight.
//   m > kQuantGemvRows (prefill): W is dequantized panel by panel (at most kPanelBytes) into
//     a scratch buffer in bf16 (f16 for f16 activations), the activations rounded to that
//     dtype once per call, and each panel multiplied through cublasGemmEx (tensor cores, f32
//     accumulation) into the panel's output columns: the error of one 16-bit rounding of
//     each operand, as the dense GPU linear over bf16 weights.
// The bias is added in f32 and a 16-bit out is rounded once. One cuBLAS handle and one scratch
// buffer per (device, thread), grown on demand (the device is synchronized before an old buffer
// is released); asynchronous on `stream` otherwise. The caller made device_id current.
// Throws SHAPE_MISMATCH for segments that do not tile [0, n) or a k that is not a multiple of
// a segment's block size, UNSUPPORTED for m, n or k of 2^31 or more.
void linear_quant(std::byte *out, const std::byte *in, llaisysDataType_t act, const cpu::QuantRows *segs,
                  size_t n_segs, size_t n, size_t k, const std::byte *bias, llaisysDataType_t bias_dt, size_t m,
                  int device_id, cudaStream_t stream);

}  // namespace llaisys::ops::nvidia
