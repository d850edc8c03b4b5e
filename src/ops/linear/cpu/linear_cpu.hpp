#pragma once

#include "llaisys.h"

#include <cstddef>

namespace llaisys::ops::cpu {

// out [m, n] = in [m, k] @ weight[n, k]^T + bias [n] (bias may be null); f32 accumulation.
void linear(std::byte *out, const std::byte *in, const std::byte *weight, const std::byte *bias,
            llaisysDataType_t dtype, size_t m, size_t n, size_t k);

}  // namespace llaisys::ops::cpu
