#pragma once

#include "llaisys.h"

#include <cstddef>
#include <cstdint>

namespace llaisys::ops::cpu {

// out [n, d] (dtype `odt`) = rows index[n] of weight [vocab, d] (dtype `wdt`), converted; a
// block-quantized `wdt` holds each row as row_bytes(wdt, d) bytes, dequantized here.
// Throws OUT_OF_RANGE (before writing) if an index is outside [0, vocab).
void embedding(std::byte *out, llaisysDataType_t odt, const int64_t *index, const std::byte *weight,
               llaisysDataType_t wdt, size_t n, size_t vocab, size_t d);

}  // namespace llaisys::ops::cpu
