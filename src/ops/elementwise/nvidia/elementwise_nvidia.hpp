// CUDA launcher of the elementwise binary ops (see /src/ops/elementwise/cpu/elementwise_cpu.hpp).
#pragma once

#include "../cpu/elementwise_cpu.hpp"
#include "llaisys.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace llaisys::ops::nvidia {

// out[i] = a[i] (op) b[i] for i < n (DEVICE buffers of `dtype`), computed in f32 and rounded
// to the dtype; out may alias a or b. Asynchronous on `stream`.
void binary(cpu::BinaryOp op, std::byte *out, const std::byte *a, const std::byte *b, llaisysDataType_t dtype,
            size_t n, cudaStream_t stream);

}  // namespace llaisys::ops::nvidia
