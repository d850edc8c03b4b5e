// Overflow-checked size arithmetic. Every size a caller chose (a byte count, a shape, a model
// or KV cache dimension) that is multiplied, added or rounded up goes through these: a result
// past SIZE_MAX throws Error(status) naming `what`, instead of wrapping to a small number that
// would then be allocated and overrun. Sizes derived from memory that already exists (the
// rows of an allocated tensor, say) cannot wrap and use plain arithmetic.
#pragma once

#include "error.hpp"

#include <cstddef>
#include <cstdint>

namespace llaisys {

// a * b.
inline size_t checked_mul(size_t a, size_t b, const char *what,
                          llaisysStatus_t status = LLAISYS_STATUS_INVALID_ARGUMENT) {
    size_t r;
    if (__builtin_mul_overflow(a, b, &r)) fail(status, what, " overflows size_t (", a, " * ", b, ")");
    return r;
}

// a + b.
inline size_t checked_add(size_t a, size_t b, const char *what,
                          llaisysStatus_t status = LLAISYS_STATUS_INVALID_ARGUMENT) {
    size_t r;
    if (__builtin_add_overflow(a, b, &r)) fail(status, what, " overflows size_t (", a, " + ", b, ")");
    return r;
}

// n rounded up to a multiple of m (m > 0).
inline size_t checked_round_up(size_t n, size_t m, const char *what,
                               llaisysStatus_t status = LLAISYS_STATUS_INVALID_ARGUMENT) {
    const size_t rem = n % m;
    return rem == 0 ? n : checked_add(n, m - rem, what, status);
}

// ceil(n / m) for m > 0; cannot overflow.
constexpr size_t ceil_div(size_t n, size_t m) { return n / m + (n % m != 0); }

}  // namespace llaisys
