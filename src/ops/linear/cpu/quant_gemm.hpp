// The quantized linear's float path for many activation rows (prefill, big batches): weight
// rows dequantized to f32 a k-block at a time and run through the packed GEMM's register tiles
// (gemm_packed_kernel.inc), instead of the int8 dot products (quant_kernels.hpp). It is more
// exact (no activation rounding) and, past a measured number of rows per format and ISA,
// faster: linear_quant_rows (quant_weight.cpp) dispatches on the plan's crossover
// (quant_plan.hpp: QuantPlan::f32_min_rows, measured per format and ISA in quant_plan.cpp).
#pragma once

#include "quant_weight.hpp"

namespace llaisys::ops::cpu {

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
