#pragma once

#include "llaisys.h"

#include <cstddef>

namespace llaisys::ops::cpu {

// out [q_len, heads, dv] = softmax(scale * q k^T, causal) v with
// q [q_len, heads, d], k [kv_len, kv_heads, d], v [kv_len, kv_heads, dv].
// Query i is at position kv_len - q_len + i; head h reads kv head h / (heads / kv_heads).
void self_attention(std::byte *out, const std::byte *q, const std::byte *k, const std::byte *v,
                    llaisysDataType_t dtype, size_t q_len, size_t kv_len, size_t heads, size_t kv_heads,
                    size_t d, size_t dv, float scale);

}  // namespace llaisys::ops::cpu
