// AVX-512 build (flags in CMakeLists.txt).
#define LLAISYS_SIMD_NS avx512
#include "row_kernels.inc"
