// CUDA launcher of the KV store: this step's keys and values into their cache slots.
#pragma once

#include "llaisys.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace llaisys::ops::nvidia {

// For t < n: k_cache[slots[t]] = rows[t, k_off : k_off + row_elems], v_cache[slots[t]] =
// rows[t, v_off : v_off + row_elems], converted from act to kvdt (round to nearest even);
// rows are `row_stride` elements apart. k_cache/v_cache are [n_slots, row_elems] of dtype
// kvdt. All DEVICE memory. Slots are not range-checked here (the caller built them); a
// negative slot (padding) writes nothing.
void kv_write(std::byte *k_cache, std::byte *v_cache, llaisysDataType_t kvdt, const std::byte *rows,
              llaisysDataType_t act, size_t row_stride, size_t k_off, size_t v_off, const int64_t *slots,
              size_t n, size_t row_elems, cudaStream_t stream);

}  // namespace llaisys::ops::nvidia
