// Elementwise binary kernels over contiguous buffers of n elements.
#pragma once

#include "llaisys.h"

#include <cstddef>

namespace llaisys::ops::cpu {

enum class BinaryOp { Add, Mul };

// out[i] = a[i] (op) b[i], computed in f32 and rounded to the dtype.
void binary(BinaryOp op, std::byte *out, const std::byte *a, const std::byte *b, llaisysDataType_t dtype,
            size_t n);

}  // namespace llaisys::ops::cpu
