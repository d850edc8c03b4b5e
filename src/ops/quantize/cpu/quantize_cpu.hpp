#pragma once

#include "llaisys.h"

#include <cstddef>

namespace llaisys::ops::cpu {

// out [rows, k] of float dtype odt = in: rows rows of k / block elements blocks of quantized dtype qdt.
void dequantize(std::byte *out, llaisysDataType_t odt, const std::byte *in, llaisysDataType_t qdt, size_t rows,
                size_t k);

// out: rows rows of blocks of quantized dtype qdt = in [rows, k] of float dtype idt quantized.
// Throws INVALID_ARGUMENT (before writing) if in holds a NaN or Inf.
void quantize(std::byte *out, llaisysDataType_t qdt, const std::byte *in, llaisysDataType_t idt, size_t rows,
              size_t k);

}  // namespace llaisys::ops::cpu
