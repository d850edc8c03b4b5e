#pragma once

#include "llaisys.h"

#include <cstddef>

namespace llaisys::ops::cpu {

// out [m, d] = in [m, d] * rsqrt(mean(in^2) + eps) * weight [d]; out may alias in.
// in/out have dtype `act`, weight dtype `wdt`.
void rms_norm(std::byte *out, const std::byte *in, llaisysDataType_t act, const std::byte *weight,
              llaisysDataType_t wdt, size_t m, size_t d, float eps);

// The residual step of a transformer block in one pass over the rows:
// residual [m, d] += in [m, d] (rounded to `act`), then out [m, d] = rms_norm(residual) as
// above. The same values as an add followed by rms_norm; out must not alias residual or in.
void add_rms_norm(std::byte *out, std::byte *residual, const std::byte *in, llaisysDataType_t act,
                  const std::byte *weight, llaisysDataType_t wdt, size_t m, size_t d, float eps);

// Per-head RMSNorm in place (Qwen3's q_norm / k_norm, before RoPE): for every token i < n and
// head h < heads, the head vector x[i, h, :] (d elements, tokens `stride` elements apart)
// becomes round(x * rsqrt(mean(x^2) + eps)) * w, as transformers' Qwen3RMSNorm: f32 maths,
// the normalised value rounded to `dtype` before the multiplication by w [d] (dtype wdt).
void rms_norm_heads(std::byte *x, llaisysDataType_t dtype, const std::byte *w, llaisysDataType_t wdt, size_t n,
                    size_t heads, size_t d, size_t stride, float eps);

}  // namespace llaisys::ops::cpu
