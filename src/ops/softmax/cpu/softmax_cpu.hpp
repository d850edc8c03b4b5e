#pragma once

#include "llaisys.h"

#include <cstddef>

namespace llaisys::ops::cpu {

// out [rows, n] = softmax of each row of in [rows, n]; out may alias in.
void softmax(std::byte *out, const std::byte *in, llaisysDataType_t dtype, size_t rows, size_t n);

}  // namespace llaisys::ops::cpu
