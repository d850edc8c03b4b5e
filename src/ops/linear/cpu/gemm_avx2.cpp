// AVX2 + FMA + F16C build of gemm_kernel.inc, gemm_packed_kernel.inc and screen_kernel.inc (compile flags set in CMakeLists.txt).
#define LLAISYS_GEMM_NS avx2
#include "gemm_kernel.inc"
#include "gemm_packed_kernel.inc"
#include "screen_kernel.inc"
