#pragma once

#include "llaisys.h"

#include <cstddef>
#include <cstdint>

namespace llaisys::ops::cpu {

// out/in [n, heads, d], pos [n]; HF rotate-half RoPE with base theta. out may alias in.
// Throws OUT_OF_RANGE for a negative position (before writing).
void rope(std::byte *out, const std::byte *in, const int64_t *pos, llaisysDataType_t dtype, size_t n,
          size_t heads, size_t d, float theta);

}  // namespace llaisys::ops::cpu
