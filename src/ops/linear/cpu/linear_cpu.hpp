#pragma once

#include "llaisys.h"
#include "packed.hpp"

#include <cstddef>
#include <cstdint>

namespace llaisys::ops::cpu {

// out [m, n] = in [m, k] @ weight [n, k]^T + bias [n] (bias may be null), f32 accumulation.
// Activations (in, out) are of dtype `act`; weight and bias of dtype `wdt` (they may differ:
// the model runs f32 activations over bf16 weights).
void linear(std::byte *out, const std::byte *in, llaisysDataType_t act, const std::byte *weight,
            const std::byte *bias, llaisysDataType_t wdt, size_t m, size_t n, size_t k);

// out [m, n] = x [m, k] @ W^T + bias [n] (or null; dtype w.dtype()), W packed (packed.hpp),
// f32 activations, f32 accumulation. Runs the kernel of the ISA the weight was packed for
// (a scalar loop over the panels when that is Isa::Scalar).
void linear_packed(float *out, const float *x, const PackedWeight &w, const std::byte *bias, size_t m);
// linear_packed for the panels sel [n_sel] of w only (ascending, each < w.n_panels()): the
// columns [p * nr, p * nr + nr) of out for each listed p, every value bit for bit what
// linear_packed gives it; the other columns of out are left as they were.
void linear_packed_panels(float *out, const float *x, const PackedWeight &w, const std::byte *bias, size_t m,
                          const uint32_t *sel, size_t n_sel);

}  // namespace llaisys::ops::cpu
