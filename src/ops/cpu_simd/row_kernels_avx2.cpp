// AVX2 + FMA build (flags in CMakeLists.txt).
#define LLAISYS_SIMD_NS avx2
#include "row_kernels.inc"
