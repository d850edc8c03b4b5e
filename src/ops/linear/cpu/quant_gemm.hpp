// The quantized linear's float path for many activation rows (prefill, big batches): weight
// rows dequantized to f32 a k-block at a time and run through the packed GEMM's register tiles
// (gemm_packed_kernel.inc), instead of the int8 dot products (quant_kernels.hpp). It is more
// exact (no activation rounding) and, past a measured number of rows per format and ISA,
// faster: linear_quant_rows (quant_weight.cpp) dispatches on quant_f32_min_rows.
#pragma once

#include "quant_weight.hpp"

namespace llaisys::ops::cpu {

// The smallest m at which the float path beats the int8 one for weight rows of dtype dt under
// the active ISA (SIZE_MAX: never); measured, the figures are in quant_gemm.cpp.
// LLAISYS_QUANT_F32_ROWS=<m> (read once per process) puts every format's crossover at m: 0
// forces the float path, a huge value the int8 one (tests and tools/bench_quant_linear.py
// --crossover use it to run both paths on one shape).
// x16: for rows in the x16 layout (quant_x16.hpp), whose int8 kernels hold on far longer.
size_t quant_f32_min_rows(llaisysDataType_t dt, bool x16 = false);

// out [m, n] f32 = x [m, k] f32 @ W^T (+ bias [n] of float dtype bias_dt when not null), W
// the row ranges segs [n_segs] as linear_quant_rows takes them (already validated there).
void linear_quant_f32(float *out, const float *x, const QuantRows *segs, size_t n_segs, size_t n, size_t k,
                      const std::byte *bias, llaisysDataType_t bias_dt, size_t m);

// The same on AMX tiles, weights and activations rounded to bf16 (quant_amx.cpp): only where
// cpu_uses_amx(); linear_quant_f32 hands its calls over.
namespace amx {
void linear_quant_bf16(float *out, const float *x, const QuantRows *segs, size_t n_segs, size_t n, size_t k,
                       const std::byte *bias, llaisysDataType_t bias_dt, size_t m);
}

}  // namespace llaisys::ops::cpu
