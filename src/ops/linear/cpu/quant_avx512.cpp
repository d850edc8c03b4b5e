// AVX-512 VNNI build of quant_dot.inc: vpdpbusd for the plain u8 x s8 sums (AVX512VL forms on
// 256-bit vectors; compile flags set in CMakeLists.txt). Called only where cpu_has_avx512_vnni().
#define LLAISYS_QUANT_NS quant_avx512
#include "quant_dot.inc"
