// Baseline build (no -m flags: SSE2 on x86-64): the LLAISYS_ISA=scalar path.
#define LLAISYS_SIMD_NS scalar
#include "row_kernels.inc"
