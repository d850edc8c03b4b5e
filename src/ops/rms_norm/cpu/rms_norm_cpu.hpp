#pragma once

#include "llaisys.h"

#include <cstddef>

namespace llaisys::ops::cpu {

// out [m, d] = in [m, d] * rsqrt(mean(in^2) + eps) * weight [d]; out may alias in.
// in/out have dtype `act`, weight dtype `wdt`.
void rms_norm(std::byte *out, const std::byte *in, llaisysDataType_t act, const std::byte *weight,
              llaisysDataType_t wdt, size_t m, size_t d, float eps);

}  // namespace llaisys::ops::cpu
