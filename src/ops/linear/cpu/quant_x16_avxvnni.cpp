// AVX-VNNI build of quant_x16_256.inc (the VEX vpdpbusd on 256-bit vectors; compile flags in
// CMakeLists.txt). Called only where cpu_has_avx_vnni() and not cpu_has_avx512_vnni().
#define LLAISYS_X16_NS quant_avxvnni
#include "quant_x16_256.inc"
