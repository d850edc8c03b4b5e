// AVX-512 VNNI + GFNI build of quant_x16_avx512.inc (compile flags in CMakeLists.txt). Called
// only where cpu_has_avx512_vnni() and cpu_has_gfni().
#define LLAISYS_X16_NS quant_avx512_gfni
#include "quant_x16_avx512.inc"
