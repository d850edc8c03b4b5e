// CUDA launcher of causal self-attention (see /src/ops/self_attention/cpu/self_attention_cpu.hpp).
#pragma once

#include "llaisys.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace llaisys::ops::nvidia {

// out [q_len, heads, dv] = softmax(scale * q k^T, causal) v with q [q_len, heads, d],
// k [kv_len, kv_heads, d], v [kv_len, kv_heads, dv] (DEVICE, one dtype); q_len <= kv_len;
// query i sits at position kv_len - q_len + i. The paged kernel over a dense, one-row view.
void self_attention(std::byte *out, const std::byte *q, const std::byte *k, const std::byte *v,
                    llaisysDataType_t dtype, size_t q_len, size_t kv_len, size_t heads, size_t kv_heads,
                    size_t d, size_t dv, float scale, cudaStream_t stream);

}  // namespace llaisys::ops::nvidia
