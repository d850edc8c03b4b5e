// CUDA launcher of argmax (see /src/ops/argmax/cpu/argmax_cpu.hpp; same semantics, DEVICE buffers).
#pragma once

#include "llaisys.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace llaisys::ops::nvidia {

// For each row of vals [rows, n] (n >= 1): the first index of its maximum into max_idx [rows]
// and that element's bits into max_val [rows]. NaN is the maximum (the first NaN wins).
void argmax(int64_t *max_idx, std::byte *max_val, const std::byte *vals, llaisysDataType_t dtype, size_t rows,
            size_t n, cudaStream_t stream);

}  // namespace llaisys::ops::nvidia
