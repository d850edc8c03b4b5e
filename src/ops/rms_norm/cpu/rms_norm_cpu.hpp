#pragma once

#include "llaisys.h"

#include <cstddef>

namespace llaisys::ops::cpu {

// out [m, d] = in [m, d] * rsqrt(mean(in^2) + eps) * weight [d]; out may alias in.
void rms_norm(std::byte *out, const std::byte *in, const std::byte *weight, llaisysDataType_t dtype, size_t m,
              size_t d, float eps);

}  // namespace llaisys::ops::cpu
