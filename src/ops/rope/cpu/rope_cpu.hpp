#pragma once

#include "llaisys.h"

#include <cstddef>
#include <cstdint>

namespace llaisys::ops::cpu {

// out/in [n, heads, d] with `stride` elements between consecutive tokens (heads * d when
// contiguous), pos [n]; HF rotate-half RoPE with base theta. out may alias in.
// Positions may be negative (a rotation backwards, used to shift cached keys).
void rope(std::byte *out, const std::byte *in, const int64_t *pos, llaisysDataType_t dtype, size_t n,
          size_t heads, size_t d, size_t stride, float theta);

}  // namespace llaisys::ops::cpu
