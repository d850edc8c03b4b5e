// SIMD GEMM entry points (one per instruction set); linear_cpu.cpp picks one at run time.
#pragma once

#include <cstddef>

namespace llaisys::ops::cpu {
namespace avx2 {
void linear_f32(float *out, const float *x, const void *w, const void *bias, int wdt, size_t m, size_t n, size_t k);
}
namespace avx512 {
void linear_f32(float *out, const float *x, const void *w, const void *bias, int wdt, size_t m, size_t n, size_t k);
}
}  // namespace llaisys::ops::cpu
