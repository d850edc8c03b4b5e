// AVX2 build of quant_x16_256.inc (vpmaddubsw + vpmaddwd; compile flags in CMakeLists.txt).
#define LLAISYS_X16_NS quant_avx2
#include "quant_x16_256.inc"
