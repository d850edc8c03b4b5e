// CUDA launcher of the GGUF block dequantization (bit-identical to ../dequant.hpp's
// dequantize_rows), for the dequantize op, the tied embedding lookup of a quantized lm_head and
// the panels of the quantized linear's prefill path (ops/linear/nvidia/quant_linear_nvidia.cu).
#pragma once

#include "llaisys.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace llaisys::quant::nvidia {

// out [rows, k] of float dtype odt (f32, f16 or bf16: each value rounded once from its f32
// value) = rows of table [*, k / block] blocks of quantized dtype qdt: row i of out is table
// row ids[i] when ids (DEVICE, int64 [rows], each in range: the caller checks) is not null,
// else table row row0 + i. DEVICE buffers; asynchronous on `stream`; nothing for rows == 0.
// Throws UNSUPPORTED for a qdt that is not block-quantized or an odt that is not a float
// dtype, SHAPE_MISMATCH when k is not a multiple of the block size.
void dequantize_rows(void *out, llaisysDataType_t odt, const void *table, llaisysDataType_t qdt, size_t rows,
                     size_t k, const int64_t *ids, size_t row0, cudaStream_t stream);

}  // namespace llaisys::quant::nvidia
