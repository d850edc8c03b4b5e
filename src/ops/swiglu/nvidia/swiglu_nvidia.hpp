// CUDA launcher of SwiGLU (see /src/ops/swiglu/cpu/swiglu_cpu.hpp; same semantics, DEVICE buffers).
#pragma once

#include "llaisys.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace llaisys::ops::nvidia {

// out[r, i] = up[r, i] * silu(gate[r, i]) for r < rows, i < cols; gate/up rows are
// `in_stride` elements apart, out rows `out_stride` apart.
void swiglu(std::byte *out, const std::byte *gate, const std::byte *up, llaisysDataType_t dtype, size_t rows,
            size_t cols, size_t in_stride, size_t out_stride, cudaStream_t stream);

// swiglu of f32 rows (out f32), the outputs also written in the int8 GEMV's activation format
// (the bits of swiglu, then quantize_act: quant_linear_nvidia.hpp): q [rows, cols] int8, q_d
// [rows, cols / 32] f32. cols must be a multiple of 32 (INVALID_ARGUMENT otherwise).
void swiglu_quant(float *out, int8_t *q, float *q_d, const float *gate, const float *up, size_t rows, size_t cols,
                  size_t in_stride, size_t out_stride, cudaStream_t stream);

}  // namespace llaisys::ops::nvidia
