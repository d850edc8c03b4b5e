#pragma once

#include <cstddef>
#include <cstdint>

namespace llaisys::ops::cpu {

// out [n, d] = rows index[n] of weight [vocab, d]; elements of `elsize` bytes.
// Throws OUT_OF_RANGE (before writing) if an index is outside [0, vocab).
void embedding(std::byte *out, const int64_t *index, const std::byte *weight, size_t elsize, size_t n,
               size_t vocab, size_t d);

}  // namespace llaisys::ops::cpu
