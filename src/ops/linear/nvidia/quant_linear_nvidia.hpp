// CUDA launcher of linear over a block-quantized weight (GGUF blocks of any format of
// /src/quant/blocks.hpp, in device memory): the GPU twin of
// /src/ops/linear/cpu/quant_weight.hpp's linear_quant_rows.
#pragma once

#include "../cpu/quant_weight.hpp"  // QuantRows
#include "llaisys.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

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

// Decode steps whose producers write the int8 GEMV's activations themselves (the norm before a
// linear, SwiGLU before down: rms_norm_quant, swiglu_quant; int8_act.cuh's format: q [m, k] int8,
// d [m, k / 32] f32), skipping the quantizer linear_quant would launch. Whether linear_quant
// would take the int8 GEMV for this weight and m rows (m <= kQuantGemvRows, k a multiple of 32,
// the int8 kernels on, every non-empty segment Q8_0, Q4_K or Q6_K and aligned for them):
bool linear_quant_takes_int8(const cpu::QuantRows *segs, size_t n_segs, size_t k, size_t m);
// linear_quant's quantizer: q, d from x [m, k] f32 (k a multiple of 32). DEVICE buffers.
void quantize_act(int8_t *q, float *d, const float *x, size_t m, size_t k, cudaStream_t stream);
// out [m, n] (f32) = q, d @ W^T + bias, or out += that with accumulate (the bits of a separate
// add of linear_quant's product): linear_quant's int8 GEMV over activations already quantized.
// Throws INVALID_ARGUMENT where linear_quant_takes_int8 does not hold.
void linear_quant_int8(float *out, const int8_t *q, const float *d, const cpu::QuantRows *segs, size_t n_segs,
                       size_t n, size_t k, const std::byte *bias, llaisysDataType_t bias_dt, size_t m,
                       bool accumulate, int device_id, cudaStream_t stream);

}  // namespace llaisys::ops::nvidia
