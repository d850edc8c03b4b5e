// CUDA launcher of the SLOT layout's key re-rotation (KVCache::seq_add on a GPU).
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

}  // namespace llaisys::kv::nvidia
