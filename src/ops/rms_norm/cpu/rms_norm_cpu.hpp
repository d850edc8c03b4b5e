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

}  // namespace llaisys::ops::cpu
