// CUDA launchers of RMSNorm and the fused residual add + RMSNorm
// (see /src/ops/rms_norm/cpu/rms_norm_cpu.hpp; same semantics, DEVICE buffers).
#pragma once

#include "llaisys.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace llaisys::ops::nvidia {

// out [m, d] = in [m, d] * 1/sqrt(mean(in^2) + eps) * weight [d]; out may alias in.
void rms_norm(std::byte *out, const std::byte *in, llaisysDataType_t act, const std::byte *weight,
              llaisysDataType_t wdt, size_t m, size_t d, float eps, cudaStream_t stream);

// residual [m, d] += in [m, d] (rounded to act), then out = rms_norm(residual);
// out must not alias residual or in.
void add_rms_norm(std::byte *out, std::byte *residual, const std::byte *in, llaisysDataType_t act,
                  const std::byte *weight, llaisysDataType_t wdt, size_t m, size_t d, float eps,
                  cudaStream_t stream);

// rms_norm of f32 rows in [m, d] written in the int8 GEMV's activation format instead (the bits
// of rms_norm, then quantize_act: quant_linear_nvidia.hpp): q [m, d] int8, d_out [m, d / 32] f32.
// d must be a multiple of 32 (INVALID_ARGUMENT otherwise).
void rms_norm_quant(int8_t *q, float *d_out, const float *in, const std::byte *weight, llaisysDataType_t wdt,
                    size_t m, size_t d, float eps, cudaStream_t stream);

// Per-head RMSNorm in place over x [n, heads, d] (tokens `stride` elements apart), w [d]:
// the semantics of cpu::rms_norm_heads (Qwen3RMSNorm's rounding), DEVICE buffers.
void rms_norm_heads(std::byte *x, llaisysDataType_t dtype, const std::byte *w, llaisysDataType_t wdt, size_t n,
                    size_t heads, size_t d, size_t stride, float eps, cudaStream_t stream);

}  // namespace llaisys::ops::nvidia
