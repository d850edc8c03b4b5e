// CUDA launcher of a decoder layer's step between the qkv product and attention, in one launch:
// RoPE on the query and key heads, then the keys and values into their cache slots. The same
// function as rope (rope_nvidia.hpp) on the q heads, rope on the k heads and kv_write
// (kv_write_nvidia.hpp), which took three launches a layer.
#pragma once

#include "llaisys.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace llaisys::ops::nvidia {

// qkv [n, stride] f32 (DEVICE): `heads` query heads of d at 0, `kv_heads` key heads at k_off,
// the values at v_off (kv_heads * d each). The q and k heads are rotated in place at pos [n]
// with inv_freq [d/2], cos and sin times attn_scale; the rotated keys and the values go to
// k_cache/v_cache [n_slots, kv_heads * d] of kvdt at slots [n] (a negative slot writes nothing).
void rope_kv_write(float *qkv, size_t stride, size_t heads, size_t kv_heads, size_t d, size_t k_off, size_t v_off,
                   const int64_t *pos, const float *inv_freq, float attn_scale, std::byte *k_cache,
                   std::byte *v_cache, llaisysDataType_t kvdt, const int64_t *slots, size_t n, cudaStream_t stream);

}  // namespace llaisys::ops::nvidia
