#pragma once

#include "llaisys.h"

#include <cstddef>
#include <cstdint>

namespace llaisys::ops::cpu {

// For each row of vals [rows, n]: the first index of its maximum into max_idx [rows] and
// the value into max_val [rows]. NaN is taken as the maximum (like torch.argmax).
void argmax(int64_t *max_idx, std::byte *max_val, const std::byte *vals, llaisysDataType_t dtype, size_t rows,
            size_t n);

}  // namespace llaisys::ops::cpu
