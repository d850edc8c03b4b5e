// CUDA launcher of the embedding lookup (see /src/ops/embedding/cpu/embedding_cpu.hpp).
#pragma once

#include "llaisys.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace llaisys::ops::nvidia {

// out [n, d] (odt) = rows index[n] of weight [vocab, d] (wdt), converted; DEVICE buffers.
// An index outside [0, vocab) writes a zero row (the op layer / model validates indices on
// the host before launching). Asynchronous on `stream`.
void embedding(std::byte *out, llaisysDataType_t odt, const int64_t *index, const std::byte *weight,
               llaisysDataType_t wdt, size_t n, size_t vocab, size_t d, cudaStream_t stream);

}  // namespace llaisys::ops::nvidia
