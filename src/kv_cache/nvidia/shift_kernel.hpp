// CUDA launchers of the key re-rotations: SLOT seq_add's and BLOCK copy_shift's (KVCache on a GPU).
#pragma once

#include "llaisys.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace llaisys::kv::nvidia {

// Rotates the keys of every (layer, cell) pair by `delta` positions, in one launch on `stream`:
// for each layer l < n_layers and i < n_cells, the row k + l * layer_stride + cells[i] * heads * d
// ([heads, d] elements of dtype) gets the rotate-half RoPE of angle delta * inv_freq[j], as
// ops::cpu::rope does with pos = delta and attn_scale 1. All pointers are DEVICE memory:
// k [n_layers, n_slots, heads, d] (layer_stride = n_slots * heads * d elements), cells [n_cells]
// (distinct, each < n_slots), inv_freq [d / 2].
void rotate_cells(std::byte *k, llaisysDataType_t dtype, size_t n_layers, size_t layer_stride, const int32_t *cells,
                  size_t n_cells, size_t heads, size_t d, const float *inv_freq, int64_t delta, cudaStream_t stream);

// Cache reuse (KVCache::copy_shift on a GPU), in one launch on `stream`: for each layer
// l < n_layers and i < n, the V row of slot dst[i] gets slot src[i]'s, and its K row slot
// src[i]'s rotated by delta[i] positions (copied as is for delta 0), with rotate_cells' math.
// All pointers are DEVICE memory: k and v [n_layers, n_slots, heads, d] (layer_stride as above),
// src, dst [n] (in [0, n_slots); the dst distinct and none a src), delta [n], inv_freq [d / 2]
// (may be NULL when every delta is 0).
void copy_shift(std::byte *k, std::byte *v, llaisysDataType_t dtype, size_t n_layers, size_t layer_stride,
                const int32_t *src, const int32_t *dst, const int64_t *delta, size_t n, size_t heads, size_t d,
                const float *inv_freq, cudaStream_t stream);

}  // namespace llaisys::kv::nvidia
