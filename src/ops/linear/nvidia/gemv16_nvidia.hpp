// The decode GEMV over 16-bit weights: out [m, n] (f32) = in [m, k] (f32) @ W [n, k]^T (bf16 or
// f16) + bias [n], for m <= kGemv16MaxRows activation rows. cuBLAS at m = 1 read the 1.5B's
// weights at about half the copy bandwidth and needed its input rounded to the weight dtype
// by a separate kernel first (doc/nvidia.md); this kernel reads the f32 activations as they
// are (each product exact in f32, as on the CPU), streams every weight row once with 16-byte
// loads, several in flight per lane, and adds the bias in its epilogue.
//
// The swiglu form reads gate rows [0, I) and up rows [I, 2I) of one fused weight and writes
// out [m, I] = silu(gate) * up, so the MLP's gate|up product never reaches memory.
#pragma once

#include "llaisys.h"

#include <cuda_runtime_api.h>

#include <cstddef>

namespace llaisys::ops::nvidia {

constexpr size_t kGemv16MaxRows = 8;

// Whether gemv16 serves this call: 1 <= m <= kGemv16MaxRows, f32 activations, bf16/f16
// weights, k a positive multiple of 8, in, weight and norm_w (when given) 16-byte aligned, and
// not turned off by LLAISYS_CUDA_GEMV=0 (read once).
bool gemv16_serves(llaisysDataType_t act, llaisysDataType_t wdt, size_t m, size_t k, const void *in,
                   const void *weight, const void *norm_w = nullptr);

// out [m, n] = in [m, k] @ weight [n, k]^T (+ bias [n] of wdt when not null); asynchronous on
// stream. Only for calls gemv16_serves accepts (so for all below).
void gemv16(float *out, const float *in, const std::byte *weight, const std::byte *bias, llaisysDataType_t wdt,
            size_t m, size_t n, size_t k, cudaStream_t stream);

// out [m, n] = rms_norm(x) @ weight^T (+ bias): each row of x [m, k] normalised as the RMSNorm
// op does, x * g / sqrt(mean(x^2) + eps) with its weight g [k] (norm_w, of wdt), inside the
// GEMV: no norm launch and no normalised copy (the decoder's folded norms, backend.hpp).
void gemv16_norm(float *out, const float *x, const std::byte *norm_w, float eps, const std::byte *weight,
                 const std::byte *bias, llaisysDataType_t wdt, size_t m, size_t n, size_t k, cudaStream_t stream);

// out [m, n] += in @ weight^T (+ bias): the residual add in the epilogue.
void gemv16_accumulate(float *out, const float *in, const std::byte *weight, const std::byte *bias,
                       llaisysDataType_t wdt, size_t m, size_t n, size_t k, cudaStream_t stream);

// out [m, I] = silu(in @ W[0:I]^T) * (in @ W[I:2I]^T) over weight [2I, k]; with norm_w, of the
// RMS-normalised rows of `in` as gemv16_norm.
void gemv16_swiglu(float *out, const float *in, const std::byte *weight, llaisysDataType_t wdt, size_t m,
                   size_t I, size_t k, cudaStream_t stream, const std::byte *norm_w = nullptr, float eps = 0.0f);

}  // namespace llaisys::ops::nvidia
