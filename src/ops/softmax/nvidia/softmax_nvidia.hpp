// CUDA launcher of softmax (see /src/ops/softmax/cpu/softmax_cpu.hpp; same semantics, DEVICE buffers).
#pragma once

#include "llaisys.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace llaisys::ops::nvidia {

// out [rows, n] = softmax of each row of in [rows, n] (max-subtracted, f32); out may alias in.
void softmax(std::byte *out, const std::byte *in, llaisysDataType_t dtype, size_t rows, size_t n,
             cudaStream_t stream);

}  // namespace llaisys::ops::nvidia
