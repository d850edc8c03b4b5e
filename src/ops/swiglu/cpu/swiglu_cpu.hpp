#pragma once

#include "llaisys.h"

#include <cstddef>

namespace llaisys::ops::cpu {

// out[r, i] = up[r, i] * silu(gate[r, i]) for rows r < rows, columns i < cols; rows of gate and
// up are `in_stride` elements apart, rows of out `out_stride` apart.
void swiglu(std::byte *out, const std::byte *gate, const std::byte *up, llaisysDataType_t dtype, size_t rows,
            size_t cols, size_t in_stride, size_t out_stride);

}  // namespace llaisys::ops::cpu
