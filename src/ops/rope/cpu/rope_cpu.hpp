#pragma once

#include "llaisys.h"

#include <cstddef>
#include <cstdint>

namespace llaisys::ops::cpu {

// out/in [n, heads, d] with `stride` elements between consecutive tokens (heads * d when
// contiguous), pos [n]; HF rotate-half RoPE: pair (x[j], x[j + d/2]) rotated by the angle
// pos * inv_freq[j] (f32), cos and sin multiplied by attn_scale (1 but for YaRN).
// inv_freq [d/2] is a host table (rope_freqs.hpp). out may alias in.
// Positions may be negative (a rotation backwards, used to shift cached keys).
void rope(std::byte *out, const std::byte *in, const int64_t *pos, llaisysDataType_t dtype, size_t n,
          size_t heads, size_t d, size_t stride, const float *inv_freq, float attn_scale);

// The same with the default table inv_freq[j] = 1 / theta^(2j/d) and attn_scale 1.
void rope(std::byte *out, const std::byte *in, const int64_t *pos, llaisysDataType_t dtype, size_t n,
          size_t heads, size_t d, size_t stride, float theta);

}  // namespace llaisys::ops::cpu
